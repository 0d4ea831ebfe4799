"""mechanisms.features.scattering_audit: the features pipeline's claim
survives a small audit at every canary position; its clip-skipped twin
is caught."""

import pytest

from dpcore.audit_spec import POSITIONS
from mechanisms.features import scattering_audit
from tests import audit_checks

SMALL = {f"features_dpsgd@{p}": 20_000 for p in POSITIONS}
BROKEN = {"features_dpsgd_clip_skipped": 20_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in scattering_audit.specs()}


def test_names_and_claims(specs):
  assert list(specs) == [*SMALL, *BROKEN]
  broken = specs["features_dpsgd_clip_skipped"]
  assert broken.broken and broken.settings["canary_row"] == 0
  assert broken.reported_epsilon == (
      specs["features_dpsgd@first"].reported_epsilon)
  # Clipping binds: the canary's features are well above C.
  assert specs["features_dpsgd@last"].settings["canary_feature_norm"] > 2.0


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_audit_stays_below_the_claim(specs, name):
  audit_checks.assert_below_claim(specs[name], SMALL[name])


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  audit_checks.assert_caught(specs[name], BROKEN[name])
