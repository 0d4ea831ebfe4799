"""The compiled program: every repeat of a run, jitted once.

:func:`train` is one module-level ``jax.jit`` with static arguments: only
:func:`federated.feddpdr.program` of the config, K, the mesh, the chunk
and the arrays' shapes select the executable, so a sweep over ε or δ
reuses one (JAX's own cache), and ``nonpriv`` reuses the ``feddpdr`` one.
Repeats are a ``vmap`` over keys, the data and the plan's numbers being
shared.

Unequal sizes. Participants padded to one length waste the work done on
padding; :class:`federated.feddpdr.Bucketed` rows (participants grouped
by padded length, :class:`federated.partition.Buckets`) run each bucket as
its own map inside the one compiled program, every participant keyed by
its original index, so the results are those of the single padded array
up to rounding.
"""

from __future__ import annotations

from functools import partial

import jax

from federated import aggregation
from federated.feddpdr.arrays import Bucketed, Layout, Rows, Traced, TrainOutput
from federated.feddpdr.keys import participant_keys
from federated.feddpdr.settings import Config, Static, program
from federated.feddpdr.stages import Step, choose

__all__ = ["train"]


def _train_one(key, data: Rows | Bucketed, traced: Traced, *,
               config: Config | Static, num_classes: int, mesh=None,
               chunk=None) -> TrainOutput:
  """One repeat: the bases, the fits and the model (:func:`choose`'s).

  Each participant's projection, clipping and fits happen inside its map,
  so with ``chunk`` no intermediate is held for all N participants at
  once: only the inputs, the (N, d, k) bases and the outputs scale with N.
  With buckets, the bases and fits are put back in the original order
  before the server's steps, so the outputs do not depend on the
  bucketing (up to rounding).
  """
  static = program(config)
  stages = choose(static)
  count = traced.sigma.shape[0]
  layout = Layout.of(data, count)
  pca_keys, fit_keys = participant_keys(key, count)
  weights = aggregation.size_weights(traced.sizes)
  step = Step(key, layout,
              traced._replace(sigma=traced.sigma.astype(layout.dtype)),
              pca_keys, fit_keys, weights, static, num_classes, mesh, chunk)
  bases, global_basis = stages.bases(step)
  fits = stages.fits(step, bases, global_basis)
  return TrainOutput(bases, fits.beta, global_basis,
                     stages.model(step, fits.beta), fits.grad_norm,
                     fits.iterations, fits.converged)


@partial(jax.jit, static_argnames=("static", "num_classes", "mesh", "chunk"))
def _train_all(keys, data, traced, *, static: Static, num_classes: int,
               mesh, chunk) -> TrainOutput:
  fn = partial(_train_one, config=static, num_classes=num_classes, mesh=mesh,
               chunk=chunk)
  return jax.vmap(fn, in_axes=(0, None, None))(keys, data, traced)


def train(keys: jax.Array, data: Rows | Bucketed, traced: Traced, *,
          config: Config | Static, num_classes: int, mesh=None,
          chunk: int | None = None) -> TrainOutput:
  """All repeats (one per key, vmapped), jitted. Call under ``enable_x64``.

  Args:
    keys: (S,) PRNG keys, one per repeat.
    data: every participant's padded rows, or the same in buckets
      (:func:`federated.feddpdr.train_arguments` gives both). The outputs
      are in the original participant order either way.
    traced: the plan's σ, sizes, p and θ (traced).
    config: the experiment, or its :class:`Static` part (static).
    num_classes: K (static).
    mesh: optional participant mesh (static; :mod:`federated.sharding`).
    chunk: optional number of participants mapped at once (static; bounds
      peak memory, see :func:`sharding.over_participants`).

  Returns:
    :class:`federated.feddpdr.TrainOutput`, a leading axis of S repeats.

  Raises:
    ValueError: buckets with a mesh (not supported: give one padded array,
      or no mesh).
  """
  if isinstance(data, Bucketed) and mesh is not None:
    raise ValueError(
        "bucketed participants cannot be sharded over a mesh; pass one "
        "padded array (partition.partition) with the mesh, or leave out "
        "the mesh.")
  return _train_all(keys, data, traced, static=program(config),
                    num_classes=num_classes, mesh=mesh, chunk=chunk)
