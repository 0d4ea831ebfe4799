"""DP-PCA: the Gaussian mechanism on the clipped second-moment matrix XᵀX."""

from mechanisms.pca import dp_pca
from mechanisms.pca.dp_pca import PcaResult, pca, private_basis

__all__ = ["PcaResult", "dp_pca", "pca", "private_basis"]
