"""Kernels against scikit-learn's pairwise kernels (same parameter names)."""

import numpy as np
import pytest
from sklearn.metrics import pairwise

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


@pytest.mark.parametrize("kind", kernels.KERNELS)
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
