"""Tests of the G(M)LVQ models, closed-form clipping, init and trainers."""

import dataclasses

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from dp_accounting import rdp
from scipy import stats

from dpcore import accounting, dpsgd, options, shape, trainer
from launch.experiments import lvq_eval
from mechanisms.lvq import clip as lvq_clip
from mechanisms.lvq import init as lvq_init
from mechanisms.lvq import model as lvq
from mechanisms.lvq import train as lvq_train
from tests.pinned import accounted

N, D, K = 40, 6, 3


def _problem(seed, *, model="glvq", rank=None, dtype=jnp.float32, m_per=2):
  kx, ky, kw, ko = jax.random.split(jax.random.key(seed), 4)
  x = jax.random.uniform(kx, (N, D), dtype, -1.0, 1.0)
  y = jax.random.randint(ky, (N,), 0, K)
  labels = lvq_init.prototype_labels(K, m_per)
  params = {"prototypes": jax.random.uniform(kw, (K * m_per, D), dtype,
                                             -0.8, 0.8)}
  if model == "gmlvq":
    params["omega"] = jax.random.normal(ko, (rank or D, D), dtype)
  return params, x, y, labels


MODELS = [("glvq", None), ("gmlvq", None), ("gmlvq", 2)]

_ghost = jax.jit(lvq_clip.clipped_gradient_sum,
                 static_argnames=("phi_kind",))
_plain = jax.jit(lvq_clip.clipped_gradient_sum_vmap,
                 static_argnames=("phi_kind",))


@pytest.mark.parametrize("model, rank", MODELS)
@pytest.mark.parametrize("phi_kind", ["identity", "sigmoid"])
def test_gradient_matches_finite_differences(model, rank, phi_kind):
  with jax.enable_x64(True):
    params, x, y, labels = _problem(0, model=model, rank=rank,
                                    dtype=jnp.float64)

    @jax.jit
    def f(p):
      return lvq.cost(p, x, y, labels, phi_kind=phi_kind)

    grad = jax.jit(jax.grad(f))(params)
    for s in range(3):
      keys = jax.random.split(jax.random.key(100 + s), len(params))
      direction = {k: jax.random.normal(kk, v.shape, jnp.float64)
                   for (k, v), kk in zip(sorted(params.items()), keys,
                                         strict=True)}
      h = 1e-6
      plus = jax.tree.map(lambda a, b: a + 1e-6 * b, params, direction)
      minus = jax.tree.map(lambda a, b: a - 1e-6 * b, params, direction)
      numeric = (f(plus) - f(minus)) / (2 * h)
      analytic = sum(jnp.vdot(grad[k], direction[k]) for k in params)
      # Central differences in float64: error O(h²) plus rounding ~1e-9.
      np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


def test_distances_and_prediction_match_brute_force():
  params, x, y, labels = _problem(1, model="gmlvq", rank=3)
  omega = np.asarray(params["omega"], np.float64)
  w = np.asarray(params["prototypes"], np.float64)
  xs = np.asarray(x, np.float64)
  brute = np.array([[np.sum((omega @ (a - b)) ** 2) for b in w] for a in xs])
  np.testing.assert_allclose(lvq.squared_distances(params, x), brute,
                             rtol=1e-4, atol=1e-4)
  np.testing.assert_array_equal(lvq.predict(params, x, labels),
                                np.asarray(labels)[brute.argmin(1)])
  yy = np.asarray(y)
  same = yy[:, None] == np.asarray(labels)[None]
  dp = np.where(same, brute, np.inf).min(1)
  dm = np.where(same, np.inf, brute).min(1)
  np.testing.assert_allclose(
      lvq.per_example_loss(params, x, y, labels), (dp - dm) / (dp + dm),
      rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model, rank", MODELS)
@pytest.mark.parametrize("phi_kind", ["identity", "sigmoid"])
def test_closed_form_clipping_equals_vmap_path(model, rank, phi_kind):
  params, x, y, labels = _problem(2, model=model, rank=rank)
  x = x.at[:5].multiply(40.0)            # big gradients: clipping active
  mask = (jnp.arange(N) % 4 != 0).astype(jnp.float32)
  for clip in (0.05, 1e6):
    got, norms = _ghost(
        params, x, y, labels, clip_norm=clip, mask=mask, phi_kind=phi_kind)
    ref, ref_norms = _plain(
        params, x, y, labels, clip_norm=clip, mask=mask, phi_kind=phi_kind)
    # float32 tolerances: sums of ~40 terms of O(1) products.
    np.testing.assert_allclose(norms, ref_norms, rtol=1e-4, atol=1e-6)
    for k in params:
      np.testing.assert_allclose(got[k], ref[k], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model, rank", MODELS)
def test_each_example_contribution_is_bounded(model, rank):
  params, x, y, labels = _problem(3, model=model, rank=rank)
  adversarial = jnp.stack([
      jnp.full((D,), 1e4),                    # far from everything
      params["prototypes"][0],                # exactly on a prototype
      params["prototypes"][1] + 1e-7,         # next to a wrong one
      (params["prototypes"][0] + params["prototypes"][2]) / 2,  # a tie
      jnp.full((D,), jnp.inf),                # non-finite
      -jnp.full((D,), 1e3),
  ])
  xa = jnp.concatenate([adversarial, x[:6]])
  ya = jnp.concatenate([jnp.array([0, 1, 0, 2, 1, 2]), y[:6]])
  clip = 0.3
  full, _ = _ghost(params, xa, ya, labels, clip_norm=clip,
                   mask=jnp.ones(xa.shape[0]))
  for i in range(xa.shape[0]):
    without = jnp.ones(xa.shape[0]).at[i].set(0.0)
    part, _ = _ghost(params, xa, ya, labels, clip_norm=clip, mask=without)
    diff = jax.tree.map(lambda a, b: a - b, full, part)
    change = float(jnp.sqrt(sum(jnp.sum(v * v) for v in diff.values())))
    assert np.isfinite(change)
    assert change <= clip * (1 + 1e-4)


def test_clipped_sums_require_the_mask_and_bound_it():
  # These sums feed dp_aggregate(presummed=True), which cannot mask a sum:
  # the mask is required here, and a weight of 5 counts once.
  params, x, y, labels = _problem(6, model="gmlvq")
  for fn in (lvq_clip.clipped_gradient_sum,
             lvq_clip.clipped_gradient_sum_vmap):
    with pytest.raises(ValueError, match="mask is required"):
      fn(params, x, y, labels, clip_norm=0.1)
  odd = jnp.ones(N).at[0].set(5.0).at[1].set(jnp.nan).at[2].set(-1.0)
  ref = jnp.ones(N).at[1].set(0.0).at[2].set(0.0)
  for fn in (_ghost, _plain):
    got, _ = fn(params, x, y, labels, clip_norm=0.1, mask=odd)
    want, _ = fn(params, x, y, labels, clip_norm=0.1, mask=ref)
    for k in params:
      np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_private_init_noise_scales_and_ledger():
  x = jnp.zeros((1000, 4))
  y = jnp.repeat(jnp.arange(2), 500)
  eps = 0.5
  plan = lvq_init.make_laplace_plan(epsilon=eps, dim=4)
  draws = jax.vmap(lambda k: lvq_init.release_laplace(
      k, plan, x, y, num_classes=2))(
          jax.random.split(jax.random.key(0), 4000))
  # Sum noise Laplace(2d/ε) over a count of 500 (count noise ≪ 500):
  # prototype noise ≈ Laplace(2d/(500 ε)).
  scale = 2 * 4 / eps / 500
  z = np.asarray(draws[:, 0, 0])
  assert stats.kstest(z, "laplace", args=(0, scale)).pvalue > 1e-3
  assert stats.kstest(z, "laplace", args=(0, 0.8 * scale)).pvalue < 1e-6
  ledger = lvq_train.accounting.PrivacyLedger()
  plan.record(ledger)
  entries = ledger.entries
  assert [e.params["scale"] for e in entries] == pytest.approx(
      [2 / eps, 2 * 4 / eps])
  assert [e.params["sensitivity"] for e in entries] == [1.0, 4.0]
  assert ledger.guarantee().epsilon == pytest.approx(eps)


def test_private_init_recovers_means_at_large_epsilon_and_stays_in_box():
  params, x, y, labels = _problem(4)
  means = lvq_init.class_mean_prototypes(jax.random.key(0), x, y,
                                         num_classes=K)
  priv = lvq_init.release_laplace(
      jax.random.key(1), lvq_init.make_laplace_plan(epsilon=1e9, dim=D), x,
      y, num_classes=K)
  np.testing.assert_allclose(priv, means, atol=1e-4)
  noisy = lvq_init.release_laplace(
      jax.random.key(1), lvq_init.make_laplace_plan(epsilon=1e-3, dim=D), x,
      y, num_classes=K)
  assert float(jnp.max(jnp.abs(noisy))) <= 1.0


def _noiseless_plan(*, n, q, epochs, max_batch):
  # A plan with (practically) no noise and no clipping, for tests only:
  # σ = 0, C = 1e9 and ε₁ = 1e12 (no guarantee; never recorded).
  run = trainer.make_plan(n, sampling_rate=q, epochs=epochs, clip_norm=1e9,
                          noise_multiplier=0.0, max_batch=max_batch,
                          sampler=lvq_train.SAMPLER)
  init = lvq_init.LaplacePlan(1e12, 0.0, lvq_init.RELATION, D)
  return lvq_train.DPLVQPlan(1e12, 1e-5, lvq_train.RELATION, init, run,
                             1e12, 1e-5, "accountant")


def test_dp_trainer_without_noise_equals_plain_sgd():
  params, x, y, labels = _problem(5)
  cfg = lvq_train.TrainConfig(
      model="gmlvq", trainer="dpsgd", num_classes=K, epochs=3,
      sampling_rate=0.2, learning_rate=0.1, max_batch=N)
  plan = _noiseless_plan(n=N, q=0.2, epochs=3, max_batch=N)
  key = jax.random.key(7)
  dp = lvq_train.release(key, plan, x, y, cfg)
  plain = lvq_train.train_sgd(key, x, y, cfg)
  dp_vmap = lvq_train.release(
      key, plan, x, y, dataclasses.replace(cfg, ghost_clipping=False))
  for k in plain.params:
    np.testing.assert_allclose(dp.params[k], plain.params[k], atol=2e-5)
    np.testing.assert_allclose(dp_vmap.params[k], plain.params[k], atol=2e-5)
  # And the noise, when on, does change the result.
  noisy = lvq_train.release(key, dataclasses.replace(
      plan, dpsgd=dataclasses.replace(plan.dpsgd, noise_multiplier=1.0)),
                            x, y, cfg)
  assert not np.allclose(noisy.params["omega"], plain.params["omega"],
                         atol=1e-3)
  assert isinstance(plain, trainer.TrainResult)
  assert isinstance(dp, trainer.TrainResult)


def test_plain_sgd_is_the_trainer_on_a_non_private_plan():
  # One scan: plain SGD is dpcore.trainer.train on trainer.nonprivate_plan,
  # the same batches as DP-SGD's plan, and it cannot be recorded.
  _, x, y, _ = _problem(8)
  labels = lvq_init.prototype_labels(K, 1)
  cfg = lvq_train.TrainConfig(model="gmlvq", trainer="sgd", num_classes=K,
                              epochs=2, sampling_rate=0.25, max_batch=20)
  private = lvq_train.make_plan(N, epsilon=1.0, delta=1e-5, epochs=2,
                                sampling_rate=0.25, clip_norm=0.5, dim=D,
                                max_batch=20).dpsgd
  plain = cfg.sgd_plan(N)
  assert private.private and not plain.private
  assert plain.clip_norm == np.inf and plain.noise_multiplier == 0.0
  for field in ("num_examples", "sampling_rate", "steps", "max_batch",
                "truncation_probability", "sampler"):
    assert getattr(plain, field) == getattr(private, field)
  with pytest.raises(ValueError, match="non-private"):
    plain.record(accounting.PrivacyLedger(), delta=1e-5)
  key = jax.random.key(9)
  got = lvq_train.train(key, x, y, cfg)
  # The same run by hand through the generic trainer with its default
  # unclipped sum (the gradient of the masked sum of per-example losses).
  init_key, sample_key, noise_key = jax.random.split(key, 3)
  start = lvq_train.init_params(init_key, x, y, cfg)

  def loss(p, example):
    return lvq.example_loss(p, example[0], example[1], labels)

  want = trainer.train(trainer.TrainKeys(sample_key, noise_key), plain, loss,
                       start, (x, y), optax.sgd(cfg.learning_rate))
  for k in start:
    np.testing.assert_allclose(got.params[k], want.params[k], atol=1e-6)
  assert not np.allclose(got.params["omega"], start["omega"], atol=1e-3)
  assert float(lvq_train.mean_cost(got.params, x, y, cfg)) < float(
      lvq_train.mean_cost(start, x, y, cfg))


@pytest.mark.parametrize("rule", ["accountant", "paper"])
def test_reported_epsilon_matches_dp_accounting(rule):
  plan = lvq_train.make_plan(1848, epsilon=1.5, delta=1e-5,
                             sampling_rate=0.01, epochs=50, clip_norm=0.5,
                             dim=19, sigma_rule=rule)
  assert plan.steps == 5000
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  acc = rdp.RdpAccountant()
  acc.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(
          0.01, dp_accounting.GaussianDpEvent(plan.noise_multiplier)), 5000))
  direct = acc.get_epsilon(1e-5)
  (sgd_entry,) = [e for e in ledger.entries if e.label == "dpsgd"]
  assert sgd_entry.epsilon == pytest.approx(direct, rel=1e-9)
  g = ledger.guarantee(1e-5)
  assert g.basic_epsilon == pytest.approx(0.3 + direct)
  assert g.epsilon <= g.basic_epsilon + 1e-12
  if rule == "accountant":
    assert direct == pytest.approx(1.2, rel=1e-3)
  else:
    # The paper's σ is larger than needed: it spends less than ε₂ = 1.2.
    assert direct < 1.2


def _ledger(plan):
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  return ledger


def test_padded_poisson_batches_are_paid_for():
  # The padded batch drops rows with probability P ≤ 1e-9; the plan always
  # records it (no argument skips it), and the reported δ still holds with
  # (1 + e^ε)·P inside it.
  kw = dict(epsilon=1.5, delta=1e-5, sampling_rate=0.01, epochs=50,
            clip_norm=0.5, dim=19)
  b = dpsgd.max_batch_size(1848, sampling_rate=0.01, steps=5000)
  plan = lvq_train.make_plan(1848, **kw, max_batch=b)
  assert lvq_train.make_plan(1848, **kw) == plan  # the default B is b
  ledger = _ledger(plan)
  (trunc,) = [e for e in ledger.entries if e.kind == "truncation"]
  p = trunc.params["probability"]
  assert 0.0 < p <= 1e-9 and p == plan.dpsgd.truncation_probability
  # The same releases without the padding's event, for comparison.
  unpadded = accounting.PrivacyLedger()
  lvq_init.make_laplace_plan(epsilon=plan.epsilon_init, dim=19).record(
      unpadded)
  unpadded.record_subsampled_gaussian(
      noise_multiplier=plan.noise_multiplier, sampling_rate=0.01,
      steps=5000, delta=1e-5, label="dpsgd", relation=lvq_train.RELATION)
  plain = unpadded.guarantee(1e-5)
  g = ledger.guarantee(1e-5)
  assert g.delta == 1e-5 and g.truncation_probability == p
  assert plain.epsilon < g.epsilon <= plain.epsilon * (1 + 1e-3)
  # A batch cap far too small makes P ≈ 1: no meaningful δ is left.
  tiny = lvq_train.make_plan(1848, **kw, max_batch=5)
  assert _ledger(tiny).guarantee(1e-5).delta == 1.0


@pytest.mark.parametrize("epochs, q", [(50, 0.01), (3, 0.07), (1, 0.3)])
def test_trainer_and_plan_count_the_same_steps(epochs, q):
  # One rule (dpsgd.num_steps) for the steps run and the steps accounted.
  n = 500
  plan = lvq_train.make_plan(n, epsilon=1.0, delta=1e-5, sampling_rate=q,
                             epochs=epochs, clip_norm=0.5, dim=4,
                             max_batch=n)
  cfg = lvq_train.TrainConfig(epochs=epochs, sampling_rate=q, max_batch=n)
  (entry,) = [e for e in _ledger(plan).entries if e.label == "dpsgd"]
  steps = dpsgd.num_steps(epochs=epochs, sampling_rate=q)
  assert cfg.steps() == plan.steps == entry.params["steps"] == steps
  # The plan recorded is the plan the release runs, and a config that
  # disagrees with it is refused.
  assert plan.dpsgd.noise_multiplier == plan.noise_multiplier
  x = jnp.zeros((n, 4))
  y = jnp.arange(n) % 2
  with pytest.raises(ValueError, match="max_batch"):
    lvq_train.release(jax.random.key(0), plan, x, y,
                      dataclasses.replace(cfg, num_classes=2, max_batch=n - 1))
  assert accounting.dpsgd_epsilon(
      noise_multiplier=plan.noise_multiplier, sampling_rate=q,
      epochs=epochs, delta=1e-5) == entry.epsilon


@pytest.mark.parametrize("rule", ["accountant", "paper"])
def test_privacy_report_has_the_schema(rule):
  plan = lvq_train.make_plan(1848, epsilon=1.5, delta=1e-5,
                             sampling_rate=0.01, epochs=5, clip_norm=0.5,
                             dim=19, sigma_rule=rule, max_batch=60)
  rec = plan.report()
  assert tuple(rec) == accounting.PRIVACY_FIELDS
  assert rec["epsilon"] == _ledger(plan).guarantee(1e-5).epsilon
  assert rec["epsilon_nominal"] == pytest.approx(1.5)
  assert rec["delta"] == 1e-5 and rec["no_guarantee"] is None
  assert [e["label"] for e in rec["entries"]][-2:] == [
      "dpsgd", "poisson_batch_padding"]
  if rule == "accountant":
    assert rec["epsilon"] <= 1.5 * (1 + 1e-6)


def test_cv_splits_partition_rows():
  tr, te = lvq_eval.cv_splits(jax.random.key(0), 23, folds=5, repeats=2,
                              train_on_one_fold=True)
  assert tr.shape == (10, 4) and te.shape == (10, 16)
  for a, b in zip(tr, te, strict=True):
    assert not set(a) & set(b)
  tr2, te2 = lvq_eval.cv_splits(jax.random.key(0), 23, folds=5, repeats=2,
                                train_on_one_fold=False)
  np.testing.assert_array_equal(te2, tr)


def test_bad_inputs_give_clear_errors():
  params, x, y, labels = _problem(6)
  kw = dict(delta=1e-5, epochs=1, clip_norm=0.5, dim=2)
  with pytest.raises(ValueError, match="epsilon"):
    lvq_train.make_plan(100, epsilon=0.0, sampling_rate=0.01, **kw)
  with pytest.raises(ValueError, match="epsilon"):
    lvq_train.make_plan(100, epsilon=-1.0, sampling_rate=0.01, **kw)
  for q in (0.0, 1.2, -0.5):
    with pytest.raises(ValueError, match="^sampling_rate must lie"):
      lvq_train.make_plan(100, epsilon=1.0, sampling_rate=q, **kw)
    with pytest.raises(ValueError, match="^sampling_rate must lie"):
      lvq_train.TrainConfig(sampling_rate=q).validate()
  for clip in (0.0, -1.0):
    with pytest.raises(ValueError, match="^clip_norm must be"):
      lvq_train.make_plan(100, epsilon=1.0, sampling_rate=0.01,
                          **{**kw, "clip_norm": clip})
  with pytest.raises(ValueError, match="release"):
    lvq_train.train(jax.random.key(0), x, y,
                    lvq_train.TrainConfig(num_classes=K))
  y_missing = jnp.where(y == 2, 0, y)
  with pytest.raises(ValueError, match="no rows of class index \\[2\\]"):
    lvq_init.check_classes_present(y_missing, K)
  with pytest.raises(ValueError, match="no rows"):
    lvq_eval.evaluate(jax.random.key(0), jax.random.key(1), x, y_missing,
                      lvq_train.TrainConfig(num_classes=K, trainer="sgd"),
                      folds=2,
                      repeats=1)
  with pytest.raises(ValueError, match="outside the declared box"):
    lvq_init.check_box(x * 2.0)
  with pytest.raises(ValueError, match="outside the declared box"):
    lvq_eval.evaluate(jax.random.key(0), jax.random.key(1), x * 2.0, y,
                      lvq_train.TrainConfig(num_classes=K, trainer="sgd"),
                      folds=2,
                      repeats=1)


def test_gaussian_init_noise_scale_and_plan():
  d, n_per = 4, 500
  x = jnp.zeros((2 * n_per, d))
  y = jnp.repeat(jnp.arange(2), n_per)
  sigma = 3.0
  # A plan's σ_init set by hand (the calibration is tested below).
  fixed = dataclasses.replace(
      lvq_init.make_gaussian_plan(epsilon=1.0, delta=1e-6, dim=d),
      noise_multiplier=sigma)
  draws = jax.vmap(lambda k: lvq_init.release_gaussian(
      k, fixed, x, y, num_classes=2))(
          jax.random.split(jax.random.key(1), 4000))
  # Sum noise N(0, (σ√(1+d))²) over a count of ≈500: std σ√(1+d)/500.
  scale = sigma * np.sqrt(1 + d) / n_per
  z = np.asarray(draws[:, 1, 2])
  assert stats.kstest(z, stats.norm(0, scale).cdf).pvalue > 1e-3
  assert stats.kstest(z, stats.norm(0, 0.8 * scale).cdf).pvalue < 1e-6
  plan = lvq_train.make_plan(1000, epsilon=1.0, delta=1e-5,
                             sampling_rate=0.01, epochs=5, clip_norm=0.5,
                             dim=d, init_mechanism="gaussian")
  ledger = _ledger(plan)
  init, sgd, padding = ledger.entries
  assert init.kind == "gaussian" and init.delta == pytest.approx(5e-6)
  assert init.epsilon == pytest.approx(0.2, rel=1e-6)
  assert sgd.delta == pytest.approx(5e-6)
  assert sgd.epsilon == pytest.approx(0.8, rel=1e-3)
  assert padding.kind == "truncation"
  g = ledger.guarantee(1e-5)
  assert g.basic_delta == pytest.approx(1e-5)
  assert g.epsilon <= 1.0 + 1e-6


@pytest.mark.parametrize("init", ["laplace", "gaussian"])
def test_private_init_clips_data_to_the_box(init):
  # The sums' sensitivity needs x ∈ [−1, 1]^d: the jitted initialisation
  # clips itself, so out-of-box rows count as their clipped versions.
  rng = np.random.default_rng(2)
  x = rng.uniform(-1, 1, size=(60, 5)).astype(np.float32)
  y = np.arange(60) % 3
  wild = x.copy()
  wild[:4] *= 40.0
  key = jax.random.key(7)
  if init == "laplace":
    plan = lvq_init.make_laplace_plan(epsilon=50.0, dim=5)
    run = lambda rows: lvq_init.release_laplace(  # noqa: E731
        key, plan, jnp.asarray(rows), jnp.asarray(y), num_classes=3)
  else:
    plan = dataclasses.replace(
        lvq_init.make_gaussian_plan(epsilon=1.0, delta=1e-6, dim=5),
        noise_multiplier=0.01)
    run = lambda rows: lvq_init.release_gaussian(  # noqa: E731
        key, plan, jnp.asarray(rows), jnp.asarray(y), num_classes=3)
  np.testing.assert_allclose(run(wild), run(np.clip(wild, -1, 1)),
                             rtol=1e-6, atol=1e-6)
  assert not np.allclose(run(wild), run(x), atol=1e-3)


# The ε of each plan's record, computed at /tmp/base (before the one
# shape) with the old recording functions (privacy_plan's ledger,
# record_private_init, record_gaussian_init): the plans record the same.
BASE_EPSILON = {
    ("accountant", "laplace"): 1.1940716300596244,
    ("accountant", "gaussian"): 0.9965888021582997,
    ("paper", "laplace"): 1.053155014942877,
    ("paper", "gaussian"): 0.8586500877554583,
}


@pytest.mark.parametrize("rule, init", sorted(BASE_EPSILON))
def test_plans_have_the_shape_and_record_as_before(rule, init):
  plan = lvq_train.make_plan(1848, epsilon=1.5, delta=1e-5,
                             sampling_rate=0.01, epochs=5, clip_norm=0.5,
                             dim=19, sigma_rule=rule, init_mechanism=init,
                             max_batch=60)
  for p in (plan, plan.init, plan.dpsgd):
    shape.check_plan(p)
  assert plan.relation == plan.init.relation == plan.dpsgd.relation == (
      options.Relation.ADD_REMOVE)
  assert plan.dpsgd.delta == plan.sgd_delta
  # σ calibrated by the plan keeps its target; the paper's σ is given.
  assert plan.dpsgd.target_epsilon == (plan.target_epsilon_sgd
                                       if rule == "accountant" else None)
  assert _ledger(plan).guarantee(1e-5).epsilon == accounted(
      BASE_EPSILON[rule, init])
  # epsilon is the guarantee that holds, the target is kept beside it.
  assert plan.epsilon == accounted(BASE_EPSILON[rule, init])
  assert plan.target_epsilon == 1.5
  assert plan.report()["epsilon"] == plan.epsilon
  assert plan.report()["epsilon_nominal"] == 1.5
  for fn in (lvq_train.release, lvq_init.release_laplace,
             lvq_init.release_gaussian):
    shape.check_release(fn)


def test_init_plans_record_as_before():
  ledger = accounting.PrivacyLedger()
  lvq_init.make_laplace_plan(epsilon=0.5, dim=4).record(ledger)
  assert ledger.guarantee(1e-5).epsilon == accounted(0.49996000119999157)
  gaussian = dataclasses.replace(
      lvq_init.make_gaussian_plan(epsilon=1.0, delta=1e-6, dim=4),
      noise_multiplier=3.0)
  ledger = accounting.PrivacyLedger()
  gaussian.record(ledger)
  assert ledger.guarantee(1e-5).epsilon == accounted(1.271087773716238)
  with pytest.raises(ValueError, match="dim"):
    lvq_init.release_laplace(jax.random.key(0),
                             lvq_init.make_laplace_plan(epsilon=1.0, dim=3),
                             jnp.zeros((4, 2)), jnp.arange(4) % 2,
                             num_classes=2)
  with pytest.raises(TypeError, match="LaplacePlan"):
    lvq_init.release_laplace(jax.random.key(0), gaussian, jnp.zeros((4, 4)),
                             jnp.arange(4) % 2, num_classes=2)


def _trace_count(fn):
  """``fn`` jitted, and the number of times it was traced so far."""
  traces = []

  def counted(*args):
    traces.append(1)
    return fn(*args)
  return jax.jit(counted), traces


def test_plans_are_pytrees_of_their_numbers():
  plan = lvq_train.make_plan(200, epsilon=1.5, delta=1e-5, sampling_rate=0.1,
                             epochs=2, clip_norm=0.5, dim=4)
  leaves, treedef = jax.tree.flatten(plan)
  assert leaves == [plan.epsilon, 1e-5, plan.epsilon_init, 0.0,
                    *jax.tree.leaves(plan.dpsgd), 1.5,
                    plan.target_epsilon_sgd, 1e-5]
  assert plan.noise_multiplier in leaves
  assert jax.tree.unflatten(treedef, leaves) == plan
  gaussian = lvq_init.make_gaussian_plan(epsilon=1.0, delta=1e-6, dim=4)
  assert jax.tree.leaves(gaussian) == [1.0, 1e-6, gaussian.noise_multiplier]


@pytest.mark.parametrize("make, release", [
    (lambda eps: lvq_init.make_laplace_plan(epsilon=eps, dim=3),
     lvq_init.release_laplace),
    (lambda eps: lvq_init.make_gaussian_plan(epsilon=eps, delta=1e-6, dim=3),
     lvq_init.release_gaussian),
], ids=["laplace", "gaussian"])
def test_two_epsilons_reuse_one_compiled_init(make, release):
  x = jax.random.uniform(jax.random.key(0), (60, 3), minval=-1.0)
  y = jnp.arange(60) % 2
  run, traces = _trace_count(lambda plan, x, y: release(
      jax.random.key(1), plan, x, y, num_classes=2))
  a, b = run(make(0.5), x, y), run(make(4.0), x, y)
  assert len(traces) == 1  # ε is a traced leaf, not a constant
  assert not np.allclose(a, b)
  np.testing.assert_allclose(
      a, release(jax.random.key(1), make(0.5), x, y, num_classes=2),
      rtol=1e-6)


def test_two_epsilons_reuse_one_compiled_release():
  x = jax.random.uniform(jax.random.key(0), (60, 3), minval=-1.0)
  y = jnp.arange(60) % 2
  config = lvq_train.TrainConfig(num_classes=2, epochs=1,
                                 sampling_rate=0.25, max_batch=40)
  run, traces = _trace_count(lambda plan, x, y: lvq_train.release(
      jax.random.key(1), plan, x, y, config).params)
  for eps in (0.5, 4.0):
    run(lvq_train.make_plan(60, epsilon=eps, delta=1e-5, sampling_rate=0.25,
                            epochs=1, clip_norm=0.5, dim=3, max_batch=40),
        x, y)
  assert len(traces) == 1
