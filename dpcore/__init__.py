"""DP primitives: calibration, noise, the exponential mechanism, clipping,
accounting and input validation. Pure JAX functions with the key first;
accounting is host-side Python over ``dp_accounting``.

Every submodule is reachable as ``dpcore.<name>`` and the most used
functions as ``dpcore.<function>``; both are imported on first use
(PEP 562), so ``import dpcore.options`` (the light vocabulary module the
launch scripts read before parsing flags) does not import JAX.
"""

from __future__ import annotations

import importlib

_SUBMODULES = (
    "accounting", "auditing", "calibration", "clipping", "discrete",
    "discrete_calibration", "dpsgd", "exponential", "ghost", "lattice",
    "linalg", "memory", "metrics", "noise", "options", "shape", "trainer",
    "tuning", "uint64", "validation",
)

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

__all__ = sorted(_SUBMODULES + tuple(_EXPORTS))


def __getattr__(name: str):
  """Imports a submodule, or a re-exported name's module, on first use."""
  if name in _SUBMODULES:
    return importlib.import_module(f"{__name__}.{name}")
  if name in _EXPORTS:
    module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
    value = getattr(module, name)
    globals()[name] = value
    return value
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(__all__))
