"""Tests of aggregation="distributed_moments" (feddpdr.secure_moments)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpcore import ddg_accounting, options
from federated import ddgsgd, feddpdr, partition
from federated.feddpdr import secure_moments as sm


def _rows(count, n, d, seed):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(count, n, d)).astype(np.float32)
  x /= np.linalg.norm(x, axis=-1, keepdims=True)
  return x


def test_noise_free_sum_is_the_exact_sum_within_the_rounding_bound():
  count, n, d = 3, 5, 4
  x = _rows(count, n, d, 0)
  x[1, 2] *= 3.0  # a row of norm 3: clipped to 1, as DP-PCA clips it
  mask = np.ones((count, n), np.float32)
  mask[2, 3:] = 0.0  # padding rows (non-zero data) must not count
  params = sm.noise_free_params(dim=d, count=count, rows=count * n)
  got = np.asarray(jax.jit(lambda k: sm.noisy_moments(
      k, jnp.asarray(x), jnp.asarray(mask), params=params))(
          jax.random.key(0)))
  clipped = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1.0)
  want = np.einsum("pni,pnj,pn->ij", clipped, clipped, mask)
  # Each row's rounding moves it by < √D grid steps (rotation is
  # orthonormal), so every decoded entry is within γ·m·√D of the sum.
  bound = params.gamma * count * n * np.sqrt(params.padded)
  np.testing.assert_allclose(got, want, atol=bound)
  assert bound < 1e-2
  unmasked = np.einsum("pni,pnj->ij", clipped, clipped)
  assert np.max(np.abs(got - unmasked)) > 10 * bound


def _noise_samples(params, count, trials=64, d=3):
  x = jnp.zeros((count, 2, d), jnp.float32)
  mask = jnp.ones((count, 2), jnp.float32)
  draw = jax.jit(jax.vmap(lambda k: sm.noisy_moments(k, x, mask,
                                                     params=params)))
  out = np.asarray(draw(jax.random.split(jax.random.key(7), trials)))
  i, j = np.triu_indices(d)
  return out[:, i, j].ravel()


def test_decoded_noise_has_std_gamma_s_sqrt_p_not_that_of_sigma_over_p():
  count = 4
  plan = sm.make_plan(epsilon=1.0, delta=1e-5, dim=3, count=count, rows=8)
  p = plan.params
  samples = _noise_samples(p, count)
  right = p.gamma * float(p.sigma_share) * np.sqrt(count)
  wrong = right / np.sqrt(count)  # shares of σ/P: s·√P/P
  assert stats.kstest(samples / right, "norm").pvalue > 0.01
  assert stats.kstest(samples / wrong, "norm").pvalue < 1e-6
  assert abs(np.std(samples) / right - 1.0) < 0.15


@pytest.mark.parametrize("epsilon, count, dim", [(0.25, 2, 64), (1.0, 5, 8),
                                                 (4.0, 3, 3)])
def test_calibrated_pca_epsilon_meets_the_target_within_one_percent(
    epsilon, count, dim):
  plan = sm.make_plan(epsilon=epsilon, delta=1e-4, dim=dim, count=count,
                      rows=50 * count)
  assert 0.99 * epsilon <= plan.epsilon <= epsilon
  p = plan.params
  # The curve is the sum theorem's at 2Δ (a replaced row, rounded), P
  # shares; Δ alone, or √2·Δ, would claim less than it costs.
  def eps_at(sensitivity, shares=count):
    return ddg_accounting.rdp_epsilon(ddg_accounting.sum_rdp(
        sensitivity=sensitivity, sigma_share=float(p.sigma_share),
        shares=shares, dim=p.padded), 1e-4)
  assert plan.sensitivity == 2 * p.sensitivity
  assert plan.epsilon == pytest.approx(eps_at(2 * p.sensitivity), rel=1e-9)
  assert eps_at(np.sqrt(2) * p.sensitivity) < 0.9 * epsilon
  # Each participant's own guarantee (its share alone) is weaker.
  own = plan.own_epsilon()
  assert own == pytest.approx(eps_at(2 * p.sensitivity, shares=1),
                              rel=1e-9)
  assert own > plan.epsilon


def test_the_plan_records_both_guarantees_and_the_ledger_composes_them():
  sizes = np.array([30, 40, 30])
  config = feddpdr.Config(epsilon=2.0, k=2, lam=1.0,
                          aggregation="distributed_moments")
  plan = feddpdr.make_plan(sizes, dim=5, num_classes=3, config=config)
  assert isinstance(plan.pca, sm.SecureMomentsPlan)
  assert plan.pca.target_epsilon == plan.epsilon_pca == 1.0
  assert plan.secure_sum is plan.pca.params and plan.secure_sum.bits == 20
  secure = plan.secure_aggregation
  assert secure["own_epsilon_pca"] > secure["epsilon_pca"]
  assert secure["own_epsilon"] > plan.epsilon
  assert 0.0 <= secure["wrap_probability"] < 1e-9
  assert secure["shares"] == 3
  kinds = [e["kind"] for e in plan.privacy["entries"]]
  assert kinds[0] == "rdp_curve" and plan.privacy["relation"] == (
      "replace_one")
  assert feddpdr.program(config, secure_sum=plan.secure_sum).secure_sum == (
      plan.secure_sum)
  assert type(feddpdr.program(config)) is feddpdr.Static
  # Local mechanisms do not aggregate: the setting changes nothing there.
  local = feddpdr.make_plan(sizes, dim=5, num_classes=3,
                            config=dataclasses.replace(
                                config, mechanism="dpdr_dpml"))
  assert local.secure_sum is None and local.secure_aggregation is None


@pytest.mark.parametrize("dim", [362, 784])
def test_a_dimension_beyond_361_is_refused_before_any_work(dim, monkeypatch):
  def no_work(**_):
    raise AssertionError("calibrated before the check")
  monkeypatch.setattr(ddgsgd, "calibrate", no_work)
  config = feddpdr.Config(aggregation="distributed_moments")
  message = (r"^aggregation=distributed_moments sums upper\(xxᵀ\), .* "
             r"d <= 361; use aggregation=moments")
  with pytest.raises(ValueError, match=message) as err:
    config.check(dim=dim)
  assert "\n" not in str(err.value)
  with pytest.raises(ValueError, match=message):
    feddpdr.make_plan([10, 10], dim=dim, num_classes=2, config=config)
  with pytest.raises(ValueError, match=message):
    feddpdr.make_plan([10, 10], dim=dim, num_classes=2,
                      config=dataclasses.replace(config, mechanism="nonpriv"))
  assert sm.MAX_DIM == 361 and sm.check_dim(361) == 361
  # Mechanisms without a server aggregate ignore the setting, as they do
  # every aggregation.
  dataclasses.replace(config, mechanism="dpml").check(dim=dim)


@pytest.mark.parametrize("change, message", [
    (dict(relation="add_remove"), "^aggregation=distributed_moments is "
     "calibrated under replace_one"),
    (dict(calibration="classic", epsilon=1.0), "^calibration=classic is "
     "DP-PCA's Gaussian formula"),
])
def test_settings_only_gaussian_dp_pca_reads_are_refused(change, message):
  config = feddpdr.Config(aggregation="distributed_moments", **change)
  with pytest.raises(ValueError, match=message):
    config.check(dim=30)


def test_training_without_the_plans_parameters_is_refused():
  config = feddpdr.Config(aggregation="distributed_moments", k=2)
  with pytest.raises(ValueError, match="needs its plan's secure-sum"):
    feddpdr.secure_sum_of(feddpdr.program(config))


def test_the_option_is_an_aggregation():
  assert options.Aggregation("distributed_moments") is (
      options.Aggregation.DISTRIBUTED_MOMENTS)


# Values of feddpdr.release for the existing aggregations, computed before
# distributed_moments was added (commit 1000fe0): its keys, stages and
# plans must leave them as they were.
_GOLDEN = {"subspace": (0.025788724422454834, 0.2347299992843319),
           "paper": (-0.07448078691959381, 0.10310810755569386),
           "moments": (-0.24671757221221924, 0.029765734616032873)}


@pytest.mark.parametrize("aggregation", [
    "subspace",  # the default; the others compile programs of their own
    pytest.param("paper", marks=pytest.mark.slow),
    pytest.param("moments", marks=pytest.mark.slow)])
def test_existing_aggregations_give_the_outputs_they_gave(aggregation):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(160, 5)).astype(np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  y = rng.integers(0, 3, 160)
  parts = partition.partition(jax.random.key(0), x[:120], y[:120],
                              sizes=(50, 70))
  config = feddpdr.Config(epsilon=2.0, k=2, lam=1.0, aggregation=aggregation)
  plan = feddpdr.make_plan(parts.sizes, dim=5, num_classes=3, config=config)
  assert plan.secure_sum is None and plan.secure_aggregation is None
  out = jax.device_get(feddpdr.release(jax.random.key(3), plan, parts))
  # Taken with XLA's default build; the tolerance allows for another
  # CPU's rounding and the suite's optimisation level 0 (tests/conftest.py:
  # 1.2e-5 relative on the float32 basis), far below any change of method.
  basis, beta = _GOLDEN[aggregation]
  assert float(np.asarray(out.global_basis)[0, 0, 0]) == pytest.approx(
      basis, rel=1e-4)
  assert float(np.asarray(out.global_betas)[0, 0, 0]) == pytest.approx(
      beta, rel=1e-4)


def test_release_checks_its_plan_and_shapes_before_any_work():
  plan = sm.make_plan(epsilon=1.0, delta=1e-5, dim=3, count=2, rows=4)
  x = jnp.zeros((2, 2, 3), jnp.float32)
  mask = jnp.ones((2, 2), jnp.float32)
  with pytest.raises(TypeError, match="plan must be a SecureMomentsPlan"):
    sm.release(jax.random.key(0), plan.params, x, mask)
  with pytest.raises(ValueError, match=r"x must be \(2, n, 3\)"):
    sm.release(jax.random.key(0), plan, x[:1], mask[:1])
