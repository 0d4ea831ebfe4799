"""mechanisms.erm.softmax: zero start, the cross-entropy, the accuracy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechanisms.erm import softmax


def test_initial_params_are_zero_and_shaped():
  params = softmax.initial_params(5, 3)
  assert params["out"]["w"].shape == (5, 3)
  assert params["out"]["b"].shape == (3,)
  assert not np.any(params["out"]["w"]) and not np.any(params["out"]["b"])
  with pytest.raises(ValueError, match="num_classes"):
    softmax.initial_params(5, 0)


def test_loss_is_the_cross_entropy_of_x_w_plus_b():
  rng = np.random.default_rng(0)
  w, b = rng.normal(size=(4, 3)), rng.normal(size=3)
  params = {"out": {"w": jnp.asarray(w), "b": jnp.asarray(b)}}
  x, y = rng.normal(size=4), 2
  logits = x @ w + b
  expected = -(logits[y] - np.log(np.sum(np.exp(logits))))
  got = float(softmax.loss(params, (jnp.asarray(x), y)))
  assert got == pytest.approx(expected, rel=1e-5)
  # Another label gives another loss: the label is read.
  assert float(softmax.loss(params, (jnp.asarray(x), 0))) != pytest.approx(
      expected, rel=1e-3)


def test_accuracy_counts_rows_whose_largest_logit_is_the_label():
  # w = identity: the largest logit is the largest coordinate of x.
  params = {"out": {"w": jnp.eye(3), "b": jnp.zeros(3)}}
  x = jnp.asarray([[3.0, 0, 0], [0, 2.0, 0], [0, 0, 1.0], [1.0, 5.0, 0]])
  y = jnp.asarray([0, 1, 2, 0])
  assert float(softmax.accuracy(params, x, y)) == pytest.approx(0.75)
  # The bias moves the decision: a large bias on class 2 predicts 2.
  biased = {"out": {"w": jnp.eye(3), "b": jnp.asarray([0.0, 0, 10.0])}}
  assert float(softmax.accuracy(biased, x, y)) == pytest.approx(0.25)


def test_gradient_of_a_zero_model_is_uniform_minus_one_hot():
  params = softmax.initial_params(2, 4)
  x = jnp.asarray([1.0, -2.0])
  grad = jax.grad(softmax.loss)(params, (x, 1))
  expected = (np.full(4, 0.25) - np.eye(4)[1])
  np.testing.assert_allclose(grad["out"]["b"], expected, rtol=1e-6)
  np.testing.assert_allclose(grad["out"]["w"], np.outer(x, expected),
                             rtol=1e-6)
