"""Tests of mechanisms.erm.objective_perturbation (Chaudhuri et al. 2011)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats
from sklearn.linear_model import LogisticRegression

from dpcore import accounting, options, shape
from dpcore import noise as dp_noise
from mechanisms.erm import objective_perturbation as op


def _data(n=200, d=6, seed=0):
  rng = np.random.default_rng(seed)
  w = rng.normal(size=d)
  x = rng.normal(size=(n, d))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  y = np.where(x @ w + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
  return x, y


def _huber_objective_np(beta, x, y, *, lam, theta, b):
  n = len(y)
  z = y * (x @ beta)
  h = 0.5
  loss = np.where(z > 1 + h, 0.0,
                  np.where(z < 1 - h, 1 - z, (1 + h - z) ** 2 / (4 * h)))
  dloss = np.where(z > 1 + h, 0.0,
                   np.where(z < 1 - h, -1.0, -(1 + h - z) / (2 * h)))
  value = loss.mean() + 0.5 * (lam + theta) * beta @ beta + b @ beta / n
  grad = x.T @ (dloss * y) / n + (lam + theta) * beta + b / n
  return value, grad


def test_logistic_without_noise_matches_sklearn():
  x, y = _data()
  lam = 0.01
  result = op.fit_nonprivate(x, y, lam=lam, loss="logistic")
  assert bool(result.converged)
  # sklearn minimises C Σ log(1+e^{-z}) + ½‖w‖², i.e. our J with λ = 1/(Cn).
  clf = LogisticRegression(C=1.0 / (len(y) * lam), fit_intercept=False,
                           tol=1e-12, max_iter=100_000).fit(x, y)
  # Strong convexity λ: ‖β − β*‖ ≤ ‖∇J‖/λ ≤ 1e-6 for us; sklearn's lbfgs
  # at tol 1e-12 is comparable.
  np.testing.assert_allclose(result.beta, clf.coef_[0], atol=1e-5)


def test_perturbed_huber_matches_scipy_and_reaches_gradient_bound():
  x, y = _data(seed=1)
  n, d = x.shape
  lam, theta, tol = 0.01, 0.02, 1e-8
  b = np.random.default_rng(5).normal(size=d) * 30.0
  with jax.enable_x64(True):
    result = jax.jit(lambda xx, yy, bb: op.minimise(
        xx, yy, jnp.ones(n), num_examples=float(n), lam=lam, theta=theta, b=bb,
        loss="huber", tol=tol))(jnp.asarray(x), jnp.asarray(y),
                                jnp.asarray(b))
    result = jax.device_get(result)
  assert result.beta.dtype == np.float64
  assert bool(result.converged) and result.grad_norm <= tol
  # Independent gradient in NumPy at the returned point: the stated bound.
  _, grad = _huber_objective_np(result.beta, x, y, lam=lam, theta=theta, b=b)
  assert np.linalg.norm(grad) <= 2 * tol
  ref = optimize.minimize(
      lambda w: _huber_objective_np(w, x, y, lam=lam, theta=theta, b=b),
      np.zeros(d), jac=True, method="BFGS", options={"gtol": 1e-11})
  # Both within ‖∇J‖/(λ+θ) of the unique minimiser.
  np.testing.assert_allclose(result.beta, ref.x, atol=1e-6)


def test_iteration_cap_is_reported_not_hidden():
  x, y = _data(seed=2)
  n = len(y)
  with jax.enable_x64(True):
    result = jax.jit(lambda xx, yy: op.minimise(
        xx, yy, jnp.ones(n), num_examples=float(n), lam=0.01, theta=0.0,
        b=jnp.zeros(x.shape[1]), max_iter=1))(jnp.asarray(x), jnp.asarray(y))
  assert not bool(result.converged)
  assert int(result.iterations) == 1
  assert float(result.grad_norm) > 1e-8


@pytest.mark.parametrize("loss, c", [("huber", 1.0), ("logistic", 0.25)])
def test_plan_follows_chaudhuri(loss, c):
  assert op.curvature_bound(loss) == c
  lam, f = 0.01, op.DEFAULT_GAP_FRACTION
  # Large n: p > 0 branch, θ = 0. Chaudhuri's ε′ is the fit's ε less the
  # share that covers the solver's gap.
  eps, n = 0.5, 10_000
  plan = op.make_plan(epsilon=eps, num_examples=n, lam=lam, loss=loss)
  assert plan.c == c and plan.gap_fraction == f == 0.01
  eps_op = (1 - f) * eps
  expected = eps_op - math.log(1 + 2 * c / (n * lam) + c**2 / (n * lam) ** 2)
  assert plan.theta == 0.0
  np.testing.assert_allclose(plan.p, expected, rtol=1e-12)
  # The paper's form ε − 2 log(1 + c/(nλ)) is the same number.
  np.testing.assert_allclose(plan.p, eps_op - 2 * math.log1p(c / (n * lam)),
                             rtol=1e-12)
  # The gap noise: ε_g = f·ε/2 against r = 2·tol/(λ+θ).
  np.testing.assert_allclose(plan.gap_rate,
                             (f * eps / 2) / (2 * plan.tol / lam), rtol=1e-12)
  # Small budget: p ≤ 0 branch, θ = c/(n(e^{ε′/4} − 1)) − λ, p = ε′/2.
  eps = 0.002
  eps_op = (1 - f) * eps
  plan = op.make_plan(epsilon=eps, num_examples=n, lam=lam, loss=loss)
  np.testing.assert_allclose(plan.p, eps_op / 2)
  np.testing.assert_allclose(
      plan.theta, c / (n * (math.exp(eps_op / 4) - 1)) - lam, rtol=1e-12)
  assert plan.theta > 0
  np.testing.assert_allclose(
      plan.gap_rate, (f * eps / 2) * (lam + plan.theta) / (2 * plan.tol),
      rtol=1e-12)


def test_plan_and_release_have_the_one_shape():
  for num_classes in (None, 2, 5):
    plan = op.make_plan(epsilon=0.5, num_examples=100, lam=0.01,
                        num_classes=num_classes)
    shape.check_plan(plan)
    assert plan.relation is options.Relation.REPLACE_ONE
    assert plan.delta == 0.0
    assert plan.fits == (5 if num_classes == 5 else 1)
  shape.check_release(op.release)


PINNED_HUBER = (0.2475, 0.015303726498876466, 3162.965812359558)
PINNED_LOGISTIC = (0.00495, 0.32628384190865245, 840.7096047716312)


# Pinned when the solver's gap entered the plan (1 % of each fit's ε):
# p, θ and the gap rate of two settings, and ε of three fits at 0.5.
def test_plan_gives_the_pinned_figures():
  plan = op.make_plan(epsilon=0.5, num_examples=300, lam=0.01, loss="huber")
  assert (plan.p, plan.theta, plan.gap_rate) == PINNED_HUBER
  small = op.make_plan(epsilon=0.01, num_examples=300, lam=0.01,
                       loss="logistic")
  assert (small.p, small.theta, small.gap_rate) == PINNED_LOGISTIC
  ledger = accounting.PrivacyLedger()
  # A one-vs-rest plan's budget is the release's: three fits at 0.5 each.
  ovr = op.make_plan(epsilon=1.5, num_examples=300, lam=0.01, num_classes=3)
  assert ovr.epsilon_fit == 0.5 and ovr.fits == 3
  assert ovr.epsilon_gap == 0.5 * 0.01 / 2
  ovr.record(ledger)
  report = ledger.report()
  # The noise cap: a departure of 2^-100 per fit, δ = (1 + e^ε)·3·2^-100.
  assert report["epsilon"] == 1.5
  assert report["delta"] == pytest.approx((1 + math.exp(1.5)) * 3 * 2.0**-100)
  assert ledger.relation is options.Relation.REPLACE_ONE
  entry, cap = ledger.entries
  assert (entry.kind, entry.epsilon) == ("pure", 1.5)  # three fits at 0.5
  assert entry.params == {"epsilon": 0.5, "count": 3}
  assert (cap.kind, cap.label) == ("truncation",
                                   "objective_perturbation_noise_cap")
  assert cap.params == {"probability": 3 * 2.0**-100}
  # p and θ are those of one fit at 0.5 (the pinned figures above).
  one = op.make_plan(epsilon=0.5, num_examples=300, lam=0.01)
  assert (ovr.p, ovr.theta) == (one.p, one.theta) == (plan.p, plan.theta)


@pytest.mark.parametrize("num_classes", [
    None, 2, pytest.param(3, marks=pytest.mark.slow),
    pytest.param(7, marks=pytest.mark.slow)])
def test_plan_epsilon_is_the_ledgers_guarantee_after_a_release(num_classes):
  # The convention of every plan (dpcore.shape): plan.epsilon is what the
  # ledger reports for everything one release publishes (its K fits), at
  # most the budget make_plan was given (the ledger's 1e-9 tolerance).
  rng = np.random.default_rng(2)
  x = rng.normal(size=(40, 3))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  y = (rng.integers(0, num_classes, 40) if num_classes
       else np.where(x[:, 0] > 0, 1.0, -1.0))
  plan = op.make_plan(epsilon=0.7, num_examples=40, lam=0.1,
                      num_classes=num_classes)
  with jax.enable_x64(True):
    op.release(jax.random.key(0), plan, jnp.asarray(x), jnp.asarray(y))
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  assert plan.epsilon == ledger.report()["epsilon"] == ledger.guarantee(
      ).epsilon
  assert plan.target_epsilon == 0.7
  assert plan.epsilon_fit * plan.fits == pytest.approx(0.7, rel=1e-15)
  assert plan.epsilon <= plan.target_epsilon * (1 + 1e-9)


@pytest.mark.slow
def test_plans_that_differ_only_in_epsilon_share_one_compilation():
  # n, p, θ, λ and the budget are the plan's leaves (loss, h, K static):
  # one trace, counted by a Python side effect, for two ε.
  x, y = _data(n=50, d=3, seed=9)
  traces = []
  with jax.enable_x64(True):
    xj, yj = jnp.asarray(x), jnp.asarray(y)

    @jax.jit
    def run(key, plan):
      traces.append(plan)
      return op.release(key, plan, xj, yj).beta

    plans = [op.make_plan(epsilon=eps, num_examples=50, lam=0.05)
             for eps in (0.5, 4.0)]
    outs = [run(jax.random.key(1), p) for p in plans]
    assert len(traces) == 1
    assert not np.allclose(outs[0], outs[1])
    np.testing.assert_allclose(outs[1], op.release(
        jax.random.key(1), plans[1], xj, yj).beta, atol=1e-9)
    run(jax.random.key(1), op.make_plan(epsilon=0.5, num_examples=50,
                                        lam=0.05, loss="logistic"))
  assert len(traces) == 2  # another loss, another program


@pytest.mark.slow
def test_one_vs_rest_release_is_the_kernel_and_vmaps_over_plans():
  rng = np.random.default_rng(8)
  x = rng.normal(size=(80, 4))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  labels = rng.integers(0, 3, 80)
  key = jax.random.key(5)
  with jax.enable_x64(True):
    xj, lj = jnp.asarray(x), jnp.asarray(labels)
    plan = op.make_plan(epsilon=1.5, num_examples=80, lam=0.01,
                        num_classes=3)
    fits = op.release(key, plan, xj, lj)
    kernel = op.one_vs_rest(key, xj, lj, jnp.ones(80), num_classes=3,
                            num_examples=plan.num_examples, p=plan.p,
                            theta=plan.theta, lam=plan.lam,
                            epsilon_gap=plan.epsilon_gap)
    np.testing.assert_array_equal(fits.beta, kernel.beta)
    assert fits.beta.shape == (3, 4)
    # Plans of two sizes stack into a batch (n, p, θ are its leaves).
    other = op.make_plan(epsilon=1.5, num_examples=60, lam=0.01,
                         num_classes=3)
    batch = jax.tree.map(lambda a, b: jnp.asarray([a, b]), plan, other)
    mask = jnp.stack([jnp.ones(80), jnp.ones(80).at[60:].set(0.0)])
    both = jax.jit(jax.vmap(op.release, in_axes=(None, 0, None, None, 0)))(
        key, batch, xj, lj, mask)
    np.testing.assert_allclose(both.beta[0], fits.beta, atol=1e-9)
    alone = op.release(key, other, xj[:60], lj[:60])
    np.testing.assert_allclose(both.beta[1], alone.beta, atol=1e-9)


def test_noise_norm_is_gamma_and_rejects_wrong_scale():
  k, p = 20, 0.3
  keys = jax.random.split(jax.random.key(11), 4000)
  with jax.enable_x64(True):
    b = jax.vmap(lambda kk: op.perturbation_noise(kk, k, p=p))(keys)
    norms = np.asarray(jnp.linalg.norm(b, axis=1))
  assert stats.kstest(norms, "gamma", args=(k, 0, 2 / p)).pvalue > 1e-3
  for wrong in (0.8, 1.2):
    assert stats.kstest(norms, "gamma",
                        args=(k, 0, wrong * 2 / p)).pvalue < 1e-6


@pytest.mark.slow
def test_one_vs_rest_equals_separate_fits():
  # Class c's fit is the fit of its own one-vs-rest labels with row c of
  # the K noise vectors b drawn together from the first half of the
  # participant's key, plus row c of the K gap noises from the second.
  rng = np.random.default_rng(3)
  x = rng.normal(size=(120, 5))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  labels = rng.integers(0, 3, 120)
  mask = np.ones(120)
  key = jax.random.key(4)
  kwargs = dict(num_examples=120.0, theta=0.01, lam=0.01)
  with jax.enable_x64(True):
    xj = jnp.asarray(x)
    both = jax.jit(lambda kk: op.one_vs_rest(
        kk, xj, jnp.asarray(labels), jnp.asarray(mask), num_classes=3,
        p=0.7, epsilon_gap=5e-5, **kwargs))(key)
    assert both.beta.shape == (3, 5)
    b_key, z_key = jax.random.split(key)
    b = op.perturbation_noise(b_key, 5, p=0.7, num=3)
    rate = op.gap_rate(epsilon_gap=5e-5, tol=op.DEFAULT_TOL, lam=0.01,
                       theta=0.01)
    assert rate == pytest.approx(50.0)
    z = dp_noise.objective_perturbation_noise(z_key, 5, beta=rate, num=3,
                                              dtype=jnp.float64)
    assert np.min(np.linalg.norm(z, axis=1)) > 1e-3  # visible beside 1e-9
    single = jax.jit(lambda yy, bb: op.minimise(
        xj, yy, jnp.asarray(mask), b=bb, **kwargs))
    for c in range(3):
      y = jnp.where(jnp.asarray(labels) == c, 1.0, -1.0)
      alone = single(y, b[c])
      np.testing.assert_allclose(both.beta[c], alone.beta + z[c], atol=1e-9)
      # Each class has its own noise: another row gives another model.
      other = single(y, b[(c + 1) % 3])
      assert np.max(np.abs(both.beta[c] - other.beta)) > 1e-4


@pytest.mark.parametrize("bad, match", [
    ("epsilon", "epsilon"),
    ("norm", "norm"),
    ("labels", "-1 and \\+1"),
    ("nan", "NaN"),
    ("lam", "lam"),
    ("loss", "loss"),
    ("n", "num_examples=30"),
    ("plan", "ObjectivePerturbationPlan"),
])
def test_plan_and_release_reject_bad_input(bad, match):
  x, y = _data(n=30)
  settings = dict(epsilon=1.0, num_examples=30, lam=0.01, loss="huber")
  if bad == "epsilon":
    settings["epsilon"] = 0.0
  elif bad == "norm":
    x[0] *= 1.5
  elif bad == "labels":
    y = (y > 0).astype(float)
  elif bad == "nan":
    x[2, 2] = np.nan
  elif bad == "lam":
    settings["lam"] = -1.0
  elif bad == "loss":
    settings["loss"] = "hinge"
  elif bad == "n":
    x, y = x[:20], y[:20]
  error = TypeError if bad == "plan" else ValueError
  with pytest.raises(error, match=match), jax.enable_x64(True):
    plan = op.make_plan(**settings)
    op.release(jax.random.key(0), vars(plan) if bad == "plan" else plan,
               x, y)


def test_private_fit_clips_rows_to_norm_one():
  # Rows of norm 3 are fitted as the same rows scaled to norm 1: the proof's
  # ‖x‖ ≤ 1 is enforced inside the jitted mechanism, not assumed.
  rng = np.random.default_rng(5)
  x = rng.normal(size=(200, 4))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  y = np.where(x[:, 0] > 0, 1.0, -1.0)
  mask = np.ones(200)
  plan = op.make_plan(epsilon=1.0, num_examples=200, lam=0.05)
  with jax.enable_x64(True):
    # Traced rows (jit) are not checked host-side: the clip acts.
    fit = jax.jit(lambda rows: op.release(
        jax.random.key(1), plan, rows, jnp.asarray(y), jnp.asarray(mask)))
    unit, tripled = fit(jnp.asarray(x)), fit(jnp.asarray(3.0 * x))
    # Concrete rows of norm 3 are refused before any work.
    with pytest.raises(ValueError, match="norm"):
      op.release(jax.random.key(1), plan, 3.0 * x, y)
  np.testing.assert_allclose(np.asarray(tripled.beta),
                             np.asarray(unit.beta), atol=1e-7)
  assert bool(tripled.converged)


def test_private_fit_reads_traced_labels_as_signs():
  # |y| = 1 is part of the proof's bound: a traced label of ±10 would
  # pull ten times as hard. Under jit, where it cannot be refused, the
  # label is read as its sign (0 as −1), and the fit is the ±1 fit.
  rng = np.random.default_rng(7)
  x = rng.normal(size=(100, 3))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  y = np.where(x[:, 0] > 0, 1.0, -1.0)
  plan = op.make_plan(epsilon=1.0, num_examples=100, lam=0.05)
  with jax.enable_x64(True):
    fit = jax.jit(lambda labels: op.release(
        jax.random.key(3), plan, jnp.asarray(x), labels).beta)
    signs = np.asarray(fit(jnp.asarray(y)))
    np.testing.assert_array_equal(np.asarray(fit(jnp.asarray(10 * y))),
                                  signs)
    np.testing.assert_array_equal(
        np.asarray(fit(jnp.asarray((y > 0).astype(float)))), signs)


@pytest.mark.parametrize("kwargs, match", [
    ({"max_iter": 0}, "max_iter"),
    ({"max_iter": -3}, "max_iter"),
    ({"max_iter": 2.5}, "max_iter"),
    ({"max_iter": True}, "max_iter"),
    ({"tol": -1.0}, "tol"),
    ({"tol": 0.0}, "tol"),
    ({"tol": float("nan")}, "tol"),
    ({"tol": float("inf")}, "tol"),
    ({"gap_fraction": 0.0}, "gap_fraction"),
    ({"gap_fraction": 1.0}, "gap_fraction"),
    ({"gap_fraction": -0.1}, "gap_fraction"),
    ({"h": 0.0}, "h"),
])
def test_release_rejects_bad_solver_settings(kwargs, match):
  x, y = _data(n=30)
  planned = {k: kwargs.pop(k) for k in ("h", "tol", "gap_fraction")
             if k in kwargs}
  with pytest.raises(ValueError, match=match), jax.enable_x64(True):
    plan = op.make_plan(epsilon=1.0, num_examples=30, lam=0.01, **planned)
    op.release(jax.random.key(0), plan, x, y, **kwargs)


def test_release_takes_its_tolerance_from_the_plan_only():
  # The gap noise is sized for the plan's tol: a release-time tol that
  # differed would break the guarantee, so there is none to pass.
  x, y = _data(n=30)
  plan = op.make_plan(epsilon=1.0, num_examples=30, lam=0.01)
  with pytest.raises(TypeError, match="tol"):
    op.release(jax.random.key(0), plan, x, y, tol=1e-3)
  with pytest.raises(ValueError, match="epsilon_gap"):
    op.one_vs_rest(jax.random.key(0), jnp.asarray(x), jnp.zeros(30, int),
                   jnp.ones(30), num_classes=2, num_examples=30, p=plan.p,
                   theta=plan.theta, lam=plan.lam)


@pytest.mark.parametrize("epsilon, max_iter", [
    pytest.param(1.0, 2, marks=pytest.mark.slow), (0.01, 3)])
def test_release_raises_when_the_fit_did_not_converge(epsilon, max_iter):
  # The guarantee needs a converged fit: a capped one is not returned.
  x, y = _data(n=30)
  plan = op.make_plan(epsilon=epsilon, num_examples=30, lam=0.01)
  with pytest.raises(op.ConvergenceError, match="did not converge"), \
      jax.enable_x64(True):
    op.release(jax.random.key(0), plan, x, y, max_iter=max_iter)
  # Under jit nothing can raise: the result says so, and the caller checks.
  with jax.enable_x64(True):
    traced = jax.jit(lambda xx: op.release(jax.random.key(0), plan, xx, y,
                                           max_iter=max_iter))(x)
  assert not bool(traced.converged)


def test_release_refuses_settings_no_fit_could_certify():
  # At ε = 1e-9 the noise cap is ~1e11 and float64's rounding bound at it
  # exceeds tol = 1e-8 whatever the data: refused before any work.
  x, y = _data(n=30)
  plan = op.make_plan(epsilon=1e-9, num_examples=30, lam=0.01)
  with pytest.raises(ValueError, match="rounding bound .* larger tol"), \
      jax.enable_x64(True):
    op.release(jax.random.key(0), plan, x, y)


def test_convergence_error_is_the_one_feddpdr_raises():
  from federated import feddpdr  # the re-export, not a second class
  assert feddpdr.ConvergenceError is op.ConvergenceError
  assert issubclass(op.ConvergenceError, RuntimeError)


def test_private_fit_bounds_the_mask_to_zero_one():
  # A mask of 5 would count its row five times in the loss sum; on the
  # private path it counts once, and NaN / negative entries count zero.
  # The odd entries go on rows inside the loss's active region (margin
  # < 1 + h at the plain fit), where a row's weight changes the minimiser,
  # so the comparison cannot pass vacuously.
  x, y = _data(n=60, d=4, seed=6)
  with jax.enable_x64(True):
    plan = op.make_plan(epsilon=1.0, num_examples=60, lam=0.05)
    run = jax.jit(lambda m: op.release(
        jax.random.key(2), plan, jnp.asarray(x), jnp.asarray(y), m))
    ones = np.ones(60)
    plain = run(jnp.asarray(ones))
    margins = y * (x @ np.asarray(plain.beta))
    active = np.flatnonzero(margins < 1.0 + op.HUBER_H)[:5]
    assert active.size == 5, margins
    odd = ones.copy()
    odd[active[:3]] = 5.0
    odd[active[3]], odd[active[4]] = np.nan, -2.0
    ref = ones.copy()
    ref[active[3:]] = 0.0
    got, want = run(jnp.asarray(odd)), run(jnp.asarray(ref))
  assert bool(got.converged)
  np.testing.assert_allclose(np.asarray(got.beta), np.asarray(want.beta),
                             atol=1e-9)
  assert not np.allclose(np.asarray(got.beta), np.asarray(plain.beta),
                         atol=1e-4)


def _line_search_steps(atol):
  """Backtracking steps of each L-BFGS iteration on a perturbed Huber fit,
  with the Armijo slack ``atol`` (the library's, or optax's default 0)."""
  import optax
  x, y = _data(n=2000, d=20, seed=3)
  b = np.random.default_rng(4).normal(size=20) * 2000.0  # |J| ≈ 20, as at
  # a small ε on MNIST
  with jax.enable_x64(True):
    xx, yy, bb = jnp.asarray(x), jnp.asarray(y), jnp.asarray(b)
    fun = lambda beta: op.objective(  # noqa: E731
        beta, xx, yy, jnp.ones(2000), num_examples=2000.0, lam=0.01,
        theta=0.07, b=bb, loss="huber")
    if atol is None:
      solver = op._lbfgs(jnp.float64)
    else:
      solver = optax.lbfgs(linesearch=optax.scale_by_backtracking_linesearch(
          max_backtracking_steps=40, store_grad=False, increase_factor=1e9,
          max_learning_rate=1.0, atol=atol))

    @jax.jit
    def step(beta, state):
      value, grad = jax.value_and_grad(fun)(beta)
      updates, state = solver.update(grad, state, beta, value=value,
                                     grad=grad, value_fn=fun)
      info = optax.tree_utils.tree_get(state, "info")
      return beta + updates, state, info.num_linesearch_steps, value

    beta = jnp.zeros(20)
    state = solver.init(beta)
    steps = []
    for _ in range(20):
      beta, state, count, value = step(beta, state)
      steps.append(int(count))
    assert abs(float(value)) > 5.0  # the rounding of J is ~1e-15
  return steps


def test_line_search_does_not_stall_at_the_rounding_of_j():
  # Near the minimiser the Armijo decrease falls below J's rounding. The
  # library's slack keeps every step a single trial there; optax's default
  # (no slack) exhausts all 40 backtracking steps, which under vmap every
  # batched fit waited for.
  assert max(_line_search_steps(None)) <= 3
  assert max(_line_search_steps(0.0)) == 41


def _fit_and_gap(keys, plan, x, y):
  """Each key's released β, β̂ (the plan's own fit with the same b, the
  first half of the key, without the gap noise) and b."""
  def both(key):
    released = op.release(key, plan, x, y).beta
    b = op.perturbation_noise(jax.random.split(key)[0], x.shape[-1],
                              p=plan.p, num=1, dtype=x.dtype)[0]
    fitted = op.minimise(x, y, jnp.ones(x.shape[0], x.dtype),
                         num_examples=plan.num_examples, lam=plan.lam,
                         theta=plan.theta, b=b, loss=plan.loss, tol=plan.tol)
    return released, fitted.beta, b
  return jax.jit(jax.vmap(both))(keys)


def test_released_fit_carries_gap_noise_of_the_plans_law():
  # The law test on the mechanism itself: across 3,000 keys, released β
  # minus β̂ (the same computation with the same b) is the gap noise z:
  # its norm is Gamma(d, 1/gap_rate), and a scale off by 20 % either way
  # is rejected; its direction is independent of b's (drawn from the
  # other half of the key: z drawn from b's key would point along b).
  x, y = _data(n=40, d=3, seed=4)
  plan = op.make_plan(epsilon=1.0, num_examples=40, lam=0.1,
                      gap_fraction=0.5, tol=1e-4)
  r = 2 * plan.tol / (plan.lam + plan.theta)
  assert 1 / plan.gap_rate == pytest.approx(r / 0.25)
  with jax.enable_x64(True):
    released, fitted, b = _fit_and_gap(
        jax.random.split(jax.random.key(21), 3000), plan, jnp.asarray(x),
        jnp.asarray(y))
  z, b = np.asarray(released - fitted), np.asarray(b)
  norms = np.linalg.norm(z, axis=1)
  scale = 1 / plan.gap_rate
  assert stats.kstest(norms, "gamma", args=(3, 0, scale)).pvalue > 1e-3
  for wrong in (0.8, 1.2):
    assert stats.kstest(norms, "gamma",
                        args=(3, 0, wrong * scale)).pvalue < 1e-6
  # |cos| of independent uniform directions in R³ is uniform on [0, 1].
  cos = np.abs(np.sum(z * b, axis=1)) / (norms * np.linalg.norm(b, axis=1))
  assert stats.kstest(cos, "uniform").pvalue > 1e-3
  assert stats.kstest(np.abs(np.sum(b[1:] * b[:-1], axis=1))
                      / np.linalg.norm(b[1:], axis=1)
                      / np.linalg.norm(b[:-1], axis=1), "uniform").pvalue > 1e-3


def test_converged_fit_is_within_the_gap_radius_of_the_minimiser():
  # The radius the gap noise is sized for: a converged fit is within
  # r = 2·tol/(λ+θ) of the exact minimiser (scipy's, to 1e-12).
  x, y = _data(seed=5)
  n, d = x.shape
  lam, theta, tol = 0.01, 0.0, 1e-6
  b = np.random.default_rng(6).normal(size=d) * 20.0
  with jax.enable_x64(True):
    fit = op.minimise(jnp.asarray(x), jnp.asarray(y), jnp.ones(n),
                      num_examples=float(n), lam=lam, theta=theta,
                      b=jnp.asarray(b), tol=tol)
  assert bool(fit.converged)
  ref = optimize.minimize(
      lambda w: _huber_objective_np(w, x, y, lam=lam, theta=theta, b=b),
      np.zeros(d), jac=True, method="BFGS", options={"gtol": 1e-12})
  distance = np.linalg.norm(np.asarray(fit.beta) - ref.x)
  assert distance <= 2 * tol / (lam + theta)
  assert distance > 1e-9  # tol = 1e-6 leaves a gap to cover


def test_rounding_bound_covers_float64_and_refuses_float32():
  # The computed ‖∇J‖ in float64 is within the bound of the gradient in
  # extended precision, at a converged fit; in float32 the bound exceeds
  # the default tol, so a private float32 fit is refused, saying why.
  x, y = _data(n=500, d=8, seed=7)
  b = np.random.default_rng(8).normal(size=8) * 50.0
  lam = 0.01
  with jax.enable_x64(True):
    fit = op.minimise(jnp.asarray(x), jnp.asarray(y), jnp.ones(500),
                      num_examples=500.0, lam=lam, theta=0.0,
                      b=jnp.asarray(b))
    bound = float(op.rounding_bound(
        num_examples=500.0, rows=500, dim=8, lam=lam, theta=0.0,
        b_norm=np.linalg.norm(b), tol=op.DEFAULT_TOL, c=1.0,
        dtype=jnp.float64))
  assert bool(fit.converged) and 0 < bound < op.DEFAULT_TOL
  beta = np.asarray(fit.beta, np.longdouble)
  xl, yl, bl = (np.asarray(a, np.longdouble) for a in (x, y, b))
  z = yl * (xl @ beta)
  dloss = np.where(z > 1.5, 0, np.where(z < 0.5, -1, -(1.5 - z)))
  grad = xl.T @ (dloss * yl) / 500 + lam * beta + bl / 500
  assert abs(float(np.linalg.norm(grad)) - float(fit.grad_norm)) <= bound
  assert float(op.rounding_bound(
      num_examples=500.0, rows=500, dim=8, lam=lam, theta=0.0, b_norm=1.0,
      tol=op.DEFAULT_TOL, c=1.0, dtype=jnp.float32)) > op.DEFAULT_TOL
  # A private float32 fit is refused before any work.
  plan = op.make_plan(epsilon=1.0, num_examples=500, lam=lam)
  with pytest.raises(ValueError, match="float32 rounding bound.*float64"):
    op.release(jax.random.key(0), plan, np.asarray(x, np.float32), y)


def test_rounding_bound_is_the_stated_formula():
  # Each term of the docstring's formula, written out independently: a
  # dropped term or a wrong constant changes the value.
  n, rows, d, lam, theta, b_norm, tol, c = 300.0, 400, 7, 0.02, 0.5, 80.0, \
      1e-8, 0.25
  a = rows / n
  s = a + b_norm / n + tol
  want = 4 * np.finfo(np.float64).eps * ((rows + d + 16) * s
                                         + c * d * a * s / (lam + theta))
  with jax.enable_x64(True):
    got = float(op.rounding_bound(num_examples=n, rows=rows, dim=d, lam=lam,
                                  theta=theta, b_norm=b_norm, tol=tol, c=c,
                                  dtype=jnp.float64))
  assert got == pytest.approx(want, rel=1e-12)


def test_converged_means_the_gradient_is_within_tol_not_twice_it():
  # Stopped by max_iter at a gradient norm g, with tol = g/1.5 (so g lies
  # in (tol, 2·tol]): not converged, although g ≤ 2·tol.
  x, y = _data(n=100, d=5, seed=3)
  with jax.enable_x64(True):
    run = jax.jit(lambda tol, k: op.minimise(
        jnp.asarray(x), jnp.asarray(y), jnp.ones(100), num_examples=100.0,
        lam=0.01, theta=0.0, b=jnp.zeros(5), tol=tol, max_iter=k),
        static_argnums=(0, 1))
    norms = [float(run(1e-12, k).grad_norm) for k in range(1, 9)]
    # An iteration whose norm is below every earlier one: a tol just
    # under it stops nothing earlier.
    k = max(i for i in range(1, 8) if norms[i] < min(norms[:i])) + 1
    g = norms[k - 1]
    again = run(g / 1.5, k)
    assert float(again.grad_norm) == g and int(again.iterations) == k
    assert not bool(again.converged)
    assert bool(run(g * 1.01, k).converged)


def test_noise_cap_is_the_gamma_tail_and_recorded():
  # B = (2/p)·q with P[Gamma(d, 1) > q] = 2^-100; checked against SciPy's
  # survival function at B and at 0.9·B.
  p, d = 0.3, 20
  cap = op.noise_cap(p, d)
  assert stats.gamma.sf(cap, d, scale=2 / p) == pytest.approx(2.0**-100,
                                                              rel=1e-6)
  assert stats.gamma.sf(0.9 * cap, d, scale=2 / p) > 1e3 * 2.0**-100
  assert op.noise_cap(float("inf"), d) == 0.0


def test_whether_a_fit_converges_does_not_depend_on_the_noise_norm():
  # The privacy bug a reviewer found in an earlier form: a rounding check
  # taken at ‖b‖ refused exactly the fits with large ‖b‖, so what was
  # released under D and D′ had different supports. Now the check is taken
  # at the cap: with a tol where a check at ‖b‖ would pass about half the
  # fits, either all pass or none, and a concrete plan is refused before
  # any work.
  x, y = _data(n=100, d=3, seed=2)
  plan = op.make_plan(epsilon=1.0, num_examples=100, lam=1.0)
  norms = 2 / plan.p * stats.gamma.median(3)
  tol = float(op.rounding_bound(num_examples=100.0, rows=100, dim=3,
                                lam=1.0, theta=plan.theta, b_norm=norms,
                                tol=0.0, c=1.0, dtype=np.float64))
  plan = op.make_plan(epsilon=1.0, num_examples=100, lam=1.0, tol=tol)
  with pytest.raises(ValueError, match="rounding bound"):
    op.release(jax.random.key(0), plan, x, y)
  with jax.enable_x64(True):
    keys = jax.random.split(jax.random.key(5), 200)
    fits = jax.jit(jax.vmap(lambda k, pl: op.release(
        k, pl, jnp.asarray(x), jnp.asarray(y)), in_axes=(0, None)))(
            keys, plan)
  assert not np.any(np.asarray(fits.converged))
