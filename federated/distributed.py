"""FedDPDR over several processes, with JAX's own distribution.

After :func:`initialize` (``jax.distributed.initialize``), ``jax.devices()``
lists the devices of every process. :func:`global_mesh` lays the
participant axis over all of them, each process's devices side by side, so
that each process holds one contiguous block of participants
(:func:`participant_block`). Each process loads only its own participants'
rows and turns them into global arrays (:func:`place_local`, with
``jax.make_array_from_process_local_data``;
:func:`federated.feddpdr.global_train_arguments` for FedDPDR); the repeat
keys and the calibration are replicated (:func:`replicate`), computed
alike in every process from the seed and the participant sizes.
:func:`federated.feddpdr.train` then runs
unchanged: per-participant steps (DP-PCA, projections, fits) stay on the
device holding the participant (``shard_map``,
:func:`federated.sharding.over_participants`), and only the server's
weighted sums of bases and models cross processes, as XLA's collectives
(gloo on the CPU). Participant i's keys are ``fold_in(key, i)``
(:func:`federated.feddpdr.participant_keys`), so a run gives the same
bases and models on one device, several devices or several processes.

After training, :func:`gather` copies to every process what the server
reports: the global basis and model (replicated already), the fits'
diagnostics and, when asked, every participant's basis and model.
:func:`federated.feddpdr.execute` does all of this when its mesh spans
several processes (:func:`spans_processes`). Nothing here knows FedDPDR's
types: :mod:`federated.feddpdr` imports this module, never the other way.

Every check here is host-side and runs before any program is compiled.

>>> participant_block([0, 0, 1, 1], 8, process=1)
(4, 8)
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dpcore import validation
from federated import sharding

__all__ = [
    "check_settings", "gather", "global_mesh", "initialize",
    "local_block", "participant_block", "place_local", "replicate",
    "spans_processes",
]

def initialize(coordinator_address: str | None = None,
               num_processes: int | None = None,
               process_id: int | None = None) -> None:
  """Joins a multi-process run (``jax.distributed.initialize``, checked).

  Call it once per process, before any JAX computation. Leave all three
  arguments None to let JAX detect them from the cluster's environment
  (Slurm, Open MPI, TPU, or ``mpi4py``); otherwise give all three.

  Args:
    coordinator_address: ``host:port`` of process 0's coordinator service,
      the same in every process (e.g. ``127.0.0.1:1234`` on one machine).
    num_processes: how many processes take part (≥ 1).
    process_id: this process's index, in ``[0, num_processes)``.

  Raises:
    ValueError: some arguments given but not all, or a bad value; the
      message names the argument and the fix.
  """
  given = {"coordinator_address": coordinator_address,
           "num_processes": num_processes, "process_id": process_id}
  missing = [name for name, value in given.items() if value is None]
  if missing and len(missing) < len(given):
    raise ValueError(
        f"{', '.join(missing)} not given; give coordinator_address, "
        f"num_processes and process_id together, or none of them to let "
        f"JAX detect them from the cluster's environment.")
  if not missing:
    check_settings(coordinator_address, num_processes, process_id)
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes,
                             process_id=process_id)


def check_settings(coordinator_address: str, num_processes: int,
                   process_id: int) -> None:
  """Checks explicit :func:`initialize` settings (no JAX call).

  Raises:
    ValueError: one line naming the argument and the fix.
  """
  address, count, pid = "coordinator_address", "num_processes", "process_id"
  if not isinstance(coordinator_address, str):
    raise ValueError(f"{address} must be a 'host:port' string, got "
                     f"{coordinator_address!r}.")
  host, _, port = coordinator_address.rpartition(":")
  if not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ValueError(
        f"{address}={coordinator_address!r} must be 'host:port' with a port "
        f"in 1..65535, e.g. '127.0.0.1:1234' on one machine or "
        f"'node0:1234' on a cluster (process 0's host).")
  num_processes = validation.check_positive_int(num_processes, count)
  if (isinstance(process_id, bool)
      or not isinstance(process_id, (int, np.integer))
      or not 0 <= process_id < num_processes):
    raise ValueError(
        f"{pid}={process_id!r} must be an integer in [0, {num_processes}) "
        f"for {count}={num_processes}; number the processes 0, 1, ..., "
        f"{num_processes - 1}.")


def global_mesh(num_participants: int,
                devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A 1-D participant mesh over every device of every process.

  Devices are ordered by process, then id, so each process's devices are
  contiguous on the mesh and it holds one block of participants.

  Args:
    num_participants: N; it must be a multiple of the device count, so
      that every device (and every process) holds N / devices
      participants.
    devices: default ``jax.devices()`` (all processes' devices).

  Raises:
    ValueError: N does not split evenly over the devices.
  """
  num_participants = validation.check_positive_int(num_participants,
                                                   "num_participants")
  devices = sorted(jax.devices() if devices is None else devices,
                   key=lambda dev: (dev.process_index, dev.id))
  if not devices:
    raise ValueError("global_mesh needs at least one device.")
  count = len(devices)
  if num_participants % count:
    processes = len({dev.process_index for dev in devices})
    raise ValueError(
        f"num_participants={num_participants} does not split over the "
        f"{count} devices of {processes} process(es); use a multiple of "
        f"{count} participants, or fewer devices per process (on the CPU, "
        f"XLA_FLAGS=--xla_force_host_platform_device_count=...).")
  return Mesh(np.asarray(devices), (sharding.AXIS,))


def spans_processes(mesh: Mesh) -> bool:
  """Whether ``mesh`` has devices of more than one process."""
  return len({dev.process_index for dev in mesh.devices.flat}) > 1


def participant_block(device_processes: Sequence[int], num_participants: int,
                      *, process: int) -> tuple[int, int]:
  """The participants ``[start, stop)`` that ``process`` holds.

  Args:
    device_processes: the process index of each mesh device, in mesh order.
    num_participants: N, a multiple of the device count.
    process: the process asked about.

  Raises:
    ValueError: N does not split over the devices, the process has no
      device on the mesh, or its devices are not contiguous.
  """
  device_processes = [int(p) for p in device_processes]
  count = len(device_processes)
  if count == 0 or num_participants % count:
    raise ValueError(
        f"num_participants={num_participants} does not split over "
        f"{count} devices; use a multiple of {max(count, 1)} participants.")
  where = [i for i, p in enumerate(device_processes) if p == process]
  if not where:
    raise ValueError(
        f"process {process} has no device on the mesh (device processes "
        f"{device_processes}); build the mesh with global_mesh().")
  if where != list(range(where[0], where[-1] + 1)):
    raise ValueError(
        f"process {process}'s devices are not contiguous on the mesh "
        f"(device processes {device_processes}); build the mesh with "
        f"global_mesh(), which orders devices by process.")
  per_device = num_participants // count
  return where[0] * per_device, (where[-1] + 1) * per_device


def local_block(mesh: Mesh, num_participants: int) -> tuple[int, int]:
  """This process's block of participants on ``mesh`` (``[start, stop)``)."""
  return participant_block([dev.process_index for dev in mesh.devices.flat],
                           num_participants, process=jax.process_index())


def place_local(array, mesh: Mesh, num_participants: int) -> jax.Array:
  """This process's block of a per-participant array, as a global array.

  Args:
    array: (stop − start, ...) the rows of :func:`local_block`'s
      participants, in order.
    mesh: :func:`global_mesh`'s mesh.
    num_participants: N, the global length of the participant axis.
  """
  start, stop = local_block(mesh, num_participants)
  array = np.asarray(array)
  if array.ndim == 0 or array.shape[0] != stop - start:
    raise ValueError(
        f"this process holds participants {start}..{stop - 1}, so its "
        f"array needs a leading axis of {stop - start}, got shape "
        f"{array.shape}.")
  return jax.make_array_from_process_local_data(
      NamedSharding(mesh, PartitionSpec(sharding.AXIS)), array,
      (num_participants,) + array.shape[1:])


def replicate(value, mesh: Mesh) -> jax.Array:
  """``value`` on every device of ``mesh``; it must be equal everywhere."""
  return jax.make_array_from_process_local_data(
      NamedSharding(mesh, PartitionSpec()), value)


def gather(tree):
  """Every process's blocks of ``tree``, as host arrays in every process.

  Replicated arrays are copied as they are; arrays split over the
  participant axis are gathered whole (``process_allgather``, tiled).
  Leave out what is not needed as None (a leaf-free node): e.g. the
  per-participant models when only the server's are reported.
  """
  return jax.tree.map(np.asarray,
                      multihost_utils.process_allgather(tree, tiled=True))
