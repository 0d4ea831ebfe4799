"""dpcore.tuning_audit: the tuning's claim survives its audit; a fixed K,
K released and the one trial's ε reported for the tuning are caught."""

import math

import jax
import numpy as np
import pytest

from dpcore import audit_spec, options, tuning, tuning_audit


def test_audit_does_not_catch_the_tuning():
  spec = tuning_audit.tuned_laplace_spec()
  result = audit_spec.run(jax.random.key(1), spec, trials=20_000)
  assert result.epsilon_lower < spec.reported_epsilon
  assert result.epsilon_lower > 0.5  # the test has power: it sees leakage


def test_audit_catches_a_fixed_k_accounted_as_random():
  spec = tuning_audit.tuned_laplace_spec(broken="fixed_k")
  result = audit_spec.run(jax.random.key(1), spec, trials=20_000)
  assert result.epsilon_lower > spec.reported_epsilon


def test_audit_catches_k_released_beside_the_score():
  # The same tuning, the same reported ε: only K is released too (the
  # unbroken spec, reading the score alone, stays below:
  # test_audit_does_not_catch_the_tuning).
  spec = tuning_audit.tuned_laplace_spec(broken="k_released")
  result = audit_spec.run(jax.random.key(1), spec, trials=100_000)
  assert result.epsilon_lower > spec.reported_epsilon


@pytest.mark.slow
def test_audit_catches_the_per_trial_epsilon_reported_as_total():
  spec = tuning_audit.tuned_laplace_spec(broken="per_trial_epsilon")
  result = audit_spec.run(jax.random.key(7), spec)
  assert result.epsilon_lower > spec.reported_epsilon


def test_specs_are_named_and_flagged():
  names = [(s.name, s.broken) for s in tuning_audit.specs()]
  assert names == [("tuning_laplace", False),
                   ("tuning_poisson", False),
                   ("tuning_negative_binomial", False),
                   ("tuning_logarithmic", False),
                   ("tuning_per_trial_epsilon", True),
                   ("tuning_fixed_k", True),
                   ("tuning_k_released", True),
                   ("tuning_poisson_per_trial_epsilon", True),
                   ("tuning_negative_binomial_fixed_k", True),
                   ("tuning_logarithmic_fixed_k", True)]
  # Every law the library accounts is audited.
  assert set(tuning_audit.LAWS) == set(options.TrialDistribution)
  with pytest.raises(ValueError, match="broken='k_dropped'"):
    tuning_audit.tuned_laplace_spec(broken="k_dropped")
  with pytest.raises(ValueError, match="distribution='uniform'"):
    tuning_audit.tuned_laplace_spec(distribution="uniform")


@pytest.mark.parametrize("law", ["poisson", "negative_binomial",
                                 "logarithmic"])
def test_k_follows_the_law_the_tuning_is_accounted_for(law):
  # The audit's K sampler draws the law the guarantee assumes (and not
  # another law with the same mean): a chi-square test on 20,000 draws.
  mean, eta = tuning_audit.LAWS[law]
  count = tuning.trial_count(law, mean,
                             **({} if eta is None else {"eta": eta}))
  draw = jax.jit(jax.vmap(tuning_audit._trial_count_sampler(count, 512)))
  ks = np.asarray(draw(jax.random.split(jax.random.key(3), 20_000)))

  def chi2(law):  # cells K ≤ 1 (Poisson's K = 0 too), 2, …, 24, > 24
    pmf = [math.exp(law.log_pmf(k)) for k in range(25)]
    observed = ([np.sum(ks <= 1)] + [np.sum(ks == k) for k in range(2, 25)]
                + [np.sum(ks > 24)])
    p = [pmf[0] + pmf[1], *pmf[2:]]
    expected = np.asarray(p + [1.0 - sum(p)]) * ks.size
    return float(np.sum((np.asarray(observed) - expected) ** 2 / expected))

  assert chi2(count) < 60.0  # 25 cells: the 99.99 % point is ~56
  # The geometric law of the same mean is rejected.
  assert chi2(tuning.trial_count("geometric", count.expected)) > 200.0


@pytest.mark.parametrize("law", [
    "poisson",  # its own theorem; the others share the geometric law's
    pytest.param("negative_binomial", marks=pytest.mark.slow),
    pytest.param("logarithmic", marks=pytest.mark.slow)])
def test_each_law_survives_its_audit_and_its_broken_variant_is_caught(law):
  spec = tuning_audit.tuned_laplace_spec(distribution=law)
  result = audit_spec.run(jax.random.key(1), spec, trials=20_000)
  assert spec.settings["distribution"] == law
  assert 0.3 * spec.reported_epsilon < result.epsilon_lower < (
      spec.reported_epsilon)
  broken = tuning_audit.tuned_laplace_spec(
      distribution=law, broken=tuning_audit.OTHER_LAWS_BROKEN[law])
  result = audit_spec.run(jax.random.key(1), broken, trials=20_000)
  assert result.epsilon_lower > broken.reported_epsilon


def test_no_trial_is_a_finite_statistic():
  # Poisson K is 0 with probability e^(−μ) (0.37 at μ = 1): nothing is
  # released, and the statistic stays finite for the audit's thresholds.
  spec = tuning_audit.tuned_laplace_spec(distribution="poisson",
                                         expected_trials=1.0)
  keys = jax.random.split(jax.random.key(0), 2_000)
  out = jax.vmap(spec.mechanism, in_axes=(0, None))(keys, spec.data_1)
  assert np.mean(np.isinf(np.asarray(out))) == pytest.approx(
      math.exp(-1.0), abs=0.04)
  stat = np.asarray(jax.vmap(spec.statistic)(out))
  assert np.all(np.isfinite(stat))
  assert np.all(stat[np.isinf(np.asarray(out))] == -1e6)
