"""mechanisms.erm.output_perturbation_audit: the sensitivity is attained
and the claim survives a small audit."""

import jax
import pytest

from dpcore import audit_spec
from mechanisms.erm import output_perturbation_audit as audit


def test_the_sensitivity_is_attained_and_the_claim_holds():
  (spec,) = audit.specs()
  assert spec.name == "output_perturbation"
  assert spec.relation == "replace_one"
  # The two exact minimisers are exactly the sensitivity apart.
  assert spec.settings["minimiser_distance"] == pytest.approx(
      spec.settings["sensitivity"], rel=1e-5)
  result = audit_spec.run(jax.random.key(11), spec, trials=100_000)
  assert result.epsilon_lower <= spec.reported_epsilon
  assert result.epsilon_lower > 0.6 * spec.reported_epsilon
