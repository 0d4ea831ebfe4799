"""Softmax regression as a layered model: the private learners' linear head.

One model for all K classes, ``logits = x @ w + b``, written as a
:mod:`dpcore.ghost` layered loss so that DP-SGD (:mod:`dpcore.trainer`,
:func:`federated.fedsgd.release`) clips per-example gradients from their
norms without forming them. The model itself releases nothing: its
privacy is that of the trainer that fits it::

  params = softmax.initial_params(d, k)
  result = trainer.train(key, plan, softmax.loss, params, (x, y), optimizer)
  softmax.accuracy(result.params, x_test, y_test)
"""

from __future__ import annotations

import jax.numpy as jnp
import optax

from dpcore import ghost, validation

__all__ = ["accuracy", "initial_params", "loss"]


def initial_params(dim: int, num_classes: int) -> dict:
  """Zero weights (``dim``, K) and bias (K,): data-independent."""
  dim = validation.check_positive_int(dim, "dim")
  num_classes = validation.check_positive_int(num_classes, "num_classes")
  return {"out": {"w": jnp.zeros((dim, num_classes)),
                  "b": jnp.zeros((num_classes,))}}


@ghost.layered
def loss(layers, example):
  """Cross-entropy on one (x, label) example, the label in 0..K−1."""
  x, y = example
  return optax.softmax_cross_entropy_with_integer_labels(
      layers.dense("out", x), y)


def accuracy(params: dict, x, y) -> jnp.ndarray:
  """The fraction of rows of ``x`` whose largest logit is their label."""
  logits = ghost.apply(lambda layers, v: layers.dense("out", v), params,
                       jnp.asarray(x))
  return jnp.mean(jnp.argmax(logits, axis=-1) == jnp.asarray(y))
