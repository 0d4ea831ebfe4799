"""Peak-memory budgets: fit a run into memory, or refuse it before any work.

An entry point that allocates in proportion to its inputs (participants,
repeats, audit trials, a precomputed kernel matrix) writes an estimate of
its peak bytes as a function of how many units it holds at once, and asks
:func:`largest_chunk` for the largest number of units that fits a budget.
When even one unit does not fit, :class:`MemoryBudgetError` says so in one
line, naming the estimate, the budget and what to change. Nothing here
touches JAX: the estimate is arithmetic on shapes.

An entry point's ``memory_budget`` defaults to None: no limit, so a
library call gives the same run on an idle and on a busy machine.
``"auto"`` (:data:`AUTO`, 3/4 of the memory available at the call) and a
number of bytes are asked for explicitly, as the launch scripts do
(``--memory_budget``).

>>> per_unit, fixed = 3 * 2**20, 2**20
>>> largest_chunk(100, lambda c: fixed + c * per_unit, budget=64 * 2**20,
...               what="the audit's trials", fix="--trial_chunk")
(21, 67108864)
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

__all__ = [
    "AUTO",
    "DEFAULT_FRACTION",
    "MemoryBudgetError",
    "available_bytes",
    "default_budget",
    "size_text",
    "largest_chunk",
    "resolve_budget",
]

# The share of the memory available at start that a run may plan to use:
# estimates are upper estimates of the arrays, and the interpreter, JAX and
# the data loaders need room beside them.
DEFAULT_FRACTION = 0.75
# The ``memory_budget`` value that asks for :func:`default_budget`. The
# library's entry points default to None (no limit: a call does not behave
# differently on a busy machine); a launch script chooses its budget and
# passes it, "auto" included.
AUTO = "auto"


class MemoryBudgetError(ValueError):
  """A run whose smallest chunk exceeds the memory budget (one line)."""

  reported_in_one_line = True


def size_text(num_bytes: float) -> str:
  """``num_bytes`` for a message: ``"1.50 GiB"`` from 1 GiB, else MiB
  (``"12.3 MiB"``), else KiB, so a small budget never reads 0.00 GiB."""
  if num_bytes >= 2**30:
    return f"{num_bytes / 2**30:.2f} GiB"
  if num_bytes >= 2**20:
    return f"{num_bytes / 2**20:.1f} MiB"
  return f"{num_bytes / 2**10:.1f} KiB"


def available_bytes() -> int | None:
  """MemAvailable of ``/proc/meminfo`` (Linux), or None where unknown."""
  try:
    with open("/proc/meminfo", encoding="ascii") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError):
    return None
  return None


def default_budget(fraction: float = DEFAULT_FRACTION) -> int | None:
  """``fraction`` of the memory available now, or None where unknown."""
  if not 0 < fraction <= 1:
    raise ValueError(f"fraction must be in (0, 1], got {fraction!r}.")
  available = available_bytes()
  return None if available is None else int(available * fraction)


def resolve_budget(memory_budget, name: str = "memory_budget") -> int | None:
  """A call's ``memory_budget`` in bytes, or None for no check.

  ``"auto"`` (:data:`AUTO`, asked for explicitly) is
  :func:`default_budget` — 3/4 of the memory available now, None where
  that is unknown; None (the library's default) asks for no check; a
  positive integer is itself.
  The estimates are of host arrays: on an accelerator pass the device's
  share explicitly.

  Raises:
    ValueError: anything else, naming ``name``.
  """
  if memory_budget is None:
    return None
  if isinstance(memory_budget, str) and memory_budget == AUTO:
    return default_budget()
  if (isinstance(memory_budget, bool)
      or not isinstance(memory_budget, numbers.Integral) or memory_budget < 1):
    raise ValueError(
        f"{name} must be 'auto' (3/4 of the memory available), None (no "
        f"check) or a positive number of bytes, got {memory_budget!r}.")
  return int(memory_budget)


def largest_chunk(total: int, estimate: Callable[[int], int], *,
                  budget: int | None, what: str,
                  fix: str) -> tuple[int | None, int]:
  """The largest number of units held at once whose estimate fits.

  Args:
    total: how many units the run has (participants, repeats, trials).
    estimate: peak bytes as a function of the units held at once; it must
      not decrease as the chunk grows.
    budget: bytes the run may use; None (unknown) takes the whole run at
      once.
    what: the units, for the message (e.g. ``"3 x 10 folds"``).
    fix: what the user can change (e.g. ``"--memory_budget or --repeats"``).

  Returns:
    ``(chunk, bytes)``: ``chunk`` is None when all ``total`` units fit at
    once, otherwise the largest chunk in [1, total) that fits; ``bytes`` is
    the estimate at that chunk.

  Raises:
    ValueError: ``total`` or ``budget`` is not a positive integer.
    MemoryBudgetError: one unit at a time exceeds the budget.
  """
  if isinstance(total, bool) or not isinstance(total, int) or total < 1:
    raise ValueError(f"total must be a positive integer, got {total!r}.")
  whole = int(estimate(total))
  if budget is None:
    return None, whole
  if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
    raise ValueError(f"budget must be a positive number of bytes, got "
                     f"{budget!r}.")
  if whole <= budget:
    return None, whole
  one = int(estimate(1))
  if one > budget:
    raise MemoryBudgetError(
        f"{what} need an estimated {size_text(one)} even one at a time, above "
        f"the memory budget of {size_text(budget)}; change {fix}.")
  low, high = 1, total  # fits at low, not at high
  while high - low > 1:
    mid = (low + high) // 2
    if estimate(mid) <= budget:
      low = mid
    else:
      high = mid
  return low, int(estimate(low))
