"""Per-example clipped gradient sums for GLVQ / GMLVQ without per-example grads.

One example's loss Φ(μ) depends on the parameters only through its two
winning distances d⁺ = ‖Ωu‖², d⁻ = ‖Ωv‖² with u = x − w⁺, v = x − w⁻
(Ω = I for GLVQ). With a⁺ = ∂Φ/∂d⁺ and a⁻ = ∂Φ/∂d⁻ its gradient is

* w.r.t. w⁺: −2a⁺ ΩᵀΩu;  w.r.t. w⁻: −2a⁻ ΩᵀΩv (other prototypes: 0);
* w.r.t. Ω: 2a⁺ Ωu uᵀ + 2a⁻ Ωv vᵀ,

so its squared L2 norm over all parameters has the closed form

  4a⁺²‖ΩᵀΩu‖² + 4a⁻²‖ΩᵀΩv‖²
  + 4(a⁺²‖Ωu‖²‖u‖² + a⁻²‖Ωv‖²‖v‖² + 2a⁺a⁻ (Ωu·Ωv)(u·v)),

from quantities of the forward pass plus one (n, r) × (r, d) product. The
clipped sum Σᵢ cᵢ ∇ℓᵢ with cᵢ = min(1, C/‖∇ℓᵢ‖) is then one weighted
backward pass, written out by hand: the Ω part is 2(GᵀX − HᵀW) with
G = Σ (c a⁺ Ωu + c a⁻ Ωv) per row and H the same rows summed per prototype.
No (n, r, d) per-example Ω gradient is ever formed (the idea behind ghost
clipping, Goodfellow 2015; Li et al. 2022).

:func:`per_example_gradients` is the plain ``vmap(grad)`` path it is tested
against.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dpcore import clipping, linalg
from mechanisms.lvq import model as lvq

__all__ = ["clipped_gradient_sum", "clipped_gradient_sum_vmap",
           "per_example_gradients"]


def per_example_gradients(params, x, y, prototype_labels, *,
                          phi_kind: str = "identity"):
  """∇ℓᵢ of every example, leaves with a leading example axis (vmap(grad))."""
  def loss(p, xi, yi):
    return lvq.example_loss(p, xi, yi, prototype_labels, phi_kind=phi_kind)

  return jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, x, y)


def _require_mask(mask) -> None:
  if mask is None:
    raise ValueError(
        "mask is required: pass the (n,) 0/1 mask of the padded batch "
        "(mask=batch.slot_mask for a dpsgd.poisson_batch), or mask=jnp.ones(n) "
        "when nothing is padded; padding slots repeat row 0 and would "
        "otherwise enter the private sum.")


def _distance_coefficients(d_plus, d_minus, phi_kind):
  """(a⁺, a⁻) = (∂Φ(μ)/∂d⁺, ∂Φ(μ)/∂d⁻) per example."""

  def one(dp, dm):
    return lvq.phi(lvq.relative_difference(dp, dm), phi_kind)

  grad = jax.vmap(jax.grad(one, argnums=(0, 1)))
  return grad(d_plus, d_minus)


@linalg.full_precision
def clipped_gradient_sum(params, x, y, prototype_labels, *, clip_norm,
                         mask=None, phi_kind: str = "identity"):
  """Σᵢ maskᵢ · clip_C(∇ℓᵢ) over a batch, and the per-example norms ‖∇ℓᵢ‖.

  A raw jit/vmap kernel (no host-side checks); its validated entry point
  is :func:`mechanisms.lvq.train.release`.

  Args:
    params: GLVQ or GMLVQ params.
    x: (n, d) batch.
    y: (n,) class indices.
    prototype_labels: (m,) class index of each prototype.
    clip_norm: C > 0 (may be traced).
    mask: (n,) 0/1 weights, required: the padding of a Poisson batch
      (``PoissonBatch.slot_mask``; ``jnp.ones(n)`` when nothing is padded).
      Bounded to [0, 1] (NaN → 0) here, so no example counts more than
      once.
    phi_kind: ``"identity"`` or ``"sigmoid"``.

  Returns:
    ``(grad_sum, norms)``: a params-shaped pytree and the (n,) pre-clipping
    norms. Non-finite per-example gradients contribute zero.

  Privacy: every example's contribution is its gradient scaled by
  min(1, C/‖∇ℓᵢ‖), so adding or removing one example changes the sum by at
  most C in L2 norm, over all parameters jointly (add/remove-one). This is
  the sum :func:`dpcore.dpsgd.dp_aggregate` takes with ``presummed=True``,
  so the mask is required here rather than there.
  """
  _require_mask(mask)
  w = params["prototypes"]
  m = w.shape[0]
  fw = lvq.forward(params, x, y, prototype_labels)
  a_plus, a_minus = _distance_coefficients(fw.d_plus, fw.d_minus, phi_kind)
  u = x - w[fw.plus]
  v = x - w[fw.minus]
  if lvq.is_gmlvq(params):
    omega = params["omega"]
    ou = fw.z - fw.p[fw.plus]          # Ωu, (n, r)
    ov = fw.z - fw.p[fw.minus]
    zo = fw.z @ omega                  # ΩᵀΩx, (n, d)
    po = fw.p @ omega                  # ΩᵀΩw, (m, d)
    lu = zo - po[fw.plus]              # ΩᵀΩu
    lv = zo - po[fw.minus]
    uu = jnp.sum(u * u, axis=1)
    vv = jnp.sum(v * v, axis=1)
    omega_sq = 4.0 * (a_plus**2 * jnp.sum(ou * ou, axis=1) * uu
                      + a_minus**2 * jnp.sum(ov * ov, axis=1) * vv
                      + 2.0 * a_plus * a_minus * jnp.sum(ou * ov, axis=1)
                      * jnp.sum(u * v, axis=1))
    omega_sq = jnp.maximum(omega_sq, 0.0)
  else:
    lu, lv = u, v
    omega_sq = 0.0
  sq = (4.0 * a_plus**2 * jnp.sum(lu * lu, axis=1)
        + 4.0 * a_minus**2 * jnp.sum(lv * lv, axis=1) + omega_sq)
  norms = jnp.sqrt(sq)
  finite = jnp.isfinite(norms)
  scale = jnp.where(finite, jnp.minimum(
      1.0, clip_norm / jnp.maximum(norms, 1e-30)), 0.0)
  scale = scale * clipping.clip_weights(mask).astype(scale.dtype)
  b_plus = jnp.where(finite, scale * a_plus, 0.0)
  b_minus = jnp.where(finite, scale * a_minus, 0.0)
  keep = finite[:, None]
  # Per-prototype sums as (m, n) one-hot products (faster than scatter-adds
  # on CPU); the weights are zero wherever an example is dropped.
  onehot_plus = jax.nn.one_hot(fw.plus, m, dtype=x.dtype).T * b_plus
  onehot_minus = jax.nn.one_hot(fw.minus, m, dtype=x.dtype).T * b_minus
  lu = jnp.where(keep, lu, 0.0)
  lv = jnp.where(keep, lv, 0.0)
  grads = {"prototypes": -2.0 * (onehot_plus @ lu + onehot_minus @ lv)}
  if lvq.is_gmlvq(params):
    ou = jnp.where(keep, ou, 0.0)
    ov = jnp.where(keep, ov, 0.0)
    g = b_plus[:, None] * ou + b_minus[:, None] * ov
    h = onehot_plus @ ou + onehot_minus @ ov
    xs = jnp.where(keep, x, 0.0)
    grads["omega"] = 2.0 * (g.T @ xs - h.T @ w)
  return grads, norms


def clipped_gradient_sum_vmap(params, x, y, prototype_labels, *, clip_norm,
                              mask=None, phi_kind: str = "identity"):
  """The same clipped sum by materialising per-example gradients.

  Reference path (``vmap(grad)`` + :func:`dpcore.clipping.clipped_sum`);
  ``mask`` is required as in :func:`clipped_gradient_sum`.
  """
  _require_mask(mask)
  per_example = per_example_gradients(params, x, y, prototype_labels,
                                      phi_kind=phi_kind)
  return clipping.clipped_sum(per_example, clip_norm, weights=mask)
