"""dpcore.noise_audit: the noise primitives' claims survive a small audit,
and each one's broken variant is caught."""

from fractions import Fraction

import jax
import pytest

from dpcore import accounting, audit_spec, noise_audit

# Trials per side: a few seconds of power each, keys fixed.
SMALL = {"gaussian": 100_000, "laplace": 50_000, "exponential": 100_000,
         "discrete_laplace": 50_000}
BROKEN = {"gaussian_sigma_halved": 20_000,
          "laplace_wrong_sensitivity": 20_000,
          "discrete_gaussian_sigma_halved": 20_000,
          "discrete_laplace_scale_halved": 20_000,
          "exponential_sensitivity_halved": 20_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in noise_audit.specs()}


def test_names_and_flags(specs):
  assert list(specs) == ["gaussian", "laplace", "discrete_gaussian",
                         "discrete_laplace", "exponential", *BROKEN]
  assert {n for n, s in specs.items() if s.broken} == set(BROKEN)
  assert all(s.position is None for s in specs.values())  # one unit


def test_reported_epsilons_come_from_the_library(specs):
  # Laplace and the exponential mechanism are pure ε = 1; the Gaussian's
  # claim is its exact privacy profile read at the audited δ.
  assert specs["laplace"].reported_epsilon == pytest.approx(1.0)
  assert specs["exponential"].reported_epsilon == pytest.approx(1.0)
  g = specs["gaussian"]
  assert g.reported_epsilon == pytest.approx(accounting.gaussian_epsilon(
      noise_multiplier=g.settings["sigma"], delta=g.delta), rel=1e-6)
  # Broken variants report the unbroken calibration's ε.
  assert specs["gaussian_sigma_halved"].reported_epsilon == (
      g.reported_epsilon)
  assert specs["laplace_wrong_sensitivity"].reported_epsilon == (
      specs["laplace"].reported_epsilon)
  for name in ("discrete_gaussian", "discrete_laplace", "exponential"):
    broken = next(s for n, s in specs.items()
                  if s.broken and n.startswith(name + "_"))
    assert broken.reported_epsilon == specs[name].reported_epsilon, name
  # What each broken variant runs: half the noise, or a draw told Δ/2.
  assert Fraction(specs["discrete_gaussian_sigma_halved"].settings[
      "sigma_lattice_used"]) == Fraction(
          specs["discrete_gaussian"].settings["sigma_lattice"], 2)
  assert specs["exponential_sensitivity_halved"].settings[
      "sensitivity_used"] == 0.5
  # The exponential mechanism's claim is under replace-one, and refused
  # under the other relation.
  assert specs["exponential"].relation == "replace_one"
  ledger = accounting.PrivacyLedger()
  ledger.record_exponential(1.0, label="s", relation="replace_one")
  with pytest.raises(ValueError, match="claims its ε under"):
    audit_spec.claimed_epsilon(ledger, "add_remove")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_audit_stays_below_the_claim(specs, name):
  spec = specs[name]
  result = audit_spec.run(jax.random.key(11), spec, trials=SMALL[name])
  assert result.epsilon_lower <= spec.reported_epsilon, (
      f"{name}: audited lower bound {result.epsilon_lower:.4f} exceeds the "
      f"library's reported ε {spec.reported_epsilon:.4f}: a privacy bug")
  # The audit is not vacuous: it shows a good part of the claim.
  assert result.epsilon_lower > 0.5 * spec.reported_epsilon


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  spec = specs[name]
  result = audit_spec.run(jax.random.key(12), spec, trials=BROKEN[name])
  assert result.epsilon_lower > spec.reported_epsilon, (
      f"{name}: the broken variant was not caught (bound "
      f"{result.epsilon_lower:.4f} ≤ reported {spec.reported_epsilon:.4f})")


def test_laplace_audit_is_close_to_the_claim(specs):
  spec = specs["laplace"]
  result = audit_spec.run(jax.random.key(13), spec, trials=200_000)
  assert 0.85 * spec.reported_epsilon < result.epsilon_lower <= (
      spec.reported_epsilon)
