"""Kernel SVMs: kernels, the SMO solver (WSS2), DPWSS and private selection.

``smo`` is the solver (a ``lax.while_loop``), ``wss`` the working-set
selection rules, ``smo_train`` the validated entry point for a non-private
fit, ``dpwss`` the paper's DPWSS runs and their privacy report.
"""

from mechanisms.svm import dpwss, kernels, smo, smo_train, wss

__all__ = ["dpwss", "kernels", "smo", "smo_train", "wss"]
