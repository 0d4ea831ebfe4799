"""The participant axis across devices.

Participants are a leading array axis (:mod:`federated.partition`), and
every per-participant step is a ``vmap`` over it. With a
:func:`participant_mesh`, :func:`over_participants` turns that ``vmap``
into a ``shard_map``: each device maps its own block of participants (their
DP-PCA, projections and fits stay on the device that holds their rows),
and only the server steps — the weighted sums of bases and models — cross
devices, as XLA's collectives. Without a mesh (the default) it is the plain
``vmap``, so the numbers are the same either way (tested on forced host
devices: ``XLA_FLAGS=--xla_force_host_platform_device_count=4``).

>>> import jax
>>> mesh = participant_mesh(6, jax.devices()[:1])
>>> mesh.shape[AXIS]
1
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dpcore import validation

__all__ = [
    "AXIS",
    "over_participants",
    "participant_mesh",
    "place",
]

AXIS = "participants"


def participant_mesh(num_participants: int,
                     devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A 1-D mesh over the most devices whose count divides N.

  Args:
    num_participants: N, the length of the participant axis.
    devices: devices to use (default: ``jax.devices()``).

  Returns:
    A :class:`jax.sharding.Mesh` with one axis, :data:`AXIS`, of c devices,
    c the largest count ≤ ``len(devices)`` dividing N (each device then
    holds N/c participants; no participant is padded in or split).
  """
  num_participants = validation.check_positive_int(num_participants,
                                                   "num_participants")
  devices = list(jax.devices() if devices is None else devices)
  if not devices:
    raise ValueError("participant_mesh needs at least one device.")
  count = max(c for c in range(1, len(devices) + 1)
              if num_participants % c == 0)
  return Mesh(np.asarray(devices[:count]), (AXIS,))


def over_participants(fn: Callable, mesh: Mesh | None,
                      chunk: int | None = None) -> Callable:
  """``vmap(fn)`` over the leading participant axis of every argument.

  With a mesh, each device runs ``vmap(fn)`` on its block (``shard_map``;
  arguments and results are split along axis 0 over :data:`AXIS`).

  With ``chunk``, participants are mapped ``chunk`` at a time
  (``lax.map(..., batch_size=chunk)``: a loop over vmapped blocks, the last
  one shorter if needed), so the per-participant intermediates (DP-PCA's
  d × d matrices, its eigendecomposition) are held for ``chunk``
  participants at once rather than all N. Results are the same up to
  rounding; only peak memory and speed change.
  """
  if chunk is None:
    mapped = jax.vmap(fn)
  else:
    chunk = validation.check_positive_int(chunk, "chunk")

    def mapped(*args):
      return jax.lax.map(lambda a: fn(*a), args, batch_size=chunk)
  if mesh is None or mesh.shape[AXIS] == 1:
    return mapped
  spec = PartitionSpec(AXIS)
  # No collectives run inside (each participant is independent), so the
  # varying-axis type check, which optax's line-search loops trip, is off.
  return jax.shard_map(mapped, mesh=mesh, in_specs=spec, out_specs=spec,
                       check_vma=False)


def place(array, mesh: Mesh | None, *, split: bool = True):
  """Puts ``array`` on the mesh: split along axis 0, or replicated.

  Without a mesh, returns ``array`` unchanged.
  """
  if mesh is None:
    return array
  spec = PartitionSpec(AXIS) if split else PartitionSpec()
  return jax.device_put(array, NamedSharding(mesh, spec))
