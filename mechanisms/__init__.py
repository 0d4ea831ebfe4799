"""Mechanisms built on dpcore: DP-PCA, objective perturbation, SMO (WSS2/DPWSS), G(M)LVQ."""
