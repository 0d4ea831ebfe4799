"""Tests of federated.feddpdr.memory: the estimate, and the chunk chosen
or checked against a budget (messages name the library's arguments)."""

import pytest

from dpcore import memory
from federated import feddpdr

CONFIG = feddpdr.Config(k=20, epsilon=1.0)
KW = dict(config=CONFIG, num_classes=10, seeds=3)


def test_the_estimate_grows_with_the_chunk_not_the_participants():
  whole = feddpdr.memory_estimate(1000, 60, 784, **KW)
  chunked = feddpdr.memory_estimate(1000, 60, 784, chunk=10, **KW)
  assert chunked < whole / 10
  more = feddpdr.memory_estimate(2000, 60, 784, chunk=10, **KW)
  assert more < 2.5 * chunked  # only the held inputs and outputs double
  # Non-Priv runs the private program: the same memory.
  nonpriv = feddpdr.Config(mechanism="nonpriv", k=20)
  assert feddpdr.memory_estimate(
      10, 60, 784, config=nonpriv, num_classes=10, seeds=3) == (
          feddpdr.memory_estimate(10, 60, 784, **KW))


def test_a_chunk_is_chosen_to_fit_or_refused():
  sizes = [60] * 1000
  kw = dict(sizes=sizes, dim=784, num_classes=10, seeds=3)
  assert feddpdr.plan_chunk([CONFIG], budget=None, **kw) == (None, None)
  chunk, estimate = feddpdr.plan_chunk([CONFIG], budget=8 * 2**30, **kw)
  assert 1 <= chunk < 1000 and estimate <= 8 * 2**30
  assert feddpdr.plan_chunk([CONFIG], budget=8 * 2**30, chunk=10,
                            **kw)[0] == 10
  with pytest.raises(memory.MemoryBudgetError,
                     match="^participant_chunk=1000 needs an estimated"):
    feddpdr.plan_chunk([CONFIG], budget=8 * 2**30, chunk=1000, **kw)
  with pytest.raises(memory.MemoryBudgetError,
                     match="even one at a time.*change memory_budget"):
    feddpdr.plan_chunk([CONFIG], budget=2**20, **kw)
  with pytest.raises(ValueError, match="^participant_chunk must be"):
    feddpdr.plan_chunk([CONFIG], budget=None, chunk=0, **kw)
