"""Tests of dpcore.memory: the chunk that fits a budget, or a refusal."""

import numpy as np
import pytest

from dpcore import memory


def _estimate(fixed, per_unit, calls=None):
  def estimate(chunk):
    if calls is not None:
      calls.append(chunk)
    return fixed + chunk * per_unit
  return estimate


def test_whole_run_fits():
  assert memory.largest_chunk(10, _estimate(5, 2), budget=25, what="x",
                              fix="y") == (None, 25)


def test_largest_chunk_is_the_largest_that_fits():
  # 100 + 7 c <= 400  ->  c = 42 (100 + 294 = 394; c = 43 gives 401).
  chunk, used = memory.largest_chunk(1000, _estimate(100, 7), budget=400,
                                     what="x", fix="y")
  assert (chunk, used) == (42, 394)
  # The boundary either way: one more unit of budget fits 43, one less 41.
  assert memory.largest_chunk(1000, _estimate(100, 7), budget=401,
                              what="x", fix="y") == (43, 401)
  assert memory.largest_chunk(1000, _estimate(100, 7), budget=393,
                              what="x", fix="y") == (41, 387)


def test_unknown_budget_takes_everything():
  assert memory.largest_chunk(3, _estimate(0, 1), budget=None, what="x",
                              fix="y") == (None, 3)


def test_refusal_names_estimate_budget_and_fix():
  with pytest.raises(memory.MemoryBudgetError) as err:
    memory.largest_chunk(10, _estimate(3 * 2**30, 2**30), budget=2**31,
                         what="10 audit chunks", fix="--memory_budget")
  message = str(err.value)
  assert "4.00 GiB" in message and "2.00 GiB" in message
  assert "--memory_budget" in message and "\n" not in message
  assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("total", [0, -1, 1.5, True])
def test_bad_total(total):
  with pytest.raises(ValueError, match="total"):
    memory.largest_chunk(total, _estimate(0, 1), budget=10, what="x",
                         fix="y")


@pytest.mark.parametrize("budget", [0, -5, 2.5])
def test_bad_budget(budget):
  with pytest.raises(ValueError, match="budget"):
    memory.largest_chunk(4, _estimate(0, 10), budget=budget, what="x",
                         fix="y")


def test_search_is_logarithmic():
  calls = []
  memory.largest_chunk(10**6, _estimate(0, 1, calls), budget=12345,
                       what="x", fix="y")
  assert len(calls) < 30


def test_default_budget_fraction():
  available = memory.available_bytes()
  budget = memory.default_budget(0.5)
  if available is None:
    assert budget is None
  else:
    # MemAvailable moves between the two reads; within 1 GiB.
    assert abs(budget - available // 2) < 2**30
  with pytest.raises(ValueError, match="fraction"):
    memory.default_budget(0)


def test_resolve_budget(monkeypatch):
  monkeypatch.setattr(memory, "available_bytes", lambda: 4_000)
  assert memory.resolve_budget("auto") == 3_000
  assert memory.resolve_budget(memory.AUTO) == 3_000
  assert memory.resolve_budget(None) is None
  assert memory.resolve_budget(12) == 12
  assert memory.resolve_budget(np.int64(12)) == 12
  monkeypatch.setattr(memory, "available_bytes", lambda: None)
  assert memory.resolve_budget("auto") is None  # unknown: unchecked
  for bad in (0, -1, 1.5, True, "AUTO", "1GiB"):
    with pytest.raises(ValueError, match="budget_x must be 'auto'"):
      memory.resolve_budget(bad, "budget_x")
