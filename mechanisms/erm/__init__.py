"""Private empirical risk minimisation: objective and output perturbation."""

from mechanisms.erm import objective_perturbation, output_perturbation
from mechanisms.erm.objective_perturbation import ConvergenceError

__all__ = ["ConvergenceError", "objective_perturbation", "output_perturbation"]
