"""Scratch memory of feddpdr.train grows with the chunk, not with P.

XLA's own accounting of a compiled program
(``compiled.memory_analysis().temp_size_in_bytes``: the buffers it
allocates besides the arguments and outputs) is a deterministic function
of the program, independent of the machine's load, and available on the
CPU. The test compiles :func:`federated.feddpdr.train` for P = 1,000 and
P = 10,000 participants of a small problem and compares.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import memory
from federated import feddpdr

D, N_MAX, K, CLASSES, SEEDS = 16, 8, 2, 3, 1
SMALL, LARGE = 1_000, 10_000
CHUNK = 100
F = CLASSES  # one-vs-rest fits per participant (K > 2 classes)


def _per_participant_bytes() -> int:
  """What one participant's own arrays take, inputs and outputs.

  Inputs (:func:`feddpdr.train_arguments`): x (n_max, d) float32, labels
  (n_max,) int32, mask (n_max,) float32, σ float32, n, p, θ float64.
  Outputs per seed (:class:`feddpdr.TrainOutput`): the basis (d, k)
  float32, F models (F, k) float64, F gradient norms float64, F iteration
  counts int32, F convergence flags bool.
  """
  inputs = N_MAX * D * 4 + N_MAX * 4 + N_MAX * 4 + 4 + 3 * 8
  outputs = D * K * 4 + F * K * 8 + F * 8 + F * 4 + F * 1
  return inputs + SEEDS * outputs


def _compiled_memory(count: int, chunk, *, mechanism="feddpdr", n_max=N_MAX,
                     d=D, k=K, classes=CLASSES, seeds=SEEDS):
  """XLA's memory analysis of feddpdr.train compiled for these shapes."""
  config = feddpdr.Config(mechanism=mechanism, k=k, epsilon=1.0)
  with jax.enable_x64(True):
    keys = jax.random.split(jax.random.key(0), seeds)
    shapes = (
        feddpdr.Rows(
            jax.ShapeDtypeStruct((count, n_max, d), jnp.float32),
            jax.ShapeDtypeStruct((count, n_max), jnp.int32),
            jax.ShapeDtypeStruct((count, n_max), jnp.float32)),
        feddpdr.Traced(
            jax.ShapeDtypeStruct((count,), jnp.float32),
            *(jax.ShapeDtypeStruct((count,), jnp.float64),) * 4))
    train = jax.jit(lambda *a: feddpdr.train(
        *a, config=config, num_classes=classes, chunk=chunk))
    stats = train.lower(keys, *shapes).compile().memory_analysis()
  if stats is None:
    pytest.skip("this backend gives no memory analysis")
  return stats


@pytest.mark.slow
def test_scratch_is_bounded_by_the_chunk_not_by_the_participants():
  per = _per_participant_bytes()
  small = _compiled_memory(SMALL, CHUNK)
  large = _compiled_memory(LARGE, CHUNK)
  # The shapes' arithmetic is the program's: arguments and outputs grow by
  # exactly what the participants' own arrays take.
  assert (large.argument_size_in_bytes + large.output_size_in_bytes
          - small.argument_size_in_bytes - small.output_size_in_bytes
          ) == pytest.approx((LARGE - SMALL) * per, rel=0.01)
  # The bound: at most one more copy of the participants' own data and
  # outputs (e.g. the (N, d, k) bases staged for the server's sums); every
  # per-participant intermediate (DP-PCA's d × d matrices and their
  # decompositions, the noise, the projected rows, the fits' state) is
  # held for CHUNK participants only.
  bound = small.temp_size_in_bytes + (LARGE - SMALL) * per
  assert large.temp_size_in_bytes <= bound, (
      large.temp_size_in_bytes, small.temp_size_in_bytes, per)
  # Without a chunk the same program holds those intermediates for all
  # participants at once, and the same bound fails: the test can fail.
  whole_small = _compiled_memory(SMALL, None)
  whole_large = _compiled_memory(LARGE, None)
  growth = whole_large.temp_size_in_bytes - whole_small.temp_size_in_bytes
  assert growth > 3 * (LARGE - SMALL) * per, (growth, per)
  assert whole_large.temp_size_in_bytes > 5 * large.temp_size_in_bytes
  np.testing.assert_array_less(0, [small.temp_size_in_bytes,
                                   whole_small.temp_size_in_bytes])


CONFIG = feddpdr.Config(mechanism="feddpdr", k=20, epsilon=1.0)


def test_the_chosen_chunk_is_the_largest_that_fits():
  kw = dict(config=CONFIG, num_classes=10, seeds=3)
  whole = feddpdr.memory_estimate(1000, 60, 784, **kw)
  one = feddpdr.memory_estimate(1000, 60, 784, chunk=1, **kw)
  budget = (whole + one) // 3
  chunk, estimate = feddpdr.choose_chunk(1000, 60, 784, budget=budget, **kw)
  assert 1 <= chunk < 1000 and estimate <= budget
  assert estimate == feddpdr.memory_estimate(1000, 60, 784, chunk=chunk,
                                             **kw)
  assert feddpdr.memory_estimate(1000, 60, 784, chunk=chunk + 1,
                                 **kw) > budget
  # Everything at once when it fits; a refusal naming the figures when
  # even one participant at a time does not.
  assert feddpdr.choose_chunk(1000, 60, 784, budget=whole, **kw) == (
      None, whole)
  with pytest.raises(memory.MemoryBudgetError,
                     match=r"1000 participants .*[KMG]iB even one at a time.*"
                     r"memory_budget"):
    feddpdr.choose_chunk(1000, 60, 784, budget=one - 1, **kw)
  # The estimate grows with the chunk, the seeds and d², not with nothing.
  assert feddpdr.memory_estimate(1000, 60, 784, chunk=10, **kw) < (
      feddpdr.memory_estimate(1000, 60, 784, chunk=20, **kw))
  assert feddpdr.memory_estimate(10, 60, 392, config=CONFIG, num_classes=10
                                 ) * 3.5 < feddpdr.memory_estimate(
                                     10, 60, 784, config=CONFIG,
                                     num_classes=10)


@pytest.mark.slow
@pytest.mark.parametrize("mechanism, chunk, seeds", [
    ("feddpdr", 4, 3), ("feddpdr", None, 1), ("dpml", 4, 1)])
def test_the_estimate_is_above_xlas_own_accounting(mechanism, chunk, seeds):
  # XLA's accounting of the compiled program (arguments, outputs and
  # scratch) at a small shape: the estimate must not be below it.
  count, n, d, k, classes = 16, 60, 64, 10, 10
  stats = _compiled_memory(count, chunk, mechanism=mechanism, n_max=n, d=d,
                           k=k, classes=classes, seeds=seeds)
  config = feddpdr.Config(mechanism=mechanism, k=k, epsilon=1.0)
  xla = (stats.temp_size_in_bytes + stats.argument_size_in_bytes
         + stats.output_size_in_bytes)
  estimate = feddpdr.memory_estimate(count, n, d, config=config,
                                     num_classes=classes, seeds=seeds,
                                     chunk=chunk)
  assert xla <= estimate <= 4 * xla, (xla, estimate)


def test_one_chunk_for_several_runs_fits_them_all():
  # The baseline's program and a DPML run differ in what a participant
  # holds: the chunk chosen for both is the smaller of their own choices,
  # and a given chunk is checked against the larger estimate.
  dpml = feddpdr.Config(mechanism="dpml", k=20, epsilon=1.0)
  kw = dict(sizes=[60] * 1000, dim=784, num_classes=10, seeds=3)
  budget = 16 * 2**30  # both need a chunk: 58 and 45 GiB at once
  one = [feddpdr.choose_chunk(1000, 60, 784, config=c, num_classes=10,
                              seeds=3, budget=budget) for c in (CONFIG, dpml)]
  chunk, estimate = feddpdr.plan_chunk([CONFIG, dpml], budget=budget, **kw)
  assert one[0][0] != one[1][0]
  assert chunk == min(c for c, _ in one)
  assert estimate == max(e for _, e in one)
  # Split over two processes, each holds (and estimates) 500.
  assert feddpdr.plan_chunk([CONFIG], budget=budget, processes=2, **kw) == (
      feddpdr.choose_chunk(500, 60, 784, config=CONFIG, num_classes=10,
                           seeds=3, budget=budget))
  assert feddpdr.plan_chunk([CONFIG], budget=None, chunk=7, **kw) == (7,
                                                                      None)
  assert feddpdr.plan_chunk([CONFIG], budget=budget, chunk=10, **kw) == (
      10, feddpdr.memory_estimate(1000, 60, 784, config=CONFIG,
                                  num_classes=10, seeds=3, chunk=10))
  with pytest.raises(memory.MemoryBudgetError,
                     match=r"^participant_chunk=1000 needs .*GiB"):
    feddpdr.plan_chunk([CONFIG, dpml], budget=budget, chunk=1000, **kw)
  with pytest.raises(ValueError, match="participant_chunk"):
    feddpdr.plan_chunk([CONFIG], budget=budget, chunk=0, **kw)
