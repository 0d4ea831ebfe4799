"""dpcore.auditing under a memory budget: the batch chosen, the refusal.

A chunk of trials whose compiled program (XLA's own count of its
buffers, ``memory_analysis``) and host-side statistics exceed the budget
is drawn in smaller vmapped batches of the same keys; one that does not
fit even one trial at a time is refused in one line before any run.
"""

import inspect
import tracemalloc
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import auditing, memory, noise


def _gaussian(key, count):
  return count + noise.gaussian_noise(key, (), stddev=1.0)


def _pca_like(key, data):
  # An eigendecomposition of a noisy 3 x 3 matrix: a custom call (LAPACK)
  # and a few intermediates per trial.
  m = data + noise.gaussian_noise(key, (3, 3), stddev=1.0)
  w, v = jnp.linalg.eigh(m + m.T)
  return jnp.sum(w * v[0] ** 2)


def _identity(out):
  return out


def _fake(nbytes):
  """A stand-in for a compiled program whose XLA count is ``nbytes``."""
  stats = SimpleNamespace(argument_size_in_bytes=nbytes,
                          output_size_in_bytes=0, temp_size_in_bytes=0,
                          generated_code_size_in_bytes=0,
                          alias_size_in_bytes=0)
  return SimpleNamespace(memory_analysis=lambda: stats, nbytes=nbytes)


def test_fit_batch_takes_the_largest_batch_that_fits():
  # 1,000 bytes fixed + 10 per unit: a budget of 5,000 (with 500 held on
  # the host) fits 350 units, not 351.
  compiled = []

  def compile_at(batch):
    compiled.append(batch)
    return _fake(1_000 + 10 * batch)

  program, batch, need = auditing.fit_batch(
      1_000, compile_at, budget=5_000, host_bytes=500, what="the units",
      fix="--memory_budget")
  assert (batch, need, program.nbytes) == (350, 5_000, 4_500)
  assert compiled == [1_000, 1, 350]  # whole, one, then the choice
  # Everything at once when it fits (one compilation, as without budget).
  compiled.clear()
  _, batch, need = auditing.fit_batch(1_000, compile_at, budget=11_000,
                                      what="the units", fix="x")
  assert (batch, need, compiled) == (1_000, 11_000, [1_000])
  # No budget: the whole chunk, its bytes reported.
  assert auditing.fit_batch(1_000, compile_at, budget=None, what="u",
                            fix="x")[1:] == (1_000, 11_000)


def test_fit_batch_shrinks_when_the_program_is_above_the_line():
  # The affine estimate from 1 and 1,000 units is below the real bytes in
  # between (a convex program): the chosen batch is checked, and shrunk
  # until its own compilation fits.
  def compile_at(batch):
    return _fake(1_000 + 10 * batch + (batch * (1_000 - batch)) // 10)

  _, batch, need = auditing.fit_batch(1_000, compile_at, budget=5_000,
                                      what="the units", fix="x")
  assert need <= 5_000 and batch < 350
  assert 1_000 + 10 * (batch + 1) + ((batch + 1) * (999 - batch)) // 10 > (
      5_000 * 0.9)


def test_fit_batch_refuses_in_one_line():
  with pytest.raises(memory.MemoryBudgetError) as err:
    auditing.fit_batch(1_000, lambda b: _fake(1_000 + 10 * b),
                       budget=4_000, host_bytes=3_500, what="the units",
                       fix="the memory budget (--memory_budget)")
  message = str(err.value)
  assert "\n" not in message
  assert message.startswith("the units need an estimated")
  assert "memory budget of" in message and "--memory_budget" in message


@pytest.mark.slow
def test_batches_draw_the_same_trials_as_whole_chunks():
  key, data = jax.random.key(3), jnp.float32(0.0)
  kwargs = dict(statistic=_identity, trials=5_001, chunk=1_000)
  whole = auditing.sample_statistic(key, _gaussian, data, **kwargs)
  # A budget between one trial's program and the chunk's.
  plan = auditing._plan(key, _gaussian, data, memory_budget=None,
                        host_bytes=0, **kwargs)
  size = plan.size
  full = auditing.compiled_bytes(plan.run.lower(
      key, np.uint32(0), data).compile())
  budget = auditing._SAMPLE_HOST_BYTES_PER_TRIAL * 5_001 + full // 2
  small = auditing._plan(key, _gaussian, data, memory_budget=budget,
                         host_bytes=auditing._SAMPLE_HOST_BYTES_PER_TRIAL
                         * 5_001, **kwargs)
  assert 1 <= small.batch < size and small.estimate <= budget
  batched = auditing.sample_statistic(key, _gaussian, data,
                                      memory_budget=budget, **kwargs)
  np.testing.assert_array_equal(batched, whole)  # bitwise
  assert len(np.unique(whole)) == whole.size


def test_the_library_default_is_no_memory_limit():
  # "auto" reads the memory available at the call: a default that made a
  # library call depend on how busy the machine is. Launch scripts pass
  # their budget explicitly.
  for fn in (auditing.audit, auditing.sample_statistic):
    assert inspect.signature(fn).parameters["memory_budget"].default is None


@pytest.mark.slow
def test_audit_under_a_budget_gives_the_same_bound():
  key = jax.random.key(0)
  data_0 = jnp.zeros((3, 3), jnp.float32)
  data_1 = data_0.at[0, 0].set(1.0)
  kwargs = dict(statistic=_identity, delta=1e-2, trials=4_000, chunk=2_000)
  free = auditing.audit(key, _pca_like, data_0, data_1, memory_budget=None,
                        **kwargs)
  roomy = auditing.audit(key, _pca_like, data_0, data_1,
                         memory_budget=2**34, **kwargs)
  default = auditing.audit(key, _pca_like, data_0, data_1, **kwargs)
  automatic = auditing.audit(key, _pca_like, data_0, data_1,
                             memory_budget=memory.AUTO, **kwargs)
  assert free.batch is None and free.memory_estimate is None
  # The library's default is no check (None), whatever the machine holds.
  assert default.batch is None and default.memory_estimate is None
  assert default.epsilon_lower == free.epsilon_lower
  # "auto", asked for, is 3/4 of the memory available: this one fits.
  assert automatic.batch is None and automatic.memory_estimate == (
      roomy.memory_estimate)
  assert roomy.batch is None and roomy.memory_estimate > (
      auditing.HOST_BYTES_PER_TRIAL * 4_000)
  tight = auditing.audit(key, _pca_like, data_0, data_1,
                         memory_budget=auditing.HOST_BYTES_PER_TRIAL * 4_000
                         + (roomy.memory_estimate
                            - auditing.HOST_BYTES_PER_TRIAL * 4_000) // 4,
                         **kwargs)
  assert tight.batch is not None and tight.batch < 2_000
  for field in ("epsilon_lower", "threshold", "false_positive",
                "false_negative"):
    assert getattr(tight, field) == getattr(free, field), field


def test_a_budget_below_one_trial_is_refused_before_any_run():
  calls = []

  def counting(key, count):
    jax.debug.callback(lambda: calls.append(1))
    return _gaussian(key, count)

  with pytest.raises(memory.MemoryBudgetError,
                     match=r"^the audit's trials \(2,000 per side\) need an "
                           r"estimated .* [KMG]iB even one at a time, above "
                           r"the memory budget .*--memory_budget.*--trials"):
    auditing.audit(jax.random.key(0), counting, jnp.float32(0.0),
                   jnp.float32(1.0), statistic=_identity, delta=0.0,
                   trials=2_000, chunk=1_000, memory_budget=100_000)
  assert not calls  # compiled, never run
  for bad in (0, -5, 2.5, "all", True):
    with pytest.raises(ValueError, match="memory_budget must be 'auto'"):
      auditing.sample_statistic(jax.random.key(0), _gaussian,
                                jnp.float32(0.0), statistic=_identity,
                                trials=10, memory_budget=bad)


@pytest.mark.parametrize("mechanism, data", [
    (_gaussian, jnp.float32(0.0)), (_pca_like, jnp.zeros((3, 3)))])
@pytest.mark.slow
def test_the_affine_estimate_is_above_xla_in_between(mechanism, data):
  # The batch is chosen from the programs for 1 and for the whole chunk;
  # the programs in between must not be above the line through them.
  key, size = jax.random.key(0), 4_096

  def bytes_at(batch):
    runner = auditing._batch_runner(mechanism, _identity, size, batch)
    return auditing.compiled_bytes(runner.lower(
        key, np.uint32(0), np.int32(0), data).compile())

  one, whole = bytes_at(1), bytes_at(size)
  if one is None:
    pytest.skip("this backend gives no memory analysis")
  per = (whole - one) / (size - 1)
  for batch in (64, 1_000):
    assert bytes_at(batch) <= one + per * (batch - 1) * 1.05, batch
  assert per >= 8  # the count grows with the batch: a key per trial at least


def test_host_bytes_per_trial_bound_the_audits_own_arrays():
  # tracemalloc sees NumPy's allocations (the statistics, their sorted
  # copies and thresholds), not XLA's buffers; at 400,000 trials per side
  # they come to about 50 bytes per trial.
  trials = 400_000
  kwargs = dict(statistic=_identity, delta=0.0, trials=trials,
                chunk=100_000)
  args = (jax.random.key(0), _gaussian, jnp.float32(0.0), jnp.float32(1.0))
  auditing.audit(*args, **kwargs)  # compiled
  tracemalloc.start()
  try:
    auditing.audit(*args, **kwargs)
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  assert 0.5 * auditing.HOST_BYTES_PER_TRIAL * trials < peak
  assert peak <= auditing.HOST_BYTES_PER_TRIAL * trials
