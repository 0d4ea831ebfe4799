"""Metrics checked against sklearn.metrics (and LIBSVM for the sign rule)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from libsvm import svmutil
from sklearn import metrics as skm

from dpcore import metrics

# float32 ratios of integer counts: a few roundings of 2**-24 ≈ 6e-8 each.
ATOL = 1e-6

# sklearn warns (and returns 0 or NaN) where a metric is undefined; those
# values are what we compare against.
pytestmark = pytest.mark.filterwarnings(
    "ignore::sklearn.exceptions.UndefinedMetricWarning",
    "ignore:A single label was found")


def _sklearn_report(y, s):
  y_pred = np.where(s > 0, 1, -1)
  return {
      "accuracy": skm.accuracy_score(y, y_pred),
      "error_rate": 1.0 - skm.accuracy_score(y, y_pred),
      "precision": skm.precision_score(y, y_pred),
      "recall": skm.recall_score(y, y_pred),
      "f1": skm.f1_score(y, y_pred),
      "mcc": skm.matthews_corrcoef(y, y_pred),
      "auc": skm.roc_auc_score(y, s) if len(set(y)) == 2 else np.nan,
  }


def _assert_report(ours, y, s, atol=ATOL):
  ref = _sklearn_report(y, s)
  for name, value in ref.items():
    np.testing.assert_allclose(float(ours[name]), value, rtol=0, atol=atol,
                               err_msg=name)
  cm = skm.confusion_matrix(y, np.where(s > 0, 1, -1), labels=[1, -1])
  assert [int(ours[k]) for k in ("tp", "fn", "fp", "tn")] == cm.ravel(
  ).tolist()


def _problem(seed, n, p_pos=0.5, levels=None):
  rng = np.random.default_rng(seed)
  y = np.where(rng.random(n) < p_pos, 1, -1)
  s = rng.normal(size=n) + 0.8 * y
  if levels is not None:  # coarse scores: many ties.
    s = np.round(s * levels) / levels
  return y, s.astype(np.float32)


@pytest.mark.parametrize("seed,n,p_pos,levels", [
    (0, 200, 0.5, None),
    (1, 57, 0.1, None),
    (2, 500, 0.7, 2),   # heavy ties, including ties at score 0.
    (3, 31, 0.5, 1),
])
def test_binary_report_matches_sklearn(seed, n, p_pos, levels):
  y, s = _problem(seed, n, p_pos, levels)
  _assert_report(metrics.binary_report(y, s), y, s)
  _assert_report(jax.jit(metrics.binary_report)(y, s), y, s)


def test_single_metrics_match_sklearn():
  y, s = _problem(4, 300, 0.4)
  yp = np.where(s > 0, 1, -1)
  for ours, ref in [(metrics.precision, skm.precision_score),
                    (metrics.recall, skm.recall_score),
                    (metrics.f1, skm.f1_score),
                    (metrics.mcc, skm.matthews_corrcoef),
                    (metrics.accuracy, skm.accuracy_score)]:
    np.testing.assert_allclose(float(ours(y, yp)), ref(y, yp), atol=ATOL)
  np.testing.assert_allclose(float(metrics.auc(y, s)),
                             skm.roc_auc_score(y, s), atol=ATOL)


def test_auc_counts_ties_as_half():
  y = np.array([1, 1, -1, -1, 1, -1])
  s = np.array([2.0, 1.0, 1.0, 0.0, 1.0, 1.0], np.float32)
  ours = float(metrics.auc(y, s))
  assert ours == pytest.approx(skm.roc_auc_score(y, s), abs=1e-7)
  # The test can fail: ignoring ties (or counting them as wins) is off.
  pos, neg = s[y == 1], s[y == -1]
  strict = np.mean(pos[:, None] > neg[None, :])
  weak = np.mean(pos[:, None] >= neg[None, :])
  assert abs(ours - strict) > 0.1 and abs(ours - weak) > 0.1


def test_auc_large_n_float32():
  y, s = _problem(5, 100_000, 0.3, levels=50)
  # Summation of 1e5 float32 terms: relative error well under 1e-5.
  np.testing.assert_allclose(float(metrics.auc(y, s)),
                             skm.roc_auc_score(y, s), atol=1e-5)


def test_x64_is_exact():
  y, s = _problem(6, 400, 0.5, levels=3)
  with jax.enable_x64(True):
    report = metrics.binary_report(y, s.astype(np.float64))
    assert report["auc"].dtype == jnp.float64
    _assert_report(report, y, s.astype(np.float64), atol=1e-12)


@pytest.mark.parametrize("y,s", [
    ([1, -1, 1, -1], [-1.0, -2.0, -0.5, -3.0]),  # all predicted -1
    ([1, -1, 1, -1], [1.0, 2.0, 0.5, 3.0]),      # all predicted +1
    ([1, 1, 1, 1], [1.0, -2.0, 0.5, 3.0]),       # one class: AUC NaN
    ([-1, -1, -1], [-1.0, -2.0, 0.0]),           # no positives at all
    ([1, -1, 1, -1], [1.0, -2.0, 0.5, -3.0]),    # perfect
    ([1, -1, -1, 1], [0.0, 0.0, 0.0, 0.0]),      # all scores 0 -> -1
])
def test_degenerate_cases_follow_sklearn_zero_division(y, s):
  y, s = np.array(y), np.array(s, np.float32)
  ours = metrics.binary_report(y, s)
  _assert_report(ours, y, s)
  if len(set(np.where(s > 0, 1, -1))) == 1:
    assert float(ours["mcc"]) == 0.0


def test_score_zero_predicts_minus_one_like_libsvm():
  # Two symmetric points: LIBSVM's decision value at x = 0 is exactly 0.
  for y in ([1, -1], [-1, 1]):
    model = svmutil.svm_train(y, [{1: float(v)} for v in y], "-t 0 -q")
    labels, _, dec = svmutil.svm_predict(
        [1, 1, 1], [{1: 0.0}, {1: 0.5}, {1: -0.5}], model, "-q")
    dec = np.array(dec)[:, 0] * (1 if model.get_labels()[0] == 1 else -1)
    assert dec[0] == 0.0
    np.testing.assert_array_equal(metrics.predict_labels(dec), labels)
  assert int(metrics.predict_labels(jnp.float32(0.0))) == -1
  assert int(metrics.predict_labels(jnp.float32(1e-30))) == 1


def test_vmap_over_repeats():
  problems = [_problem(10 + r, 120, 0.5, levels=4) for r in range(5)]
  ys = np.stack([p[0] for p in problems])
  ss = np.stack([p[1] for p in problems])
  batched = jax.jit(jax.vmap(metrics.binary_report))(ys, ss)
  assert batched["auc"].shape == (5,)
  for r in range(5):
    _assert_report({k: v[r] for k, v in batched.items()}, ys[r], ss[r])


def test_multiclass_accuracy_and_error_rate():
  rng = np.random.default_rng(7)
  y = rng.integers(0, 10, 1000)
  yp = np.where(rng.random(1000) < 0.6, y, rng.integers(0, 10, 1000))
  acc = skm.accuracy_score(y, yp)
  assert float(metrics.accuracy(y, yp)) == pytest.approx(acc, abs=ATOL)
  assert float(metrics.error_rate(y, yp)) == pytest.approx(1 - acc,
                                                            abs=ATOL)


@pytest.mark.parametrize("fn,args,match", [
    (metrics.precision, ([0, 1], [1, 1]), "y_true must hold only -1"),
    (metrics.recall, ([1, -1], [1, 2]), "y_pred must hold only -1"),
    (metrics.accuracy, ([1, 2, 3], [1, 2]), "y_pred has 2 entries"),
    (metrics.auc, ([1, -1], [0.5, np.nan]), "NaN"),
    (metrics.binary_report, ([[1, -1]], [[0.5, 0.1]]), "vmap"),
])
def test_rejects_bad_inputs(fn, args, match):
  with pytest.raises(ValueError, match=match):
    fn(*args)
