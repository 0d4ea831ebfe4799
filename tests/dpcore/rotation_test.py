"""dpcore.rotation: the randomised Hadamard rotation and its inverse."""

import doctest

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import linalg

from dpcore import rotation
from tests.dpcore import modes


def test_docstring_examples():
  assert doctest.testmod(rotation).failed == 0


@pytest.mark.parametrize("dim,padded", [(1, 1), (2, 2), (3, 4), (8, 8),
                                        (650, 1024)])
def test_padded_dim(dim, padded):
  assert rotation.padded_dim(dim) == padded


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_padded_dim_refuses(bad):
  with pytest.raises(ValueError, match="dim"):
    rotation.padded_dim(bad)


def test_walsh_hadamard_is_the_normalised_sylvester_matrix():
  eye = jnp.eye(16)
  h = np.asarray(rotation.walsh_hadamard(eye))
  np.testing.assert_allclose(h, linalg.hadamard(16) / 4.0, atol=1e-6)


@pytest.mark.parametrize("d", [1, 2, 8, 32, 8192])
def test_walsh_hadamard_is_the_radix_2_butterfly_bitwise(d):
  # Two stages a pass do the same float32 additions in the same order as
  # one stage a pass: the same floats, bit for bit.
  x = np.asarray(jax.random.normal(jax.random.key(d), (3, d)), np.float32)
  y, half = x.copy(), 1
  while half < d:
    y = y.reshape(3, d // (2 * half), 2, half)
    y = np.stack([y[:, :, 0] + y[:, :, 1], y[:, :, 0] - y[:, :, 1]], axis=2)
    half *= 2
  want = y.reshape(3, d) * np.float32(1.0 / np.sqrt(d))
  np.testing.assert_array_equal(np.asarray(rotation.walsh_hadamard(x)),
                                want)


@pytest.mark.parametrize("dim", [5, 16, 100])
def test_rotation_is_orthonormal(dim):
  key = jax.random.key(3)
  padded = rotation.padded_dim(dim)
  # R's columns: rotate the basis of R^d (and of the padding).
  r = np.asarray(rotation.rotate(key, jnp.eye(padded)))
  np.testing.assert_allclose(r @ r.T, np.eye(padded), atol=1e-5)
  x = jax.random.normal(jax.random.key(4), (7, dim))
  y = rotation.rotate(key, x)
  np.testing.assert_allclose(jnp.linalg.norm(y, axis=1),
                             jnp.linalg.norm(x, axis=1), rtol=1e-5)


def test_unrotate_inverts_and_needs_the_same_key():
  x = jax.random.normal(jax.random.key(0), (3, 37))
  y = rotation.rotate(jax.random.key(1), x)
  np.testing.assert_allclose(rotation.unrotate(jax.random.key(1), y, 37), x,
                             atol=1e-5)
  wrong = rotation.unrotate(jax.random.key(2), y, 37)
  assert float(jnp.max(jnp.abs(wrong - x))) > 0.1


def test_signs_differ_by_key_and_are_balanced():
  s = rotation.signs(jax.random.key(0), 4096)
  assert set(np.unique(np.asarray(s))) == {-1.0, 1.0}
  assert abs(float(jnp.mean(s))) < 4.0 / 64  # 4 standard errors
  assert not jnp.array_equal(s, rotation.signs(jax.random.key(1), 4096))


def test_a_spike_is_spread_flat():
  # e_0 rotated: every coordinate has magnitude 1/√D exactly.
  y = rotation.rotate(jax.random.key(5), jnp.eye(64)[0])
  np.testing.assert_allclose(jnp.abs(y), 1.0 / 8.0, rtol=1e-6)


def test_unrotate_checks_the_length():
  with pytest.raises(ValueError, match="coordinates"):
    rotation.unrotate(jax.random.key(0), jnp.zeros(8), 3)


def test_same_rotation_with_and_without_x64():
  # A Python 0.5 as the signs' probability draws float64 coins under x64.
  x = np.linspace(-3.0, 7.0, 9).astype(np.float32)
  modes.assert_same_in_both_modes(lambda: (
      rotation.signs(jax.random.key(0), 64),
      rotation.rotate(jax.random.key(1), x),
      rotation.unrotate(jax.random.key(1), np.ones(16, np.float32), 9)))
