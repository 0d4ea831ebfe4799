"""Empirical privacy auditing: a statistical lower bound on ε.

An (ε, δ)-DP mechanism M makes every test that tells M(D₀) from M(D₁)
for neighbours D₀, D₁ weak: for any rejection region, with false-positive
rate α (calling D₁ when the data was D₀) and false-negative rate β,

  1 − δ − β ≤ e^ε α   and   1 − δ − α ≤ e^ε β.

:func:`audit` runs the mechanism ``trials`` times on each side, reduces
each output to a scalar statistic and thresholds it. The threshold and
the direction of the test are chosen on the first half of the runs; the
two error rates are then estimated on the second half with one-sided
Clopper–Pearson upper bounds α⁺ and β⁺, and

  ε ≥ max(log((1 − δ − β⁺) / α⁺), log((1 − δ − α⁺) / β⁺), 0)

holds with probability at least ``confidence``. The confidence is split
by Bonferroni: each of the two upper bounds holds with probability
1 − (1 − confidence)/2, so both hold together with probability at least
``confidence`` and both forms of the bound are valid at once. Choosing
the threshold on data the intervals never see keeps them honest.

The bound is a *lower* bound on the ε of the mechanism: a bound above the
ε a library reports is evidence of a privacy bug; a bound well below it
says only that this test (neighbours and statistic) could not show more.

>>> import jax, jax.numpy as jnp
>>> def leak(key, data):  # no privacy at all: the output is the data
...   del key
...   return data
>>> r = audit(jax.random.key(0), leak, jnp.float32(0.0), jnp.float32(1.0),
...           statistic=lambda out: out, delta=1e-5, trials=10_000)
>>> r.epsilon_lower > 5.0
True

References:
  Jagielski, Ullman & Oprea, Auditing Differentially Private Machine
  Learning: How Private is Private SGD?, NeurIPS 2020.
  Nasr, Song, Thakurta, Papernot & Carlini, Adversary Instantiation: Lower
  Bounds for Differentially Private Machine Learning, IEEE S&P 2021.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
from scipy import stats

from dpcore import memory, validation

# Largest number of candidate thresholds scored on the selection half.
_MAX_CANDIDATES = 6000

# Host bytes per trial of a side that :func:`audit` holds at its peak: both
# sides' float64 statistics, a side's chunks while they are concatenated,
# and the sorted copies, candidate thresholds and masks of the test's
# choice (measured at 50 bytes with tracemalloc; see
# tests/dpcore/auditing_memory_test.py). :func:`sample_statistic` alone
# holds at most three float64 copies.
HOST_BYTES_PER_TRIAL = 64
_SAMPLE_HOST_BYTES_PER_TRIAL = 24


class AuditResult(NamedTuple):
  """What :func:`audit` found.

  Attributes:
    epsilon_lower: lower bound on ε at ``delta``, holding with the audit's
      confidence (0.0 when the runs give no evidence).
    delta: the δ the bound is for.
    threshold: the threshold chosen on the first half of the runs, on the
      statistic as given (the test says "data_1" when the statistic
      exceeds it, or, when ``false_positive`` and ``false_negative`` were
      measured with the reversed statistic, when it is below it).
    false_positive: empirical rate, on the second half, of calling
      ``data_1`` when the data was ``data_0``.
    false_negative: empirical rate, on the second half, of calling
      ``data_0`` when the data was ``data_1``.
    trials: runs of the mechanism per side.
    seconds: wall-clock time of the whole audit.
    trials_per_second: mechanism runs (both sides) per second.
    batch: runs vmapped at once when a memory budget made it smaller than
      a chunk (None: a whole chunk at once); the draws do not depend on it.
    memory_estimate: the peak bytes estimated for the audit (None: no
      memory budget given, or a backend without a memory analysis).
  """
  epsilon_lower: float
  delta: float
  threshold: float
  false_positive: float
  false_negative: float
  trials: int
  seconds: float
  trials_per_second: float
  batch: int | None = None
  memory_estimate: int | None = None


def clopper_pearson(successes, trials, *, confidence: float = 0.95):
  """Two-sided Clopper–Pearson interval for a binomial proportion.

  Args:
    successes: k, the number of successes (int or integer array).
    trials: n ≥ 1, the number of trials.
    confidence: coverage 1 − a of the interval; each end is a one-sided
      bound at level 1 − a/2.

  Returns:
    ``(lower, upper)`` as floats or float arrays: the a/2 quantile of
    Beta(k, n − k + 1) (0 when k = 0) and the 1 − a/2 quantile of
    Beta(k + 1, n − k) (1 when k = n).
  """
  k = np.asarray(successes, np.float64)
  n = np.asarray(trials, np.float64)
  if np.any(n < 1) or np.any(k < 0) or np.any(k > n):
    raise ValueError(
        f"need 0 ≤ successes ≤ trials and trials ≥ 1, got successes="
        f"{successes!r}, trials={trials!r}.")
  if not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence must be in (0, 1), got {confidence!r}.")
  tail = (1.0 - confidence) / 2.0
  with np.errstate(all="ignore"):
    lower = np.where(k > 0, stats.beta.ppf(tail, k, n - k + 1.0), 0.0)
    upper = np.where(k < n, stats.beta.ppf(1.0 - tail, k + 1.0, n - k), 1.0)
  if lower.ndim == 0:
    return float(lower), float(upper)
  return lower, upper


def clopper_pearson_upper(successes, trials, *, confidence: float):
  """One-sided Clopper–Pearson upper bound at level ``confidence``."""
  return clopper_pearson(successes, trials,
                         confidence=2.0 * confidence - 1.0)[1]


def epsilon_from_rates(false_positive, false_negative, *, delta: float):
  """max(log((1 − δ − β)/α), log((1 − δ − α)/β), 0), elementwise.

  With α, β upper bounds on the two error rates this is a lower bound on
  the ε of any (ε, δ)-DP mechanism the test was run on.
  """
  if not 0.0 <= delta < 1.0:
    raise ValueError(f"delta must be in [0, 1), got {delta!r}.")
  a = np.asarray(false_positive, np.float64)
  b = np.asarray(false_negative, np.float64)
  for name, rate in (("false_positive", a), ("false_negative", b)):
    if not np.all((rate >= 0.0) & (rate <= 1.0)):
      raise ValueError(
          f"{name} must hold rates in [0, 1], got {rate.tolist()!r:.80}.")
  with np.errstate(divide="ignore", invalid="ignore"):
    one = np.log(np.maximum(1.0 - delta - b, 0.0)) - np.log(a)
    two = np.log(np.maximum(1.0 - delta - a, 0.0)) - np.log(b)
  eps = np.nan_to_num(np.maximum(one, two), nan=0.0, neginf=0.0)
  return np.maximum(eps, 0.0)


def _candidates(s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
  """Thresholds to try: every distinct value, or a tail-heavy subset."""
  values = np.unique(np.concatenate([s0, s1]))
  m = values.size
  if m > _MAX_CANDIDATES:
    # Geometric spacing from both ends keeps the tails, where tests at
    # small δ live, finely resolved; a linear grid covers the middle.
    third = _MAX_CANDIDATES // 3
    ends = np.unique(np.round(np.geomspace(1, m, third)).astype(np.int64))
    idx = np.concatenate([ends - 1, m - ends,
                          np.linspace(0, m - 1, third).astype(np.int64)])
    values = values[np.unique(idx)]
  # The smallest value minus one lets "always call data_1" be a candidate.
  return np.concatenate([[values[0] - 1.0], values])


def _error_counts(s0_sorted, s1_sorted, thresholds):
  """Counts of s0 > t (false positives) and s1 ≤ t (false negatives)."""
  fp = s0_sorted.size - np.searchsorted(s0_sorted, thresholds, side="right")
  fn = np.searchsorted(s1_sorted, thresholds, side="right")
  return fp, fn


def _best_test(s0, s1, *, delta, confidence):
  """Picks (direction, threshold) maximising a bound on these runs.

  Each candidate is scored by the bound its counts give with the
  confidence split over all candidates (Bonferroni), a bound that holds
  for all of them at once. Scoring with the per-test confidence instead
  lets the largest of thousands of noisy tail estimates win (a winner's
  curse), and a threshold in a thin tail then shows little on the
  evaluation half.
  """
  best = (-1.0, 1.0, 0.0)
  for sign in (1.0, -1.0):
    a, b = np.sort(sign * s0), np.sort(sign * s1)
    thresholds = _candidates(a, b)
    fp, fn = _error_counts(a, b, thresholds)
    level = 1.0 - (1.0 - confidence) / (4.0 * thresholds.size)
    eps = epsilon_from_rates(
        clopper_pearson_upper(fp, a.size, confidence=level),
        clopper_pearson_upper(fn, b.size, confidence=level),
        delta=delta)
    i = int(np.argmax(eps))
    if eps[i] > best[0]:
      best = (float(eps[i]), sign, float(thresholds[i]))
  return best[1], best[2]


def _chunk_runner(mechanism: Callable, statistic: Callable, size: int):
  """jit((key, i, data) -> ``size`` statistics, keys from fold_in(key, i))."""

  @jax.jit
  def run(side_key, index, data):
    keys = jax.random.split(jax.random.fold_in(side_key, index), size)
    return jax.vmap(lambda k: statistic(mechanism(k, data)))(keys)

  return run


def _batch_runner(mechanism: Callable, statistic: Callable, size: int,
                  batch: int):
  """jit((key, i, start, data) -> ``batch`` of chunk i's statistics).

  The keys are those of :func:`_chunk_runner` (``split(fold_in(key, i),
  size)``), of which runs ``start … start + batch − 1`` are vmapped: a
  chunk drawn ``batch`` runs at a time draws the same runs.
  """

  @jax.jit
  def run(side_key, index, start, data):
    keys = jax.random.split(jax.random.fold_in(side_key, index), size)
    keys = jax.lax.dynamic_slice_in_dim(keys, start, batch)
    return jax.vmap(lambda k: statistic(mechanism(k, data)))(keys)

  return run


def compiled_bytes(compiled) -> int | None:
  """XLA's own count of a compiled program's buffers, or None if unknown.

  Arguments, outputs and scratch (``memory_analysis()``, less what the
  outputs alias): the device memory one call of the program allocates.
  """
  try:
    stats_ = compiled.memory_analysis()
  except (AttributeError, NotImplementedError, RuntimeError):
    return None
  if stats_ is None:
    return None
  return int(stats_.argument_size_in_bytes + stats_.output_size_in_bytes
             + stats_.temp_size_in_bytes
             + stats_.generated_code_size_in_bytes
             - stats_.alias_size_in_bytes)


def fit_batch(total: int, compile_at: Callable[[int], Any], *,
              budget: int | None, host_bytes: int = 0, what: str,
              fix: str) -> tuple[Any, int, int | None]:
  """The largest vmapped batch whose compiled program fits ``budget``.

  The program is compiled for all ``total`` units first (what a run
  without a budget compiles); where XLA's count of its buffers
  (:func:`compiled_bytes`) plus ``host_bytes`` exceeds the budget, it is
  compiled for one unit too, and the bytes are taken as affine in the
  batch (per-unit bytes × batch + fixed), as they are for a vmapped
  program. :func:`dpcore.memory.largest_chunk` picks the batch from that
  estimate, and the batch's own compilation is checked against the
  budget (smaller batches are tried while it exceeds it). Nothing is run.

  Args:
    total: the units of one call without a budget (trials, runs).
    compile_at: ``batch -> compiled program`` (e.g.
      ``jax.jit(f).lower(...).compile()``) mapping ``batch`` units.
    budget: bytes the run may use; None runs all ``total`` at once.
    host_bytes: bytes the caller holds beside the program, whatever the
      batch.
    what: the units, for the message (``"the audit's trials"``).
    fix: what the user can change, for the message.

  Returns:
    ``(compiled, batch, estimate)``: the program compiled for ``batch``
    units, and its bytes plus ``host_bytes`` (None where the backend
    gives no memory analysis; then ``batch`` is ``total``).

  Raises:
    dpcore.memory.MemoryBudgetError: even one unit at a time exceeds the
      budget (one line naming the estimate, the budget and ``fix``).
  """
  whole = compile_at(total)
  used = compiled_bytes(whole)
  if used is None:
    return whole, total, None
  if budget is None or host_bytes + used <= budget:
    return whole, total, host_bytes + used
  one_program = compile_at(1) if total > 1 else whole
  one = compiled_bytes(one_program)
  per = max(0.0, (used - one) / max(total - 1, 1))
  fixed = max(0.0, one - per)

  def estimate(batch: int) -> int:
    return host_bytes + int(np.ceil(fixed + per * batch))

  batch, _ = memory.largest_chunk(total, estimate, budget=budget, what=what,
                                  fix=fix)
  batch = total if batch is None else batch
  while True:
    compiled = one_program if batch == 1 else compile_at(batch)
    need = host_bytes + compiled_bytes(compiled)
    if need <= budget:
      return compiled, batch, need
    if batch == 1:
      raise memory.MemoryBudgetError(
          f"{what} need {memory.size_text(need)} even one at a time, above the "
          f"memory budget of {memory.size_text(budget)}; change {fix}.")
    batch = max(1, batch - max(1, batch // 8))


class _Plan(NamedTuple):
  """How a side's runs are drawn: chunks of ``size``, ``batch`` at once."""
  size: int
  batch: int
  run: Callable
  estimate: int | None


_FIX = "the memory budget (--memory_budget) or the trials (--trials)"


def _plan(key, mechanism: Callable, data: Any, *, statistic: Callable,
          trials: int, chunk: int, memory_budget: int | None,
          host_bytes: int) -> _Plan:
  """The chunk size and, under ``memory_budget``, the batch that fits.

  ``memory_budget``: bytes or None, already resolved by the caller
  (:func:`memory.resolve_budget`).
  """
  num_chunks = -(-trials // chunk)
  size = -(-trials // num_chunks)  # equal chunks; < num_chunks runs wasted
  full = _chunk_runner(mechanism, statistic, size)
  if memory_budget is None:
    return _Plan(size, size, full, None)
  index = np.uint32(0)

  def compile_at(batch):
    if batch == size:
      return full.lower(key, index, data).compile()
    runner = _batch_runner(mechanism, statistic, size, batch)
    return runner.lower(key, index, np.int32(0), data).compile()

  compiled, batch, estimate = fit_batch(
      size, compile_at, budget=memory_budget, host_bytes=host_bytes,
      what=f"the audit's trials ({trials:,} per side)", fix=_FIX)
  return _Plan(size, batch, compiled, estimate)


def _draw(plan: _Plan, key, data, trials: int) -> np.ndarray:
  """``trials`` statistics of one side, chunk by chunk, batch by batch."""
  parts = []
  for i in range(-(-trials // plan.size)):
    index = np.uint32(i)
    if plan.batch == plan.size:
      parts.append(np.asarray(plan.run(key, index, data), np.float64))
      continue
    wanted = min(plan.size, trials - i * plan.size)
    for start in range(0, wanted, plan.batch):
      # The last batch is moved back to stay inside the chunk; the runs it
      # repeats are dropped.
      first = min(start, plan.size - plan.batch)
      out = np.asarray(plan.run(key, index, np.int32(first), data),
                       np.float64)
      parts.append(out[start - first:])
  out = np.concatenate(parts)[:trials]
  if out.shape != (trials,):
    raise ValueError(
        f"statistic must return one scalar per run; got shape "
        f"{parts[0].shape[1:]} per run. Reduce the output to a float.")
  return out


def sample_statistic(key: jax.Array, mechanism: Callable, data: Any, *,
                     statistic: Callable, trials: int,
                     chunk: int = 100_000,
                     memory_budget: int | str | None = None
                     ) -> np.ndarray:
  """``trials`` i.i.d. draws of statistic(mechanism(k, data)), on the host.

  The runs are vmapped over keys in equal chunks of at most ``chunk`` (so
  memory stays bounded however many trials) and jitted once per chunk
  size and data shape; chunk i uses the keys ``split(fold_in(key, i),
  size)``. Under ``memory_budget`` (bytes, or ``"auto"``: 3/4 of the
  memory available, :func:`memory.resolve_budget`; None, the default: no
  check), a chunk whose compiled program and draws would not fit is drawn
  in smaller vmapped batches of the same keys (:func:`fit_batch`).

  Raises:
    ValueError: ``trials``, ``chunk`` or ``memory_budget`` is not a
      positive integer, or the statistic is not a scalar.
    dpcore.memory.MemoryBudgetError: even one run at a time exceeds
      ``memory_budget``.
  """
  trials = _check_positive_int(trials, "trials")
  chunk = _check_positive_int(chunk, "chunk")
  memory_budget = memory.resolve_budget(memory_budget)
  plan = _plan(key, mechanism, data, statistic=statistic, trials=trials,
               chunk=chunk, memory_budget=memory_budget,
               host_bytes=_SAMPLE_HOST_BYTES_PER_TRIAL * trials)
  return _draw(plan, key, data, trials)


def audit(key: jax.Array, mechanism: Callable, data_0: Any, data_1: Any, *,
          statistic: Callable, delta: float, trials: int,
          chunk: int = 100_000, confidence: float = 0.95,
          memory_budget: int | str | None = None) -> AuditResult:
  """A ``confidence`` lower bound on the ε of ``mechanism`` at ``delta``.

  Args:
    key: PRNG key; the two sides use independent keys derived from it.
    mechanism: ``(key, data) -> output`` (jittable; ``data`` is passed as a
      traced argument, so the same compiled function serves both sides
      when their shapes agree).
    data_0: one data set (any pytree of arrays).
    data_1: a neighbour of ``data_0`` under the relation being audited.
    statistic: ``output -> scalar``; higher should mean "looks like
      ``data_1``" (the reversed direction is tried too, on the selection
      half).
    delta: the δ of the bound, in [0, 1).
    trials: runs per side (≥ 2): the first half chooses the test, the
      second estimates its error rates.
    chunk: runs per chunk of keys (chunk i of a side draws the keys
      ``split(fold_in(side key, i), size)``), vmapped at once unless
      ``memory_budget`` asks for less.
    confidence: probability that the bound holds; split evenly between
      the two error rates (Bonferroni).
    memory_budget: bytes the audit may use, or ``"auto"`` (3/4 of the
      memory available, :func:`memory.resolve_budget`); None, the
      default: no check, so a call does not depend on how busy the
      machine is. The estimate is XLA's count of the compiled chunk's
      buffers plus
      :data:`HOST_BYTES_PER_TRIAL` per trial; where it exceeds the budget,
      each chunk is drawn in the largest vmapped batch that fits
      (:func:`fit_batch`): the same keys and draws, less memory.

  Returns:
    An :class:`AuditResult`.

  Raises:
    ValueError: a bad ``trials``, ``delta``, ``confidence``, ``chunk`` or
      ``memory_budget``, or a statistic that is not a finite scalar.
    dpcore.memory.MemoryBudgetError: even one run at a time exceeds
      ``memory_budget`` (one line naming the estimate and the budget),
      before any run.
  """
  trials = _check_positive_int(trials, "trials")
  if trials < 2:
    raise ValueError(f"trials must be ≥ 2 (half choose the test, half "
                     f"measure it), got {trials}.")
  if not 0.0 <= delta < 1.0:
    raise ValueError(f"delta must be in [0, 1), got {delta!r}.")
  if not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence must be in (0, 1), got {confidence!r}.")
  per_rate = 1.0 - (1.0 - confidence) / 2.0  # Bonferroni over two rates
  start = time.perf_counter()
  key_0, key_1 = jax.random.split(key)
  chunk = _check_positive_int(chunk, "chunk")
  memory_budget = memory.resolve_budget(memory_budget)
  # One compiled runner serves both sides (one compilation when the two
  # data sets have the same shapes), planned before any run.
  kwargs = dict(statistic=statistic, trials=trials, chunk=chunk,
                memory_budget=memory_budget,
                host_bytes=HOST_BYTES_PER_TRIAL * trials)
  plan_0 = _plan(key_0, mechanism, data_0, **kwargs)
  plan_1 = plan_0
  if memory_budget is not None and (jax.tree.map(jax.typeof, data_0)
                                    != jax.tree.map(jax.typeof, data_1)):
    plan_1 = _plan(key_1, mechanism, data_1, **kwargs)
  s0 = _draw(plan_0, key_0, data_0, trials)
  s1 = _draw(plan_1, key_1, data_1, trials)
  if not (np.all(np.isfinite(s0)) and np.all(np.isfinite(s1))):
    raise ValueError("statistic returned non-finite values; make it finite "
                     "(e.g. clip it) so thresholds are meaningful.")
  half = trials // 2
  sign, threshold = _best_test(s0[:half], s1[:half], delta=delta,
                               confidence=confidence)
  test0, test1 = np.sort(sign * s0[half:]), np.sort(sign * s1[half:])
  fp, fn = _error_counts(test0, test1, np.asarray([threshold]))
  fp, fn = int(fp[0]), int(fn[0])
  n0, n1 = test0.size, test1.size
  eps = float(epsilon_from_rates(
      clopper_pearson_upper(fp, n0, confidence=per_rate),
      clopper_pearson_upper(fn, n1, confidence=per_rate), delta=delta))
  seconds = time.perf_counter() - start
  return AuditResult(
      epsilon_lower=eps, delta=float(delta), threshold=sign * threshold,
      false_positive=fp / n0, false_negative=fn / n1, trials=trials,
      seconds=seconds, trials_per_second=2 * trials / max(seconds, 1e-9),
      batch=(None if plan_0.batch == plan_0.size and
             plan_1.batch == plan_1.size else min(plan_0.batch,
                                                  plan_1.batch)),
      memory_estimate=(None if plan_0.estimate is None else
                       max(plan_0.estimate, plan_1.estimate or 0)))


def _check_positive_int(value, name: str) -> int:
  """A count (1e5 allowed for 100000) that fits int32: check_count."""
  if isinstance(value, bool) or not float(value).is_integer() or value < 1:
    raise ValueError(f"{name} must be a positive integer, got {value!r}.")
  return validation.check_count(int(value), name)


__all__ = ["HOST_BYTES_PER_TRIAL", "AuditResult", "audit",
           "clopper_pearson", "clopper_pearson_upper", "compiled_bytes",
           "epsilon_from_rates", "fit_batch", "sample_statistic"]
