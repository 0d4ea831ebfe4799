"""Kernel SVMs: kernels, the SMO solver (WSS2), DPWSS and private selection.

``smo`` is the solver (a ``lax.while_loop``), ``wss`` the working-set
selection rules, ``smo_train`` the validated entry point for a non-private
fit, ``dpwss`` the paper's DPWSS runs and their privacy report, and
``random_features`` a private RBF-kernel SVM on random Fourier features.
"""

from mechanisms.svm import dpwss, kernels, random_features, smo, smo_train, wss

__all__ = ["dpwss", "kernels", "random_features", "smo", "smo_train", "wss"]
