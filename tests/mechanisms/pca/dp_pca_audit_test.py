"""mechanisms.pca.dp_pca_audit: DP-PCA's claim survives a small audit with
its canary at each position."""

import jax
import numpy as np
import pytest

from dpcore import audit_spec
from dpcore.audit_spec import POSITIONS
from mechanisms.pca import dp_pca, dp_pca_audit


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in dp_pca_audit.specs()}


def test_names_positions_and_neighbours(specs):
  assert list(specs) == [f"dp_pca@{p}" for p in POSITIONS]
  for p in POSITIONS:
    spec = specs[f"dp_pca@{p}"]
    assert spec.position == p and spec.relation == "add_remove"
    (rows, mask_0), (rows_1, mask_1) = spec.data_0, spec.data_1
    np.testing.assert_array_equal(rows, rows_1)
    at = audit_spec.canary_index(3, p)
    # The neighbours differ in the canary's mask alone, the canary is e₁.
    np.testing.assert_array_equal(np.flatnonzero(mask_1 != mask_0), [at])
    np.testing.assert_array_equal(rows[at], [1.0, 0.0, 0.0])
  # The claim is the plan's own ledger's, at the audit's δ.
  plan = dp_pca.make_plan(epsilon=1.0, delta=1e-5, k=3, dim=3,
                          relation="add_remove")
  assert specs["dp_pca@first"].settings["sigma"] == plan.sigma


def test_small_audit_stays_below_the_claim(specs):
  spec = specs["dp_pca@middle"]
  result = audit_spec.run(jax.random.key(11), spec, trials=20_000)
  assert result.epsilon_lower <= spec.reported_epsilon
  assert result.epsilon_lower > 0.5 * spec.reported_epsilon
