"""The stages of one repeat of the program, one small function each.

A repeat is three stages: the bases (each participant's DP-PCA, and the
server's aggregate), the fits (each participant projects its rows on a
basis, clips them to norm ≤ 1 and trains its K objective-perturbation
classifiers) and the model (the server's average). Which function runs
each stage is looked up in the tables below from the mechanism's
description (:class:`federated.feddpdr.Mechanism`: does it reduce, is it
federated) and the settings (aggregation, top-k, model aggregation);
nothing compares a mechanism's name.

Per-participant steps map over the participant axis with
:func:`federated.sharding.over_participants` (a ``vmap``, or with a mesh
a ``shard_map`` of it; with a chunk, that many participants at a time),
once per bucket (:class:`federated.feddpdr.Layout`). ``nonpriv`` runs the
``feddpdr`` stages with the noise off by its traced numbers (σ = 0, θ = 0,
p = ∞, so DP-PCA adds 0·Z and each fit's b has radius Gamma/∞ = 0); with
``aggregation="distributed_moments"`` its secure sum has no shares (its
program's static parameters, :class:`federated.feddpdr.Program`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpcore import clipping
from dpcore import noise as dp_noise
from federated import aggregation, sharding
from federated.feddpdr import secure_moments
from federated.feddpdr.arrays import Layout, Traced
from federated.feddpdr.keys import protocol_keys, server_key
from federated.feddpdr.settings import Static, secure_sum_of
from mechanisms.erm import objective_perturbation as op
from mechanisms.pca import dp_pca

__all__ = ["Stages", "Step", "choose"]


class Step(NamedTuple):
  """What every stage of one repeat reads (built once per trace).

  Attributes:
    key: the repeat's key (the server's stream: :func:`server_key`).
    layout: the participants' rows, one array or buckets.
    traced: the plan's numbers, σ in the rows' dtype.
    pca_keys, fit_keys: (N,) every participant's keys.
    weights: (N,) the server's size weights.
    static: the program's settings.
    num_classes: K.
    mesh, chunk: how the participant axis is mapped (:func:`each`).
  """
  key: jax.Array
  layout: Layout
  traced: Traced
  pca_keys: jax.Array
  fit_keys: jax.Array
  weights: jax.Array
  static: Static
  num_classes: int
  mesh: object
  chunk: int | None

  def each(self, fn):
    """``fn`` mapped over the participant axis (on the mesh, by chunk)."""
    return sharding.over_participants(fn, mesh=self.mesh, chunk=self.chunk)


def _per_bucket(step: Step, fn, *per_participant):
  """``fn`` on each bucket's rows and its share of ``per_participant``."""
  return [fn(rows, *(step.layout.pick(a, which) for a in per_participant))
          for rows, which in step.layout.groups]


# The bases: each participant's (N, d, k), or (N, 0, 0) where it keeps
# none, and the server's (d, k), zeros where there is none.

def _no_local_bases(step: Step):
  return jnp.zeros((step.layout.count, 0, 0), step.layout.dtype)


def _no_global_basis(step: Step):
  return jnp.zeros((step.layout.dim, step.static.k), step.layout.dtype)


def _no_bases(step: Step):
  return _no_local_bases(step), _no_global_basis(step)


def _local_bases(step: Step):
  """Every participant's DP-PCA basis of its own rows."""
  static = step.static
  local_pca = step.each(
      lambda kk, xi, mi, si: dp_pca.noisy_basis(
          kk, xi, mi, k=static.k, sigma=si, topk=static.topk).components)
  return step.layout.in_order(_per_bucket(
      step, lambda rows, kk, si: local_pca(kk, rows.x, rows.mask, si),
      step.pca_keys, step.traced.sigma))


def _server_topk(step: Step) -> dict:
  """The server's top-k settings: exact, or subspace iteration started
  from :func:`server_key` (post-processing: never a noise key)."""
  if step.static.topk == "subspace":
    return {"topk": "subspace", "key": server_key(step.key)}
  return {}


def _own_bases(step: Step):
  return _local_bases(step), _no_global_basis(step)


def _subspace_bases(step: Step):
  """Local DP-PCA, then the top k of Σ wᵢÛᵢÛᵢᵀ at the server."""
  bases = _local_bases(step)
  return bases, aggregation.subspace_aggregate(bases, step.weights,
                                               **_server_topk(step))


def _paper_bases(step: Step):
  """Local DP-PCA, then (1/N) Σ wᵢÛᵢ at the server (as printed)."""
  bases = _local_bases(step)
  return bases, aggregation.paper_aggregate(bases, step.weights)


def _moment_bases(step: Step):
  """The participants release XᵢᵀXᵢ + Zᵢ; the server's top k of the sum.

  What DP-PCA releases, with the same noise key as its ``topk="eigh"``
  path; no local basis is computed. The sum of the releases
  mᵢ + mirror(zᵢ) is computed as Σ mᵢ + mirror(Σ zᵢ)
  (:func:`dp_pca.second_moment_and_noise`): the same matrix, one
  mirroring instead of N.
  """
  summed = aggregation.summed_over_participants(
      lambda kk, xi, mi, si: dp_pca.second_moment_and_noise(
          kk, xi, mi, sigma=si), mesh=step.mesh, chunk=step.chunk)
  parts = _per_bucket(step, lambda rows, kk, si: summed(kk, rows.x,
                                                        rows.mask, si),
                      step.pca_keys, step.traced.sigma)
  total = sum(m for m, _ in parts) + dp_noise.symmetric_from_upper(
      sum(z for _, z in parts), step.layout.dim)
  return _no_local_bases(step), aggregation.moments_aggregate(
      total, step.static.k, **_server_topk(step))


def _secure_moment_bases(step: Step):
  """The participants' upper(XᵢᵀXᵢ), summed under secure aggregation with
  discrete Gaussian shares (:mod:`federated.feddpdr.secure_moments`); the
  server's top k of the decoded sum.

  Each participant encodes and masks its message with its DP-PCA key
  (inside its map); the server sees the masked messages only, in
  participant order, and what :func:`secure_moments.server_moments`
  decodes from the sum of those that arrive: every one but the last
  ``dropouts`` (the program's, :class:`federated.feddpdr.Program`), with
  its threshold ``min_survivors``. No local basis is computed.
  """
  params = secure_sum_of(step.traced)
  dropouts = getattr(step.static, "dropouts", 0)
  rotation_key, setup_key = protocol_keys(step.key)
  count = step.layout.count
  alive = jnp.arange(count) < count - dropouts
  encode = step.each(lambda kk, xi, mi, i: secure_moments.message(
      kk, rotation_key, setup_key, i, xi, mi, params=params, count=count))
  masked = step.layout.in_order(_per_bucket(
      step, lambda rows, kk, i: encode(kk, rows.x, rows.mask, i),
      step.pca_keys, jnp.arange(count, dtype=jnp.int32)))
  total = secure_moments.server_moments(
      masked, alive, rotation_key, setup_key, params=params,
      dim=step.layout.dim,
      min_survivors=getattr(step.static, "min_survivors", None))
  return _no_local_bases(step), aggregation.moments_aggregate(
      total.astype(step.layout.dtype), step.static.k, **_server_topk(step))


_SERVER_BASES = {"subspace": _subspace_bases, "paper": _paper_bases,
                 "moments": _moment_bases,
                 "distributed_moments": _secure_moment_bases}


# The fits: each participant projects on a basis (or none) and fits.

def _fit(step: Step, kk, xi, yi, mi, ni, pi, ti, gi, basis):
  """One participant's K fits on its rows projected on ``basis`` (the
  raw features for None), clipped to norm ≤ 1."""
  static = step.static
  z = xi if basis is None else xi @ basis
  z = clipping.clip_rows(z.astype(jnp.float64))
  return op.one_vs_rest(
      kk, z, yi, mi.astype(jnp.float64), num_classes=step.num_classes,
      num_examples=ni, p=pi, theta=ti, epsilon_gap=gi, lam=static.lam,
      loss=static.loss,
      h=static.huber_h, tol=static.tol, max_iter=static.max_iter,
      private=True)


def _fits(step: Step, local_fit, *own):
  """``local_fit`` over every bucket, in the original order."""
  t = step.traced
  return step.layout.in_order(_per_bucket(
      step, lambda rows, *a: local_fit(a[0], rows.x, rows.y, rows.mask,
                                       *a[1:]),
      step.fit_keys, t.sizes, t.p, t.theta, t.epsilon_gap, *own))


def _fit_raw(step: Step, bases, global_basis):
  del bases, global_basis
  return _fits(step, step.each(lambda *a: _fit(step, *a, None)))


def _fit_global(step: Step, bases, global_basis):
  del bases
  return _fits(step, step.each(lambda *a: _fit(step, *a, global_basis)))


def _fit_own(step: Step, bases, global_basis):
  del global_basis
  return _fits(step, step.each(lambda *a: _fit(step, *a)), bases)


# The model: the server's average of the participants' classifiers.

def _no_model(step: Step, betas):
  del step
  return jnp.zeros(betas.shape[1:], betas.dtype)


def _weighted_model(step: Step, betas):
  return aggregation.model_aggregate(betas, step.weights, paper=False)


def _paper_model(step: Step, betas):
  return aggregation.model_aggregate(betas, step.weights, paper=True)


_MODELS = {"weighted": _weighted_model, "paper": _paper_model}


class Stages(NamedTuple):
  """The functions of one program's three stages.

  Attributes:
    bases: ``(step) -> (bases, global_basis)``.
    fits: ``(step, bases, global_basis) -> FitResult`` of every
      participant.
    model: ``(step, betas) -> global_betas``.
  """
  bases: Callable
  fits: Callable
  model: Callable


# By the mechanism's description: (reduces, federated) -> bases, fits.
_BY_DESCRIPTION = {
    (False, False): (lambda static: _no_bases, _fit_raw),
    (True, False): (lambda static: _own_bases, _fit_own),
    (True, True): (lambda static: _SERVER_BASES[static.aggregation],
                   _fit_global),
}


def choose(static: Static) -> Stages:
  """The stages of the program ``static`` selects."""
  mech = static.description
  bases, fits = _BY_DESCRIPTION[mech.reduces, mech.federated]
  model = _MODELS[static.model_aggregation] if mech.federated else _no_model
  return Stages(bases(static), fits, model)
