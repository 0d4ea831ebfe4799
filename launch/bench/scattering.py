r"""Benchmark: the scattering transform of MNIST's 70,000 images.

Times :func:`mechanisms.features.scattering.transform` (J = 2, L = 8,
``--scat_chunk`` images per jitted call, compiled first) on the 60,000 +
10,000 MNIST images scaled to [0, 1], and a floor: the same FFTs — every
forward and inverse 2-D FFT the transform runs, with its shape and count
per image — done by ``scipy.fft`` (all cores) on arrays of those shapes,
for the same number of images. The ratio is transform / floor: what the
elementwise work, the moduli and the folds add to the FFTs themselves.
The load average before and after is in the record (the machine may be
shared). One JSON record::

  python -m launch.bench.scattering --scat_out=results/bench_scattering.jsonl

Nothing private is released (the record claims no guarantee).
"""

from __future__ import annotations

import os
import time

import numpy as np
from absl import flags

from launch import common

_CHUNK = flags.DEFINE_integer("scat_chunk", 1024, "images per jitted call")
_J = flags.DEFINE_integer("scat_J", 2, "scales")
_L = flags.DEFINE_integer("scat_L", 8, "orientations")
_DATA_DIR = flags.DEFINE_string("scat_data_dir", None, "MNIST's files")
_OUT = flags.DEFINE_string("scat_out", "results/bench_scattering.jsonl",
                           "JSON lines output")

TIMING_ONLY = "benchmark: times a data-independent transform"


def fft_plan(side: int, J: int, L: int) -> list[tuple[str, int, int]]:  # noqa: N803
  """(direction, grid side, planes per image) of every FFT of the transform.

  Mirrors :func:`mechanisms.features.scattering.scattering`: one forward
  FFT of the padded image; per j1 an inverse FFT of L planes at stride
  2^{j1} and their forward FFT; per (j1, j2) an inverse FFT of L² planes
  at stride 2^{j2} and a forward FFT of ⌈L²/2⌉ paired planes; the
  low-passes' inverse FFTs at stride 2^J (1, L per j1, ⌈L²/2⌉ per pair).
  """
  p = side + 2 * 2**J
  out = [("fwd", p, 1), ("inv", p // 2**J, 1)]
  for j1 in range(J):
    out += [("inv", p // 2**j1, L), ("fwd", p // 2**j1, L),
            ("inv", p // 2**J, L)]
    for j2 in range(j1 + 1, J):
      pairs = (L * L + 1) // 2
      out += [("inv", p // 2**j2, L * L), ("fwd", p // 2**j2, pairs),
              ("inv", p // 2**J, pairs)]
  return out


def fft_floor(images: int, side: int, J: int, L: int, chunk: int) -> float:  # noqa: N803
  """Seconds scipy.fft takes for the transform's FFTs on ``images``."""
  import scipy.fft  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  arrays = [(d, (rng.random((chunk, n, s, s)) + 0j).astype(np.complex64))
            for d, s, n in fft_plan(side, J, L)]
  workers = os.cpu_count()
  start = time.perf_counter()
  for _ in range(0, images, chunk):
    for d, a in arrays:
      (scipy.fft.fft2 if d == "fwd" else scipy.fft.ifft2)(
          a, workers=workers, overwrite_x=False)
  return time.perf_counter() - start


def main(argv):
  del argv
  common.check_output_path(_OUT.value, "--scat_out")
  import jax  # pylint: disable=g-import-not-at-top

  from dpcore import accounting  # pylint: disable=g-import-not-at-top
  from launch.data import loaders  # pylint: disable=g-import-not-at-top
  from mechanisms.features import scattering  # pylint: disable=g-import-not-at-top

  data = loaders.load_dataset("mnist", data_dir=_DATA_DIR.value)
  low, high = data.bounds
  x = np.concatenate([data.x_train, data.x_test])
  x = ((x - low) / (high - low)).reshape(-1, 28, 28).astype(np.float32)
  J, L, chunk = _J.value, _L.value, _CHUNK.value  # noqa: N806
  load_before = os.getloadavg()
  start = time.perf_counter()
  scattering.transform(x[:chunk], J=J, L=L, chunk=chunk)
  compile_s = time.perf_counter() - start
  start = time.perf_counter()
  out = scattering.transform(x, J=J, L=L, chunk=chunk)
  seconds = time.perf_counter() - start
  floor = fft_floor(len(x), 28, J, L, chunk)
  record = {
      "bench": "scattering", "images": len(x), "J": J, "L": L,
      "chunk": chunk, "output_shape": list(out.shape[1:]),
      "seconds": seconds, "compile_seconds": compile_s,
      "images_per_second": len(x) / seconds,
      "fft_floor_seconds": floor, "ratio_to_fft_floor": seconds / floor,
      "floor": "scipy.fft, same FFT shapes and counts, all cores",
      "load_average_before": load_before,
      "load_average_after": os.getloadavg(), "cpu_count": os.cpu_count(),
      "platform": jax.default_backend(), "device": str(jax.devices()[0]),
      "privacy": accounting.no_guarantee_record(TIMING_ONLY),
  }
  common.emit_record(record, _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
