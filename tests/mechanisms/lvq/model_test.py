"""Tests of mechanisms.lvq.model: distances, costs, gradients, prediction."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechanisms.lvq import model as lvq
from tests.mechanisms.lvq.problems import (
  MODELS,
  problem,
)


@pytest.mark.parametrize("model, rank", MODELS)
@pytest.mark.parametrize("phi_kind", ["identity", "sigmoid"])
def test_gradient_matches_finite_differences(model, rank, phi_kind):
  with jax.enable_x64(True):
    params, x, y, labels = problem(0, model=model, rank=rank,
                                    dtype=jnp.float64)

    @jax.jit
    def f(p):
      return lvq.cost(p, x, y, labels, phi_kind=phi_kind)

    grad = jax.jit(jax.grad(f))(params)
    for s in range(3):
      keys = jax.random.split(jax.random.key(100 + s), len(params))
      direction = {k: jax.random.normal(kk, v.shape, jnp.float64)
                   for (k, v), kk in zip(sorted(params.items()), keys,
                                         strict=True)}
      h = 1e-6
      plus = jax.tree.map(lambda a, b: a + 1e-6 * b, params, direction)
      minus = jax.tree.map(lambda a, b: a - 1e-6 * b, params, direction)
      numeric = (f(plus) - f(minus)) / (2 * h)
      analytic = sum(jnp.vdot(grad[k], direction[k]) for k in params)
      # Central differences in float64: error O(h²) plus rounding ~1e-9.
      np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


def test_distances_and_prediction_match_brute_force():
  params, x, y, labels = problem(1, model="gmlvq", rank=3)
  omega = np.asarray(params["omega"], np.float64)
  w = np.asarray(params["prototypes"], np.float64)
  xs = np.asarray(x, np.float64)
  brute = np.array([[np.sum((omega @ (a - b)) ** 2) for b in w] for a in xs])
  np.testing.assert_allclose(lvq.squared_distances(params, x), brute,
                             rtol=1e-4, atol=1e-4)
  np.testing.assert_array_equal(lvq.predict(params, x, labels),
                                np.asarray(labels)[brute.argmin(1)])
  yy = np.asarray(y)
  same = yy[:, None] == np.asarray(labels)[None]
  dp = np.where(same, brute, np.inf).min(1)
  dm = np.where(same, np.inf, brute).min(1)
  np.testing.assert_allclose(
      lvq.per_example_loss(params, x, y, labels), (dp - dm) / (dp + dm),
      rtol=1e-4, atol=1e-5)
