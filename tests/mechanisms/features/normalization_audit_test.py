"""mechanisms.features.normalization_audit: the data normalisation's claim
survives its audit at every canary position; both broken variants are
caught."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import accounting, auditing
from mechanisms.features import normalization, normalization_audit

# Trials per side: a few seconds each on a 2-core CPU, keys fixed.
UNBROKEN_TRIALS = 50_000
BROKEN_TRIALS = 20_000


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in normalization_audit.specs()}


def _audit(spec, trials, seed=7):
  return auditing.audit(jax.random.key(seed), spec.mechanism,
                        jnp.asarray(spec.data_0), jnp.asarray(spec.data_1),
                        statistic=spec.statistic, delta=spec.delta,
                        trials=trials)


def test_names_positions_and_flags(specs):
  assert list(specs) == [
      "features_data_norm@first", "features_data_norm@middle",
      "features_data_norm@last", "features_data_norm_clip_skipped",
      "features_data_norm_sensitivity_one"]
  assert [s.position for s in specs.values()] == [
      "first", "middle", "last", None, None]
  assert {n for n, s in specs.items() if s.broken} == {
      "features_data_norm_clip_skipped", "features_data_norm_sensitivity_one"}
  rows = [specs[f"features_data_norm@{p}"].settings["canary_row"]
          for p in ("first", "middle", "last")]
  assert rows == [0, 32, 63]


def test_claim_is_the_plans_ledger(specs):
  spec = specs["features_data_norm@first"]
  plan = normalization.make_plan(
      epsilon=None, noise_multiplier=1.0, delta=1e-5, num_examples=64,
      channels=4, clip_mean=1.0, clip_square=1.0)
  assert spec.relation == plan.relation == "add_remove"
  # The Gaussian's exact privacy profile read at the audit's δ.
  assert spec.reported_epsilon == pytest.approx(accounting.gaussian_epsilon(
      noise_multiplier=1.0, delta=spec.delta), rel=1e-4)
  for name, s in specs.items():  # broken ones report the correct plan's ε
    assert s.reported_epsilon == spec.reported_epsilon, name


def test_neighbours_differ_in_one_row_and_blank_adds_nothing(specs):
  for position in ("first", "middle", "last"):
    spec = specs[f"features_data_norm@{position}"]
    diff = np.any(spec.data_0 != spec.data_1, axis=(1, 2, 3))
    assert np.flatnonzero(diff).tolist() == [spec.settings["canary_row"]]
    assert not np.any(spec.data_0[spec.settings["canary_row"]])
  # Without noise the statistic is 0 on data_0 and √2/σ on data_1 (the
  # canary's clipped statistics reach the sensitivity), at each position.
  plan = normalization.make_plan(
      epsilon=None, noise_multiplier=1e-6, delta=1e-5, num_examples=64,
      channels=4, clip_mean=1.0, clip_square=1.0)
  spec = specs["features_data_norm@middle"]
  run = jax.jit(lambda data: spec.statistic(jnp.stack(
      normalization.release(jax.random.key(0), plan, data))))
  s0, s1 = run(jnp.asarray(spec.data_0)), run(jnp.asarray(spec.data_1))
  sigma = spec.settings["sigma"]
  assert float(s1 - s0) == pytest.approx(math.sqrt(2.0) / sigma, rel=1e-3)


def test_released_variance_never_clamps(specs):
  spec = specs["features_data_norm@last"]
  out = jax.jit(jax.vmap(spec.mechanism, in_axes=(0, None)))(
      jax.random.split(jax.random.key(3), 256), jnp.asarray(spec.data_1))
  assert float(jnp.min(out[:, 1])) > 0.3  # var ≈ 0.44 ± 0.02


@pytest.mark.parametrize("position", ["first", "middle", "last"])
def test_unbroken_stays_below_the_claim(specs, position):
  spec = specs[f"features_data_norm@{position}"]
  result = _audit(spec, UNBROKEN_TRIALS)
  assert result.epsilon_lower <= spec.reported_epsilon, (
      f"{spec.name}: audited {result.epsilon_lower:.3f} exceeds the "
      f"ledger's {spec.reported_epsilon:.3f}: a privacy bug")
  # The audit has power: it shows most of the claim.
  assert result.epsilon_lower > 0.5 * spec.reported_epsilon


@pytest.mark.parametrize("name", ["features_data_norm_clip_skipped",
                                  "features_data_norm_sensitivity_one"])
def test_broken_variant_is_caught(specs, name):
  spec = specs[name]
  result = _audit(spec, BROKEN_TRIALS)
  assert result.epsilon_lower > spec.reported_epsilon, (
      f"{name}: audited {result.epsilon_lower:.3f} does not exceed the "
      f"claimed {spec.reported_epsilon:.3f}: the audit lacks power")


def test_unknown_broken_variant_is_refused():
  with pytest.raises(ValueError, match="broken must be"):
    normalization_audit.data_norm_spec(broken="noise_dropped")
