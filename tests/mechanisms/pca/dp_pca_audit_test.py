"""mechanisms.pca.dp_pca_audit: DP-PCA's claim survives a small audit with
its canary at each position, with float and exact noise and under
replace-one; the skipped row clip and the add/remove σ under the
replace-one claim are caught."""

import jax
import numpy as np
import pytest

from dpcore import audit_spec
from dpcore.audit_spec import POSITIONS
from mechanisms.pca import dp_pca, dp_pca_audit
from tests import audit_checks

BROKEN = {"dp_pca_clip_skipped": 2_000,
          "dp_pca_discrete_clip_skipped": 2_000,
          "dp_pca_replace_sensitivity_one": 100_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in dp_pca_audit.specs()}


def test_names_positions_and_neighbours(specs):
  assert list(specs) == [
      *(f"{base}@{p}" for base in ("dp_pca", "dp_pca_discrete",
                                   "dp_pca_replace") for p in POSITIONS),
      *BROKEN]
  for p in POSITIONS:
    spec = specs[f"dp_pca@{p}"]
    assert spec.position == p and spec.relation == "add_remove"
    assert not spec.broken
    (rows, mask_0), (rows_1, mask_1) = spec.data_0, spec.data_1
    np.testing.assert_array_equal(rows, rows_1)
    at = audit_spec.canary_index(3, p)
    # The neighbours differ in the canary's mask alone; the canary is
    # 10·e₁, which the library clips to e₁ (the broken variant does not).
    np.testing.assert_array_equal(np.flatnonzero(mask_1 != mask_0), [at])
    np.testing.assert_array_equal(rows[at], [10.0, 0.0, 0.0])
  # The claim is the plan's own ledger's, at the audit's δ.
  plan = dp_pca.make_plan(epsilon=1.0, delta=1e-5, k=3, dim=3,
                          relation="add_remove")
  assert specs["dp_pca@first"].settings["sigma"] == plan.sigma


def test_the_discrete_and_replace_one_modes(specs):
  plan = dp_pca.make_plan(epsilon=1.0, delta=1e-5, k=3, dim=3,
                          relation="add_remove", noise="discrete",
                          granularity=dp_pca_audit.GRID)
  discrete = specs["dp_pca_discrete@middle"]
  assert discrete.settings["sigma_lattice"] == plan.sigma_lattice
  assert discrete.reported_epsilon > specs["dp_pca@middle"].reported_epsilon
  for p in POSITIONS:
    spec = specs[f"dp_pca_replace@{p}"]
    assert spec.relation == "replace_one" and spec.position == p
    at = audit_spec.canary_index(3, p)
    # e₂ replaced by e₁ in the canary's row; the other rows are 0.
    diff = np.asarray(spec.data_1) - np.asarray(spec.data_0)
    np.testing.assert_array_equal(np.flatnonzero(np.any(diff, axis=1)), [at])
    np.testing.assert_array_equal(diff[at], [1.0, -1.0, 0.0])
  broken = specs["dp_pca_replace_sensitivity_one"]
  assert broken.reported_epsilon == specs["dp_pca_replace@first"]\
      .reported_epsilon
  add_remove = dp_pca.make_plan(epsilon=1.0, delta=1e-5, k=3, dim=3)
  assert broken.settings["sigma"] == add_remove.sigma
  assert add_remove.sigma < specs["dp_pca_replace@first"].settings["sigma"]


def test_broken_variant_reports_the_unbroken_claim(specs):
  spec = specs["dp_pca_clip_skipped"]
  assert spec.broken and spec.position is None
  assert spec.relation == "add_remove"
  assert spec.reported_epsilon == specs["dp_pca@first"].reported_epsilon
  assert spec.settings["sigma"] == specs["dp_pca@first"].settings["sigma"]
  # The canary, first, is a row of norm 10 the release does not clip.
  (rows, mask_0), (_, mask_1) = spec.data_0, spec.data_1
  np.testing.assert_array_equal(np.flatnonzero(mask_1 != mask_0), [0])
  np.testing.assert_array_equal(rows[0], [10.0, 0.0, 0.0])
  assert spec.settings["canary_row"] == 0
  with pytest.raises(ValueError, match="broken must be None or one of"):
    dp_pca_audit.dp_pca_spec(broken="noise_dropped")


def test_unclipped_release_differs_from_the_release_by_the_clip_alone():
  # On rows of norm ≤ 1 (the clip a no-op) the two draw the same noise.
  plan = dp_pca.make_plan(epsilon=1.0, delta=1e-5, k=3, dim=3)
  x = np.array([[0.6, 0.8, 0.0], [0.0, 0.0, 1.0], [0.3, 0.0, 0.4]],
               np.float32)
  mask = np.array([1.0, 1.0, 0.0], np.float32)
  key = jax.random.key(5)
  want, got = jax.jit(lambda k: (
      dp_pca.release(k, plan, x, mask),
      dp_pca_audit.unclipped_release(k, plan, x, mask)))(key)
  np.testing.assert_allclose(got.eigenvalues, want.eigenvalues, rtol=1e-6)
  np.testing.assert_allclose(got.components, want.components, atol=1e-6)


@pytest.mark.parametrize("name, trials", [
    ("dp_pca@middle", 20_000), ("dp_pca_replace@last", 20_000),
    # The lattice's claim is looser (sensitivity with the rounding):
    # more trials to reach half of it.
    pytest.param("dp_pca_discrete@first", 50_000, marks=pytest.mark.slow)])
def test_small_audit_stays_below_the_claim(specs, name, trials):
  spec = specs[name]
  result = audit_spec.run(jax.random.key(11), spec, trials=trials)
  assert result.epsilon_lower <= spec.reported_epsilon
  assert result.epsilon_lower > 0.5 * spec.reported_epsilon


@pytest.mark.parametrize("name", [
    "dp_pca_clip_skipped", "dp_pca_discrete_clip_skipped",
    pytest.param("dp_pca_replace_sensitivity_one", marks=pytest.mark.slow)])
def test_broken_variant_is_caught(specs, name):
  audit_checks.assert_caught(specs[name], BROKEN[name])
