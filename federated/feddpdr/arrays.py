"""The compiled program's arguments and outputs, as pytrees.

:func:`federated.feddpdr.train` takes three arguments besides its static
settings: the repeats' keys, the participants' rows (:class:`Rows`, or
:class:`Bucketed` rows) and the plan's traced numbers (:class:`Traced`);
it returns a :class:`TrainOutput`. :class:`Layout` is how the program's
stages see one padded array and buckets alike.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpcore import ddg

__all__ = ["Bucketed", "Layout", "Rows", "Traced", "TrainOutput"]


class Rows(NamedTuple):
  """Every participant's rows, padded to one length.

  Attributes:
    x: (N, n_max, d) float32 rows (‖x‖ ≤ 1), zeros where ``mask`` is 0.
    y: (N, n_max) int32 class indices.
    mask: (N, n_max) float32, 1 for real rows.
  """
  x: jax.Array
  y: jax.Array
  mask: jax.Array


class Bucketed(NamedTuple):
  """Participants in buckets of similar padded length.

  :class:`federated.partition.Buckets` as arrays: each bucket is its own
  map in the one program; every participant's keys come from its original
  index, and the outputs are in the original participant order.

  Attributes:
    groups: one :class:`Rows` per bucket.
    index: each bucket's (N_b,) int32 original participant indices.
  """
  groups: tuple
  index: tuple


class Traced(NamedTuple):
  """The plan's per-participant numbers, traced (not static).

  ε, δ and the calibration reach the program only through these, so runs
  at different budgets (and ``nonpriv``, the noise off) share one
  executable.

  Attributes:
    sigma: (N,) float32 DP-PCA noise σ.
    sizes: (N,) float64 true sizes.
    p: (N,) float64 objective-perturbation p (∞: no noise).
    theta: (N,) float64 objective-perturbation θ.
    epsilon_gap: (N,) float64 ε_g of each fit (:attr:`mechanisms.erm.
      objective_perturbation.ObjectivePerturbationPlan.epsilon_gap`): the
      fit sizes its gap noise from it and its own tol (∞: no noise).
    secure_sum: ``aggregation="distributed_moments"`` only: the secure
      sum's :class:`dpcore.ddg.DDGParams` (a pytree of its grid and
      share, which follow ε: one program for every budget here too).
  """
  sigma: jax.Array
  sizes: jax.Array
  p: jax.Array
  theta: jax.Array
  epsilon_gap: jax.Array
  secure_sum: ddg.DDGParams | None = None


class TrainOutput(NamedTuple):
  """Per-seed outputs (a leading seed axis S when vmapped).

  Attributes:
    bases: (N, d, k) the basis each participant's model uses (identity
      projection is not stored for ``dpml``: shape (N, 0, 0)).
    betas: (N, F, k) each participant's F classifiers.
    global_basis: (d, k) aggregated basis (federated mechanisms).
    global_betas: (F, k) aggregated model (federated mechanisms).
    grad_norm: (N, F) ‖∇J‖ at each returned fit.
    iterations: (N, F) L-BFGS iterations.
    converged: (N, F).
  """
  bases: jax.Array
  betas: jax.Array
  global_basis: jax.Array
  global_betas: jax.Array
  grad_norm: jax.Array
  iterations: jax.Array
  converged: jax.Array


class Layout(NamedTuple):
  """One repeat's participants as the stages map over them.

  Attributes:
    groups: ``(rows, original indices or None)`` per bucket; one entry,
      with None, for one padded array.
    count: N, every participant.
    dim: d, the data dimension.
    dtype: the rows' dtype.
  """
  groups: tuple
  count: int
  dim: int
  dtype: jnp.dtype

  @classmethod
  def of(cls, data: Rows | Bucketed, count: int) -> Layout:
    """The layout of ``data`` (N = ``count``)."""
    if isinstance(data, Bucketed):
      groups = tuple(zip(data.groups, data.index, strict=True))
    else:
      groups = ((data, None),)
    first = groups[0][0].x
    return cls(groups, count, first.shape[-1], first.dtype)

  @staticmethod
  def pick(values, which):
    """``values`` of one bucket's participants (all for None)."""
    return values if which is None else values[which]

  def in_order(self, parts: list):
    """Per-bucket outputs back in the original participant order."""
    if self.groups[0][1] is None:
      return parts[0]
    order = jnp.concatenate([which for _, which in self.groups])
    return jax.tree_util.tree_map(
        lambda *a: jnp.zeros((self.count,) + a[0].shape[1:], a[0].dtype)
        .at[order].set(jnp.concatenate(a)), *parts)
