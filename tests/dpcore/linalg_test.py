"""dpcore.linalg: the same decompositions as jnp.linalg, batched or not."""

import functools
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import linalg
from tests.dpcore import products


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


# subspace_top_k: block subspace iteration against the exact eigh_top_k.

_subspace_top_k = jax.jit(linalg.subspace_top_k,
                          static_argnames=("k", "block", "iterations"))


def _with_spectrum(seed, values):
  rng = np.random.default_rng(seed)
  q, _ = np.linalg.qr(rng.normal(size=(len(values), len(values))))
  return ((q * np.asarray(values)) @ q.T).astype(np.float32)


def _gapped(seed, d=40, k=5):
  # Top k at 10..6, the rest in [0, 3]: a spectral gap of 2 after the k-th.
  rest = np.linspace(3.0, 0.0, d - k)
  return _with_spectrum(seed, np.concatenate([np.arange(10.0, 10.0 - k, -1),
                                              rest]))


def test_subspace_top_k_agrees_with_eigh_on_a_gapped_matrix():
  m = jnp.asarray(_gapped(0))
  exact = linalg.eigh_top_k(m, 5)
  approx = _subspace_top_k(jax.random.key(0), m, k=5, iterations=30)
  # float32: a projector difference at the level of ε·cond, far below 1e-4.
  assert float(linalg.subspace_distance(approx.vectors, exact.vectors)) < 1e-4
  np.testing.assert_allclose(approx.values, [10, 9, 8, 7, 6], rtol=1e-5)
  # Separated eigenvalues and canonical signs: the same columns, not just
  # the same span.
  np.testing.assert_allclose(approx.vectors, exact.vectors, atol=1e-4)
  np.testing.assert_allclose(approx.vectors.T @ approx.vectors, np.eye(5),
                             atol=1e-5)
  assert float(jnp.max(approx.residuals)) < 1e-4
  assert float(jnp.max(exact.residuals)) < 1e-4


def test_too_few_iterations_are_caught_by_the_same_checks():
  # Block = k and 2 iterations: the error shrinks like (3/6)^2 only.
  m = jnp.asarray(_gapped(0))
  exact = linalg.eigh_top_k(m, 5)
  short = _subspace_top_k(jax.random.key(0), m, 5, block=5,
                                iterations=2)
  assert float(linalg.subspace_distance(short.vectors, exact.vectors)) > 1e-2
  assert float(jnp.max(short.residuals)) > 1e-2


def test_subspace_top_k_batches_and_vmaps_like_one_matrix_at_a_time():
  ms = jnp.asarray(np.stack([_gapped(s) for s in range(3)]))
  keys = jax.random.split(jax.random.key(1), 3)
  fn = functools.partial(_subspace_top_k, k=5, iterations=30)
  mapped = jax.jit(jax.vmap(fn))(keys, ms)
  assert mapped.vectors.shape == (3, 40, 5) and mapped.values.shape == (3, 5)
  exact = linalg.eigh_top_k(ms, 5)
  for i in range(3):
    alone = fn(keys[i], ms[i])
    np.testing.assert_allclose(mapped.vectors[i], alone.vectors, atol=1e-5)
    np.testing.assert_allclose(mapped.vectors[i], exact.vectors[i],
                               atol=1e-4)
  # Leading batch axes without vmap: one key, one start block per matrix.
  batched = fn(jax.random.key(2), ms)
  np.testing.assert_allclose(batched.vectors, exact.vectors, atol=1e-4)


def test_subspace_top_k_is_robust_on_rank_deficient_float32_matrices():
  # Rank 3 < k = 5 < block: the Gram matrices of plain Cholesky-QR would be
  # singular. The top 3 are exact, all 5 columns orthonormal and finite.
  rng = np.random.default_rng(4)
  x = rng.normal(size=(3, 60)).astype(np.float32)
  m = jnp.asarray(x.T @ x * 1e3)
  exact = linalg.eigh_top_k(m, 3)
  approx = _subspace_top_k(jax.random.key(3), m, 5, iterations=10)
  assert bool(jnp.all(jnp.isfinite(approx.vectors)))
  np.testing.assert_allclose(approx.vectors.T @ approx.vectors, np.eye(5),
                             atol=1e-4)
  assert float(linalg.subspace_distance(approx.vectors[:, :3],
                                        exact.vectors)) < 1e-4
  np.testing.assert_allclose(approx.values[3:], 0.0, atol=1e-2)
  # The zero matrix: finite, orthonormal, zero eigenvalues.
  zero = _subspace_top_k(jax.random.key(3), jnp.zeros((30, 30)), 4)
  np.testing.assert_allclose(zero.vectors.T @ zero.vectors, np.eye(4),
                             atol=1e-4)
  np.testing.assert_allclose(zero.values, 0.0)


def test_subspace_top_k_takes_the_algebraic_top_of_an_indefinite_matrix():
  # Eigenvalues 5, 4, 3 and then −6 … −1: the most negative ones are larger
  # in magnitude but must not be returned.
  values = np.concatenate([[5.0, 4.0, 3.0], np.linspace(-6.0, -1.0, 20),
                           np.linspace(0.5, 0.0, 17)])
  m = jnp.asarray(_with_spectrum(5, values))
  approx = _subspace_top_k(jax.random.key(4), m, 3, block=30,
                                 iterations=40)
  np.testing.assert_allclose(approx.values, [5.0, 4.0, 3.0], rtol=1e-4)
  assert float(linalg.subspace_distance(
      approx.vectors, linalg.eigh_top_k(m, 3).vectors)) < 1e-3


def test_subspace_top_k_refuses_bad_arguments():
  m = jnp.eye(6)
  with pytest.raises(ValueError, match="k must be"):
    _subspace_top_k(jax.random.key(0), m, 7)
  with pytest.raises(ValueError, match="block must be"):
    _subspace_top_k(jax.random.key(0), m, 3, block=2)
  with pytest.raises(ValueError, match="iterations must be"):
    _subspace_top_k(jax.random.key(0), m, 3, iterations=-1)
  with pytest.raises(ValueError, match="must be"):
    _subspace_top_k(jax.random.key(0), jnp.ones((3, 4)), 2)


def test_subspace_distance_and_captured_variance():
  q, _ = np.linalg.qr(np.random.default_rng(6).normal(size=(10, 10)))
  a = jnp.asarray(q[:, :3], jnp.float32)
  rotated = a @ jnp.asarray(np.linalg.qr(np.random.default_rng(7).normal(
      size=(3, 3)))[0], jnp.float32)
  assert float(linalg.subspace_distance(a, rotated)) < 1e-5
  other = jnp.asarray(q[:, 3:6], jnp.float32)
  np.testing.assert_allclose(linalg.subspace_distance(a, other), 1.0,
                             atol=1e-5)
  m = jnp.asarray((q * np.arange(10.0, 0.0, -1)) @ q.T, jnp.float32)
  np.testing.assert_allclose(linalg.captured_variance(a, m), 27.0,
                             rtol=1e-5)
  np.testing.assert_allclose(
      linalg.captured_variance_ratio(other, a, m), 18.0 / 27.0, rtol=1e-5)


# Utility on DP-PCA matrices: MNIST-like rows (scikit-learn's 8 × 8 digits
# upsampled to 28 × 28, d = 784, unit rows), noise σ from pca_sigma.


@functools.cache
def _digits_784():
  from scipy import ndimage
  from sklearn.datasets import load_digits
  images = load_digits().images.astype(np.float32)
  rows = np.stack([ndimage.zoom(im, 3.5, order=1) for im in images])
  rows = rows.reshape(len(rows), -1)
  return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _utility_gap(n, epsilon, *, iterations, seeds=(0, 1)):
  """Largest |tr(UᵀCU) − tr(U*ᵀCU*)| / tr(VᵀCV) over the seeds: U the
  subspace top-k, U* the exact top-k of the same noisy matrix, V the top-k
  of the noise-free C (the most any basis can capture)."""
  from mechanisms.pca import dp_pca  # a test-only upward import
  k = 20
  rows = jnp.asarray(_digits_784()[np.random.default_rng(n).choice(
      len(_digits_784()), n, replace=False)])
  clean = rows.T @ rows
  best = linalg.captured_variance(linalg.eigh_top_k(clean, k).vectors, clean)
  sigma = dp_pca.pca_sigma(epsilon=epsilon, delta=1e-5)
  gaps, ratios = [], []
  for seed in seeds:
    noisy = dp_pca.noisy_second_moment(jax.random.key(seed), rows,
                                       jnp.ones(n), sigma=sigma)
    exact = linalg.eigh_top_k(noisy, k).vectors
    approx = _subspace_top_k(jax.random.key(1000 + seed), noisy, k,
                                   iterations=iterations).vectors
    gap = (linalg.captured_variance(approx, clean)
           - linalg.captured_variance(exact, clean)) / best
    gaps.append(abs(float(gap)))
    ratios.append(float(linalg.captured_variance_ratio(approx, exact,
                                                       clean)))
  return max(gaps), min(ratios)


@pytest.mark.slow  # d = 784 eigh and subspace iterations, ~10 s each
@pytest.mark.parametrize("n,epsilon", [(60, 0.1), (60, 1.0), (500, 0.1),
                                       (500, 1.0)])
def test_subspace_top_k_keeps_the_utility_of_eigh_on_dp_pca(n, epsilon):
  gap, ratio = _utility_gap(n, epsilon, iterations=16)
  # Within 2 % of what the best basis captures. Where the noise swamps the
  # data (all but n = 500, ε = 1) the exact top k itself captures only a
  # few per cent, and the ratio to it is the ratio of two small numbers.
  assert gap < 0.02
  if (n, epsilon) == (500, 1.0):
    assert ratio > 0.98


@pytest.mark.slow
def test_the_utility_check_rejects_too_few_iterations():
  gap, ratio = _utility_gap(500, 1.0, iterations=0)
  assert gap > 0.02 and ratio < 0.98


def test_full_precision_marks_every_product_it_traces_and_no_other():
  m = jax.random.normal(jax.random.key(5), (3, 6, 6))
  inner = jax.jit(lambda a: a @ a)   # traced before at the default

  def body(a):
    return jnp.einsum("ij,jk->ik", inner(a), a)

  exact = linalg.full_precision(body)
  assert sum(products.below_full_precision(jax.vmap(body), m).values()) == 2
  assert not products.below_full_precision(jax.vmap(exact), m)
  assert not products.below_full_precision(jax.jit(jax.vmap(exact)), m)
  # A product the caller traces outside the call keeps the default.
  assert sum(products.below_full_precision(
      lambda a: exact(a) @ a, m[0]).values()) == 1
  assert exact.__name__ == "body"
  np.testing.assert_allclose(exact(m[0]), body(m[0]), rtol=1e-6)


def test_the_subspace_top_k_orthonormalises_at_full_precision():
  m = _symmetric(jax.random.key(6), (8, 8))
  assert not products.below_full_precision(
      lambda key, a: linalg.subspace_top_k(key, a, 3), jax.random.key(0), m)
  assert not products.below_full_precision(linalg.orthonormalize, m[:, :3])


_TWO_ORTHONORMALISATIONS = """
import os
cpus = sorted(os.sched_getaffinity(0))[:2]
os.sched_setaffinity(0, cpus)  # the pool of a 2-core machine
import jax
from dpcore import linalg
y = jax.random.normal(jax.random.key(0), (64, 256, 48))
both = jax.jit(lambda a, b: (linalg.orthonormalize(a),
                             linalg.orthonormalize(b)))
for _ in range(10):
  jax.block_until_ready(both(y, 2.0 * y))
print("finished")
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"),
                    reason="needs CPU affinity (Linux)")
def test_two_batched_orthonormalisations_side_by_side_finish():
  # Two independent batched Cholesky-QRs in one program: with jaxlib's
  # batched potrf/trsm kernels both pool threads of a 2-core machine wait
  # inside them and the run never ends (it hung every time with jax
  # 0.10.2); decomposed in turn they take well under a second. The limit
  # only tells a hang from a run, on any load.
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  proc = subprocess.run([sys.executable, "-c", _TWO_ORTHONORMALISATIONS],
                        capture_output=True, text=True, timeout=600,
                        env=env, cwd=os.path.dirname(os.path.dirname(
                            os.path.dirname(os.path.abspath(__file__)))),
                        check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.strip() == "finished"
