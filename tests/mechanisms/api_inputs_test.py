"""Bad-input suite for the mechanisms' public functions (issue #15).

Each case is a call a user could make by mistake; it must fail with the
exception type given and a message naming the argument, before any
tracing or compilation. The accepted cases at the end are legitimate edge
inputs that must keep working. One table per family.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import PrivacyLedger
from mechanisms.erm import objective_perturbation as op
from mechanisms.erm import output_perturbation as outp
from mechanisms.lvq import init as lvq_init
from mechanisms.lvq import model as lvq_model
from mechanisms.lvq import train as lvq_train
from mechanisms.pca import dp_pca
from mechanisms.svm import dpwss, kernels, smo_train
from mechanisms.svm import random_features as rf

KEY = jax.random.key(0)
NAN = float("nan")
INF = float("inf")


def _unit_rows(n=20, d=4, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)).astype(np.float32)
  return x / (2.0 * np.linalg.norm(x, axis=1, keepdims=True))


X = _unit_rows()
X_NAN = X.copy()
X_NAN[2, 1] = np.nan
Y_PM = np.where(np.arange(20) % 2 == 0, 1, -1)
Y_CLASS = np.arange(20) % 3
MASK = np.ones(20, np.float32)


def _case(name, call, error, match):
  return pytest.param(call, error, match, id=name)


def _check(call, error, match):
  with pytest.raises(error, match=match):
    call()


# -- DP-PCA --------------------------------------------------------------------


def _dp_pca(key=KEY, x=X, mask=MASK, **kwargs):
  kwargs = {"k": 2, "sigma": 1.0, **kwargs}
  return dp_pca.noisy_basis(key, x, mask, **kwargs)


def _pca_release(key=KEY, x=X, **kwargs):
  settings = {"k": 2, "epsilon": 1.0, "delta": 1e-5, "dim": 4, **kwargs}
  return dp_pca.release(key, dp_pca.make_plan(**settings), x)


PCA_CASES = [
    _case("dp_pca_int_key", lambda: _dp_pca(key=0), TypeError,
          "key must be"),
    _case("dp_pca_empty", lambda: _dp_pca(x=X[:0], mask=MASK[:0]),
          ValueError, "x must be a non-empty 2-D"),
    _case("dp_pca_vector", lambda: _dp_pca(x=X[0], mask=MASK[:1]),
          ValueError, "x must be a non-empty 2-D"),
    _case("dp_pca_all_nan", lambda: _dp_pca(x=np.full_like(X, np.nan)),
          ValueError, "x contains 80 NaN"),
    _case("dp_pca_inf", lambda: _dp_pca(x=np.where(X > 0.4, np.inf, X)),
          ValueError, "NaN or infinite"),
    _case("dp_pca_mask_length", lambda: _dp_pca(mask=MASK[:19]),
          ValueError, "mask must have shape"),
    _case("dp_pca_k_above_d", lambda: _dp_pca(k=5), ValueError,
          "exceeds the data dimension"),
    _case("dp_pca_k_float", lambda: _dp_pca(k=2.0), ValueError, "k must be"),
    _case("dp_pca_topk_unknown", lambda: _dp_pca(topk="svd"), ValueError,
          "topk"),
    _case("dp_pca_noise_unknown", lambda: _dp_pca(noise="int"), ValueError,
          "noise"),
    _case("dp_pca_discrete_without_grid",
          lambda: _dp_pca(noise="discrete"), ValueError, "granularity"),
    _case("pca_release_int_key", lambda: _pca_release(key=0), TypeError,
          "key must be"),
    _case("pca_release_vector", lambda: _pca_release(x=X[0]),
          ValueError, "x must be a non-empty 2-D"),
    _case("pca_release_empty", lambda: _pca_release(x=X[:0]),
          ValueError, "x must be a non-empty 2-D"),
    _case("pca_release_nan", lambda: _pca_release(x=X_NAN), ValueError,
          "NaN"),
    _case("pca_release_row_norm", lambda: _pca_release(x=4 * X),
          ValueError, "norm"),
    _case("pca_release_other_dim", lambda: _pca_release(dim=5), ValueError,
          "dim=5"),
    _case("pca_release_not_a_plan",
          lambda: dp_pca.release(KEY, {"sigma": 1.0}, X), TypeError,
          "PcaPlan"),
    _case("pca_plan_k_zero", lambda: _pca_release(k=0), ValueError,
          "k must be"),
    _case("pca_plan_epsilon_inf", lambda: _pca_release(epsilon=INF),
          ValueError, "epsilon"),
    _case("pca_plan_delta_one", lambda: _pca_release(delta=1.0),
          ValueError, "delta"),
    _case("pca_plan_relation",
          lambda: _pca_release(relation="swap"), ValueError,
          "relation"),
    _case("pca_plan_calibration",
          lambda: _pca_release(calibration="exact"), ValueError,
          "calibration"),
    _case("pca_plan_record_count_zero",
          lambda: dp_pca.make_plan(epsilon=1.0, delta=1e-5, k=2, dim=4)
          .record(PrivacyLedger(), count=0), ValueError, "count"),
    _case("pca_empty", lambda: dp_pca.pca(X[:0], MASK[:0], k=2),
          ValueError, "x must be a non-empty 2-D"),
    _case("pca_nan", lambda: dp_pca.pca(X_NAN, MASK, k=2), ValueError,
          "NaN"),
    _case("pca_k_above_d", lambda: dp_pca.pca(X, MASK, k=9), ValueError,
          "exceeds the data dimension"),
    _case("pca_k_zero", lambda: dp_pca.pca(X, MASK, k=0), ValueError,
          "k must be"),
    _case("pca_mask_length", lambda: dp_pca.pca(X, MASK[:19], k=2),
          ValueError, "mask must have shape"),
    _case("pca_sigma_calibration",
          lambda: dp_pca.pca_sigma(epsilon=1.0, delta=1e-5,
                                   calibration="x"), ValueError,
          "calibration"),
    _case("pca_sigma_epsilon_negative",
          lambda: dp_pca.pca_sigma(epsilon=-1.0, delta=1e-5), ValueError,
          "epsilon"),
    _case("sensitivity_unknown", lambda: dp_pca.sensitivity("swap"),
          ValueError, "neighbouring"),
]


@pytest.mark.parametrize("call, error, match", PCA_CASES)
def test_pca(call, error, match):
  _check(call, error, match)


# -- objective and output perturbation -----------------------------------------


def _fit(key=KEY, x=X, y=Y_PM, *, max_iter=500, **kwargs):
  settings = {"epsilon": 1.0, "lam": 0.1, "num_examples": 20, **kwargs}
  return op.release(key, op.make_plan(**settings), x, y, max_iter=max_iter)


def _release(key=KEY, x=X, y=Y_PM, *, c=1.0, epsilon=1.0, **kwargs):
  return outp.release(key, outp.make_plan(epsilon=epsilon, c=c), x, y,
                      **kwargs)


ERM_CASES = [
    _case("fit_int_key", lambda: _fit(key=0), TypeError, "key must be"),
    _case("fit_labels_zero_one", lambda: _fit(y=(Y_PM > 0).astype(int)),
          ValueError, "y must contain only -1 and"),
    _case("fit_one_class", lambda: _fit(y=np.ones(20)), ValueError,
          "both classes"),
    _case("fit_labels_length", lambda: _fit(y=Y_PM[:5]), ValueError,
          "y has 5 labels"),
    _case("fit_labels_matrix", lambda: _fit(y=Y_PM[:, None]), ValueError,
          "y must be 1-D"),
    _case("fit_empty", lambda: _fit(x=X[:0], y=Y_PM[:0]), ValueError,
          "x must be a non-empty 2-D"),
    _case("fit_rows_other_than_n", lambda: _fit(num_examples=30), ValueError,
          "num_examples=30"),
    _case("fit_not_a_plan", lambda: op.release(KEY, {"p": 1.0}, X, Y_PM),
          TypeError, "ObjectivePerturbationPlan"),
    _case("fit_class_ids_out_of_range",
          lambda: _fit(y=Y_CLASS, num_classes=2), ValueError, "y"),
    _case("fit_nan", lambda: _fit(x=X_NAN), ValueError, "NaN"),
    _case("fit_row_norm", lambda: _fit(x=4 * X), ValueError, "norm"),
    _case("fit_loss_unknown", lambda: _fit(loss="hinge"), ValueError,
          "loss"),
    _case("fit_epsilon_zero", lambda: _fit(epsilon=0.0), ValueError,
          "epsilon"),
    _case("fit_lam_zero", lambda: _fit(lam=0.0), ValueError, "lam"),
    _case("fit_tol_inf", lambda: _fit(tol=INF), ValueError, "tol"),
    _case("fit_max_iter_float", lambda: _fit(max_iter=10.5), ValueError,
          "max_iter"),
    _case("fit_huber_width_zero", lambda: _fit(h=0.0), ValueError,
          "h must be > 0"),
    _case("plan_n_zero",
          lambda: op.make_plan(epsilon=1.0, num_examples=0, lam=0.1),
          ValueError, "num_examples must be"),
    _case("plan_one_class",
          lambda: op.make_plan(epsilon=1.0, num_examples=10, lam=0.1,
                               num_classes=1),
          ValueError, "num_classes"),
    _case("curvature_loss_unknown", lambda: op.curvature_bound("x"),
          ValueError, "loss"),
    _case("op_record_count_zero",
          lambda: op.make_plan(epsilon=1.0, num_examples=10, lam=0.1).record(
              PrivacyLedger(), count=0), ValueError, "count"),
    _case("release_int_key", lambda: _release(key=0), TypeError,
          "key must be"),
    _case("release_key_matrix",
          lambda: _release(key=jax.random.split(KEY, 4).reshape(2, 2)),
          TypeError, "key must be one key"),
    _case("release_c_zero", lambda: _release(c=0.0), ValueError,
          "c must be"),
    _case("release_tol_zero", lambda: _release(tol=0.0), ValueError,
          "tol"),
    _case("release_max_epochs_zero", lambda: _release(max_epochs=0),
          ValueError, "max_epochs"),
    _case("release_kernel_rbf", lambda: _release(kernel="rbf"), ValueError,
          "linear kernel"),
    _case("release_epsilon_nan", lambda: _release(epsilon=NAN), ValueError,
          "epsilon"),
    _case("release_row_norm", lambda: _release(x=4 * X), ValueError,
          "norm"),
    _case("release_labels_zero_one",
          lambda: _release(y=(Y_PM > 0).astype(int)), ValueError,
          "y must contain only -1 and"),
    _case("fit_linear_nan", lambda: outp.fit_linear(X_NAN, Y_PM, c=1.0),
          ValueError, "NaN"),
    _case("fit_linear_labels_length",
          lambda: outp.fit_linear(X, Y_PM[:3], c=1.0), ValueError,
          "y has 3 labels"),
    _case("perturb_int_key",
          lambda: outp.perturb(0, jnp.ones(3), sensitivity_l2=1.0,
                               epsilon=1.0), TypeError, "key must be"),
    _case("perturb_sensitivity_zero",
          lambda: outp.perturb(KEY, jnp.ones(3), sensitivity_l2=0.0,
                               epsilon=1.0), ValueError, "sensitivity_l2"),
    _case("outp_record_count_zero",
          lambda: outp.make_plan(epsilon=1.0, c=1.0).record(
              PrivacyLedger(), count=0), ValueError, "count"),
]


@pytest.mark.parametrize("call, error, match", ERM_CASES)
def test_erm(call, error, match):
  _check(call, error, match)


# -- SVM: WSS2, kernels, DPWSS -------------------------------------------------


def _dpwss(key=KEY, x=X, y=Y_PM, *, epsilon=1.0, sigma=0.5,
           selection="paper", max_iter=None, **kwargs):
  plan = dpwss.make_plan(selection_epsilon=epsilon, sigma=sigma,
                         selection=selection, max_iter=max_iter)
  return dpwss.release(key, plan, x, y, **kwargs)


def _dpwss_plan(**kwargs):
  return dpwss.make_plan(**{"selection_epsilon": 1.0, "sigma": 0.5,
                            **kwargs})


SVM_CASES = [
    _case("wss2_kernel_name", lambda: smo_train.wss2_train(
        X, Y_PM, kernel="rbf"), TypeError, "kernel must be a kernels"),
    _case("wss2_dtype", lambda: smo_train.wss2_train(
        X, Y_PM, dtype="float16"), ValueError, "dtype"),
    _case("wss2_row_dtype", lambda: smo_train.wss2_train(
        X, Y_PM, row_dtype="int8"), ValueError, "row_dtype"),
    _case("wss2_labels_zero_one", lambda: smo_train.wss2_train(
        X, (Y_PM > 0).astype(int)), ValueError, "y must contain only -1"),
    _case("wss2_labels_length", lambda: smo_train.wss2_train(
        X, Y_PM[:4]), ValueError, "y has 4 labels"),
    _case("wss2_c_nan", lambda: smo_train.wss2_train(X, Y_PM, c=NAN),
          ValueError, "c must be"),
    _case("wss2_eps_zero", lambda: smo_train.wss2_train(X, Y_PM, eps=0.0),
          ValueError, "eps"),
    _case("wss2_max_iter_zero", lambda: smo_train.wss2_train(
        X, Y_PM, max_iter=0), ValueError, "max_iter"),
    _case("wss2_unroll_zero", lambda: smo_train.wss2_train(
        X, Y_PM, unroll=0), ValueError, "unroll"),
    _case("wss2_nan", lambda: smo_train.wss2_train(X_NAN, Y_PM),
          ValueError, "NaN"),
    _case("wss2_complex", lambda: smo_train.wss2_train(
        X.astype(np.complex64), Y_PM), ValueError, "real-valued"),
    _case("kernel_unknown", lambda: kernels.KernelSpec("gauss"), ValueError,
          "kernel must be one of"),
    _case("kernel_gamma_zero", lambda: kernels.KernelSpec("rbf", gamma=0.0),
          ValueError, "gamma"),
    _case("kernel_degree_zero",
          lambda: kernels.KernelSpec("poly", degree=0), ValueError,
          "degree"),
    _case("kernel_coef0_nan",
          lambda: kernels.KernelSpec("poly", coef0=NAN), ValueError,
          "coef0"),
    _case("kernel_matrix_features", lambda: kernels.kernel_matrix(
        kernels.KernelSpec("rbf", gamma=1.0), jnp.ones((2, 3)),
        jnp.ones((2, 4))), ValueError, "same number of features"),
    _case("kernel_matrix_gamma_unset", lambda: kernels.kernel_matrix(
        kernels.KernelSpec("rbf"), jnp.ones((2, 3)), jnp.ones((2, 3))),
          ValueError, "gamma"),
    _case("dpwss_int_key", lambda: _dpwss(key=0), TypeError, "key must be"),
    _case("dpwss_sigma_one", lambda: _dpwss(sigma=1.0), ValueError,
          "sigma"),
    _case("dpwss_epsilon_zero", lambda: _dpwss(epsilon=0.0), ValueError,
          "epsilon"),
    _case("dpwss_selection", lambda: _dpwss(selection="x"), ValueError,
          "selection"),
    _case("dpwss_pair_flags", lambda: _dpwss(pair_flags="x"), ValueError,
          "pair_flags"),
    _case("dpwss_repeats_zero", lambda: _dpwss(repeats=0), ValueError,
          "repeats"),
    _case("dpwss_private_without_max_iter",
          lambda: _dpwss(selection="private"), ValueError, "max_iter"),
    _case("dpwss_private_shrinking",
          lambda: _dpwss(selection="private", max_iter=10, shrinking=True),
          ValueError, "shrinking"),
    _case("dpwss_labels", lambda: _dpwss(y=Y_CLASS), ValueError,
          "y must contain only -1"),
    _case("dpwss_plan_relation",
          lambda: _dpwss_plan(relation="add_remove"), ValueError,
          "relation"),
    _case("dpwss_plan_total_without_max_iter",
          lambda: _dpwss_plan(selection_epsilon=None, epsilon=2.0),
          ValueError, "max_iter"),
    _case("dpwss_plan_not_a_plan",
          lambda: dpwss.release(KEY, {"selection": "paper"}, X, Y_PM),
          ValueError, "make_plan"),
    _case("selection_report_iterations_negative",
          lambda: _dpwss_plan().selection_report(-1), ValueError,
          "iterations"),
    _case("selection_report_iterations_float",
          lambda: _dpwss_plan(selection="private",
                              max_iter=5).selection_report(2.5),
          ValueError, "iterations"),
    _case("dpwss_plan_delta_zero",
          lambda: _dpwss_plan(delta=0.0), ValueError, "delta"),
    _case("dpwss_plan_selection",
          lambda: _dpwss_plan(selection="x"), ValueError, "selection"),
    # Issue #32: counts the programs run as int32, refused by the plan.
    _case("dpwss_plan_max_iter_above_int32",
          lambda: _dpwss_plan(max_iter=2**31), ValueError,
          "max_iter = 2,147,483,648 does not fit the int32"),
    _case("dpwss_repeats_above_int32",
          lambda: dpwss.plan_repeats(20, 4, repeats=2**31, max_iter=10),
          ValueError, "repeats = 2,147,483,648 does not fit the int32"),
    _case("rff_dpsgd_plan_steps_above_int32",
          lambda: rf.make_dpsgd_plan(100, epsilon=1.0, delta=1e-5,
                                     sampling_rate=0.1, epochs=1e9,
                                     clip_norm=1.0, learning_rate=0.1),
          ValueError,
          r"steps = 10,000,000,000 \(epochs 1e\+09 / sampling_rate 0.1\)"),
    _case("rff_output_plan_max_epochs_above_int32",
          lambda: rf.make_output_perturbation_plan(
              c=1.0, epsilon=1.0, max_epochs=2**31), ValueError,
          "max_epochs = 2,147,483,648 does not fit the int32"),
]


@pytest.mark.parametrize("call, error, match", SVM_CASES)
def test_svm(call, error, match):
  _check(call, error, match)


# -- LVQ -----------------------------------------------------------------------


def _config(**kwargs):
  kwargs = {"num_classes": 3, "epochs": 1, "sampling_rate": 0.5,
            "max_batch": 20, "trainer": "sgd", **kwargs}
  return lvq_train.TrainConfig(**kwargs)


def _private_init(key=KEY, x=X, y=Y_CLASS, epsilon=1.0, **kwargs):
  kwargs = {"num_classes": 3, **kwargs}
  plan = lvq_init.make_laplace_plan(epsilon=epsilon, dim=np.shape(x)[-1])
  return lvq_init.release_laplace(key, plan, x, y, **kwargs)


def _plan(**kwargs):
  kwargs = {"num_examples": 100, "epsilon": 1.0, "delta": 1e-5,
            "sampling_rate": 0.1, "epochs": 2, "clip_norm": 0.5, "dim": 4,
            **kwargs}
  return lvq_train.make_plan(**kwargs)


PROTOS = {"prototypes": jnp.ones((3, 5))}

LVQ_CASES = [
    # Issue #32: T = E / q must fit the int32 step counter.
    _case("plan_steps_above_int32", lambda: _plan(epochs=10**9), ValueError,
          r"steps = 10,000,000,000 \(epochs 1e\+09 / sampling_rate 0.1\)"),
    _case("init_int_key", lambda: _private_init(key=0), TypeError,
          "key must be"),
    _case("init_epsilon_zero", lambda: _private_init(epsilon=0.0),
          ValueError, "epsilon"),
    _case("init_labels_length", lambda: _private_init(y=Y_CLASS[:5]),
          ValueError, "y must have shape"),
    _case("init_labels_outside", lambda: _private_init(y=Y_CLASS + 5),
          ValueError, "outside the class set"),
    _case("init_labels_fractional", lambda: _private_init(y=Y_CLASS + 0.5),
          ValueError, "outside the class set"),
    _case("init_vector", lambda: _private_init(x=X[0]), ValueError,
          "x must be a non-empty 2-D"),
    _case("init_nan", lambda: _private_init(x=X_NAN), ValueError, "NaN"),
    _case("init_num_classes_zero", lambda: _private_init(num_classes=0),
          ValueError, "num_classes"),
    _case("gaussian_init_delta_one",
          lambda: lvq_init.make_gaussian_plan(epsilon=1.0, delta=1.0, dim=5),
          ValueError, "delta"),
    _case("init_plan_of_other_dim",
          lambda: lvq_init.release_laplace(
              KEY, lvq_init.make_laplace_plan(epsilon=1.0, dim=2), X,
              Y_CLASS, num_classes=3),
          ValueError, "dim"),
    _case("class_means_labels_outside",
          lambda: lvq_init.class_mean_prototypes(KEY, X, Y_CLASS + 3,
                                                 num_classes=3),
          ValueError, "outside the class set"),
    _case("check_box_outside", lambda: lvq_init.check_box(4 * X + 1),
          ValueError, "outside the declared box"),
    _case("classes_present_missing",
          lambda: lvq_init.check_classes_present(np.zeros(5, int), 3),
          ValueError, "no rows of class"),
    _case("prototype_labels_zero", lambda: lvq_init.prototype_labels(0),
          ValueError, "num_classes"),
    _case("init_omega_dim_zero", lambda: lvq_model.init_omega(0),
          ValueError, "dim"),
    _case("init_omega_rank_zero", lambda: lvq_model.init_omega(3, rank=0),
          ValueError, "rank"),
    _case("phi_unknown", lambda: lvq_model.phi(jnp.ones(3), "relu"),
          ValueError, "phi"),
    _case("predict_features",
          lambda: lvq_model.predict(PROTOS, jnp.ones((4, 4)), jnp.arange(3)),
          ValueError, "prototypes' d"),
    _case("predict_prototype_labels",
          lambda: lvq_model.predict(PROTOS, jnp.ones((4, 5)), jnp.arange(2)),
          ValueError, "prototype_labels"),
    _case("config_model", lambda: _config(model="x").validate(), ValueError,
          "model"),
    _case("config_trainer", lambda: _config(trainer="adam").validate(),
          ValueError, "trainer"),
    _case("config_one_class", lambda: _config(num_classes=1).validate(),
          ValueError, "num_classes"),
    _case("config_rate_zero", lambda: _config(sampling_rate=0.0).validate(),
          ValueError, "sampling_rate"),
    _case("train_dpsgd_without_plan",
          lambda: lvq_train.train(KEY, X, Y_CLASS, _config(trainer="dpsgd")),
          ValueError, "release"),
    _case("release_plan_type",
          lambda: lvq_train.release(KEY, _config(), X, Y_CLASS, _config()),
          TypeError, "plan must be a DPLVQPlan"),
    _case("release_config_disagrees",
          lambda: lvq_train.release(
              KEY, _plan(num_examples=20, dim=X.shape[1]), X, Y_CLASS,
              _config(trainer="dpsgd")),
          ValueError, "differs from the plan"),
    _case("plan_init_mechanism", lambda: _plan(init_mechanism="x"),
          ValueError, "init_mechanism"),
    _case("train_config_checked",
          lambda: lvq_train.train(KEY, X, Y_CLASS, _config(model="x")),
          ValueError, "model"),
    _case("train_config_type",
          lambda: lvq_train.train(KEY, X, Y_CLASS, {"model": "glvq"}),
          TypeError, "config must be a TrainConfig"),
    _case("train_int_key", lambda: lvq_train.train(0, X, Y_CLASS, _config()),
          TypeError, "key must be"),
    _case("train_labels_outside",
          lambda: lvq_train.train(KEY, X, Y_CLASS + 5, _config()),
          ValueError, "outside the class set"),
    _case("train_labels_length",
          lambda: lvq_train.train(KEY, X, Y_CLASS[:5], _config()),
          ValueError, "y must have shape"),
    _case("train_nan", lambda: lvq_train.train(KEY, X_NAN, Y_CLASS,
                                               _config()),
          ValueError, "NaN"),
    _case("plan_epsilon_zero", lambda: _plan(epsilon=0.0), ValueError,
          "epsilon"),
    _case("plan_delta_one", lambda: _plan(delta=1.0), ValueError, "delta"),
    _case("plan_sigma_rule", lambda: _plan(sigma_rule="x"), ValueError,
          "sigma_rule"),
    _case("plan_init_fraction_one", lambda: _plan(init_fraction=1.0),
          ValueError, "init_fraction"),
    _case("plan_clip_zero", lambda: _plan(clip_norm=0.0), ValueError,
          "clip"),
    _case("plan_no_rows", lambda: _plan(num_examples=0), ValueError,
          "num_examples"),
    _case("plan_max_batch_zero", lambda: _plan(max_batch=0), ValueError,
          "max_batch"),
]


@pytest.mark.parametrize("call, error, match", LVQ_CASES)
def test_lvq(call, error, match):
  _check(call, error, match)


# -- legitimate edge inputs: accepted ------------------------------------------


def test_legitimate_edge_inputs_are_accepted():
  # k == d with a single row (the non-private baseline, eager).
  one = X[:1]
  basis = dp_pca.pca(one, MASK[:1], k=4)
  assert basis.components.shape == (4, 4)
  # k == d passes the kernel's checks (shapes only: no compilation).
  out = jax.eval_shape(
      lambda x: dp_pca.noisy_basis(KEY, x, MASK, k=4, sigma=1.0), X)
  assert out.components.shape == (4, 4)
  # Raw uint32 key data is a key; a batch of keys for the batch entry point.
  validation_keys = jax.random.split(jax.random.PRNGKey(0), 2)
  assert jax.eval_shape(
      lambda x: dp_pca.noisy_basis(validation_keys[0], x, MASK, k=2,
                                   sigma=1.0),
      X).components.shape == (4, 2)
  # One row, one participant: the smallest perturbation parameters.
  assert op.make_plan(epsilon=1.0, num_examples=1, lam=0.1, h=1.0).p > 0
  # Labels of any integer or float dtype holding class indices.
  lvq_init.check_init_inputs(KEY, X, Y_CLASS.astype(np.float32), 3)
  lvq_init.check_init_inputs(KEY, X[:1], np.array([2], np.int8), 3)
  # A one-row kernel block.
  spec = kernels.KernelSpec("rbf", gamma=1.0)
  np.testing.assert_allclose(kernels.kernel_matrix(spec, X[:1], X[:1]),
                             [[1.0]], rtol=1e-6)
  # Zero iterations is a valid (empty) transcript.
  assert _dpwss_plan().selection_report(0)["selections"] == 0
