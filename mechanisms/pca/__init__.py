"""DP-PCA: the Gaussian mechanism on the clipped second-moment matrix XᵀX."""

from mechanisms.pca import dp_pca
from mechanisms.pca.dp_pca import PcaPlan, PcaResult, pca

__all__ = ["PcaPlan", "PcaResult", "dp_pca", "pca"]
