"""federated.fedsgd_audit: every trust model's claim survives a small
audit at every canary position; the compacted mask is caught at the
first participant (and only there)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import audit_spec, trainer_audit
from dpcore.audit_spec import POSITIONS
from federated import fedsgd, fedsgd_audit
from tests import law

SMALL = {f"fedsgd_{t}@{p}": 20_000 for t in fedsgd_audit.TRUST_MODELS
         for p in POSITIONS}
BROKEN = {"fedsgd_participant_compacted_mask@first": 20_000,
          "fedsgd_server_noise_halved@first": 5_000,
          "fedsgd_local_noise_halved@first": 5_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in fedsgd_audit.specs()}


def test_names_units_and_claims(specs):
  assert list(specs) == [*SMALL, *BROKEN]
  for name, spec in specs.items():
    assert spec.relation == "add_remove"
    unit = "participant" if "participant" in name else "row"
    assert spec.settings["unit"] == unit, name
  for trust in fedsgd_audit.TRUST_MODELS:  # each mode has its variant
    broken = specs[f"fedsgd_{trust}_{fedsgd_audit.BROKEN[trust]}@first"]
    assert broken.broken
    assert broken.reported_epsilon == (
        specs[f"fedsgd_{trust}@first"].reported_epsilon)
  for trust in ("server", "local"):
    spec = specs[f"fedsgd_{trust}_noise_halved@first"]
    assert spec.settings["noise_multiplier_used"] == (
        spec.settings["noise_multiplier"] / 2)
  with pytest.raises(ValueError, match="broken must be None or "
                     "'noise_halved' for trust='server'"):
    fedsgd_audit.fedsgd_spec(trust="server", broken="compacted_mask")
  with pytest.raises(ValueError, match="trust must be"):
    fedsgd_audit.fedsgd_spec(trust="distributed")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_audit_stays_below_the_claim(specs, name):
  spec = specs[name]
  result = audit_spec.run(jax.random.key(11), spec, trials=SMALL[name])
  assert result.epsilon_lower <= spec.reported_epsilon, (
      f"{name}: audited lower bound {result.epsilon_lower:.4f} exceeds the "
      f"library's reported ε {spec.reported_epsilon:.4f}: a privacy bug")
  assert result.epsilon_lower > 0.5 * spec.reported_epsilon


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  spec = specs[name]
  assert spec.broken
  result = audit_spec.run(jax.random.key(12), spec, trials=BROKEN[name])
  assert result.epsilon_lower > spec.reported_epsilon


def test_the_compacted_mask_is_caught_first_and_not_last(specs):
  # The participant mode's old bug over-includes the first participant:
  # the audit finds it there (and the fixed release stays below the claim
  # at the same keys and trials, test_small_audit_stays_below_the_claim).
  spec = specs["fedsgd_participant_compacted_mask@first"]
  last = fedsgd_audit.fedsgd_spec(trust="participant",
                                  broken="compacted_mask", position="last")
  result = audit_spec.run(jax.random.key(12), last, trials=20_000)
  assert result.epsilon_lower < spec.reported_epsilon


# Law tests (tests/law.py) of the audited release, read back at σ = 0 on
# one-hot rows (norm ≤ C: the clip never binds): the weight times the
# plan's divisor counts each unit's uses over the T steps.
def _units_used(trust, broken=None, *, participants=4, rows=2):
  cfg = trainer_audit.SETTINGS
  q, steps = cfg["sampling_rate"], cfg["steps"]
  plan = fedsgd.make_plan([rows] * participants, trust=trust,
                          sampling_rate=q, steps=steps,
                          clip_norm=cfg["clip_norm"], noise_multiplier=0.0,
                          delta=1e-2)
  x = jnp.eye(participants * rows, dtype=jnp.float32).reshape(
      participants, rows, -1)
  keys = jax.random.split(jax.random.key(5), 4000)
  w = jax.jit(jax.vmap(lambda k: fedsgd_audit.release(
      k, plan, x, learning_rate=1.0, broken=broken)))(keys)
  w = np.asarray(w) * plan.divisor
  if trust == "participant":  # each row enters as 1/rows of the mean
    w = w.reshape(len(w), participants, rows).sum(axis=-1)
  return law.counts(w, 1.0)


@pytest.mark.parametrize("trust", fedsgd_audit.TRUST_MODELS)
def test_release_uses_each_unit_at_rate_q(trust):
  cfg = trainer_audit.SETTINGS
  law.assert_law(_units_used(trust), cfg["sampling_rate"],
                 steps=cfg["steps"])


def test_law_rejects_the_compacted_mask():
  cfg = trainer_audit.SETTINGS
  found = law.failures(_units_used("participant", "compacted_mask"),
                       cfg["sampling_rate"], steps=cfg["steps"])
  assert any("inclusion rate" in f for f in found), found
