"""A public random projection: fewer feature dimensions at no privacy cost.

:func:`random_orthonormal` draws a (dim, out_dim) matrix with orthonormal
columns from a key alone, never from the data, so ``x @ q`` is a
per-example map like the scattering transform: it costs no privacy and
keeps every row's norm bound (‖xq‖ ≤ ‖x‖). It brings the 3,969 scattering
numbers of an MNIST image to a learner that wants fewer (DP-GMLVQ's
prototypes and its private initialisation live in the input space).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dpcore import validation

__all__ = ["random_orthonormal"]


def random_orthonormal(key: jax.Array, dim: int, out_dim: int) -> jax.Array:
  """(dim, out_dim) float32 with orthonormal columns, Haar-distributed.

  The Q factor of a standard Gaussian matrix drawn from ``key``, its
  columns' signs fixed by R's diagonal (so the law is Haar's, not QR's
  convention).

  Args:
    key: a public PRNG key (a seed written in the run's record).
    dim: the input dimension.
    out_dim: 1 ≤ out_dim ≤ dim.

  Raises:
    ValueError: out_dim outside [1, dim].
  """
  validation.check_key(key)
  dim = validation.check_positive_int(dim, "dim")
  out_dim = validation.check_positive_int(out_dim, "out_dim")
  if out_dim > dim:
    raise ValueError(f"out_dim={out_dim} must be at most dim={dim} (the "
                     f"features' dimension).")
  g = jax.random.normal(key, (dim, out_dim), jnp.float32)
  q, r = jnp.linalg.qr(g)
  return q * jnp.where(jnp.diag(r) < 0, -1.0, 1.0)[None, :]
