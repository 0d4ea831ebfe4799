"""Tests of mechanisms.svm.random_features: the map, its bound, the learners.

Fixed keys throughout; every statistical check has a tolerance that a
wrong implementation (a wrong γ, a missing clip, a reused key) exceeds.
"""

import math
import re

import jax
import numpy as np
import optax
import pytest

from dpcore import accounting, shape, trainer
from mechanisms.erm import output_perturbation
from mechanisms.svm import random_features as rf
from mechanisms.svm import random_features_audit
from tests.pinned import accounted

SQRT2 = math.sqrt(2.0)


def _rbf(x, x2, gamma):
  d2 = np.sum((x[:, None, :] - x2[None, :, :]) ** 2, axis=-1)
  return np.exp(-gamma * d2)


def _points(n=30, d=3, seed=0):
  return np.array(jax.random.uniform(jax.random.key(seed), (n, d),
                                       minval=-1.0, maxval=1.0))


# -- the feature map -----------------------------------------------------------


def test_kernel_approximation_improves_with_d_and_rejects_a_wrong_gamma():
  x = _points()
  gamma = 1.0 / x.shape[1]
  exact = _rbf(x, x, gamma)
  errors = {}
  for num in (16, 4096):
    fmap = rf.make_feature_map(jax.random.key(1), dim=3,
                               num_features=num)
    approx = np.asarray(rf.approximate_kernel(fmap, x, x))
    errors[num] = np.max(np.abs(approx - exact))
  # Monte-Carlo error ~ 1/√D: 16 → 4096 shrinks it about 16-fold.
  assert errors[4096] < 0.06
  assert errors[16] > 3 * errors[4096]
  # The same map is far from the kernel at 2γ or γ/2 (ω ~ N(0, 2γI), not
  # N(0, γI) or N(0, 4γI)): every error > 2× the right one's.
  for wrong in (2 * gamma, gamma / 2):
    assert np.max(np.abs(approx - _rbf(x, x, wrong))) > 2 * errors[4096]


def test_explicit_gamma_is_used():
  x = _points(seed=3)
  fmap = rf.make_feature_map(jax.random.key(2), dim=3,
                             num_features=4096, gamma=2.0)
  assert fmap.gamma == 2.0
  approx = np.asarray(rf.approximate_kernel(fmap, x, x))
  assert np.max(np.abs(approx - _rbf(x, x, 2.0))) < 0.06
  assert np.max(np.abs(approx - _rbf(x, x, 1.0 / 3))) > 0.15


def test_default_gamma_is_libsvms_one_over_d():
  fmap = rf.make_feature_map(jax.random.key(0), dim=13,
                             num_features=8)
  assert fmap.gamma == pytest.approx(1 / 13)
  assert fmap.omega.shape == (13, 8) and fmap.offset.shape == (8,)
  offset = np.asarray(fmap.offset)
  assert np.all((offset >= 0) & (offset < 2 * np.pi))


@pytest.mark.parametrize("value", [1e30, -3e38, 1e-30, 0.0])
def test_bound_holds_for_huge_and_tiny_rows(value):
  fmap = rf.make_feature_map(jax.random.key(4), dim=5,
                             num_features=64)
  x = np.full((3, 5), value, np.float32)
  x[1, 0] = -value
  phi = np.asarray(rf.features(fmap, x), np.float64)
  assert np.all(np.isfinite(phi))
  assert np.all(np.linalg.norm(phi, axis=1) <= SQRT2 * (1 + 1e-6))


def test_non_finite_rows_map_to_zero_and_leave_other_rows_alone():
  fmap = rf.make_feature_map(jax.random.key(5), dim=3,
                             num_features=32)
  good = _points(n=2)
  x = np.vstack([good[:1], [[np.nan, 0.0, 0.0]], [[np.inf, 1.0, 0.0]],
                 [[0.0, -np.inf, np.nan]], good[1:]]).astype(np.float32)
  phi = np.asarray(rf.features(fmap, x))
  assert np.all(np.isfinite(phi))
  np.testing.assert_array_equal(phi[1:4], 0.0)
  np.testing.assert_array_equal(phi[[0, 4]],
                                np.asarray(rf.features(fmap, good)))
  assert np.all(np.linalg.norm(phi, axis=1) <= SQRT2 * (1 + 1e-6))


def test_bound_is_attained_and_not_exceeded_at_random():
  fmap = rf.make_feature_map(jax.random.key(6), dim=2,
                             num_features=2)
  row = random_features_audit.attaining_row(fmap)
  phi = np.asarray(rf.features(fmap, row.astype(np.float32)))
  assert np.linalg.norm(phi) == pytest.approx(SQRT2, rel=1e-5)
  many = np.asarray(jax.random.normal(jax.random.key(7), (5000, 2))) * 50
  norms = np.linalg.norm(np.asarray(rf.features(fmap, many)), axis=1)
  assert norms.max() <= SQRT2 * (1 + 1e-6)


def test_feature_map_depends_on_its_key_alone_and_rows_on_themselves():
  a = rf.make_feature_map(jax.random.key(8), dim=4, num_features=16)
  b = rf.make_feature_map(jax.random.key(8), dim=4, num_features=16)
  c = rf.make_feature_map(jax.random.key(9), dim=4, num_features=16)
  np.testing.assert_array_equal(a.omega, b.omega)
  np.testing.assert_array_equal(a.offset, b.offset)
  assert not np.allclose(a.omega, c.omega)
  x = _points(n=6, d=4)
  whole = np.asarray(rf.features(a, x))
  # A row alone and in a batch are two products whose sums may run in
  # another order (on an H100, 2e-5 apart at JAX's default precision).
  for i in range(len(x)):
    np.testing.assert_allclose(np.asarray(rf.features(a, x[i])), whole[i],
                               rtol=1e-5, atol=1e-6)
  # Changing one row changes that row's features only.
  x2 = x.copy()
  x2[2] = 100.0
  changed = np.asarray(rf.features(a, x2))
  np.testing.assert_array_equal(np.delete(changed, 2, 0),
                                np.delete(whole, 2, 0))


# -- validation ----------------------------------------------------------------


@pytest.mark.parametrize("kwargs,words", [
    ({"gamma": 0.0}, "gamma must be > 0"),
    ({"gamma": -1.0}, "gamma must be > 0"),
    ({"gamma": float("nan")}, "gamma must be a positive number"),
    ({"gamma": "scale"}, "read the data's variance"),
    ({"num_features": 0}, "num_features must be ≥ 1"),
    ({"num_features": 2.5}, "num_features must be a positive integer"),
    ({"dim": 0}, "dim must be ≥ 1"),
])
def test_bad_feature_map_settings_are_refused(kwargs, words):
  args = {"dim": 3, "num_features": 8, **kwargs}
  with pytest.raises(ValueError, match=words):
    rf.make_feature_map(jax.random.key(0), **args)


def test_feature_map_needs_a_real_key():
  with pytest.raises(TypeError, match="PRNG key"):
    rf.make_feature_map(0, dim=3, num_features=8)


@pytest.fixture(name="forbid_training")
def _forbid_training(monkeypatch):
  def fail(*args, **kwargs):
    raise AssertionError("HEAVY WORK: release_dpsgd ran before validation")
  monkeypatch.setattr(rf, "release_dpsgd", fail)
  monkeypatch.setattr(output_perturbation, "release", fail)


def _plan(n=20, **kwargs):
  args = {"epsilon": 1.0, "delta": 1e-5, "sampling_rate": 0.5, "epochs": 2,
          "learning_rate": 0.5, **kwargs}
  return rf.make_dpsgd_plan(n, **args)


@pytest.mark.parametrize("case,words", [
    ("columns", "x has 2 columns but the feature map was drawn for "
                "dim=3"),
    ("rows", "x has 19 rows but the plan was made for "
             "num_examples=20"),
    ("labels_len", "y has 19 labels but the data has 20 rows"),
    ("labels_01", "y must contain only -1 and +1"),
    ("one_class", "must contain both classes"),
    ("nan", "NaN or infinite"),
    ("feature_key", "is the feature map's own key"),
])
def test_bad_data_refused_before_training(forbid_training, case, words):
  del forbid_training
  fmap = rf.make_feature_map(jax.random.key(0), dim=3, num_features=8)
  x = _points(n=20)
  y = np.where(np.arange(20) % 2, 1.0, -1.0)
  key = jax.random.key(1)
  if case == "columns":
    x = x[:, :2]
  elif case == "rows":
    x, y = x[:19], y[:19]
  elif case == "labels_len":
    y = y[:19]
  elif case == "labels_01":
    y = (y > 0).astype(float)
  elif case == "one_class":
    y = np.ones(20)
  elif case == "nan":
    x[3, 1] = np.nan
  else:
    key = jax.random.key(0)
  with pytest.raises(ValueError, match=re.escape(words)):
    rf.fit_dpsgd(key, _plan(), fmap, x, y)
  if case not in ("rows",):
    with pytest.raises(ValueError, match=re.escape(words)):
      rf.release_output_perturbation(
          key, rf.make_output_perturbation_plan(c=0.3, epsilon=1.0), fmap,
          x, y)


@pytest.mark.parametrize("kwargs,words", [
    ({"loss": "hinge"}, "loss must be one of"),
    ({"loss": "logistic", "num_classes": 3}, "use loss='softmax'"),
    ({"loss": "softmax", "num_classes": 1}, "num_classes must be ≥ 2"),
    ({"epsilon": 0.0}, "epsilon must be > 0"),
    ({"delta": 1.0}, "delta must lie strictly between 0 and 1"),
    ({"learning_rate": -1.0}, "learning_rate must be > 0"),
    ({"sampling_rate": 1.5}, "sampling_rate must lie in"),
    ({"epochs": 0.0}, "epochs must be > 0"),
    ({"weight_decay": -0.1}, "weight_decay must be a finite number ≥ 0"),
    ({"relation": "replace_one"}, "relation='add_remove'"),
    ({"relation": "replace"}, "relation='add_remove'"),
])
def test_bad_plan_settings_are_refused(kwargs, words):
  with pytest.raises(ValueError, match=words):
    _plan(**kwargs)


def test_softmax_labels_must_be_class_indices(forbid_training):
  del forbid_training
  fmap = rf.make_feature_map(jax.random.key(0), dim=3, num_features=8)
  plan = _plan(loss="softmax", num_classes=3)
  with pytest.raises(ValueError, match="outside the class set"):
    rf.fit_dpsgd(jax.random.key(1), plan, fmap, _points(n=20),
                 np.arange(20) % 4)


def test_output_perturbation_settings_are_refused():
  with pytest.raises(ValueError, match="c must be > 0"):
    rf.make_output_perturbation_plan(c=0.0, epsilon=1.0)
  with pytest.raises(ValueError, match="epsilon must be"):
    rf.make_output_perturbation_plan(c=1.0, epsilon=float("inf"))
  with pytest.raises(ValueError, match="relation='replace_one'"):
    rf.make_output_perturbation_plan(c=1.0, epsilon=1.0,
                                     relation="add_remove")


def test_a_plan_of_the_other_learner_is_refused():
  fmap = rf.make_feature_map(jax.random.key(0), dim=3, num_features=8)
  x, y = _points(n=20), np.where(np.arange(20) % 2, 1.0, -1.0)
  with pytest.raises(ValueError, match="make_dpsgd_plan"):
    rf.fit_dpsgd(jax.random.key(1),
                 rf.make_output_perturbation_plan(c=0.3, epsilon=1.0), fmap,
                 x, y)
  with pytest.raises(ValueError, match="make_output_perturbation_plan"):
    rf.release_output_perturbation(jax.random.key(1), _plan(), fmap, x, y)


# -- the learners and the ledger -----------------------------------------------


def _circle(n=300, seed=0):
  x = np.asarray(jax.random.uniform(jax.random.key(seed), (n, 2),
                                    minval=-1.0, maxval=1.0))
  y = np.where(np.sum(x**2, axis=1) < 0.45, 1.0, -1.0)
  return x, y


@pytest.mark.slow
def test_dpsgd_learns_a_non_linear_boundary_and_is_pure():
  x, y = _circle()
  fmap = rf.make_feature_map(jax.random.key(10), dim=2,
                             num_features=128, gamma=2.0)
  plan = rf.make_dpsgd_plan(len(y), epsilon=8.0, delta=1e-5,
                            sampling_rate=0.25, epochs=20, learning_rate=1.0)
  model = rf.fit_dpsgd(jax.random.key(11), plan, fmap, x, y)
  # A linear rule on x cannot beat the majority (~0.55) by much here.
  assert np.mean(model.predict(x) == y) > 0.85
  again = rf.fit_dpsgd(jax.random.key(11), plan, fmap, x, y)
  np.testing.assert_array_equal(model.weights, again.weights)
  other = rf.fit_dpsgd(jax.random.key(12), plan, fmap, x, y)
  assert not np.allclose(model.weights, other.weights)
  # The map itself is untouched by training.
  np.testing.assert_array_equal(model.feature_map.omega, fmap.omega)


@pytest.mark.slow
def test_softmax_is_one_model_for_three_classes():
  centres = np.array([[1.0, 0.0], [-0.5, 0.8], [-0.5, -0.8]])
  labels = np.arange(300) % 3
  noise = np.asarray(jax.random.normal(jax.random.key(13), (300, 2))) * 0.25
  x = centres[labels] + noise
  fmap = rf.make_feature_map(jax.random.key(14), dim=2,
                             num_features=64)
  plan = rf.make_dpsgd_plan(300, epsilon=4.0, delta=1e-5,
                            sampling_rate=0.25, epochs=20, learning_rate=1.0,
                            loss="softmax", num_classes=3)
  model = rf.fit_dpsgd(jax.random.key(15), plan, fmap, x, labels)
  assert model.weights.shape == (64, 3)
  assert np.mean(model.predict(x) == labels) > 0.85
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  assert [e.label for e in ledger.entries].count("rff_dpsgd") == 1


def test_dpsgd_record_states_the_plan_and_meets_the_target():
  plan = rf.make_dpsgd_plan(400, epsilon=2.0, delta=1e-5,
                            sampling_rate=0.25, epochs=10, learning_rate=0.5)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  kinds = [(e.label, e.kind) for e in ledger.entries]
  assert kinds == [("rff_dpsgd", "subsampled_gaussian"),
                   ("rff_dpsgd_padding", "truncation")]
  params = ledger.entries[0].params
  assert params["steps"] == plan.steps == plan.dpsgd.steps == 40
  assert params["noise_multiplier"] == plan.noise_multiplier
  assert params["sampling_rate"] == 0.25
  report = ledger.report(1e-5)
  assert tuple(report) == accounting.PRIVACY_FIELDS
  assert 1.5 < report["epsilon"] <= 2.0 * (1 + 1e-6)
  twice = accounting.PrivacyLedger()
  plan.record(twice, count=2)
  assert twice.guarantee(1e-5).epsilon > report["epsilon"] * 1.2


def test_plans_have_the_one_shape_and_the_same_epsilon():
  dpsgd = rf.make_dpsgd_plan(400, epsilon=2.0, delta=1e-5,
                             sampling_rate=0.25, epochs=10,
                             learning_rate=0.5)
  output = rf.make_output_perturbation_plan(c=0.3, epsilon=1.0)
  for plan in (dpsgd, output):
    shape.check_plan(plan)
  for release in (rf.release_dpsgd, rf.release_output_perturbation,
                  rf.fit_dpsgd):
    shape.check_release(release)
  assert dpsgd.relation is trainer.RELATION
  assert output.relation is output_perturbation.RELATION
  # epsilon is the guarantee the ledger reports at the plan's δ; the
  # calibration's budget is target_epsilon.
  assert (dpsgd.target_epsilon, dpsgd.delta, dpsgd.sensitivity) == (
      2.0, 1e-5, 1.0)
  assert (output.epsilon, output.target_epsilon, output.delta) == (
      1.0, 1.0, 0.0)
  assert (output.sensitivity, output.noise_scale) == (0.606, 0.606)
  # Pinned before the plans existed (dpsgd_learner / output_perturbation_
  # learner and the module's record function): the same σ, the same ε.
  assert dpsgd.noise_multiplier == accounted(3.6790915809307814)
  ledger = accounting.PrivacyLedger()
  dpsgd.record(ledger)
  assert ledger.guarantee(1e-5).epsilon == accounted(1.8202519742487806)
  assert dpsgd.epsilon == ledger.guarantee(1e-5).epsilon < 2.0
  ledger = accounting.PrivacyLedger()
  output.record(ledger)
  assert ledger.guarantee().epsilon == output.epsilon == 1.0


def test_a_plan_with_sigma_given_has_no_target_and_states_its_guarantee():
  calibrated = rf.make_dpsgd_plan(400, epsilon=2.0, delta=1e-5,
                                  sampling_rate=0.25, epochs=10,
                                  learning_rate=0.5)
  given = rf.make_dpsgd_plan(
      400, noise_multiplier=calibrated.noise_multiplier, delta=1e-5,
      sampling_rate=0.25, epochs=10, learning_rate=0.5)
  assert given.target_epsilon is None and calibrated.target_epsilon == 2.0
  assert given.epsilon == calibrated.epsilon  # the same σ, q, T and δ
  louder = rf.make_dpsgd_plan(
      400, noise_multiplier=2 * calibrated.noise_multiplier, delta=1e-5,
      sampling_rate=0.25, epochs=10, learning_rate=0.5)
  assert louder.epsilon < 0.6 * calibrated.epsilon
  with pytest.raises(ValueError, match="not both"):
    rf.make_dpsgd_plan(400, epsilon=2.0, noise_multiplier=1.0, delta=1e-5,
                       sampling_rate=0.25, epochs=10, learning_rate=0.5)


@pytest.mark.slow
def test_plans_differing_in_epsilon_share_one_compilation():
  # The plan is a pytree of its numbers (σ, C, ε, δ as leaves): two budgets
  # are two arguments to one compiled program, not two programs. A feature
  # map of another key and γ is one too.
  x, y = _circle(n=64, seed=2)
  xj, yj = jax.numpy.asarray(x, "float32"), jax.numpy.asarray(y)
  plans = [rf.make_dpsgd_plan(64, epsilon=eps, delta=1e-5,
                              sampling_rate=0.25, epochs=2,
                              learning_rate=0.5) for eps in (1.0, 4.0)]
  assert plans[0].noise_multiplier != plans[1].noise_multiplier
  maps = [rf.make_feature_map(jax.random.key(k), dim=2, num_features=8,
                              gamma=g) for k, g in ((20, None), (21, 3.0))]
  before = rf.release_dpsgd._cache_size()
  outs = [rf.release_dpsgd(jax.random.key(22), plan, fmap, xj, yj)
          for plan, fmap in zip(plans, maps, strict=True)]
  assert rf.release_dpsgd._cache_size() == before + 1
  assert not np.allclose(outs[0]["out"]["w"], outs[1]["out"]["w"])
  # Another shape (loss or step count) is another program.
  other = rf.make_dpsgd_plan(64, epsilon=1.0, delta=1e-5, sampling_rate=0.25,
                             epochs=3, learning_rate=0.5)
  rf.release_dpsgd(jax.random.key(22), other, maps[0], xj, yj)
  assert rf.release_dpsgd._cache_size() == before + 2


@pytest.mark.parametrize("loss,weight_decay", [("huber_hinge", 0.0),
                                               ("logistic", 0.01)])
@pytest.mark.slow
def test_a_traced_plan_trains_as_the_constant_one(loss, weight_decay):
  # release_dpsgd takes the plan as an argument (σ, C traced); on the same
  # plan and key it must give the parameters of dpcore.trainer.train with
  # the plan's numbers as constants, to the bit: the figures recorded
  # before the plan was a pytree stand (a traced learning rate moved them
  # by an ulp).
  x, y = _circle(n=80, seed=3)
  fmap = rf.make_feature_map(jax.random.key(23), dim=2, num_features=16)
  plan = rf.make_dpsgd_plan(80, epsilon=2.0, delta=1e-5, sampling_rate=0.25,
                            epochs=3, learning_rate=0.5, loss=loss,
                            weight_decay=weight_decay)
  # C = 1 (as every recorded figure): with another C the traced noise std
  # σC is a float32 product, an ulp from the constant's float64 one.
  xj, yj = jax.numpy.asarray(x, "float32"), jax.numpy.asarray(y)

  @jax.jit
  def reference(key):
    phi = rf.features(fmap, xj)
    optimizer = optax.sgd(plan.learning_rate)
    if weight_decay:
      optimizer = optax.chain(optax.add_decayed_weights(weight_decay),
                              optimizer)
    return trainer.train(key, plan.dpsgd, rf.layered_loss(plan.loss),
                         rf.initial_params(plan, 16), (phi, yj),
                         optimizer).params

  key = jax.random.key(24)
  want = reference(key)
  got = rf.release_dpsgd(key, plan, fmap, xj, yj)
  for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
    np.testing.assert_array_equal(a, b)


def test_output_perturbation_release_and_its_record():
  x, y = _circle(n=200, seed=1)
  fmap = rf.make_feature_map(jax.random.key(16), dim=2,
                             num_features=8)
  plan = rf.make_output_perturbation_plan(c=0.3, epsilon=1.0)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  (entry,) = ledger.entries
  assert (entry.label, entry.kind, entry.epsilon) == (
      "rff_output_perturbation", "pure", 1.0)
  assert plan.sensitivity == pytest.approx(0.606)
  # With a huge ε the noise vanishes: the release is the exact minimiser,
  # expressed on φ (w̃[:D]/2, bias w̃[D]/√2).
  exact = rf.exact_weights(plan, fmap, x, y)
  sure = rf.make_output_perturbation_plan(c=0.3, epsilon=1e9)
  model = rf.release_output_perturbation(jax.random.key(17), sure, fmap, x,
                                         y)
  np.testing.assert_allclose(model.weights[:, 0], exact[:-1] / 2,
                             atol=1e-6)
  np.testing.assert_allclose(model.bias[0], exact[-1] / SQRT2, atol=1e-6)
  noisy = rf.release_output_perturbation(jax.random.key(17), plan, fmap, x,
                                         y)
  assert not np.allclose(noisy.weights, model.weights)
  assert noisy.decision_function(x).shape == (200,)


def test_unit_features_are_in_the_unit_ball():
  fmap = rf.make_feature_map(jax.random.key(18), dim=2,
                             num_features=2)
  rows = np.vstack([random_features_audit.attaining_row(fmap)[None],
                    _points(n=50, d=2) * 1e6])
  norms = np.linalg.norm(rf.unit_features(fmap, rows), axis=1)
  assert norms.max() <= 1.0 + 1e-12
  assert norms.max() > 1.0 - 1e-6  # the attaining row sits on the sphere


@pytest.mark.parametrize("position", random_features_audit.POSITIONS)
def test_the_output_perturbation_audit_runs_the_releases_own_draw(position):
  # The audit noises the exact minimiser host-side (the solver does not
  # vmap); this ties its mechanism to the release: for the same key, the
  # spec's output is release_output_perturbation's, in w̃'s coordinates.
  spec = random_features_audit.output_perturbation_spec(position=position)
  cfg = spec.settings
  fmap = rf.make_feature_map(jax.random.key(random_features_audit.FEATURE_SEED),
                             dim=cfg["input_dim"],
                             num_features=cfg["num_features"])
  plan = rf.make_output_perturbation_plan(c=cfg["c"], epsilon=cfg["epsilon"])
  x = np.repeat(random_features_audit.attaining_row(fmap)[None], 3, axis=0)
  y = np.insert(np.array([1.0, -1.0]), cfg["canary_row"], 1.0)  # data_0
  broken = random_features_audit.output_perturbation_spec(broken=True)
  for seed in range(3):
    key = jax.random.key(40 + seed)
    model = rf.release_output_perturbation(key, plan, fmap, x, y)
    released = np.append(model.weights[:, 0] * rf.FEATURE_BOUND,
                         model.bias) / output_perturbation.BIAS_SCALE
    audited = np.asarray(spec.mechanism(key, spec.data_0))
    np.testing.assert_allclose(audited, released, atol=1e-5)
    # The broken variant's smaller noise is not the release's.
    wrong = np.asarray(broken.mechanism(key, broken.data_0))
    assert np.max(np.abs(wrong - released)) > 1e-3
