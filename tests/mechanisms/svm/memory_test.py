"""Memory budgets of the SMO solver and of DPWSS repeats.

The layout is arithmetic on shapes: a tiny budget must show the choice (Q
on demand, pair record instead of flags, a chunk of repeats) or the
refusal, with no solver work done, and chunked repeats must equal the
unchunked ones.
"""

import functools
import os

import jax
import numpy as np
import pytest
from sklearn import datasets

from dpcore import memory
from launch.data import loaders as launch_data
from mechanisms.svm import dpwss, smo, smo_train, wss

HEART = os.path.join(launch_data.BUNDLED_DIR, "heart_scale")
PLAN = dpwss.make_plan(selection_epsilon=1.0, sigma=0.5)  # the paper's


def heart():
  x, y = datasets.load_svmlight_file(HEART, n_features=13)
  return x.toarray(), y.astype(np.float64)


def _sizes(num, dim, *, max_iter, cache, bits):
  fixed = smo_train.fixed_bytes(num, dim, dtype="float64",
                                row_dtype="float32", precompute=cache)
  record = -(-max_iter // wss.PAIR_CHUNK) * wss.PAIR_CHUNK
  unit = smo_train.run_bytes(num, dtype="float64", pair_bits=bits,
                             record_rows=record)
  return fixed, unit


@pytest.fixture
def no_work(monkeypatch):
  """Fails the test if the solver or Q's computation is reached."""
  def refuse(*args, **kwargs):
    raise AssertionError("heavy work started despite the budget")
  monkeypatch.setattr(smo, "make_problem", refuse)
  monkeypatch.setattr(smo, "solve_repeats", refuse)
  monkeypatch.setattr(smo, "solve", refuse)


def test_without_a_budget_the_plan_is_the_unbudgeted_policy():
  plan = dpwss.plan_repeats(5_000, 784, repeats=8, max_iter=500_000)
  assert plan == dpwss.RepeatsLayout(
      precompute=smo_train.resolve_precompute(None, 5_000, repeats=8),
      pair_flags=dpwss.resolve_pair_flags("auto", 5_000, 8), chunk=None,
      estimate=plan.estimate)
  assert plan.precompute and plan.pair_flags == "bits"


def test_a_small_budget_picks_the_largest_chunk_that_fits():
  num, dim, max_iter = 5_000, 784, 500_000
  fixed, unit = _sizes(num, dim, max_iter=max_iter, cache=True, bits=True)
  budget = fixed + int(2.5 * unit)  # Q and flags fit; 2 of 8 repeats do
  plan = dpwss.plan_repeats(num, dim, repeats=8, max_iter=max_iter,
                            memory_budget=budget)
  assert plan == dpwss.RepeatsLayout(True, "bits", 2, fixed + 2 * unit)
  # A chunk that would not fit is refused, one that does is kept.
  with pytest.raises(memory.MemoryBudgetError, match="repeat_chunk"):
    dpwss.plan_repeats(num, dim, repeats=8, max_iter=max_iter,
                       memory_budget=budget, repeat_chunk=3)
  assert dpwss.plan_repeats(num, dim, repeats=8, max_iter=max_iter,
                            memory_budget=budget, repeat_chunk=2).chunk == 2


def test_q_and_pair_flags_are_dropped_before_the_repeats_are_chunked():
  num, dim, max_iter = 5_000, 784, 500_000
  with_q, unit_bits = _sizes(num, dim, max_iter=max_iter, cache=True,
                             bits=True)
  no_q, unit_scan = _sizes(num, dim, max_iter=max_iter, cache=False,
                           bits=False)
  # Q does not fit beside one repeat: rows on demand, flags kept.
  budget = no_q + unit_bits + 1
  assert budget < with_q + unit_scan
  plan = dpwss.plan_repeats(num, dim, repeats=8, max_iter=max_iter,
                            memory_budget=budget)
  assert (plan.precompute, plan.pair_flags, plan.chunk) == (False, "bits", 1)
  # Not even the flags fit: the pair record is scanned instead.
  plan = dpwss.plan_repeats(num, dim, repeats=8, max_iter=max_iter,
                            memory_budget=no_q + unit_scan)
  assert (plan.precompute, plan.pair_flags, plan.chunk) == (False, "scan", 1)


def test_refusal_names_the_estimate_the_budget_and_the_fix(no_work):
  x, y = heart()
  budget = 100_000  # bytes: not even the data of one repeat
  fixed, unit = _sizes(270, 13, max_iter=27_000, cache=False, bits=False)
  with pytest.raises(memory.MemoryBudgetError) as err:
    dpwss.release(jax.random.key(0), PLAN, x, y, repeats=5,
                  memory_budget=budget)
  message = str(err.value)
  assert "\n" not in message
  assert memory.size_text(fixed + unit) in message  # the estimate
  assert memory.size_text(budget) in message
  assert "memory_budget" in message
  with pytest.raises(memory.MemoryBudgetError, match="memory_budget"):
    smo_train.wss2_train(x, y, memory_budget=budget)


def test_forced_precompute_that_does_not_fit_is_refused(no_work):
  x, y = heart()
  no_q, unit = _sizes(270, 13, max_iter=27_000, cache=False, bits=False)
  with pytest.raises(memory.MemoryBudgetError, match="precompute=False"):
    dpwss.release(jax.random.key(0), PLAN, x, y, precompute=True,
                  pair_flags="scan", memory_budget=no_q + unit)


def test_wss2_drops_the_cached_q_when_it_does_not_fit():
  x, y = heart()
  no_q = (smo_train.fixed_bytes(270, 13, dtype="float64",
                                row_dtype="float32", precompute=False)
          + smo_train.run_bytes(270, dtype="float64"))
  assert smo_train.resolve_precompute(None, 270)  # cached without a budget
  assert not smo_train.resolve_precompute_in_budget(
      None, 270, 13, dtype="float64", row_dtype="float32",
      memory_budget=no_q)
  cached = smo_train.wss2_train(x, y)
  on_demand = smo_train.wss2_train(x, y, memory_budget=no_q)
  assert on_demand.iterations == cached.iterations
  if jax.default_backend() == "cpu":  # the same rows, bitwise
    np.testing.assert_array_equal(on_demand.alpha, cached.alpha)
  else:  # Q is one product, a row on demand another: sums in another order
    np.testing.assert_allclose(on_demand.alpha, cached.alpha, atol=1e-5)


@pytest.mark.slow
def test_chunked_repeats_equal_the_unchunked_ones():
  x, y = heart()
  key = jax.random.key(11)
  plan = dpwss.make_plan(selection_epsilon=1.0, sigma=0.5, max_iter=400)
  whole = dpwss.release(key, plan, x, y, repeats=2)
  fixed, unit = _sizes(270, 13, max_iter=400, cache=True, bits=True)
  budget = fixed + unit
  assert dpwss.plan_repeats(270, 13, repeats=2, max_iter=400,
                            memory_budget=budget).chunk == 1
  chunked = dpwss.release(key, plan, x, y, repeats=2, memory_budget=budget)
  assert len(chunked.models) == 2
  for a, b, pa, pb in zip(whole.models, chunked.models, whole.pairs,
                          chunked.pairs, strict=True):
    assert a.iterations == b.iterations
    np.testing.assert_array_equal(a.alpha, b.alpha)
    np.testing.assert_array_equal(pa, pb)
  # The repeats differ from each other (the chunks did not reuse keys).
  assert not np.array_equal(chunked.pairs[0], chunked.pairs[1])


def test_bad_budget_and_chunk_are_refused():
  x, y = heart()
  for kwargs, match in (({"memory_budget": 0}, "memory_budget"),
                        ({"memory_budget": 1.5}, "memory_budget"),
                        ({"repeat_chunk": 0}, "repeat_chunk")):
    with pytest.raises(ValueError, match=match):
      dpwss.release(jax.random.key(0), PLAN, x, y, **kwargs)


def test_the_row_cache_is_estimated_and_sized_to_the_budget():
  num = 5_000
  resolve = functools.partial(smo_train.resolve_row_cache, num_examples=num,
                              dtype="float64", row_dtype="float32")
  base = smo_train.run_bytes(num, dtype="float64")
  each = smo_train.run_bytes(num, dtype="float64", cache_rows=1) - base
  assert each == 2 * (num * 4 + 8)  # a float32 row, its tag and stamp
  assert resolve(None, precompute=False) == smo.default_row_cache(
      num, dtype="float64", row_dtype="float32") == smo.ROW_CACHE_SLOTS
  assert resolve(None, precompute=True) == 0  # Q cached: no row cache
  assert resolve(9_000, precompute=False) == num
  other = 10**8
  # Automatic: as many rows as fit beside the rest of the call, maybe none.
  assert resolve(None, precompute=False, memory_budget=other + 100 * each,
                 other_bytes=other) == 100
  assert resolve(None, precompute=False, memory_budget=other,
                 other_bytes=other) == 0
  # Forced: kept when it fits, refused in one line when it does not.
  assert resolve(100, precompute=False, memory_budget=other + 100 * each,
                 other_bytes=other) == 100
  with pytest.raises(memory.MemoryBudgetError) as err:
    resolve(101, precompute=False, memory_budget=other + 100 * each,
            other_bytes=other)
  message = str(err.value)
  assert "\n" not in message and "row_cache" in message
  assert memory.size_text(other + 101 * each) in message


def test_a_forced_row_cache_that_does_not_fit_is_refused(no_work):
  x, y = heart()
  no_q = (smo_train.fixed_bytes(270, 13, dtype="float64",
                                row_dtype="float32", precompute=False)
          + smo_train.run_bytes(270, dtype="float64"))
  with pytest.raises(memory.MemoryBudgetError, match="row_cache"):
    smo_train.wss2_train(x, y, precompute=False, row_cache=200,
                         memory_budget=no_q + 1_000)


@pytest.mark.slow
def test_a_budgeted_row_cache_gives_the_same_run():
  x, y = heart()
  no_q = (smo_train.fixed_bytes(270, 13, dtype="float64",
                                row_dtype="float32", precompute=False)
          + smo_train.run_bytes(270, dtype="float64"))
  ten_rows = smo_train.run_bytes(270, dtype="float64", cache_rows=10) - (
      smo_train.run_bytes(270, dtype="float64"))
  small = smo_train.wss2_train(x, y, precompute=False,
                               memory_budget=no_q + ten_rows)
  whole = smo_train.wss2_train(x, y, precompute=False)
  assert small.iterations == whole.iterations
  np.testing.assert_array_equal(small.alpha, whole.alpha)


def test_rows_by_nonzero_features_are_estimated_and_fit_or_refused(no_work):
  x, y = heart()
  width = int((x != 0).sum(axis=1).max())
  plain = smo_train.fixed_bytes(270, 13, dtype="float64",
                                row_dtype="float32", precompute=False)
  extra = smo_train.fixed_bytes(
      270, 13, dtype="float64", row_dtype="float32", precompute=False,
      sparse_width=width) - plain
  assert extra == 270 * 13 * 8 + 270 * width * (4 + 8)
  tight = plain + smo_train.run_bytes(270, dtype="float64")
  with pytest.raises(memory.MemoryBudgetError, match="sparse_rows=False"):
    smo_train.wss2_train(x, y, precompute=False, sparse_rows=True,
                         row_cache=0, memory_budget=tight)


@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="sparse rows are chosen automatically on the CPU "
                    "only (smo_train.resolve_sparse_rows)")
def test_automatic_sparse_rows_give_way_to_a_tight_budget(monkeypatch):
  x, y = heart()
  made = []
  make = smo.make_problem

  def spy(*args, **kwargs):
    made.append(kwargs["sparse"])
    return make(*args, **kwargs)

  monkeypatch.setattr(smo, "make_problem", spy)
  tight = (smo_train.fixed_bytes(270, 13, dtype="float64",
                                 row_dtype="float32", precompute=False)
           + smo_train.run_bytes(270, dtype="float64"))
  smo_train.wss2_train(x, y, precompute=False, row_cache=0,
                       memory_budget=tight)
  smo_train.wss2_train(x, y, precompute=False, row_cache=0,
                       memory_budget=10 * tight)
  assert made == [False, True]


def test_auto_budget_is_three_quarters_of_the_memory_available(
    monkeypatch, no_work):
  # memory_budget="auto" (the scripts' default) plans against MemAvailable.
  x, y = heart()
  monkeypatch.setattr(memory, "available_bytes", lambda: 4_096)
  with pytest.raises(memory.MemoryBudgetError, match="3.0 KiB"):
    smo_train.wss2_train(x, y, memory_budget="auto")
  with pytest.raises(memory.MemoryBudgetError, match="3.0 KiB"):
    dpwss.release(jax.random.key(0), PLAN, x, y, memory_budget="auto")


def test_the_library_default_is_no_limit(monkeypatch, no_work):
  # memory_budget=None (the default): no estimate is checked, so a tiny
  # MemAvailable refuses nothing and the work starts (here: refused by
  # no_work, which proves the budget let it through).
  x, y = heart()
  monkeypatch.setattr(memory, "available_bytes", lambda: 4_096)
  with pytest.raises(AssertionError, match="heavy work started"):
    smo_train.wss2_train(x, y)
  with pytest.raises(AssertionError, match="heavy work started"):
    dpwss.release(jax.random.key(0), PLAN, x, y)
