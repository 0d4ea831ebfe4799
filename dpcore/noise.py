"""Noise samplers. Pure functions, key first, jit- and vmap-compatible.

Scales are keyword arguments and may be traced values, so a vmap over
participants can give each one its own calibration.

>>> import jax
>>> z = gaussian_noise(jax.random.key(0), (3,), stddev=2.0)
>>> z.shape
(3,)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def gaussian_noise(key: jax.Array, shape, *, stddev, dtype=jnp.float32
                   ) -> jax.Array:
  """I.i.d. N(0, stddev²) entries of the given shape, of type ``dtype``."""
  return jnp.asarray(stddev, dtype) * jax.random.normal(key, shape, dtype)


def laplace_noise(key: jax.Array, shape, *, scale, dtype=jnp.float32
                  ) -> jax.Array:
  """I.i.d. Laplace(0, scale) entries (density ∝ exp(−|z|/scale))."""
  return jnp.asarray(scale, dtype) * jax.random.laplace(key, shape, dtype)


def symmetric_gaussian_noise(key: jax.Array, dim: int, *, stddev,
                             dtype=jnp.float32) -> jax.Array:
  """A symmetric dim × dim matrix whose upper triangle is i.i.d. N(0, σ²).

  The upper triangle (diagonal included) is drawn and mirrored, so every
  distinct entry of a symmetric query such as XᵀX gets exactly one
  independent draw — the noise matrix of the Analyze-Gauss DP-PCA.
  """
  full = gaussian_noise(key, (dim, dim), stddev=stddev, dtype=dtype)
  upper = jnp.triu(full)
  return upper + jnp.triu(full, k=1).T


def sphere_uniform(key: jax.Array, dim: int, *, dtype=jnp.float32
                   ) -> jax.Array:
  """A direction drawn uniformly from the unit sphere in R^dim."""
  z = jax.random.normal(key, (dim,), dtype)
  return z / jnp.linalg.norm(z)


def objective_perturbation_noise(key: jax.Array, dim: int, *, beta,
                                 dtype=jnp.float32) -> jax.Array:
  """b ∈ R^dim with density ∝ exp(−β ‖b‖).

  Sampled as ‖b‖ ~ Gamma(shape=dim, scale=1/β) times a uniform direction
  (the radial density of exp(−β r) in dim dimensions is ∝ r^{dim−1} e^{−βr}).
  Chaudhuri et al. (2011) use β = ε'/2 for a loss with ‖∇ℓ‖ ≤ 1.

  References:
    Chaudhuri, Monteleoni & Sarwate, Differentially Private Empirical Risk
    Minimization, JMLR 12, 2011 (Algorithm 2).
  """
  norm_key, dir_key = jax.random.split(key)
  radius = jax.random.gamma(norm_key, jnp.asarray(dim, dtype), (), dtype)
  radius = radius / jnp.asarray(beta, dtype)
  return radius * sphere_uniform(dir_key, dim, dtype=dtype)
