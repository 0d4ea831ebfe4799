"""Per-example clipping of gradient pytrees and per-row bounding of features.

Per-row operations are data-independent: each row is rescaled by its own
norm only, so one row's change never affects another's and the bound
‖x‖ ≤ C holds by construction (no data statistic is consulted).

>>> import jax.numpy as jnp
>>> x = jnp.array([[3.0, 4.0], [0.3, 0.4]])
>>> clip_rows(x, max_norm=1.0).tolist()
[[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645]]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def global_norm(tree) -> jax.Array:
  """L2 norm of all leaves of a pytree together."""
  return optax.global_norm(tree)


def clip_to_norm(tree, clip_norm):
  """Rescales one example's pytree to L2 norm ≤ ``clip_norm`` (jointly).

  Non-finite gradients are replaced by zeros (they carry no usable signal
  and would otherwise poison the sum), which keeps the bound.
  """
  norm = global_norm(tree)
  finite = jnp.isfinite(norm)
  scale = jnp.where(finite, jnp.minimum(1.0, clip_norm / jnp.maximum(
      norm, 1e-30)), 0.0)
  return jax.tree.map(
      lambda g: jnp.where(finite, g * scale.astype(g.dtype), 0.0), tree)


def clipped_sum(per_example_tree, clip_norm, *, weights=None):
  """Clip every example's gradient to ``clip_norm``, then sum over examples.

  Args:
    per_example_tree: pytree whose leaves have a leading example axis.
    clip_norm: C > 0.
    weights: optional 0/1 (or [0, 1]) per-example mask, e.g. for Poisson
      batches padded to a fixed size.

  Returns:
    ``(summed_tree, norms)``: the clipped sum and the pre-clipping norms.

  Privacy: adding or removing one example changes the sum by at most C in
  L2 norm (sensitivity C under add/remove-one; 2C under replace-one).
  """
  norms = jax.vmap(global_norm)(per_example_tree)
  clipped = jax.vmap(clip_to_norm, in_axes=(0, None))(per_example_tree,
                                                      clip_norm)
  if weights is not None:
    clipped = jax.tree.map(
        lambda g: g * weights.reshape((-1,) + (1,) * (g.ndim - 1)).astype(
            g.dtype), clipped)
  return jax.tree.map(lambda g: jnp.sum(g, axis=0), clipped), norms


def row_norms(x: jax.Array) -> jax.Array:
  return jnp.linalg.norm(x, axis=-1)


def normalize_rows(x: jax.Array, *, eps: float = 1e-12) -> jax.Array:
  """Scales every non-zero row to unit L2 norm (zero rows stay zero)."""
  norms = row_norms(x)[..., None]
  return jnp.where(norms > eps, x / jnp.maximum(norms, eps), 0.0)


def clip_rows(x: jax.Array, *, max_norm=1.0) -> jax.Array:
  """Scales rows of norm > ``max_norm`` down to ``max_norm``; others kept."""
  norms = row_norms(x)[..., None]
  return x * jnp.minimum(1.0, max_norm / jnp.maximum(norms, 1e-30))


def clip_to_box(x: jax.Array, *, low=-1.0, high=1.0) -> jax.Array:
  """Clips every coordinate into [low, high] (a per-row, public bound)."""
  return jnp.clip(x, low, high)
