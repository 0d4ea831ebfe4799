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

Second moments. Instead of a basis, each participant may send the noisy
matrix XᵢᵀXᵢ + Zᵢ that DP-PCA releases anyway (its top k is
post-processing of it). :func:`summed_over_participants` adds those
matrices up without ever holding N of them (a scan over chunks, and across
devices a sum of the per-device totals), and :func:`moments_aggregate`
takes the top k of the sum: the noise grows like Nσ² while the signal
Σ XᵢᵀXᵢ = XᵀX grows with all N participants' rows, so the server recovers
a basis even where every participant's own noisy matrix is noise.

Models. :func:`model_aggregate` returns Σᵢ wᵢ β̂ᵢ, or with ``paper=True``
(1/N) Σᵢ wᵢ β̂ᵢ as printed (Algorithm 1 line 7; a positive rescaling, so
it does not change the predicted classes).

Privacy: post-processing of the participants' private releases.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from dpcore import linalg, options, validation
from federated import sharding

__all__ = [
    "check_topk",
    "model_aggregate",
    "moments_aggregate",
    "paper_aggregate",
    "size_weights",
    "subspace_aggregate",
    "summed_over_participants",
    "weighted_projector_sum",
]

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
  if validation.is_concrete(weights):
    w = np.asarray(weights, np.float64)
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
      raise ValueError(
          f"weights must be finite, ≥ 0 and not all 0 (a negative weight "
          f"makes the aggregate indefinite: √w is NaN), got "
          f"{np.array2string(w, threshold=8)}; e.g. size_weights(sizes).")


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
  """``topk`` checked against :class:`dpcore.options.TopK`."""
  options.parse(options.TopK, topk, "topk")
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


def _sum_mapped(fn: Callable, args, chunk: int | None):
  """Σᵢ fn(argsᵢ) over the leading axis; ``chunk`` at a time with chunk.

  ``fn`` may return a pytree of arrays; each leaf is summed.
  """
  count = jax.tree_util.tree_leaves(args)[0].shape[0]

  def summed(block):
    return jax.tree_util.tree_map(lambda a: jnp.sum(a, axis=0),
                                  jax.vmap(fn)(*block))

  if chunk is None or chunk >= count:
    return summed(args)
  blocks, full = count // chunk, count // chunk * chunk
  head = jax.tree_util.tree_map(
      lambda a: a[:full].reshape((blocks, chunk) + a.shape[1:]), args)
  first = jax.tree_util.tree_map(lambda a: a[0], args)
  zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype),
                                 jax.eval_shape(fn, *first))

  def add_block(total, block):
    return jax.tree_util.tree_map(jnp.add, total, summed(block)), None

  total, _ = jax.lax.scan(add_block, zeros, head)
  if full < count:
    tail = jax.tree_util.tree_map(lambda a: a[full:], args)
    total = jax.tree_util.tree_map(jnp.add, total, summed(tail))
  return total


def summed_over_participants(fn: Callable, mesh: Mesh | None = None,
                             chunk: int | None = None) -> Callable:
  """Σᵢ fn(argsᵢ) over the leading participant axis of every argument.

  Like :func:`federated.sharding.over_participants`, but the outputs are
  added up instead of stacked. Without ``chunk`` it is ``vmap`` and a sum
  (all N outputs are formed first). With ``chunk``, a ``lax.scan`` over
  blocks of ``chunk`` participants carries the running total (the last,
  shorter block added after it), so at most ``chunk`` outputs exist at
  once: N d × d matrices are never stacked. With a mesh, each device sums
  its own block (a ``shard_map``), and the per-device totals, one per
  device, are added as the only cross-device step. The order of the
  additions depends on the layout, so layouts agree up to rounding.

  Args:
    fn: per-participant function; its output (an array or a pytree of
      arrays) is summed.
    mesh: optional participant mesh (:func:`sharding.participant_mesh`).
    chunk: optional number of participants summed at once (≥ 1).
  """
  if chunk is not None:
    chunk = validation.check_positive_int(chunk, "chunk")

  def local(*args):
    return _sum_mapped(fn, args, chunk)

  if mesh is None or mesh.shape[sharding.AXIS] == 1:
    return local
  spec = PartitionSpec(sharding.AXIS)
  per_device = jax.shard_map(
      lambda *a: jax.tree_util.tree_map(lambda t: t[None], local(*a)),
      mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
  return lambda *args: jax.tree_util.tree_map(
      lambda t: jnp.sum(t, axis=0), per_device(*args))


def moments_aggregate(total, k: int, *, topk: str = "eigh",
                      key: jax.Array | None = None):
  """Top-k eigenvectors of the summed noisy second moments Σᵢ (XᵢᵀXᵢ + Zᵢ).

  The plain, unweighted sum: every participant's matrix carries noise of
  the same σ (σ does not depend on nᵢ), so the sum is the pooled XᵀX, each
  row counted once, plus noise of variance Nσ² per entry; any weights
  other than equal ones would add variance without changing the
  expectation's eigenvectors any better (size weights nᵢ/Σn would count a
  row of a large participant more than one of a small one).

  Args:
    total: (d, d) symmetric sum.
    k: number of components, 1 ≤ k ≤ d (static).
    topk: ``"eigh"`` (default, exact) or ``"subspace"`` (block subspace
      iteration, :func:`dpcore.linalg.subspace_top_k`'s defaults).
    key: required with ``topk="subspace"``, refused otherwise: the start
      block's key, never a noise key (see :func:`subspace_aggregate`).

  Returns:
    (d, k) orthonormal basis in descending eigenvalue order, signs fixed
    by :func:`dpcore.linalg.canonical_signs`.
  """
  check_topk(topk)
  if jnp.ndim(total) != 2 or jnp.shape(total)[0] != jnp.shape(total)[1]:
    raise ValueError(f"total must be a square (d, d) matrix, got shape "
                     f"{jnp.shape(total)}.")
  k = validation.check_positive_int(k, "k")
  if k > jnp.shape(total)[0]:
    raise ValueError(f"k={k} exceeds the dimension d={jnp.shape(total)[0]}"
                     f"; choose k <= {jnp.shape(total)[0]}.")
  if topk == "subspace":
    if key is None:
      raise ValueError("topk='subspace' needs key, the PRNG key of the "
                       "start block (never a noise key).")
    return linalg.subspace_top_k(key, total, k).vectors
  if key is not None:
    raise ValueError("key is used only by topk='subspace'; leave it out "
                     "for topk='eigh'.")
  return linalg.eigh_top_k(total, k).vectors
