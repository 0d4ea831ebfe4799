"""LVQ folds x repeats under a memory budget: fewer runs at once, same runs.

:func:`launch.experiments.lvq_eval.evaluate` vmaps ``parallel_runs`` CV
runs per compiled call (tuning trials too, with held-out rows). Under a
budget that the compiled program (XLA's count of its buffers) plus the
data and indices exceed, fewer runs are vmapped together: each run keeps
its key and rows, so the errors are bitwise those of the unbudgeted call.
A budget below one run is refused in one line before any run.
"""

import jax
import numpy as np
import pytest

from dpcore import memory
from launch.experiments import lvq_eval
from mechanisms.lvq import train as lvq_train

N, D, CLASSES = 90, 4, 3
CONFIG = lvq_train.TrainConfig(model="glvq", trainer="sgd",
                               num_classes=CLASSES, epochs=2,
                               sampling_rate=0.2, max_batch=24)
CV = dict(folds=3, repeats=2, train_on_one_fold=False)


def _protocol(**kwargs):
  return lvq_eval.Protocol(**CV, **kwargs)


@pytest.fixture(scope="module")
def data():
  rng = np.random.default_rng(0)
  y = np.arange(N) % CLASSES
  x = np.clip(rng.normal(size=(N, D)) * 0.3 + (y[:, None] - 1) * 0.5, -1, 1)
  return x, y.astype(np.int32)


@pytest.mark.slow
def test_fewer_runs_at_once_give_the_same_errors(data):
  x, y = data
  keys = (jax.random.key(0), jax.random.key(1))
  whole = lvq_eval.evaluate(*keys, x, y, CONFIG, _protocol(parallel_runs=6))
  assert whole.parallel_runs == 6 and whole.memory_estimate > 0
  # The estimate with all six runs at once, less a sixth of the program:
  # at most five fit.
  host = whole.memory_estimate
  roomy = lvq_eval.evaluate(*keys, x, y, CONFIG,
                            _protocol(parallel_runs=6, memory_budget=host))
  assert roomy.parallel_runs == 6
  program = whole.memory_estimate - lvq_eval.host_bytes(
      x, *lvq_eval.cv_splits(keys[0], N, folds=3, repeats=2,
                             train_on_one_fold=False))
  tight = lvq_eval.evaluate(*keys, x, y, CONFIG, _protocol(
      parallel_runs=6, memory_budget=host - program // 3))
  assert 1 <= tight.parallel_runs < 6
  assert tight.memory_estimate <= host - program // 3
  np.testing.assert_array_equal(tight.errors, whole.errors)  # bitwise
  np.testing.assert_array_equal(tight.final_costs, whole.final_costs)
  assert tight.overflow_steps == whole.overflow_steps


@pytest.mark.slow
def test_tuning_trials_under_a_budget_are_the_same(data):
  x, y = data
  keys = (jax.random.key(0), jax.random.key(2))

  def trial(**kwargs):
    return lvq_eval.evaluate(*keys, x, y, CONFIG, _protocol(
        validation_fraction=0.25, **kwargs))
  whole = trial(parallel_runs=6)
  # Two runs at a time (what a budget picks when six do not fit) and a
  # budget that fits all six: the same runs.
  for other in (trial(parallel_runs=2),
                trial(parallel_runs=6, memory_budget=2**36)):
    np.testing.assert_array_equal(other.errors, whole.errors)
    np.testing.assert_array_equal(other.correct, whole.correct)


def test_a_budget_below_one_run_is_refused_in_one_line(data):
  x, y = data
  with pytest.raises(memory.MemoryBudgetError) as err:
    lvq_eval.evaluate(jax.random.key(0), jax.random.key(1), x, y, CONFIG,
                      _protocol(parallel_runs=6, memory_budget=10_000))
  message = str(err.value)
  assert "\n" not in message
  assert message.startswith("the 6 CV runs (folds x repeats) need an "
                            "estimated")
  assert "memory budget of" in message and "(memory_budget)" in message
