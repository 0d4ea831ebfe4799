"""mechanisms.lvq.init_audit: both private inits' claims survive a small
audit at every canary position, at d = 1 and d = 4; the box-skipped inits
and, at d = 4, the inits whose noise forgets d are caught."""

import jax
import numpy as np
import pytest

from dpcore.audit_spec import POSITIONS
from mechanisms.lvq import init, init_audit
from tests import audit_checks

SMALL = {f"lvq_init_{k}{d}@{p}": 20_000 for d in ("", "_d4")
         for k in ("laplace", "gaussian") for p in POSITIONS}
BROKEN = {"lvq_init_laplace_box_skipped": 5_000,
          "lvq_init_gaussian_box_skipped": 5_000,
          "lvq_init_laplace_d4_scale_as_d1": 50_000,
          "lvq_init_gaussian_d4_scale_as_d1": 50_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in init_audit.specs()}


def test_names_positions_and_claims(specs):
  assert list(specs) == [*list(SMALL)[:6], *list(BROKEN)[:2],
                         *list(SMALL)[6:], *list(BROKEN)[2:]]
  for name in SMALL:
    assert specs[name].reported_epsilon == pytest.approx(1.0)
    assert specs[name].relation == "add_remove" and not specs[name].broken
  for kind in ("laplace", "gaussian"):
    broken = specs[f"lvq_init_{kind}_box_skipped"]
    assert broken.broken and broken.position is None
    assert broken.reported_epsilon == specs[f"lvq_init_{kind}@first"] \
        .reported_epsilon
  # The canary sits where the position says; without it the rows are the
  # same (add/remove).
  for p in POSITIONS:
    spec = specs[f"lvq_init_laplace@{p}"]
    (x_0, y_0), (x_1, y_1) = spec.data_0, spec.data_1
    at = spec.settings["canary_row"]
    # Outside the box: the library clips it to 1, the broken variant not.
    assert x_1[at, 0] == init_audit.CANARY_OUTSIDE == 10.0 and y_1[at] == 0
    np.testing.assert_array_equal(np.delete(x_1, at, axis=0), x_0)
    np.testing.assert_array_equal(np.delete(y_1, at), y_0)
  # At d = 4 the canary is the corner (10, …, 10), boxed to (1, …, 1).
  wide = specs["lvq_init_gaussian_d4@middle"]
  at = wide.settings["canary_row"]
  np.testing.assert_array_equal(wide.data_1[0][at], [10.0] * 4)
  assert not wide.data_0[0].any() and wide.settings["dim"] == 4
  for kind in ("laplace", "gaussian"):
    broken = specs[f"lvq_init_{kind}_d4_scale_as_d1"]
    assert broken.broken and broken.reported_epsilon == specs[
        f"lvq_init_{kind}_d4@first"].reported_epsilon
  with pytest.raises(ValueError, match="broken must be"):
    init_audit.init_spec(broken="noise_dropped")
  with pytest.raises(ValueError, match="broken must be"):
    init_audit.init_spec(broken="box_skipped", dim=4)


def test_unclipped_release_is_the_release_inside_the_box():
  # In the box the clip is a no-op: the two draw the same prototypes.
  plan = init.make_laplace_plan(epsilon=1.0, dim=2)
  x = np.array([[0.5, -0.2], [0.1, 0.9], [-1.0, 0.3]], np.float32)
  y = np.array([0, 1, 1], np.int32)
  key = jax.random.key(5)
  np.testing.assert_allclose(
      init_audit.unclipped_laplace(key, plan, x, y, num_classes=2),
      init.release_laplace(key, plan, x, y, num_classes=2), rtol=1e-6)


def test_scaled_as_d1_is_the_release_at_d1():
  # Only the dimension factor of the scale differs: at d = 1 the broken
  # variant draws the library's own prototypes, for both inits.
  x = np.array([[0.5], [0.1], [-1.0], [3.0]], np.float32)
  y = np.array([0, 1, 1, 0], np.int32)
  key = jax.random.key(6)
  for plan, release in (
      (init.make_laplace_plan(epsilon=1.0, dim=1), init.release_laplace),
      (init.make_gaussian_plan(epsilon=1.0, delta=1e-5, dim=1),
       init.release_gaussian)):
    np.testing.assert_allclose(
        init_audit.scaled_as_d1(key, plan, x, y, num_classes=2),
        release(key, plan, x, y, num_classes=2), rtol=1e-6)


@pytest.mark.parametrize(("name", "power"), [
    ("lvq_init_laplace@middle", 0.5), ("lvq_init_gaussian@last", 0.5),
    ("lvq_init_gaussian_d4@middle", 0.5),
    # The wide Laplace statistic reads the sums, whose share of ε₁ is one
    # half (their likelihood ratio is at most d·1/(2d/ε₁) = ε₁/2): at
    # most 0.5 of the claim can show.
    ("lvq_init_laplace_d4@first", 0.25)])
def test_small_audit_stays_below_the_claim(specs, name, power):
  audit_checks.assert_below_claim(specs[name], SMALL[name], power=power)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  audit_checks.assert_caught(specs[name], BROKEN[name])
