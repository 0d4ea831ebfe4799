r"""Benchmark: draws per second of the exact samplers of ``dpcore.discrete``.

For each case (the float ``dpcore.noise.gaussian_noise`` as a reference,
``bernoulli_exp``, ``discrete_laplace`` at two scales,
``discrete_gaussian`` at three rational σ, and at two σ as a traced
:class:`dpcore.discrete.GaussianSampler`, the form the plans carry, alone
and vmapped over four keys), ``--discrete_draws`` draws in one jitted
call: compiled on a first call, the second call timed. These are the
figures of the draws/s column in ``dpcore.discrete``'s docstring and in
docs/exact_noise.md. One JSON record per case, whose ``"privacy"``
claims no guarantee (nothing is released)::

  python -m launch.bench.discrete --discrete_draws=100000
"""

from __future__ import annotations

import time
from collections.abc import Callable
from fractions import Fraction
from typing import NamedTuple

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


class Case(NamedTuple):
  """One timed sampler: its name, ``draw(key, *args)`` and the ``args``
  passed through ``jit`` (a sampler's arrays, traced)."""
  name: str
  draw: Callable[..., jax.Array]
  args: tuple = ()


def cases(num: int) -> list[Case]:
  """Every timed sampler, ``num`` draws each (in all, over the keys)."""
  shape = (num,)

  def sampled(k, s):
    return discrete.discrete_gaussian(k, shape, sigma=s)

  def four_keys(k, s):
    return jax.vmap(lambda key: discrete.discrete_gaussian(
        key, (-(-num // 4),), sigma=s))(jax.random.split(k, 4))

  # σ = 1049: the cut-off L is past the table's 2¹⁶ rows, so a rare lane
  # needs the long division; σ = 4913/16: L = 54,471, the table reaches
  # it and nothing is divided.
  wide, narrow = (discrete.gaussian_sampler(1049),
                  discrete.gaussian_sampler(Fraction(4913, 16)))
  return [
      Case("noise.gaussian_noise (float, reference)",
           lambda k: noise.gaussian_noise(k, shape, stddev=3.0)),
      Case("bernoulli_exp n/d = 3/2",
           lambda k: discrete.bernoulli_exp(k, shape, numerator=3,
                                            denominator=2)),
      Case("discrete_laplace t = 2",
           lambda k: discrete.discrete_laplace(k, shape, scale=2)),
      Case("discrete_laplace t = 100",
           lambda k: discrete.discrete_laplace(k, shape, scale=100)),
      Case("discrete_gaussian σ = 3",
           lambda k: discrete.discrete_gaussian(k, shape, sigma=3)),
      Case("discrete_gaussian σ = 26",
           lambda k: discrete.discrete_gaussian(k, shape, sigma=26)),
      Case("discrete_gaussian σ = 1049",
           lambda k: discrete.discrete_gaussian(k, shape, sigma=1049)),
      Case("discrete_gaussian σ = 1049, traced sampler", sampled, (wide,)),
      Case("discrete_gaussian σ = 1049, traced sampler, 4 keys vmapped",
           four_keys, (wide,)),
      Case("discrete_gaussian σ = 4913/16, traced sampler", sampled,
           (narrow,)),
      Case("discrete_gaussian σ = 4913/16, traced sampler, 4 keys vmapped",
           four_keys, (narrow,)),
  ]


def draws_per_second(key: jax.Array, num: int = 100_000) -> list[dict]:
  """Times every case of :func:`cases`: compiled first, second call timed.

  Args:
    key: PRNG key; the compiling call uses ``fold_in(key, 0)``, the timed
      one ``fold_in(key, 1)``.
    num: draws per call (≥ 1).

  Returns:
    One dict per case: ``case``, ``draws`` (all the keys'), ``seconds``,
    ``draws_per_second`` and ``compile_seconds``.

  Raises:
    ValueError: ``num`` is not an integer ≥ 1.
  """
  if isinstance(num, bool) or not isinstance(num, int) or num < 1:
    raise ValueError(f"num (--discrete_draws) must be an integer ≥ 1, got "
                     f"{num!r}.")
  out = []
  for case in cases(num):
    f = jax.jit(case.draw)
    start = time.perf_counter()
    f(jax.random.fold_in(key, 0), *case.args).block_until_ready()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    draws = f(jax.random.fold_in(key, 1), *case.args).block_until_ready()
    secs = time.perf_counter() - start
    out.append({"case": case.name, "draws": draws.size, "seconds": secs,
                "draws_per_second": draws.size / secs,
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
