"""Input validation shared by every public entry point.

Checks run in plain Python *before* tracing, so a bad argument fails with a
message that names the argument and says how to fix it, instead of producing
a silently wrong result inside ``jit``. Each helper returns its (converted)
argument so it can be used inline::

  epsilon = check_epsilon(epsilon)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import jax
import numpy as np

__all__ = [
    "INT32_MAX",
    "check_count",
    "check_count_product",
    "check_delta",
    "check_epsilon",
    "check_in_range",
    "check_key",
    "check_labels",
    "check_matrix",
    "check_non_negative",
    "check_positive",
    "check_positive_int",
    "check_row_norms",
    "check_rows",
    "check_scale",
    "check_shape",
    "check_vector",
    "is_concrete",
]


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


def check_non_negative(value, name: str) -> float:
  """Requires a finite number ≥ 0 (e.g. a noise multiplier, where 0 is
  the documented noise-free test setting)."""
  if not _is_number(value) or not math.isfinite(float(value)) or value < 0:
    raise ValueError(
        f"{name} must be a finite number ≥ 0, got {value!r}.")
  return float(value)


def check_positive_int(value, name: str) -> int:
  """Requires an integer ≥ 1."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name} must be a positive integer, got {value!r}.")
  if value < 1:
    raise ValueError(f"{name} must be ≥ 1, got {value!r}.")
  return int(value)


INT32_MAX = 2**31 - 1
"""The largest count a program takes: steps, iterations, trials, repeats
and row indices run as int32 (``lax.scan`` over ``arange(steps)``, the
solvers' iteration counters, ``fold_in`` step numbers, gathered row
indices), so a count above it overflows inside the program."""


def check_count(value, name: str, *, derived: str | None = None,
                fix: str | None = None) -> int:
  """Requires an integer count in [1, :data:`INT32_MAX`]: the one check of
  every count a plan takes (steps, iterations, trials, repeats, rows).

  Args:
    value: the count.
    name: the setting's name, as its user spells it.
    derived: how the count was derived, when it was not given directly
      (e.g. ``"epochs 1e+09 / sampling_rate 0.05"``); said in the message.
    fix: what to change, said in the message (default: lower ``name``).

  Returns:
    ``value`` as an int.

  Raises:
    ValueError: one line naming the setting, its value, the int32 limit
      and the fix.
  """
  value = check_positive_int(value, name)
  if value > INT32_MAX:
    how = f" ({derived})" if derived else ""
    raise ValueError(
        f"{name} = {value:,}{how} does not fit the int32 counter the "
        f"programs run it with (≤ {INT32_MAX:,}); "
        f"{fix or f'lower {name}'}.")
  return value


def check_count_product(factors: dict, name: str, *,
                        fix: str | None = None) -> int:
  """Requires each count of ``factors`` ({name: count}) and their product
  (e.g. participants × rows, the slots a program indexes) to pass
  :func:`check_count`; returns the product."""
  product = 1
  for factor, value in factors.items():
    product *= check_count(value, factor)
  return check_count(product, name, derived=" × ".join(
      f"{factor} {int(value):,}" for factor, value in factors.items()),
                     fix=fix)


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
                 binary_pm1: bool = False, num_examples: int | None = None
                 ) -> np.ndarray:
  """Validates a label vector.

  Args:
    y: labels, 1-D.
    name: argument name for messages.
    classes: if given, every label must be one of these.
    binary_pm1: labels must be exactly the two values −1 and +1 (both present).
    num_examples: if given, ``len(y)`` must equal it.

  Returns:
    ``y`` as a NumPy array.
  """
  arr = np.asarray(y)
  if arr.ndim != 1:
    raise ValueError(f"{name} must be 1-D, got shape {arr.shape}.")
  if num_examples is not None and arr.shape[0] != num_examples:
    raise ValueError(
        f"{name} has {arr.shape[0]} labels but the data has "
        f"{num_examples} rows.")
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


def is_concrete(value) -> bool:
  """False for a JAX tracer (a value inside ``jit``/``vmap``), else True.

  Value checks (finite, > 0) run only on concrete values; inside a traced
  function only shapes and dtypes can be checked.
  """
  return not any(isinstance(leaf, jax.core.Tracer)
                 for leaf in jax.tree.leaves(value))


@functools.cache
def _raw_key_width() -> int:
  """Words of raw key data of JAX's default PRNG (2 for Threefry)."""
  return int(jax.eval_shape(
      lambda: jax.random.key_data(jax.random.key(0))).shape[-1])


def check_key(key, name: str = "key", *, batch: bool = False):
  """Requires a JAX PRNG key: one key, or a 1-D array of keys (``batch``).

  Accepts typed keys (``jax.random.key``) and raw uint32 key data
  (``jax.random.PRNGKey``) of the default implementation; checks the type,
  dtype and shape only, so it also works on traced keys. An integer seed is
  refused: a key must be made (and split) explicitly.
  """
  want = "a 1-D array of keys, e.g. jax.random.split(key, n)" if batch else (
      "one key, e.g. jax.random.key(0)")
  dtype = getattr(key, "dtype", None)
  shape = getattr(key, "shape", None)
  if dtype is None or shape is None:
    raise TypeError(
        f"{name} must be a JAX PRNG key ({want}), got {type(key).__name__} "
        f"{key!r}; keys are never optional or plain integers: pass "
        f"{name}=jax.random.key(seed).")
  if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
    key_shape = tuple(shape)
  elif np.dtype(dtype) == np.uint32 and len(shape) >= 1 and (
      shape[-1] == _raw_key_width()):
    key_shape = tuple(shape[:-1])
  else:
    raise TypeError(
        f"{name} must be a JAX PRNG key ({want}), got an array of dtype "
        f"{dtype} and shape {tuple(shape)}; pass {name}=jax.random.key(seed) "
        f"(raw uint32 key data must have shape (..., {_raw_key_width()})).")
  if (len(key_shape) != 1) if batch else key_shape:
    raise TypeError(
        f"{name} must be {want}, got keys of shape {key_shape}.")
  return key


def check_shape(shape, name: str = "shape") -> tuple[int, ...]:
  """Requires a sequence of integers ≥ 0 (an array shape)."""
  if isinstance(shape, (str, bytes)) or not isinstance(
      shape, (tuple, list)):
    raise TypeError(
        f"{name} must be a tuple of integers, got {shape!r}; write e.g. "
        f"{name}=(3,) for a vector.")
  for size in shape:
    if isinstance(size, (bool, np.bool_)) or not isinstance(
        size, (int, np.integer)) or size < 0:
      raise ValueError(
          f"{name} must hold integers ≥ 0, got {tuple(shape)!r}.")
  return tuple(int(size) for size in shape)


def check_scale(value, name: str, *, allow_zero: bool = True):
  """Requires a concrete scale to be finite and ≥ 0 (> 0 unless
  ``allow_zero``); a traced value passes unchecked. Returns ``value``.

  Arrays (a scale per entry) are checked entry by entry.
  """
  if not is_concrete(value):
    return value
  try:
    arr = np.asarray(value, dtype=np.float64)
  except (TypeError, ValueError):
    raise ValueError(
        f"{name} must be a number, got {value!r}.") from None
  bound = "≥ 0" if allow_zero else "> 0"
  bad = ~np.isfinite(arr) | ((arr < 0) if allow_zero else (arr <= 0))
  if isinstance(value, (bool, np.bool_)) or np.any(bad):
    raise ValueError(
        f"{name} must be a finite number {bound}, got {value!r}.")
  return value


def check_rows(x, name: str = "x") -> None:
  """Kernel-side data check: a 2-D array with ≥ 1 row and ≥ 1 column
  (shapes are static, so this holds under ``jit`` too); a concrete array is
  also checked to be real and finite (:func:`check_matrix`)."""
  shape = np.shape(x) if is_concrete(x) else tuple(x.shape)
  if len(shape) != 2 or 0 in shape:
    raise ValueError(
        f"{name} must be a non-empty 2-D array (rows are examples, "
        f"columns features), got shape {shape}.")
  if is_concrete(x):
    check_matrix(x, name)


def check_vector(v, name: str, length: int) -> None:
  """Requires shape ``(length,)`` (static, so also under ``jit``)."""
  shape = tuple(np.shape(v)) if is_concrete(v) else tuple(v.shape)
  if shape != (length,):
    raise ValueError(
        f"{name} must have shape ({length},), one entry per row of the "
        f"data, got shape {shape}.")
