"""G(M)LVQ prototype classifiers: the model, private initialisation, the
per-example clipped gradients and DP-SGD training."""

from mechanisms.lvq import clip, init, model, train
from mechanisms.lvq.model import error_rate, predict

__all__ = ["clip", "error_rate", "init", "model", "predict", "train"]
