"""DPWSS: the selection distribution, its memory, exits and accounting."""

import doctest
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from sklearn import datasets

from dpcore import accounting, exponential, shape
from launch.data import loaders as launch_data
from mechanisms.svm import dpwss, kernels, smo, smo_train, wss
from tests.pinned import accounted

HEART = os.path.join(launch_data.BUNDLED_DIR, "heart_scale")


def train(key, x, y, *, epsilon, sigma, selection="paper", max_iter=None,
          **kwargs):
  """make_plan (ε per draw, as the paper states it), then release."""
  plan = dpwss.make_plan(selection_epsilon=epsilon, sigma=sigma,
                         selection=selection, max_iter=max_iter)
  return dpwss.release(key, plan, x, y, **kwargs)


def heart():
  x, y = datasets.load_svmlight_file(HEART,
                                     n_features=13)
  return x.toarray(), y.astype(np.float64)


@pytest.fixture(scope="module")
def fixed_state():
  """(α, G) after 20 WSS2 iterations on heart_scale (a mid-run state)."""
  x, y = heart()
  model = smo_train.wss2_train(x, y, max_iter=20)
  with jax.enable_x64(True):
    k = np.asarray(jnp.exp(-(1 / 13) * (
        np.sum(x**2, 1)[:, None] + np.sum(x**2, 1)[None] - 2 * x @ x.T)))
  q = (y[:, None] * y[None]) * k
  grad = q @ model.alpha - 1.0
  return model.alpha, grad, y


def draw(fixed_state, epsilon, sigma, n_draws):
  """n_draws independent DPWSS selections from the fixed state."""
  alpha, grad, y = fixed_state
  rule = wss.DPWSS(buffer_rows=0)
  with jax.enable_x64(True):
    args = dict(
        alpha=jnp.asarray(alpha), grad=jnp.asarray(grad), y=jnp.asarray(y),
        qd=None, c=1.0, eps=1e-3, tau=smo.TAU,
        active=jnp.ones(y.shape, bool), row_fn=None,
        memory=wss.empty_memory(0),
        params=wss.DPWSSParams(jnp.asarray(epsilon), jnp.asarray(sigma)))

    @jax.jit
    def one(key):
      return rule.select(key=key, **args).j

    keys = jax.random.split(jax.random.key(7), n_draws)
    js = np.asarray(jax.vmap(one)(keys))
    i, m, m_low, yg, in_low = wss._first_index(
        args["alpha"], args["grad"], args["y"], 1.0, args["active"])
    q, cand = wss.dpwss_scores(m=m, m_low=m_low, yg=yg, in_low=in_low,
                               seen=jnp.zeros(y.shape, bool), eps=1e-3,
                               sigma=sigma)
  return js, np.asarray(q), np.asarray(cand), int(i)


def chi2_pvalue(counts, probs):
  probs = np.asarray(probs, np.float64)
  expected = probs / probs.sum() * counts.sum()
  return stats.chisquare(counts, expected).pvalue


def test_selection_frequencies_follow_the_exponential_mechanism(fixed_state):
  epsilon, sigma, n = 3.0, 0.3, 100_000
  js, q, cand, _ = draw(fixed_state, epsilon, sigma, n)
  assert cand.sum() >= 5
  assert np.all(cand[js])  # only candidates are ever chosen
  idx = np.flatnonzero(cand)
  counts = np.bincount(js, minlength=q.size)[idx]

  def probs(eps):
    return np.asarray(exponential.exponential_probabilities(
        jnp.asarray(q[idx]), epsilon=eps, sensitivity=1.0 - sigma))

  assert chi2_pvalue(counts, probs(epsilon)) > 1e-3
  # The same test rejects a wrong ε (weights exp(εq/(2Δq)) with 0.7ε, 1.5ε).
  assert chi2_pvalue(counts, probs(0.7 * epsilon)) < 1e-6
  assert chi2_pvalue(counts, probs(1.5 * epsilon)) < 1e-6


def test_huge_epsilon_picks_the_best_score(fixed_state):
  js, q, cand, _ = draw(fixed_state, 1e9, 0.1, 64)
  best = np.flatnonzero(cand)[np.argmax(q[cand])]
  assert np.all(js == best)


@pytest.mark.parametrize(
    "ordered", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_pair_lookups_match_a_dense_flag_matrix(ordered):
  # Pairs recorded one by one; the bit flags and the record scan must both
  # give the rows of the paper's dense l × l flag matrix I.
  rng = np.random.default_rng(0)
  num, count = 70, 700  # > PAIR_CHUNK, so several chunks are scanned
  pairs = rng.integers(0, num, size=(count, 2))
  found = rng.random(count) < 0.8  # some steps select nothing
  bits_rule = wss.DPWSS(buffer_rows=1000, ordered_pairs=ordered,
                        pair_flags="bits")
  scan_rule = wss.DPWSS(buffer_rows=1000, ordered_pairs=ordered,
                        pair_flags="scan")

  def fill(rule):
    def body(memory, pf):
      return rule.remember(memory, pf[0], pf[1], pf[2] > 0), None
    xs = jnp.concatenate([jnp.asarray(pairs, jnp.int32),
                          jnp.asarray(found, jnp.int32)[:, None]], axis=1)
    return jax.lax.scan(body, rule.empty_memory(num), xs)[0]

  with_bits, scanned = fill(bits_rule), fill(scan_rule)
  assert with_bits.bits.shape == (num, 3) and scanned.bits.size == 0
  assert int(with_bits.count) == int(scanned.count) == found.sum()
  dense = np.zeros((num, num), bool)
  dense[pairs[found, 0], pairs[found, 1]] = True
  if not ordered:
    dense |= dense.T
  # Every row i at once (i traced): one compiled lookup per memory.
  rows = jax.jit(jax.vmap(
      lambda memory, i: wss.seen_with(memory, i, num, ordered=ordered),
      in_axes=(None, 0)))
  for memory in (with_bits, scanned):
    np.testing.assert_array_equal(np.asarray(rows(memory, jnp.arange(num))),
                                  dense)


def test_pair_memory_fits_at_ijcnn1_scale():
  # l = 50,000 (ijcnn1): bit flags take l²/8 bytes = 312.5 MB per run, not
  # the 2.5 GB of a boolean l × l matrix; the record 8 bytes per iteration.
  assert wss.bitset_bytes(50_000) == 50_000 * 1563 * 4 <= 320_000_000
  rule = wss.DPWSS(buffer_rows=1_000_000)
  assert wss.bitset_bytes(50_000) <= wss.BITSET_MAX_BYTES  # flags kept
  memory = wss.empty_memory(1_000_000)
  assert memory.pairs.nbytes <= 8 * 1_000_000 + 8 * wss.PAIR_CHUNK
  assert memory.bits.size == 0
  # Beyond the cap the flags are dropped and lookups scan the record.
  big = jax.eval_shape(lambda: rule.empty_memory(100_000))
  assert big.bits.size == 0
  with pytest.raises(ValueError, match="pair_flags"):
    wss.DPWSS(buffer_rows=1, pair_flags="dense")
  # Repeats run together: their flags share one cap.
  assert dpwss.resolve_pair_flags("auto", 50_000, 5) == "bits"  # 1.6 GB
  assert dpwss.resolve_pair_flags("auto", 50_000, 64) == "scan"  # 20 GB
  assert dpwss.resolve_pair_flags("auto", 5_000, 64) == "bits"  # 200 MB
  assert dpwss.resolve_pair_flags("scan", 270, 1) == "scan"


@pytest.fixture(scope="module")
def heart_runs():
  x, y = heart()
  return {
      "low_sigma": train(jax.random.key(0), x, y, epsilon=1.0, sigma=0.1,
                         repeats=3),
      "default": train(jax.random.key(0), x, y, epsilon=1.0, sigma=0.7,
                       repeats=3),
      "capped": train(jax.random.key(0), x, y, epsilon=1.0, sigma=0.7,
                      repeats=3, max_iter=7),
      "loose": train(jax.random.key(0), x, y, epsilon=1.0, sigma=0.1,
                     repeats=3, eps=3.0),
      "wss2": smo_train.wss2_train(x, y),
  }


def test_no_pair_is_selected_twice(heart_runs):
  run = heart_runs["low_sigma"]
  for model, pairs in zip(run.models, run.pairs, strict=True):
    assert pairs.shape == (model.iterations, 2)
    assert len({tuple(p) for p in pairs.tolist()}) == model.iterations


def test_exits_are_reported(heart_runs):
  assert {m.exit_reason for m in heart_runs["default"].models} == {
      "no_candidate"}
  capped = heart_runs["capped"]
  assert [m.exit_reason for m in capped.models] == ["max_iter"] * 3
  assert list(capped.iterations) == [7, 7, 7]
  # At α = 0 the gap m − M is 2 < eps = 3: stationary before any step.
  loose = heart_runs["loose"]
  assert [m.exit_reason for m in loose.models] == ["stationary"] * 3
  assert list(loose.iterations) == [0, 0, 0]


def test_repeats_differ_and_reach_wss2_objective(heart_runs):
  run = heart_runs["low_sigma"]
  ref = heart_runs["wss2"].objective
  assert len(set(run.pairs[0][:50, 1].tolist())) > 1
  assert not np.array_equal(run.pairs[0][:20], run.pairs[1][:20])
  for m in run.models:
    assert abs(m.objective - ref) < 0.5  # the paper's objError scale
  assert run.model_is_private is False


def test_same_key_same_run():
  x, y = heart()
  a = train(jax.random.key(3), x[:80], y[:80], epsilon=1.0, sigma=0.3)
  b = train(jax.random.key(3), x[:80], y[:80], epsilon=1.0, sigma=0.3)
  np.testing.assert_array_equal(a.pairs[0], b.pairs[0])


def test_paper_selection_reports_no_guarantee():
  # The paper's selection is not DP (mechanisms.svm.dpwss_audit): no ε,
  # and the paper's figure labelled nominal.
  plan = dpwss.make_plan(selection_epsilon=1.0, sigma=0.5, delta=1e-5)
  assert plan.epsilon is None and plan.delta is None
  assert plan.epsilon_nominal == 1.0 and plan.sensitivity == 0.5
  with pytest.raises(ValueError, match="no_guarantee_record"):
    plan.record(accounting.PrivacyLedger())
  report = plan.report()
  assert tuple(report) == accounting.PRIVACY_FIELDS  # the one schema
  assert report["epsilon"] is None and report["delta"] is None
  assert report["method"] == "no_guarantee"
  assert report["epsilon_nominal"] == 1.0
  assert "not a guarantee" in report["nominal_note"]
  assert "no DP guarantee" in report["no_guarantee"]
  assert report["epsilon_basic"] is None
  assert json.loads(json.dumps(report))["epsilon"] is None  # JSON null
  # What composing the paper's per-selection claim would give (papers
  # README: about 96 at δ = 1e-5), kept for comparison, labelled so, and
  # outside the privacy record.
  extra = plan.selection_report(400)
  assert extra["selection"] == "paper" and extra["selections"] == 400
  assert extra["epsilon_nominal_basic"] == pytest.approx(400.0)
  assert extra["epsilon_nominal_composed"] == pytest.approx(96.1, abs=0.1)
  assert extra["delta_nominal"] == 1e-5
  # A release already in the ledger does not make the transcript private.
  ledger = accounting.PrivacyLedger()
  ledger.record_pure(0.5, label="output_perturbation", relation="replace_one")
  with_release = plan.report(ledger)
  assert with_release["epsilon"] is None
  assert [e["label"] for e in with_release["entries"]] == [
      "output_perturbation"]


def test_private_selection_report_composes_two_draws_per_iteration():
  plan = dpwss.make_plan(selection_epsilon=0.1, sigma=0.5, delta=1e-5,
                         selection="private", max_iter=200)
  report = plan.report()
  assert tuple(report) == accounting.PRIVACY_FIELDS
  ledger = accounting.PrivacyLedger()
  ledger.record_exponential(0.1, count=400, label="x", relation="replace_one")
  assert report["epsilon"] == pytest.approx(ledger.guarantee(1e-5).epsilon)
  assert report["epsilon_basic"] == pytest.approx(40.0)
  assert report["delta"] == 1e-5
  assert report["epsilon_nominal"] is None and report["no_guarantee"] is None
  assert report["epsilon"] == plan.epsilon
  extra = plan.selection_report(200)
  assert extra["selections"] == 400
  assert extra["epsilon_nominal_composed"] is None
  assert "NOT private" in extra["scope"]
  # One draw per iteration would cost less: the 2T are really counted.
  half = dpwss.make_plan(selection_epsilon=0.1, sigma=0.5,
                         selection="private", max_iter=100).epsilon
  assert half < report["epsilon"]


@pytest.mark.parametrize("selection,draws", [("paper", 500),
                                             ("private", 1000)])
def test_per_draw_epsilon_from_a_total_target(selection, draws):
  eps_each = dpwss.epsilon_per_iteration(2.0, max_iter=500, delta=1e-5,
                                         selection=selection)
  assert eps_each == pytest.approx(dpwss.epsilon_per_selection(
      2.0, selections=draws, delta=1e-5))

  def spent(eps):
    ledger = accounting.PrivacyLedger()
    ledger.record_exponential(eps, count=draws, label="x",
                              relation="replace_one")
    return ledger.guarantee(1e-5).epsilon

  assert spent(eps_each) == pytest.approx(2.0, rel=1e-6)
  assert spent(eps_each * 1.01) > 2.0
  private = dpwss.make_plan(
      selection_epsilon=dpwss.epsilon_per_iteration(
          2.0, max_iter=500, selection="private"),
      sigma=0.5, selection="private", max_iter=500).report()
  assert private["epsilon"] == pytest.approx(2.0, rel=1e-6)
  # make_plan takes the total target itself: the same split.
  target = dpwss.make_plan(epsilon=2.0, sigma=0.5, delta=1e-5,
                           selection=selection, max_iter=500)
  assert target.selection_epsilon == eps_each
  # The budget is kept as target_epsilon; epsilon is the guarantee (None
  # for the paper's selection), at most the budget.
  assert target.target_epsilon == 2.0
  if selection == "private":
    assert target.epsilon == pytest.approx(2.0, rel=1e-6)
    assert target.epsilon <= 2.0 * (1 + 1e-9)
  else:
    assert target.epsilon is None
  assert dpwss.make_plan(selection_epsilon=eps_each, sigma=0.5,
                         selection=selection,
                         max_iter=500).target_epsilon is None


@pytest.mark.parametrize("kwargs,match", [
    ({"sigma": 1.0}, "sigma must lie in"),
    ({"sigma": 0.0}, "sigma must lie in"),
    ({"epsilon": 0.0}, "epsilon must be > 0"),
    ({"epsilon": float("nan")}, "epsilon must be a finite"),
    ({"c": -1.0}, "c must be > 0"),
])
def test_bad_parameters_are_refused(kwargs, match):
  x, y = heart()
  args = {"epsilon": 1.0, "sigma": 0.5, **kwargs}
  with pytest.raises(ValueError, match=match):
    train(jax.random.key(0), x, y, **args)


@pytest.mark.parametrize("kwargs,match", [
    ({"selection": "wss4"}, "selection must be"),
    ({"selection": "private"}, "pass max_iter"),
    ({"selection": "private", "max_iter": 5, "shrinking": True},
     "shrinking=False"),
])
def test_bad_selections_are_refused(kwargs, match):
  x, y = heart()
  with pytest.raises(ValueError, match=match):
    train(jax.random.key(0), x, y, epsilon=1.0, sigma=0.5, **kwargs)


@pytest.mark.parametrize("kwargs,match", [
    ({"selection_epsilon": 1.0, "epsilon": 2.0, "max_iter": 9},
     "exactly one of selection_epsilon"),
    ({}, "exactly one of selection_epsilon"),
    ({"epsilon": 2.0}, "pass max_iter"),
    ({"selection_epsilon": 1.0, "relation": "add_remove"},
     "relation='replace_one'"),
    ({"selection_epsilon": 1.0, "delta": 0.0}, "delta"),
    ({"selection_epsilon": 1.0, "max_iter": 0}, "max_iter"),
])
def test_bad_plans_are_refused(kwargs, match):
  with pytest.raises(ValueError, match=match):
    dpwss.make_plan(sigma=0.5, **kwargs)
  with pytest.raises(ValueError, match="plan must come from"):
    dpwss.release(jax.random.key(0), {"selection": "paper"}, *heart())


def test_plans_have_the_one_shape_and_the_same_epsilon():
  paper = dpwss.make_plan(selection_epsilon=1.0, sigma=0.5)
  private = dpwss.make_plan(selection_epsilon=0.1, sigma=0.5,
                            selection="private", max_iter=200)
  for plan in (paper, private):
    shape.check_plan(plan)
    assert plan.relation is dpwss.RELATION
  shape.check_release(dpwss.release)
  assert private.sensitivity == 1.0 and private.delta == dpwss.DEFAULT_DELTA
  ledger = accounting.PrivacyLedger()
  private.record(ledger)
  (entry,) = ledger.entries
  assert (entry.label, entry.kind, entry.params["count"]) == (
      "dpwss_selections", "exponential", 400)
  # Pinned: privacy_report(0.1, 200, selection="private")["epsilon"]
  # before the plan existed (the same draws, composed the same way).
  assert ledger.guarantee(1e-5).epsilon == accounted(4.728507067217624)
  assert private.epsilon == accounted(4.728507067217624)
  assert private.report()["epsilon"] == accounted(4.728507067217624)
  assert paper.selection_report(400)["epsilon_nominal_composed"] == (
      96.11630842505602)
  target = dpwss.make_plan(epsilon=2.0, sigma=0.5, selection="private",
                           max_iter=500)
  assert target.selection_epsilon == accounted(0.029428714013192803)
  assert target.epsilon == accounted(1.9999999985513464)


def test_bad_labels_are_refused():
  x, y = heart()
  with pytest.raises(ValueError, match="only -1 and \\+1"):
    train(jax.random.key(0), x, y + 1, epsilon=1.0, sigma=0.5)


def heart_problem(rows):
  """(spec, float64 problem with Q cached) of the first ``rows`` of heart.

  Call under ``jax.enable_x64(True)``.
  """
  x, y = heart()
  spec = kernels.KernelSpec("rbf").resolve(13)
  return spec, smo.make_problem(spec, x[:rows], y[:rows], dtype="float64",
                                precompute=True, row_dtype="float32")


def dpwss_params(max_iter):
  return smo.SolverParams(
      jnp.asarray(1.0), jnp.asarray(1e-3), jnp.asarray(max_iter, jnp.int32),
      wss.DPWSSParams(jnp.asarray(1.0), jnp.asarray(0.2)))


@pytest.mark.slow
def test_batched_loop_equals_separate_runs():
  # solve_repeats (one loop, vmapped step) must give each run's own result.
  with jax.enable_x64(True):
    spec, problem = heart_problem(100)
    params = dpwss_params(2000)
    config = smo.SolverConfig(kernel=spec, shrinking=True)
    rule = wss.DPWSS(buffer_rows=2000)
    keys = jax.random.split(jax.random.key(4), 3)
    batched = smo.solve_repeats(keys, problem, params, config=config,
                                rule=rule)
    for r in range(3):
      one = smo.solve(keys[r], problem, params, config=config, rule=rule)
      assert int(one.iterations) == int(batched.iterations[r])
      np.testing.assert_array_equal(np.asarray(one.pairs),
                                    np.asarray(batched.pairs[r]))
      np.testing.assert_allclose(np.asarray(one.alpha),
                                 np.asarray(batched.alpha[r]), atol=1e-12)


@pytest.mark.slow  # the solver compiled at several unrolls (~20 s)
@pytest.mark.parametrize("shrinking", [False, True])
def test_unrolled_loop_gives_the_same_runs(shrinking):
  # Several SMO steps per while-loop trip: a step of an exited run changes
  # nothing, so iterations, α, pairs and exits are those of unroll = 1,
  # also when max_iter is not a multiple of the unroll.
  with jax.enable_x64(True):
    spec, problem = heart_problem(120)
    keys = jax.random.split(jax.random.key(9), 3)
    for max_iter in (2000, 31):
      params = dpwss_params(max_iter)
      runs = {}
      for unroll in (1, 3):
        config = smo.SolverConfig(kernel=spec, shrinking=shrinking,
                                  unroll=unroll)
        rule = wss.DPWSS(buffer_rows=max_iter)
        runs[unroll] = (
            smo.solve_repeats(keys, problem, params, config=config,
                              rule=rule),
            smo.solve(keys[0], problem, params, config=config,
                      rule=wss.WSS2()))
      for one, three in zip(runs[1], runs[3], strict=True):
        for a, b in zip(one, three, strict=True):
          np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
      if max_iter == 31:  # the cap is hit exactly, not rounded up to 33
        assert int(runs[3][0].iterations.max()) == 31
  with pytest.raises(ValueError, match="unroll"):
    smo.SolverConfig(kernel=spec, unroll=0)


# -- the private selection ----------------------------------------------------


def random_state(rng, x, y, c=1.0):
  """A random box-feasible α (some at 0, some at C) and G = Qα − e."""
  num = len(y)
  alpha = rng.uniform(0, c, num) * (rng.random(num) < 0.6)
  alpha = np.where(rng.random(num) < 0.15, c, alpha)
  gamma = 1.0 / x.shape[1]
  sq = np.sum(x**2, 1)
  k = np.exp(-gamma * (sq[:, None] + sq[None] - 2 * x @ x.T))
  q = (y[:, None] * y[None]) * k
  return alpha, q @ alpha - 1.0


def private_scores(alpha, grad, y, i, seen, sigma, c=1.0):
  with jax.enable_x64(True):
    yg = jnp.asarray(y * grad)
    in_up, in_low = wss.violation_sets(jnp.asarray(alpha), jnp.asarray(y),
                                       c, jnp.ones(y.shape, bool))
    first = wss.private_first_scores(yg=yg, in_up=in_up, in_low=in_low,
                                     sigma=sigma)
    second = wss.private_second_scores(yg=yg, in_low=in_low, i=i,
                                       seen=jnp.asarray(seen), sigma=sigma)
    return np.asarray(first), np.asarray(second)


def test_private_scores_stay_in_the_unit_range_for_neighbours():
  # Random replace-one neighbours of heart rows (a new row, or the same row
  # with its label flipped), each in a random state of its own (the state
  # is itself a function of the data and the transcript), random i, random
  # used pairs: every score of D and of D′ lies in [0, 1], so each changes
  # by at most Δ = 1, and the support (finite log-weights) is all l rows.
  x, y = heart()
  rng = np.random.default_rng(0)
  x, y = x[:60], y[:60]
  changes = []
  for trial in range(200):
    r = rng.integers(len(y))
    x1, y1 = x.copy(), y.copy()
    if trial % 2:
      y1[r] = -y1[r]
    else:
      x1[r] = rng.uniform(-1, 1, x.shape[1])
      y1[r] = rng.choice([-1.0, 1.0])
    i = int(rng.integers(len(y)))
    seen = rng.random(len(y)) < 0.2
    sigma = float(rng.choice([0.01, 0.5, 0.9]))
    scores = []
    for xs, ys in ((x, y), (x1, y1)):
      alpha, grad = random_state(rng, xs, ys)
      first, second = private_scores(alpha, grad, ys, i, seen, sigma)
      for s in (first, second):
        assert np.all((s >= 0) & (s <= 1)), s
        logits = np.asarray(exponential.exponential_log_weights(
            jnp.asarray(s), epsilon=1.0, sensitivity=1.0))
        assert np.all(np.isfinite(logits))  # support: every index
      scores.append(np.concatenate([first, second]))
    changes.append(np.max(np.abs(scores[0] - scores[1])))
  assert max(changes) <= 1.0
  assert max(changes) > 0.5  # the states were far apart: not vacuous


def test_private_scores_at_the_start_match_the_paper():
  # At α = 0 every positive violates equally: score 1 for i; given a
  # positive i, every negative gets the paper's q = 1 for j (σ = 0.5
  # rescales q ∈ [σ, 1] to [0, 1]); negatives get 0 for i, positives 0
  # for j. Used pairs are floored to 0, not removed.
  y = np.array([1.0, 1.0, -1.0, -1.0, -1.0])
  alpha, grad = np.zeros(5), -np.ones(5)
  seen = np.array([False, False, False, True, False])
  first, second = private_scores(alpha, grad, y, 1, seen, 0.5)
  np.testing.assert_allclose(first, [1, 1, 0, 0, 0])
  np.testing.assert_allclose(second, [0, 0, 1, 0, 1])


def test_paper_support_depends_on_the_data():
  # Why the paper's selection is not DP: flip one label at α = 0 and the
  # candidate set of j changes (a row enters or leaves the support).
  y = np.array([1.0, 1.0, -1.0, -1.0, -1.0])
  y1 = y.copy()
  y1[2] = 1.0
  masks = []
  for labels in (y, y1):
    with jax.enable_x64(True):
      i, m, m_low, yg, in_low = wss._first_index(
          jnp.zeros(5), -jnp.ones(5), jnp.asarray(labels), 1.0,
          jnp.ones(5, bool))
      _, cand = wss.dpwss_scores(m=m, m_low=m_low, yg=yg, in_low=in_low,
                                 seen=jnp.zeros(5, bool), eps=1e-3,
                                 sigma=0.5)
    masks.append(np.asarray(cand))
  assert masks[0][2] and not masks[1][2]


def private_draws(alpha, grad, y, epsilon, sigma, n_draws):
  rule = wss.PrivateWSS(buffer_rows=0)
  with jax.enable_x64(True):
    args = dict(
        alpha=jnp.asarray(alpha), grad=jnp.asarray(grad), y=jnp.asarray(y),
        qd=None, c=1.0, eps=1e-3, tau=smo.TAU,
        active=jnp.zeros(y.shape, bool),  # ignored: every row is scored
        row_fn=None, memory=wss.empty_memory(0),
        params=wss.DPWSSParams(jnp.asarray(epsilon), jnp.asarray(sigma)))

    @jax.jit
    def one(key):
      sel = rule.select(key=key, **args)
      return sel.i, sel.j, sel.status

    keys = jax.random.split(jax.random.key(11), n_draws)
    i, j, status = (np.asarray(v) for v in jax.vmap(one)(keys))
  return i, j, status


def test_private_draws_follow_the_exponential_mechanism(fixed_state):
  # i over all rows with weights exp(ε s/2), then j given i likewise: the
  # counts of i, and of j (whose law is Σ_i P(i) P(j | i)), pass a
  # chi-square test at ε and fail it at 0.7ε and 1.5ε.
  alpha, grad, y = fixed_state
  epsilon, sigma, n = 6.0, 0.3, 60_000
  i, j, status = private_draws(alpha, grad, y, epsilon, sigma, n)
  assert np.all(status == wss.RUNNING)
  seen = np.zeros(len(y), bool)
  first, _ = private_scores(alpha, grad, y, 0, seen, sigma)
  drawn_i = np.unique(i)
  seconds = {int(t): private_scores(alpha, grad, y, int(t), seen, sigma)[1]
             for t in drawn_i}

  def probs(scores, eps):
    return np.asarray(exponential.exponential_probabilities(
        jnp.asarray(scores), epsilon=eps, sensitivity=1.0))

  def expected(eps):
    p_i = probs(first, eps)
    p_j = sum(p_i[t] * probs(seconds[t], eps) for t in seconds)
    return p_i, p_j / p_j.sum()  # i never drawn: mass below 1e-4

  counts_i = np.bincount(i, minlength=len(y))
  counts_j = np.bincount(j, minlength=len(y))
  assert np.unique(first).size > 3  # a real spread of scores
  p_i, p_j = expected(epsilon)
  assert chi2_pvalue(counts_i, p_i) > 1e-3
  assert chi2_pvalue(counts_j, p_j) > 1e-3
  for wrong in (0.7 * epsilon, 1.5 * epsilon):
    p_i, p_j = expected(wrong)
    assert chi2_pvalue(counts_i, p_i) < 1e-6
    assert chi2_pvalue(counts_j, p_j) < 1e-6
  # Every row can be drawn: rows scored 0 still appear.
  assert np.any(first[drawn_i] == 0)


@pytest.fixture(scope="module")
def private_run():
  x, y = heart()
  return train(jax.random.key(5), x, y, epsilon=0.5, sigma=0.5,
               selection="private", max_iter=300, repeats=2)


def test_private_run_makes_exactly_t_iterations(private_run):
  run = private_run
  assert run.selection == "private" and run.model_is_private is False
  assert list(run.iterations) == [300, 300]
  assert {m.exit_reason for m in run.models} == {"max_iter"}
  for pairs in run.pairs:
    assert pairs.shape == (300, 2)
    assert len(set(pairs[:, 0].tolist())) > 20  # i is random, not argmax
  report = run.plan.report()
  assert run.selection_report()["selections"] == 600
  assert report["epsilon"] == run.plan.epsilon
  assert report["epsilon"] == pytest.approx(dpwss.make_plan(
      selection_epsilon=0.5, sigma=0.5, selection="private",
      max_iter=300).epsilon)


@pytest.mark.slow
def test_private_run_descends_and_huge_epsilon_reaches_the_optimum():
  # Every SMO step minimises over its pair, so the dual objective never
  # rises; with ε huge the draws become argmaxes and the run reaches
  # WSS2's optimum; with tiny ε it is a random walk that still descends.
  x, y = heart()
  ref = smo_train.wss2_train(x, y).objective
  sharp = train(jax.random.key(1), x, y, epsilon=1e6, sigma=0.5,
                selection="private", max_iter=400)
  blunt = train(jax.random.key(1), x, y, epsilon=1e-3, sigma=0.5,
                selection="private", max_iter=400)
  assert sharp.models[0].objective == pytest.approx(ref, abs=1e-3)
  assert ref < blunt.models[0].objective < 0.5 * ref


@pytest.mark.slow
def test_plans_differing_in_epsilon_share_one_compilation():
  # ε per draw and σ enter the solver as traced parameters (DPWSSParams),
  # not as static settings: a second budget reuses the compiled loop. A
  # structural change (another max_iter: the pair record's length) does
  # not.
  x, y = heart()
  x, y = x[:60], y[:60]
  before = smo.solve_repeats._cache_size()
  runs = [train(jax.random.key(3), x, y, epsilon=eps, sigma=sigma,
                selection="private", max_iter=25, repeats=2)
          for eps, sigma in ((0.5, 0.5), (4.0, 0.3))]
  assert smo.solve_repeats._cache_size() == before + 1
  assert not np.array_equal(runs[0].pairs[0], runs[1].pairs[0])
  train(jax.random.key(3), x, y, epsilon=0.5, sigma=0.5, selection="private",
        max_iter=26, repeats=2)
  assert smo.solve_repeats._cache_size() == before + 2


@pytest.mark.slow
def test_module_examples():
  result = doctest.testmod(dpwss, optionflags=doctest.ELLIPSIS)
  assert result.attempted > 0 and result.failed == 0
