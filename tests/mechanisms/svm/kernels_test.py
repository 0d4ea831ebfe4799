"""Kernels against scikit-learn's pairwise kernels (same parameter names)."""

import jax
import numpy as np
import pytest
from scipy import sparse
from sklearn.metrics import pairwise

from dpcore import options
from mechanisms.svm import kernels


def data():
  rng = np.random.default_rng(0)
  return rng.normal(size=(7, 4)), rng.normal(size=(5, 4))


@pytest.mark.parametrize("kind,ref", [
    ("linear", lambda a, b: pairwise.linear_kernel(a, b)),
    ("rbf", lambda a, b: pairwise.rbf_kernel(a, b, gamma=0.3)),
    ("poly", lambda a, b: pairwise.polynomial_kernel(
        a, b, degree=3, gamma=0.3, coef0=1.5)),
    ("sigmoid", lambda a, b: pairwise.sigmoid_kernel(
        a, b, gamma=0.3, coef0=1.5)),
])
def test_kernel_matrix_matches_sklearn(kind, ref):
  a, b = data()
  spec = kernels.KernelSpec(kind, gamma=0.3, coef0=1.5, degree=3)
  got = np.asarray(kernels.kernel_matrix(spec, a.astype(np.float32),
                                         b.astype(np.float32)))
  np.testing.assert_allclose(got, ref(a, b), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("kind", list(options.Kernel))
def test_rows_and_diagonal_agree_with_matrix(kind):
  a, _ = data()
  spec = kernels.KernelSpec(kind, gamma=0.2, coef0=0.5, degree=2)
  full = np.asarray(kernels.kernel_matrix(spec, a, a))
  rows = np.asarray(kernels.kernel_rows(spec, a, kernels.squared_norms(a),
                                        np.array([4, 1])))
  np.testing.assert_allclose(rows, full[[4, 1]], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(kernels.kernel_diagonal(spec, a)),
                             np.diag(full), rtol=1e-5, atol=1e-5)


def test_default_gamma_is_one_over_features():
  assert kernels.KernelSpec("rbf").resolve(13).gamma == pytest.approx(1 / 13)
  assert kernels.KernelSpec("rbf", gamma=2.0).resolve(13).gamma == 2.0


def test_decision_values_blocks():
  a, b = data()
  spec = kernels.KernelSpec("rbf", gamma=0.5)
  coef = np.linspace(-1, 1, a.shape[0]).astype(np.float32)
  got = np.asarray(kernels.decision_values(spec, a, coef, 0.25, b,
                                           block_rows=2))
  ref = pairwise.rbf_kernel(b, a, gamma=0.5) @ coef + 0.25
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs,match", [
    ({"kind": "laplacian"}, "kernel must be one of"),
    ({"gamma": 0.0}, "gamma must be > 0"),
    ({"gamma": float("nan")}, "gamma"),
    ({"degree": 0}, "degree must be"),
])
def test_bad_kernel_parameters(kwargs, match):
  with pytest.raises(ValueError, match=match):
    kernels.KernelSpec(**kwargs)


def _sparse_data():
  # 9 × 6 with about half the entries zero, one row all zero.
  rng = np.random.default_rng(2)
  x = rng.normal(size=(9, 6)) * (rng.random((9, 6)) < 0.5)
  x[3] = 0.0
  return x


def test_sparse_rows_hold_each_rows_nonzeros_in_order():
  x = _sparse_data()
  csr = sparse.csr_matrix(x)
  csr.sort_indices()
  rows = kernels.sparse_rows(x, "float32")
  nnz = np.diff(csr.indptr)
  assert rows.cols.shape == rows.vals.shape == (9, nnz.max())
  assert kernels.sparse_width(x) == nnz.max()
  np.testing.assert_array_equal(np.asarray(rows.nnz), nnz)
  for t in range(9):
    got = slice(0, nnz[t])
    want = slice(csr.indptr[t], csr.indptr[t + 1])
    np.testing.assert_array_equal(np.asarray(rows.cols)[t, got],
                                  csr.indices[want])
    np.testing.assert_array_equal(np.asarray(rows.vals)[t, got],
                                  csr.data[want].astype(np.float32))
  np.testing.assert_array_equal(np.asarray(rows.xt), x.T.astype(np.float32))
  assert kernels.sparse_width(np.zeros((3, 4))) == 1


@pytest.mark.parametrize("kind", list(options.Kernel))
@pytest.mark.slow
def test_sparse_rows_agree_with_matrix(kind):
  x = _sparse_data()
  spec = kernels.KernelSpec(kind, gamma=0.2, coef0=0.5, degree=2)
  with jax.enable_x64(True):
    rows = kernels.sparse_rows(x, "float64")
    sq = kernels.sparse_squared_norms(rows)
    full = np.asarray(kernels.kernel_matrix(spec, x, x))
    for i in (0, 3, 8):  # row 3 is all zero
      got = np.asarray(kernels.sparse_kernel_row(spec, rows, sq, i))
      np.testing.assert_allclose(got, full[i], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(
        np.asarray(kernels.kernel_diagonal(spec, x, sq=sq)), np.diag(full),
        rtol=1e-13)


def test_sparse_rbf_rows_are_exactly_one_on_the_diagonal():
  # ‖x_i‖² and x_i·x_i are the same running sum, so the distance of a row
  # to itself is exactly 0 (squared_norms' reduction order would not
  # promise that).
  rng = np.random.default_rng(5)
  x = rng.random((40, 30)) * (rng.random((40, 30)) < 0.3)
  spec = kernels.KernelSpec("rbf", gamma=0.7)
  with jax.enable_x64(True):
    rows = kernels.sparse_rows(x, "float64")
    sq = kernels.sparse_squared_norms(rows)
    diag = [float(kernels.sparse_kernel_row(spec, rows, sq, i)[i])
            for i in range(40)]
  assert diag == [1.0] * 40
