"""mechanisms.pca.dp_pca: exactness without noise, noise scale, vmap."""

import dataclasses

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import pld
from scipy import stats
from sklearn.decomposition import TruncatedSVD

from dpcore import accounting, lattice, noise, options, shape
from mechanisms.pca import dp_pca
from tests.dpcore import products
from tests.pinned import accounted


def _unit_rows(n, d, seed):
  rng = np.random.default_rng(seed)
  # A few dominant directions so the top-k eigenvalues are well separated.
  x = rng.normal(size=(n, d)) * np.linspace(3.0, 0.3, d)
  return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _same_subspace_up_to_sign(a, b, atol):
  # Columns match one to one up to sign: |<a_j, b_j>| = 1.
  dots = np.abs(np.sum(np.asarray(a, np.float64) * np.asarray(b), axis=0))
  np.testing.assert_allclose(dots, 1.0, atol=atol)


def test_exact_pca_matches_sklearn_truncated_svd():
  x = _unit_rows(300, 12, 0)
  k = 4
  ours = dp_pca.pca(jnp.asarray(x), jnp.ones(300), k=k)
  svd = TruncatedSVD(n_components=k, algorithm="arpack").fit(
      x.astype(np.float64))
  # float32 eigh of a well-conditioned 12x12 matrix: ~1e-5 accuracy.
  _same_subspace_up_to_sign(ours.components, svd.components_.T, atol=1e-4)
  assert np.all(np.diff(np.asarray(ours.eigenvalues)) <= 0)  # descending


def test_dp_pca_without_noise_is_exact_pca():
  x = jnp.asarray(_unit_rows(300, 12, 1))
  mask = jnp.ones(300)
  exact = dp_pca.pca(x, mask, k=3)
  # ε → ∞ means σ → 0: the noise-free second moment gives the exact basis
  # (dp_pca itself refuses σ = 0, see test_sigma_must_be_positive).
  noisy = dp_pca.top_k_eigenvectors(dp_pca.noisy_second_moment(
      jax.random.key(0), x, mask, sigma=0.0), 3)
  # (a float32 eigenvector is a unit vector to some ulps: 1.5e-6 on an H100)
  _same_subspace_up_to_sign(noisy.components, exact.components, atol=1e-5)
  sigma = dp_pca.pca_sigma(epsilon=1e6, delta=1e-5)
  assert sigma < 1e-2
  tiny = dp_pca.noisy_basis(jax.random.key(0), x, mask, k=3, sigma=sigma)
  _same_subspace_up_to_sign(tiny.components, exact.components, atol=1e-3)


def test_noise_matches_calibration_and_rejects_wrong_sigma():
  d = 30
  x = jnp.asarray(_unit_rows(100, d, 2))
  mask = jnp.ones(100)
  sigma = dp_pca.pca_sigma(epsilon=0.5, delta=1e-5)
  exact = dp_pca.second_moment(x, mask)
  keys = jax.random.split(jax.random.key(7), 8)
  noisy = jax.vmap(lambda kk: dp_pca.noisy_second_moment(
      kk, x, mask, sigma=sigma))(keys)
  noise = np.asarray(noisy - exact[None], np.float64)
  # The noise matrix is symmetric.
  np.testing.assert_array_equal(noise, np.swapaxes(noise, 1, 2))
  rows, cols = np.triu_indices(d)
  entries = noise[:, rows, cols].ravel()  # 8 * 465 independent draws
  assert stats.kstest(entries, stats.norm(0, sigma).cdf).pvalue > 1e-3
  for wrong in (0.8 * sigma, 1.2 * sigma):
    assert stats.kstest(entries, stats.norm(0, wrong).cdf).pvalue < 1e-6


def test_sigma_calibrations_against_dp_accounting():
  eps, delta = 0.5, 1e-4
  analytic = dp_pca.pca_sigma(epsilon=eps, delta=delta)
  classic = dp_pca.pca_sigma(epsilon=eps, delta=delta, calibration="classic")
  np.testing.assert_allclose(classic, np.sqrt(2 * np.log(1.25 / delta)) / eps)
  assert analytic < classic
  # The analytic σ spends exactly δ at ε (dp_accounting's PLD of the same
  # Gaussian, an independent computation).
  acc = pld.PLDAccountant(value_discretization_interval=1e-5)
  acc.compose(dp_accounting.GaussianDpEvent(analytic))
  np.testing.assert_allclose(acc.get_delta(eps), delta, rtol=1e-2)
  replace = dp_pca.pca_sigma(epsilon=eps, delta=delta,
                             sensitivity=np.sqrt(2))
  np.testing.assert_allclose(replace, np.sqrt(2) * analytic, rtol=1e-9)
  with pytest.raises(ValueError, match="classic"):
    dp_pca.pca_sigma(epsilon=1.0, delta=delta, calibration="classic")
  with pytest.raises(ValueError, match="calibration"):
    dp_pca.pca_sigma(epsilon=0.5, delta=delta, calibration="gauss")


@pytest.mark.slow
def test_padding_and_vmap_equal_per_participant_loop():
  d, k = 10, 3
  sizes = (40, 25, 33)
  xs = [_unit_rows(s, d, 10 + i) for i, s in enumerate(sizes)]
  n_max = 50
  x = np.full((3, n_max, d), 0.7, np.float32)  # garbage in the padding
  mask = np.zeros((3, n_max), np.float32)
  for i, xi in enumerate(xs):
    x[i, :len(xi)] = xi
    mask[i, :len(xi)] = 1
  keys = jax.random.split(jax.random.key(3), 3)
  sigma = jnp.array([0.5, 1.0, 2.0])
  batched = jax.jit(jax.vmap(
      lambda kk, xi, mi, si: dp_pca.noisy_basis(kk, xi, mi, k=k, sigma=si)))(
          keys, jnp.asarray(x), jnp.asarray(mask), sigma)
  for i, xi in enumerate(xs):
    alone = dp_pca.noisy_basis(keys[i], jnp.asarray(xi), jnp.ones(len(xi)),
                               k=k, sigma=sigma[i])
    np.testing.assert_allclose(batched.eigenvalues[i], alone.eigenvalues,
                               rtol=1e-4, atol=1e-4)
    _same_subspace_up_to_sign(batched.components[i], alone.components,
                              atol=1e-4)


@pytest.mark.parametrize("bad, match", [
    ("k_too_large", "exceeds the data dimension"),
    ("nan", "NaN"),
    ("norm", "norm"),
])
def test_bad_input(bad, match):
  x = _unit_rows(20, 5, 4)
  k = 2
  if bad == "k_too_large":
    k = 6
  elif bad == "nan":
    x[3, 1] = np.nan
  else:
    x[0] *= 2.0
  with pytest.raises(ValueError, match=match):
    dp_pca.check_pca_inputs(x, k=k)
  with pytest.raises(ValueError, match="epsilon"):
    dp_pca.pca_sigma(epsilon=0.0, delta=1e-5)
  with pytest.raises(ValueError, match="delta"):
    dp_pca.pca_sigma(epsilon=1.0, delta=1.0)


def test_rows_over_norm_one_are_clipped_inside_the_mechanism():
  # The sensitivity needs ‖x‖ ≤ 1; the jitted mechanism enforces it itself,
  # so a row of norm 5 counts exactly as that row scaled to norm 1.
  rng = np.random.default_rng(3)
  x = rng.normal(size=(50, 6)).astype(np.float32)
  x /= 2 * np.linalg.norm(x, axis=1, keepdims=True)  # norms 0.5
  big = x.copy()
  big[:5] *= 10.0                                     # norms 5
  clipped = x.copy()
  clipped[:5] *= 2.0                                  # norms 1
  mask = np.ones(50, np.float32)
  key = jax.random.key(0)
  noisy = lambda rows: dp_pca.noisy_second_moment(  # noqa: E731
      key, jnp.asarray(rows), mask, sigma=0.1)
  np.testing.assert_allclose(noisy(big), noisy(clipped), rtol=1e-5,
                             atol=1e-5)
  assert not np.allclose(noisy(big), noisy(x), atol=1e-3)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_narrow_rows_are_summed_in_float32(dtype):
  # In float16 2048 + 1 rounds to 2048 (in bfloat16, 256 + 1 to 256): a
  # row summed at its own precision could move XᵀX by 2, twice the
  # sensitivity σ is calibrated for.
  n = 2050 if dtype == jnp.float16 else 258
  x = jnp.zeros((n, 2), dtype).at[:, 0].set(1)
  mask = jnp.ones(n, jnp.float32)
  without = mask.at[-1].set(0)
  key = jax.random.key(0)

  def noisy(m):
    return dp_pca.noisy_second_moment(key, x, m, sigma=1e-3)

  assert dp_pca.clipped_rows(x, mask).dtype == jnp.float32
  moved = float(noisy(mask)[0, 0] - noisy(without)[0, 0])
  assert moved == pytest.approx(1.0, abs=1e-2)


def test_a_lattice_too_fine_for_the_rows_is_refused():
  # XᵀX's entries reach n; past 2³⁰ grid units the lattice would clip the
  # matrix in silence.
  x = jnp.zeros((2 ** 17, 2), jnp.float32).at[:, 0].set(1)
  mask = jnp.ones(2 ** 17, jnp.float32)
  with pytest.raises(ValueError, match="granularity ≥ 0.000244"):
    dp_pca.noisy_second_moment(jax.random.key(0), x, mask, sigma=1.0,
                               noise="discrete", granularity=2.0 ** -13)
  out = dp_pca.noisy_second_moment(jax.random.key(0), x, mask, sigma=1.0,
                                   noise="discrete", granularity=2.0 ** -12)
  assert float(out[0, 0]) == pytest.approx(2 ** 17, abs=10)


def test_mask_values_are_bounded_to_zero_one():
  # A unit row with mask 5 would add 25 to XᵀX; it counts once. NaN and
  # negative mask entries count zero.
  key = jax.random.key(0)
  one = dp_pca.noisy_second_moment(key, jnp.array([[1.0, 0.0, 0.0]]),
                                   jnp.array([5.0]), sigma=0.0)
  np.testing.assert_allclose(one, np.diag([1.0, 0.0, 0.0]))
  x = jnp.asarray(_unit_rows(4, 3, 5))
  odd = dp_pca.noisy_second_moment(key, x, jnp.array(
      [5.0, jnp.nan, -3.0, 1.0]), sigma=0.0)
  ref = dp_pca.second_moment(x, jnp.array([1.0, 0.0, 0.0, 1.0]))
  np.testing.assert_allclose(odd, ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("k", [0, -1, 7, 2.0])
def test_k_outside_one_to_d_is_refused(k):
  x = jnp.asarray(_unit_rows(20, 6, 6))
  mask = jnp.ones(20)
  with pytest.raises(ValueError, match="k"):
    dp_pca.noisy_basis(jax.random.key(0), x, mask, k=k, sigma=1.0)
  with pytest.raises(ValueError, match="k"):
    jax.jit(dp_pca.noisy_basis, static_argnames="k")(
        jax.random.key(0), x, mask, k=k, sigma=1.0)
  # k = d is the largest allowed.
  assert dp_pca.noisy_basis(jax.random.key(0), x, mask, k=6,
                       sigma=1.0).components.shape == (6, 6)


@pytest.mark.parametrize("sigma", [0.0, -1.0, float("nan"), float("inf"),
                                   np.float32(0.0), jnp.asarray(0.0)])
def test_sigma_must_be_positive(sigma):
  x = jnp.asarray(_unit_rows(20, 6, 7))
  with pytest.raises(ValueError, match="dp_pca.pca"):
    dp_pca.noisy_basis(jax.random.key(0), x, jnp.ones(20), k=2, sigma=sigma)


def test_traced_sigma_is_left_to_the_caller():
  # Under jit/vmap σ is a tracer (one per participant in feddpdr): no check.
  x = jnp.asarray(_unit_rows(20, 6, 8))
  out = jax.jit(lambda s: dp_pca.noisy_basis(
      jax.random.key(0), x, jnp.ones(20), k=2, sigma=s))(0.5)
  assert out.components.shape == (6, 2)


def test_release_calibrates_and_equals_the_kernel():
  x = _unit_rows(200, 8, 9)
  key = jax.random.key(4)
  for relation, sens in (("add_remove", 1.0), ("replace_one", np.sqrt(2))):
    plan = dp_pca.make_plan(epsilon=0.7, delta=1e-5, k=3, dim=8,
                            relation=relation)
    assert plan.relation is options.Relation(relation)
    assert plan.sensitivity == sens
    assert plan.sigma == pytest.approx(dp_pca.pca_sigma(
        epsilon=0.7, delta=1e-5, sensitivity=sens), rel=1e-12)
    result = dp_pca.release(key, plan, x)
    kernel = dp_pca.noisy_basis(key, jnp.asarray(x), jnp.ones(200), k=3,
                                sigma=plan.sigma)
    np.testing.assert_array_equal(result.eigenvalues, kernel.eigenvalues)
    np.testing.assert_array_equal(result.components, kernel.components)
  classic = dp_pca.make_plan(epsilon=0.7, delta=1e-5, k=3, dim=8,
                             calibration="classic")
  assert classic.sigma == pytest.approx(np.sqrt(2 * np.log(1.25e5)) / 0.7)
  assert dp_pca.release(key, classic, x).components.shape == (8, 3)


def test_plan_and_release_have_the_one_shape():
  plans = [dp_pca.make_plan(epsilon=0.5, delta=1e-5, k=2, dim=4),
           dp_pca.make_plan(epsilon=1.0, delta=1e-5, k=2, dim=4,
                            noise="discrete", granularity=2.0 ** -8)]
  for plan in plans:
    shape.check_plan(plan)
  shape.check_release(dp_pca.release)


# Pinned: the ε each plan's record gives, as the module-level record of
# the same σ gave before the plans (computed on the earlier tree).
@pytest.mark.parametrize("kwargs, record_as, epsilon", [
    ({}, None, 0.5),
    ({"relation": "replace_one"}, None, 0.5),
    # σ calibrated for add/remove, accounted under replace-one (feddpdr).
    ({}, "replace_one", 0.7299501990755743),
    ({"epsilon": 1.0, "dim": 5, "noise": "discrete",
      "granularity": 2.0 ** -8}, None, 0.9992541250376661),
])
def test_plan_record_gives_the_pinned_epsilon(kwargs, record_as, epsilon):
  settings = {"epsilon": 0.5, "delta": 1e-5, "k": 3, "dim": 8, **kwargs}
  plan = dp_pca.make_plan(**settings)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger, relation=record_as)
  assert ledger.relation is (plan.relation if record_as is None
                             else options.Relation(record_as))
  report = ledger.report(1e-5)
  assert report["epsilon"] == accounted(epsilon)
  assert report["delta"] == 1e-5
  # The plan states the guarantee of its own record (its relation), at
  # most the budget σ was calibrated for (the ledger's 1e-9 tolerance).
  assert plan.target_epsilon == settings["epsilon"]
  if record_as is None:
    assert plan.epsilon == accounted(epsilon)
  assert plan.epsilon <= plan.target_epsilon * (1 + 1e-9)
  # The pinned σ of these settings.
  if "noise" in kwargs:
    assert plan.sigma == 4.109375 and plan.sigma_lattice == 1052
  elif "relation" in kwargs:
    assert plan.sigma == 9.94450465286923
  else:
    assert plan.sigma == 7.031826675585006


@pytest.mark.slow
def test_plan_is_a_pytree_of_sigma_for_jit_and_vmap():
  x = jnp.asarray(_unit_rows(30, 5, 12))
  plan = dp_pca.make_plan(epsilon=0.5, delta=1e-5, k=2, dim=5)
  assert jax.tree.leaves(plan) == [plan.sigma, plan.epsilon, 0.5, 1e-5]
  key = jax.random.key(1)
  eager = dp_pca.release(key, plan, x)
  jitted = jax.jit(dp_pca.release)(key, plan, x)
  np.testing.assert_allclose(jitted.components, eager.components, atol=1e-5)
  # One participant per row: the σ leaf batched, the rest of the plan
  # shared; each row equals the kernel with its own σ.
  sigmas = jnp.array([plan.sigma, 2 * plan.sigma])
  batch = dataclasses.replace(jax.tree.map(lambda v: jnp.full(2, v), plan),
                              sigma=sigmas)
  keys = jax.random.split(key, 2)
  out = jax.vmap(dp_pca.release, in_axes=(0, 0, None))(keys, batch, x)
  for i in range(2):
    alone = dp_pca.noisy_basis(keys[i], x, jnp.ones(30), k=2,
                               sigma=sigmas[i])
    np.testing.assert_allclose(out.eigenvalues[i], alone.eigenvalues,
                               rtol=1e-5, atol=1e-5)


def test_plans_that_differ_only_in_epsilon_share_one_compilation():
  # σ, ε, the target and δ are the plan's leaves, k, d and the noise its
  # static part: one trace (counted by a Python side effect) for both ε.
  x = jnp.asarray(_unit_rows(30, 5, 13))
  traces = []

  @jax.jit
  def run(key, plan):
    traces.append(plan)
    return dp_pca.release(key, plan, x).eigenvalues

  plans = [dp_pca.make_plan(epsilon=eps, delta=1e-5, k=2, dim=5)
           for eps in (0.5, 2.0)]
  outs = [run(jax.random.key(0), p) for p in plans]
  assert len(traces) == 1
  assert not np.allclose(outs[0], outs[1])
  np.testing.assert_allclose(
      outs[1], dp_pca.release(jax.random.key(0), plans[1], x).eigenvalues,
      rtol=1e-5)
  run(jax.random.key(0), dp_pca.make_plan(epsilon=0.5, delta=1e-5, k=3,
                                          dim=5))
  assert len(traces) == 2  # another k, another program: the counter counts


def test_discrete_plans_share_one_compilation_with_the_same_draws():
  # The lattice σ and its exact sampler are leaves too: one program for
  # every ε, and bitwise the release of the plan as a constant of the
  # program (the sampler's draws are the rational σ's: discrete_test).
  x = jnp.asarray(_unit_rows(30, 5, 13))
  traces = []

  @jax.jit
  def run(key, plan):
    traces.append(plan)
    return dp_pca.release(key, plan, x).components

  for eps in (0.5, 2.0):
    plan = dp_pca.make_plan(epsilon=eps, delta=1e-5, k=2, dim=5,
                            noise="discrete", granularity=2.0 ** -10)
    constant = jax.jit(lambda key, plan=plan: dp_pca.release(
        key, plan, x).components)
    np.testing.assert_array_equal(run(jax.random.key(1), plan),
                                  constant(jax.random.key(1)))
  assert len(traces) == 1


@pytest.mark.parametrize("bad, match", [
    ("empty", "non-empty"),
    ("all_nan", "NaN"),
    ("norm", "norm"),
    ("dim", "dim=5"),
    ("plan", "PcaPlan"),
])
def test_release_validates_before_tracing(bad, match):
  x = _unit_rows(20, 5, 10)
  plan = dp_pca.make_plan(epsilon=1.0, delta=1e-5, k=2, dim=5)
  if bad == "empty":
    x = x[:0]
  elif bad == "all_nan":
    x = np.full_like(x, np.nan)
  elif bad == "norm":
    x[0] *= 2.0
  elif bad == "dim":
    x = x[:, :4]
  error = TypeError if bad == "plan" else ValueError
  with pytest.raises(error, match=match):
    dp_pca.release(jax.random.key(0), {"sigma": 1.0} if bad == "plan"
                   else plan, x)


@pytest.mark.parametrize("kwargs, match", [
    ({"k": 6}, "exceeds the data dimension"),
    ({"k": 0}, "k must be"),
    ({"relation": "swap"}, "relation"),
    ({"epsilon": 0.0}, "epsilon"),
    ({"delta": 0.0}, "delta"),
    ({"calibration": "gauss"}, "calibration"),
    ({"noise": "discrete", "granularity": 2.0 ** -8,
      "calibration": "classic"}, "float noise only"),
])
def test_make_plan_validates(kwargs, match):
  settings = {"epsilon": 1.0, "delta": 1e-5, "k": 2, "dim": 5, **kwargs}
  with pytest.raises(ValueError, match=match):
    dp_pca.make_plan(**settings)


# -- exact (discrete) noise ----------------------------------------------------


def _discrete_moments(sigma, granularity, d=8, n=40, keys=400):
  x = jnp.asarray(_unit_rows(n, d, 5))
  mask = jnp.ones(n)
  out = jax.vmap(lambda k: dp_pca.noisy_second_moment(
      k, x, mask, sigma=sigma, noise="discrete",
      granularity=granularity))(jax.random.split(jax.random.key(11), keys))
  units = np.asarray(lattice.gram_on_lattice(x, granularity), np.float64)
  return np.asarray(out, np.float64), units


def test_discrete_mode_is_on_the_grid_symmetric_and_noised_by_sigma():
  g = 2.0 ** -5
  sigma = 40 * g  # 40 grid units
  out, units = _discrete_moments(sigma, g)
  grid = out / g
  np.testing.assert_array_equal(grid, np.round(grid))  # integers·γ, exact
  np.testing.assert_array_equal(out, np.swapaxes(out, -1, -2))
  iu = np.triu_indices(out.shape[-1])
  noise = (out[:, iu[0], iu[1]] - units * g).ravel()  # 400·36 draws
  assert np.all(noise / g == np.round(noise / g))
  # Variance (σ_lattice·γ)² = σ² (σ/γ = 40 is an integer); the sample
  # variance of 14 400 draws has relative s.e. √(2/N) ≈ 1.2 %.
  var = noise.var()
  assert abs(var / sigma**2 - 1.0) < 5 * np.sqrt(2 / noise.size)
  assert abs(var / (1.1 * sigma) ** 2 - 1.0) > 10 * np.sqrt(2 / noise.size)
  assert abs(noise.mean()) < 5 * sigma / np.sqrt(noise.size)


def test_discrete_query_moves_by_at_most_the_lattice_sensitivity():
  # A canary e₁ among 60 000 non-negative unit rows (d = 2, γ = 2⁻¹⁴): a
  # float32 XᵀX moved the rounded query by 16 416 grid units at some
  # positions, past the 16 386 accounted; the integer XᵀX moves it by
  # exactly the canary's 2¹⁴ units wherever it sits.
  n, g = 60_000, 2.0 ** -14
  rng = np.random.default_rng(1)
  x = np.abs(rng.normal(size=(n, 2))).astype(np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  bound = dp_pca.lattice_sensitivity("add_remove", dim=2, granularity=g)
  query = jax.jit(lambda x, mask: lattice.gram_on_lattice(
      dp_pca.clipped_rows(x, mask), g))
  for at in np.linspace(0, n - 1, 41).astype(int):
    rows = x.copy()
    rows[at] = [1.0, 0.0]
    mask = np.ones(n, np.float32)
    a = np.asarray(query(rows, mask), np.int64)
    mask[at] = 0.0
    b = np.asarray(query(rows, mask), np.int64)
    np.testing.assert_array_equal(a - b, [2 ** 14, 0, 0])
    assert np.linalg.norm(a - b) <= bound


def test_discrete_mode_rounds_sigma_up_to_the_grid():
  assert dp_pca.lattice_sigma(1.01, granularity=0.5) == 3
  assert dp_pca.lattice_sigma(1.0, granularity=0.5) == 2


def test_discrete_record_uses_lattice_sigma_and_sensitivity():
  g, d = 2.0 ** -8, 6
  plan = dp_pca.make_plan(epsilon=1.0, delta=1e-5, k=2, dim=d,
                          relation="replace_one", noise="discrete",
                          granularity=g)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  (entry,) = ledger.entries
  assert entry.relation == "replace_one" == ledger.relation
  assert entry.kind == "discrete_gaussian"
  assert entry.params["sigma"] == plan.sigma_lattice == plan.sigma / g
  lattice = np.sqrt(2.0) * 256 + np.sqrt(d * (d + 1) / 2)
  assert entry.params["sensitivity"] == pytest.approx(lattice)
  assert entry.params["rho"] == pytest.approx(
      lattice**2 / (2 * plan.sigma_lattice**2))
  float_ledger = accounting.PrivacyLedger()
  # The old spelling is mapped by options.parse_relation, to the same entry.
  dp_pca.make_plan(epsilon=1.0, delta=1e-5, k=2, dim=d,
                   relation="replace").record(float_ledger)
  assert float_ledger.entries[0].kind == "gaussian"
  assert float_ledger.entries[0].relation is options.Relation.REPLACE_ONE
  assert dp_pca.sensitivity("replace") == dp_pca.sensitivity("replace_one")


def test_discrete_release_meets_its_epsilon():
  x = _unit_rows(200, 5, 6)
  g = 2.0 ** -8
  plan = dp_pca.make_plan(epsilon=1.0, delta=1e-5, k=2, dim=5,
                          noise="discrete", granularity=g)
  result = dp_pca.release(jax.random.key(3), plan, x)
  assert result.components.shape == (5, 2)
  assert plan.sigma / g == int(plan.sigma / g) == plan.sigma_lattice
  # Under jit the plan's σ is traced; the discrete path uses its static
  # lattice σ, so the jitted release is the same release.
  jitted = jax.jit(dp_pca.release)(jax.random.key(3), plan, x)
  np.testing.assert_array_equal(jitted.components, result.components)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  eps = ledger.report(1e-5)["epsilon"]
  assert 0.95 < eps <= 1.0
  # One grid step less noise would overspend.
  tighter = accounting.PrivacyLedger()
  smaller = dataclasses.replace(plan, sigma=plan.sigma - g,
                                sigma_lattice=plan.sigma_lattice - 1)
  smaller.record(tighter)
  assert tighter.report(1e-5)["epsilon"] > 1.0
  # The copy draws from its own σ: its sampler follows the lattice σ.
  assert int(smaller.sampler.n) == smaller.sigma_lattice ** 2
  assert int(plan.sampler.n) == plan.sigma_lattice ** 2


def test_float_mode_is_the_default_and_unchanged():
  x = jnp.asarray(_unit_rows(30, 4, 7))
  mask = jnp.ones(30)
  key = jax.random.key(0)
  np.testing.assert_array_equal(
      dp_pca.noisy_second_moment(key, x, mask, sigma=2.0),
      dp_pca.noisy_second_moment(key, x, mask, sigma=2.0, noise="float"))


@pytest.mark.parametrize("kwargs,match", [
    ({"noise": "exact"}, "noise must be one of"),
    ({"noise": "discrete"}, "needs a granularity"),
    ({"noise": "discrete", "granularity": 0.3}, "power of two"),
    ({"noise": "float", "granularity": 2.0 ** -4}, "only to noise"),
    ({"noise": "discrete", "granularity": 2.0 ** -26}, "round"),
    ({"noise": "discrete", "granularity": 2.0 ** -30}, "granularity ≥"),
])
def test_discrete_mode_validation(kwargs, match):
  x = jnp.asarray(_unit_rows(10, 3, 8))
  with pytest.raises(ValueError, match=match):
    dp_pca.noisy_basis(jax.random.key(0), x, jnp.ones(10), k=2, sigma=1.0,
                  **kwargs)


def test_discrete_mode_refuses_a_traced_sigma():
  x = jnp.asarray(_unit_rows(10, 3, 9))
  f = jax.jit(lambda s: dp_pca.noisy_basis(jax.random.key(0), x, jnp.ones(10),
                                      k=2, sigma=s, noise="discrete",
                                      granularity=2.0 ** -4))
  with pytest.raises(ValueError, match="concrete"):
    f(1.0)


@pytest.mark.slow
def test_subspace_topk_keeps_the_noisy_matrix_utility():
  # Post-processing choice: the subspace iteration's basis captures the
  # noise-free variance as well as eigh's basis of the same noisy matrix.
  rng = np.random.default_rng(3)
  d, k = 40, 4
  scales = np.concatenate([np.array([6.0, 5.0, 4.0, 3.0]),
                           0.3 * np.ones(d - 4)])
  x = rng.normal(size=(600, d)) * scales
  x = (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1.0))
  x = x.astype(np.float32)
  clean = x.T @ x
  key = jax.random.key(4)
  noise_key, _ = jax.random.split(key)
  sub = dp_pca.noisy_basis(key, x, np.ones(600, np.float32), k=k, sigma=2.0,
                      topk="subspace")
  # eigh of the same noisy matrix (the subspace path noises with the
  # first half of the split key).
  exact = dp_pca.top_k_eigenvectors(dp_pca.noisy_second_moment(
      noise_key, x, np.ones(600, np.float32), sigma=2.0), k)
  captured = lambda u: float(np.trace(np.asarray(u).T @ clean @ np.asarray(u)))
  assert captured(sub.components) >= 0.99 * captured(exact.components)
  np.testing.assert_allclose(
      np.asarray(sub.components) @ np.asarray(sub.components).T,
      np.asarray(exact.components) @ np.asarray(exact.components).T,
      atol=1e-3)
  with pytest.raises(ValueError, match="topk"):
    dp_pca.noisy_basis(key, x, np.ones(600, np.float32), k=k, sigma=2.0,
                  topk="power")
  basis = dp_pca.release(key, dp_pca.make_plan(
      epsilon=1.0, delta=1e-5, k=k, dim=d), x, topk="subspace")
  assert basis.components.shape == (d, k)


@pytest.mark.slow
def test_second_moment_and_noise_are_the_release_apart():
  # m + mirror(z) is noisy_second_moment from the same key, and the sum of
  # releases equals Σ m + mirror(Σ z) (what the moments server computes).
  x = jax.random.uniform(jax.random.key(1), (4, 30, 12))
  mask = jnp.ones((4, 30)).at[:, 25:].set(0.0)
  keys = jax.random.split(jax.random.key(2), 4)
  releases = [dp_pca.noisy_second_moment(keys[i], x[i], mask[i], sigma=2.0)
              for i in range(4)]
  parts = [dp_pca.second_moment_and_noise(keys[i], x[i], mask[i], sigma=2.0)
           for i in range(4)]
  for release, (m, z) in zip(releases, parts, strict=True):
    assert z.shape == (12 * 13 // 2,)
    np.testing.assert_array_equal(
        release, m + noise.symmetric_from_upper(z, 12))
  summed = sum(m for m, _ in parts) + noise.symmetric_from_upper(
      sum(z for _, z in parts), 12)
  np.testing.assert_allclose(summed, sum(releases), atol=1e-4)
  # The noise is really there (σ = 2 on every entry), and another key
  # gives another release.
  assert float(jnp.std(parts[0][1])) > 1.0
  other = dp_pca.second_moment_and_noise(keys[0], x[1], mask[1], sigma=2.0)
  np.testing.assert_array_equal(other[1], parts[0][1])
  assert not np.allclose(parts[1][1], parts[0][1])
  with pytest.raises(ValueError, match="distinct must have shape"):
    noise.symmetric_from_upper(jnp.zeros(5), 12)


def test_the_second_moment_of_the_clipped_rows_is_summed_at_full_precision():
  # From TensorFloat-32 operands (a GPU's default) a unit row would add up
  # to about 2⁻¹⁰ more than the sensitivity the noise is calibrated for.
  x = jnp.asarray(_unit_rows(40, 6, 2))
  mask = jnp.ones(40)
  key = jax.random.key(0)
  for fn in (lambda k, a, m: dp_pca.noisy_second_moment(k, a, m, sigma=1.0),
             lambda k, a, m: dp_pca.noisy_second_moment(
                 k, a, m, sigma=1.0, noise="discrete",
                 granularity=2.0 ** -8),
             lambda k, a, m: dp_pca.second_moment_and_noise(k, a, m,
                                                            sigma=1.0),
             lambda k, a, m: dp_pca.second_moment(a, m)):
    found = products.below_full_precision(fn, key, x, mask)
    assert not found, found
