"""Private empirical risk minimisation: objective and output perturbation,
and the softmax-regression head that DP-SGD fits."""

from mechanisms.erm import objective_perturbation, output_perturbation, softmax
from mechanisms.erm.objective_perturbation import ConvergenceError

__all__ = [
    "ConvergenceError", "objective_perturbation", "output_perturbation",
    "softmax",
]
