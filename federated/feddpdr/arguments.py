"""The program's arguments: the participants' rows and the plan's numbers,
checked, typed and placed.

:func:`train_arguments` places them on one process (on its devices with a
mesh); :func:`global_train_arguments` makes global arrays of each
process's own block when the mesh spans several processes
(:mod:`federated.distributed`). Either gives ``(keys, rows, traced)``,
the positional arguments of :func:`federated.feddpdr.train`, and
:class:`TrainingJob` is that call.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import validation
from federated import distributed, sharding
from federated.feddpdr.arrays import Bucketed, Rows, Traced, TrainOutput
from federated.feddpdr.settings import Config, Static, program
from federated.feddpdr.training import train
from federated.partition import Buckets, Participants

__all__ = [
    "Calibration", "TrainingJob", "check_data", "global_train_arguments",
    "train_arguments",
]


class Calibration(Protocol):
  """What the arguments read of a plan (a
  :class:`federated.feddpdr.FedDPDRPlan`): every participant's σ, size, p,
  θ and ε_g (host arrays, in participant order), the
  experiment, K and the secure sum's parameters (None but for
  distributed_moments)."""
  sigma: np.ndarray
  sizes: np.ndarray
  p: np.ndarray
  theta: np.ndarray
  epsilon_gap: np.ndarray
  config: Config
  num_classes: int
  secure_sum: object


def check_data(participants: Participants | Buckets, x_test, y_test, *,
               num_classes: int) -> None:
  """Host-side input checks (finite data, ‖x‖ ≤ 1, labels in [0, K))."""
  sizes = np.asarray(participants.sizes)
  if np.any(sizes < 1):
    raise ValueError(
        f"participant {int(np.argmin(sizes))} has no rows; every "
        f"participant needs at least one row.")
  groups = (participants.groups if isinstance(participants, Buckets)
            else (participants,))
  for group in groups:
    mask = np.asarray(group.mask) > 0
    # The plan is made from the sizes: its weights, n in each fit and the
    # secure sum's row bound. A mask that counts other rows than the
    # sizes would train on what the plan does not describe.
    counts = mask.sum(axis=1)
    if not np.array_equal(counts, np.asarray(group.sizes)):
      bad = int(np.flatnonzero(counts != np.asarray(group.sizes))[0])
      raise ValueError(
          f"participants.mask marks {int(counts[bad])} rows of a "
          f"participant whose size is {int(np.asarray(group.sizes)[bad])}; "
          f"the mask's rows must be the sizes (federated.partition builds "
          f"both).")
    if not np.all(np.isfinite(np.asarray(group.x))):
      raise ValueError("participants.x has non-finite values (padding "
                       "included: a padding row is multiplied by 0, and "
                       "NaN·0 is NaN); pad with zeros.")
    validation.check_row_norms(np.asarray(group.x)[mask], "participants.x")
    validation.check_labels(np.asarray(group.y)[mask], "participants.y",
                            classes=range(num_classes))
  x_test = validation.check_row_norms(x_test, "x_test")
  if x_test.shape[1] != np.shape(groups[0].x)[-1]:
    raise ValueError(
        f"x_test has {x_test.shape[1]} features, the participants' rows "
        f"{np.shape(groups[0].x)[-1]}; use the same features.")
  validation.check_labels(y_test, "y_test", classes=range(num_classes),
                          num_examples=np.asarray(x_test).shape[0])


def _traced(plan: Calibration, which=slice(None)) -> tuple:
  """The plan's numbers of participants ``which``, with their dtypes."""
  return ((plan.sigma[which], jnp.float32), (plan.sizes[which], jnp.float64),
          (plan.p[which], jnp.float64), (plan.theta[which], jnp.float64),
          (plan.epsilon_gap[which], jnp.float64))


def _rows(participants: Participants) -> tuple:
  return ((participants.x, jnp.float32), (participants.y, jnp.int32),
          (participants.mask, jnp.float32))


def train_arguments(key: jax.Array, participants: Participants | Buckets,
                    plan: Calibration, *, seeds: int,
                    mesh=None) -> tuple[jax.Array, Rows | Bucketed, Traced]:
  """The positional arguments of :func:`federated.feddpdr.train`, placed.

  Call under ``jax.enable_x64(True)`` (the fits' arrays are float64).

  Args:
    key: PRNG key; repeat s uses ``split(key, seeds)[s]``.
    participants: padded data (:mod:`federated.partition`), or
      :class:`federated.partition.Buckets` (then the rows are
      :class:`Bucketed`).
    plan: :func:`federated.feddpdr.make_plan`'s calibration for these
      participants.
    seeds: number of repeats.
    mesh: optional participant mesh; per-participant arrays are split
      over it, the keys replicated (one padded array only).

  Returns:
    ``(keys, rows, traced)``.
  """
  if not np.array_equal(np.asarray(participants.sizes), plan.sizes):
    raise ValueError(
        f"participants have sizes {np.asarray(participants.sizes).tolist()},"
        f" the plan {plan.sizes.astype(int).tolist()}: the fits' n and the "
        f"weights are the plan's; make the plan from these participants.")
  keys = jax.random.split(key, seeds)
  if isinstance(participants, Buckets):
    if mesh is not None:
      raise ValueError("bucketed participants cannot be sharded over a "
                       "mesh; use partition.partition (one padded array) "
                       "with a mesh, or leave out the mesh.")
    groups = tuple(Rows(*(jnp.asarray(a, t) for a, t in _rows(g)))
                   for g in participants.groups)
    index = tuple(jnp.asarray(i, jnp.int32) for i in participants.index)
    return (keys, Bucketed(groups, index),
            Traced(*(jnp.asarray(a, t) for a, t in _traced(plan)),
                   secure_sum=plan.secure_sum))
  rows = Rows(*(sharding.place(jnp.asarray(a, t), mesh)
                for a, t in _rows(participants)))
  traced = Traced(*(sharding.place(jnp.asarray(a, t), mesh)
                    for a, t in _traced(plan)),
                  secure_sum=plan.secure_sum)
  return sharding.place(keys, mesh, split=False), rows, traced


def _pad_rows(array, n_max: int):
  """Zero padding along axis 1 up to ``n_max`` (every process alike)."""
  array = np.asarray(array)
  extra = n_max - array.shape[1]
  if extra < 0:
    raise ValueError(f"local participants have {array.shape[1]} rows, more "
                     f"than the largest size {n_max} in the plan.")
  widths = [(0, 0), (0, extra)] + [(0, 0)] * (array.ndim - 2)
  return np.pad(array, widths)


def global_train_arguments(key: jax.Array, local: Participants,
                           plan: Calibration, *, seeds: int, mesh
                           ) -> tuple[jax.Array, Rows, Traced]:
  """The arguments of :func:`federated.feddpdr.train`, as global arrays.

  :func:`train_arguments` over several processes
  (:func:`federated.distributed.global_mesh`). Call under
  ``jax.enable_x64(True)``, with the same ``key``, ``plan`` and ``seeds``
  in every process.

  Args:
    key: PRNG key; repeat s uses ``split(key, seeds)[s]`` (replicated).
    local: this process's participants only
      (:func:`federated.distributed.local_block`'s block, in order); they
      are padded to the largest participant of the whole run, so every
      process's block has the same shape.
    plan: :func:`federated.feddpdr.make_plan`'s calibration of all N
      participants (from their sizes, known to every process).
    seeds: number of repeats.
    mesh: :func:`federated.distributed.global_mesh`'s mesh.

  Returns:
    ``(keys, rows, traced)``.
  """
  seeds = validation.check_positive_int(seeds, "seeds")
  count = len(plan.sizes)
  start, stop = distributed.local_block(mesh, count)
  sizes = np.asarray(local.sizes)
  if not np.array_equal(sizes, plan.sizes[start:stop]):
    raise ValueError(
        f"local participants have sizes {sizes.tolist()}, but the plan's "
        f"participants {start}..{stop - 1} have sizes "
        f"{plan.sizes[start:stop].astype(int).tolist()}; give this process "
        f"the block local_block() names.")
  n_max = int(np.max(plan.sizes))

  def place(pairs):
    return (distributed.place_local(np.asarray(a, t), mesh, count)
            for a, t in pairs)

  rows = Rows(*place((_pad_rows(a, n_max), t) for a, t in _rows(local)))
  secure_sum = (None if plan.secure_sum is None else jax.tree.map(
      lambda a: distributed.replicate(np.asarray(a), mesh), plan.secure_sum))
  traced = Traced(*place(_traced(plan, slice(start, stop))),
                  secure_sum=secure_sum)
  keys = jax.random.split(key, seeds)
  return distributed.replicate(keys, mesh), rows, traced


@dataclasses.dataclass(frozen=True, eq=False)
class TrainingJob:
  """One call of :func:`train`, as :func:`federated.feddpdr.execute` is
  about to make it.

  ``job()`` makes the call. A harness that times or compiles the training
  itself (``feddpdr.execute(..., train_with=...)``) is handed the job and
  returns its outputs: ``job()``'s, or those of the same program on
  ``job.args`` (e.g. a stored, precompiled copy of it).

  Attributes:
    args: the positional arguments of :func:`train`, ``(keys, rows,
      traced)`` (placed arrays).
    program: the :class:`Static` of the compiled program (:func:`program`;
      a :class:`Program` with the secure sum's threshold and dropouts for
      ``aggregation="distributed_moments"``).
    num_classes: K.
    mesh: the participant mesh, or None.
    chunk: the participants mapped at once, or None for all.
  """
  args: tuple
  program: Static
  num_classes: int
  mesh: object = None
  chunk: int | None = None

  @classmethod
  def of(cls, key: jax.Array, plan: Calibration,
         participants: Participants | Buckets, *, seeds: int, mesh=None,
         chunk: int | None = None) -> TrainingJob:
    """The :func:`train` call of ``plan`` on ``participants``: their
    arguments placed on ``mesh`` (global arrays when it spans several
    processes). Call under ``enable_x64``."""
    if mesh is not None and distributed.spans_processes(mesh):
      args = global_train_arguments(key, participants, plan, seeds=seeds,
                                    mesh=mesh)
    else:
      args = train_arguments(key, participants, plan, seeds=seeds,
                             mesh=mesh)
    return cls(args, program(plan.config), plan.num_classes, mesh, chunk)

  def __call__(self) -> TrainOutput:
    return train(*self.args, config=self.program,
                 num_classes=self.num_classes, mesh=self.mesh,
                 chunk=self.chunk)
