"""Mechanisms built on dpcore, one sub-package per family.

* :mod:`mechanisms.pca`: DP-PCA (Gaussian noise on XᵀX).
* :mod:`mechanisms.erm`: private empirical risk minimisation, objective
  perturbation (Huber SVM, logistic) and output perturbation.
* :mod:`mechanisms.svm`: kernels, the SMO solver with LIBSVM's WSS2 and the
  DPWSS / private working-set selections.
* :mod:`mechanisms.lvq`: G(M)LVQ models, private initialisation and DP-SGD
  training.

Each mechanism module owns its calibration, its sensitivity and the call
that records its cost in a :class:`dpcore.PrivacyLedger`.
"""

import importlib

_SUBMODULES = ("erm", "lvq", "pca", "svm")

__all__ = sorted(_SUBMODULES)


def __getattr__(name: str):
  """Imports a sub-package on first use (``mechanisms.pca``)."""
  if name in _SUBMODULES:
    return importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(__all__))
