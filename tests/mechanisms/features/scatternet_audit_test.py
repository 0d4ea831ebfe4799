"""mechanisms.features.scatternet_audit: the head's claim survives a small
audit at every canary position; its quartered-noise twin is caught."""

import numpy as np
import pytest

from dpcore.audit_spec import POSITIONS
from mechanisms.features import scatternet_audit
from tests import audit_checks

SMALL = {f"scatternet_head@{p}": 20_000 for p in POSITIONS}
BROKEN = {"scatternet_head_noise_quartered": 20_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in scatternet_audit.specs()}


def test_names_and_claims(specs):
  assert list(specs) == [*SMALL, *BROKEN]
  broken = specs["scatternet_head_noise_quartered"]
  assert broken.broken and broken.settings["canary_row"] == 0
  assert broken.settings["noise_multiplier_used"] == 0.25
  assert broken.reported_epsilon == (
      specs["scatternet_head@first"].reported_epsilon)
  # Clipping binds and the W-part carries nearly all of the clipped norm.
  assert 0.99 < specs["scatternet_head@last"].settings["canary_w_share"] < 1


def test_statistic_is_standard_normal_without_the_canary(specs):
  # Without the canary the statistic is the noise on W along one unit
  # direction in units of σC: N(0, 1). A wrong scale would show here.
  import jax  # noqa: PLC0415
  spec = specs["scatternet_head@middle"]
  keys = jax.random.split(jax.random.key(5), 4000)
  stats = np.asarray(jax.vmap(lambda k: spec.statistic(
      spec.mechanism(k, spec.data_0)))(keys))
  assert abs(stats.mean()) < 0.1
  assert 0.95 < stats.std() < 1.05
  with_canary = np.asarray(jax.vmap(lambda k: spec.statistic(
      spec.mechanism(k, spec.data_1)))(keys))
  # Sampled with probability q = 0.5, the canary shifts it by ≈ 1/σ = 1.
  assert 0.4 < with_canary.mean() < 0.6


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_audit_stays_below_the_claim(specs, name):
  audit_checks.assert_below_claim(specs[name], SMALL[name])


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  audit_checks.assert_caught(specs[name], BROKEN[name])
