"""GLVQ and GMLVQ: prototype classifiers as pure functions of a params pytree.

A model is a dict of arrays:

* GLVQ: ``{"prototypes": W}`` with ``W`` of shape (m, d);
* GMLVQ: ``{"prototypes": W, "omega": Ω}`` with ``Ω`` of shape (r, d)
  (r = d for the full matrix, r < d for a rank-r metric).

The prototype labels (class *indices* 0..k−1, one per row of ``W``) are not
trained and travel beside the params. The squared distance is
d(x, w) = ‖x − w‖² (GLVQ) or d_Λ(x, w) = (x − w)ᵀ ΩᵀΩ (x − w) = ‖Ω(x − w)‖²
(GMLVQ). Each example's loss is Φ(μ) with μ = (d⁺ − d⁻)/(d⁺ + d⁻), d⁺ the
distance to the closest prototype of its own class and d⁻ to the closest
prototype of any other class (Sato & Yamada 1995); Φ is the identity (the
paper's choice) or the logistic function. Prediction is winner-takes-all.

Because μ is invariant to scaling Λ, normalising Λ does not change the cost;
:func:`normalise_omega` (trace Λ = ‖Ω‖²_F = 1, as sklvq does after each step)
is offered as an optional projection applied after an update. The paper does
not normalise.

>>> import jax.numpy as jnp
>>> params = {"prototypes": jnp.array([[0.0, 0.0], [1.0, 1.0]])}
>>> labels = jnp.array([0, 1])
>>> predict(params, jnp.array([[0.1, 0.2], [0.9, 0.7]]), labels).tolist()
[0, 1]

References:
  Sato & Yamada, Generalized Learning Vector Quantization, NIPS 1995.
  Schneider, Biehl & Hammer, Adaptive relevance matrices in learning vector
  quantization, Neural Computation 21(12), 2009.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpcore import options, validation

__all__ = [
    "Forward", "cost", "error_rate", "example_loss", "forward",
    "init_omega", "is_gmlvq", "normalise_omega", "per_example_loss", "phi",
    "predict", "project", "relative_difference", "squared_distances",
]



def phi(mu: jax.Array, kind: str) -> jax.Array:
  """The monotone transfer Φ applied to μ ∈ [−1, 1]."""
  options.parse(options.Phi, kind, "phi")
  if kind == "identity":
    return mu
  return jax.nn.sigmoid(mu)


def is_gmlvq(params) -> bool:
  return "omega" in params


def init_omega(dim: int, *, rank: int | None = None,
               normalise: bool = False) -> jax.Array:
  """A data-independent Ω: the identity (first ``rank`` rows of it).

  With ``normalise`` it is scaled so that trace ΩᵀΩ = 1.
  """
  dim = validation.check_positive_int(dim, "dim")
  rank = dim if rank is None else validation.check_positive_int(rank, "rank")
  omega = jnp.eye(rank, dim, dtype=jnp.float32)
  if normalise:
    omega = omega / jnp.sqrt(jnp.asarray(min(rank, dim), jnp.float32))
  return omega


def normalise_omega(params):
  """Projects Ω onto trace(ΩᵀΩ) = 1 (a no-op for GLVQ params)."""
  if not is_gmlvq(params):
    return params
  omega = params["omega"]
  norm = jnp.sqrt(jnp.sum(omega * omega))
  return {**params, "omega": omega / jnp.maximum(norm, 1e-30)}


class Forward(NamedTuple):
  """Quantities of one forward pass over a batch, reused by the clipping.

  Attributes:
    z: projected inputs Ωx (or x for GLVQ), shape (n, r).
    p: projected prototypes ΩW (or W), shape (m, r).
    dist: squared distances, shape (n, m).
    plus: index of the closest correct prototype, shape (n,).
    minus: index of the closest wrong prototype, shape (n,).
    d_plus: d⁺, shape (n,).
    d_minus: d⁻, shape (n,).
  """
  z: jax.Array
  p: jax.Array
  dist: jax.Array
  plus: jax.Array
  minus: jax.Array
  d_plus: jax.Array
  d_minus: jax.Array


def project(params, x: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(Ωx, ΩW) for GMLVQ, (x, W) for GLVQ."""
  w = params["prototypes"]
  if is_gmlvq(params):
    omega = params["omega"]
    return x @ omega.T, w @ omega.T
  return x, w


def squared_distances(params, x: jax.Array) -> jax.Array:
  """(n, m) squared (relevance) distances between rows of x and prototypes."""
  z, p = project(params, x)
  diff = z[:, None, :] - p[None, :, :]
  return jnp.sum(diff * diff, axis=-1)


def _expanded_distances(z, p):
  # ‖z‖² − 2 z·p + ‖p‖²: one matmul instead of an (n, m, r) difference.
  # Rounding can make it slightly negative; distances are clamped at 0.
  sq = (jnp.sum(z * z, axis=1)[:, None] - 2.0 * z @ p.T
        + jnp.sum(p * p, axis=1)[None, :])
  return jnp.maximum(sq, 0.0)


def forward(params, x: jax.Array, y: jax.Array,
            prototype_labels: jax.Array) -> Forward:
  """Distances and the winning correct / wrong prototypes of each example.

  Args:
    params: model pytree.
    x: (n, d) inputs.
    y: (n,) class indices.
    prototype_labels: (m,) class index of each prototype.
  """
  z, p = project(params, x)
  dist = _expanded_distances(z, p)
  same = y[:, None] == prototype_labels[None, :]
  inf = jnp.asarray(jnp.inf, dist.dtype)
  plus = jnp.argmin(jnp.where(same, dist, inf), axis=1)
  minus = jnp.argmin(jnp.where(same, inf, dist), axis=1)
  d_plus = jnp.take_along_axis(dist, plus[:, None], axis=1)[:, 0]
  d_minus = jnp.take_along_axis(dist, minus[:, None], axis=1)[:, 0]
  return Forward(z, p, dist, plus, minus, d_plus, d_minus)


def relative_difference(d_plus, d_minus):
  """μ = (d⁺ − d⁻)/(d⁺ + d⁻), defined as 0 when both distances are 0."""
  total = d_plus + d_minus
  safe = jnp.where(total > 0, total, 1.0)
  return jnp.where(total > 0, (d_plus - d_minus) / safe, 0.0)


def per_example_loss(params, x: jax.Array, y: jax.Array,
                     prototype_labels: jax.Array, *,
                     phi_kind: str = "identity") -> jax.Array:
  """Φ(μ(x_i)) for every row of a batch, shape (n,).

  The winning prototypes are chosen by argmin, so each example's gradient
  reaches exactly one correct and one wrong prototype (ties broken by the
  lower index), and the distances are differentiated in the direct form
  ‖Ω(x − w)‖² for accuracy.
  """
  fw = forward(params, x, y, prototype_labels)
  z, p = project(params, x)
  d_plus = jnp.sum((z - p[fw.plus]) ** 2, axis=1)
  d_minus = jnp.sum((z - p[fw.minus]) ** 2, axis=1)
  return phi(relative_difference(d_plus, d_minus), phi_kind)


def cost(params, x: jax.Array, y: jax.Array, prototype_labels: jax.Array,
         *, phi_kind: str = "identity", weights: jax.Array | None = None
         ) -> jax.Array:
  """E = Σᵢ Φ(μᵢ) (optionally weighted, e.g. by a batch mask)."""
  losses = per_example_loss(params, x, y, prototype_labels,
                            phi_kind=phi_kind)
  if weights is not None:
    losses = losses * weights
  return jnp.sum(losses)


def example_loss(params, x: jax.Array, y: jax.Array,
                 prototype_labels: jax.Array, *,
                 phi_kind: str = "identity") -> jax.Array:
  """Φ(μ) of a single example (x of shape (d,), y a scalar)."""
  return per_example_loss(params, x[None], y[None], prototype_labels,
                          phi_kind=phi_kind)[0]


def _check_features(params, x, prototype_labels) -> None:
  """Static shape checks: (n, d) rows, (m, d) prototypes, m labels."""
  protos = jnp.shape(params["prototypes"])
  if jnp.ndim(x) != 2 or len(protos) != 2 or jnp.shape(x)[1] != protos[1]:
    raise ValueError(
        f"x must be (n, d) with the prototypes' d, got x of shape "
        f"{jnp.shape(x)} and prototypes of shape {protos}.")
  if jnp.shape(prototype_labels) != (protos[0],):
    raise ValueError(
        f"prototype_labels must have shape ({protos[0]},), one class per "
        f"prototype, got {jnp.shape(prototype_labels)}.")


def predict(params, x: jax.Array, prototype_labels: jax.Array) -> jax.Array:
  """Winner-takes-all: the label of the closest prototype, shape (n,)."""
  _check_features(params, x, prototype_labels)
  z, p = project(params, x)
  dist = _expanded_distances(z, p)
  return prototype_labels[jnp.argmin(dist, axis=1)]


def error_rate(params, x: jax.Array, y: jax.Array,
               prototype_labels: jax.Array) -> jax.Array:
  """Fraction of rows whose predicted class index differs from y."""
  return jnp.mean((predict(params, x, prototype_labels) != y).astype(
      jnp.float32))
