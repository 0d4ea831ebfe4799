"""Mechanisms built on dpcore, one sub-package per family.

* :mod:`mechanisms.pca`: DP-PCA (Gaussian noise on XᵀX).
* :mod:`mechanisms.erm`: private empirical risk minimisation, objective
  perturbation (Huber SVM, logistic) and output perturbation.
* :mod:`mechanisms.features`: the scattering transform (hand-crafted
  image features) and its free or private normalisation.
* :mod:`mechanisms.svm`: kernels, the SMO solver with LIBSVM's WSS2 and the
  DPWSS / private working-set selections.
* :mod:`mechanisms.lvq`: G(M)LVQ models, private initialisation and DP-SGD
  training.

Each mechanism module owns its calibration, its sensitivity and the call
that records its cost in a :class:`dpcore.PrivacyLedger`.
"""

from dpcore import lazy

__getattr__, __dir__, __all__ = lazy.attach(__name__)
