"""Memory planning: the participants mapped at once, before any work.

:func:`memory_estimate` bounds the training's peak bytes from the shapes
and settings alone; :func:`choose_chunk` and :func:`plan_chunk` pick (or
check) the participant chunk against a memory budget, so peak memory
grows with the chunk rather than with N.
"""

from __future__ import annotations

from dpcore import memory as dp_memory
from dpcore import rotation, validation
from federated.feddpdr import secure_moments
from federated.feddpdr.settings import Config, Static, check_chunk, program

__all__ = ["choose_chunk", "memory_estimate", "plan_chunk"]


def memory_estimate(num_participants: int, n_max: int, dim: int, *,
                    config: Config | Static, num_classes: int,
                    seeds: int = 1, chunk: int | None = None) -> int:
  """An upper estimate of :func:`train`'s peak bytes, before any work.

  The stacked inputs and outputs (held for all P participants) plus the
  scratch of the participants mapped at once (``chunk``, or all P) times
  the seeds (vmapped over keys). Per participant and seed in flight:
  DP-PCA holds a few d × d float64 matrices (XᵀX, its noise, the
  eigendecomposition), 4·d²·8 bytes are counted, plus 2·n·d·8 for its rows
  in float64; DPML fits in d dimensions instead, n·d·K·8 bytes for the K
  one-vs-rest fits, and 2·d²·8 for the solver. Checked against XLA's own
  accounting of the compiled program (``memory_analysis``) in
  ``tests/federated/memory_test.py`` (above it at small d). At d = 784,
  MNIST, 1,000 participants × 60 rows, 3 seeds, the process's resident
  memory reached 15.4 GB with 346 participants mapped at once (14.8 MB per
  participant and seed in flight, data and JAX included) against 20.4 MB
  counted here. ``aggregation="distributed_moments"`` adds each row's
  upper(xxᵀ), padded to D float32 coordinates.
  """
  num_participants = validation.check_positive_int(num_participants,
                                                   "num_participants")
  n_max = validation.check_positive_int(n_max, "n_max")
  d = validation.check_positive_int(dim, "dim")
  seeds = validation.check_positive_int(seeds, "seeds")
  chunk = check_chunk(chunk)
  static = program(config)  # nonpriv: the feddpdr program's memory
  fits = 1 if num_classes == 2 else num_classes
  reduces = static.description.reduces
  k = static.k if reduces else d
  inputs = num_participants * (n_max * d * 4 + n_max * 8 + 4 * 8)
  outputs = num_participants * seeds * (d * k * 4 + fits * (k + 4) * 8)
  if reduces:
    unit = 4 * d * d * 8 + 2 * n_max * d * 8 + n_max * k * fits * 8
  else:
    unit = n_max * d * fits * 8 + 2 * d * d * 8
  if static.secure:  # each row's upper(xxᵀ), float32, and its message
    unit += (n_max + 4) * rotation.padded_dim(
        secure_moments.upper_dim(d)) * 4
  in_flight = min(chunk or num_participants, num_participants) * seeds
  return int(inputs + outputs + unit * in_flight)


def choose_chunk(num_participants: int, n_max: int, dim: int, *,
                 config: Config | Static, num_classes: int, seeds: int,
                 budget: int) -> tuple[int | None, int]:
  """The largest participant chunk whose :func:`memory_estimate` fits.

  :func:`dpcore.memory.largest_chunk` over :func:`memory_estimate`.

  Args:
    num_participants, n_max, dim: the participants held, their padded
      rows, the data dimension.
    config, num_classes, seeds: the run (what :func:`memory_estimate`
      needs).
    budget: the bytes the training may use (``memory_budget``).

  Returns:
    ``(chunk, estimate)``: ``chunk`` None when all participants fit at
    once; ``estimate`` the estimate at that chunk.

  Raises:
    dpcore.memory.MemoryBudgetError: even one participant at a time would
      not fit; one line naming the estimate, the budget and the fix.
  """
  budget = validation.check_positive_int(budget, "memory_budget")
  total = validation.check_positive_int(num_participants, "num_participants")
  return dp_memory.largest_chunk(
      total,
      lambda chunk: memory_estimate(total, n_max, dim, config=config,
                                    num_classes=num_classes, seeds=seeds,
                                    chunk=chunk),
      budget=budget,
      what=f"the training's {total} participants ({n_max} rows each at "
           f"d={dim})",
      fix="memory_budget, or use fewer participants, seeds or rows")


def plan_chunk(configs, *, sizes, dim: int, num_classes: int, seeds: int,
               budget: int | None, chunk: int | None = None,
               processes: int = 1) -> tuple[int | None, int | None]:
  """One participant chunk for runs of ``configs``, checked against memory.

  With ``chunk`` given, :func:`memory_estimate` at that chunk must fit
  ``budget`` for every config; otherwise the largest chunk that fits them
  all is chosen (:func:`choose_chunk`; None: all participants at once).
  Participants split over ``processes`` are estimated per process.

  Args:
    configs: the runs that will share the chunk (e.g. a table's baseline
      and its budgets).
    sizes: every participant's rows.
    dim, num_classes, seeds: the data dimension, classes and repeats.
    budget: the bytes the training may use (``memory_budget``); None
      (unknown) keeps ``chunk`` as given, unchecked against memory.
    chunk: the participants mapped at once (``participant_chunk``), or
      None to choose.
    processes: the processes the participants are split over.

  Returns:
    ``(chunk, estimate)``: the chunk, and the largest estimate among the
    configs at it (None without a budget).

  Raises:
    dpcore.memory.MemoryBudgetError: the given chunk, or even one
      participant at a time, does not fit; one line naming the estimate,
      the budget and the settings to change.
  """
  chunk = check_chunk(chunk)
  if budget is None:
    return chunk, None
  count = -(-len(sizes) // max(1, processes))
  n_max = int(max(sizes))
  kwargs = dict(num_classes=num_classes, seeds=seeds)
  if chunk is not None:
    worst = max(memory_estimate(count, n_max, dim, config=c, chunk=chunk,
                                **kwargs) for c in configs)
    if worst > budget:
      raise dp_memory.MemoryBudgetError(
          f"participant_chunk={chunk} needs an estimated "
          f"{dp_memory.size_text(worst)}, above the memory budget of "
          f"{dp_memory.size_text(budget)}; give a smaller "
          f"participant_chunk, leave it out to have one chosen, or raise "
          f"memory_budget.")
    return chunk, worst
  chosen, estimate = None, 0
  for config in configs:
    c, e = choose_chunk(count, n_max, dim, config=config, budget=budget,
                        **kwargs)
    if c is not None and (chosen is None or c < chosen):
      chosen = c
    estimate = max(estimate, e)
  return chosen, estimate
