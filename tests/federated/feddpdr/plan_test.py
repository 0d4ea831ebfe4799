"""Tests of federated.feddpdr.plan: calibration, the ledger, the shape."""

import dataclasses
import math

import dp_accounting
import jax
import numpy as np
import pytest
from dp_accounting import pld, rdp

from dpcore import accounting, options, shape
from federated import feddpdr, partition
from tests.federated.feddpdr.problems import blobs
from tests.pinned import accounted


@pytest.mark.parametrize("budget_per_classifier", [False, True])
def test_privacy_matches_independent_dp_accounting(budget_per_classifier):
  config = feddpdr.Config(epsilon=0.5, delta=1e-4,
                          budget_per_classifier=budget_per_classifier)
  plan = feddpdr.make_plan(np.array([1000, 2000]), dim=30, num_classes=10,
                         config=config)
  eps1 = eps2 = 0.25
  per_fit = eps2 if budget_per_classifier else eps2 / 10
  assert plan.epsilon_pca == eps1
  assert plan.epsilon_fit == pytest.approx(per_fit)
  # Gaussian step alone (sensitivity √2 under replace-one, the default):
  # dp_accounting's PLD says the analytic σ spends ε₁.
  acc = pld.PLDAccountant(value_discretization_interval=1e-5)
  acc.compose(dp_accounting.GaussianDpEvent(plan.sigma[0] / math.sqrt(2)))
  np.testing.assert_allclose(acc.get_epsilon(1e-4), eps1, rtol=1e-2)
  # Basic composition: ε₁ + K·(per-fit ε).
  basic = eps1 + 10 * per_fit
  np.testing.assert_allclose(plan.privacy["epsilon_basic"], basic,
                             rtol=1e-6)
  # RDP composition computed here directly with dp_accounting
  # (ε-DP ⇒ ε²/2-zCDP, Bun & Steinke 2016).
  r = rdp.RdpAccountant()
  r.compose(dp_accounting.GaussianDpEvent(plan.sigma[0] / math.sqrt(2)))
  r.compose(dp_accounting.ZCDpEvent(per_fit**2 / 2), 10)
  expected = min(basic, r.get_epsilon(1e-4))
  np.testing.assert_allclose(plan.privacy["epsilon"], expected, rtol=1e-6)
  assert plan.privacy["delta"] == 1e-4
  assert plan.privacy["epsilon_nominal"] == 0.5
  if budget_per_classifier:
    assert plan.privacy["epsilon"] > 2.0  # ≈ K·ε₂, far above nominal 0.5


def test_add_remove_calibration_is_accounted_under_replace_one():
  # The paper calibrates DP-PCA for sensitivity 1 (add/remove); the run is
  # accounted under replace-one (√2), so the reported ε exceeds nominal.
  sizes = np.array([500, 500])
  paper = feddpdr.make_plan(sizes, dim=30, num_classes=10,
                            config=feddpdr.Config(epsilon=0.5,
                                                  relation="add_remove"))
  ours = feddpdr.make_plan(sizes, dim=30, num_classes=10,
                           config=feddpdr.Config(epsilon=0.5))
  np.testing.assert_allclose(ours.sigma[0], math.sqrt(2) * paper.sigma[0],
                             rtol=1e-9)
  assert paper.privacy["epsilon"] > ours.privacy["epsilon"]
  r = rdp.RdpAccountant()
  r.compose(dp_accounting.GaussianDpEvent(paper.sigma[0] / math.sqrt(2)))
  r.compose(dp_accounting.ZCDpEvent(0.025**2 / 2), 10)
  np.testing.assert_allclose(paper.privacy["epsilon"],
                             min(paper.privacy["epsilon_basic"],
                                 r.get_epsilon(1e-4)), rtol=1e-6)


def test_paper_calibration_and_other_mechanisms_budget():
  sizes = np.array([500, 500])
  classic = feddpdr.make_plan(
      sizes, dim=30, num_classes=10, config=feddpdr.Config(
          epsilon=0.5, calibration="classic", relation="add_remove"))
  np.testing.assert_allclose(classic.sigma[0], math.sqrt(
      2 * math.log(1.25 / 1e-4)) / 0.25)
  dpml = feddpdr.make_plan(sizes, dim=30, num_classes=10,
                         config=feddpdr.Config(mechanism="dpml",
                                               epsilon=0.5))
  assert dpml.epsilon_pca is None and dpml.epsilon_fit == pytest.approx(0.05)
  np.testing.assert_allclose(dpml.privacy["epsilon"], 0.5, rtol=1e-6)
  nonpriv = feddpdr.make_plan(sizes, dim=30, num_classes=10,
                            config=feddpdr.Config(mechanism="nonpriv"))
  assert nonpriv.privacy == accounting.no_guarantee_record(
      accounting.NON_PRIVATE)
  assert nonpriv.epsilon_fit is None and not np.any(nonpriv.sigma)
  with pytest.raises(ValueError, match="classic"):
    feddpdr.make_plan(sizes, dim=30, num_classes=10, config=feddpdr.Config(
        epsilon=2.0, calibration="classic"))
  # p and θ use each participant's own n.
  uneven = feddpdr.make_plan(np.array([100, 10_000]), dim=30, num_classes=10,
                           config=feddpdr.Config(epsilon=0.5))
  assert uneven.theta[0] > uneven.theta[1]


# The privacy record's ε at /tmp/base (before the one shape: prepare and
# participant_ledger) for sizes [1000, 2000], d = 30, K = 10, ε = 0.5,
# δ = 1e-4, k = 5; the plan's record gives the same.
BASE_EPSILON = [
    ({}, 0.38590900133424855),
    ({"mechanism": "dpml"}, 0.5),
    ({"budget_per_classifier": True}, 2.75),
    ({"relation": "add_remove"}, 0.49614018343383637),
    ({"calibration": "classic"}, 0.3046824557805051),
]


@pytest.mark.parametrize("settings, epsilon", BASE_EPSILON)
def test_the_plan_has_the_shape_and_records_as_before(settings, epsilon):
  config = feddpdr.Config(epsilon=0.5, delta=1e-4, k=5, **settings)
  plan = feddpdr.make_plan(np.array([1000, 2000]), dim=30, num_classes=10,
                           config=config)
  shape.check_plan(plan)
  shape.check_release(feddpdr.release)
  assert plan.epsilon == accounted(epsilon) and plan.delta == 1e-4
  assert plan.target_epsilon == 0.5
  assert plan.relation is options.Relation.REPLACE_ONE
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  assert ledger.guarantee(1e-4).epsilon == accounted(epsilon)
  assert plan.privacy["epsilon"] == accounted(epsilon)
  assert ledger.relation is options.Relation.REPLACE_ONE


def test_a_nonprivate_plan_refuses_to_record():
  plan = feddpdr.make_plan(np.array([10, 20]), dim=30, num_classes=10,
                           config=feddpdr.Config(mechanism="nonpriv", k=5))
  shape.check_plan(plan)
  assert plan.epsilon is None and plan.delta is None
  with pytest.raises(ValueError, match="no_guarantee_record"):
    plan.record(accounting.PrivacyLedger())


@pytest.mark.parametrize("mechanism", ["feddpdr", "nonpriv", "dpml"])
def test_the_plan_is_built_whole_never_written_into(mechanism):
  # make_plan builds every field, then the frozen plan: its privacy record
  # is a field equal to what the plan's own record reports, and nothing
  # sits in the instance's __dict__ beyond the fields.
  config = feddpdr.Config(mechanism=mechanism, epsilon=0.5, k=5)
  plan = feddpdr.make_plan([100, 200], dim=30, num_classes=10, config=config)
  fields = {f.name for f in dataclasses.fields(plan)}
  assert set(vars(plan)) == fields
  with pytest.raises(dataclasses.FrozenInstanceError):
    plan.privacy = {}  # type: ignore[misc]
  if plan.fits:
    ledger = accounting.PrivacyLedger()
    plan.record(ledger)
    assert plan.privacy == ledger.report(
        plan.delta, nominal_epsilon=plan.target_epsilon,
        nominal_note=feddpdr.NOMINAL_NOTE)
    assert plan.epsilon == plan.privacy["epsilon"]
  else:
    assert plan.privacy == accounting.no_guarantee_record(
        accounting.NON_PRIVATE)


def test_release_refuses_fits_that_did_not_converge():
  # The proof covers the exact minimiser only: release itself (not only
  # the pipeline's summary) refuses models whose fits stopped at max_iter.
  x, labels = blobs(300, 8, 3, 1)
  parts = partition.partition(jax.random.key(0), x, labels,
                              sizes=(100, 120, 80))
  config = feddpdr.Config(mechanism="feddpdr", k=3, epsilon=1.0)
  plan = feddpdr.make_plan(parts.sizes, dim=8, num_classes=3,
                           config=dataclasses.replace(config, max_iter=1))
  with pytest.raises(feddpdr.ConvergenceError, match="max_iter=1 "):
    feddpdr.release(jax.random.key(1), plan, parts)
  plan = feddpdr.make_plan(parts.sizes, dim=8, num_classes=3, config=config)
  out = feddpdr.release(jax.random.key(1), plan, parts)
  assert bool(np.all(out.converged))
