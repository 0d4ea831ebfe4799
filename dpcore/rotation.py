"""A public random rotation: the randomised Walsh–Hadamard transform.

Before a vector is rounded to integers and summed modulo 2^b (the
distributed discrete Gaussian, :mod:`dpcore.ddg`), it is rotated by
R = H·S/√D: S a diagonal of random signs drawn from a *public* key, H the
D × D Walsh–Hadamard matrix (entries ±1, H·Hᵀ = D·I), D the dimension
padded to a power of two. R is orthonormal, so norms and inner products
are kept and R⁻¹ = Rᵀ = S·H/√D. Its point is flatness: for any fixed x,
each coordinate of R·x is a sum of D independent signs weighted by
xₖ/√D, so it is sub-Gaussian with variance proxy ‖x‖²/D (Hoeffding),
whatever the direction of x. A vector's energy is spread over all
coordinates and no coordinate of a sum is likely to leave the modular
range.

The key is public and carries no privacy: the rotation is a fixed
orthonormal map applied the same way to neighbouring data sets. Its
randomness only serves the accuracy bound, so it must be drawn
independently of the vector it rotates (a fresh key per step).

>>> import jax, jax.numpy as jnp
>>> x = jnp.arange(5.0)
>>> y = rotate(jax.random.key(0), x)
>>> y.shape, bool(jnp.allclose(unrotate(jax.random.key(0), y, 5), x,
...                                atol=1e-5))
((8,), True)

References:
  Kairouz, Liu & Steinke, The Distributed Discrete Gaussian Mechanism for
  Federated Learning with Secure Aggregation, ICML 2021 (Section 4).
  Ailon & Chazelle, The Fast Johnson–Lindenstrauss Transform, 2009.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

__all__ = ["padded_dim", "rotate", "signs", "unrotate", "walsh_hadamard"]


def padded_dim(dim: int) -> int:
  """D: the smallest power of two ≥ ``dim`` (≥ 1)."""
  if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
    raise ValueError(f"dim must be an int ≥ 1, got {dim!r}.")
  return 1 << (dim - 1).bit_length()


@jax.jit
def walsh_hadamard(x: jax.Array) -> jax.Array:
  """H·x/√D along the last axis (D a power of two), in O(D log D).

  The normalised transform is symmetric and orthonormal, hence its own
  inverse. Jitted: an eager call compiles its stages as one program.
  """
  x = jnp.asarray(x)
  d = x.shape[-1]
  if d & (d - 1):
    raise ValueError(f"the last axis must have a power-of-two length, got "
                     f"{d}; pad it (padded_dim).")
  lead = x.shape[:-1]
  y, half = x, 1
  while half < d:
    # One butterfly stage per bit, (a, b) -> (a + b, a − b); two stages a
    # pass where two remain (the same additions in the same order, so the
    # same floats, with half the passes over memory).
    if 4 * half <= d:
      y = y.reshape(lead + (d // (4 * half), 4, half))
      q = [y[..., j, :] for j in range(4)]
      s0, s1, s2, s3 = q[0] + q[1], q[0] - q[1], q[2] + q[3], q[2] - q[3]
      y = jnp.stack([s0 + s2, s1 + s3, s0 - s2, s1 - s3], axis=-2)
      half *= 4
    else:
      y = y.reshape(lead + (d // (2 * half), 2, half))
      a, b = y[..., 0, :], y[..., 1, :]
      y = jnp.stack([a + b, a - b], axis=-2)
      half *= 2
  return y.reshape(lead + (d,)) * (1.0 / math.sqrt(d))


def signs(key: jax.Array, padded: int, dtype=jnp.float32) -> jax.Array:
  """The diagonal S: D independent uniform ±1 from the public key.

  The coins are float32 uniforms in both JAX modes (a Python 0.5 would
  draw float64 ones, other words, under x64), so a key gives the same
  signs with or without x64.
  """
  bits = jax.random.bernoulli(key, jnp.float32(0.5), (padded,))
  return jnp.where(bits, 1.0, -1.0).astype(dtype)


def rotate(key: jax.Array, x: jax.Array) -> jax.Array:
  """R·x = H·S·x/√D of x's last axis, zero-padded from d to D.

  Args:
    key: the public rotation key (the same key must decode).
    x: float array (..., d).

  Returns:
    (..., D), D = :func:`padded_dim` (d).
  """
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.float32)
  d = x.shape[-1]
  padded = padded_dim(d)
  x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, padded - d)])
  return walsh_hadamard(x * signs(key, padded, x.dtype))


def unrotate(key: jax.Array, y: jax.Array, dim: int) -> jax.Array:
  """R⁻¹·y = S·H·y/√D, cut back to the first ``dim`` coordinates."""
  y = jnp.asarray(y)
  if not jnp.issubdtype(y.dtype, jnp.floating):
    y = y.astype(jnp.float32)
  padded = y.shape[-1]
  if padded != padded_dim(dim):
    raise ValueError(f"y has {padded} coordinates; a rotated {dim}-vector "
                     f"has {padded_dim(dim)}.")
  return (walsh_hadamard(y) * signs(key, padded, y.dtype))[..., :dim]
