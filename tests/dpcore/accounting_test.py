"""Tests for dpcore.accounting.PrivacyLedger against direct dp_accounting
computations on the same events."""

import json
import math

import dp_accounting
import pytest
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp

from dpcore import accounting
from dpcore.accounting import BudgetExceededError, PrivacyLedger

DELTA = 1e-5


def _rdp(*events, delta=DELTA):
  acc = dp_rdp.RdpAccountant()
  acc.compose(dp_accounting.ComposedDpEvent(list(events)))
  return acc.get_epsilon(delta)


def _pld(*events, delta=DELTA):
  acc = dp_pld.PLDAccountant()
  acc.compose(dp_accounting.ComposedDpEvent(list(events)))
  return acc.get_epsilon(delta)


def test_empty_ledger():
  g = PrivacyLedger().guarantee(DELTA)
  assert (g.epsilon, g.delta, g.method) == (0.0, 0.0, "none")


def test_record_laplace_matches_dp_accounting():
  ledger = PrivacyLedger()
  ledger.record_laplace(scale=4.0, sensitivity=2.0, label="counts", count=5,
                        relation="add_remove")
  g = ledger.guarantee(DELTA)
  event = dp_accounting.SelfComposedDpEvent(
      dp_accounting.LaplaceDpEvent(2.0), 5)  # scale / sensitivity
  assert g.basic_epsilon == pytest.approx(5 * 2.0 / 4.0)
  assert g.basic_delta == 0.0
  assert g.rdp_epsilon == pytest.approx(_rdp(event), rel=1e-9)
  assert g.pld_epsilon == pytest.approx(_pld(event), rel=1e-9)
  assert g.epsilon == min(g.basic_epsilon, g.rdp_epsilon, g.pld_epsilon)
  # Pure steps only and no δ asked: pure ε by basic composition, δ = 0.
  g0 = ledger.guarantee()
  assert (g0.epsilon, g0.delta, g0.method) == (2.5, 0.0, "basic")


def test_record_gaussian_matches_dp_accounting():
  ledger = PrivacyLedger()
  ledger.record_gaussian(sigma=6.0, sensitivity=2.0, delta=DELTA,
                         label="pca", count=4, relation="add_remove")
  g = ledger.guarantee(DELTA)
  event = dp_accounting.SelfComposedDpEvent(
      dp_accounting.GaussianDpEvent(3.0), 4)
  assert g.rdp_epsilon == pytest.approx(_rdp(event), rel=1e-9)
  assert g.pld_epsilon == pytest.approx(_pld(event), rel=1e-9)
  # Basic ε is exact: 4 Gaussians of σ/Δ = 3 are one of σ/Δ = 3/√4.
  assert g.basic_epsilon == pytest.approx(
      dp_accounting.get_epsilon_gaussian(1.5, DELTA), rel=1e-8)
  assert g.basic_delta == DELTA
  # The exact ε is the smallest; PLD (pessimistic) is within 1e-3 of it.
  assert g.epsilon == pytest.approx(g.basic_epsilon, rel=1e-3)
  assert g.rdp_epsilon > g.basic_epsilon


def test_single_gaussian_against_pld_of_gaussian_mechanism():
  ledger = PrivacyLedger()
  ledger.record_gaussian(sigma=5.0, sensitivity=2.0, delta=DELTA, label="q",
                         relation="add_remove")
  pld = dp_pld.privacy_loss_distribution.from_gaussian_mechanism(
      5.0, sensitivity=2.0)
  g = ledger.guarantee(DELTA)
  assert g.pld_epsilon == pytest.approx(pld.get_epsilon_for_delta(DELTA),
                                        rel=1e-6)
  assert accounting.gaussian_epsilon(noise_multiplier=2.5, delta=DELTA) == (
      pytest.approx(pld.get_epsilon_for_delta(DELTA), rel=1e-6))


def test_record_subsampled_gaussian_matches_rdp():
  ledger = PrivacyLedger(use_pld=False)
  ledger.record_subsampled_gaussian(noise_multiplier=1.1, sampling_rate=0.01,
                                    steps=1000, delta=DELTA, label="sgd",
                                    relation="add_remove")
  event = dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(
          0.01, dp_accounting.GaussianDpEvent(1.1)), 1000)
  g = ledger.guarantee(DELTA)
  assert g.rdp_epsilon == pytest.approx(_rdp(event), rel=1e-9)
  assert g.epsilon == pytest.approx(_rdp(event), rel=1e-9)
  assert g.pld_epsilon is None
  assert accounting.dpsgd_epsilon(noise_multiplier=1.1, sampling_rate=0.01,
                                  steps=1000, delta=DELTA) == (
                                      pytest.approx(_rdp(event), rel=1e-9))


def test_record_pure_and_exponential_zcdp():
  ledger = PrivacyLedger()
  ledger.record_pure(0.5, label="objective", count=3, relation="add_remove")
  ledger.record_exponential(0.2, label="select", count=10,
                            relation="add_remove")
  g = ledger.guarantee(DELTA)
  assert g.basic_epsilon == pytest.approx(3 * 0.5 + 10 * 0.2)
  assert g.basic_delta == 0.0
  want = _rdp(dp_accounting.ZCDpEvent(3 * 0.5**2 / 2 + 10 * 0.2**2 / 8))
  assert g.rdp_epsilon == pytest.approx(want, rel=1e-9)
  assert g.pld_epsilon is None  # zCDP events have no PLD
  assert g.epsilon == min(g.basic_epsilon, g.rdp_epsilon)


def test_exponential_400_selections():
  # 400 selections at ε = 1: basic 400, zCDP ρ = 50 → ε ≈ 96.1 at 1e-5
  # (below the textbook conversion ρ + 2√(ρ ln 1/δ) ≈ 98.0).
  ledger = PrivacyLedger()
  ledger.record_exponential(1.0, label="selections", count=400,
                            relation="add_remove")
  g = ledger.guarantee(DELTA)
  assert g.basic_epsilon == 400.0
  assert g.epsilon == pytest.approx(96.1, abs=0.05)
  assert g.method == "rdp"
  assert g.epsilon < 50 + 2 * math.sqrt(50 * math.log(1 / DELTA))


def test_mixed_composition_matches_direct():
  ledger = PrivacyLedger()
  ledger.record_laplace(scale=2.0, sensitivity=1.0, label="lap",
                        relation="add_remove")
  ledger.record_gaussian(sigma=4.0, sensitivity=1.0, delta=1e-6, label="g",
                         count=2, relation="add_remove")
  ledger.record_subsampled_gaussian(noise_multiplier=1.0, sampling_rate=0.02,
                                    steps=100, delta=1e-6, label="sgd",
                                    relation="add_remove")
  events = [e.dp_event for e in ledger.entries]
  g = ledger.guarantee(DELTA)
  assert g.rdp_epsilon == pytest.approx(_rdp(*events), rel=1e-9)
  assert g.pld_epsilon == pytest.approx(_pld(*events), rel=1e-9)
  assert g.basic_epsilon == pytest.approx(
      sum(e.epsilon for e in ledger.entries))
  assert g.basic_delta == pytest.approx(2e-6)
  assert g.epsilon == min(g.basic_epsilon, g.rdp_epsilon, g.pld_epsilon)
  assert g.delta == DELTA and g.method in ("rdp", "pld")
  # Adding a pure step takes PLD out (zCDP) but RDP still composes all.
  ledger.record_pure(0.1, label="pure", relation="add_remove")
  g2 = ledger.guarantee(DELTA)
  assert g2.pld_epsilon is None
  assert g2.rdp_epsilon == pytest.approx(
      _rdp(*events, dp_accounting.ZCDpEvent(0.1**2 / 2)), rel=1e-9)


def test_approx_steps_are_added_by_basic_composition():
  ledger = PrivacyLedger()
  ledger.record_approx(0.3, 1e-6, label="a", relation="add_remove")
  ledger.record_approx(0.2, 2e-6, label="b", relation="add_remove")
  g = ledger.guarantee(DELTA)
  assert (g.epsilon, g.method) == (pytest.approx(0.5), "basic")
  assert g.delta == pytest.approx(3e-6)
  assert g.rdp_epsilon is None and g.pld_epsilon is None
  # Mixed with a Gaussian: the Gaussian is composed exactly at the δ left.
  ledger.record_gaussian(sigma=3.0, sensitivity=1.0, delta=1e-6, label="g",
                         count=3, relation="add_remove")
  g = ledger.guarantee(DELTA)
  gauss = dp_accounting.SelfComposedDpEvent(
      dp_accounting.GaussianDpEvent(3.0), 3)
  rest = DELTA - 3e-6
  assert g.rdp_epsilon == pytest.approx(0.5 + _rdp(gauss, delta=rest),
                                        rel=1e-9)
  assert g.pld_epsilon == pytest.approx(0.5 + _pld(gauss, delta=rest),
                                        rel=1e-9)
  assert g.method in ("rdp+basic", "pld+basic", "basic")
  assert g.delta == DELTA or g.method == "basic"
  assert g.epsilon == min(g.basic_epsilon, g.rdp_epsilon, g.pld_epsilon)


def test_delta_below_basic_delta():
  ledger = PrivacyLedger()
  ledger.record_gaussian(sigma=3.0, sensitivity=1.0, delta=1e-5, label="g",
                         relation="add_remove")
  g = ledger.guarantee(1e-7)  # basic composition cannot give this δ
  assert g.delta == 1e-7 and g.method in ("rdp", "pld")
  assert g.epsilon > accounting.gaussian_epsilon(noise_multiplier=3.0,
                                                 delta=1e-5)
  # An (ε, δ) step whose δ exceeds the asked δ: only basic, at its own δ.
  ledger.record_approx(0.1, 1e-6, label="a", relation="add_remove")
  g = ledger.guarantee(1e-7)
  assert g.method == "basic" and g.delta == pytest.approx(1.1e-5)


def test_budget_refusal_leaves_ledger_unchanged():
  ledger = PrivacyLedger(budget_epsilon=1.0, budget_delta=DELTA)
  ledger.record_laplace(scale=1 / 0.6, sensitivity=1.0, label="first",
                        relation="add_remove")
  before = ledger.report()
  entries = ledger.entries
  with pytest.raises(BudgetExceededError, match="second"):
    ledger.record_laplace(scale=1 / 0.6, sensitivity=1.0, label="second",
                          relation="add_remove")
  with pytest.raises(BudgetExceededError):
    ledger.record_gaussian(sigma=0.5, sensitivity=1.0, delta=1e-6,
                           label="third", relation="add_remove")
  assert ledger.entries == entries
  assert ledger.report() == before
  ledger.record_laplace(scale=1 / 0.3, sensitivity=1.0, label="fits",
                        relation="add_remove")
  assert ledger.guarantee().epsilon <= 1.0 + 1e-9


def test_budget_uses_composition_not_just_basic():
  # 400 selections at ε = 0.1: basic 40 but zCDP (ρ = 0.5) gives ≈ 4.73; a
  # budget of 6 at δ = 1e-5 must accept them all, one of 4.5 refuse them.
  ledger = PrivacyLedger(budget_epsilon=6.0, budget_delta=DELTA)
  ledger.record_exponential(0.1, label="s", count=400, relation="add_remove")
  assert ledger.guarantee().epsilon == pytest.approx(4.73, abs=0.01)
  with pytest.raises(BudgetExceededError):
    PrivacyLedger(budget_epsilon=4.5, budget_delta=DELTA).record_exponential(
        0.1, label="s", count=400, relation="add_remove")


def test_a_pure_budget_refuses_a_truncation_event():
  # δ = 0 on its own, but it makes the composed δ positive: a ledger
  # whose budget is pure refuses it, and keeps what it held.
  ledger = PrivacyLedger(budget_epsilon=1.0)
  ledger.record_pure(0.9, label="fit", relation="replace_one")
  with pytest.raises(BudgetExceededError, match="pure budget"):
    ledger.record_truncation(0.2, label="padding")
  assert [e.label for e in ledger.entries] == ["fit"]
  assert ledger.guarantee().delta == 0.0
  # With a δ budget it is composed and charged.
  both = PrivacyLedger(budget_epsilon=1.0, budget_delta=0.9)
  both.record_pure(0.9, label="fit", relation="replace_one")
  both.record_truncation(0.2, label="padding")
  assert both.guarantee().delta > 0.2


def test_budget_without_delta_refuses_approximate_steps():
  ledger = PrivacyLedger(budget_epsilon=2.0)
  ledger.record_pure(1.0, label="pure",
                     relation="add_remove")  # pure steps need no δ
  with pytest.raises(ValueError, match="budget_delta"):
    ledger.record_gaussian(sigma=5.0, sensitivity=1.0, delta=1e-6,
                           label="g", relation="add_remove")
  assert len(ledger.entries) == 1


def test_calibrate_dpsgd_noise_round_trip():
  kw = dict(sampling_rate=0.01, steps=500, delta=DELTA)
  sigma = accounting.calibrate_dpsgd_noise(epsilon=2.0, **kw)
  assert accounting.dpsgd_epsilon(noise_multiplier=sigma, **kw) <= 2.0
  assert accounting.dpsgd_epsilon(noise_multiplier=sigma * (1 - 1e-4),
                                  **kw) > 2.0


def test_truncation_beside_a_step_known_only_by_its_epsilon_delta():
  # An (ε, δ) step can only be composed at its own δ: the truncation's
  # (1 + e^ε)·P comes on top of it, not inside the asked-for δ (the
  # report said δ = 1e-5 here before).
  ledger = accounting.PrivacyLedger()
  ledger.record_approx(1.0, 1e-5, label="step", relation="add_remove")
  ledger.record_truncation(1e-6, label="padding")
  report = ledger.report(1e-5)
  assert report["epsilon"] == pytest.approx(1.0)
  assert report["delta"] == pytest.approx(1e-5 + (1 + math.e) * 1e-6)


def test_truncation_event_is_paid_for_in_delta():
  # A Gaussian step plus a truncation event of probability P: the ideal
  # step is composed at δ′ = δ − (1 + e^ε½)·P, ε½ its ε at δ/2.
  p = 2e-7
  ledger = PrivacyLedger()
  ledger.record_gaussian(sigma=2.0, sensitivity=1.0, delta=DELTA, label="g",
                         relation="add_remove")
  ideal = ledger.guarantee(DELTA)
  ledger.record_truncation(p, label="padding")
  g = ledger.guarantee(DELTA)
  event = dp_accounting.GaussianDpEvent(2.0)
  eps_half = dp_accounting.get_epsilon_gaussian(2.0, DELTA / 2)
  inner = DELTA - (1 + math.exp(eps_half)) * p
  exact = dp_accounting.get_epsilon_gaussian(2.0, inner)
  assert g.delta == DELTA and g.truncation_probability == p
  assert g.epsilon == pytest.approx(exact, rel=1e-3)
  assert g.pld_epsilon == pytest.approx(_pld(event, delta=inner), rel=1e-9)
  # It costs something: the ε at δ is above the ideal step's, and the
  # bound (ideal δ′ plus the truncation's (1 + e^ε)·P) fits in δ.
  assert g.epsilon > ideal.epsilon * (1 + 1e-4)
  assert inner + (1 + math.exp(g.epsilon)) * p <= DELTA
  # Without a target δ: the steps' own δ plus (1 + e^ε)·P.
  g0 = ledger.guarantee()
  assert g0.delta == pytest.approx(DELTA + (1 + math.exp(g0.epsilon)) * p)
  # P too large for the δ asked: the larger δ that holds is reported.
  big = PrivacyLedger()
  big.record_gaussian(sigma=2.0, sensitivity=1.0, delta=DELTA, label="g",
                      relation="add_remove")
  big.record_truncation(1e-5, label="padding")
  gb = big.guarantee(DELTA)
  assert gb.delta > DELTA
  assert gb.epsilon == pytest.approx(
      dp_accounting.get_epsilon_gaussian(2.0, DELTA / 2), rel=1e-3)


def test_report_is_json_ready():
  ledger = PrivacyLedger()
  ledger.record_laplace(scale=2.0, sensitivity=1.0, label="lap",
                        relation="add_remove")
  ledger.record_approx(0.5, 1e-6, label="approx", relation="add_remove")
  s = json.loads(json.dumps(ledger.report(DELTA)))
  assert [e["label"] for e in s["entries"]] == ["lap", "approx"]
  assert s["epsilon"] == ledger.guarantee(DELTA).epsilon


@pytest.mark.parametrize("call,name", [
    (lambda led: led.record_pure(0.0, label="x",
                                 relation="add_remove"), "epsilon"),
    (lambda led: led.record_pure(1.0, label="x", count=0,
                                 relation="add_remove"), "count"),
    (lambda led: led.record_laplace(scale=-1.0, sensitivity=1.0, label="x",
                                    relation="add_remove"),
     "scale"),
    (lambda led: led.record_gaussian(sigma=1.0, sensitivity=1.0, delta=0.0,
                                 label="x", relation="add_remove"), "delta"),
    (lambda led: led.record_gaussian(sigma=math.nan, sensitivity=1.0,
                                 delta=1e-5, label="x",
                                     relation="add_remove"), "sigma"),
    (lambda led: led.record_approx(1.0, 1.5, label="x",
                                   relation="add_remove"), "delta"),
    (lambda led: led.record_subsampled_gaussian(
        noise_multiplier=1.0, sampling_rate=0.0, steps=1, delta=1e-5,
        label="x", relation="add_remove"), "sampling_rate"),
    (lambda led: led.record_subsampled_gaussian(
        noise_multiplier=1.0, sampling_rate=0.1, steps=1.5, delta=1e-5,
        label="x", relation="add_remove"), "steps"),
    (lambda led: led.record_exponential(math.inf, label="x",
                                        relation="add_remove"), "epsilon"),
    (lambda led: led.record_truncation(1.5, label="x"), "probability"),
    (lambda led: led.record_truncation(-1e-9, label="x"), "probability"),
    (lambda led: led.guarantee(delta=2.0), "delta"),
])
def test_bad_arguments_are_named(call, name):
  ledger = PrivacyLedger()
  with pytest.raises(ValueError, match=name):
    call(ledger)
  assert not ledger.entries


def test_bad_module_function_arguments_are_named():
  with pytest.raises(ValueError, match="budget_epsilon"):
    PrivacyLedger(budget_epsilon=-1.0)
  with pytest.raises(ValueError, match="budget_delta"):
    PrivacyLedger(budget_epsilon=1.0, budget_delta=0.0)
  with pytest.raises(ValueError, match="noise_multiplier"):
    accounting.dpsgd_epsilon(noise_multiplier=0.0, sampling_rate=0.1,
                             steps=10, delta=DELTA)
  with pytest.raises(ValueError, match="steps"):
    accounting.calibrate_dpsgd_noise(epsilon=1.0, delta=DELTA,
                                     sampling_rate=0.1, steps=0)
  with pytest.raises(ValueError, match="delta"):
    accounting.gaussian_epsilon(noise_multiplier=1.0, delta=1.0)


def test_every_record_has_the_same_fields_in_order():
  ledger = PrivacyLedger()
  ledger.record_gaussian(sigma=2.0, sensitivity=1.0, delta=DELTA,
                         label="g", relation="add_remove")
  rec = ledger.report(DELTA, nominal_epsilon=0.5, nominal_note="paper")
  none = accounting.no_guarantee_record(accounting.NON_PRIVATE)
  assert tuple(rec) == accounting.PRIVACY_FIELDS == tuple(none)
  assert rec["epsilon"] == ledger.guarantee(DELTA).epsilon
  assert rec["epsilon_nominal"] == 0.5 and rec["no_guarantee"] is None
  assert none["epsilon"] is None and none["method"] == "no_guarantee"
  with pytest.raises(ValueError, match="why"):
    accounting.no_guarantee_record("")


# -- DP-SGD: one step-count rule for the accountant and the trainer ----------

def test_dpsgd_epochs_are_turned_into_steps_by_the_one_rule():
  # E = 2.6 epochs at q = 0.01: T = round(260) = 260 (the trainer's T).
  kw = dict(noise_multiplier=1.1, sampling_rate=0.01, delta=DELTA)
  by_epochs = accounting.dpsgd_epsilon(epochs=2.6, **kw)
  assert by_epochs == accounting.dpsgd_epsilon(steps=260, **kw)
  assert by_epochs != accounting.dpsgd_epsilon(steps=259, **kw)
  assert by_epochs == pytest.approx(_rdp(accounting.dpsgd_event(
      1.1, 0.01, 260)))
  sigma = accounting.calibrate_dpsgd_noise(
      epsilon=1.0, delta=DELTA, sampling_rate=0.01, epochs=2.6)
  assert sigma == accounting.calibrate_dpsgd_noise(
      epsilon=1.0, delta=DELTA, sampling_rate=0.01, steps=260)
  assert accounting.dpsgd_steps(sampling_rate=0.3, epochs=1) == 3


@pytest.mark.parametrize("kwargs", [{}, {"steps": 10, "epochs": 1}])
def test_dpsgd_needs_exactly_one_of_steps_and_epochs(kwargs):
  with pytest.raises(ValueError, match="exactly one of steps= and epochs="):
    accounting.dpsgd_epsilon(noise_multiplier=1.0, sampling_rate=0.1,
                             delta=DELTA, **kwargs)
  with pytest.raises(ValueError, match="exactly one of steps= and epochs="):
    accounting.calibrate_dpsgd_noise(epsilon=1.0, delta=DELTA,
                                     sampling_rate=0.1, **kwargs)


def test_zcdp_epsilon_is_the_one_conversion():
  # ρ = Δ²/2σ² = 0.5 per release, three releases: the ledger's entry and
  # the calibration both read ε from accounting.zcdp_epsilon.
  eps = accounting.zcdp_epsilon(rho=0.5, delta=1e-5, count=3)
  ledger = PrivacyLedger()
  ledger.record_discrete_gaussian(sigma=1.0, sensitivity=1.0, delta=1e-5,
                                  count=3, label="q", relation="add_remove")
  assert ledger.entries[0].epsilon == eps
  # k-fold composition of ρ-zCDP is kρ-zCDP.
  assert eps == pytest.approx(
      accounting.zcdp_epsilon(rho=1.5, delta=1e-5), rel=1e-12)
  # Between ρ and the closed form ρ + 2√(ρ log(1/δ)) (Bun & Steinke 2016,
  # Prop. 1.3), which the RDP conversion improves on; a wrong ρ (×1.2)
  # moves ε outside 1 % of it.
  rho = 1.5
  assert rho < eps < rho + 2 * math.sqrt(rho * math.log(1e5))
  assert accounting.zcdp_epsilon(rho=1.2 * rho, delta=1e-5) > 1.01 * eps


def test_accountant_calls_print_no_convergence_warnings():
  # dp_accounting warns (through absl's logger) for every fractional RDP
  # order whose series does not converge at these settings; the library's
  # calls drop that note (the remaining orders still bound ε) and print
  # nothing. A handler on absl's logger sees what would be printed.
  import logging

  from dp_accounting import rdp as dp_rdp

  seen = []

  class Keep(logging.Handler):
    def emit(self, record):
      seen.append(record.getMessage())

  absl_logger = logging.getLogger("absl")
  handler, level = Keep(level=logging.WARNING), absl_logger.level
  absl_logger.addHandler(handler)
  absl_logger.setLevel(logging.WARNING)
  try:
    event = accounting.dpsgd_event(1.0, 0.2, 10)
    raw = dp_rdp.RdpAccountant().compose(event).get_epsilon(1e-5)
    noisy = [m for m in seen if "failed to converge" in m]
    assert noisy, "the library calls below would have nothing to silence"
    seen.clear()
    ours = accounting.dpsgd_epsilon(noise_multiplier=1.0, sampling_rate=0.2,
                                    steps=10, delta=1e-5)
    sigma = accounting.calibrate_dpsgd_noise(
        epsilon=2.0, delta=1e-5, sampling_rate=0.2, steps=10)
    assert not [m for m in seen if "failed to converge" in m]
    assert ours == raw and sigma > 0  # the same orders, the same ε
    # The filter is gone after the call: other code's warnings still show.
    dp_rdp.RdpAccountant().compose(event).get_epsilon(1e-5)
    assert [m for m in seen if "failed to converge" in m]
  finally:
    absl_logger.removeHandler(handler)
    absl_logger.setLevel(level)


# -- the neighbouring relation -------------------------------------------------


def _record_each(ledger, relation):
  """One entry of every recording method that takes either relation, all
  under ``relation`` (subsampled Gaussian steps: add/remove only, below)."""
  ledger.record_pure(0.1, label="pure", relation=relation)
  ledger.record_laplace(scale=10.0, sensitivity=1.0, label="lap",
                        relation=relation)
  ledger.record_gaussian(sigma=20.0, sensitivity=1.0, delta=1e-7,
                         label="gauss", relation=relation)
  ledger.record_discrete_gaussian(sigma=40.0, sensitivity=2.0, delta=1e-7,
                                  label="dgauss", relation=relation)
  ledger.record_discrete_laplace(scale=20.0, sensitivity=2.0, label="dlap",
                                 relation=relation)
  ledger.record_approx(0.1, 1e-7, label="approx", relation=relation)
  ledger.record_exponential(0.1, label="exp", relation=relation)
  ledger.record_truncation(1e-12, label="pad")


@pytest.mark.parametrize("relation", ["add_remove", "replace_one"])
def test_every_entry_and_the_record_carry_the_relation(relation):
  ledger = PrivacyLedger()
  assert ledger.relation is None
  _record_each(ledger, relation)
  assert ledger.relation == relation
  assert [e.relation for e in ledger.entries] == [relation] * 7 + [None]
  rec = ledger.report(DELTA)
  assert rec["relation"] == relation == ledger.guarantee(DELTA).relation
  assert [e["relation"] for e in rec["entries"]] == [relation] * 7 + [None]
  # Plain strings in the JSON record, as spelled in dpcore.options.
  assert json.loads(json.dumps(rec))["relation"] == relation
  assert type(rec["relation"]) is str


def test_subsampled_gaussian_steps_are_refused_under_replace_one():
  # Their amplification is accounted under add/remove; under replace-one
  # the same steps cost more (dp_accounting's PLD: 2.84 against 1.83 for
  # σ = 1, q = 0.01, T = 1000), so the ledger refuses to label them so.
  steps = dict(noise_multiplier=1.0, sampling_rate=0.01, steps=1000,
               delta=1e-5, label="sgd")
  ledger = PrivacyLedger()
  with pytest.raises(ValueError, match="add/remove only"):
    ledger.record_subsampled_gaussian(relation="replace_one", **steps)
  assert not ledger.entries
  ledger.record_subsampled_gaussian(relation="add_remove", **steps)
  assert ledger.relation == "add_remove"


def test_the_relation_changes_no_epsilon():
  # The same steps under either relation: the same numbers, bit for bit.
  a, b = PrivacyLedger(), PrivacyLedger()
  _record_each(a, "add_remove")
  _record_each(b, "replace_one")
  ra, rb = a.report(DELTA), b.report(DELTA)
  for field in accounting.PRIVACY_FIELDS:
    if field not in ("relation", "entries"):
      assert ra[field] == rb[field], field


@pytest.mark.parametrize("method", [
    "record_pure", "record_laplace", "record_gaussian",
    "record_discrete_gaussian", "record_discrete_laplace", "record_approx",
    "record_subsampled_gaussian", "record_exponential"])
def test_a_second_relation_is_refused_by_every_method(method):
  ledger = PrivacyLedger()
  ledger.record_pure(0.5, label="fit", relation="replace_one")
  kwargs = {
      "record_pure": dict(epsilon=0.1),
      "record_laplace": dict(scale=1.0, sensitivity=1.0),
      "record_gaussian": dict(sigma=2.0, sensitivity=1.0, delta=1e-6),
      "record_discrete_gaussian": dict(sigma=2.0, sensitivity=1.0,
                                       delta=1e-6),
      "record_discrete_laplace": dict(scale=2.0, sensitivity=1.0),
      "record_approx": dict(epsilon=0.1, delta=1e-6),
      "record_subsampled_gaussian": dict(noise_multiplier=1.0,
                                         sampling_rate=0.1, steps=3,
                                         delta=1e-6),
      "record_exponential": dict(epsilon=0.1),
  }[method]
  with pytest.raises(ValueError, match=r"recording 'step' under "
                     r"relation=add_remove in a ledger of replace_one "
                     r"steps") as info:
    getattr(ledger, method)(label="step", relation="add_remove", **kwargs)
  assert "\n" not in str(info.value)  # one line
  assert len(ledger.entries) == 1  # nothing was recorded
  assert ledger.report(DELTA)["relation"] == "replace_one"


def test_a_ledger_fixed_to_a_relation_refuses_its_first_other_step():
  ledger = PrivacyLedger(relation="add_remove")
  assert ledger.relation == "add_remove"
  with pytest.raises(ValueError, match="ledger of add_remove steps"):
    ledger.record_exponential(1.0, label="sel", relation="replace_one")
  assert ledger.entries == ()
  with pytest.raises(ValueError, match="relation must be one of "
                     "add_remove, replace_one"):
    PrivacyLedger(relation="swap")


def test_the_relation_is_required_and_checked():
  ledger = PrivacyLedger()
  with pytest.raises(TypeError, match="relation"):
    ledger.record_pure(0.1, label="x")  # pylint: disable=missing-kwoa
  with pytest.raises(ValueError, match="relation must be one of add_remove, "
                     "replace_one .*got 'add-remove'"):
    ledger.record_pure(0.1, label="x", relation="add-remove")
  # The old spelling goes through options.parse_relation, mapped.
  ledger.record_pure(0.1, label="x", relation="replace")
  assert ledger.entries[0].relation == "replace_one"


def test_a_refused_relation_is_checked_before_the_budget():
  ledger = PrivacyLedger(budget_epsilon=1.0)
  ledger.record_pure(0.9, label="a", relation="add_remove")
  with pytest.raises(ValueError, match="relation"):
    ledger.record_pure(5.0, label="b", relation="replace_one")
  with pytest.raises(BudgetExceededError):
    ledger.record_pure(5.0, label="b", relation="add_remove")


def test_entries_gathered_by_hand_of_two_relations_are_refused():
  a, b = PrivacyLedger(), PrivacyLedger()
  a.record_pure(0.1, label="a", relation="add_remove")
  b.record_pure(0.1, label="b", relation="replace_one")
  with pytest.raises(ValueError, match="do not compose"):
    accounting.privacy_record(a.guarantee(), a.entries + b.entries)
  none = accounting.no_guarantee_record("paper", entries=b.entries)
  assert none["relation"] == "replace_one"
  assert accounting.no_guarantee_record("x")["relation"] is None
  assert PrivacyLedger().report()["relation"] is None


# -- plan_epsilon: the ε a plan states ---------------------------------------

class _GaussianPlan:
  """A plan-like object: three Gaussian releases of σ = 4, δ its own."""
  delta = 1e-5

  def record(self, ledger):
    ledger.record_gaussian(sigma=4.0, sensitivity=1.0, delta=self.delta,
                           label="g", relation="add_remove", count=3)


class _PurePlan:
  delta = 0.0

  def record(self, ledger):
    ledger.record_pure(0.25, label="p", relation="replace_one", count=4)


def test_plan_epsilon_is_the_ledgers_guarantee_at_the_plans_delta():
  ledger = PrivacyLedger()
  _GaussianPlan().record(ledger)
  assert accounting.plan_epsilon(_GaussianPlan()) == ledger.guarantee(
      1e-5).epsilon
  # Another δ is another ε (larger for a smaller δ).
  assert accounting.plan_epsilon(_GaussianPlan(), delta=1e-7) == (
      ledger.guarantee(1e-7).epsilon) > ledger.guarantee(1e-5).epsilon
  # A pure plan (δ = 0): basic composition at the entries' own δ.
  assert accounting.plan_epsilon(_PurePlan()) == 1.0


def test_a_negligible_truncation_keeps_basic_composition_of_pure_steps():
  # Ten pure fits of 0.5 and a departure of 2^-100: basic composition's
  # 5.0 still holds at δ = 1e-5 (the events add (1 + e^5)·2^-100); a
  # departure of 1e-6 does not fit δ, and the record says how much more
  # δ it costs.
  # With a step of its own δ = 1e-5 beside them, basic composition spends
  # all of δ, and the events' share is admitted within the ledger's 1e-12
  # relative tolerance.
  def ledger(probability, *, approx=False):
    led = accounting.PrivacyLedger()
    led.record_pure(0.5, label="fit", count=10, relation="replace_one")
    if approx:
      led.record_approx(0.5, 1e-5, label="pca", relation="replace_one")
    led.record_truncation(probability, label="cap")
    return led.guarantee(1e-5)
  tiny = ledger(2.0**-100)
  assert (tiny.epsilon, tiny.delta, tiny.method) == (5.0, 1e-5, "basic")
  both = ledger(2.0**-100, approx=True)
  assert (both.epsilon, both.delta, both.method) == (5.5, 1e-5, "basic")
  large = ledger(1e-6)
  assert large.delta == pytest.approx((1 + math.exp(5.0)) * 1e-6)
