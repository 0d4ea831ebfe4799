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


@pytest.mark.parametrize("sizes", [(4, 10, 7), (6, 6, 6, 6), (1,)])
def test_partition_equals_padding_the_shuffled_runs(sizes):
  # The vectorised gather against pad() of explicit row lists: the same
  # rows, in the same order, in the same dtypes.
  rng = np.random.default_rng(1)
  x = rng.normal(size=(30, 3)).astype(np.float32)
  y = rng.integers(0, 5, 30)
  parts = partition.partition(jax.random.key(3), x, y, sizes=sizes)
  order = np.asarray(jax.random.permutation(jax.random.key(3), 30))
  bounds = np.cumsum((0,) + sizes)
  runs = [order[bounds[i]:bounds[i + 1]] for i in range(len(sizes))]
  expected = partition.pad([x[r] for r in runs], [y[r] for r in runs])
  for got, want in zip(parts, expected, strict=True):
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_many_equal_participants_are_disjoint_and_complete():
  count, rows = 20_000, 3
  x = np.arange(2 * count * rows, dtype=np.float32).reshape(-1, 2)
  y = np.arange(count * rows)
  parts = partition.partition(jax.random.key(0), x, y,
                              sizes=(rows,) * count)
  assert parts.x.shape == (count, rows, 2)
  assert parts.mask.min() == 1.0
  np.testing.assert_array_equal(np.sort(parts.y.ravel()), y)  # each row once
  np.testing.assert_array_equal(parts.x[..., 0], 2 * parts.y)


def test_check_sizes_names_the_first_bad_entry():
  with pytest.raises(ValueError, match="participant 2 has size 0"):
    partition.check_sizes((3, 4, 0, 0), 100)
  with pytest.raises(ValueError, match="participant 1 has size True"):
    partition.check_sizes((3, True), 100)
  with pytest.raises(ValueError, match="participant 0 has size 2.0"):
    partition.check_sizes((2.0, 3), 100)
  assert partition.check_sizes(np.full(5, 2), 10) == (2,) * 5
