"""dpcore.tuning: the bounds, the law of K, the selection (its audit:
tuning_audit_test)."""

import dataclasses
import json
import math

import dp_accounting
import jax
import numpy as np
import pytest
from dp_accounting.dp_event import RepeatAndSelectDpEvent
from dp_accounting.rdp import rdp_privacy_accountant as rdp_math
from scipy import stats

from dpcore import accounting, tuning

ORDERS = list(tuning.DEFAULT_ORDERS)


def _gaussian_trial(sigma, orders=tuning.DEFAULT_ORDERS):
  ledger = accounting.PrivacyLedger()
  ledger.record_gaussian(sigma=sigma, sensitivity=1.0, delta=1e-5,
                         label="g", relation="add_remove")
  return tuning.trial_privacy(ledger, orders=orders)


def _laplace_trial(epsilon, orders=tuning.DEFAULT_ORDERS):
  ledger = accounting.PrivacyLedger()
  ledger.record_laplace(scale=1.0 / epsilon, sensitivity=1.0, label="l",
                        relation="add_remove")
  return tuning.trial_privacy(ledger, orders=orders)


# -- the bounds against the papers' closed forms ------------------------------


@pytest.mark.parametrize("dist,eta,factor", [
    ("logarithmic", None, 2.0), ("geometric", None, 3.0),
    ("negative_binomial", 0.5, 2.5), ("negative_binomial", 3.0, 5.0),
    ("negative_binomial", -0.5, 1.5)])
def test_pure_trials_give_two_plus_eta_epsilon(dist, eta, factor):
  # Papernot–Steinke Cor. 3: ε-DP trials, K ~ D(η, γ): (2 + η)ε-DP; the
  # geometric case (η = 1) is Liu–Talwar's 3ε.
  count = tuning.trial_count(dist, 10.0, eta=eta)
  trial = tuning.pure_trial(0.7, relation="add_remove")
  g = tuning.tuned_guarantee(trial, count, delta=1e-6)
  assert g.epsilon_pure == pytest.approx(factor * 0.7, rel=1e-12)
  assert g.epsilon <= g.epsilon_pure
  # The RDP route at a huge order (λ, λ̂ → ∞) tends to the same figure.
  trial = _laplace_trial(0.7, orders=(1e9,))
  assert tuning.tuned_rdp(trial, count)[0] == pytest.approx(factor * 0.7,
                                                            rel=1e-6)
  if dist == "geometric":
    assert tuning.liu_talwar_epsilon(0.7) == pytest.approx(g.epsilon_pure)


@pytest.mark.parametrize("eta", [0.0, 0.5, 1.0, 5.0])
@pytest.mark.parametrize("rho,gamma", [(0.01, 0.01), (1.0, 0.1)])
def test_gaussian_trials_match_the_zcdp_corollary(eta, rho, gamma):
  # Papernot–Steinke Cor. 4 (ρ-zCDP trials, ρ ≤ log 1/γ): above
  # λ* = 1 + √(log E[K]/ρ), ε′(λ) = ρ(λ−1) + log E[K]/(λ−1)
  # + 2(1+η)√(ρ log 1/γ) − ηρ; below it, the value at λ*.
  mean = tuning.negative_binomial_mean(eta, gamma)
  lam_hat = math.sqrt(math.log(1 / gamma) / rho)
  star = 1 + math.sqrt(math.log(mean) / rho)
  orders = sorted({1.5, 2.0, 3.0, 5.0, 10.0, 100.0, lam_hat, star} - {1.0})
  orders = [a for a in orders if a > 1]
  trial = _gaussian_trial(math.sqrt(0.5 / rho), orders=orders)
  count = tuning.TrialCount("negative_binomial", mean, eta, gamma)
  got = tuning.tuned_rdp(trial, count)
  const = 2 * (1 + eta) * math.sqrt(rho * math.log(1 / gamma)) - eta * rho
  for lam, value in zip(orders, got, strict=True):
    at = max(lam, star)
    want = rho * (at - 1) + math.log(mean) / (at - 1) + const
    assert value == pytest.approx(want, rel=1e-9), lam
  # The comparison rejects a wrong (1 + η) factor: the same formula with
  # the factor left out is not within its tolerance.
  if eta != 0.0:
    at = max(orders[-1], star)
    wrong = (rho * (at - 1) + math.log(mean) / (at - 1)
             + const - 2 * eta * math.sqrt(rho * math.log(1 / gamma)))
    assert got[-1] != pytest.approx(wrong, rel=1e-9)


def test_eta_one_is_the_geometric_law():
  a = tuning.trial_count("negative_binomial", 8.0, eta=1.0)
  b = tuning.trial_count("geometric", 8.0)
  assert a.gamma == b.gamma == pytest.approx(1 / 8)
  trial = _gaussian_trial(2.0)
  np.testing.assert_allclose(tuning.tuned_rdp(trial, a),
                             tuning.tuned_rdp(trial, b))
  for k in range(1, 6):  # P[K = k] = γ(1 − γ)^(k − 1)
    assert math.exp(b.log_pmf(k)) == pytest.approx((1 / 8) * (7 / 8)**(k - 1))


def test_poisson_pure_closed_form():
  # Thm 6 with an ε-DP trial at λ = 1 + 1/(e^ε − 1), so that ε̂ = ε and
  # δ̂ ≈ 0: ε′ = ε_Laplace(λ) + (e^ε − 1)·log μ.
  eps, mu = 0.5, 30.0
  lam = 1 + 1 / math.expm1(eps)
  trial = _laplace_trial(eps, orders=(lam, 1e10))
  got = tuning.tuned_rdp(trial, tuning.trial_count("poisson", mu))[0]
  want = trial.rdp[0] + math.expm1(eps) * math.log(mu)
  assert got == pytest.approx(want, rel=1e-3)
  assert abs(got - (trial.rdp[0] + math.log(mu) / (lam - 1) * 2)) > 0.1


@pytest.mark.parametrize("dist,eta,shape", [
    ("geometric", None, 1.0), ("logarithmic", None, 0.0),
    ("negative_binomial", 0.5, 0.5), ("negative_binomial", 3.0, 3.0),
    ("poisson", None, math.inf)])
@pytest.mark.parametrize("sigma", [0.8, 3.0])
def test_matches_dp_accounting_repeat_and_select(dist, eta, shape, sigma):
  count = tuning.trial_count(dist, 20.0, eta=eta)
  mine = tuning.tuned_rdp(_gaussian_trial(sigma), count)
  acc = dp_accounting.rdp.RdpAccountant(orders=ORDERS)
  acc.compose(RepeatAndSelectDpEvent(dp_accounting.GaussianDpEvent(sigma),
                                     count.expected, shape))
  ref = np.asarray(acc.rdp)
  if shape == math.inf:  # we also use monotonicity in λ: never looser
    assert np.all(mine <= ref * (1 + 1e-12))
    ref = np.minimum.accumulate(ref[::-1])[::-1]
  np.testing.assert_allclose(mine, ref, rtol=1e-8)
  g = tuning.tuned_guarantee(_gaussian_trial(sigma), count, delta=1e-5)
  assert g.epsilon == pytest.approx(acc.get_epsilon(1e-5), rel=1e-8)
  assert g.epsilon > g.trial_epsilon  # tuning costs something


@pytest.mark.parametrize("args,match", [
    (("geometric", 2.0, 1.0, 0.01), "not the mean"),  # E[K] is 100
    (("geometric", 100.0, 1.0, None), "gamma"),
    (("geometric", 100.0, 0.5, 0.01), "eta"),
    (("negative_binomial", 10.0, -1.0, 0.1), "eta"),
    (("poisson", 10.0, 1.0, None), "no eta"),
    (("poisson", 0.5), "mean"),
    (("binomial", 10.0), "distribution"),
])
def test_a_trial_count_is_one_law_for_the_bound_and_the_sampler(args,
                                                                 match):
  # The bound reads E[K], the sampler (η, γ): a count whose two disagree
  # (here drawing about 100 trials, accounted as 2) is refused.
  with pytest.raises(ValueError, match=match):
    tuning.TrialCount(*args)
  good = tuning.trial_count("geometric", 100.0)
  assert tuning.TrialCount(good.distribution, good.expected, good.eta,
                           good.gamma) == good


def test_a_pure_trial_names_its_relation():
  with pytest.raises(TypeError, match="relation"):
    tuning.pure_trial(1.0)  # pylint: disable=missing-kwoa
  with pytest.raises(ValueError, match="relation"):
    tuning.pure_trial(1.0, relation=None)
  assert tuning.pure_trial(1.0, relation="replace_one").relation == (
      "replace_one")


def test_mean_and_pmf_agree():
  for eta, gamma in [(0.0, 0.05), (0.5, 0.1), (1.0, 0.2), (-0.5, 0.01),
                     (4.0, 0.3)]:
    count = tuning.TrialCount("negative_binomial",
                              tuning.negative_binomial_mean(eta, gamma), eta,
                              gamma)
    ks = np.arange(1, 20000)
    p = np.exp([count.log_pmf(int(k)) for k in ks])
    assert p.sum() == pytest.approx(1.0, abs=1e-6)
    assert (ks * p).sum() == pytest.approx(count.expected, rel=1e-4)


# -- the law of K and the schedule --------------------------------------------


def _chi2(samples, count, top):
  lo = 0 if count.distribution == "poisson" else 1
  ks = np.arange(lo, top)
  p = np.exp([count.log_pmf(int(k)) for k in ks])
  observed = np.array([np.sum(samples == k) for k in ks] +
                      [np.sum(samples >= top)])
  expected = np.append(p, max(0.0, 1 - p.sum())) * samples.size
  return stats.chisquare(observed, expected).pvalue


@pytest.mark.parametrize("dist,wrong", [("geometric", 4.0), ("poisson", 4.5)])
def test_sampled_trial_count_follows_its_law(dist, wrong):
  count = tuning.trial_count(dist, 5.0)
  key = jax.random.key(11)
  samples = np.array([tuning.sample_trial_count(jax.random.fold_in(key, i),
                                                count) for i in range(3000)])
  assert _chi2(samples, count, 15) > 1e-3
  # ... and a law with a 10–20 % smaller mean is rejected.
  assert _chi2(samples, tuning.trial_count(dist, wrong), 15) < 1e-4


def test_schedule_is_a_pure_function_of_the_key():
  count = tuning.trial_count("geometric", 10.0)
  a = tuning.schedule(jax.random.key(1), count, 4)
  b = tuning.schedule(jax.random.key(1), count, 4)
  np.testing.assert_array_equal(a, b)
  others = [tuning.schedule(jax.random.key(s), count, 4) for s in range(2, 8)]
  assert any(o.shape != a.shape or np.any(o != a) for o in others)
  assert a.min() >= 0 and a.max() < 4


# -- the selection ------------------------------------------------------------


def _trial_fn(key, candidate):
  score = tuning.noisy_accuracy(key, candidate * 100, 100, epsilon=5.0)
  return score, {"candidate": candidate}


def test_select_releases_the_best_trial_and_records_one_entry():
  count = tuning.trial_count("geometric", 20.0)
  privacy = tuning.score_privacy(5.0)
  # A count's score holds under either relation: the ledger says which.
  ledger = accounting.PrivacyLedger(relation="replace_one")
  cands = [0.2, 0.9, 0.5]
  r = tuning.select(jax.random.key(3), cands, _trial_fn, count=count,
                    privacy=privacy, delta=1e-6, ledger=ledger)
  picks = tuning.schedule(jax.random.key(3), count, len(cands))
  assert picks.size >= 1 and r.winner in picks.tolist()
  assert r.candidate == cands[r.winner]
  assert r.output == {"candidate": r.candidate}
  if 1 in picks.tolist():  # the clearly best candidate wins when it ran
    assert r.winner == 1
  (entry,) = ledger.entries
  assert entry.epsilon == r.guarantee.epsilon and entry.delta == 1e-6
  assert entry.relation == "replace_one"
  report = ledger.report(1e-6)
  assert report["epsilon"] == pytest.approx(r.guarantee.epsilon)
  rec = r.record()
  assert rec["winner"] == r.winner and rec["score"] == r.score
  assert rec["expected_trials"] == pytest.approx(20.0)
  assert rec["distribution"] == "geometric"
  assert rec["guarantee"]["trial"]["pure_epsilon"] == 5.0
  again = tuning.select(jax.random.key(3), cands, _trial_fn, count=count,
                        privacy=privacy, delta=1e-6)
  assert again.winner == r.winner and again.score == r.score


def test_a_tuning_releases_neither_its_trial_count_nor_its_schedule():
  # The guarantee covers the best trial with K hidden: nothing released
  # (result, record, ledger entry) may carry K, the schedule or the other
  # trials' scores.
  count = tuning.trial_count("geometric", 20.0)
  ledger = accounting.PrivacyLedger(relation="replace_one")
  key = jax.random.key(0)  # K = 37 trials
  r = tuning.select(key, [0.2, 0.9, 0.5], _trial_fn, count=count,
                    privacy=tuning.score_privacy(5.0), delta=1e-6,
                    ledger=ledger)
  k = int(tuning.schedule(key, count, 3).size)
  assert k == 37
  fields = {f.name for f in dataclasses.fields(r)}
  assert not fields & {"trials", "schedule", "scores"}
  released = json.dumps([r.record(), ledger.entries[0].label,
                         ledger.entries[0].params], default=str)
  for word in ("\"trials\"", "schedule", "scores", "trials ran"):
    assert word not in released, word
  assert f"{k} trials" not in released


def test_select_with_no_trial_releases_nothing():
  count = tuning.trial_count("poisson", 1.0)  # P[K = 0] = 1/e
  key = next(k for k in (jax.random.key(s) for s in range(50))
             if tuning.sample_trial_count(jax.random.fold_in(k, 0),
                                          count) == 0)
  r = tuning.select(key, [1.0], _trial_fn, count=count,
                    privacy=tuning.score_privacy(5.0), delta=1e-6)
  assert r.winner is None and r.output is None and r.score is None


def _forbidden(key, candidate):
  raise AssertionError("a trial ran before the input was checked")


@pytest.mark.parametrize("kwargs,words", [
    ({"candidates": []}, "non-empty list"),
    ({"count": None}, "TrialCount"),
    ({"privacy": None}, "needs a guarantee"),
    ({"delta": 0.0}, "delta"),
])
def test_select_refuses_bad_input_before_any_trial(kwargs, words):
  args = {"candidates": [1.0], "count": tuning.trial_count("geometric", 5.0),
          "privacy": tuning.score_privacy(1.0), "delta": 1e-6, **kwargs}
  with pytest.raises(ValueError, match=words):
    tuning.select(jax.random.key(0), args.pop("candidates"), _forbidden,
                  **args)


@pytest.mark.parametrize("dist,mean,eta,words", [
    ("geometric", 0.0, None, "expected_trials"),
    ("geometric", -3.0, None, "expected_trials"),
    ("geometric", 1.0, None, "mean above 1"),
    ("poisson", 0.5, None, "at least 1"),
    ("uniform", 5.0, None, "must be one of"),
    ("negative_binomial", 5.0, None, "needs eta"),
    ("negative_binomial", 5.0, -1.0, "eta > -1"),
    ("geometric", 5.0, 0.5, "only for"),
])
def test_trial_count_refuses(dist, mean, eta, words):
  with pytest.raises(ValueError, match=words):
    tuning.trial_count(dist, mean, eta=eta)


def test_trial_without_a_guarantee_is_refused():
  with pytest.raises(ValueError, match="no private step"):
    tuning.trial_privacy(accounting.PrivacyLedger())
  ledger = accounting.PrivacyLedger()
  ledger.record_approx(1.0, 1e-6, label="opaque", relation="add_remove")
  with pytest.raises(ValueError, match="known only by"):
    tuning.trial_privacy(ledger)


def test_departures_are_charged_e_k_times():
  ledger = accounting.PrivacyLedger()
  ledger.record_gaussian(sigma=2.0, sensitivity=1.0, delta=1e-6, label="g",
                         relation="add_remove")
  ledger.record_truncation(1e-11, label="pad")
  trial = tuning.trial_privacy(ledger)
  assert trial.truncation_probability == 1e-11
  count = tuning.trial_count("geometric", 10.0)
  g = tuning.tuned_guarantee(trial, count, delta=1e-6)
  clean = tuning.tuned_guarantee(
      dataclass_replace(trial, truncation_probability=0.0), count,
      delta=1e-6)
  assert g.epsilon > clean.epsilon  # read at a smaller δ
  ledger.record_truncation(1e-8, label="big")
  with pytest.raises(ValueError, match="too large for delta"):
    tuning.tuned_guarantee(tuning.trial_privacy(ledger), count, delta=1e-6)


def dataclass_replace(obj, **kw):
  import dataclasses  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(obj, **kw)


def test_any_of_and_disjoint_take_the_pointwise_maximum():
  a, b = _gaussian_trial(1.0), _laplace_trial(0.3)
  both = tuning.disjoint(a, b)
  np.testing.assert_allclose(both.rdp, np.maximum(a.rdp, b.rdp))
  assert both.pure_epsilon is None
  pure = tuning.any_of(_laplace_trial(0.3), _laplace_trial(0.6))
  assert pure.pure_epsilon == 0.6


def test_noisy_accuracy_has_the_laplace_scale():
  eps, n = 0.5, 200
  out = tuning.noisy_accuracy(jax.random.key(5), np.full(20_000, 150), n,
                              epsilon=eps)
  noise = np.asarray(out) * n - 150
  sd = noise.std()
  assert sd == pytest.approx(math.sqrt(2) / eps, rel=0.05)
  assert abs(sd - 0.8 * math.sqrt(2) / eps) > 0.05 * sd  # 0.8× rejected
  again = tuning.noisy_accuracy(jax.random.key(5), np.full(20_000, 150), n,
                                epsilon=eps)
  np.testing.assert_array_equal(out, again)
  with pytest.raises(ValueError, match="epsilon"):
    tuning.noisy_accuracy(jax.random.key(5), 3, n, epsilon=0.0)


def test_docs_cost_table_values():
  # The ε = 1 row of docs/tuning.md's table: a Gaussian trial that is
  # (1, 1e-6)-DP on its own, tuned with E[K] = 3, 10, 100, at δ = 1e-6.
  sigma = accounting.calibrate_dpsgd_noise(epsilon=1.0, delta=1e-6,
                                           sampling_rate=1.0, steps=1)
  trial = _gaussian_trial(sigma)
  assert trial.epsilon(1e-6) == pytest.approx(1.0, abs=5e-3)
  table = {"geometric": (1.66, 2.00, 2.49), "logarithmic": (1.46, 1.67, 1.97),
           "poisson": (1.38, 2.20, 7.97)}
  for dist, row in table.items():
    for mean, want in zip((3.0, 10.0, 100.0), row, strict=True):
      g = tuning.tuned_guarantee(trial, tuning.trial_count(dist, mean),
                                 delta=1e-6)
      assert round(g.epsilon, 2) == want, (dist, mean)


def test_compute_epsilon_is_the_ledgers_conversion():
  trial = _gaussian_trial(1.5)
  ledger = accounting.PrivacyLedger(use_pld=False)
  ledger.record_gaussian(sigma=1.5, sensitivity=1.0, delta=1e-5, label="g",
                         relation="add_remove")
  want = ledger.guarantee(1e-5).rdp_epsilon
  got, _ = rdp_math.compute_epsilon(trial.orders, trial.rdp, 1e-5)
  assert got == pytest.approx(want, rel=1e-9)


def test_trials_carry_their_relation_and_refuse_to_mix():
  train = _gaussian_trial(2.0)
  assert train.relation == "add_remove"
  score = tuning.score_privacy(1.0)
  assert score.relation is None  # a count: either relation
  trial = tuning.any_of(tuning.disjoint(train, score), train)
  assert trial.relation == "add_remove"
  assert trial.as_dict()["relation"] == "add_remove"
  fit = tuning.pure_trial(0.5, relation="replace_one")
  with pytest.raises(ValueError, match="different neighbouring relations"):
    tuning.any_of(train, fit)
  with pytest.raises(ValueError, match="different neighbouring relations"):
    tuning.disjoint(fit, train)
  guarantee = tuning.tuned_guarantee(trial, tuning.trial_count(
      "geometric", 5.0), delta=1e-6)
  ledger = accounting.PrivacyLedger()
  tuning.record(ledger, guarantee, winner=0)
  assert ledger.relation == "add_remove"
  with pytest.raises(ValueError, match="ledger of replace_one steps"):
    tuning.record(accounting.PrivacyLedger(relation="replace_one"),
                  guarantee, winner=0)
  either = tuning.tuned_guarantee(score, tuning.trial_count(
      "geometric", 5.0), delta=1e-6)
  with pytest.raises(ValueError, match="PrivacyLedger\\(relation=...\\)"):
    tuning.record(accounting.PrivacyLedger(), either, winner=0)


class _GaussianPlan:
  """A stand-in plan: one Gaussian release of σ, recorded by its plan."""

  def __init__(self, sigma):
    self.sigma = sigma

  def record(self, ledger):
    ledger.record_gaussian(sigma=self.sigma, sensitivity=1.0, delta=1e-5,
                           label="g", relation="add_remove")


def test_scored_trials_are_training_and_score_on_disjoint_rows():
  trials = tuning.scored_trials([_GaussianPlan(2.0), _GaussianPlan(0.5)],
                                score_epsilon=0.5)
  score = tuning.score_privacy(0.5)
  for trial, sigma in zip(trials, (2.0, 0.5), strict=True):
    want = np.maximum(_gaussian_trial(sigma).rdp, score.rdp)
    np.testing.assert_allclose(trial.rdp, want, rtol=1e-12)
  # a wrong score ε (or none) gives another curve at the Laplace-bound
  # orders: the score is in the trial.
  other = tuning.scored_trials([_GaussianPlan(2.0)], score_epsilon=2.0)[0]
  assert not np.allclose(other.rdp, trials[0].rdp)
  quiet = tuning.scored_trials([_GaussianPlan(8.0)], score_epsilon=0.5)[0]
  assert np.any(np.asarray(quiet.rdp) > _gaussian_trial(8.0).rdp)
  with pytest.raises(ValueError, match="non-empty list"):
    tuning.scored_trials([], score_epsilon=0.5)


def test_calibrate_finds_the_largest_trial_target_within_tolerance():
  count = tuning.trial_count("geometric", 5.0)

  def build(trial_epsilon):  # pure trials: the tuning is 3ε′ (geometric)
    return [trial_epsilon], tuning.pure_trial(trial_epsilon,
                                              relation="add_remove")

  plans, trial, guarantee, found = tuning.calibrate(
      build, epsilon=1.5, delta=1e-6, count=count, tolerance=1e-3)
  assert plans == [found] and trial.pure_epsilon == found
  assert guarantee.epsilon <= 1.5
  # the largest: a target 0.2 % higher exceeds the whole tuning's budget
  over = tuning.tuned_guarantee(
      tuning.pure_trial(found * 1.002, relation="add_remove"), count,
      delta=1e-6)
  assert over.epsilon > 1.5
  assert found == pytest.approx(0.5, rel=2e-3)
  with pytest.raises(ValueError, match="too small for this tuning"):
    tuning.calibrate(lambda e: ([], _gaussian_trial(1e-3)), epsilon=1.0,
                     delta=1e-6, count=count)
