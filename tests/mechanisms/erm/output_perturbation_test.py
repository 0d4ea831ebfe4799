"""Output perturbation of a linear C-SVC: calibration, solver, refusals."""

import dataclasses
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from sklearn import datasets, svm

from dpcore import accounting, options, shape
from launch.data import loaders as launch_data
from mechanisms.erm import output_perturbation as op
from mechanisms.erm.objective_perturbation import ConvergenceError

HEART = os.path.join(launch_data.BUNDLED_DIR, "heart_scale")


def heart_unit():
  x, y = datasets.load_svmlight_file(HEART,
                                     n_features=13)
  x = x.toarray()
  # Per-row projection onto the unit ball (data-independent).
  return x / np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True)), y


def noise_samples(n, dim, *, sensitivity_l2, epsilon):
  keys = jax.random.split(jax.random.key(11), n)
  zero = jnp.zeros(dim)
  return np.asarray(jax.vmap(lambda k: op.perturb(
      k, zero, sensitivity_l2=sensitivity_l2, epsilon=epsilon))(keys))


def test_noise_norm_matches_calibration_and_rejects_wrong_scale():
  dim, delta2, epsilon = 14, 2.0, 1.5
  noise = noise_samples(6_000, dim, sensitivity_l2=delta2, epsilon=epsilon)
  norms = np.linalg.norm(noise, axis=1)
  scale = delta2 / epsilon
  assert stats.kstest(norms, stats.gamma(dim, scale=scale).cdf).pvalue > 1e-3
  assert stats.kstest(norms,
                      stats.gamma(dim, scale=0.8 * scale).cdf).pvalue < 1e-6
  assert stats.kstest(norms,
                      stats.gamma(dim, scale=1.2 * scale).cdf).pvalue < 1e-6


def test_noise_direction_is_uniform():
  dim = 5
  noise = noise_samples(6_000, dim, sensitivity_l2=1.0, epsilon=1.0)
  cosines = noise[:, 0] / np.linalg.norm(noise, axis=1)
  # For a uniform direction in R^k, (1 + cos)/2 ~ Beta((k−1)/2, (k−1)/2).
  beta = stats.beta((dim - 1) / 2, (dim - 1) / 2)
  assert stats.kstest((1 + cosines) / 2, beta.cdf).pvalue > 1e-3
  skewed = stats.beta(dim / 2, (dim - 1) / 2)
  assert stats.kstest((1 + cosines) / 2, skewed.cdf).pvalue < 1e-6


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_bias_free_solver_matches_liblinear():
  x, y = heart_unit()
  w, _, gap = op.fit_linear(x, y, c=1.0, tol=1e-10)
  assert gap <= 1e-10
  xa = op.augment(x)
  ref = svm.LinearSVC(loss="hinge", C=1.0, fit_intercept=False, tol=1e-12,
                      max_iter=200_000, random_state=0).fit(xa, y)

  def primal(v):
    return 0.5 * v @ v + np.sum(np.maximum(0.0, 1.0 - y * (xa @ v)))

  # Ours is at least as good as LIBLINEAR's (which stops at its cap) and
  # the minimiser is unique (strongly convex), so the weights agree.
  assert primal(w) <= primal(ref.coef_[0]) + 1e-9 * abs(primal(w))
  np.testing.assert_allclose(w, ref.coef_[0], atol=1e-4)


def test_release_adds_noise_of_scale_2c_over_epsilon():
  x, y = heart_unit()
  key = jax.random.key(5)
  c, epsilon = 0.5, 4.0
  plan = op.make_plan(epsilon=epsilon, c=c)
  rel = op.release(key, plan, x, y)
  # 2C of the exact minimiser, widened by ρ = 1 % for the solver's gap.
  assert rel.sensitivity == 2 * c * 1.01 == plan.sensitivity
  assert rel.noise_scale == plan.scale
  assert rel.noise_scale == pytest.approx(2 * c * 1.01 / epsilon)
  exact, _, _ = op.fit_linear(x, y, c=c)
  released = np.append(rel.w, rel.b) / op.BIAS_SCALE
  with jax.enable_x64(True):
    expected = np.asarray(op.perturb(key, jnp.asarray(exact),
                                     sensitivity_l2=2 * c * 1.01,
                                     epsilon=epsilon))
  np.testing.assert_allclose(released, expected, rtol=1e-9, atol=1e-9)
  # A wrong scale (the exact minimiser's 2C alone) gives another release.
  with jax.enable_x64(True):
    narrow = np.asarray(op.perturb(key, jnp.asarray(exact),
                                   sensitivity_l2=2 * c, epsilon=epsilon))
  assert not np.allclose(released, narrow, rtol=1e-6, atol=1e-6)
  # A batch of keys: one training, one release per key, each the release
  # of its key alone.
  keys = jax.random.split(key, 3)
  many = op.release(keys, plan, x, y)
  assert len(many) == 3
  np.testing.assert_array_equal(many[1].w, op.release(keys[1], plan, x, y).w)
  assert not np.allclose(many[0].w, many[1].w)


def test_plan_and_release_have_the_one_shape_and_pinned_record():
  plan = op.make_plan(epsilon=1.0, c=0.3)
  shape.check_plan(plan)
  shape.check_release(op.release)
  assert (plan.relation, plan.delta) == (options.Relation.REPLACE_ONE, 0.0)
  assert (plan.sensitivity, plan.scale) == (0.606, 0.606)
  assert op.sensitivity(0.3) == 0.6  # the exact minimiser's
  # Pinned against the earlier tree's record(ledger, epsilon=1, count=3).
  ledger = accounting.PrivacyLedger()
  plan.record(ledger, count=3)
  report = ledger.report(1e-5)
  assert (report["epsilon"], report["delta"]) == (3.0, 0.0)
  with pytest.raises(ValueError, match="c"):
    op.make_plan(epsilon=1.0, c=0.0)
  with pytest.raises(TypeError, match="OutputPerturbationPlan"):
    op.release(jax.random.key(0), {"epsilon": 1.0}, np.eye(2), [1, -1])


def test_plan_epsilon_is_the_ledgers_guarantee_after_a_release():
  # The convention of every plan (dpcore.shape): plan.epsilon is what the
  # ledger reports for a release; here the noise is calibrated exactly,
  # so the guarantee is the budget itself.
  x, y = heart_unit()
  plan = op.make_plan(epsilon=0.8, c=0.3)
  release = op.release(jax.random.key(3), plan, x, y)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  assert plan.epsilon == ledger.report()["epsilon"] == release.epsilon
  assert plan.target_epsilon == 0.8
  assert plan.epsilon <= plan.target_epsilon * (1 + 1e-9)


def test_plans_that_differ_only_in_epsilon_share_one_compilation():
  # The plan is a pytree of its numbers: the noise step under jit, with the
  # plan as an argument, traces once (a Python side effect counts) for
  # every ε, and draws the closed-over plan's noise.
  traces = []

  @jax.jit
  def noisy(key, plan, w):
    traces.append(plan)
    return op.perturb(key, w, sensitivity_l2=plan.sensitivity,
                      epsilon=plan.target_epsilon)

  plans = [op.make_plan(epsilon=eps, c=0.3) for eps in (0.5, 2.0)]
  outs = [noisy(jax.random.key(4), p, jnp.zeros(5)) for p in plans]
  assert len(traces) == 1
  # Same key, four times the ε: a quarter of the noise.
  np.testing.assert_allclose(outs[1], outs[0] / 4.0, rtol=1e-5)
  np.testing.assert_allclose(outs[0], op.perturb(
      jax.random.key(4), jnp.zeros(5), sensitivity_l2=0.606, epsilon=0.5),
      rtol=1e-5)
  noisy(jax.random.key(4), plans[0], jnp.zeros(6))
  assert len(traces) == 2  # another shape: the counter does count


def test_non_linear_kernel_is_refused():
  x, y = heart_unit()
  with pytest.raises(ValueError, match="needs the linear kernel"):
    op.release(jax.random.key(0), op.make_plan(epsilon=1.0, c=1.0), x, y,
               kernel="rbf")


def test_rows_outside_the_unit_ball_are_refused():
  x, y = heart_unit()
  with pytest.raises(ValueError, match="L2 norm"):
    op.release(jax.random.key(0), op.make_plan(epsilon=1.0, c=1.0), 3 * x,
               y)


def test_bad_epsilon_is_refused():
  with pytest.raises(ValueError, match="epsilon"):
    op.make_plan(epsilon=-1.0, c=1.0)


def test_an_unconverged_fit_is_not_released():
  x, y = heart_unit()
  plan = op.make_plan(epsilon=1.0, c=1.0)
  with pytest.raises(op.ConvergenceError, match="max_epochs=1 "):
    op.release(jax.random.key(0), plan, x, y, max_epochs=1)
  # The same data converges with the default cap, and the release says so.
  assert op.release(jax.random.key(0), plan, x, y).gap <= 1e-8


def test_rows_within_the_tolerance_above_one_are_clipped_inside():
  x, y = heart_unit()
  x = 0.5 * x
  plan = op.make_plan(epsilon=1.0, c=1.0)
  key = jax.random.key(0)

  def noiseless(rows, **kw):
    # The release minus its key's noise (the same for any data).
    rel = op.release(key, plan, rows, y, **kw)
    w = np.append(rel.w, rel.b) / op.BIAS_SCALE
    with jax.enable_x64(True):
      noise = np.asarray(op.perturb(key, jnp.zeros_like(jnp.asarray(w)),
                                    sensitivity_l2=plan.sensitivity,
                                    epsilon=1.0))
    return w - noise

  # Rows inside the ball are kept: the release is fit_linear's minimiser.
  exact, _, _ = op.fit_linear(x, y, c=1.0)
  np.testing.assert_allclose(noiseless(x), exact, rtol=0, atol=1e-12)
  # A row 5e-7 above the unit ball passes the check and is scaled to 1:
  # the fit is that of the clipped row, not of the row given.
  big = x.copy()
  big[0] = big[0] / np.linalg.norm(big[0]) * (1 + 5e-7)
  clipped = big.copy()
  clipped[0] = big[0] / np.linalg.norm(big[0])
  want, _, _ = op.fit_linear(clipped, y, c=1.0, tol=1e-14)
  given, _, _ = op.fit_linear(big, y, c=1.0, tol=1e-14)
  np.testing.assert_allclose(noiseless(big, tol=1e-14), want, rtol=0,
                             atol=1e-12)
  assert np.max(np.abs(given - want)) > 1e-9  # the test can tell them apart


def _dual_state(x, y, c, tol):
  """The solver's α on augment(x), stopped at projected-gradient ``tol``
  (no certificate asked)."""
  with jax.enable_x64(True):
    state = op._dual_cd(*op._solver_args(x, y, c=c, tol=tol,
                                         max_epochs=10_000, target=np.inf))
    return np.asarray(state.alpha)


def test_certified_gap_bounds_the_distance_to_the_exact_minimiser():
  # Stopped early (projected-gradient gap 0.05), ŵ is visibly off the
  # exact minimiser; √(2·certified gap) must still bound that distance,
  # and not by orders of magnitude (else the 1 % would buy nothing).
  x, y = heart_unit()
  c = 0.5
  alpha = _dual_state(x, y, c, 5e-2)
  exact, _, _ = op.fit_linear(x, y, c=c, tol=1e-12)
  with jax.enable_x64(True):
    w, certified = op.certified_gap(jnp.asarray(op.augment(x)),
                                    jnp.asarray(y, jnp.float64), c,
                                    jnp.asarray(alpha))
  distance = np.linalg.norm(np.asarray(w) - exact)
  assert 1e-6 < distance <= math.sqrt(2 * float(certified))
  assert math.sqrt(2 * float(certified)) < 100 * distance
  # The computed bound is at least the duality gap in extended precision.
  assert float(_extended_gap(x, y, c, alpha, w)) <= float(certified)


def _extended_gap(x, y, c, alpha, w):
  """P(ŵ) − D(α) in extended precision (80-bit long double here)."""
  xa = np.asarray(op.augment(x), np.longdouble)
  al, yl = np.asarray(alpha, np.longdouble), np.asarray(y, np.longdouble)
  w_alpha = xa.T @ (al * yl)
  wl = np.asarray(w, np.longdouble)
  primal = 0.5 * wl @ wl + c * np.maximum(0, 1 - yl * (xa @ wl)).sum()
  return primal - (al.sum() - 0.5 * w_alpha @ w_alpha)


def test_certified_gap_needs_its_rounding_term_near_the_optimum(monkeypatch):
  # Near the optimum the float64 gap is rounding-sized: in some of these
  # states it falls below the extended-precision gap, and only the rounding
  # term keeps the certificate above it.
  x, y = heart_unit()
  states = [(c, _dual_state(x, y, c, tol))
            for c in (0.5, 2.0, 10.0) for tol in (1e-10, 1e-13)]

  def certify(c, alpha):
    with jax.enable_x64(True):
      w, bound = op.certified_gap(jnp.asarray(op.augment(x)),
                                  jnp.asarray(y, jnp.float64), c,
                                  jnp.asarray(alpha))
    return np.asarray(w), np.longdouble(float(bound))

  truths, certified = [], []
  for c, alpha in states:
    w, bound = certify(c, alpha)
    truths.append(_extended_gap(x, y, c, alpha, w))
    certified.append(bound)
  assert all(b >= g for b, g in zip(certified, truths, strict=True))
  # The same computation with the rounding term zeroed (unit roundoff 0)
  # falls below the truth in at least one state: the test has power.
  monkeypatch.setattr(op.jnp, "finfo",
                      lambda dtype: type("F", (), {"eps": 0.0}))
  raw = [certify(c, alpha)[1] for c, alpha in states]
  assert any(r < g for r, g in zip(raw, truths, strict=True))


def test_release_runs_until_its_certified_gap_is_reached():
  # A loose projected-gradient tol would stop the solver early; the
  # release keeps going until ŵ is certified within ρ·C of the minimiser.
  x, y = heart_unit()
  plan = op.make_plan(epsilon=1.0, c=0.5, gap_fraction=1e-3)
  _, loose_epochs, _ = op.fit_linear(x, y, c=0.5, tol=0.5)
  rel = op.release(jax.random.key(0), plan, x, y, tol=0.5)
  assert rel.epochs > loose_epochs
  assert plan.gap_target == pytest.approx(0.5 * (1e-3 * 0.5) ** 2)
  # One that does not get there within max_epochs is refused, saying why,
  # even where the projected-gradient tol (here 10) is met: only the
  # certificate stops it.
  _, _, pg_gap = op.fit_linear(x, y, c=0.5, tol=10.0, max_epochs=1)
  assert pg_gap <= 10.0
  with pytest.raises(ConvergenceError, match="certified duality gap .* "
                     "after 1 of max_epochs=1"):
    op.release(jax.random.key(0), plan, x, y, tol=10.0, max_epochs=1)
  # One whose target is below the certificate's own rounding bound is
  # refused as soon as α is near the optimum (projected-gradient gap
  # within EARLY_STOP_TOL, whatever the caller's tol), not after
  # max_epochs.
  tight = op.make_plan(epsilon=1.0, c=0.5, gap_fraction=1e-9)
  with pytest.raises(ConvergenceError, match="cannot be certified at this "
                     "size.* found after 151 epochs"):
    op.release(jax.random.key(0), tight, x, y, tol=10.0, max_epochs=10_000)
  with jax.enable_x64(True):
    state = op._dual_cd(*op._solver_args(x, y, c=0.5, tol=1e-8,
                                         max_epochs=10_000,
                                         target=tight.gap_target))
  assert 1 < int(state.epoch) < 10_000
  assert float(state.gap) <= 1e-8 and float(state.rounding) > (
      tight.gap_target)
  # A plan whose noise was not sized for its certified gap is refused.
  stale = dataclasses.replace(plan, gap_fraction=0.5)
  with pytest.raises(ValueError, match="gap_fraction"):
    op.release(jax.random.key(0), stale, x, y)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan")])
def test_plan_refuses_a_bad_gap_fraction(bad):
  with pytest.raises(ValueError, match="gap_fraction"):
    op.make_plan(epsilon=1.0, c=0.3, gap_fraction=bad)
