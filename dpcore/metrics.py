"""Classification metrics in pure JAX, agreeing with ``sklearn.metrics``.

Every function is jit- and vmap-compatible (e.g. ``jax.vmap(auc)`` over the
repeats of an experiment). Called eagerly on concrete arrays they first
validate their inputs in plain Python; under ``jit``/``vmap`` the shapes
and the label contract below are the caller's responsibility.

Binary metrics take labels in {−1, +1} with +1 the positive class
(scikit-learn's ``pos_label=1``). Undefined ratios follow scikit-learn's
default ``zero_division`` behaviour: precision, recall and F1 are 0 when
their denominator is 0, MCC is 0 when any marginal count is 0, and the ROC
AUC is NaN when ``y_true`` holds a single class.

Scores become labels by :func:`predict_labels`: +1 where the decision
value is strictly positive, −1 otherwise (so a score of exactly 0 is −1).
That is what LIBSVM does: ``svm_predict`` votes for its first label when
the decision value is ``> 0`` and orders the labels of a ±1 problem as
[+1, −1], so a decision value of exactly 0 predicts −1.

Example:

>>> import jax.numpy as jnp
>>> y = jnp.array([1, 1, -1, -1])
>>> s = jnp.array([0.9, -0.2, 0.3, -0.5])
>>> float(auc(y, s))
0.75
>>> float(accuracy(y, predict_labels(s)))
0.5
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "BinaryCounts",
    "accuracy",
    "auc",
    "binary_counts",
    "binary_report",
    "error_rate",
    "f1",
    "mcc",
    "precision",
    "predict_labels",
    "recall",
]


class BinaryCounts(NamedTuple):
  """Confusion counts of a ±1 problem (+1 positive)."""
  tp: jax.Array
  fp: jax.Array
  fn: jax.Array
  tn: jax.Array


def _concrete(*arrays) -> bool:
  return not any(isinstance(a, jax.core.Tracer) for a in arrays)


def _check_vector(a, name: str, *, n: int | None = None) -> np.ndarray:
  arr = np.asarray(a)
  if arr.ndim != 1 or arr.size == 0:
    raise ValueError(
        f"{name} must be a non-empty 1-D array, got shape {arr.shape}; use "
        f"jax.vmap for a batch of repeats.")
  if n is not None and arr.shape[0] != n:
    raise ValueError(
        f"{name} has {arr.shape[0]} entries but y_true has {n}; pass one "
        f"entry per example.")
  return arr


def _check_pm1(a, name: str, *, n: int | None = None) -> None:
  arr = _check_vector(a, name, n=n)
  outside = sorted(set(np.unique(arr).tolist()) - {-1, 1})
  if outside:
    raise ValueError(
        f"{name} must hold only -1 and +1, got {outside[:10]}; map the "
        f"positive class to +1 and the other to -1.")


def _check_scores(scores, n: int) -> None:
  arr = _check_vector(scores, "scores", n=n)
  if not np.all(np.isfinite(arr)):
    raise ValueError(
        "scores contain NaN or infinite values; check the model's "
        "decision values.")


def _float(x: jax.Array) -> jax.Array:
  return x.astype(jnp.result_type(float))


def _ratio(num: jax.Array, den: jax.Array) -> jax.Array:
  """``num / den``, or 0 where ``den == 0`` (sklearn's zero_division)."""
  num, den = _float(num), _float(den)
  return jnp.where(den > 0, num / jnp.where(den > 0, den, 1), 0.0)


def predict_labels(scores: jax.Array) -> jax.Array:
  """±1 labels from decision values: +1 iff ``score > 0`` (as LIBSVM)."""
  return jnp.where(jnp.asarray(scores) > 0, 1, -1).astype(jnp.int32)


def accuracy(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
  """Fraction of exact label matches (any number of classes)."""
  if _concrete(y_true, y_pred):
    _check_vector(y_pred, "y_pred", n=_check_vector(y_true, "y_true").size)
  return _accuracy(y_true, y_pred)


@jax.jit
def _accuracy(y_true, y_pred):
  return jnp.mean(_float(jnp.asarray(y_true) == jnp.asarray(y_pred)))


def error_rate(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
  """Fraction of mismatched labels, ``1 - accuracy``."""
  return 1.0 - accuracy(y_true, y_pred)


def binary_counts(y_true: jax.Array, y_pred: jax.Array) -> BinaryCounts:
  """True/false positives and negatives of ±1 predictions."""
  if _concrete(y_true, y_pred):
    _check_pm1(y_true, "y_true")
    _check_pm1(y_pred, "y_pred", n=np.shape(y_true)[0])
  return _binary_counts(y_true, y_pred)


@jax.jit
def _binary_counts(y_true, y_pred):
  true_pos = jnp.asarray(y_true) == 1
  pred_pos = jnp.asarray(y_pred) == 1

  def count(mask):
    return jnp.sum(mask, dtype=jnp.int32)

  return BinaryCounts(tp=count(true_pos & pred_pos),
                      fp=count(~true_pos & pred_pos),
                      fn=count(true_pos & ~pred_pos),
                      tn=count(~true_pos & ~pred_pos))


def precision(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
  """``tp / (tp + fp)``; 0 when nothing is predicted positive."""
  c = binary_counts(y_true, y_pred)
  return _ratio(c.tp, c.tp + c.fp)


def recall(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
  """``tp / (tp + fn)``; 0 when there are no positives."""
  c = binary_counts(y_true, y_pred)
  return _ratio(c.tp, c.tp + c.fn)


def f1(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
  """Harmonic mean of precision and recall, ``2tp / (2tp + fp + fn)``."""
  c = binary_counts(y_true, y_pred)
  return _ratio(2 * c.tp, 2 * c.tp + c.fp + c.fn)


def _mcc(c: BinaryCounts) -> jax.Array:
  tp, fp, fn, tn = (_float(v) for v in c)
  # Two square roots instead of one of a fourth-degree product: no
  # float32 overflow for any realistic n.
  den = jnp.sqrt((tp + fp) * (tp + fn)) * jnp.sqrt((tn + fp) * (tn + fn))
  return _ratio(tp * tn - fp * fn, den)


def mcc(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
  """Matthews correlation coefficient; 0 when a marginal count is 0."""
  return _mcc(binary_counts(y_true, y_pred))


def auc(y_true: jax.Array, scores: jax.Array) -> jax.Array:
  """Area under the ROC curve, ties counted one half (as sklearn).

  Computed exactly as the Mann-Whitney statistic: over all (positive,
  negative) pairs, the fraction where the positive scores higher, a tie
  counting 1/2. ``O(n log n)``: sort once, count negatives below and at
  each score with a cumulative sum.

  Returns:
    The AUC in [0, 1], or NaN when ``y_true`` has only one class.
  """
  if _concrete(y_true, scores):
    _check_pm1(y_true, "y_true")
    _check_scores(scores, np.shape(y_true)[0])
  return _auc(y_true, scores)


@jax.jit
def _auc(y_true, scores):
  y_true, scores = jnp.asarray(y_true), jnp.asarray(scores)
  positive = y_true == 1
  order = jnp.argsort(scores)
  sorted_scores = scores[order]
  # neg_upto[k] = number of negatives among the k lowest scores.
  neg_upto = jnp.concatenate([
      jnp.zeros(1, jnp.int32),
      jnp.cumsum(~positive[order], dtype=jnp.int32)])
  below = neg_upto[jnp.searchsorted(sorted_scores, scores, side="left")]
  at_or_below = neg_upto[
      jnp.searchsorted(sorted_scores, scores, side="right")]
  # Twice each positive's wins: 2·below + ties, an exact integer.
  twice_wins = _float(below + at_or_below)
  n_pos = jnp.sum(positive, dtype=jnp.int32)
  n_neg = positive.shape[0] - n_pos
  pairs = _float(n_pos) * _float(n_neg)
  u = 0.5 * jnp.sum(jnp.where(positive, twice_wins, 0.0))
  return jnp.where(pairs > 0, u / jnp.where(pairs > 0, pairs, 1), jnp.nan)


def binary_report(y_true: jax.Array, scores: jax.Array) -> dict:
  """All binary metrics of decision values ``scores`` against ±1 labels.

  Predictions are :func:`predict_labels` (``+1`` iff ``score > 0``, as
  LIBSVM). The AUC uses the raw scores.

  Returns:
    dict with ``accuracy``, ``error_rate``, ``precision``, ``recall``,
    ``f1``, ``mcc``, ``auc`` (float arrays) and the counts ``tp``, ``fp``,
    ``fn``, ``tn`` (int32), each a scalar (or batched under vmap).
  """
  if _concrete(y_true, scores):
    _check_pm1(y_true, "y_true")
    _check_scores(scores, np.shape(y_true)[0])
  return _binary_report(y_true, scores)


@jax.jit
def _binary_report(y_true, scores):
  y_true = jnp.asarray(y_true)
  c = _binary_counts(y_true, predict_labels(scores))
  acc = _float(c.tp + c.tn) / y_true.shape[0]
  return {
      "accuracy": acc,
      "error_rate": 1.0 - acc,
      "precision": _ratio(c.tp, c.tp + c.fp),
      "recall": _ratio(c.tp, c.tp + c.fn),
      "f1": _ratio(2 * c.tp, 2 * c.tp + c.fp + c.fn),
      "mcc": _mcc(c),
      "auc": _auc(y_true, scores),
      "tp": c.tp, "fp": c.fp, "fn": c.fn, "tn": c.tn,
  }
