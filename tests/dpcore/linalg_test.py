"""dpcore.linalg: the same decompositions as jnp.linalg, batched or not."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import linalg


def _symmetric(key, shape):
  a = jax.random.normal(key, shape)
  return a + jnp.swapaxes(a, -1, -2)


@pytest.mark.parametrize("batch", [None, (3,), (2, 3)])
def test_eigh_matches_jnp_under_jit_and_vmap(batch):
  shape = (batch or ()) + (12, 12)
  m = _symmetric(jax.random.key(0), shape)
  fn = linalg.eigh
  for _ in batch or ():
    fn = jax.vmap(fn)
  values, vectors = jax.jit(fn)(m)
  ref_values, _ = np.linalg.eigh(np.asarray(m, np.float64))
  np.testing.assert_allclose(values, ref_values, rtol=1e-4, atol=1e-4)
  # Eigenvectors up to sign: V diag(w) Vᵀ rebuilds m, and V is orthonormal.
  rebuilt = jnp.einsum("...ij,...j,...kj->...ik", vectors, values, vectors)
  np.testing.assert_allclose(rebuilt, m, atol=1e-4)
  eye = jnp.einsum("...ji,...jk->...ik", vectors, vectors)
  np.testing.assert_allclose(eye, np.broadcast_to(np.eye(12), eye.shape),
                             atol=1e-5)


def test_thin_svd_matches_numpy_under_vmap():
  a = jax.random.normal(jax.random.key(1), (4, 15, 6))
  u, s, vt = jax.jit(jax.vmap(linalg.thin_svd))(a)
  assert u.shape == (4, 15, 6) and s.shape == (4, 6) and vt.shape == (4, 6, 6)
  np.testing.assert_allclose(s, np.linalg.svd(np.asarray(a),
                                              compute_uv=False), rtol=1e-5)
  np.testing.assert_allclose(jnp.einsum("bij,bj,bjk->bik", u, s, vt), a,
                             atol=1e-5)


def test_a_wrong_decomposition_is_caught():
  # The checks above must reject a wrong answer: perturbed eigenvalues do
  # not rebuild the matrix.
  m = _symmetric(jax.random.key(2), (12, 12))
  values, vectors = linalg.eigh(m)
  rebuilt = (vectors * (values * 1.01)) @ vectors.T
  with pytest.raises(AssertionError):
    np.testing.assert_allclose(rebuilt, m, atol=1e-4)


def test_canonical_signs_make_the_basis_independent_of_lapack_signs():
  rng = np.random.default_rng(3)
  q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
  m = q @ np.diag([6.0, 5.0, 4.0, 3.0, 2.0, 1.0]) @ q.T
  _, vectors = np.linalg.eigh(m)
  fixed = np.asarray(linalg.canonical_signs(jnp.asarray(vectors)))
  flipped = np.asarray(linalg.canonical_signs(jnp.asarray(-vectors)))
  np.testing.assert_array_equal(fixed, flipped)
  lead = fixed[np.argmax(np.abs(fixed), axis=0), np.arange(6)]
  assert np.all(lead > 0)
  # Same column up to sign: the span is unchanged.
  np.testing.assert_allclose(np.abs(fixed), np.abs(vectors))
  # Batched (leading axes) like the vmapped participants.
  batch = np.stack([vectors, -vectors])
  np.testing.assert_array_equal(
      np.asarray(linalg.canonical_signs(jnp.asarray(batch))),
      np.stack([fixed, fixed]))
