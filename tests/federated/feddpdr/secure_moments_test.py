"""Tests of aggregation="distributed_moments" (feddpdr.secure_moments)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpcore import accounting, clipping, ddg, ddg_accounting, options
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
  # The program carries the sum's static facts; its grid and shares go in
  # the traced arguments (one program for every budget).
  assert type(feddpdr.program(config)) is feddpdr.Program
  assert feddpdr.program(config) == feddpdr.program(
      dataclasses.replace(config, epsilon=4.0))
  assert type(feddpdr.program(config.static)) is feddpdr.Static
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
  traced = feddpdr.Traced(*(jnp.zeros(3),) * 5)
  with pytest.raises(ValueError, match="needs its plan's secure-sum"):
    feddpdr.secure_sum_of(traced)


def test_the_option_is_an_aggregation():
  assert options.Aggregation("distributed_moments") is (
      options.Aggregation.DISTRIBUTED_MOMENTS)


# Values of feddpdr.release for the existing aggregations: the bases as
# computed before distributed_moments was added (commit 1000fe0), whose
# keys, stages and plans must leave them as they were; the models as
# re-taken when the fits' gap noise was added (their b and z are drawn
# from halves of each fit key, and p, θ from 99 % of each fit's ε).
_GOLDEN = {"subspace": (0.025788724422454834, 0.10600126068878708),
           "paper": (-0.07448078691959381, -0.02645390439360901),
           "moments": (-0.24671757221221924, -0.09979623522196503)}


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
  # More real rows than the plan's grid was chosen for: the b-bit sum
  # could wrap around, and the decoded matrix be wrong in silence.
  many = jnp.zeros((2, 3, 3), jnp.float32)
  with pytest.raises(ValueError, match="mask marks 6 rows, more than the 4"):
    sm.release(jax.random.key(0), plan, many, jnp.ones((2, 3), jnp.float32))
  sm.release(jax.random.key(0), plan, many,
             jnp.asarray([[1, 1, 0], [1, 1, 0]], jnp.float32))


# Dropouts: min_survivors (P_min), alive, the abort.

@functools.partial(jax.jit, static_argnames="params")
def _encoded_sum(key, x, mask, alive, params):
  """Σ_{alive} of every participant's *unmasked* encoded message (the
  rows rounded, summed, its noise share), mod 2^b, decoded and mirrored:
  what the server must get, built without secure aggregation."""
  count, _, dim = x.shape
  pca_keys, _ = feddpdr.participant_keys(key, count)
  rotation_key, _ = feddpdr.protocol_keys(key)
  with jax.enable_x64(False):
    encoded = jax.vmap(lambda k, xi, mi: ddg.encode(
        k, rotation_key, sm.upper_rows(xi, mi),
        (clipping.clip_weights(mi) > 0).astype(jnp.float32),
        params=params))(pca_keys, x, mask)
    total = jnp.sum(jnp.where(alive[:, None], encoded, jnp.uint32(0)),
                    axis=0, dtype=jnp.uint32)
    return ddg.decode(total, rotation_key, params=params)


def test_with_dropouts_the_server_decodes_the_survivors_sum_and_noise():
  count, n, d = 4, 3, 3
  x = jnp.asarray(_rows(count, n, d, 1))
  mask = jnp.ones((count, n), jnp.float32)
  plan = sm.make_plan(epsilon=1.0, delta=1e-5, dim=d, count=count,
                      rows=count * n, min_survivors=2)
  alive = jnp.asarray([True, False, True, True])
  key = jax.random.key(4)
  got = np.asarray(jax.jit(lambda k, a: sm.release(k, plan, x, mask, a))(
      key, alive))
  i, j = np.triu_indices(d)
  # The survivors' rounded rows and their noise shares, exactly: the
  # dropped participant's pair masks are removed, its message is not in.
  want = np.asarray(_encoded_sum(key, x, mask, alive, plan.params))
  # The same integers decoded by the same function: float32 rounding of
  # entries of size ~10 at most.
  np.testing.assert_allclose(got[i, j], want, rtol=0, atol=1e-5)
  everyone = np.asarray(_encoded_sum(key, x, mask, jnp.ones(count, bool),
                                     plan.params))
  assert np.max(np.abs(got[i, j] - everyone)) > 0.1


def test_with_dropouts_and_no_noise_the_sum_is_the_survivors_exact_sum():
  count, n, d = 4, 5, 3
  x = _rows(count, n, d, 2)
  mask = np.ones((count, n), np.float32)
  params = sm.noise_free_params(dim=d, count=count, rows=count * n)
  alive = np.array([True, True, False, True])
  got = np.asarray(jax.jit(lambda k, a: sm.noisy_moments(
      k, jnp.asarray(x), jnp.asarray(mask), a, params=params,
      min_survivors=3))(jax.random.key(0), alive))
  want = np.einsum("pni,pnj,p->ij", x, x, alive.astype(np.float32))
  # Each row's rounding moves it by < √D grid steps (as above).
  bound = params.gamma * count * n * np.sqrt(params.padded)
  np.testing.assert_allclose(got, want, atol=bound)
  everyone = np.einsum("pni,pnj->ij", x, x)
  assert np.max(np.abs(got - everyone)) > 10 * bound


def test_a_dropped_participants_message_and_rows_are_never_in_the_sum():
  count, n, d = 3, 2, 2
  params = sm.noise_free_params(dim=d, count=count, rows=count * n)
  alive = jnp.asarray([True, False, True])
  x = jnp.asarray(_rows(count, n, d, 3))
  mask = jnp.ones((count, n), jnp.float32)
  key = jax.random.key(9)
  draw = jax.jit(lambda k, xs, a: sm.noisy_moments(
      k, xs, mask, a, params=params, min_survivors=2))
  base = np.asarray(draw(key, x, alive))
  other = np.asarray(draw(key, x.at[1].set(x[1, ::-1, ::-1]), alive))
  np.testing.assert_array_equal(base, other)  # its rows: not in the sum
  # The server's view: a dropped row of the masked messages never arrived,
  # whatever it holds; the server takes masked messages, alive and keys.
  rotation_key, setup_key = feddpdr.protocol_keys(key)
  masked = jax.vmap(lambda k, i, xi, mi: sm.message(
      k, rotation_key, setup_key, i, xi, mi, params=params, count=count))(
          feddpdr.participant_keys(key, count)[0],
          jnp.arange(count, dtype=jnp.int32), x, mask)
  serve = jax.jit(lambda m: sm.server_moments(
      m, alive, rotation_key, setup_key, params=params, dim=d,
      min_survivors=2))
  np.testing.assert_array_equal(np.asarray(serve(masked)), base)
  garbage = masked.at[1].set(jnp.uint32(12345))
  np.testing.assert_array_equal(np.asarray(serve(garbage)), base)


def test_fewer_than_min_survivors_aborts_with_nans_in_one_program():
  count, d = 4, 2
  plan = sm.make_plan(epsilon=1.0, delta=1e-5, dim=d, count=count, rows=8,
                      min_survivors=3)
  x = jnp.asarray(_rows(count, 2, d, 5))
  mask = jnp.ones((count, 2), jnp.float32)
  traces = []

  @jax.jit
  def release(key, alive):
    traces.append(1)
    return sm.release(key, plan, x, mask, alive)

  key = jax.random.key(1)
  three = np.asarray(release(key, jnp.asarray([True, True, False, True])))
  two = np.asarray(release(key, jnp.asarray([True, False, False, True])))
  everyone = np.asarray(release(key, jnp.ones(count, bool)))
  assert len(traces) == 1  # alive is traced: one program, any pattern
  assert np.all(np.isfinite(three)) and np.all(np.isfinite(everyone))
  assert np.all(np.isnan(two))
  # The default is every participant, which the plan's P_min allows.
  np.testing.assert_array_equal(
      np.asarray(jax.jit(lambda k: sm.release(k, plan, x, mask))(key)),
      everyone)


def test_noise_with_exactly_min_survivors_has_their_shares_not_all():
  count, d, trials = 4, 3, 64
  plan = sm.make_plan(epsilon=1.0, delta=1e-5, dim=d, count=count, rows=8,
                      min_survivors=1)
  p = plan.params
  x = jnp.zeros((count, 2, d), jnp.float32)
  mask = jnp.ones((count, 2), jnp.float32)
  alive = jnp.asarray([False, False, True, False])
  draw = jax.jit(jax.vmap(lambda k: sm.noisy_moments(
      k, x, mask, alive, params=p, min_survivors=1)))
  out = np.asarray(draw(jax.random.split(jax.random.key(8), trials)))
  i, j = np.triu_indices(d)
  samples = out[:, i, j].ravel()
  right = p.gamma * float(p.sigma_share)  # one survivor, one share
  wrong = right * np.sqrt(count)  # every share, as if all had arrived
  assert stats.kstest(samples / right, "norm").pvalue > 0.01
  assert stats.kstest(samples / wrong, "norm").pvalue < 1e-6
  assert abs(np.std(samples) / right - 1.0) < 0.15


def test_share_sigma_is_calibrated_for_min_survivors_shares():
  count, survivors, epsilon = 6, 2, 1.0
  plan = sm.make_plan(epsilon=epsilon, delta=1e-4, dim=4, count=count,
                      rows=60, min_survivors=survivors)
  assert (plan.participants, plan.min_survivors) == (count, survivors)
  p = plan.params

  def eps_at(shares):
    return ddg_accounting.rdp_epsilon(ddg_accounting.sum_rdp(
        sensitivity=2 * p.sensitivity, sigma_share=float(p.sigma_share),
        shares=shares, dim=p.padded), 1e-4)
  assert 0.99 * epsilon <= plan.epsilon <= epsilon
  assert plan.epsilon == pytest.approx(eps_at(survivors), rel=1e-9)
  # All P shares would claim less than the P_min the sum may hold.
  assert eps_at(count) < 0.6 * epsilon
  # The ledger entry counts P_min shares; the own guarantee is one share.
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  assert ledger.report(1e-4)["entries"][0]["params"]["shares"] == survivors
  assert plan.own_epsilon() == pytest.approx(eps_at(1), rel=1e-9)
  # Fewer survivors need larger shares than no dropouts.
  full = sm.make_plan(epsilon=epsilon, delta=1e-4, dim=4, count=count,
                      rows=60)
  assert full.min_survivors == count
  assert float(p.sigma_share) * p.gamma > 1.5 * (
      float(full.params.sigma_share) * full.params.gamma)
  settings = plan.settings()
  assert (settings["participants"], settings["min_survivors"],
          settings["shares"]) == (count, survivors, survivors)
  assert settings["central_sigma"] == pytest.approx(
      float(p.sigma_share) * np.sqrt(survivors) * p.gamma)
  assert "at least min_survivors" in settings["assumption"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(min_survivors=4), "^min_survivors=4 exceeds the 3 participants; "
     "choose min_survivors <= 3"),
    (dict(min_survivors=0), "^min_survivors must be ≥ 1, got 0"),
    (dict(min_survivors=1.5), "^min_survivors must be a positive integer"),
])
def test_bad_min_survivors_is_refused_in_one_line_before_any_work(
    kwargs, message, monkeypatch):
  def no_work(**_):
    raise AssertionError("calibrated before the check")
  monkeypatch.setattr(ddgsgd, "calibrate", no_work)
  with pytest.raises(ValueError, match=message) as err:
    sm.make_plan(epsilon=1.0, delta=1e-5, dim=3, count=3, rows=6, **kwargs)
  assert "\n" not in str(err.value)


@pytest.mark.parametrize("change, message", [
    (dict(bits=7), r"^bits must be an int in \[8, 24\]"),
    (dict(bits=25), r"^bits must be an int in \[8, 24\]"),
    (dict(bits=16.0), r"^bits must be an int in \[8, 24\]"),
    (dict(min_survivors=0), "^min_survivors must be ≥ 1"),
    (dict(dropouts=-1), "^dropouts must be a whole number >= 0"),
    (dict(aggregation="moments", min_survivors=2), "^min_survivors=2 is a "
     "setting of aggregation=distributed_moments' secure sum; with "
     "aggregation=moments leave it at None"),
    (dict(aggregation="subspace", bits=16), "^bits=16 is a setting of "
     "aggregation=distributed_moments' secure sum; with "
     "aggregation=subspace leave it at 20"),
    (dict(aggregation="paper", dropouts=1), "^dropouts=1 is a setting of "
     "aggregation=distributed_moments"),
])
def test_bad_secure_sum_settings_are_refused_in_one_line(change, message,
                                                         monkeypatch):
  def no_work(**_):
    raise AssertionError("calibrated before the check")
  monkeypatch.setattr(ddgsgd, "calibrate", no_work)
  config = feddpdr.Config(**{"aggregation": "distributed_moments", "k": 2,
                             **change})
  with pytest.raises(ValueError, match=message) as err:
    config.check(dim=5)
  assert "\n" not in str(err.value)
  with pytest.raises(ValueError, match=message):
    feddpdr.make_plan([10, 10, 10], dim=5, num_classes=2, config=config)


@pytest.mark.parametrize("change, message", [
    (dict(min_survivors=4), "^min_survivors=4 exceeds the 3 participants"),
    (dict(min_survivors=2, dropouts=2), "^dropouts=2 leaves 1 of the 3 "
     "participants' messages, fewer than min_survivors=2: the secure sum "
     "would abort"),
    (dict(dropouts=1), "^dropouts=1 leaves 2 of the 3 participants' "
     "messages, fewer than min_survivors=3"),
    (dict(mechanism="nonpriv", dropouts=3, min_survivors=1),
     "^dropouts=3 leaves 0 of the 3"),
])
def test_a_run_whose_dropouts_would_abort_is_refused_by_make_plan(
    change, message, monkeypatch):
  def no_work(**_):
    raise AssertionError("calibrated before the check")
  monkeypatch.setattr(ddgsgd, "calibrate", no_work)
  config = feddpdr.Config(aggregation="distributed_moments", k=2, **change)
  with pytest.raises(ValueError, match=message) as err:
    feddpdr.make_plan([10, 10, 10], dim=5, num_classes=2, config=config)
  assert "\n" not in str(err.value)


def test_release_checks_alive_shape():
  plan = sm.make_plan(epsilon=1.0, delta=1e-5, dim=3, count=2, rows=4)
  x = jnp.zeros((2, 2, 3), jnp.float32)
  mask = jnp.ones((2, 2), jnp.float32)
  with pytest.raises(ValueError, match=r"^alive must be \(2,\), one flag"):
    sm.release(jax.random.key(0), plan, x, mask, jnp.ones(3, bool))


def test_the_plan_and_program_carry_min_survivors_and_dropouts():
  config = feddpdr.Config(epsilon=2.0, k=2, lam=1.0, min_survivors=2,
                          dropouts=1, bits=18,
                          aggregation="distributed_moments")
  plan = feddpdr.make_plan([20, 30, 25], dim=4, num_classes=2,
                           config=config)
  assert (plan.pca.participants, plan.pca.min_survivors) == (3, 2)
  assert plan.secure_sum.bits == 18
  secure = plan.secure_aggregation
  assert (secure["participants"], secure["min_survivors"],
          secure["shares"], secure["bits"]) == (3, 2, 2, 18)
  assert plan.privacy["entries"][0]["params"]["shares"] == 2
  prog = feddpdr.program(config)
  assert (prog.min_survivors, prog.dropouts) == (2, 1)
  assert feddpdr.program(prog) == prog
  # No dropouts: the plan is the one of before (P shares, P_min = P).
  full = feddpdr.make_plan([20, 30, 25], dim=4, num_classes=2,
                           config=dataclasses.replace(
                               config, min_survivors=None, dropouts=0,
                               bits=20))
  assert full.pca.min_survivors == 3
  assert full.secure_aggregation["shares"] == 3
  nonpriv = feddpdr.make_plan([20, 30, 25], dim=4, num_classes=2,
                              config=dataclasses.replace(
                                  config, mechanism="nonpriv"))
  assert nonpriv.secure_sum.bits == 18
  assert nonpriv.secure_aggregation["min_survivors"] == 2


@pytest.mark.slow  # a whole training program compiled (~15 s)
def test_training_with_dropouts_takes_the_top_k_of_the_survivors_sum():
  rng = np.random.default_rng(1)
  x = rng.normal(size=(90, 4)).astype(np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  y = rng.integers(0, 2, 90)
  parts = partition.partition(jax.random.key(0), x, y, sizes=(30, 30, 30))
  config = feddpdr.Config(epsilon=4.0, k=2, lam=1.0, min_survivors=2,
                          dropouts=1, aggregation="distributed_moments")
  plan = feddpdr.make_plan(parts.sizes, dim=4, num_classes=2, config=config)
  key = jax.random.key(3)
  out = jax.device_get(feddpdr.release(key, plan, parts))
  repeat = jax.random.split(key, 1)[0]
  moments = sm.release(repeat, plan.pca, jnp.asarray(parts.x),
                       jnp.asarray(parts.mask),
                       jnp.asarray([True, True, False]))
  basis = np.linalg.eigh(np.asarray(moments, np.float64))[1][:, ::-1][:, :2]
  got = np.asarray(out.global_basis[0], np.float64)
  # The same subspace (a basis is defined up to signs): |UᵀV| = I.
  np.testing.assert_allclose(np.abs(got.T @ basis), np.eye(2), atol=1e-4)
  assert np.all(np.isfinite(out.global_betas))


@pytest.mark.slow  # an equal-path check; the encoder's own is default
def test_the_release_is_the_same_with_and_without_x64():
  # feddpdr.train traces under enable_x64: the encoder, masks and decoder
  # must draw and add the same words as under 32 bits.
  from tests.dpcore.modes import assert_same_in_both_modes  # noqa: PLC0415
  count, n, d = 3, 3, 3
  x = jnp.asarray(_rows(count, n, d, 1))
  mask = jnp.ones((count, n), jnp.float32)
  plan = sm.make_plan(epsilon=1.0, delta=1e-5, dim=d, count=count,
                      rows=count * n, min_survivors=2)
  alive = jnp.asarray([True, False, True])
  assert_same_in_both_modes(
      lambda: sm.release(jax.random.key(4), plan, x, mask, alive))


@pytest.mark.slow  # one compile shared by two budgets (~20 s)
def test_every_budget_shares_one_compiled_program():
  from federated.feddpdr import training  # noqa: PLC0415
  rng = np.random.default_rng(2)
  x = rng.normal(size=(60, 4)).astype(np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  parts = partition.partition(jax.random.key(0), x, rng.integers(0, 2, 60),
                              sizes=(20, 20, 20))
  before = training._train_all._cache_size()
  bases = []
  for eps in (1.0, 4.0):
    config = feddpdr.Config(epsilon=eps, k=2, lam=1.0,
                            aggregation="distributed_moments")
    plan = feddpdr.make_plan(parts.sizes, dim=4, num_classes=2,
                             config=config)
    bases.append(np.asarray(jax.device_get(
        feddpdr.release(jax.random.key(3), plan, parts)).global_basis))
  assert training._train_all._cache_size() == before + 1
  assert not np.array_equal(bases[0], bases[1])  # other shares, other noise
