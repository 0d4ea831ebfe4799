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

σ for an (ε, δ) target is
:func:`dpcore.discrete_calibration.discrete_gaussian_sigma`; the ledger
records the release with ``record_discrete_gaussian`` (or
``record_discrete_laplace``) and the lattice sensitivity.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from dpcore import discrete


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


__all__ = [
    "check_granularity", "from_lattice", "gaussian_mechanism",
    "laplace_mechanism", "lattice_l1_sensitivity", "lattice_l2_sensitivity",
    "to_lattice",
]
