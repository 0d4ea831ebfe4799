"""Queries released on a grid: rounding, lattice sensitivity, grid mechanisms.

The exact integer samplers of :mod:`dpcore.discrete` add noise to
integers, so a float query is first rounded to a grid of step γ (a power
of two, so grid values are exact floats) and released as int32 lattice
points z; z·γ is its value (post-processing). Rounding can move two
neighbours' queries apart by up to one grid step per coordinate, so the
sensitivity to account is the *lattice* sensitivity: Δ/γ + √d (L2) or
Δ₁/γ + d (L1), not Δ/γ.

>>> import jax
>>> z, lattice = gaussian_mechanism(jax.random.key(0), jax.numpy.zeros(3),
...                                 sensitivity=1.0, sigma=8,
...                                 granularity=2 ** -2)
>>> z.dtype, lattice == 1.0 / 2 ** -2 + 3 ** 0.5
(dtype('int32'), True)

A sum of many rows computed in floats rounds in a way that depends on
every row, so its neighbours can differ by more than Δ; for the second
moment XᵀX, :func:`gram_on_lattice` computes it in integers instead
(rows on the grid 2⁻⁹, :data:`ROW_BITS`), exactly in every order.

σ for an (ε, δ) target is
:func:`dpcore.discrete_calibration.discrete_gaussian_sigma`; the ledger
records the release with ``record_discrete_gaussian`` (or
``record_discrete_laplace``) and the lattice sensitivity.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dpcore import discrete, uint64


def check_granularity(granularity) -> float:
  """γ must be a power of two 2^k with −40 ≤ k ≤ 40 (exact in float32)."""
  if isinstance(granularity, bool) or not isinstance(
      granularity, (int, float)):
    raise ValueError(f"granularity must be a power of two, got "
                     f"{granularity!r}.")
  g = float(granularity)
  if not (math.isfinite(g) and g > 0):
    raise ValueError(f"granularity must be a power of two > 0, got {g!r}.")
  mantissa, exponent = math.frexp(g)
  if mantissa != 0.5 or not -40 <= exponent - 1 <= 40:
    raise ValueError(
        f"granularity must be a power of two 2^k with -40 <= k <= 40 (so "
        f"grid values are exact floats), got {g!r}; e.g. 2**-10.")
  return g


def lattice_l2_sensitivity(sensitivity: float, *, granularity,
                           dim: int) -> float:
  """L2 sensitivity, in grid units, of a d-dim query rounded to the grid.

  Nearest rounding moves each coordinate by at most ½, so two neighbours'
  rounded queries differ per coordinate by at most |δᵢ|/γ + 1 (and by 0
  where δᵢ = 0): the bound is Δ/γ + √d (triangle inequality with the
  all-ones vector). Note: not Δ/γ + √d/2 — the two roundings can move in
  opposite directions (0.495 → 0, 0.505 → 1).
  """
  g = check_granularity(granularity)
  if not (isinstance(dim, int) and dim >= 1):
    raise ValueError(f"dim must be an int ≥ 1, got {dim!r}.")
  return float(sensitivity) / g + math.sqrt(dim)


def lattice_l1_sensitivity(sensitivity: float, *, granularity,
                           dim: int) -> float:
  """L1 sensitivity in grid units after nearest rounding: Δ₁/γ + d."""
  g = check_granularity(granularity)
  if not (isinstance(dim, int) and dim >= 1):
    raise ValueError(f"dim must be an int ≥ 1, got {dim!r}.")
  return float(sensitivity) / g + dim


def to_lattice(value, granularity: float) -> jax.Array:
  """round(value/γ) as int32, clipped to ±2³⁰ (a contraction) and NaN → 0.

  The clip and NaN map are applied identically to every data set and do
  not increase the distance between neighbours' rounded queries. A float
  array is rounded in its own dtype; integers and Python numbers in
  float32 (with or without x64).
  """
  v = jnp.asarray(value)
  if not jnp.issubdtype(v.dtype, jnp.floating) or v.weak_type:
    v = v.astype(jnp.float32)  # a Python number: float32 in both modes
  scaled = jnp.round(v / jnp.asarray(granularity, v.dtype))
  limit = float(2 ** 30)
  scaled = jnp.where(jnp.isnan(scaled), 0.0, jnp.clip(scaled, -limit, limit))
  return scaled.astype(jnp.int32)


def from_lattice(z, granularity: float, dtype=jnp.float32) -> jax.Array:
  """z·γ as floats: exact when |z| < 2²⁴ (float32) or 2⁵³ (float64).

  Privacy does not depend on it: the integers are the release, and any
  function of them (this one included) is post-processing.
  """
  return jnp.asarray(z).astype(dtype) * jnp.asarray(granularity, dtype)


def gaussian_mechanism(key: jax.Array, value, *, sensitivity: float,
                       sigma, granularity) -> tuple[jax.Array, float]:
  """round(value/γ) + discrete Gaussian noise, as int32 lattice points.

  Args:
    key: PRNG key (consumed).
    value: float query (any shape; d = its size).
    sensitivity: L2 sensitivity Δ of ``value`` (in value units).
    sigma: σ of the noise *in grid units* (exact rational, see
      :func:`dpcore.discrete.gaussian_params`); the noise in value units
      is σ·γ.
    granularity: grid step γ, a power of two.

  Returns:
    ``(z, lattice_sensitivity)``: int32 lattice points (release z; z·γ by
    :func:`from_lattice`) and Δ/γ + √d, the L2 sensitivity to record
    (``ledger.record_discrete_gaussian(sigma=sigma,
    sensitivity=lattice_sensitivity, ...)``).

  Privacy:
    (Δ_lattice²/2σ²)-zCDP (CKS Theorem 14) for neighbours whose ``value``
    differs by at most Δ in L2 norm, the query being computed exactly
    (see docs/exact_noise.md for float error in the query itself).
  """
  g = check_granularity(granularity)
  shape = jnp.shape(value)
  sens = lattice_l2_sensitivity(sensitivity, granularity=g,
                                dim=max(1, math.prod(shape)))
  noise = discrete.discrete_gaussian(key, shape, sigma=sigma)
  z = to_lattice(value, g) + noise
  return z, sens


def laplace_mechanism(key: jax.Array, value, *, sensitivity: float, scale,
                      granularity) -> tuple[jax.Array, float]:
  """round(value/γ) + discrete Laplace noise, as int32 lattice points.

  As :func:`gaussian_mechanism`, with ``sensitivity`` the L1 sensitivity
  Δ₁ and ``scale`` t in grid units; the returned lattice sensitivity is
  Δ₁/γ + d.

  Privacy:
    (Δ₁/γ + d)/t-DP (pure) for neighbours whose ``value`` differs by at
    most Δ₁ in L1 norm, the query being computed exactly.
  """
  g = check_granularity(granularity)
  shape = jnp.shape(value)
  sens = lattice_l1_sensitivity(sensitivity, granularity=g,
                                dim=max(1, math.prod(shape)))
  noise = discrete.discrete_laplace(key, shape, scale=scale)
  z = to_lattice(value, g) + noise
  return z, sens


ROW_BITS = 9
"""Rows enter :func:`integer_gram` as integers on the grid 2⁻⁹."""
_GRAM_CHUNK = 4096
"""Rows per int32 product in :func:`integer_gram`: 4096 rows of ‖q‖² ≤
2¹⁸ keep every partial sum within 2³⁰, so no product can overflow."""
_GRAM_MAX_DIM = 8191
"""The widest row :func:`integer_rows` takes: d·2¹⁸ < 2³¹ keeps its int32
norm check exact."""


def integer_rows(x) -> jax.Array:
  """Rows of norm ≤ 1 as int32 vectors q with ‖q‖² ≤ 4⁹, checked exactly.

  q/2⁹ is the row on the grid 2⁻⁹, of norm at most 1 whatever ``x``
  holds. Each row is rounded to the nearest grid point; if that point's
  integer norm passes 2⁹, the row is first shrunk by 1 − 2⁻⁹·√d/2 − 2⁻²⁰
  (nearest rounding moves a row by at most 2⁻⁹·√d/2, so a row of norm
  ≤ 1 then fits); if that fails too (a row of norm > 1, or with an entry
  that is not a number in [−1, 1]) the row is 0. Per row and
  data-independent: one row's contribution to :func:`integer_gram` has
  Frobenius norm ≤ 4⁹ for any input. The shrink scales a row, which
  leaves the directions of XᵀX as they are.
  """
  x = jnp.asarray(x)
  d = x.shape[-1]
  if d > _GRAM_MAX_DIM:
    raise ValueError(f"rows of d={d} columns: the exact Gram matrix takes "
                     f"d <= {_GRAM_MAX_DIM}.")
  limit = 4 ** ROW_BITS
  unit = 2.0 ** ROW_BITS
  x = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  # A row with an entry outside [-1, 1] (NaN included) has norm > 1 or
  # none: it is 0 (which also keeps the int32 conversion in range).
  valid = jnp.all(jnp.abs(x) <= 1.0, axis=-1, keepdims=True)
  x = jnp.where(valid, x, 0.0).astype(jnp.float32)

  def on_grid(scale):
    q = jnp.round(x * jnp.float32(scale)).astype(jnp.int32)
    return q, jnp.sum(q * q, axis=-1, keepdims=True) <= limit

  shrink = 1.0 - math.sqrt(d) / (2 * unit) - 2.0 ** -20
  near, near_fits = on_grid(unit)
  shrunk, shrunk_fits = on_grid(unit * shrink)
  return jnp.where(near_fits, near, jnp.where(shrunk_fits, shrunk, 0))


def integer_gram(q) -> tuple[jax.Array, jax.Array]:
  """Σᵢ qᵢqᵢᵀ exactly, as signed 64-bit pairs ``(hi, lo)`` of (d, d) words.

  ``q`` (n, d) int32 rows of ‖q‖² ≤ 4⁹ (:func:`integer_rows`). Every
  product is an integer one, in int32 over chunks of
  4,096 rows (each partial sum ≤ 2³⁰) carried into 64 bits
  (:func:`dpcore.uint64.add_int32`), so the result is the same in every
  summation order, on every platform, while n·2¹⁸ < 2⁶³: no rounding
  that depends on the other rows (a float32 XᵀX has it).
  """
  q = jnp.asarray(q, jnp.int32)
  n, d = q.shape
  chunks = -(-n // _GRAM_CHUNK)
  q = jnp.pad(q, ((0, chunks * _GRAM_CHUNK - n), (0, 0)))

  def step(pair, rows):
    part = lax.dot_general(rows, rows, (((0,), (0,)), ((), ())),
                           preferred_element_type=jnp.int32)
    return uint64.add_int32(*pair, part), None

  zero = jnp.zeros((d, d), uint64.U32)
  pair, _ = lax.scan(step, (zero, zero),
                     q.reshape(chunks, _GRAM_CHUNK, d))
  return pair


def gram_on_lattice(x, granularity) -> jax.Array:
  """The upper triangle (row-major, diagonal included) of XᵀX on the grid
  γ, exactly: round(Σᵢ hqᵢ(hqᵢ)ᵀ / γ) as int32, h = 2⁻⁹, q =
  :func:`integer_rows` (x).

  Computed in integers (:func:`integer_gram`), then rounded once, half
  up, to γ. Each row enters at norm ≤ 1, so the L2 sensitivity to
  account is the lattice one, Δ/γ + √(d(d+1)/2)
  (:func:`lattice_l2_sensitivity`, Δ = 1 add/remove, √2 replace-one),
  and it holds of the computed numbers, not only of the exact ones. The
  caller keeps n/γ < 2³⁰ so the result fits in int32.
  """
  g = check_granularity(granularity)
  hi, lo = integer_gram(integer_rows(x))
  upper = np.triu_indices(hi.shape[0])
  shift = int(round(math.log2(g))) + 2 * ROW_BITS
  return uint64.shift_round(hi[upper], lo[upper], shift)


__all__ = [
    "ROW_BITS", "check_granularity", "from_lattice", "gaussian_mechanism",
    "gram_on_lattice", "integer_gram", "integer_rows", "laplace_mechanism",
    "lattice_l1_sensitivity", "lattice_l2_sensitivity", "to_lattice",
]
