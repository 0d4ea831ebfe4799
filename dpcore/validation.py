"""Input validation shared by every public entry point.

Checks run in plain Python *before* tracing, so a bad argument fails with a
message that names the argument and says how to fix it, instead of producing
a silently wrong result inside ``jit``. Each helper returns its (converted)
argument so it can be used inline::

  epsilon = check_epsilon(epsilon)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _is_number(value) -> bool:
  """A real number: Python, NumPy or a concrete 0-d (JAX) array, not bool."""
  if isinstance(value, (bool, np.bool_)):
    return False
  if isinstance(value, (int, float, np.integer, np.floating)):
    return True
  dtype = getattr(value, "dtype", None)
  if getattr(value, "shape", None) != () or dtype is None:
    return False
  if not (np.issubdtype(dtype, np.integer)
          or np.issubdtype(dtype, np.floating)):
    return False
  try:
    float(value)
  except Exception:  # e.g. a tracer inside jit: not a concrete number
    return False
  return True


def check_epsilon(epsilon, name: str = "epsilon") -> float:
  """Requires a finite ε > 0."""
  if not _is_number(epsilon) or not math.isfinite(float(epsilon)):
    raise ValueError(
        f"{name} must be a finite positive number, got {epsilon!r}; pass "
        f"e.g. {name}=1.0.")
  if epsilon <= 0:
    raise ValueError(
        f"{name} must be > 0 (ε = 0 means no information may be released), "
        f"got {epsilon!r}; pass a positive privacy parameter.")
  return float(epsilon)


def check_delta(delta, name: str = "delta") -> float:
  """Requires 0 < δ < 1."""
  if not _is_number(delta) or not 0.0 < float(delta) < 1.0:
    raise ValueError(
        f"{name} must lie strictly between 0 and 1, got {delta!r}; a usual "
        f"choice is well below 1/n, e.g. {name}=1e-5.")
  return float(delta)


def check_positive(value, name: str, *, allow_inf: bool = False) -> float:
  """Requires a number > 0 (finite unless ``allow_inf``)."""
  if not _is_number(value) or math.isnan(float(value)):
    raise ValueError(f"{name} must be a positive number, got {value!r}.")
  if not allow_inf and not math.isfinite(float(value)):
    raise ValueError(f"{name} must be finite, got {value!r}.")
  if value <= 0:
    raise ValueError(f"{name} must be > 0, got {value!r}.")
  return float(value)


def check_in_range(value, name: str, low: float, high: float, *,
                   low_inclusive: bool = False,
                   high_inclusive: bool = False) -> float:
  """Requires ``low < value < high`` (ends included where asked)."""
  ok = _is_number(value) and math.isfinite(float(value))
  if ok:
    ok = (value >= low if low_inclusive else value > low) and (
        value <= high if high_inclusive else value < high)
  if not ok:
    left = "[" if low_inclusive else "("
    right = "]" if high_inclusive else ")"
    raise ValueError(
        f"{name} must lie in {left}{low}, {high}{right}, got {value!r}.")
  return float(value)


def check_positive_int(value, name: str) -> int:
  """Requires an integer ≥ 1."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name} must be a positive integer, got {value!r}.")
  if value < 1:
    raise ValueError(f"{name} must be ≥ 1, got {value!r}.")
  return int(value)


def check_matrix(x, name: str = "x", *, ndim: int = 2,
                 min_rows: int = 1) -> np.ndarray:
  """Requires a finite array of the given rank with at least ``min_rows``.

  Works on NumPy and (concrete) JAX arrays; returns a NumPy view.
  """
  arr = np.asarray(x)
  if arr.ndim != ndim:
    raise ValueError(
        f"{name} must be a {ndim}-D array, got shape {arr.shape}; reshape "
        f"it (rows are examples, columns features).")
  if arr.shape[0] < min_rows:
    raise ValueError(
        f"{name} has {arr.shape[0]} rows; at least {min_rows} needed "
        f"(empty data cannot be trained on).")
  if ndim >= 2 and 0 in arr.shape[1:]:
    raise ValueError(
        f"{name} has shape {arr.shape}: no features; at least one column "
        f"is needed.")
  if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(
      arr.dtype, np.complexfloating):
    raise ValueError(
        f"{name} must be real-valued, got dtype {arr.dtype}; convert it "
        f"with {name}.astype(np.float32).")
  if not np.all(np.isfinite(arr)):
    bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
    raise ValueError(
        f"{name} contains {bad} NaN or infinite values; impute or drop "
        f"those rows before training.")
  return arr


def check_row_norms(x, name: str = "x", *, max_norm: float = 1.0,
                    atol: float = 1e-6) -> np.ndarray:
  """Requires every row of ``x`` to have L2 norm ≤ ``max_norm``.

  Sensitivity bounds of several mechanisms (DP-PCA, objective perturbation,
  output perturbation) assume ‖x‖ ≤ 1; this enforces it instead of hoping.
  """
  arr = check_matrix(x, name)
  norms = np.linalg.norm(arr.astype(np.float64), axis=1)
  worst = float(norms.max()) if norms.size else 0.0
  if worst > max_norm * (1 + atol):
    raise ValueError(
        f"{name} has a row of L2 norm {worst:.6g} > {max_norm}; the "
        f"mechanism's sensitivity assumes ‖x‖ ≤ {max_norm}. Apply "
        f"dpcore.clipping.normalize_rows or clip_rows first (per-row, "
        f"data-independent), never a data-derived scaling.")
  return arr


def check_labels(y, name: str = "y", *, classes: Sequence | None = None,
                 binary_pm1: bool = False, n_rows: int | None = None
                 ) -> np.ndarray:
  """Validates a label vector.

  Args:
    y: labels, 1-D.
    name: argument name for messages.
    classes: if given, every label must be one of these.
    binary_pm1: labels must be exactly the two values −1 and +1 (both present).
    n_rows: if given, ``len(y)`` must equal it.

  Returns:
    ``y`` as a NumPy array.
  """
  arr = np.asarray(y)
  if arr.ndim != 1:
    raise ValueError(f"{name} must be 1-D, got shape {arr.shape}.")
  if n_rows is not None and arr.shape[0] != n_rows:
    raise ValueError(
        f"{name} has {arr.shape[0]} labels but the data has {n_rows} rows.")
  if arr.size == 0:
    raise ValueError(f"{name} is empty; at least one labelled row needed.")
  if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
    raise ValueError(f"{name} contains NaN or infinite labels.")
  if binary_pm1:
    values = set(np.unique(arr).tolist())
    if not values <= {-1, 1}:
      raise ValueError(
          f"{name} must contain only -1 and +1 for a binary SVM, got values "
          f"{sorted(values)[:10]}; map your two classes to ±1.")
    if len(values) != 2:
      raise ValueError(
          f"{name} must contain both classes -1 and +1, got only "
          f"{sorted(values)}.")
  if classes is not None:
    allowed = set(np.asarray(classes).tolist())
    outside = sorted(set(np.unique(arr).tolist()) - allowed)
    if outside:
      raise ValueError(
          f"{name} has labels {outside[:10]} outside the class set "
          f"{sorted(allowed)[:20]}; relabel or extend the class set.")
  return arr
