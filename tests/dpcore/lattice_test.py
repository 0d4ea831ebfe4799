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


def _int64(pair):
  hi, lo = (np.asarray(w).astype(np.uint64) for w in pair)
  return ((hi << np.uint64(32)) | lo).view(np.int64)


@pytest.mark.parametrize("d", [1, 3, 64])
def test_integer_rows_fit_the_unit_ball_exactly(d):
  rng = np.random.default_rng(d)
  x = rng.normal(size=(3000, d)).astype(np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  x[:1000] *= rng.uniform(0, 1, (1000, 1)).astype(np.float32)
  x[1000] = np.float32(1 + 2 ** -22) * x[1000]  # float32 norm a hair over 1
  q = np.asarray(lattice.integer_rows(x), np.int64)
  assert np.all(np.sum(q * q, axis=1) <= 4 ** lattice.ROW_BITS)
  near = np.all(q == np.round(x * 2.0 ** 9), axis=1)
  # Short rows keep their nearest grid point; for d > 1 many unit rows
  # round past the sphere and are shrunk (at d = 1, ±1 is on the grid).
  assert near[:1000].mean() > 0.9
  assert near[1001:].mean() == 1.0 if d == 1 else near[1001:].mean() < 0.9
  step = 2.0 ** -9 * math.sqrt(d)
  moved = np.linalg.norm(q / 2.0 ** 9 - x, axis=1)
  assert np.all(np.delete(moved, 1000) <= 2 * step)
  # The row a hair over 1 is shrunk into the ball; at d = 1 its entry is
  # past 1, which no row of norm ≤ 1 has, and it is dropped.
  assert moved[1000] <= 2 * step if d > 1 else not q[1000].any()


def test_integer_rows_drop_what_has_no_unit_form():
  x = np.array([[np.nan, 0.0], [1.5, 0.0], [np.inf, 0.0], [0.6, 0.8],
                [1.0, 1e-3]], np.float32)
  q = np.asarray(lattice.integer_rows(x))
  np.testing.assert_array_equal(q[:3], 0)
  np.testing.assert_array_equal(q[3], [307, 410 - 1])  # 0.8·512 = 409.6
  assert q[4] @ q[4] <= 4 ** 9 and q[4][0] == 511  # shrunk, kept
  with pytest.raises(ValueError, match="d <= 8191"):
    lattice.integer_rows(jnp.zeros((2, 8192)))


def test_integer_gram_is_exact_across_chunks():
  rng = np.random.default_rng(7)
  n = 3 * lattice._GRAM_CHUNK + 123
  x = (np.abs(rng.normal(size=(n, 3))) + [5, 0, 0]).astype(np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  q = np.asarray(lattice.integer_rows(x), np.int64)
  gram = _int64(jax.jit(lattice.integer_gram)(q))
  np.testing.assert_array_equal(gram, q.T @ q)
  assert gram.max() > 2 ** 31  # past int32: the 64-bit carry is used
  # Negative entries (two's complement) and a vmapped batch.
  signed = q * np.where(rng.random(q.shape) < 0.5, -1, 1)
  both = jax.vmap(lattice.integer_gram)(jnp.stack([q, signed]))
  np.testing.assert_array_equal(_int64((both[0][1], both[1][1])),
                                signed.T @ signed)


def test_gram_on_lattice_rounds_the_exact_sum_once():
  rng = np.random.default_rng(8)
  x = rng.normal(size=(500, 4)).astype(np.float32)
  x /= 1.01 * np.linalg.norm(x, axis=1, keepdims=True)
  q = np.asarray(lattice.integer_rows(x), np.int64)
  exact = (q.T @ q)[np.triu_indices(4)]
  for log_g in (-20, -18, -10, 0):
    units = np.asarray(lattice.gram_on_lattice(x, 2.0 ** log_g), np.int64)
    shift = log_g + 18
    want = [(int(v) + (1 << (shift - 1))) >> shift if shift > 0
            else int(v) << -shift for v in exact]
    np.testing.assert_array_equal(units, want)
