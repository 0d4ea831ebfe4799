r"""Benchmark: draws per second of the exact samplers of ``dpcore.discrete``.

For each case (the float ``dpcore.noise.gaussian_noise`` as a reference,
``bernoulli_exp``, ``discrete_laplace`` at two scales and
``discrete_gaussian`` at three σ), ``--discrete_draws`` draws in one
jitted call: compiled on a first call, the second call timed. These are
the figures of the draws/s column in ``dpcore.discrete``'s docstring and
in docs/exact_noise.md. One JSON record per case, whose ``"privacy"``
claims no guarantee (nothing is released)::

  python -m launch.bench.discrete --discrete_draws=100000
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
from absl import flags

from dpcore import accounting, discrete, noise
from launch import common

_DRAWS = flags.DEFINE_integer("discrete_draws", 100_000,
                              "Draws per timed call.")
_SEED = flags.DEFINE_integer("discrete_seed", 0, "Seed of the keys.")
_OUT = flags.DEFINE_string("discrete_out", "runs/bench_discrete.jsonl",
                           "JSON lines.")

TIMING_ONLY = "timing benchmark: noise draws, nothing released"


def cases(num: int) -> list[tuple[str, Callable[[jax.Array], jax.Array]]]:
  """``(name, fn of the key)`` for each timed sampler, ``num`` draws each."""
  shape = (num,)
  return [
      ("noise.gaussian_noise (float, reference)",
       lambda k: noise.gaussian_noise(k, shape, stddev=3.0)),
      ("bernoulli_exp n/d = 3/2",
       lambda k: discrete.bernoulli_exp(k, shape, numerator=3,
                                        denominator=2)),
      ("discrete_laplace t = 2",
       lambda k: discrete.discrete_laplace(k, shape, scale=2)),
      ("discrete_laplace t = 100",
       lambda k: discrete.discrete_laplace(k, shape, scale=100)),
      ("discrete_gaussian σ = 3",
       lambda k: discrete.discrete_gaussian(k, shape, sigma=3)),
      ("discrete_gaussian σ = 26",
       lambda k: discrete.discrete_gaussian(k, shape, sigma=26)),
      ("discrete_gaussian σ = 1049",
       lambda k: discrete.discrete_gaussian(k, shape, sigma=1049)),
  ]


def draws_per_second(key: jax.Array, num: int = 100_000) -> list[dict]:
  """Times every case of :func:`cases`: compiled first, second call timed.

  Args:
    key: PRNG key; the compiling call uses ``fold_in(key, 0)``, the timed
      one ``fold_in(key, 1)``.
    num: draws per call (≥ 1).

  Returns:
    One dict per case: ``case``, ``draws``, ``seconds``,
    ``draws_per_second`` and ``compile_seconds``.

  Raises:
    ValueError: ``num`` is not an integer ≥ 1.
  """
  if isinstance(num, bool) or not isinstance(num, int) or num < 1:
    raise ValueError(f"num (--discrete_draws) must be an integer ≥ 1, got "
                     f"{num!r}.")
  out = []
  for name, fn in cases(num):
    f = jax.jit(fn)
    start = time.perf_counter()
    f(jax.random.fold_in(key, 0)).block_until_ready()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    f(jax.random.fold_in(key, 1)).block_until_ready()
    secs = time.perf_counter() - start
    out.append({"case": name, "draws": num, "seconds": secs,
                "draws_per_second": num / secs,
                "compile_seconds": compile_s})
  return out


def main(argv):
  del argv
  if _DRAWS.value < 1:
    raise ValueError(f"--discrete_draws must be ≥ 1, got {_DRAWS.value}.")
  common.check_output_path(_OUT.value, "--discrete_out")
  for row in draws_per_second(jax.random.key(_SEED.value), _DRAWS.value):
    common.emit_record({
        **row, "platform": jax.default_backend(),
        "device": str(jax.devices()[0]), "seed": _SEED.value,
        "privacy": accounting.no_guarantee_record(TIMING_ONLY),
    }, _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
