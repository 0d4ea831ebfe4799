"""Server-side aggregation of participants' bases and models.

Weights are wᵢ = nᵢ / Σⱼ nⱼ (Wang et al. 2024, Sec. 4.1).

Bases. Each participant sends a (d, k) orthonormal basis Ûᵢ. Two
aggregates:

* :func:`subspace_aggregate` (default): the top-k eigenvectors of
  Σᵢ wᵢ ÛᵢÛᵢᵀ, a weighted average of the projection matrices. It is
  invariant to the signs and to rotations within each Ûᵢ, and its result is
  orthonormal, so projected unit rows keep ‖Ûᵀx‖ ≤ 1. Computed as the top-k
  left singular vectors of [√w₁Û₁, …, √w_NÛ_N] (d × Nk), never forming the
  d × d matrix.
* :func:`paper_aggregate`: (1/N) Σᵢ wᵢ Ûᵢ, Algorithm 1 line 3 as printed,
  for reproduction. The weights are divided by N twice, averaging
  eigenvectors with arbitrary signs can cancel them, and the result is not
  orthonormal: rows projected on it must be clipped to norm 1 before
  objective perturbation.

Models. :func:`model_aggregate` returns Σᵢ wᵢ β̂ᵢ, or with ``paper=True``
(1/N) Σᵢ wᵢ β̂ᵢ as printed (Algorithm 1 line 7; a positive rescaling, so
it does not change the predicted classes).

Privacy: post-processing of the participants' private releases.
"""

from __future__ import annotations

import jax.numpy as jnp

from dpcore import linalg


def size_weights(sizes):
  """wᵢ = nᵢ / Σ n."""
  sizes = jnp.asarray(sizes, jnp.float32)
  return sizes / jnp.sum(sizes)


def subspace_aggregate(components, weights):
  """Top-k eigenvectors of Σᵢ wᵢ UᵢUᵢᵀ.

  Args:
    components: (N, d, k) bases.
    weights: (N,) non-negative weights.

  Returns:
    (d, k) orthonormal basis, in descending order of the aggregate's
    eigenvalues, signs fixed by :func:`dpcore.linalg.canonical_signs`.
  """
  n, d, k = components.shape
  scaled = components * jnp.sqrt(weights).astype(components.dtype)[
      :, None, None]
  stacked = jnp.transpose(scaled, (1, 0, 2)).reshape(d, n * k)
  left, _, _ = linalg.thin_svd(stacked)
  return linalg.canonical_signs(left[:, :k])


def paper_aggregate(components, weights):
  """(1/N) Σᵢ wᵢ Uᵢ, as printed in Algorithm 1 (not orthonormal)."""
  n = components.shape[0]
  return jnp.tensordot(weights.astype(components.dtype), components,
                       axes=1) / n


def model_aggregate(betas, weights, *, paper: bool = False):
  """Σᵢ wᵢ βᵢ over the leading axis (divided by N when ``paper``)."""
  out = jnp.tensordot(weights.astype(betas.dtype), betas, axes=1)
  if paper:
    out = out / betas.shape[0]
  return out
