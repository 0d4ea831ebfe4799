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

# Largest number of candidate thresholds scored on the selection half.
_MAX_CANDIDATES = 6000


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
  """
  epsilon_lower: float
  delta: float
  threshold: float
  false_positive: float
  false_negative: float
  trials: int
  seconds: float
  trials_per_second: float


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


def sample_statistic(key: jax.Array, mechanism: Callable, data: Any, *,
                     statistic: Callable, trials: int,
                     chunk: int = 100_000, _runner=None) -> np.ndarray:
  """``trials`` i.i.d. draws of statistic(mechanism(k, data)), on the host.

  The runs are vmapped over keys in equal chunks of at most ``chunk`` (so
  memory stays bounded however many trials) and jitted once per chunk
  size and data shape; chunk i uses the keys ``split(fold_in(key, i),
  size)``.
  """
  trials = _check_positive_int(trials, "trials")
  chunk = _check_positive_int(chunk, "chunk")
  num_chunks = -(-trials // chunk)
  size = -(-trials // num_chunks)  # equal chunks; < num_chunks runs wasted
  run = _runner or _chunk_runner(mechanism, statistic, size)
  parts = [np.asarray(run(key, np.uint32(i), data), np.float64)
           for i in range(num_chunks)]
  out = np.concatenate(parts)[:trials]
  if out.shape != (trials,):
    raise ValueError(
        f"statistic must return one scalar per run; got shape "
        f"{parts[0].shape[1:]} per run. Reduce the output to a float.")
  return out


def audit(key: jax.Array, mechanism: Callable, data_0: Any, data_1: Any, *,
          statistic: Callable, delta: float, trials: int,
          chunk: int = 100_000, confidence: float = 0.95) -> AuditResult:
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
    chunk: runs per vmapped batch.
    confidence: probability that the bound holds; split evenly between
      the two error rates (Bonferroni).

  Returns:
    An :class:`AuditResult`.
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
  # One compiled runner serves both sides (one compilation when the two
  # data sets have the same shapes).
  runner = _chunk_runner(mechanism, statistic,
                         -(-trials // -(-trials // chunk)))
  s0 = sample_statistic(key_0, mechanism, data_0, statistic=statistic,
                        trials=trials, chunk=chunk, _runner=runner)
  s1 = sample_statistic(key_1, mechanism, data_1, statistic=statistic,
                        trials=trials, chunk=chunk, _runner=runner)
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
      seconds=seconds, trials_per_second=2 * trials / max(seconds, 1e-9))


def _check_positive_int(value, name: str) -> int:
  if isinstance(value, bool) or not float(value).is_integer() or value < 1:
    raise ValueError(f"{name} must be a positive integer, got {value!r}.")
  return int(value)


__all__ = ["AuditResult", "audit", "clopper_pearson",
           "clopper_pearson_upper", "epsilon_from_rates", "sample_statistic"]
