"""Statistical tests for dpcore.noise.

Every sampler is checked with a fixed key by a KS test that must pass for
the right distribution and must reject the same samples against a 20 %
wrong scale (p < 1e-3), so a scale bug cannot slip through.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpcore import noise

N = 50_000     # draws per KS test: a 20 % scale error gives p ~ 1e-100.
PASS_P = 1e-3  # a fixed key; the right law passes with a wide margin.
REJECT_P = 1e-3


def _ks(samples, dist):
  return stats.kstest(np.asarray(samples, np.float64).ravel(), dist.cdf
                      ).pvalue


def _check_scale(samples, make_dist, scale):
  """KS passes at ``scale`` and rejects 0.8× and 1.2× of it."""
  assert _ks(samples, make_dist(scale)) > PASS_P
  assert _ks(samples, make_dist(0.8 * scale)) < REJECT_P
  assert _ks(samples, make_dist(1.2 * scale)) < REJECT_P


def test_gaussian_noise_distribution():
  z = noise.gaussian_noise(jax.random.key(1), (N,), stddev=2.5)
  assert z.shape == (N,) and z.dtype == jnp.float32
  _check_scale(z, lambda s: stats.norm(scale=s), 2.5)


def test_laplace_noise_distribution():
  z = noise.laplace_noise(jax.random.key(2), (N,), scale=0.7)
  assert z.shape == (N,) and z.dtype == jnp.float32
  _check_scale(z, lambda s: stats.laplace(scale=s), 0.7)
  # Not a Gaussian of the same variance either.
  assert _ks(z, stats.norm(scale=0.7 * np.sqrt(2.0))) < REJECT_P


def test_traced_scales_under_vmap():
  # Each participant gets its own scale; all must be honoured.
  scales = jnp.array([0.5, 1.0, 4.0])
  keys = jax.random.split(jax.random.key(3), 3)
  z = jax.vmap(lambda k, s: noise.gaussian_noise(k, (N // 2,), stddev=s))(
      keys, scales)
  for row, s in zip(z, [0.5, 1.0, 4.0], strict=True):
    _check_scale(row, lambda t: stats.norm(scale=t), s)


# -- symmetric Gaussian noise (Analyze-Gauss) --------------------------------

DIM = 4
SYM_DRAWS = 20_000


@pytest.fixture(scope="module")
def symmetric_draws():
  keys = jax.random.split(jax.random.key(4), SYM_DRAWS)
  draw = jax.jit(jax.vmap(
      lambda k: noise.symmetric_gaussian_noise(k, DIM, stddev=1.5)))
  return np.asarray(draw(keys), np.float64)


def test_symmetric_noise_is_symmetric(symmetric_draws):
  e = symmetric_draws
  np.testing.assert_array_equal(e, np.swapaxes(e, 1, 2))


def test_symmetric_noise_distinct_entries_are_n0_sigma2(symmetric_draws):
  rows, cols = np.triu_indices(DIM)  # diagonal and upper triangle
  distinct = symmetric_draws[:, rows, cols]  # (draws, DIM(DIM+1)/2)
  # Every position on its own (this catches e.g. E + Eᵀ, whose diagonal
  # has twice the standard deviation of its off-diagonal).
  for j in range(distinct.shape[1]):
    assert _ks(distinct[:, j], stats.norm(scale=1.5)) > PASS_P / 10
  _check_scale(distinct, lambda s: stats.norm(scale=s), 1.5)


def test_symmetric_noise_positions_are_independent(symmetric_draws):
  rows, cols = np.triu_indices(DIM)
  distinct = symmetric_draws[:, rows, cols]
  corr = np.corrcoef(distinct, rowvar=False)
  off = corr[~np.eye(len(rows), dtype=bool)]
  # Under independence each sample correlation is ≈ N(0, 1/draws); 5 sd.
  assert np.max(np.abs(off)) < 5.0 / np.sqrt(SYM_DRAWS)
  # Squares too (uncorrelated ≠ independent in general).
  corr2 = np.corrcoef(distinct**2, rowvar=False)
  assert np.max(np.abs(corr2[~np.eye(len(rows), dtype=bool)])) < (
      5.0 / np.sqrt(SYM_DRAWS))


# -- objective perturbation noise --------------------------------------------

OP_DIM = 5
OP_BETA = 2.0
OP_DRAWS = 20_000


@pytest.fixture(scope="module")
def op_draws():
  keys = jax.random.split(jax.random.key(5), OP_DRAWS)
  draw = jax.jit(jax.vmap(lambda k: noise.objective_perturbation_noise(
      k, OP_DIM, beta=OP_BETA)))
  return np.asarray(draw(keys), np.float64)


def test_objective_perturbation_norm_is_gamma(op_draws):
  # Density ∝ exp(−β‖b‖) in R^k ⇒ ‖b‖ ~ Gamma(shape k, scale 1/β).
  norms = np.linalg.norm(op_draws, axis=1)
  _check_scale(norms, lambda s: stats.gamma(OP_DIM, scale=s), 1 / OP_BETA)
  # The classic off-by-one (shape k − 1) is rejected as well.
  assert _ks(norms, stats.gamma(OP_DIM - 1, scale=1 / OP_BETA)) < REJECT_P


def test_objective_perturbation_direction_is_uniform(op_draws):
  u = op_draws / np.linalg.norm(op_draws, axis=1, keepdims=True)
  # On the uniform sphere in R^k, u_i² ~ Beta(1/2, (k − 1)/2) ...
  right = stats.beta(0.5, (OP_DIM - 1) / 2)
  wrong = stats.beta(0.5, OP_DIM / 2)  # the law for R^(k+1)
  for i in range(OP_DIM):
    assert _ks(u[:, i] ** 2, right) > PASS_P / OP_DIM
  assert _ks(u[:, 0] ** 2, wrong) < REJECT_P
  # ... each coordinate's sign is a fair coin, and E[u] = 0 (5 sd bounds).
  positive = np.mean(u > 0, axis=0)
  assert np.all(np.abs(positive - 0.5) < 5 * 0.5 / np.sqrt(OP_DRAWS))
  assert np.all(np.abs(u.mean(axis=0)) < 5 / np.sqrt(OP_DIM * OP_DRAWS))
  # Direction independent of the radius.
  norms = np.linalg.norm(op_draws, axis=1)
  assert abs(np.corrcoef(norms, u[:, 0] ** 2)[0, 1]) < 5 / np.sqrt(OP_DRAWS)


def test_objective_perturbation_rejects_wrong_beta(op_draws):
  # A sampler that used β' = 0.8β (e.g. ε instead of ε/2 mix-ups) is
  # caught on the radius: the density test is on the scale 1/β.
  norms = np.linalg.norm(op_draws, axis=1)
  assert _ks(norms, stats.gamma(OP_DIM, scale=1 / (0.8 * OP_BETA))) < (
      REJECT_P)


# -- purity, jit, dtypes -------------------------------------------------------

SAMPLERS = {
    "gaussian": lambda k: noise.gaussian_noise(k, (7,), stddev=1.3),
    "laplace": lambda k: noise.laplace_noise(k, (7,), scale=1.3),
    "symmetric": lambda k: noise.symmetric_gaussian_noise(k, 3, stddev=1.3),
    "objective": lambda k: noise.objective_perturbation_noise(k, 7, beta=1.3),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_purity_and_jit(name):
  f = SAMPLERS[name]
  jf = jax.jit(f)
  k1, k2 = jax.random.key(10), jax.random.key(11)
  a = jf(k1)
  np.testing.assert_array_equal(a, jf(k1))
  assert not np.allclose(a, jf(k2))
  # jit(f) == f: the same arithmetic, up to float32 rounding of fused ops.
  np.testing.assert_allclose(f(k1), a, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_dtype_is_kept_under_x64(name):
  # A float64 scale must not promote float32 noise when x64 is on.
  with jax.enable_x64(True):
    f = {
        "gaussian": lambda k: noise.gaussian_noise(
            k, (3,), stddev=np.float64(2.0)),
        "laplace": lambda k: noise.laplace_noise(
            k, (3,), scale=np.float64(2.0)),
        "symmetric": lambda k: noise.symmetric_gaussian_noise(
            k, 3, stddev=np.float64(2.0)),
        "objective": lambda k: noise.objective_perturbation_noise(
            k, 3, beta=np.float64(2.0)),
    }[name]
    assert f(jax.random.key(0)).dtype == jnp.float32
    g = noise.gaussian_noise(jax.random.key(0), (3,), stddev=2.0,
                             dtype=jnp.float64)
    assert g.dtype == jnp.float64
