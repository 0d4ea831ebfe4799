"""dpcore.auditing: Clopper–Pearson, the ε formula, and audits of mechanisms
whose exact ε is known (randomised response, the Gaussian, no privacy)."""

import doctest
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpcore import accounting, auditing


def randomised_response(epsilon):
  """Reports the bit, flipped with probability 1/(1 + e^ε): exactly ε-DP."""

  def mechanism(key, bit):
    flip = jax.random.bernoulli(key, 1.0 / (1.0 + math.exp(epsilon)))
    return jnp.where(flip, 1 - bit, bit).astype(jnp.float32)

  return mechanism


def gaussian(sigma):
  def mechanism(key, value):
    return value + sigma * jax.random.normal(key)

  return mechanism


def identity(output):
  return output


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (7, 1000),
                                 (500, 1000)])
def test_clopper_pearson_matches_scipy(k, n):
  lower, upper = auditing.clopper_pearson(k, n, confidence=0.95)
  ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95,
                                           method="exact")
  assert lower == pytest.approx(ci.low, abs=1e-12)
  assert upper == pytest.approx(ci.high, abs=1e-12)


def test_clopper_pearson_by_hand():
  # k = 0: the upper end solves (1 − p)^n = a/2, so p = 1 − (a/2)^(1/n).
  _, upper = auditing.clopper_pearson(0, 10, confidence=0.95)
  assert upper == pytest.approx(1.0 - 0.025 ** 0.1, rel=1e-12)
  lower, upper = auditing.clopper_pearson(10, 10, confidence=0.95)
  assert lower == pytest.approx(0.025 ** 0.1, rel=1e-12)
  assert upper == 1.0
  # One-sided at 97.5 % is the upper end of the two-sided 95 % interval.
  assert auditing.clopper_pearson_upper(3, 50, confidence=0.975) == (
      pytest.approx(auditing.clopper_pearson(3, 50, confidence=0.95)[1]))
  # Vectorised form agrees with the scalar one.
  lo, hi = auditing.clopper_pearson(np.array([0, 5]), 20)
  assert hi[1] == pytest.approx(auditing.clopper_pearson(5, 20)[1])
  assert lo[0] == 0.0


def test_clopper_pearson_rejects_bad_counts():
  with pytest.raises(ValueError, match="successes"):
    auditing.clopper_pearson(11, 10)
  with pytest.raises(ValueError, match="confidence"):
    auditing.clopper_pearson(1, 10, confidence=1.5)


def test_epsilon_from_rates_by_hand():
  got = auditing.epsilon_from_rates(0.1, 0.3, delta=0.0)
  assert got == pytest.approx(math.log(0.7 / 0.1))
  got = auditing.epsilon_from_rates(0.3, 0.1, delta=0.05)
  assert got == pytest.approx(math.log(0.65 / 0.1))
  assert auditing.epsilon_from_rates(0.5, 0.5, delta=0.0) == 0.0
  assert auditing.epsilon_from_rates(0.9, 0.9, delta=0.0) == 0.0  # floor


def test_randomised_response_bound_is_below_and_close_to_truth():
  r = auditing.audit(jax.random.key(0), randomised_response(1.0),
                     jnp.int32(0), jnp.int32(1), statistic=identity,
                     delta=0.0, trials=200_000, chunk=64_000)
  assert r.trials == 200_000
  # Below the truth (the 95 % bound; with a fixed key this is one draw)
  # and within 5 % of it: the CP half-width at 1e5 runs is ~0.02 in ε.
  assert 0.95 < r.epsilon_lower <= 1.0
  assert r.false_positive == pytest.approx(1 / (1 + math.e), abs=0.01)
  assert r.trials_per_second > 0


def test_audit_rejects_a_wrong_claim():
  # Randomised response at ε = 1.5 is shown to exceed a claimed ε = 1.
  r = auditing.audit(jax.random.key(1), randomised_response(1.5),
                     jnp.int32(0), jnp.int32(1), statistic=identity,
                     delta=0.0, trials=100_000)
  assert 1.0 < r.epsilon_lower <= 1.5


def test_gaussian_bound_is_below_and_close_to_exact_epsilon():
  delta = 1e-3
  exact = accounting.gaussian_epsilon(noise_multiplier=1.0, delta=delta)
  r = auditing.audit(jax.random.key(2), gaussian(1.0), jnp.float32(0.0),
                     jnp.float32(1.0), statistic=identity, delta=delta,
                     trials=400_000)
  assert 0.85 * exact < r.epsilon_lower <= exact
  # The best test sits in a tail: one of its error rates is small. Which
  # tail (left or right) is a tie the Gaussian's symmetry leaves to the
  # draws, so either direction is accepted.
  assert min(r.false_positive, r.false_negative) < 0.01


def test_reversed_direction_is_found():
  r = auditing.audit(jax.random.key(3), gaussian(1.0), jnp.float32(0.0),
                     jnp.float32(1.0), statistic=lambda out: -out,
                     delta=1e-2, trials=50_000)
  exact = accounting.gaussian_epsilon(noise_multiplier=1.0, delta=1e-2)
  assert 0.7 * exact < r.epsilon_lower <= exact


def test_no_privacy_gives_a_large_bound():
  def leak(key, data):
    del key
    return data

  r = auditing.audit(jax.random.key(4), leak, jnp.float32(0.0),
                     jnp.float32(1.0), statistic=identity, delta=1e-5,
                     trials=10_000)
  # Zero errors on 5000 runs: α⁺ = 1 − 0.025^(1/5000) ≈ 7.4e-4.
  assert r.epsilon_lower == pytest.approx(
      math.log((1 - 1e-5 - (1 - 0.025 ** (1 / 5000)))
               / (1 - 0.025 ** (1 / 5000))), rel=1e-6)
  assert r.epsilon_lower > 7.0
  assert r.false_positive == 0.0 and r.false_negative == 0.0


def test_identical_sides_give_no_evidence():
  r = auditing.audit(jax.random.key(5), gaussian(1.0), jnp.float32(0.0),
                     jnp.float32(0.0), statistic=identity, delta=0.0,
                     trials=20_000)
  assert r.epsilon_lower == 0.0


def test_same_key_same_result_and_chunking():
  args = (randomised_response(1.0), jnp.int32(0), jnp.int32(1))
  a = auditing.audit(jax.random.key(6), *args, statistic=identity,
                     delta=0.0, trials=5_001, chunk=1_000)
  b = auditing.audit(jax.random.key(6), *args, statistic=identity,
                     delta=0.0, trials=5_001, chunk=1_000)
  assert a.trials == 5_001
  assert a[:5] == b[:5]
  draws = auditing.sample_statistic(jax.random.key(7), args[0], args[2],
                                    statistic=identity, trials=2_500,
                                    chunk=1_000)
  assert draws.shape == (2_500,)
  assert len(np.unique(draws)) == 2  # keys differ across chunks


def test_argument_checks():
  args = (gaussian(1.0), jnp.float32(0.0), jnp.float32(1.0))
  with pytest.raises(ValueError, match="trials"):
    auditing.audit(jax.random.key(0), *args, statistic=identity, delta=0.0,
                   trials=1)
  with pytest.raises(ValueError, match="delta"):
    auditing.audit(jax.random.key(0), *args, statistic=identity, delta=1.0,
                   trials=10)
  with pytest.raises(ValueError, match="one scalar"):
    auditing.audit(jax.random.key(0), *args,
                   statistic=lambda out: jnp.stack([out, out]), delta=0.0,
                   trials=10)


def test_docstring_example():
  result = doctest.testmod(auditing, optionflags=doctest.ELLIPSIS)
  assert result.failed == 0 and result.attempted > 0
