"""Server-side aggregation of participants' bases and models.

Weights are wᵢ = nᵢ / Σⱼ nⱼ (Wang et al. 2024, Sec. 4.1).

Bases. Each participant sends a (d, k) orthonormal basis Ûᵢ. Two
aggregates:

* :func:`subspace_aggregate` (default): the top-k eigenvectors of
  Σᵢ wᵢ ÛᵢÛᵢᵀ, a weighted average of the projection matrices. It is
  invariant to the signs and to rotations within each Ûᵢ, and its result is
  orthonormal, so projected unit rows keep ‖Ûᵀx‖ ≤ 1. With ``topk="eigh"``
  (default, exact) computed as the top-k left singular vectors of
  [√w₁Û₁, …, √w_NÛ_N] (d × Nk), never forming the d × d matrix; with
  ``topk="subspace"`` the d × d sum is formed (a fixed size whatever N)
  and its top k found by block subspace iteration
  (:func:`dpcore.linalg.subspace_top_k`), seeded by a key that must not be
  a noise key (see the function).
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

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import linalg, validation

TOPK = ("eigh", "subspace")
"""How :func:`subspace_aggregate` finds the top k (post-processing)."""


def _check_weights(stack, weights, name: str, *, ndim: int | None = None
                   ) -> None:
  """Static: ``stack`` has participants first (and ``ndim`` axes if given);
  ``weights`` is (N,)."""
  if ndim is not None and jnp.ndim(stack) != ndim:
    raise ValueError(f"{name} must have {ndim} axes, participants first, "
                     f"got shape {jnp.shape(stack)}.")
  if jnp.ndim(stack) < 1 or jnp.shape(weights) != jnp.shape(stack)[:1]:
    raise ValueError(
        f"weights must have shape (N,), one per participant (N = "
        f"{jnp.shape(stack)[:1]} of {name}), got {jnp.shape(weights)}.")


def size_weights(sizes):
  """wᵢ = nᵢ / Σ n."""
  if validation.is_concrete(sizes):  # traced inside train: checked there
    counts = np.asarray(sizes, np.float64)
    if counts.ndim != 1 or counts.size == 0 or not np.all(
        np.isfinite(counts) & (counts >= 0)) or counts.sum() <= 0:
      raise ValueError(f"sizes must be a non-empty 1-D array of row "
                       f"counts ≥ 0 with a positive sum, got {sizes!r}.")
  sizes = jnp.asarray(sizes, jnp.float32)
  return sizes / jnp.sum(sizes)


def check_topk(topk: str) -> str:
  """``topk`` checked against :data:`TOPK`."""
  if topk not in TOPK:
    raise ValueError(f"topk must be one of {TOPK}, got {topk!r}.")
  return topk


def weighted_projector_sum(components, weights):
  """Σᵢ wᵢ UᵢUᵢᵀ, (d, d), for (N, d, k) bases and (N,) weights."""
  w = weights.astype(components.dtype)
  return jnp.einsum("p,pdk,pek->de", w, components, components)


def subspace_aggregate(components, weights, *, topk: str = "eigh",
                       key: jax.Array | None = None):
  """Top-k eigenvectors of Σᵢ wᵢ UᵢUᵢᵀ.

  Args:
    components: (N, d, k) bases.
    weights: (N,) non-negative weights.
    topk: ``"eigh"`` (default): the exact top k, as the left singular
      vectors of the d × Nk stack of the √wᵢUᵢ. ``"subspace"``: block
      subspace iteration on the d × d sum
      (:func:`dpcore.linalg.subspace_top_k`, its default block and
      iterations), O(d²) memory whatever N.
    key: required with ``topk="subspace"`` (and refused otherwise): the
      PRNG key of the random start block. It must not be, or be derived
      from, a key any participant used for noise (FedDPDR folds a constant
      that no participant index takes into the repeat's key). The start
      block then is independent of every noise draw, so the result is a
      function of the released bases and public randomness only:
      post-processing, which costs no privacy.

  Returns:
    (d, k) orthonormal basis, in descending order of the aggregate's
    eigenvalues, signs fixed by :func:`dpcore.linalg.canonical_signs`.

  Raises:
    ValueError: an unknown ``topk``, or ``key`` missing for
      ``"subspace"`` / given for ``"eigh"``.
  """
  check_topk(topk)
  _check_weights(components, weights, "components", ndim=3)
  n, d, k = components.shape
  if topk == "subspace":
    if key is None:
      raise ValueError("topk='subspace' needs key, the PRNG key of the "
                       "start block (never a noise key).")
    m = weighted_projector_sum(components, weights)
    return linalg.subspace_top_k(key, m, k).vectors
  if key is not None:
    raise ValueError("key is used only by topk='subspace'; leave it out "
                     "for topk='eigh'.")
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
  _check_weights(betas, weights, "betas")
  out = jnp.tensordot(weights.astype(betas.dtype), betas, axes=1)
  if paper:
    out = out / betas.shape[0]
  return out
