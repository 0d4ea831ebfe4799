"""mechanisms.erm.output_perturbation_audit: with the canary at each
position the sensitivity is attained and the claim survives a small
audit; noise calibrated for the add/remove sensitivity is caught."""

import jax
import pytest

from dpcore import audit_spec
from mechanisms.erm import output_perturbation_audit as audit
from tests import audit_checks

BROKEN = {"output_perturbation_add_remove_sensitivity": 20_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in audit.specs()}


def test_names_and_canary_rows(specs):
  assert list(specs) == [f"output_perturbation@{p}"
                         for p in audit_spec.POSITIONS] + list(BROKEN)
  for spec in specs.values():
    assert spec.settings["rows"] == audit.ROWS == 3
    assert spec.settings["canary_row"] == {
        "first": 0, "middle": 1, "last": 2, None: 0}[spec.position]


@pytest.mark.parametrize("position", audit_spec.POSITIONS)
def test_the_sensitivity_is_attained_and_the_claim_holds(specs, position):
  spec = specs[f"output_perturbation@{position}"]
  assert spec.relation == "replace_one" and not spec.broken
  # The two exact minimisers are exactly the exact minimiser's
  # sensitivity 2C apart; the noise is drawn for 2C(1 + ρ), which also
  # covers the solver's certified gap.
  assert spec.settings["minimiser_distance"] == pytest.approx(
      spec.settings["minimiser_sensitivity"], rel=1e-5)
  assert spec.settings["sensitivity"] == pytest.approx(
      spec.settings["minimiser_sensitivity"] * 1.01)
  assert spec.settings["noise_sensitivity"] == spec.settings["sensitivity"]
  result = audit_spec.run(jax.random.key(11), spec, trials=100_000)
  assert result.epsilon_lower <= spec.reported_epsilon
  assert result.epsilon_lower > 0.6 * spec.reported_epsilon


def test_broken_variant_reports_the_unbroken_claim(specs):
  spec = specs["output_perturbation_add_remove_sensitivity"]
  unbroken = specs["output_perturbation@first"]
  assert spec.broken and spec.position is None
  assert spec.relation == "replace_one"
  assert spec.reported_epsilon == unbroken.reported_epsilon
  # The same minimisers, noise for Δ₂ = C instead of 2C.
  assert spec.settings["minimiser_distance"] == (
      unbroken.settings["minimiser_distance"])
  assert spec.settings["noise_sensitivity"] == pytest.approx(
      spec.settings["minimiser_sensitivity"] / 2)
  with pytest.raises(ValueError, match="broken must be None or one of"):
    audit.output_perturbation_spec(broken="noise_dropped")


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  audit_checks.assert_caught(specs[name], BROKEN[name])
