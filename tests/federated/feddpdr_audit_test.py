"""federated.feddpdr_audit: one FedDPDR-DPML participant's releases stay
below the pipeline's claim; its fit on an unclipped row is caught. The
distributed moments' release stays below its claim at every canary
position; shares of σ/P are caught. With dropouts (exactly P_min
survivors) the same holds at every survivor, and a claim accounted at all
P shares is caught."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import audit_spec
from dpcore.audit_spec import POSITIONS
from federated import feddpdr, feddpdr_audit
from tests import audit_checks

BROKEN = {"feddpdr_participant_clip_skipped": 2_000,
          "feddpdr_distributed_moments_share_over_p": 3_000,
          "feddpdr_distributed_moments_dropout_all_shares": 3_000}
SECURE = {f"feddpdr_distributed_moments@{p}": 20_000 for p in POSITIONS}
DROPOUT = {f"feddpdr_distributed_moments_dropout@{p}": 20_000
           for p in POSITIONS}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in feddpdr_audit.specs()}


def test_spec_names():
  assert [s.name for s in feddpdr_audit.specs()] == [
      *(f"feddpdr_participant@{p}" for p in POSITIONS),
      "feddpdr_participant_clip_skipped", *SECURE,
      "feddpdr_distributed_moments_share_over_p", *DROPOUT,
      "feddpdr_distributed_moments_dropout_all_shares"]


@pytest.mark.parametrize("position,row", [("first", 0), ("middle", 1),
                                          ("last", 2)])
def test_spec_and_a_small_audit(specs, position, row):
  spec = specs[f"feddpdr_participant@{position}"]
  assert spec.relation == "replace_one" and spec.x64 and not spec.broken
  assert spec.settings["canary_row"] == row and spec.settings["n"] == 3
  # The neighbours differ in the canary's label alone (replace-one).
  want = [[1, 1, 1]]
  assert np.asarray(spec.data_0).tolist() == want
  want[0][row] = 0
  assert np.asarray(spec.data_1).tolist() == want
  settings = spec.settings
  assert settings["epsilon_pca"] + settings["epsilon_fit"] == (
      pytest.approx(settings["epsilon"]))
  result = audit_spec.run(jax.random.key(11), spec, trials=5_000)
  assert result.epsilon_lower <= spec.reported_epsilon
  assert result.epsilon_lower > 0.2 * spec.reported_epsilon


def test_broken_variant_reports_the_unbroken_claim(specs):
  spec = specs["feddpdr_participant_clip_skipped"]
  unbroken = specs["feddpdr_participant@first"]
  assert spec.broken and spec.position is None and spec.x64
  assert spec.reported_epsilon == unbroken.reported_epsilon
  assert spec.nominal_epsilon == unbroken.nominal_epsilon
  # The same canary of norm 10 (clipped by the library): the two differ
  # in the mechanism alone.
  assert {**spec.settings, "variant": "library"} == unbroken.settings
  assert spec.settings["row_norm"] == 10.0
  with pytest.raises(ValueError, match="broken must be None or one of"):
    feddpdr_audit.feddpdr_spec(broken="noise_dropped")


def test_unclipped_participant_is_train_on_rows_of_norm_at_most_one():
  # On a normalised row (every clip a no-op) the broken participant is
  # train's: the same keys, basis and fit.
  config = feddpdr.Config(mechanism="dpdr_dpml", epsilon=2.0, delta=1e-4,
                          k=2, lam=1.0)
  plan = feddpdr.make_plan([2], dim=2, num_classes=2, config=config)
  x = jnp.asarray([[[0.6, 0.8], [0.0, -1.0]]], jnp.float32)
  labels = jnp.asarray([[1, 0]], jnp.int32)
  mask = jnp.ones((1, 2), jnp.float32)
  key = jax.random.key(5)
  with jax.enable_x64(True):
    traced = feddpdr.Traced(
        jnp.asarray(plan.sigma, jnp.float32),
        *(jnp.asarray(a, jnp.float64)
          for a in (plan.sizes, plan.p, plan.theta, plan.epsilon_gap)))
    out = feddpdr.train(key[None], feddpdr.Rows(x, labels, mask), traced,
                        config=config, num_classes=2)
    basis, beta = jax.jit(lambda k: feddpdr_audit.unclipped_participant(
        k, x, labels, mask, traced, config=config))(key)
  np.testing.assert_allclose(basis, out.bases[0, 0], atol=1e-6)
  np.testing.assert_allclose(beta, out.betas[0, 0, 0], atol=1e-6)


@pytest.mark.parametrize("name", [
    "feddpdr_participant_clip_skipped",
    # 15-75 s (its exact sampler runs vmapped over 3,000 trials): slow;
    # the default suite has the noise-scale test of
    # tests/federated/feddpdr/secure_moments_test.py, which rejects
    # the same σ/P shares.
    pytest.param("feddpdr_distributed_moments_share_over_p",
                 marks=pytest.mark.slow),
    # ~35 s: slow; the default suite's share-count tests of
    # secure_moments_test.py reject the same claim at P shares.
    pytest.param("feddpdr_distributed_moments_dropout_all_shares",
                 marks=pytest.mark.slow)])
def test_broken_variant_is_caught(specs, name):
  audit_checks.assert_caught(specs[name], BROKEN[name])


def test_distributed_moments_specs_positions_and_claims(specs):
  rows = {"first": 0, "middle": 3, "last": 5}  # 3 participants × 2 rows
  first = specs["feddpdr_distributed_moments@first"]
  for p in POSITIONS:
    spec = specs[f"feddpdr_distributed_moments@{p}"]
    assert spec.position == p and not spec.broken
    assert spec.relation == "replace_one"
    assert spec.settings["canary_unit"] == rows[p]
    assert spec.reported_epsilon == first.reported_epsilon
    # The claim is the PCA release's, against the server (ε₁ = 2).
    assert spec.reported_epsilon == pytest.approx(
        spec.settings["epsilon_pca"])
    assert 0.99 * 2.0 <= spec.reported_epsilon <= 2.0
    # The neighbours replace the canary e₀ by e₁; every other row is 0.
    assert float(jnp.sum(jnp.abs(spec.data_0 - spec.data_1))) == 2.0
  over = specs["feddpdr_distributed_moments_share_over_p"]
  assert over.broken and over.position is None
  assert 0.99 * 2.0 <= over.reported_epsilon <= 2.0
  # σ/P instead of σ/√P, P = 9: each share a third of the right one.
  assert over.settings["run_sigma_share"] == pytest.approx(
      over.settings["sigma_share"] / 3, rel=1e-3)
  with pytest.raises(ValueError, match="broken must be"):
    feddpdr_audit.distributed_moments_spec(broken="noise_dropped")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SECURE))
def test_distributed_moments_small_audit_stays_below_the_claim(specs, name):
  # The claim is accounted at 2Δ (rounded rows), the canaries are √2
  # apart: the audit reaches about 1/√2 of the claim's scale at most.
  audit_checks.assert_below_claim(specs[name], SECURE[name], power=0.25)


def test_dropout_specs_survivors_positions_and_claims(specs):
  survivors = [0, 2, 5]  # 6 participants of one row, P_min = 3 arrive
  first = specs["feddpdr_distributed_moments_dropout@first"]
  for p, unit in zip(POSITIONS, survivors, strict=True):
    spec = specs[f"feddpdr_distributed_moments_dropout@{p}"]
    assert spec.position == p and not spec.broken
    assert spec.relation == "replace_one"
    settings = spec.settings
    assert settings["survivors"] == survivors
    assert (settings["participants"], settings["min_survivors"],
            settings["shares"]) == (6, 3, 3)
    assert settings["canary_unit"] == unit
    assert spec.reported_epsilon == first.reported_epsilon
    # The claim is the plan's own entry at P_min shares (ε₁ = 2).
    assert spec.reported_epsilon == pytest.approx(settings["epsilon_pca"])
    assert 0.99 * 2.0 <= spec.reported_epsilon <= 2.0
    # Only the canary row differs (e₀ → e₁), and it is a survivor's.
    diff = np.asarray(jnp.abs(spec.data_0 - spec.data_1))
    assert diff.sum() == 2.0 and diff[unit].sum() == 2.0
  broken = specs["feddpdr_distributed_moments_dropout_all_shares"]
  assert broken.broken and broken.position is None
  settings = broken.settings
  assert (settings["participants"], settings["min_survivors"],
          settings["claimed_shares"], settings["survivors"]) == (9, 1, 9, [0])
  # The release is the library's (its own claim ε₁ ≈ 2 at one share);
  # the report is its curve at all 9 shares, far smaller.
  assert 0.99 * 2.0 <= settings["epsilon_pca"] <= 2.0
  assert broken.reported_epsilon == settings["claimed_epsilon_pca"]
  assert broken.reported_epsilon < 0.3 * settings["epsilon_pca"]
  with pytest.raises(ValueError, match="broken must be"):
    feddpdr_audit.distributed_moments_dropout_spec(broken="noise_dropped")


def test_dropout_spec_releases_the_survivors_sum_only():
  # What the spec's mechanism releases does not depend on the dropped
  # participants' rows (1, 3 and 4 never arrive), and is not an abort.
  spec = feddpdr_audit.distributed_moments_dropout_spec(position="middle")
  key = jax.random.key(2)
  run = jax.jit(spec.mechanism)
  base = np.asarray(run(key, spec.data_1))
  moved = spec.data_1.at[jnp.asarray([1, 3, 4]), 0, 0].set(1.0)
  np.testing.assert_array_equal(np.asarray(run(key, moved)), base)
  assert np.all(np.isfinite(base))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DROPOUT))
def test_dropout_small_audit_stays_below_the_claim(specs, name):
  # As for the specs without dropouts: about 1/√2 of the claim's scale.
  audit_checks.assert_below_claim(specs[name], DROPOUT[name], power=0.25)
