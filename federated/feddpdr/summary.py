"""The results of a trained run, after the convergence check.

Objective perturbation's guarantee needs converged fits (‖∇J‖ ≤ ``tol``:
the gap noise of :mod:`mechanisms.erm.objective_perturbation` is sized
for that), and :func:`summarise` raises :class:`ConvergenceError` (the
models are not released) otherwise.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from federated.feddpdr.arrays import TrainOutput
from federated.feddpdr.plan import FedDPDRPlan, check_converged
from federated.feddpdr.settings import Config
from mechanisms.erm import objective_perturbation as op

__all__ = ["ConvergenceError", "Summary", "summarise"]

# Defined next to the fits it is about; re-exported here, the same class.
ConvergenceError = op.ConvergenceError


@dataclasses.dataclass(frozen=True)
class Summary:
  """The results of one trained experiment.

  ``launch.experiments.feddpdr.summary_record`` makes the JSON-ready dict
  of it.

  Attributes:
    accuracy_per_seed: the test accuracy of each repeat.
    privacy: the plan's privacy record (``FedDPDRPlan.privacy``).
    epsilon_pca: ε₁ (None without private PCA).
    epsilon_per_classifier: ε of each classifier (None when non-private).
    sigma_pca: the DP-PCA σ (0 without private PCA).
    grad_norm_max: the largest ‖∇J‖ of any returned fit.
    iterations_max: the most L-BFGS iterations of any fit.
    accuracy_per_participant: (S, N) each participant's own model's
      accuracy per repeat (local mechanisms), or None.
    secure_aggregation: ``aggregation="distributed_moments"``'s facts
      (``FedDPDRPlan.secure_aggregation``: the grid, the wrap-around bound,
      the central and each participant's own guarantee), else None.
  """
  accuracy_per_seed: tuple[float, ...]
  privacy: dict
  epsilon_pca: float | None
  epsilon_per_classifier: float | None
  sigma_pca: float
  grad_norm_max: float
  iterations_max: int
  accuracy_per_participant: tuple[tuple[float, ...], ...] | None = None
  secure_aggregation: dict | None = None

  @property
  def accuracy(self) -> float:
    """The mean test accuracy over the repeats."""
    return float(np.mean(np.asarray(self.accuracy_per_seed, np.float64)))

  @property
  def accuracy_std(self) -> float:
    """The standard deviation of the repeats' test accuracy."""
    return float(np.std(np.asarray(self.accuracy_per_seed, np.float64)))

  @property
  def seeds(self) -> int:
    """The repeats."""
    return len(self.accuracy_per_seed)


def summarise(plan: FedDPDRPlan, out: TrainOutput, accuracy,
              per_participant, *, config: Config) -> Summary:
  """The results of one trained experiment, after the convergence check.

  Args:
    plan: :func:`federated.feddpdr.make_plan`'s calibration.
    out: :func:`federated.feddpdr.train`'s outputs (host or device).
    accuracy, per_participant: :func:`federated.feddpdr.evaluate`'s
      outputs.
    config: the experiment.

  Returns:
    A :class:`Summary`.

  Raises:
    ConvergenceError: a fit hit ``max_iter``; the models are not released.
  """
  out, acc, per = jax.device_get((out, accuracy, per_participant))
  acc = np.asarray(acc, np.float64)
  grad_max = float(np.max(out.grad_norm))
  check_converged(out, config)
  return Summary(
      accuracy_per_seed=tuple(acc.tolist()), privacy=plan.privacy,
      epsilon_pca=plan.epsilon_pca, epsilon_per_classifier=plan.epsilon_fit,
      sigma_pca=float(plan.sigma[0]), grad_norm_max=grad_max,
      iterations_max=int(np.max(out.iterations)),
      accuracy_per_participant=(
          None if per is None
          else tuple(tuple(row) for row in np.asarray(per).tolist())),
      secure_aggregation=plan.secure_aggregation)
