"""federated.ddgsgd_audit: the distributed mode's claim survives a small
audit at every canary position; a share of σ/P and rounding without the
norm bound are caught."""

import pytest

from dpcore.audit_spec import POSITIONS
from federated import ddgsgd_audit
from tests import audit_checks

SMALL = {f"fedsgd_distributed@{p}": 20_000 for p in POSITIONS}
BROKEN = {"fedsgd_distributed_share_over_p": 5_000,
          "fedsgd_distributed_unbounded_rounding": 20_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in ddgsgd_audit.specs()}


def test_names_positions_and_claims(specs):
  assert list(specs) == [*SMALL, *BROKEN]
  rows = {"first": 0, "middle": 4, "last": 7}  # 2 participants × 4 rows
  for p in POSITIONS:
    spec = specs[f"fedsgd_distributed@{p}"]
    assert spec.position == p and not spec.broken
    assert spec.settings["canary_unit"] == rows[p]
    assert spec.settings["trust"] == "distributed"
    assert spec.relation == "add_remove"
    assert spec.reported_epsilon == specs[
        "fedsgd_distributed@first"].reported_epsilon
  for name in BROKEN:
    assert specs[name].broken and specs[name].position is None
  # The σ/P variant is reported with the unbroken plan's ε (same q, T, σ:
  # only P differs, and the sum of P shares is what is accounted).
  over = specs["fedsgd_distributed_share_over_p"]
  assert over.reported_epsilon == pytest.approx(
      specs["fedsgd_distributed@first"].reported_epsilon, rel=1e-3)
  assert over.settings["run_sigma_share"] == pytest.approx(
      over.settings["sigma_share"] / 2, rel=1e-2)  # σ/P = (σ/√P)/√P, P = 4
  # The unbounded-rounding variant claims Δ = c = ½ where the library's
  # bound for its grid is 1.
  rounding = specs["fedsgd_distributed_unbounded_rounding"]
  assert rounding.settings["claimed_sensitivity"] == 0.5
  assert rounding.settings["library_sensitivity"] == 1.0
  with pytest.raises(ValueError, match="broken must be"):
    ddgsgd_audit.distributed_spec(broken="noise_dropped")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_audit_stays_below_the_claim(specs, name):
  audit_checks.assert_below_claim(specs[name], SMALL[name])


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  audit_checks.assert_caught(specs[name], BROKEN[name])
