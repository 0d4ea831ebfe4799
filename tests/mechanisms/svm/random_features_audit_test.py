"""mechanisms.svm.random_features_audit: the random-feature releases'
claims survive a small audit, the sensitivity is attained, and the
σ-halved DP-SGD variant is caught."""

import functools
import math

import jax
import jax.numpy as jnp
import pytest

from dpcore import audit_spec
from mechanisms.svm import random_features_audit as rff_audit

SQRT2 = math.sqrt(2.0)


@pytest.mark.parametrize("make,trials", [
    (rff_audit.dpsgd_spec, 40_000),
    *((functools.partial(rff_audit.output_perturbation_spec, position=p),
       100_000) for p in audit_spec.POSITIONS),
])
def test_audit_stays_below_the_reported_epsilon(make, trials):
  spec = make()
  result = audit_spec.run(jax.random.key(20), spec, trials=trials)
  assert result.epsilon_lower <= spec.reported_epsilon
  assert result.epsilon_lower > 0.3 * spec.reported_epsilon


def test_audit_catches_halved_noise():
  spec = rff_audit.dpsgd_spec(broken=True)
  assert spec.broken
  assert spec.reported_epsilon == rff_audit.dpsgd_spec().reported_epsilon
  result = audit_spec.run(jax.random.key(21), spec, trials=10_000)
  assert result.epsilon_lower > spec.reported_epsilon


def test_audit_catches_output_noise_for_unscaled_features():
  spec = rff_audit.output_perturbation_spec(broken=True)
  unbroken = rff_audit.output_perturbation_spec()
  assert spec.broken and spec.reported_epsilon == unbroken.reported_epsilon
  assert spec.settings["noise_sensitivity"] == pytest.approx(
      unbroken.settings["minimiser_sensitivity"] / SQRT2)
  result = audit_spec.run(jax.random.key(21), spec, trials=100_000)
  assert result.epsilon_lower > spec.reported_epsilon


@pytest.mark.parametrize("position,row", [("first", 0), ("middle", 1),
                                          ("last", 2)])
def test_output_perturbation_audit_attains_the_sensitivity(position, row):
  spec = rff_audit.output_perturbation_spec(position=position)
  assert spec.name == f"rff_output_perturbation@{position}"
  assert spec.settings["canary_row"] == row
  assert spec.settings["canary_feature_norm"] == pytest.approx(SQRT2,
                                                               rel=1e-5)
  assert spec.settings["minimiser_distance"] == pytest.approx(
      spec.settings["minimiser_sensitivity"], rel=1e-5)
  assert spec.settings["sensitivity"] == pytest.approx(
      1.01 * spec.settings["minimiser_sensitivity"])
  assert jnp.asarray(spec.data_0).shape == (3,)  # D = 2 weights and b


def test_spec_names():
  assert [s.name for s in rff_audit.specs()] == [
      "rff_dpsgd@first", "rff_dpsgd@middle", "rff_dpsgd@last",
      "rff_output_perturbation@first", "rff_output_perturbation@middle",
      "rff_output_perturbation@last", "rff_dpsgd_sigma_halved",
      "rff_output_perturbation_unscaled_features"]
