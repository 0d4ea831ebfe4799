"""Tests for dpcore.validation: bad input fails with a ValueError whose
message names the argument; good input comes back converted."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import validation as v


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, math.nan, math.inf, "1.0",
                                 None, True, np.array([1.0, 2.0])])
def test_check_epsilon_rejects(bad):
  with pytest.raises(ValueError, match="my_eps"):
    v.check_epsilon(bad, "my_eps")


def test_check_epsilon_accepts_and_converts():
  assert v.check_epsilon(2) == 2.0 and isinstance(v.check_epsilon(2), float)
  assert v.check_epsilon(np.float32(0.5)) == 0.5
  assert v.check_epsilon(np.array(1.5)) == 1.5        # 0-d NumPy
  assert v.check_epsilon(jnp.float32(0.25)) == 0.25   # concrete JAX scalar


def test_check_epsilon_rejects_tracers():
  with pytest.raises(ValueError, match="epsilon"):
    jax.jit(v.check_epsilon)(1.0)


@pytest.mark.parametrize("bad", [0.0, 1.0, -1e-5, 1.5, math.nan, None])
def test_check_delta_rejects(bad):
  with pytest.raises(ValueError, match="my_delta"):
    v.check_delta(bad, "my_delta")
  assert v.check_delta(1e-5) == 1e-5


@pytest.mark.parametrize("bad", [0.0, -2.0, math.nan, math.inf, "x"])
def test_check_positive(bad):
  with pytest.raises(ValueError, match="sigma"):
    v.check_positive(bad, "sigma")
  assert v.check_positive(math.inf, "s", allow_inf=True) == math.inf
  assert v.check_positive(3, "s") == 3.0


def test_check_in_range():
  assert v.check_in_range(0.5, "q", 0.0, 1.0) == 0.5
  assert v.check_in_range(1.0, "q", 0.0, 1.0, high_inclusive=True) == 1.0
  assert v.check_in_range(0.0, "q", 0.0, 1.0, low_inclusive=True) == 0.0
  for bad in (0.0, 1.0, -0.1, math.nan, math.inf):
    with pytest.raises(ValueError, match="q must lie in"):
      v.check_in_range(bad, "q", 0.0, 1.0)


@pytest.mark.parametrize("bad", [0, -3, 1.0, 2.5, True, "2", None])
def test_check_positive_int(bad):
  with pytest.raises(ValueError, match="steps"):
    v.check_positive_int(bad, "steps")
  assert v.check_positive_int(np.int64(4), "steps") == 4


@pytest.mark.parametrize("bad,why", [
    (np.ones(3), "2-D"),                          # wrong rank
    (np.ones((2, 2, 2)), "2-D"),
    (np.ones((0, 3)), "rows"),                    # empty
    (np.ones((3, 0)), "column"),                  # no features
    (np.array([[1.0, np.nan]]), "NaN"),          # non-finite
    (np.array([[1.0, np.inf]]), "NaN or infinite"),
    (np.array([["a", "b"]]), "real-valued"),
    (np.ones((2, 2), bool), "real-valued"),
    (np.ones((2, 2), complex), "real-valued"),
])
def test_check_matrix_rejects(bad, why):
  with pytest.raises(ValueError, match="x_train") as err:
    v.check_matrix(bad, "x_train")
  assert why in str(err.value)


def test_check_matrix_accepts_jax_and_min_rows():
  x = v.check_matrix(jnp.ones((3, 2)), "x")
  assert isinstance(x, np.ndarray) and x.shape == (3, 2)
  with pytest.raises(ValueError, match="at least 5"):
    v.check_matrix(np.ones((3, 2)), "x", min_rows=5)


def test_check_row_norms():
  ok = np.array([[0.6, 0.8], [0.0, 0.0], [0.1, 0.2]])
  assert v.check_row_norms(ok, "x").shape == (3, 2)
  with pytest.raises(ValueError, match="x has a row of L2 norm 5") as err:
    v.check_row_norms(np.array([[3.0, 4.0]]), "x")
  assert "normalize_rows" in str(err.value)
  assert v.check_row_norms(np.array([[3.0, 4.0]]), "x", max_norm=5.0
                           ).shape == (1, 2)


@pytest.mark.parametrize("bad,kwargs,why", [
    (np.ones((2, 2)), {}, "1-D"),
    (np.array([]), {}, "empty"),
    (np.array([1.0, np.nan]), {}, "NaN"),
    (np.array([1, 2, 3]), dict(num_examples=4), "4 rows"),
    (np.array([0, 1, 5]), dict(classes=[0, 1, 2]), "outside the class set"),
    (np.array([0, 1, 1]), dict(binary_pm1=True), "-1 and +1"),
    (np.array([-1, 1, 2]), dict(binary_pm1=True), "-1 and +1"),
    (np.array([1, 1, 1]), dict(binary_pm1=True), "both classes"),
    (np.array([-1.0, -1.0]), dict(binary_pm1=True), "both classes"),
])
def test_check_labels_rejects(bad, kwargs, why):
  with pytest.raises(ValueError, match="y_train") as err:
    v.check_labels(bad, "y_train", **kwargs)
  assert why in str(err.value)


def test_check_labels_accepts():
  y = v.check_labels([-1, 1, 1, -1], "y", binary_pm1=True, num_examples=4)
  np.testing.assert_array_equal(y, [-1, 1, 1, -1])
  v.check_labels(np.array([-1.0, 1.0]), "y", binary_pm1=True)
  v.check_labels(np.array([3, 7, 3]), "y", classes=[3, 7, 9])
