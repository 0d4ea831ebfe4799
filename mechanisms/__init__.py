"""Mechanisms built on dpcore.

DP-PCA, objective perturbation, kernels and the SMO solver (WSS2 / DPWSS),
output perturbation, G(M)LVQ and evaluation metrics.
"""
