"""Multi-process harness of one FedDPDR configuration (no flags).

Every process calls the same function with the same arguments, after
:func:`federated.distributed.initialize`. Every process draws the same
partition from the seed, as :func:`launch.experiments.feddpdr.run_one`
does, but keeps only the rows of its own block of participants
(:func:`federated.distributed.local_block`); the library's one
orchestration, :func:`federated.feddpdr.execute`, places them on the
process's own devices (the participant axis spans every process's
devices), trains, gathers and sums up, as for one process. Process 0
emits the record (the fields of ``launch.experiments.feddpdr.run_one``,
with ``processes``, ``devices`` over all processes, and
``devices_per_process``; timings and memory peaks are process 0's); the
others return it without writing.
``docs/distributed.md`` gives the commands.
"""

from __future__ import annotations

import jax
import numpy as np

from dpcore import validation
from federated import distributed, feddpdr, partition
from launch import common
from launch.experiments import feddpdr as single

__all__ = ["budget_table", "is_reporter", "local_participants",
           "partition_rows", "run_one"]


def partition_rows(key: jax.Array, n: int, sizes) -> list[np.ndarray]:
  """Each participant's training-row indices, as ``partition.partition``
  draws them from ``key`` (it partitions the indices 0 … n − 1 here, so
  the draw is the library's own)."""
  rows = partition.partition(key, np.zeros((n, 1), np.float32),
                             np.arange(n), sizes=sizes)
  return [rows.y[i][:size] for i, size in enumerate(rows.sizes)]


def local_participants(prepared: single.Prepared, *, sizes, seed: int,
                       mesh) -> partition.Participants:
  """This process's block of the seed's partition (rows, labels, mask)."""
  picks = partition_rows(jax.random.fold_in(jax.random.key(seed), 0),
                         len(prepared.y_train), sizes)
  start, stop = distributed.local_block(mesh, len(sizes))
  used = np.concatenate(picks)
  # Every process checks every participant's rows (cheap, and the same
  # verdict everywhere), so a bad row stops all processes before they
  # meet in a collective.
  validation.check_row_norms(prepared.x_train[used], "x_train")
  return partition.pad([prepared.x_train[p] for p in picks[start:stop]],
                       [prepared.y_train[p] for p in picks[start:stop]])


def is_reporter() -> bool:
  """Process 0 prints and writes; the others stay quiet."""
  return jax.process_index() == 0


def run_one(prepared: single.Prepared, *, sizes, seed: int, seeds: int,
            config: feddpdr.Config, timing_repeats: int = 1,
            extra: dict | None = None,
            participant_chunk: int | None = None) -> dict:
  """One experiment over every process's devices.

  The library's :func:`federated.feddpdr.execute` on this process's block
  and a mesh over every process (timed by
  :func:`launch.experiments.feddpdr.timed_execute`). The partition, keys
  and calibration are those of :func:`launch.experiments.feddpdr.run_one`
  for the same arguments, so the record's results equal the one-process
  run's up to rounding.

  Raises:
    ValueError: bad settings, or a participant count that does not split
      over the devices (:func:`federated.distributed.global_mesh`).
  """
  chunk = feddpdr.check_chunk(participant_chunk)
  sizes = tuple(sizes)
  mesh = distributed.global_mesh(len(sizes))
  local = local_participants(prepared, sizes=sizes, seed=seed, mesh=mesh)
  outcome, timing = single.timed_execute(
      jax.random.fold_in(jax.random.key(seed), 1), local, prepared,
      config=config, seeds=seeds, timing_repeats=timing_repeats, mesh=mesh,
      chunk=chunk, sizes=sizes)
  extra = {"devices_per_process": len(jax.local_devices()), **(extra or {})}
  return single.make_record(prepared, sizes=sizes, seed=seed, seeds=seeds,
                            config=config,
                            result=single.summary_record(outcome.summary),
                            timing=timing, devices=int(mesh.size),
                            chunk=outcome.chunk, extra=extra)


def budget_table(prepared: single.Prepared, setting: single.Setting, *,
                 sizes, participant_chunk: int | None = None) -> list[dict]:
  """The table of ``launch.feddpdr`` over every process.

  As :func:`launch.experiments.feddpdr.budget_table` (the baseline, then
  the mechanism at each ε; no Fed DP-SGD rows): process 0 emits each
  record and prints the table.
  """
  s = setting
  configs = s.configs()
  records = []
  for i, config in enumerate(configs):
    if is_reporter():
      eps = f" eps={config.epsilon:g}" if config.private else ""
      common.progress(f"{i + 1}/{len(configs)} "
                      f"{single.LABELS[config.mechanism]}{eps} on "
                      f"{jax.process_count()} processes ...")
    record = run_one(prepared, sizes=sizes, seed=s.seed, seeds=s.seeds,
                     config=config, participant_chunk=participant_chunk,
                     extra={"sweep": "budget_table"})
    if is_reporter():
      common.emit_record(record, s.out)
    records.append(record)
  if is_reporter():
    common.progress("done\n" + single.format_table(records))
  return records
