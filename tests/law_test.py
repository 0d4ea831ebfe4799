"""tests/law.py: the law checks pass Poisson sampling and reject the rest.

Also: every library module that subsamples has a law test
(:data:`tests.law.SITES`), found from the calls in its source.
"""

import numpy as np
import pytest

from tests import law

Q, UNITS, RUNS = 0.2, 16, 4000


def _bernoulli(q=Q, units=UNITS, runs=RUNS, seed=0):
  return (np.random.default_rng(seed).random((runs, units)) < q).astype(int)


def test_poisson_table_passes_and_wrong_rates_fail():
  law.assert_law(_bernoulli(), Q)


def test_compacted_slot_mask_read_as_inclusion_fails():
  # The bug of 94ee352: slot p filled iff at least p + 1 units sampled.
  sizes = _bernoulli().sum(axis=1)
  slots = (np.arange(UNITS)[None, :] < sizes[:, None]).astype(int)
  found = law.failures(slots, Q)
  assert any("inclusion rate" in f for f in found), found


def test_fixed_size_batches_fail_the_batch_size_law():
  rng = np.random.default_rng(1)
  table = np.zeros((RUNS, UNITS), int)
  for r in range(RUNS):  # exactly qU units a run: right marginals
    table[r, rng.choice(UNITS, round(Q * UNITS), replace=False)] = 1
  found = law.failures(table, Q)
  assert any("batch-size" in f for f in found), found
  assert not any("inclusion rate" in f for f in found), found


def test_one_coin_shared_by_pairs_fails_the_pair_check():
  coins = _bernoulli(units=UNITS // 2)
  table = np.repeat(coins, 2, axis=1)  # units 2k and 2k + 1 move together
  found = law.failures(table, Q)
  assert any("pairs" in f for f in found), found


def test_reused_key_across_steps_fails_the_count_law():
  steps = 10
  ok = np.random.default_rng(2).binomial(steps, Q, size=(RUNS, UNITS))
  law.assert_law(ok, Q, steps=steps)
  reused = steps * _bernoulli()  # the same batch every step
  found = law.failures(reused, Q, steps=steps)
  assert any("per-unit count" in f for f in found), found


def test_counts_refuse_a_read_back_that_is_not_integral():
  np.testing.assert_array_equal(law.counts([0.0, 0.5, 1.0], 0.5), [0, 1, 2])
  with pytest.raises(AssertionError, match="not integral"):
    law.counts([0.0, 0.3], 0.5)


def test_every_sampling_call_site_has_a_law_test():
  # A new caller of a sampler (or of the trainer) must add a law test that
  # runs it and reads back the units it used, and list it in law.SITES.
  found = {}
  for package in ("dpcore", "mechanisms", "federated"):
    for path in sorted((law.ROOT / package).rglob("*.py")):
      name = path.relative_to(law.ROOT).as_posix()
      if name != "dpcore/dpsgd.py" and law.sampling_calls(path):
        found[name] = sorted(law.sampling_calls(path))
  missing = sorted(set(found) - set(law.SITES))
  assert not missing, "subsampling without a law test: " + ", ".join(
      f"{m} ({', '.join(found[m])})" for m in missing)
  stale = sorted(set(law.SITES) - set(found))
  assert not stale, f"law.SITES lists modules that no longer sample: {stale}"
  for test in set(law.SITES.values()):
    assert (law.ROOT / test).is_file(), test


def test_sampling_calls_reads_calls_not_words(tmp_path):
  source = tmp_path / "m.py"
  source.write_text(
      '"""Mentions poisson_batch(...) and trainer.train(...)."""\n'
      "def f(key, plan, loss, p, d, o):\n"
      "  # dpsgd.poisson_inclusion(key, 3, sampling_rate=0.1)\n"
      "  return trainer.train(key, plan, loss, p, d, o)\n", encoding="utf-8")
  assert law.sampling_calls(source) == {"trainer.train"}
