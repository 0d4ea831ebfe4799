"""mechanisms.erm.objective_perturbation_audit: the Huber fit's claim
survives a small audit, and the audit shows most of it."""

import jax
import pytest

from dpcore import audit_spec
from mechanisms.erm import objective_perturbation_audit as audit


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in audit.specs()}


def test_names_and_claims(specs):
  assert list(specs) == ["objective_perturbation_huber",
                         "objective_perturbation_logistic"]
  for spec in specs.values():
    assert spec.relation == "replace_one" and spec.x64
    assert spec.reported_epsilon == pytest.approx(1.0)
    assert spec.settings["n"] == 1


def test_small_audit_stays_below_the_claim(specs):
  spec = specs["objective_perturbation_huber"]
  result = audit_spec.run(jax.random.key(11), spec, trials=20_000)
  assert result.epsilon_lower <= spec.reported_epsilon
  # The Huber hinge's worst case: the audit shows most of ε.
  assert result.epsilon_lower > 0.6 * spec.reported_epsilon
