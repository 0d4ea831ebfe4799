"""Jitted entry points give the same answer with and without ``jax.jit``.

Each test runs twice through ``chex.variants`` (once under ``jax.jit``, once
eagerly) and checks shapes, dtypes and values against a NumPy reference, so
a function that only works, or only agrees, in one mode fails.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from dpcore import noise
from mechanisms.erm import objective_perturbation as op
from mechanisms.lvq import model
from mechanisms.pca import dp_pca


def _unit_rows(n, d, seed):
  x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
  return x / np.linalg.norm(x, axis=1, keepdims=True)


class VariantsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_gaussian_noise(self):
    draw = self.variant(functools.partial(noise.gaussian_noise,
                                          shape=(20000,), stddev=2.0))
    z = draw(jax.random.key(0))
    chex.assert_shape(z, (20000,))
    chex.assert_type(z, jnp.float32)
    chex.assert_tree_all_finite(z)
    # Same key, same draw (in either mode); another key, another draw.
    chex.assert_trees_all_close(z, draw(jax.random.key(0)))
    self.assertFalse(np.allclose(z, draw(jax.random.key(1))))
    # The scale: 20,000 draws put the sample sd within 3% of 2.0 (its
    # standard error is 0.5%), which a scale of 1.6 or 2.4 cannot meet.
    self.assertAlmostEqual(float(jnp.std(z)), 2.0, delta=0.06)
    self.assertLess(abs(float(jnp.mean(z))), 0.06)

  @chex.variants(with_jit=True, without_jit=True)
  def test_noisy_second_moment(self):
    x = _unit_rows(50, 6, seed=0)
    x[0] *= 3.0  # out of the unit ball: the mechanism clips it
    mask = np.ones(50, np.float32)
    mask[-5:] = 0.0  # padding rows do not count
    key = jax.random.key(3)
    m = self.variant(functools.partial(dp_pca.noisy_second_moment,
                                       sigma=0.5))(key, x, mask)
    chex.assert_shape(m, (6, 6))
    chex.assert_type(m, jnp.float32)
    chex.assert_trees_all_close(m, m.T)  # the noise is symmetric
    rows = x[:-5].copy()
    rows[0] /= 3.0
    expected = rows.T @ rows + np.asarray(noise.symmetric_gaussian_noise(
        key, 6, stddev=0.5, dtype=jnp.float32))
    chex.assert_trees_all_close(m, expected, atol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_lvq_forward(self):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(16, 5)).astype(np.float32)
    y = rng.integers(0, 3, size=16).astype(np.int32)
    labels = np.array([0, 1, 2, 0], np.int32)
    params = {"prototypes": rng.normal(size=(4, 5)).astype(np.float32),
              "omega": rng.normal(size=(3, 5)).astype(np.float32)}
    out = self.variant(model.forward)(params, x, y, labels)
    chex.assert_shape([out.z, out.p, out.dist], [(16, 3), (4, 3), (16, 4)])
    chex.assert_shape([out.plus, out.minus, out.d_plus, out.d_minus],
                      (16,))
    chex.assert_type([out.dist, out.d_plus], jnp.float32)
    chex.assert_type([out.plus, out.minus], jnp.int32)
    # Reference: squared distances ‖Ω(x − w)‖², the nearest prototype of the
    # right class and the nearest of a wrong one.
    diff = x[:, None, :] - params["prototypes"][None, :, :]
    dist = np.sum((diff @ params["omega"].T) ** 2, axis=-1)
    same = y[:, None] == labels[None, :]
    chex.assert_trees_all_close(out.dist, dist, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(
        out.plus, np.argmin(np.where(same, dist, np.inf), axis=1))
    np.testing.assert_array_equal(
        out.minus, np.argmin(np.where(same, np.inf, dist), axis=1))

  @chex.variants(with_jit=True, without_jit=True)
  def test_objective(self):
    rng = np.random.default_rng(2)
    x = _unit_rows(30, 4, seed=2)
    y = np.where(rng.random(30) < 0.5, -1.0, 1.0).astype(np.float32)
    mask = np.ones(30, np.float32)
    mask[-3:] = 0.0
    beta = rng.normal(size=4).astype(np.float32)
    b = rng.normal(size=4).astype(np.float32)
    fun = self.variant(functools.partial(
        op.objective, num_examples=27, lam=0.01, theta=0.02, loss="huber"))
    value = fun(beta, x, y, mask, b=b)
    chex.assert_shape(value, ())
    chex.assert_type(value, jnp.float32)
    # J(β) = (1/n) Σ ℓ(yᵢ xᵢᵀβ) + ((λ + θ)/2)‖β‖² + bᵀβ/n, Huber h = 0.5.
    z = (y * (x @ beta))[:-3]
    h = op.HUBER_H
    loss = np.where(z > 1 + h, 0.0,
                    np.where(z < 1 - h, 1 - z, (1 + h - z) ** 2 / (4 * h)))
    expected = loss.sum() / 27 + 0.015 * beta @ beta + b @ beta / 27
    self.assertAlmostEqual(float(value), float(expected), places=5)
    # And its gradient is finite, of β's shape.
    grad = self.variant(jax.grad(functools.partial(
        op.objective, num_examples=27, lam=0.01, theta=0.02, loss="huber")))(
            beta, x, y, mask, b=b)
    chex.assert_equal_shape([grad, beta])
    chex.assert_tree_all_finite(grad)


if __name__ == "__main__":
  absltest.main()
