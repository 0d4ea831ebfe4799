"""dpcore.dpsgd_audit: DP-SGD's claim survives a small audit at every
canary position; the dropped mask and the skipped clip are caught."""

import jax
import pytest

from dpcore import audit_spec, dpsgd_audit
from dpcore.audit_spec import POSITIONS

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
  spec = specs[name]
  result = audit_spec.run(jax.random.key(11), spec, trials=SMALL[name])
  assert result.epsilon_lower <= spec.reported_epsilon
  assert result.epsilon_lower > 0.5 * spec.reported_epsilon


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  spec = specs[name]
  result = audit_spec.run(jax.random.key(12), spec, trials=BROKEN[name])
  assert result.epsilon_lower > spec.reported_epsilon
