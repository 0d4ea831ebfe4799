"""mechanisms.features.projection: orthonormal, from the key alone, Haar."""

import jax
import numpy as np
import pytest

from mechanisms.features import projection


def test_columns_are_orthonormal_and_the_key_decides():
  key = jax.random.key(0)
  q = np.asarray(projection.random_orthonormal(key, 80, 24))
  assert q.shape == (80, 24)
  np.testing.assert_allclose(q.T @ q, np.eye(24), atol=1e-5)
  np.testing.assert_array_equal(
      q, projection.random_orthonormal(key, 80, 24))
  assert not np.allclose(
      q, projection.random_orthonormal(jax.random.key(1), 80, 24))


def test_norms_never_grow():
  x = np.asarray(jax.random.normal(jax.random.key(2), (50, 80)))
  q = np.asarray(projection.random_orthonormal(jax.random.key(3), 80, 24))
  assert np.all(np.linalg.norm(x @ q, axis=1)
                <= np.linalg.norm(x, axis=1) + 1e-5)


def test_the_first_column_is_uniform_on_the_sphere():
  # Haar: the first column's first coordinate has mean 0 and variance
  # 1/dim; without the sign fix QR's convention skews its sign.
  keys = jax.random.split(jax.random.key(4), 4000)
  first = np.asarray(jax.vmap(
      lambda k: projection.random_orthonormal(k, 8, 2)[0, 0])(keys))
  assert abs(first.mean()) < 4 * np.sqrt(1 / 8 / 4000)
  assert first.var() == pytest.approx(1 / 8, rel=0.1)
  assert abs(np.mean(first > 0) - 0.5) < 0.03


@pytest.mark.parametrize("out_dim", [0, 81])
def test_out_of_range_dimension_is_refused(out_dim):
  with pytest.raises(ValueError, match="out_dim"):
    projection.random_orthonormal(jax.random.key(0), 80, out_dim)
