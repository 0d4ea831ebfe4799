"""dpcore.lattice: rounding to the grid and the grid mechanisms."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import lattice
from tests.dpcore import modes


def test_granularity_must_be_a_power_of_two():
  with pytest.raises(ValueError, match="power of two"):
    lattice.check_granularity(0.3)
  assert lattice.check_granularity(2 ** -10) == 2.0 ** -10


def test_nearest_rounding_can_move_a_full_grid_step():
  # Why the lattice sensitivity is Δ/γ + √d and not Δ/γ + √d/2.
  a, b = jnp.float32(0.495), jnp.float32(0.505)
  diff = int(lattice.to_lattice(b, 1.0) - lattice.to_lattice(a, 1.0))
  assert diff == 1 > 0.01 + 0.5
  assert diff <= lattice.lattice_l2_sensitivity(0.01, granularity=1.0,
                                                dim=1)


def test_gaussian_mechanism_on_the_grid():
  g = 2.0 ** -6
  value = jnp.array([0.1, -2.3, 7.77], jnp.float32)
  z, sens = lattice.gaussian_mechanism(
      jax.random.key(4), value, sensitivity=1.0, sigma=5, granularity=g)
  assert z.dtype == jnp.int32
  assert sens == pytest.approx(64.0 + math.sqrt(3))
  floats = lattice.from_lattice(z, g)
  # |z| < 2²⁴: z·γ is exact in float32 and dividing by γ gives z back.
  np.testing.assert_array_equal(np.asarray(floats) / g, np.asarray(z))
  zl, sens1 = lattice.laplace_mechanism(
      jax.random.key(5), value, sensitivity=1.0, scale=3, granularity=g)
  assert zl.dtype == jnp.int32 and sens1 == 64.0 + 3


def test_grid_mechanism_noise_is_centred_on_the_rounded_query():
  g = 2.0 ** -3
  value = jnp.full((20_000,), 1.3, jnp.float32)  # rounds to 10 grid steps
  z, _ = lattice.gaussian_mechanism(jax.random.key(6), value,
                                    sensitivity=1.0, sigma=4,
                                    granularity=g)
  noise = np.asarray(z) - 10
  # Mean 0, variance ≈ 16 (discrete Gaussian, σ ≥ 1: variance within
  # 1e-10 of σ²); standard errors from 2·10⁴ draws.
  assert abs(noise.mean()) < 5 * 4 / math.sqrt(20_000)
  assert abs(noise.var() - 16.0) < 5 * 16 * math.sqrt(2 / 20_000)


def test_same_release_with_and_without_x64():
  # A Python number is rounded in float32 in both modes: 0.0625000001/2⁻³
  # is 0.5 in float32 (rounds to 0) but 0.5000000008 in float64 (to 1).
  value = np.array([0.1, -2.3, 7.77], np.float32)
  modes.assert_same_in_both_modes(lambda: (
      lattice.gaussian_mechanism(jax.random.key(0), value, sensitivity=1.0,
                                 sigma=8, granularity=2 ** -2)[0],
      lattice.laplace_mechanism(jax.random.key(1), value, sensitivity=1.0,
                                scale=3, granularity=2 ** -2)[0],
      lattice.to_lattice(0.0625000001, 2 ** -3)))
