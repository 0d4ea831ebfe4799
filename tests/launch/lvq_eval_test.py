"""launch.experiments.lvq_eval: the CV splits, the held-out rows, one
compilation for every ε, and the checks before any run."""

import jax
import numpy as np
import pytest

from launch.experiments import lvq_eval
from mechanisms.lvq import train as lvq_train

N, D, CLASSES = 60, 3, 3
PROTOCOL = lvq_eval.Protocol(folds=3, repeats=1, parallel_runs=3)


@pytest.fixture(scope="module")
def data():
  rng = np.random.default_rng(0)
  y = np.arange(N) % CLASSES
  x = np.clip(rng.normal(size=(N, D)) * 0.3 + (y[:, None] - 1) * 0.5, -1, 1)
  return x, y.astype(np.int32)


def test_cv_splits_partition_rows():
  tr, te = lvq_eval.cv_splits(jax.random.key(0), 23, folds=5, repeats=2,
                              train_on_one_fold=True)
  assert tr.shape == (10, 4) and te.shape == (10, 16)
  for a, b in zip(tr, te, strict=True):
    assert not set(a) & set(b)
  tr2, te2 = lvq_eval.cv_splits(jax.random.key(0), 23, folds=5, repeats=2,
                                train_on_one_fold=False)
  np.testing.assert_array_equal(te2, tr)
  assert lvq_eval.train_size(23, folds=5, train_on_one_fold=False) == 16


def test_held_out_rows_are_disjoint_from_training_and_test():
  train, test = lvq_eval.cv_splits(jax.random.key(0), 50, folds=5,
                                   repeats=2, train_on_one_fold=False)
  tr, va = lvq_eval.carve_validation(train, 0.25)
  assert va.shape == (10, 10) and tr.shape == (10, 30)
  for a, b, c in zip(tr, va, test, strict=True):
    assert not set(a) & set(b) and not set(b) & set(c)
  assert lvq_eval.carved_sizes(50, folds=5, train_on_one_fold=False,
                               validation_fraction=0.25) == (30, 10)
  assert np.unique(va).size > 10  # a random subset per run


@pytest.mark.slow
def test_every_epsilon_of_a_model_shares_one_compilation(data):
  x, y = data
  n_train = lvq_eval.train_size(N, folds=3, train_on_one_fold=False)
  config = lvq_train.TrainConfig(num_classes=CLASSES, epochs=1,
                                 sampling_rate=0.25, max_batch=30)
  cache, results = {}, []
  for eps in (0.5, 8.0):
    plan = lvq_train.make_plan(n_train, epsilon=eps, delta=1e-5,
                               sampling_rate=0.25, epochs=1, clip_norm=0.5,
                               dim=D, max_batch=30)
    results.append(lvq_eval.evaluate(jax.random.key(0), jax.random.key(1),
                                     x, y, config, PROTOCOL, plan=plan,
                                     cache=cache))
  # One jitted function and one compiled program for both budgets.
  assert len(cache) == 2
  assert not np.array_equal(results[0].final_costs, results[1].final_costs)
  assert results[0].correct is None


def test_bad_data_is_refused_before_any_run(data):
  x, y = data
  config = lvq_train.TrainConfig(num_classes=CLASSES, trainer="sgd")
  with pytest.raises(ValueError, match="no rows"):
    lvq_eval.evaluate(jax.random.key(0), jax.random.key(1), x,
                      np.where(y == 2, 0, y), config, PROTOCOL)
  with pytest.raises(ValueError, match="outside the declared box"):
    lvq_eval.evaluate(jax.random.key(0), jax.random.key(1), x * 2.0, y,
                      config, PROTOCOL)
  with pytest.raises(ValueError, match="needs plan="):
    lvq_eval.evaluate(jax.random.key(0), jax.random.key(1), x, y,
                      lvq_train.TrainConfig(num_classes=CLASSES), PROTOCOL)
