"""DP primitives: calibration, noise, the exponential mechanism, clipping,
accounting and input validation. Pure JAX functions with the key first;
accounting is host-side Python over ``dp_accounting``.

Every submodule is reachable as ``dpcore.<name>`` and the most used
functions as ``dpcore.<function>``; both are imported on first use
(PEP 562), so ``import dpcore.options`` (the light vocabulary module the
launch scripts read before parsing flags) does not import JAX.
"""

from __future__ import annotations

from dpcore import lazy

# Re-exported name -> the submodule that defines it.
_EXPORTS = {
    "BudgetExceededError": "accounting",
    "PrivacyLedger": "accounting",
    "calibrate_dpsgd_noise": "accounting",
    "gaussian_sigma": "calibration",
    "gaussian_sigma_analytic": "calibration",
    "gaussian_sigma_classic": "calibration",
    "laplace_scale": "calibration",
    "clip_rows": "clipping",
    "clip_to_box": "clipping",
    "clip_to_norm": "clipping",
    "clipped_sum": "clipping",
    "normalize_rows": "clipping",
    "discrete_gaussian": "discrete",
    "discrete_laplace": "discrete",
    "exponential_mechanism": "exponential",
    "gaussian_noise": "noise",
    "laplace_noise": "noise",
    "objective_perturbation_noise": "noise",
    "symmetric_gaussian_noise": "noise",
}

__getattr__, __dir__, __all__ = lazy.attach(__name__, exports=_EXPORTS)
