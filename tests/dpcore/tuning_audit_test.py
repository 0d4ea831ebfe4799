"""dpcore.tuning_audit: the tuning's claim survives its audit; a fixed K,
K released and the one trial's ε reported for the tuning are caught."""

import jax
import pytest

from dpcore import audit_spec, tuning_audit


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
                   ("tuning_per_trial_epsilon", True),
                   ("tuning_fixed_k", True),
                   ("tuning_k_released", True)]
  with pytest.raises(ValueError, match="broken='k_dropped'"):
    tuning_audit.tuned_laplace_spec(broken="k_dropped")
