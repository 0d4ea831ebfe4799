"""Tests of the pipeline (federated.feddpdr.pipeline): execute and run."""

import dataclasses

import jax
import numpy as np
import pytest

from dpcore import accounting, memory
from federated import feddpdr, partition
from tests.federated.feddpdr.problems import blobs


def test_run_end_to_end_and_convergence_error():
  x, labels = blobs(400, 8, 3, 1)
  parts = partition.partition(jax.random.key(0), x[:300], labels[:300],
                              sizes=(100, 120, 80))
  config = feddpdr.Config(mechanism="nonpriv", k=3)
  result = feddpdr.run(jax.random.key(1), parts, x[300:], labels[300:],
                       num_classes=3, config=config, seeds=2)
  assert isinstance(result, feddpdr.Summary)
  assert result.accuracy > 0.9  # well separated blobs
  assert result.grad_norm_max <= config.tol
  assert len(result.accuracy_per_seed) == result.seeds == 2
  assert result.privacy["no_guarantee"] == accounting.NON_PRIVATE
  assert result.accuracy_per_participant is None  # a federated mechanism
  assert result.iterations_max >= 1 and result.sigma_pca == 0.0
  assert result.accuracy_std >= 0.0
  assert not hasattr(result, "seconds")  # timing is the harness's
  with pytest.raises(feddpdr.ConvergenceError, match="max_iter"):
    feddpdr.run(jax.random.key(1), parts, x[300:], labels[300:],
                num_classes=3, config=dataclasses.replace(config, max_iter=1))


@pytest.mark.parametrize("bad, match", [
    ("epsilon", "epsilon"),
    ("delta", "delta"),
    ("k", "exceeds the data dimension"),
    ("empty", "no rows"),
    ("labels", "outside the class set"),
    ("nan", "NaN"),
    ("norm", "norm"),
    ("mechanism", "mechanism"),
])
def test_run_rejects_bad_input(bad, match):
  x, labels = blobs(60, 5, 3, 2)
  parts = partition.partition(jax.random.key(0), x[:40], labels[:40],
                              sizes=(20, 20))
  x_test, y_test = x[40:].copy(), labels[40:].copy()
  config = feddpdr.Config(k=2)
  if bad == "epsilon":
    config = dataclasses.replace(config, epsilon=-1.0)
  elif bad == "delta":
    config = dataclasses.replace(config, delta=1.5)
  elif bad == "k":
    config = dataclasses.replace(config, k=6)
  elif bad == "empty":
    parts = parts._replace(sizes=np.array([20, 0]),
                           mask=parts.mask * np.array([[1.0], [0.0]]))
  elif bad == "labels":
    y_test[0] = 7
  elif bad == "nan":
    x_test[1, 1] = np.nan
  elif bad == "norm":
    parts.x[0, 0] *= 3.0
  else:
    config = dataclasses.replace(config, mechanism="fedavg")
  with pytest.raises(ValueError, match=match):
    feddpdr.run(jax.random.key(1), parts, x_test, y_test, num_classes=3,
                config=config)


@pytest.mark.slow  # heavy for the default suite (CI time)
def test_execute_hands_its_training_call_to_the_harness():
  # execute is the one orchestration: a harness's train_with gets the very
  # call execute would make, and what it returns is what gets evaluated.
  x, labels = blobs(200, 6, 3, 4)
  parts = partition.partition(jax.random.key(0), x[:150], labels[:150],
                              sizes=(70, 80))
  config = feddpdr.Config(mechanism="dpdr_dpml", epsilon=4.0, k=2, lam=1.0)
  kw = dict(num_classes=3, config=config, seeds=2)
  jobs = []

  def train_with(job):
    jobs.append(job)
    return job()

  got = feddpdr.execute(jax.random.key(1), parts, x[150:], labels[150:],
                        train_with=train_with, participant_chunk=1, **kw)
  (job,) = jobs
  assert job.program == feddpdr.program(config) and job.chunk == 1
  assert job.num_classes == 3 and job.mesh is None
  assert got.chunk == 1
  assert got.summary == feddpdr.run(jax.random.key(1), parts, x[150:],
                                    labels[150:], participant_chunk=1, **kw)
  assert len(got.summary.accuracy_per_participant) == 2
  # A memory budget too small even for one participant is refused before
  # any training; one that fits all at once leaves the chunk alone.
  with pytest.raises(ValueError, match="even one at a time"):
    feddpdr.execute(jax.random.key(1), parts, x[150:], labels[150:],
                    memory_budget=1000, train_with=train_with, **kw)
  assert len(jobs) == 1
  assert feddpdr.execute(jax.random.key(1), parts, x[150:], labels[150:],
                         memory_budget=2**40, **kw).chunk is None


def test_the_library_sets_no_memory_budget_unless_asked(monkeypatch):
  # The library call has no limit by default (memory_budget=None); "auto"
  # plans against 3/4 of MemAvailable, as the scripts ask: too little
  # memory is then refused before any training.
  x, labels = blobs(200, 6, 3, 4)
  parts = partition.partition(jax.random.key(0), x[:150], labels[:150],
                              sizes=(70, 80))
  config = feddpdr.Config(mechanism="dpdr_dpml", epsilon=4.0, k=2, lam=1.0)
  jobs = []
  monkeypatch.setattr(memory, "available_bytes", lambda: 1_000)
  kw = dict(num_classes=3, config=config,
            train_with=lambda job: jobs.append(job) or job())
  assert feddpdr.execute(jax.random.key(1), parts, x[150:], labels[150:],
                         **kw).chunk is None
  assert len(jobs) == 1
  with pytest.raises(memory.MemoryBudgetError, match="even one at a time"):
    feddpdr.execute(jax.random.key(1), parts, x[150:], labels[150:],
                    memory_budget="auto", **kw)
  assert len(jobs) == 1
