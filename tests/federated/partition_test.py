"""Tests of federated.partition."""

import jax
import numpy as np
import pytest

from federated import partition


def test_partition_is_disjoint_padded_and_keyed():
  x = np.arange(60, dtype=np.float32).reshape(30, 2)
  y = np.arange(30)
  parts = partition.partition(jax.random.key(0), x, y, sizes=(4, 10, 7))
  assert parts.x.shape == (3, 10, 2)
  np.testing.assert_array_equal(parts.sizes, [4, 10, 7])
  np.testing.assert_array_equal(parts.mask.sum(axis=1), [4, 10, 7])
  taken = np.concatenate([parts.y[i, :s] for i, s in enumerate(parts.sizes)])
  assert len(set(taken.tolist())) == 21  # disjoint
  for i, s in enumerate(parts.sizes):
    # Rows stay paired with their labels; padding is zero.
    np.testing.assert_array_equal(parts.x[i, :s, 0], 2 * parts.y[i, :s])
    assert np.all(parts.x[i, s:] == 0)
  again = partition.partition(jax.random.key(0), x, y, sizes=(4, 10, 7))
  np.testing.assert_array_equal(again.y, parts.y)
  other = partition.partition(jax.random.key(1), x, y, sizes=(4, 10, 7))
  assert not np.array_equal(other.y, parts.y)


def test_even_sizes_and_refusals():
  assert partition.even_sizes(100, 5, 20) == (20,) * 5
  with pytest.raises(ValueError, match="at most 16"):
    partition.even_sizes(80, 5, 17)
  x = np.zeros((10, 2))
  y = np.zeros(10)
  with pytest.raises(ValueError, match="at least one row"):
    partition.partition(jax.random.key(0), x, y, sizes=(3, 0))
  with pytest.raises(ValueError, match="only 10 rows"):
    partition.partition(jax.random.key(0), x, y, sizes=(6, 6))
  with pytest.raises(ValueError, match="no rows"):
    partition.pad([np.zeros((2, 2)), np.zeros((0, 2))],
                  [np.zeros(2), np.zeros(0)])
  x[1, 1] = np.nan
  with pytest.raises(ValueError, match="NaN"):
    partition.partition(jax.random.key(0), x, y, sizes=(3, 3))
