"""Bad-input suite for dpcore's public functions (issue #15).

Each case is a call a user could make by mistake; it must fail with the
exception type given and a message naming the argument, before any
tracing or compilation (so the whole file runs in seconds). The accepted
cases at the end are legitimate edge inputs that must keep working.
Grouped by module; one table per group.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpcore import (
    auditing,
    calibration,
    clipping,
    dpsgd,
    exponential,
    linalg,
    metrics,
    noise,
    trainer,
    validation,
)

KEY = jax.random.key(0)
NAN = float("nan")
INF = float("inf")


def _case(name, call, error, match):
  return pytest.param(call, error, match, id=name)


def _check(call, error, match):
  with pytest.raises(error, match=match):
    call()


# -- keys (every sampler and entry point shares validation.check_key) ----------

KEY_CASES = [
    _case("int_seed", lambda: validation.check_key(0), TypeError,
          "key must be a JAX PRNG key"),
    _case("none", lambda: validation.check_key(None), TypeError,
          "key must be a JAX PRNG key"),
    _case("float_array", lambda: validation.check_key(jnp.zeros(2)),
          TypeError, "dtype float32"),
    _case("raw_wrong_width",
          lambda: validation.check_key(jnp.zeros(3, jnp.uint32)), TypeError,
          "shape"),
    _case("batch_for_one_key",
          lambda: validation.check_key(jax.random.split(KEY, 3)), TypeError,
          "one key"),
    _case("one_key_for_batch",
          lambda: validation.check_key(KEY, "keys", batch=True), TypeError,
          "keys must be a 1-D array of keys"),
]


@pytest.mark.parametrize("call, error, match", KEY_CASES)
def test_keys(call, error, match):
  _check(call, error, match)


# -- noise samplers ------------------------------------------------------------

NOISE_CASES = [
    _case("gaussian_int_key",
          lambda: noise.gaussian_noise(0, (3,), stddev=1.0), TypeError,
          "key must be"),
    _case("gaussian_raw_key_wrong_shape",
          lambda: noise.gaussian_noise(jnp.zeros(3, jnp.uint32), (3,),
                                       stddev=1.0), TypeError, "key must be"),
    _case("gaussian_stddev_nan",
          lambda: noise.gaussian_noise(KEY, (3,), stddev=NAN), ValueError,
          "stddev"),
    _case("gaussian_stddev_negative",
          lambda: noise.gaussian_noise(KEY, (3,), stddev=-1.0), ValueError,
          "stddev"),
    _case("gaussian_stddev_inf",
          lambda: noise.gaussian_noise(KEY, (3,), stddev=INF), ValueError,
          "stddev"),
    _case("gaussian_shape_int",
          lambda: noise.gaussian_noise(KEY, 3, stddev=1.0), TypeError,
          "shape must be a tuple"),
    _case("gaussian_shape_negative",
          lambda: noise.gaussian_noise(KEY, (-1,), stddev=1.0), ValueError,
          "shape"),
    _case("gaussian_shape_float",
          lambda: noise.gaussian_noise(KEY, (2.5,), stddev=1.0), ValueError,
          "shape"),
    _case("gaussian_int_dtype",
          lambda: noise.gaussian_noise(KEY, (3,), stddev=1.0,
                                       dtype=jnp.int32), ValueError, "dtype"),
    _case("laplace_scale_inf",
          lambda: noise.laplace_noise(KEY, (3,), scale=INF), ValueError,
          "scale"),
    _case("laplace_scale_negative",
          lambda: noise.laplace_noise(KEY, (3,), scale=-1.0), ValueError,
          "scale"),
    _case("laplace_int_key",
          lambda: noise.laplace_noise(7, (3,), scale=1.0), TypeError,
          "key must be"),
    _case("exponential_int_key",
          lambda: noise.exponential_noise(7, (3,)), TypeError, "key must be"),
    _case("gumbel_shape_string",
          lambda: noise.gumbel_noise(KEY, "3"), TypeError, "shape"),
    _case("symmetric_dim_zero",
          lambda: noise.symmetric_gaussian_noise(KEY, 0, stddev=1.0),
          ValueError, "dim"),
    _case("symmetric_dim_float",
          lambda: noise.symmetric_gaussian_noise(KEY, 2.5, stddev=1.0),
          ValueError, "dim"),
    _case("sphere_dim_zero",
          lambda: noise.sphere_uniform(KEY, 0), ValueError, "dim"),
    _case("objective_noise_dim_zero",
          lambda: noise.objective_perturbation_noise(KEY, 0, beta=1.0),
          ValueError, "dim"),
    _case("objective_noise_beta_zero",
          lambda: noise.objective_perturbation_noise(KEY, 3, beta=0.0),
          ValueError, "beta"),
    _case("objective_noise_beta_negative",
          lambda: noise.objective_perturbation_noise(KEY, 3, beta=-1.0),
          ValueError, "beta"),
    _case("objective_noise_int_key",
          lambda: noise.objective_perturbation_noise(1, 3, beta=1.0),
          TypeError, "key must be"),
    _case("cutoff_delta_epsilon_nan",
          lambda: noise.cutoff_delta(NAN, 10), ValueError, "epsilon"),
    _case("cutoff_delta_draws_negative",
          lambda: noise.cutoff_delta(1.0, -1), ValueError, "num_draws"),
]


@pytest.mark.parametrize("call, error, match", NOISE_CASES)
def test_noise(call, error, match):
  _check(call, error, match)


# -- calibration ---------------------------------------------------------------

CALIBRATION_CASES = [
    _case("laplace_epsilon_zero",
          lambda: calibration.laplace_scale(epsilon=0.0, sensitivity=1.0),
          ValueError, "epsilon"),
    _case("laplace_sensitivity_negative",
          lambda: calibration.laplace_scale(epsilon=1.0, sensitivity=-1.0),
          ValueError, "sensitivity"),
    _case("analytic_epsilon_nan",
          lambda: calibration.gaussian_sigma_analytic(
              epsilon=NAN, delta=1e-5, sensitivity=1.0), ValueError,
          "epsilon"),
    _case("analytic_epsilon_inf",
          lambda: calibration.gaussian_sigma_analytic(
              epsilon=INF, delta=1e-5, sensitivity=1.0), ValueError,
          "epsilon"),
    _case("analytic_delta_one",
          lambda: calibration.gaussian_sigma_analytic(
              epsilon=1.0, delta=1.0, sensitivity=1.0), ValueError, "delta"),
    _case("analytic_delta_zero",
          lambda: calibration.gaussian_sigma_analytic(
              epsilon=1.0, delta=0.0, sensitivity=1.0), ValueError, "delta"),
    _case("analytic_delta_string",
          lambda: calibration.gaussian_sigma_analytic(
              epsilon=1.0, delta="1e-5", sensitivity=1.0), ValueError,
          "delta"),
    _case("classic_epsilon_above_one",
          lambda: calibration.gaussian_sigma_classic(
              epsilon=2.0, delta=1e-5, sensitivity=1.0), ValueError,
          "epsilon"),
    _case("unknown_method",
          lambda: calibration.gaussian_sigma(
              epsilon=1.0, delta=1e-5, sensitivity=1.0, method="exact"),
          ValueError, "method"),
    _case("gaussian_delta_sigma_zero",
          lambda: calibration.gaussian_delta(sigma=0.0, epsilon=1.0),
          ValueError, "sigma"),
    _case("gaussian_delta_sigma_negative",
          lambda: calibration.gaussian_delta(sigma=-1.0, epsilon=1.0),
          ValueError, "sigma"),
    _case("gaussian_delta_epsilon_nan",
          lambda: calibration.gaussian_delta(sigma=1.0, epsilon=NAN),
          ValueError, "epsilon"),
    _case("gaussian_delta_epsilon_negative",
          lambda: calibration.gaussian_delta(sigma=1.0, epsilon=-0.5),
          ValueError, "epsilon"),
]


@pytest.mark.parametrize("call, error, match", CALIBRATION_CASES)
def test_calibration(call, error, match):
  _check(call, error, match)


# -- clipping ------------------------------------------------------------------

ROWS = jnp.ones((2, 3))

CLIPPING_CASES = [
    _case("clip_to_norm_negative",
          lambda: clipping.clip_to_norm(jnp.ones(3), -1.0), ValueError,
          "clip_norm"),
    _case("clip_to_norm_nan",
          lambda: clipping.clip_to_norm(jnp.ones(3), NAN), ValueError,
          "clip_norm"),
    _case("clipped_sum_zero_norm",
          lambda: clipping.clipped_sum(ROWS, 0.0), ValueError, "clip_norm"),
    _case("clipped_sum_weights_length",
          lambda: clipping.clipped_sum(ROWS, 1.0, weights=jnp.ones(3)),
          ValueError, "weights must have shape"),
    _case("clipped_sum_leaves_disagree",
          lambda: clipping.clipped_sum(
              {"a": jnp.ones((2, 3)), "b": jnp.ones((3,))}, 1.0),
          ValueError, "leading example axis"),
    _case("clip_rows_negative",
          lambda: clipping.clip_rows(ROWS, max_norm=-1.0), ValueError,
          "max_norm"),
    _case("normalize_rows_negative_eps",
          lambda: clipping.normalize_rows(ROWS, eps=-1.0), ValueError, "eps"),
    _case("clip_to_box_reversed",
          lambda: clipping.clip_to_box(ROWS, low=1.0, high=-1.0), ValueError,
          "low < high"),
    _case("clip_to_box_nan_bound",
          lambda: clipping.clip_to_box(ROWS, low=NAN), ValueError,
          "low < high"),
    _case("scale_to_box_vector",
          lambda: clipping.scale_to_box(jnp.ones(3), (0, 1)), ValueError,
          "x must be 2-D"),
    _case("scale_to_box_no_bounds",
          lambda: clipping.scale_to_box(ROWS, None), ValueError,
          "bounds is None"),
    _case("scale_to_box_bounds_length",
          lambda: clipping.scale_to_box(ROWS, (np.zeros(2), np.ones(2))),
          ValueError, "bounds"),
    _case("scale_to_box_reversed",
          lambda: clipping.scale_to_box(ROWS, (1, 0)), ValueError, "bounds"),
    _case("unit_rows_three_d",
          lambda: clipping.unit_rows(jnp.ones((2, 2, 2))), ValueError,
          "x must be 2-D"),
    _case("unit_rows_negative_high",
          lambda: clipping.unit_rows(ROWS, (-2, -1)), ValueError, "bound"),
]


@pytest.mark.parametrize("call, error, match", CLIPPING_CASES)
def test_clipping(call, error, match):
  _check(call, error, match)


# -- DP-SGD pieces and the trainer ---------------------------------------------


def _plan(**overrides):
  kwargs = dict(sampling_rate=0.5, clip_norm=1.0, noise_multiplier=1.0,
                steps=2)
  kwargs.update(overrides)
  return trainer.make_plan(10, **kwargs)


def _train(key=KEY, loss=lambda w, e: jnp.sum(w * e), data=None,
           optimizer=None, plan=None):
  data = jnp.ones((10, 3)) if data is None else data
  return trainer.train(key, plan or _plan(), loss, jnp.zeros(3), data,
                       optimizer or optax.sgd(0.1))


DPSGD_CASES = [
    _case("poisson_int_key",
          lambda: dpsgd.poisson_batch(0, 10, sampling_rate=0.5, max_batch=5),
          TypeError, "key must be"),
    _case("poisson_no_examples",
          lambda: dpsgd.poisson_batch(KEY, 0, sampling_rate=0.5,
                                      max_batch=5), ValueError,
          "num_examples"),
    _case("poisson_float_examples",
          lambda: dpsgd.poisson_batch(KEY, 2.5, sampling_rate=0.5,
                                      max_batch=5), ValueError,
          "num_examples"),
    _case("poisson_max_batch_zero",
          lambda: dpsgd.poisson_batch(KEY, 10, sampling_rate=0.5,
                                      max_batch=0), ValueError, "max_batch"),
    _case("poisson_rate_zero",
          lambda: dpsgd.poisson_batch(KEY, 10, sampling_rate=0.0,
                                      max_batch=5), ValueError,
          "sampling_rate"),
    _case("poisson_rate_above_one",
          lambda: dpsgd.poisson_batch(KEY, 10, sampling_rate=1.5,
                                      max_batch=5), ValueError,
          "sampling_rate"),
    _case("max_batch_overflow_zero",
          lambda: dpsgd.max_batch_size(10, sampling_rate=0.5, steps=3,
                                       overflow_probability=0.0),
          ValueError, "overflow_probability"),
    _case("max_batch_overflow_nan",
          lambda: dpsgd.max_batch_size(10, sampling_rate=0.5, steps=3,
                                       overflow_probability=NAN),
          ValueError, "overflow_probability"),
    _case("max_batch_steps_zero",
          lambda: dpsgd.max_batch_size(10, sampling_rate=0.5, steps=0),
          ValueError, "steps"),
    _case("truncation_max_batch_zero",
          lambda: dpsgd.truncation_probability(
              10, sampling_rate=0.5, steps=3, max_batch=0), ValueError,
          "max_batch"),
    _case("num_steps_epochs_zero",
          lambda: dpsgd.num_steps(epochs=0, sampling_rate=0.5), ValueError,
          "epochs"),
    _case("num_steps_epochs_inf",
          lambda: dpsgd.num_steps(epochs=INF, sampling_rate=0.5), ValueError,
          "epochs"),
    _case("dp_aggregate_int_key",
          lambda: dpsgd.dp_aggregate(0, clip_norm=1.0, noise_multiplier=1.0,
                                     expected_batch_size=2.0), TypeError,
          "key must be"),
    _case("dp_aggregate_sigma_inf",
          lambda: dpsgd.dp_aggregate(KEY, clip_norm=1.0,
                                     noise_multiplier=INF,
                                     expected_batch_size=2.0), ValueError,
          "noise_multiplier"),
    _case("dp_aggregate_sigma_string",
          lambda: dpsgd.dp_aggregate(KEY, clip_norm=1.0,
                                     noise_multiplier="1",
                                     expected_batch_size=2.0), ValueError,
          "noise_multiplier"),
    _case("dp_aggregate_clip_zero",
          lambda: dpsgd.dp_aggregate(KEY, clip_norm=0.0,
                                     noise_multiplier=1.0,
                                     expected_batch_size=2.0), ValueError,
          "clip_norm"),
    _case("dp_aggregate_batch_zero",
          lambda: dpsgd.dp_aggregate(KEY, clip_norm=1.0,
                                     noise_multiplier=1.0,
                                     expected_batch_size=0.0), ValueError,
          "expected_batch_size"),
    _case("paper_sigma_delta_zero",
          lambda: dpsgd.paper_noise_multiplier(
              epsilon=1.0, delta=0.0, sampling_rate=0.1, steps=10),
          ValueError, "delta"),
]


@pytest.mark.parametrize("call, error, match", DPSGD_CASES)
def test_dpsgd(call, error, match):
  _check(call, error, match)


TRAINER_CASES = [
    _case("plan_sigma_nan", lambda: _plan(noise_multiplier=NAN), ValueError,
          "noise_multiplier"),
    _case("plan_sigma_inf", lambda: _plan(noise_multiplier=INF), ValueError,
          "noise_multiplier"),
    _case("plan_sigma_negative", lambda: _plan(noise_multiplier=-1.0),
          ValueError, "noise_multiplier"),
    _case("plan_clip_zero", lambda: _plan(clip_norm=0.0), ValueError,
          "clip_norm"),
    _case("plan_steps_and_epochs", lambda: _plan(epochs=1.0), ValueError,
          "steps= and epochs="),
    _case("plan_neither_steps_nor_epochs", lambda: _plan(steps=None),
          ValueError, "steps= and epochs="),
    _case("plan_overflow_above_one", lambda: _plan(overflow_probability=2.0),
          ValueError, "overflow_probability"),
    _case("plan_max_batch_zero", lambda: _plan(max_batch=0), ValueError,
          "max_batch"),
    # Issue #32: a count the programs run as int32 is refused in make_plan,
    # naming the setting (it overflowed inside the program before).
    _case("plan_steps_above_int32", lambda: _plan(steps=2**31),
          ValueError, r"steps = 2,147,483,648 does not fit the int32"),
    _case("plan_epochs_give_steps_above_int32",
          lambda: _plan(steps=None, sampling_rate=0.05, epochs=1e9),
          ValueError, r"steps = 20,000,000,000 \(epochs 1e\+09 / "
          r"sampling_rate 0.05\).*lower epochs or raise sampling_rate"),
    _case("plan_examples_above_int32",
          lambda: trainer.make_plan(2**31, sampling_rate=0.5, clip_norm=1.0,
                                    noise_multiplier=1.0, steps=2),
          ValueError, "num_examples = 2,147,483,648"),
    _case("num_steps_above_int32",
          lambda: dpsgd.num_steps(epochs=3e9, sampling_rate=1.0),
          ValueError, "lower epochs or raise sampling_rate"),
    _case("plan_examples_zero",
          lambda: trainer.make_plan(0, sampling_rate=0.5, clip_norm=1.0,
                                    noise_multiplier=1.0, steps=2),
          ValueError, "num_examples"),
    _case("record_without_noise",
          lambda: _plan(noise_multiplier=0.0).record(
              __import__("dpcore").PrivacyLedger(), delta=1e-5),
          ValueError, "noise_multiplier=0"),
    _case("train_int_key", lambda: _train(key=0), TypeError, "key must be"),
    _case("train_bad_train_keys",
          lambda: _train(key=trainer.TrainKeys(KEY, 3)), TypeError,
          "key.noise"),
    _case("train_plan_not_a_plan",
          lambda: trainer.train(KEY, {"steps": 2}, lambda w, e: 0.0,
                                jnp.zeros(3), jnp.ones((10, 3)),
                                optax.sgd(0.1)), ValueError, "plan"),
    _case("train_rows_mismatch", lambda: _train(data=jnp.ones((9, 3))),
          ValueError, "num_examples=10"),
    _case("train_loss_not_callable", lambda: _train(loss=3), TypeError,
          "loss must be a function"),
    _case("train_no_loss", lambda: _train(loss=None), ValueError,
          "loss or a clipped_sum"),
    _case("train_optimizer_not_optax",
          lambda: _train(optimizer="sgd"), TypeError, "optimizer"),
]


@pytest.mark.parametrize("call, error, match", TRAINER_CASES)
def test_trainer(call, error, match):
  _check(call, error, match)


# -- exponential mechanism, auditing, metrics, linear algebra ------------------

SCORES = jnp.array([0.1, 0.9, 0.5])


def _select(key=KEY, scores=SCORES, epsilon=1.0, sensitivity=1.0,
            mask=None):
  return exponential.exponential_mechanism(
      key, scores, epsilon=epsilon, sensitivity=sensitivity, mask=mask)


EXPONENTIAL_CASES = [
    _case("int_key", lambda: _select(key=0), TypeError, "key must be"),
    _case("epsilon_zero", lambda: _select(epsilon=0.0), ValueError,
          "epsilon"),
    _case("epsilon_negative", lambda: _select(epsilon=-1.0), ValueError,
          "epsilon"),
    _case("epsilon_nan", lambda: _select(epsilon=NAN), ValueError,
          "epsilon"),
    _case("epsilon_inf", lambda: _select(epsilon=INF), ValueError,
          "epsilon"),
    _case("sensitivity_zero", lambda: _select(sensitivity=0.0), ValueError,
          "sensitivity"),
    _case("scores_matrix", lambda: _select(scores=jnp.ones((2, 3))),
          ValueError, "scores must be a non-empty 1-D"),
    _case("scores_empty", lambda: _select(scores=jnp.ones((0,))),
          ValueError, "scores must be a non-empty 1-D"),
    _case("scores_nan", lambda: _select(scores=jnp.array([1.0, NAN])),
          ValueError, "scores contains NaN"),
    _case("mask_length", lambda: _select(mask=jnp.ones(4, bool)),
          ValueError, "mask must have the shape"),
    _case("probabilities_epsilon_zero",
          lambda: exponential.exponential_probabilities(
              SCORES, epsilon=0.0, sensitivity=1.0), ValueError, "epsilon"),
]


@pytest.mark.parametrize("call, error, match", EXPONENTIAL_CASES)
def test_exponential(call, error, match):
  _check(call, error, match)


AUDITING_CASES = [
    _case("clopper_pearson_no_trials",
          lambda: auditing.clopper_pearson(0, 0), ValueError, "trials"),
    _case("clopper_pearson_successes_above_trials",
          lambda: auditing.clopper_pearson(5, 3), ValueError, "successes"),
    _case("clopper_pearson_confidence",
          lambda: auditing.clopper_pearson(1, 3, confidence=1.5), ValueError,
          "confidence"),
    _case("rates_delta_above_one",
          lambda: auditing.epsilon_from_rates(0.1, 0.1, delta=2.0),
          ValueError, "delta"),
    _case("rates_false_positive_above_one",
          lambda: auditing.epsilon_from_rates(2.0, 0.1, delta=1e-5),
          ValueError, "false_positive"),
    _case("rates_false_negative_negative",
          lambda: auditing.epsilon_from_rates(0.1, -0.1, delta=1e-5),
          ValueError, "false_negative"),
    _case("audit_one_trial",
          lambda: auditing.audit(KEY, lambda k, d: d, 0.0, 1.0,
                                 statistic=lambda o: o, delta=0.0,
                                 trials=1), ValueError, "trials"),
    _case("audit_delta_one",
          lambda: auditing.audit(KEY, lambda k, d: d, 0.0, 1.0,
                                 statistic=lambda o: o, delta=1.0,
                                 trials=10), ValueError, "delta"),
    _case("sample_statistic_trials_above_int32",
          lambda: auditing.sample_statistic(
              KEY, lambda k, d: d, 0.0, statistic=lambda o: o, trials=3e9),
          ValueError, "trials = 3,000,000,000 does not fit the int32"),
    _case("count_product_above_int32",
          lambda: validation.check_count_product(
              {"participants": 50_000, "rows": 50_000}, "participants × rows"),
          ValueError, r"participants × rows = 2,500,000,000 \(participants "
          r"50,000 × rows 50,000\)"),
    _case("count_not_an_integer",
          lambda: validation.check_count(2.5, "repeats"), ValueError,
          "repeats must be a positive integer"),
    _case("sample_statistic_chunk_zero",
          lambda: auditing.sample_statistic(
              KEY, lambda k, d: d, 0.0, statistic=lambda o: o, trials=10,
              chunk=0), ValueError, "chunk"),
]


@pytest.mark.parametrize("call, error, match", AUDITING_CASES)
def test_auditing(call, error, match):
  _check(call, error, match)


METRICS_CASES = [
    _case("accuracy_lengths",
          lambda: metrics.accuracy(jnp.ones(3), jnp.ones(4)), ValueError,
          "y_pred has 4 entries"),
    _case("accuracy_empty",
          lambda: metrics.accuracy(jnp.ones(0), jnp.ones(0)), ValueError,
          "y_true must be a non-empty"),
    _case("auc_lengths",
          lambda: metrics.auc(jnp.array([1, -1, 1]), jnp.ones(4)),
          ValueError, "scores has 4 entries"),
    _case("auc_labels_zero_two",
          lambda: metrics.auc(jnp.array([0, 2, 0]), jnp.ones(3)),
          ValueError, "y_true must hold only -1 and"),
    _case("binary_report_labels",
          lambda: metrics.binary_report(jnp.array([0, 2, 0]), jnp.ones(3)),
          ValueError, "y_true"),
]


@pytest.mark.parametrize("call, error, match", METRICS_CASES)
def test_metrics(call, error, match):
  _check(call, error, match)


LINALG_CASES = [
    _case("eigh_top_k_zero",
          lambda: linalg.eigh_top_k(jnp.eye(3), 0), ValueError, "k must be"),
    _case("eigh_top_k_above_d",
          lambda: linalg.eigh_top_k(jnp.eye(3), 4), ValueError, "k must be"),
    _case("eigh_top_k_float_k",
          lambda: linalg.eigh_top_k(jnp.eye(3), 2.0), ValueError,
          "k must be"),
    _case("eigh_top_k_vector",
          lambda: linalg.eigh_top_k(jnp.ones(3), 1), ValueError,
          "m must be a square matrix"),
    _case("eigh_top_k_not_square",
          lambda: linalg.eigh_top_k(jnp.ones((3, 4)), 1), ValueError,
          "m must be a square matrix"),
    _case("subspace_int_key",
          lambda: linalg.subspace_top_k(0, jnp.eye(3), 1), TypeError,
          "key must be"),
    _case("subspace_block_below_k",
          lambda: linalg.subspace_top_k(KEY, jnp.eye(4), 2, block=1),
          ValueError, "block"),
    _case("subspace_iterations_negative",
          lambda: linalg.subspace_top_k(KEY, jnp.eye(4), 2, iterations=-1),
          ValueError, "iterations"),
    _case("subspace_not_square",
          lambda: linalg.subspace_top_k(KEY, jnp.ones((3, 4)), 1),
          ValueError, "m must be a square matrix"),
    _case("subspace_distance_shapes",
          lambda: linalg.subspace_distance(jnp.eye(3)[:, :1],
                                           jnp.eye(3)[:, :2]), ValueError,
          "same shape"),
]


@pytest.mark.parametrize("call, error, match", LINALG_CASES)
def test_linalg(call, error, match):
  _check(call, error, match)


# -- legitimate edge inputs: accepted ------------------------------------------


def test_legitimate_edge_inputs_are_accepted():
  # The largest count that fits int32 is a count (issue #32).
  assert validation.check_count(2**31 - 1, "steps") == 2**31 - 1
  # Raw uint32 key data (jax.random.PRNGKey) is a key too.
  raw = jax.random.PRNGKey(0)
  assert validation.check_key(raw) is raw
  assert noise.gaussian_noise(raw, (0,), stddev=1.0).shape == (0,)
  # stddev 0 is a legitimate (noise-free) sampler call; an empty shape too.
  assert noise.gaussian_noise(KEY, (0, 3), stddev=0.0).shape == (0, 3)
  # A traced scale is left to the caller (it cannot be checked inside jit).
  shape = jax.eval_shape(
      lambda s: noise.laplace_noise(KEY, (2,), scale=s), 1.0)
  assert shape.shape == (2,)
  # Sampling rate 1 (every row) and one example are allowed.
  assert trainer.make_plan(1, sampling_rate=1.0, clip_norm=1.0,
                           noise_multiplier=0.0, steps=1).max_batch == 1
  # k == d is the largest allowed top-k.
  assert linalg.eigh_top_k(jnp.eye(2), 2).vectors.shape == (2, 2)
  # NaN rows are documented as clipped to zero, not refused.
  clipped = clipping.clip_rows(jnp.array([[NAN, 1.0], [3.0, 4.0]]))
  np.testing.assert_allclose(clipped, [[0.0, 0.0], [0.6, 0.8]], rtol=1e-6)
  # ε = 0 in gaussian_delta is a legitimate question (δ at ε = 0).
  assert 0.0 < calibration.gaussian_delta(sigma=1.0, epsilon=0.0) < 1.0
  assert math.isclose(float(auditing.epsilon_from_rates(
      0.5, 0.5, delta=0.0)), 0.0, abs_tol=1e-12)
