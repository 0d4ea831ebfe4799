r"""Benchmark: JAX's float32 samplers against the tail-safe dpcore samplers.

Times, jitted and compiled first, for each shape:

* ``jax_normal``: ``jax.random.normal(key, shape, float32)`` (reaches about
  5.4σ) against ``dpcore_gaussian``: ``dpcore.noise.gaussian_noise``
  (reaches 12.9σ, cut-off ≤ 2⁻¹²³ per draw);
* ``jax_laplace`` against ``dpcore_laplace`` for the first shape;
* for dim 784, ``symmetric``: ``dpcore.noise.symmetric_gaussian_noise``
  (the DP-PCA noise matrix) against ``jax_symmetric``, the same
  construction on ``jax.random.normal``;
* ``dpsgd_step``: one DP-SGD step of full-rank GMLVQ on MNIST-sized inputs
  (batch 140, d = 784, 10 prototypes: 615k noised parameters; ghost
  clipping, ``launch.bench.lvq``), with the library's sampler against
  ``dpsgd_step_jax_normal``, the same step with ``jax.random.normal`` noise.

The paths are timed round-robin (so load from other processes hits all
alike) and the median of ``--repeats`` calls is reported, with its ratio to
the JAX baseline; wall time and process CPU time are both recorded (the CPU
time is less sensitive to a shared machine). One JSON record per path,
whose ``"privacy"`` claims no guarantee (nothing is released)::

  python -m launch.bench.noise --noise_repeats=30
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from dpcore import accounting, noise
from launch import common
from launch.bench import lvq as bench_lvq

# Named apart from launch.bench.lvq's flags, which are defined on import.
_REPEATS = flags.DEFINE_integer("noise_repeats", 30, "Timed calls per path.")
_SEED = flags.DEFINE_integer("noise_seed", 0, "Seed of the keys.")
_OUT = flags.DEFINE_string("noise_out", "results/bench_noise.jsonl",
                           "JSON lines.")

SHAPES = ((784 * 784,), (5, 784, 784), (615_000,))
TIMING_ONLY = "timing benchmark: noise draws, nothing released"


def _jax_gaussian(key, shape, *, stddev, dtype=jnp.float32):
  """The sampler this library used before (float32 jax.random.normal)."""
  return jnp.asarray(stddev, dtype) * jax.random.normal(key, shape, dtype)


@contextlib.contextmanager
def _jax_normal_noise():
  """Traces the library with the old sampler in place of the new one."""
  saved = noise.gaussian_noise
  noise.gaussian_noise = _jax_gaussian
  try:
    yield
  finally:
    noise.gaussian_noise = saved


def _jax_symmetric(key, dim):
  full = jax.random.normal(key, (dim, dim), jnp.float32)
  return jnp.triu(full) + jnp.triu(full, k=1).T


def _paths(key):
  """(group, path, baseline path, jitted fn of the key)."""
  paths = []
  for shape in SHAPES:
    group = "x".join(map(str, shape))
    paths.append((group, "jax_normal", "jax_normal", jax.jit(
        lambda k, s=shape: jax.random.normal(k, s, jnp.float32))))
    paths.append((group, "dpcore_gaussian", "jax_normal", jax.jit(
        lambda k, s=shape: noise.gaussian_noise(k, s, stddev=1.0))))
  group = "x".join(map(str, SHAPES[0]))
  paths.append((group, "jax_laplace", "jax_laplace", jax.jit(
      lambda k: jax.random.laplace(k, SHAPES[0], jnp.float32))))
  paths.append((group, "dpcore_laplace", "jax_laplace", jax.jit(
      lambda k: noise.laplace_noise(k, SHAPES[0], scale=1.0))))
  paths.append(("sym784", "jax_symmetric", "jax_symmetric", jax.jit(
      lambda k: _jax_symmetric(k, 784))))
  paths.append(("sym784", "symmetric", "jax_symmetric", jax.jit(
      lambda k: noise.symmetric_gaussian_noise(k, 784, stddev=1.0))))
  # One DP-SGD step (GMLVQ, ghost clipping), traced once with each sampler.
  for path, ctx in (("dpsgd_step_jax_normal", _jax_normal_noise()),
                    ("dpsgd_step", contextlib.nullcontext())):
    with ctx:
      params, steps = bench_lvq.make_steps(
          key, batch=140, dim=784, classes=10, model="gmlvq")
      fn, state = steps["dp_ghost"]
      common.block(fn(params, state))  # compile under the chosen sampler
    paths.append(("gmlvq_dp_ghost", path, "dpsgd_step_jax_normal",
                  lambda k, fn=fn, params=params, state=state:
                  fn(params, state)))
  return paths


def main(argv):
  del argv
  key = jax.random.key(_SEED.value)
  paths = _paths(key)
  compile_s, wall, cpu = common.round_robin(
      {(group, path): lambda r, fn=fn: fn(
          key if r is None else jax.random.fold_in(key, r))
       for group, path, _, fn in paths}, repeats=_REPEATS.value)
  for group, path, base, _ in paths:
    secs = float(np.median(wall[group, path]))
    cpu_secs = float(np.median(cpu[group, path]))
    record = {
        "group": group, "path": path, "seconds": secs,
        "cpu_seconds": cpu_secs,
        "ratio_to_baseline": secs / float(np.median(wall[group, base])),
        "cpu_ratio_to_baseline": cpu_secs / float(
            np.median(cpu[group, base])),
        "baseline": base, "compile_seconds": compile_s[group, path],
        "repeats": _REPEATS.value, "platform": jax.default_backend(),
        "device": str(jax.devices()[0]), "seed": _SEED.value,
        "threefry_partitionable": bool(jax.config.jax_threefry_partitionable),
        "privacy": accounting.no_guarantee_record(TIMING_ONLY),
    }
    common.emit_record(record, _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
