"""Per-example clipping of gradient pytrees and per-row bounding of features.

Per-row operations are data-independent: each row is rescaled by its own
norm only, so one row's change never affects another's and the bound
‖x‖ ≤ C holds by construction (no data statistic is consulted).

>>> import jax.numpy as jnp
>>> x = jnp.array([[3.0, 4.0], [0.3, 0.4]])
>>> [round(n, 4) for n in row_norms(clip_rows(x, max_norm=1.0)).tolist()]
[1.0, 0.5]
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import validation

__all__ = [
    "clip_rows",
    "clip_to_box",
    "clip_to_norm",
    "clip_weights",
    "clipped_sum",
    "global_norm",
    "half_exponent",
    "normalize_rows",
    "row_norms",
    "scale_to_box",
    "unit_rows",
]


def half_exponent(peak: jax.Array) -> jax.Array:
  """The integer k with 2^(2k) near ``peak`` (0 where ``peak`` is zero,
  subnormal or not finite): ``x · 2^(-2k)`` peaks in [0.5, 2)."""
  usable = jnp.isfinite(peak) & (peak >= jnp.finfo(peak.dtype).tiny)
  _, exponent = jnp.frexp(jnp.where(usable, peak, 1.0))
  return exponent // 2


def _power_of_two_unit(peak: jax.Array) -> jax.Array:
  """2^-k with 2^(2k) ≈ ``peak`` (:func:`half_exponent`): multiplying
  twice by it is exact and maps the largest magnitude near 1 without over-
  or underflow (a single factor 1/peak would be subnormal, i.e. flushed to
  zero on CPU, for peak > 2^126).
  """
  return jnp.ldexp(jnp.ones((), peak.dtype), -half_exponent(peak))


def global_norm(tree) -> jax.Array:
  """L2 norm of all leaves of a pytree together, without overflow.

  The leaves are scaled by an exact power of two before squaring, so a huge
  but finite gradient (e.g. 1e30 in float32, whose square overflows) gets
  its true norm instead of ``inf``; a norm beyond the dtype's range is
  ``inf``. Non-finite leaves give a non-finite norm.
  """
  leaves = [_as_float(g) for g in jax.tree.leaves(tree)]
  if not leaves:
    return jnp.zeros(())
  dtype = jnp.result_type(*leaves)  # low-precision leaves are upcast
  peak = functools.reduce(jnp.maximum, [
      jnp.max(jnp.abs(g), initial=0.0).astype(dtype) for g in leaves])
  unit = _power_of_two_unit(peak)
  squares = [jnp.sum(jnp.square(g.astype(dtype) * unit * unit))
             for g in leaves]
  return jnp.sqrt(functools.reduce(jnp.add, squares)) / unit / unit


def clip_to_norm(tree, clip_norm):
  """Rescales one example's pytree to L2 norm ≤ ``clip_norm`` (jointly).

  Non-finite gradients are replaced by zeros (they carry no usable signal
  and would otherwise poison the sum), which keeps the bound.

  ``clip_norm`` C > 0 may be traced; a concrete one is checked.
  """
  validation.check_scale(clip_norm, "clip_norm", allow_zero=False)
  norm = global_norm(tree)
  finite = jnp.isfinite(norm)
  scale = jnp.where(finite, jnp.minimum(1.0, clip_norm / jnp.maximum(
      norm, 1e-30)), 0.0)
  return jax.tree.map(
      lambda g: jnp.where(finite, g * scale.astype(g.dtype), 0.0), tree)


def clip_weights(weights) -> jax.Array:
  """Per-example weights (masks) bounded to [0, 1]; NaN becomes 0.

  A mask is documented as 0/1, but inside jit nothing can check it; a
  weight of 5 would count its row five times and multiply the row's
  contribution (and so the sensitivity) by five. Like :func:`clip_rows`
  this is per example and data-independent, and a no-op on valid masks.
  Integer or boolean masks become floating point.
  """
  weights = _as_float(weights)
  return jnp.clip(jnp.where(jnp.isnan(weights), 0.0, weights), 0.0, 1.0)


def clipped_sum(per_example_tree, clip_norm, *, weights=None):
  """Clip every example's gradient to ``clip_norm``, then sum over examples.

  Args:
    per_example_tree: pytree whose leaves have a leading example axis.
    clip_norm: C > 0.
    weights: optional 0/1 (or [0, 1]) per-example mask, e.g. for Poisson
      batches padded to a fixed size. Values are bounded to [0, 1] first
      (:func:`clip_weights`: NaN → 0), so no example weighs more than one.

  Returns:
    ``(summed_tree, norms)``: the clipped sum and the pre-clipping norms.

  Privacy: adding or removing one example changes the sum by at most C in
  L2 norm (sensitivity C under add/remove-one; 2C under replace-one),
  whatever the weights, since each is bounded to [0, 1] here.

  Raises:
    ValueError: a concrete ``clip_norm`` that is not finite and > 0, or
      ``weights`` whose shape is not (examples,), or leaves without a
      common leading example axis (shapes are checked even when traced).
  """
  validation.check_scale(clip_norm, "clip_norm", allow_zero=False)
  leading = {jnp.shape(g)[0] if jnp.ndim(g) else None
             for g in jax.tree.leaves(per_example_tree)}
  if None in leading or len(leading) > 1:
    raise ValueError(
        f"every leaf of per_example_tree needs the same leading example "
        f"axis, got leading sizes {sorted(map(str, leading))}.")
  if weights is not None and leading and jnp.shape(weights) != (
      next(iter(leading)),):
    raise ValueError(
        f"weights must have shape ({next(iter(leading))},), one per "
        f"example, got shape {jnp.shape(weights)}.")
  norms = jax.vmap(global_norm)(per_example_tree)
  clipped = jax.vmap(clip_to_norm, in_axes=(0, None))(per_example_tree,
                                                      clip_norm)
  if weights is not None:
    weights = clip_weights(weights)
    clipped = jax.tree.map(
        lambda g: g * weights.reshape((-1,) + (1,) * (g.ndim - 1)).astype(
            g.dtype), clipped)
  return jax.tree.map(lambda g: jnp.sum(g, axis=0), clipped), norms


def _as_float(x) -> jax.Array:
  """``x`` as a JAX array; integer/bool data becomes floating point."""
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  return x


def row_norms(x: jax.Array) -> jax.Array:
  """L2 norm of every row (last axis), without overflow for huge rows."""
  return _row_norms(_as_float(x))


@jax.jit
def _row_norms(x: jax.Array) -> jax.Array:
  # One compiled program: called eagerly (data preparation), the dozen
  # small operations would otherwise each be compiled on their own.
  peak = jnp.max(jnp.abs(x), axis=-1, initial=0.0)
  unit = _power_of_two_unit(peak)[..., None]
  return jnp.linalg.norm(x * unit * unit, axis=-1) / unit[..., 0] / unit[
      ..., 0]


def normalize_rows(x: jax.Array, *, eps: float = 1e-12) -> jax.Array:
  """Scales every non-zero row to unit L2 norm (zero rows stay zero).

  Rows with a NaN or infinite entry become zero, so ‖row‖ ≤ 1 holds for
  every output row whatever the input.
  """
  validation.check_scale(eps, "eps")
  return _normalize_rows(_as_float(x), eps)


@jax.jit
def _normalize_rows(x: jax.Array, eps) -> jax.Array:
  norms = _row_norms(x)[..., None]
  keep = jnp.isfinite(norms) & (norms > eps)
  return jnp.where(keep, x / jnp.where(keep, norms, 1.0), 0.0)


def clip_rows(x: jax.Array, *, max_norm=1.0) -> jax.Array:
  """Scales rows of norm > ``max_norm`` down to ``max_norm``; others kept.

  Rows with a NaN or infinite entry become zero (the bound still holds).
  ``max_norm`` > 0 may be traced; a concrete one is checked.
  """
  validation.check_scale(max_norm, "max_norm", allow_zero=False)
  return _clip_rows(_as_float(x), max_norm)


@jax.jit
def _clip_rows(x: jax.Array, max_norm) -> jax.Array:
  norms = _row_norms(x)[..., None]
  finite = jnp.isfinite(norms)
  scale = jnp.minimum(1.0, max_norm / jnp.where(
      finite, jnp.maximum(norms, 1e-30), 1.0))
  return jnp.where(finite, x * scale.astype(x.dtype), 0.0)


def clip_to_box(x: jax.Array, *, low=-1.0, high=1.0) -> jax.Array:
  """Clips every coordinate into [low, high] (a per-row, public bound).

  NaN entries become the box centre (low + high)/2, so the output lies in
  the box whatever the input. Concrete bounds must be finite with
  ``low < high`` (traced bounds are the caller's to check).
  """
  if validation.is_concrete((low, high)):
    lo = np.asarray(low, np.float64)
    hi = np.asarray(high, np.float64)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))
            and np.all(lo < hi)):
      raise ValueError(
          f"clip_to_box needs finite low < high, got low={low!r}, "
          f"high={high!r}.")
  return jnp.clip(jnp.where(jnp.isnan(x), 0.5 * (low + high), x), low, high)


# -- public-bounds preprocessing of feature rows -------------------------------


def _bounds_pair(bounds, d: int, name: str = "bounds"):
  """``(low, high)`` as NumPy float64 vectors of length ``d``, checked.

  Host-side (plain NumPy), so a malformed pair is refused before tracing.
  """
  if bounds is None:
    raise ValueError(
        f"{name} is None: public feature bounds are needed. Taking the "
        f"minimum and maximum of the data is itself a query on the private "
        f"data and no guarantee covers it; pass bounds known without "
        f"looking at the data, e.g. (0, 255) for pixels.")
  try:
    low, high = bounds
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be a pair (low, high) of numbers or "
                     f"length-{d} arrays, got {bounds!r}.") from None
  try:
    low = np.broadcast_to(np.asarray(low, np.float64), (d,))
    high = np.broadcast_to(np.asarray(high, np.float64), (d,))
  except ValueError:
    raise ValueError(f"{name} arrays must be scalars or have length {d} "
                     f"(the number of features), got {bounds!r}.") from None
  if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))
          and np.all(low < high)):
    raise ValueError(f"{name} needs finite low < high for every feature, "
                     f"got {bounds!r}.")
  return low, high


def _rows(x) -> jax.Array:
  x = _as_float(x)
  if x.ndim != 2:
    raise ValueError(f"x must be 2-D (rows are examples), got shape "
                     f"{x.shape}.")
  return x


def scale_to_box(x, bounds) -> jax.Array:
  """Maps public bounds ``(low, high)`` affinely onto [−1, 1], then clips.

  Args:
    x: ``(n, d)`` features.
    bounds: public ``(low, high)``, scalars or per-feature arrays, known
      without looking at the data (e.g. ``(0, 255)`` for pixels).

  Returns:
    ``(n, d)`` in [−1, 1], in ``x``'s floating dtype (float64 stays float64
    where x64 is enabled). Values outside the bounds are clipped to the box
    and NaN entries become 0 (:func:`clip_to_box`), so every output lies in
    the box whatever the input.

  Raises:
    ValueError: ``bounds`` is None or malformed. Bounds computed from the
      data (its min and max) are a query on the private data and would void
      the guarantee; this function never computes them.

  Privacy: per-coordinate and data-independent: one row's change never
  affects another row, and ‖x_i‖_∞ ≤ 1 holds by construction.
  """
  x = _rows(x)
  low, high = _bounds_pair(bounds, x.shape[1])
  low = jnp.asarray(low, x.dtype)
  high = jnp.asarray(high, x.dtype)
  return clip_to_box(2.0 * (x - low) / (high - low) - 1.0)


def unit_rows(x, bounds=None) -> jax.Array:
  """Divides by the public upper bound, then scales every row to norm 1.

  Each row is rescaled by its own norm only (zero rows stay zero; rows with
  a NaN or infinite entry become zero, :func:`normalize_rows`), so the map
  is data-independent and ‖x_i‖ ≤ 1 holds by construction. This is
  FedDPDR's preprocessing. Dividing by a scalar ``high`` does not change a
  row's direction; per-feature ``high`` arrays reweight features.

  Args:
    x: ``(n, d)`` features.
    bounds: public ``(low, high)`` with ``high > 0``, or None to skip the
      division.

  Returns:
    ``(n, d)`` rows of norm 1 or 0, in ``x``'s floating dtype.

  Privacy: per-row and data-independent (see the module docstring).
  """
  x = _rows(x)
  if bounds is not None:
    _, high = _bounds_pair(bounds, x.shape[1])
    if (high <= 0).any():
      raise ValueError(f"unit_rows divides by the upper bound, which must "
                       f"be > 0, got bounds={bounds!r}.")
    return _divide_and_normalize(x, jnp.asarray(high, x.dtype))
  return normalize_rows(x, eps=0.0)


@jax.jit
def _divide_and_normalize(x, high):
  return _normalize_rows(x / high, 0.0)
