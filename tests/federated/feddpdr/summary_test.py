"""Tests of federated.feddpdr.summary: a fit that did not converge is not
released, and the summary carries the plan's privacy record."""

import numpy as np
import pytest

from federated import feddpdr

SIZES = [30, 40]


def _output(converged):
  s, n = 2, len(SIZES)
  return feddpdr.TrainOutput(
      bases=np.zeros((s, n, 4, 2)), betas=np.zeros((s, n, 1, 2)),
      global_basis=np.zeros((s, 4, 2)), global_betas=np.zeros((s, 1, 2)),
      grad_norm=np.full((s, n, 1), 1e-9), iterations=np.full((s, n, 1), 7),
      converged=np.full((s, n, 1), converged))


def test_a_summary_carries_the_plan_and_the_repeats():
  config = feddpdr.Config(k=2, epsilon=1.0)
  plan = feddpdr.make_plan(SIZES, dim=4, num_classes=2, config=config)
  summary = feddpdr.summarise(plan, _output(True), np.array([0.5, 0.75]),
                              None, config=config)
  assert summary.accuracy == 0.625 and summary.seeds == 2
  assert summary.privacy == plan.privacy
  assert summary.epsilon_pca == 0.5 and summary.iterations_max == 7
  assert summary.accuracy_per_participant is None


def test_a_fit_stopped_at_max_iter_is_not_released():
  config = feddpdr.Config(k=2, epsilon=1.0, max_iter=7)
  plan = feddpdr.make_plan(SIZES, dim=4, num_classes=2, config=config)
  with pytest.raises(feddpdr.ConvergenceError, match="max_iter=7"):
    feddpdr.summarise(plan, _output(False), np.array([0.5, 0.5]), None,
                      config=config)
