"""dpcore.dpsgd_audit: DP-SGD's claim survives a small audit at every
canary position; the dropped mask and the skipped clip are caught."""

import jax
import jax.numpy as jnp
import pytest

from dpcore import audit_spec, dpsgd_audit
from dpcore.audit_spec import POSITIONS
from tests import audit_checks, law

SMALL = {f"dpsgd@{p}": 20_000 for p in POSITIONS}
BROKEN = {"dpsgd_mask_dropped": 5_000, "dpsgd_clip_skipped": 5_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in dpsgd_audit.specs()}


def test_names_positions_and_claims(specs):
  assert list(specs) == [*SMALL, *BROKEN]
  for p in POSITIONS:
    spec = specs[f"dpsgd@{p}"]
    assert spec.position == p and not spec.broken
    assert spec.settings["canary_row"] == audit_spec.canary_index(8, p)
  for name in BROKEN:  # first, where padding repeats row 0
    assert specs[name].broken and specs[name].position is None
    assert specs[name].settings["canary_row"] == 0
    assert specs[name].reported_epsilon == (
        specs["dpsgd@first"].reported_epsilon)
  assert specs["dpsgd_clip_skipped"].settings["canary_norm"] == 10.0
  with pytest.raises(ValueError, match="broken must be"):
    dpsgd_audit.dpsgd_spec(broken="noise_dropped")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_audit_stays_below_the_claim(specs, name):
  audit_checks.assert_below_claim(specs[name], SMALL[name])


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  audit_checks.assert_caught(specs[name], BROKEN[name])


# Law tests (tests/law.py): the audited release itself, read back at σ = 0
# on one-hot gradients (each row's norm is C, so the clip never binds):
# step t's update times qN is 1 on the rows its batch used.
LAW_RUNS = 4000


def _rows_used(variant):
  settings = {**dpsgd_audit._DPSGD, "noise_multiplier": 0.0}
  n, q = settings["examples"], settings["sampling_rate"]
  grads = jnp.eye(n, dtype=jnp.float32)
  keys = jax.random.split(jax.random.key(3), LAW_RUNS)
  updates = jax.jit(jax.vmap(lambda k: dpsgd_audit.dpsgd_release(
      k, grads, variant=variant, settings=settings)))(keys)
  return law.counts(updates * q * n, 1.0)  # (runs, T, n)


def test_release_uses_each_row_at_rate_q_every_step():
  used = _rows_used("library")
  q, steps = dpsgd_audit._DPSGD["sampling_rate"], dpsgd_audit._DPSGD["steps"]
  for t in range(steps):
    law.assert_law(used[:, t], q)
  law.assert_law(used.sum(axis=1), q, steps=steps)


def test_law_rejects_the_mask_dropped_release():
  # Padding slots repeat row 0: summed, row 0 is over-counted.
  used = _rows_used("mask_dropped")
  found = law.failures(used[:, 0], dpsgd_audit._DPSGD["sampling_rate"])
  assert found, "the law test did not catch the summed padding"
