"""DP primitives: calibration, noise, the exponential mechanism, clipping,
accounting and input validation. Pure JAX functions with the key first;
accounting is host-side Python over ``dp_accounting``."""

from dpcore import (
    accounting,
    calibration,
    clipping,
    discrete,
    exponential,
    noise,
    validation,
)
from dpcore.accounting import (
    BudgetExceededError,
    PrivacyLedger,
    calibrate_dpsgd_noise,
)
from dpcore.calibration import (
    gaussian_sigma,
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
    laplace_scale,
)
from dpcore.clipping import (
    clip_rows,
    clip_to_box,
    clip_to_norm,
    clipped_sum,
    normalize_rows,
)
from dpcore.discrete import (
    discrete_gaussian,
    discrete_laplace,
)
from dpcore.exponential import exponential_mechanism
from dpcore.noise import (
    gaussian_noise,
    laplace_noise,
    objective_perturbation_noise,
    symmetric_gaussian_noise,
)

__all__ = [
    "BudgetExceededError", "PrivacyLedger", "accounting",
    "calibrate_dpsgd_noise", "calibration", "clip_rows", "clip_to_box",
    "clip_to_norm", "clipped_sum", "clipping", "discrete",
    "discrete_gaussian", "discrete_laplace", "exponential",
    "exponential_mechanism", "gaussian_noise", "gaussian_sigma",
    "gaussian_sigma_analytic", "gaussian_sigma_classic", "laplace_noise",
    "laplace_scale", "noise", "normalize_rows", "objective_perturbation_noise",
    "symmetric_gaussian_noise", "validation",
]
