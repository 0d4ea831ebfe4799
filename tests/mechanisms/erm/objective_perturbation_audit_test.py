"""mechanisms.erm.objective_perturbation_audit: the Huber fit's claim
survives a small audit with the canary at each position, and the audit
shows most of it; the skipped row clip is caught."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import audit_spec
from mechanisms.erm import objective_perturbation as op
from mechanisms.erm import objective_perturbation_audit as audit
from tests import audit_checks

BROKEN = {"objective_perturbation_huber_clip_skipped": 2_000,
          "objective_perturbation_logistic_clip_skipped": 2_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in audit.specs()}


def test_names_claims_and_canary_rows(specs):
  assert list(specs) == [
      f"objective_perturbation_{loss}@{position}"
      for loss in ("huber", "logistic")
      for position in audit_spec.POSITIONS] + list(BROKEN)
  for spec in specs.values():
    assert spec.relation == "replace_one" and spec.x64
    assert spec.reported_epsilon == pytest.approx(1.0)
    # Audited at the δ the ledger states (the noise cap's), not at 0.
    assert spec.delta == pytest.approx(2.0 ** -100 * (1.0 + np.e))
    assert spec.settings["n"] == audit.ROWS == 3
    # The neighbours differ in the canary's label alone.
    row = spec.settings["canary_row"]
    assert row == {"first": 0, "middle": 1, "last": 2,
                   None: 0}[spec.position]
    differ = np.flatnonzero(np.asarray(spec.data_0) !=
                            np.asarray(spec.data_1))
    assert differ.tolist() == [row]


def test_broken_variant_reports_the_unbroken_claim(specs):
  spec = specs["objective_perturbation_huber_clip_skipped"]
  unbroken = specs["objective_perturbation_huber@first"]
  assert spec.broken and not unbroken.broken and spec.position is None
  assert spec.reported_epsilon == unbroken.reported_epsilon
  assert spec.settings["p"] == unbroken.settings["p"]
  assert spec.settings["row_norm"] == 10.0
  with pytest.raises(ValueError, match="broken must be None or one of"):
    audit.objective_perturbation_spec(broken="noise_dropped")


def test_unclipped_release_differs_from_the_release_by_the_clip_alone():
  # On rows of norm ≤ 1 (the clip a no-op) the two draw the same b.
  plan = op.make_plan(epsilon=1.0, num_examples=2, lam=0.5)
  key = jax.random.key(5)
  with jax.enable_x64(True):
    x = jnp.asarray([[0.6, 0.8], [0.0, -1.0]], jnp.float64)
    y = jnp.asarray([1.0, -1.0], jnp.float64)
    mask = jnp.ones((2,), jnp.float64)
    want, got = jax.jit(lambda k: (
        op.release(k, plan, x, y, mask),
        audit.unclipped_release(k, plan, x, y, mask)))(key)
  assert bool(got.converged)
  np.testing.assert_allclose(got.beta, want.beta, atol=1e-12)


@pytest.mark.parametrize("position", audit_spec.POSITIONS)
def test_small_audit_stays_below_the_claim(specs, position):
  spec = specs[f"objective_perturbation_huber@{position}"]
  result = audit_spec.run(jax.random.key(11), spec, trials=20_000)
  assert result.epsilon_lower <= spec.reported_epsilon
  # The Huber hinge's worst case: the audit shows most of ε.
  assert result.epsilon_lower > 0.6 * spec.reported_epsilon


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  audit_checks.assert_caught(specs[name], BROKEN[name])
