"""The pipeline of a run: checks, calibration, memory, training, results.

:func:`execute` is the one place a run is put together: checks,
calibration (:func:`make_plan`), the participant chunk against a memory
budget (:func:`plan_chunk`), training (one padded array, buckets, a local
mesh, or a mesh over several processes, :mod:`federated.distributed`),
evaluation and the :class:`Summary` with its privacy record
(:func:`summarise`); :func:`run` returns that summary
(:func:`federated.feddpdr.release` is the plan's training release
alone). Timing, the stored programs, records and sweeps are the
harnesses' (``launch/experiments/feddpdr.py``,
``launch/experiments/distributed.py``), which call :func:`execute`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from dpcore import memory, validation
from federated import distributed
from federated.feddpdr.arguments import TrainingJob, check_data
from federated.feddpdr.arrays import TrainOutput
from federated.feddpdr.evaluation import evaluate
from federated.feddpdr.memory import plan_chunk
from federated.feddpdr.plan import FedDPDRPlan, make_plan
from federated.feddpdr.settings import Config, check_chunk
from federated.feddpdr.summary import Summary, summarise
from federated.partition import Buckets, Participants

__all__ = ["Outcome", "execute", "run"]


class Outcome(NamedTuple):
  """What :func:`execute` returns.

  Attributes:
    plan: :func:`make_plan`'s calibration of every participant.
    output: :func:`train`'s outputs (copied to every process's host when
      the mesh spans several processes).
    summary: :func:`summarise`'s :class:`Summary` (results and the
      privacy record).
    chunk: the participants mapped at once (None: all at once).
  """
  plan: FedDPDRPlan
  output: TrainOutput
  summary: Summary
  chunk: int | None


def _gather(out: TrainOutput, *, per_participant: bool) -> TrainOutput:
  """What the server reports, as host arrays in every process.

  The global basis and model, and the fits' diagnostics; with
  ``per_participant`` every participant's basis and model too (what the
  local mechanisms are scored on), else ``bases`` and ``betas`` are None.
  """
  return distributed.gather(
      out if per_participant else out._replace(bases=None, betas=None))


def execute(key: jax.Array, participants: Participants | Buckets, x_test,
            y_test, *, num_classes: int, config: Config, seeds: int = 1,
            mesh=None, participant_chunk: int | None = None,
            memory_budget: int | str | None = None, sizes=None,
            train_with=None) -> Outcome:
  """The pipeline: calibrates, trains ``seeds`` repeats, evaluates, sums up.

  The one orchestration of FedDPDR and its baselines: :func:`run`, the
  experiment harness (``launch.experiments.feddpdr.run_one``) and the
  multi-process harness (``launch.experiments.distributed``) all call it;
  they add timing and records.

  With a ``mesh`` over several processes (:mod:`federated.distributed`),
  every process calls this with the same arguments except
  ``participants``, its own block (:func:`distributed.local_block`), and
  ``sizes`` gives every participant's rows; the arrays become global ones
  (:func:`global_train_arguments`), and the outputs are copied to
  every process (:func:`federated.distributed.gather`) before the
  evaluation.

  Args:
    key: PRNG key; repeat s uses ``split(key, seeds)[s]``.
    participants: padded data, labels as class indices in [0, K), or the
      same in buckets (:func:`federated.partition.bucket`; not with a
      mesh): the results are the same up to rounding.
    x_test, y_test: held-out rows (‖x‖ ≤ 1) and class indices.
    num_classes: K.
    config: the experiment.
    seeds: repeats, vmapped over keys (the partition is the caller's).
    mesh: optional participant mesh (:func:`sharding.participant_mesh`, or
      :func:`distributed.global_mesh` over several processes): the
      participant axis is split over its devices; results are the same.
    participant_chunk: map this many participants at a time (default: all
      at once, or what ``memory_budget`` allows). Peak memory then grows
      with the chunk, not with N; results are the same up to rounding.
    memory_budget: bytes the training may use: the chunk is checked
      against it, or chosen by it (:func:`plan_chunk`); None (default):
      no limit, unchecked; ``"auto"``: 3/4 of the memory available now
      (:func:`dpcore.memory.resolve_budget`).
    sizes: every participant's rows; default ``participants.sizes``
      (required with a mesh over several processes).
    train_with: optional ``f(job) -> TrainOutput`` that makes the
      training call (:class:`TrainingJob`), e.g. to time it; default
      ``job()``.

  Returns:
    :class:`Outcome`.

  Raises:
    ValueError: bad settings or data; the memory budget cannot be met.
    ConvergenceError: a fit hit ``max_iter``.
  """
  validation.check_key(key)
  seeds = validation.check_positive_int(seeds, "seeds")
  chunk = check_chunk(participant_chunk)
  several = mesh is not None and distributed.spans_processes(mesh)
  if sizes is None:
    if several:
      raise ValueError(
          "sizes not given: over several processes each holds only its "
          "own participants; pass every participant's rows as sizes=.")
    sizes = participants.sizes
  elif not several and not np.array_equal(np.asarray(sizes),
                                          np.asarray(participants.sizes)):
    raise ValueError(
        f"sizes={np.asarray(sizes).tolist()} are not the participants' "
        f"sizes {np.asarray(participants.sizes).tolist()}; in one process "
        f"leave sizes out (they are read from the participants).")
  first = (participants.groups[0] if isinstance(participants, Buckets)
           else participants)
  dim = np.shape(first.x)[-1]
  plan = make_plan(sizes, dim=dim, num_classes=num_classes, config=config)
  memory_budget = memory.resolve_budget(memory_budget)
  if memory_budget is not None:
    processes = (len({dev.process_index for dev in mesh.devices.flat})
                 if several else 1)
    chunk, _ = plan_chunk([config], sizes=plan.sizes.astype(int), dim=dim,
                          num_classes=num_classes, seeds=seeds,
                          budget=memory_budget, chunk=chunk,
                          processes=processes)
  check_data(participants, x_test, y_test, num_classes=num_classes)
  with jax.enable_x64(True):
    job = TrainingJob.of(key, plan, participants, seeds=seeds, mesh=mesh,
                         chunk=chunk)
    out = job() if train_with is None else train_with(job)
    if several:
      out = _gather(out, per_participant=not config.description.federated)
    acc, per = evaluate(out, x_test, y_test, config=config,
                        num_classes=num_classes, chunk=chunk)
    summary = summarise(plan, out, acc, per, config=config)
  return Outcome(plan, out, summary, chunk)


def run(key: jax.Array, participants: Participants | Buckets, x_test, y_test,
        *, num_classes: int, config: Config, seeds: int = 1, mesh=None,
        participant_chunk: int | None = None,
        memory_budget: int | str | None = None) -> Summary:
  """:func:`execute`'s :class:`Summary`: checks, calibrates, trains,
  evaluates.

  The library's one-call entry point (arguments as :func:`execute`'s);
  timings and records are the harness's
  (``launch.experiments.feddpdr.run_one``).

  Returns:
    :func:`summarise`'s :class:`Summary`.

  Raises:
    ValueError: bad settings or data.
    ConvergenceError: a fit hit ``max_iter``.
  """
  return execute(key, participants, x_test, y_test, num_classes=num_classes,
                 config=config, seeds=seeds, mesh=mesh,
                 participant_chunk=participant_chunk,
                 memory_budget=memory_budget).summary
