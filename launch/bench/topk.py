r"""Benchmark: batched ``eigh`` against the subspace top-k on DP-PCA matrices.

For each dimension d (64: scikit-learn's 8 × 8 digits; 784: the same
digits upsampled to 28 × 28, an MNIST-like spectrum, no download) and each
number P of participants, builds P noisy second-moment matrices as DP-PCA
does (``--topk_rows`` unit rows per participant, σ from
``mechanisms.pca.dp_pca.pca_sigma`` at ``--topk_epsilon``), and times, jitted
and compiled first, the top-k of all P matrices by

* ``eigh``: ``mechanisms.pca.dp_pca.top_k_eigenvectors`` under ``vmap``
  (today's path: a full ``eigh`` per matrix), and
* ``subspace``: ``dpcore.linalg.subspace_top_k`` under ``vmap`` (block
  subspace iteration, ``--topk_block``, ``--topk_iterations``).

The two are timed alternately (so load from other processes hits both
alike), the median of ``--topk_repeats`` calls is reported as seconds per
1,000 participants, with ``os.getloadavg()`` before and after. Utility: the
captured-variance ratio tr(UᵀCU)/tr(U*ᵀCU*) (C the noise-free matrix, U*
the exact top k of the same noisy matrix; mean and minimum over the
participants), the same difference as a fraction of what the noise-free
top k captures, and the subspace distance to U*. One JSON record per
(d, P)::

  python -m launch.bench.topk --topk_dims=64,784 --topk_participants=16,128

Nothing is released: the privacy record claims no guarantee (the ε the
noise was calibrated for is its nominal ε).
"""

from __future__ import annotations

import os
import time

import numpy as np
from absl import flags

from launch import common

_DIMS = flags.DEFINE_list("topk_dims", ["64", "784"],
                          "dimensions d (64 or 784)")
_PARTICIPANTS = flags.DEFINE_list("topk_participants", ["16", "128"],
                                  "numbers P of participants (batch sizes)")
_K = flags.DEFINE_integer("topk_k", 20, "number of components k")
_ROWS = flags.DEFINE_integer("topk_rows", 500, "rows per participant")
_EPSILON = flags.DEFINE_float("topk_epsilon", 1.0,
                              "ε the noise of each matrix is calibrated for")
_DELTA = flags.DEFINE_float("topk_delta", 1e-5, "δ of each matrix")
_BLOCK = flags.DEFINE_integer("topk_block", None,
                              "block size p (default min(d, 2k + 8))")
_ITERATIONS = flags.DEFINE_integer("topk_iterations", 16,
                                   "subspace iterations")
_REPEATS = flags.DEFINE_integer("topk_repeats", 3,
                                "timed calls per path (median)")
_SEED = flags.DEFINE_integer("topk_seed", 0, "seed of rows, noise, starts")
_OUT = flags.DEFINE_string("topk_out", "runs/bench_topk.jsonl",
                           "JSON lines output")

REASON = ("benchmark: times the top-k of DP-PCA noisy matrices; nothing is "
          "released")


def digits_rows(d: int) -> np.ndarray:
  """scikit-learn's digits as unit rows of dimension 64 or 784 (28 × 28,
  bilinear upsampling of the 8 × 8 images)."""
  from scipy import ndimage  # pylint: disable=g-import-not-at-top
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  images = load_digits().images.astype(np.float32)
  if d == 784:
    images = np.stack([ndimage.zoom(im, 3.5, order=1) for im in images])
  elif d != 64:
    raise ValueError(f"--topk_dims takes 64 or 784, got {d}.")
  rows = images.reshape(len(images), -1)
  return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def benchmark(*, d: int, participants: int, k: int, rows: int,
              epsilon: float, delta: float, block: int | None,
              iterations: int, repeats: int, seed: int) -> dict:
  """Times both paths on P noisy matrices and measures the utility."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from dpcore import accounting, linalg  # pylint: disable=g-import-not-at-top
  from mechanisms.pca import dp_pca  # pylint: disable=g-import-not-at-top

  data = digits_rows(d)
  if not 1 <= k <= d:
    raise ValueError(f"--topk_k={k} must be in [1, d={d}].")
  rng = np.random.default_rng(seed)
  x = jnp.asarray(data[rng.integers(0, len(data), (participants, rows))])
  mask = jnp.ones((participants, rows), x.dtype)
  sigma = dp_pca.pca_sigma(epsilon=epsilon, delta=delta)
  key = jax.random.key(seed)
  noise_keys = jax.random.split(jax.random.fold_in(key, 0), participants)
  start_keys = jax.random.split(jax.random.fold_in(key, 1), participants)
  noisy = jax.jit(jax.vmap(
      lambda kk, xi, mi: dp_pca.noisy_second_moment(kk, xi, mi,
                                                    sigma=sigma)))(
                                                        noise_keys, x, mask)
  clean = jax.jit(jax.vmap(dp_pca.second_moment))(x, mask)

  by_eigh = jax.jit(jax.vmap(
      lambda m: dp_pca.top_k_eigenvectors(m, k).components))
  by_subspace = jax.jit(jax.vmap(
      lambda kk, m: linalg.subspace_top_k(kk, m, k, block=block,
                                          iterations=iterations).vectors))
  paths = {"eigh": lambda: by_eigh(noisy),
           "subspace": lambda: by_subspace(start_keys, noisy)}
  load_before = os.getloadavg()
  compile_s, results = {}, {}
  for name, fn in paths.items():
    start = time.perf_counter()
    results[name] = common.block(fn())
    compile_s[name] = time.perf_counter() - start
  wall = {name: [] for name in paths}
  for _ in range(repeats):
    for name, fn in paths.items():
      start = time.perf_counter()
      common.block(fn())
      wall[name].append(time.perf_counter() - start)
  load_after = os.getloadavg()

  exact, approx = results["eigh"], results["subspace"]
  ratio = np.asarray(linalg.captured_variance_ratio(approx, exact, clean))
  best = linalg.captured_variance(
      linalg.eigh_top_k(clean, k).vectors, clean)
  gap = np.asarray((linalg.captured_variance(approx, clean)
                    - linalg.captured_variance(exact, clean)) / best)
  distance = np.asarray(linalg.subspace_distance(approx, exact))
  per_1000 = {name: float(np.median(t)) * 1000.0 / participants
              for name, t in wall.items()}
  return {
      "d": d, "k": k, "participants": participants, "rows": rows,
      "block": min(d, 2 * k + 8) if block is None else block,
      "iterations": iterations,
      "eigh_seconds_per_1000": per_1000["eigh"],
      "subspace_seconds_per_1000": per_1000["subspace"],
      "speedup": per_1000["eigh"] / per_1000["subspace"],
      "compile_seconds": compile_s,
      "captured_variance_ratio_mean": float(np.mean(ratio)),
      "captured_variance_ratio_min": float(np.min(ratio)),
      "utility_gap_of_best_max": float(np.max(np.abs(gap))),
      "subspace_distance_median": float(np.median(distance)),
      "subspace_distance_max": float(np.max(distance)),
      "settings": {"epsilon": epsilon, "delta": delta, "sigma": sigma},
      "repeats": repeats, "seed": seed,
      "loadavg_before": list(load_before), "loadavg_after": list(load_after),
      "cpu_count": os.cpu_count(), "platform": jax.default_backend(),
      "device": str(jax.devices()[0]), "jax": jax.__version__,
      "privacy": accounting.no_guarantee_record(
          REASON, nominal_epsilon=epsilon,
          nominal_note="ε of each participant's noisy matrix (not released)"),
  }


def main(argv):
  del argv
  common.check_output_path(_OUT.value, "--topk_out")
  dims = common.parse_ints(_DIMS.value, "--topk_dims", example="64,784")
  sizes = common.parse_ints(_PARTICIPANTS.value, "--topk_participants",
                            example="16,128")
  for d in dims:
    if d not in (64, 784):
      raise ValueError(f"--topk_dims takes 64 or 784, got {d}.")
  if any(p < 1 for p in sizes) or _REPEATS.value < 1 or _ROWS.value < 1:
    raise ValueError("--topk_participants, --topk_repeats and --topk_rows "
                     "must be >= 1.")
  for d in dims:
    for p in sizes:
      common.progress(f"d={d} P={p}")
      common.emit_record(benchmark(
          d=d, participants=p, k=_K.value, rows=_ROWS.value,
          epsilon=_EPSILON.value, delta=_DELTA.value, block=_BLOCK.value,
          iterations=_ITERATIONS.value, repeats=_REPEATS.value,
          seed=_SEED.value), _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
