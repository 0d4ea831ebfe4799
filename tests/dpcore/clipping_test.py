"""Tests for dpcore.clipping: joint pytree clipping, its sensitivity, and the
per-row bounds, including adversarial (huge, NaN, inf) inputs."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import clipping

C = 1.5
RTOL = 1e-6  # float32 rounding of g·C/‖g‖ (a few ulps)
# One compilation per input structure instead of op-by-op eager dispatch.
clipped_sum = jax.jit(clipping.clipped_sum)
clip_to_norm = jax.jit(clipping.clip_to_norm)


def _norm(tree):
  return float(np.sqrt(sum(np.sum(np.asarray(g, np.float64) ** 2)
                           for g in jax.tree.leaves(tree))))


def _tree(key, scale):
  k1, k2 = jax.random.split(key)
  return {"w": scale * jax.random.normal(k1, (3, 4)),
          "b": scale * jax.random.normal(k2, (4,))}


def test_clip_to_norm_is_joint_and_keeps_direction():
  big = _tree(jax.random.key(0), 10.0)
  out = clip_to_norm(big, C)
  assert _norm(out) == pytest.approx(C, rel=RTOL)
  # One common factor for all leaves (joint, not per-leaf clipping).
  factor = C / _norm(big)
  for g, h in zip(jax.tree.leaves(big), jax.tree.leaves(out), strict=True):
    np.testing.assert_allclose(h, factor * np.asarray(g), rtol=1e-5)
  small = _tree(jax.random.key(1), 0.01)
  jax.tree.map(np.testing.assert_array_equal,
               clip_to_norm(small, C), small)


@pytest.mark.parametrize("value", [1e30, 3e38, -1e25])
def test_huge_finite_gradient_is_clipped_not_overflowed(value):
  g = {"w": jnp.full((3, 4), value, jnp.float32), "b": jnp.ones((4,))}
  out = clipping.clip_to_norm(g, C)
  assert np.isfinite(_norm(out)) and _norm(out) <= C * (1 + RTOL)
  true_norm = np.sqrt(12 * np.float64(value) ** 2 + 4)
  if true_norm < 1e38:
    # Its squared norm is representable: it is clipped, not discarded.
    assert float(clipping.global_norm(g)) == pytest.approx(true_norm,
                                                           rel=RTOL)
    assert _norm(out) == pytest.approx(C, rel=RTOL)
  else:
    # Beyond float32: the norm is inf and the example is zeroed (bounded).
    assert np.isinf(float(clipping.global_norm(g))) and _norm(out) == 0.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_gradient_is_zeroed(bad):
  g = _tree(jax.random.key(2), 1.0)
  g["w"] = g["w"].at[1, 2].set(bad)
  out = clip_to_norm(g, C)
  for leaf in jax.tree.leaves(out):
    np.testing.assert_array_equal(leaf, 0.0)


@functools.cache
def _adversarial_batch(n=12):
  per = jax.jit(jax.vmap(lambda k: _tree(k, 3.0)))(
      jax.random.split(jax.random.key(3), n))
  per["w"] = per["w"].at[0].set(1e30)           # huge finite
  per["b"] = per["b"].at[1, 0].set(jnp.nan)     # NaN
  per["w"] = per["w"].at[2, 0, 0].set(jnp.inf)  # inf
  per["w"] = per["w"].at[3].set(0.0)            # zero gradient
  per["b"] = per["b"].at[3].set(0.0)
  per["w"] = per["w"].at[4].multiply(1e-3)      # inside the ball
  per["b"] = per["b"].at[4].multiply(1e-3)
  return per


def test_clipped_sum_bound_and_norms():
  per = _adversarial_batch()
  total, norms = clipped_sum(per, C)
  assert total["w"].shape == (3, 4) and norms.shape == (12,)
  assert np.isfinite(_norm(total))
  assert _norm(total) <= 12 * C * (1 + RTOL)
  # Pre-clipping norms are reported (non-finite ones as such).
  assert not np.isfinite(norms[1]) and not np.isfinite(norms[2])
  assert norms[0] > 1e30 and norms[3] == 0.0
  # The sum equals the sum of individually clipped examples.
  want = jax.tree.map(
      lambda g: np.sum(g, axis=0),
      jax.jit(jax.vmap(clipping.clip_to_norm, in_axes=(0, None)))(per, C))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5),
               total, want)


def test_clipped_sum_sensitivity_remove_one():
  # The stated sensitivity: removing any one example (adversarial ones
  # included) moves the sum by at most C.
  per = _adversarial_batch()
  n = 12
  total, _ = clipped_sum(per, C)

  def without(i):
    return clipped_sum(per, C, weights=1.0 - jax.nn.one_hot(i, n))[0]

  for i in range(n):
    diff = jax.tree.map(lambda a, b: a - b, total, without(i))
    assert _norm(diff) <= C * (1 + 1e-5)
  # The huge example really moves it by ≈ C (clipped, not dropped).
  diff = jax.tree.map(lambda a, b: a - b, total, without(0))
  assert _norm(diff) == pytest.approx(C, rel=1e-4)


def test_clipped_sum_weights_select_examples():
  per = jax.vmap(lambda k: _tree(k, 2.0))(
      jax.random.split(jax.random.key(4), 6))
  w = jnp.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
  got, _ = clipped_sum(per, C, weights=w)
  keep = np.flatnonzero(np.asarray(w))
  sub = jax.tree.map(lambda g: g[keep], per)
  want, _ = clipped_sum(sub, C)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5),
               got, want)


def test_weights_outside_zero_one_are_bounded():
  # Masks are documented 0/1; the jitted sum enforces it: a weight of 5
  # counts once (not 5C), NaN and negative weights count zero.
  per = {"g": jnp.array([[3.0, 4.0], [0.0, 2.0], [1.0, 0.0]])}
  got, _ = clipped_sum(per, C, weights=jnp.array([5.0, jnp.nan, -1.0]))
  want, _ = clipped_sum(per, C, weights=jnp.array([1.0, 0.0, 0.0]))
  np.testing.assert_allclose(got["g"], want["g"], rtol=RTOL)
  np.testing.assert_allclose(got["g"], [0.6 * C, 0.8 * C], rtol=RTOL)
  assert _norm(got) <= C * (1 + RTOL)
  np.testing.assert_array_equal(
      clipping.clip_weights(jnp.array([0.0, 0.25, 1.0, 5.0, -1.0, jnp.nan,
                                       jnp.inf])),
      np.array([0.0, 0.25, 1.0, 1.0, 0.0, 0.0, 1.0], np.float32))
  # Integer and boolean masks become floating point.
  assert clipping.clip_weights(jnp.array([2, 0])).dtype == jnp.float32
  assert clipping.clip_weights(jnp.array([True])).dtype == jnp.float32


def test_clipped_sum_jit_matches_eager():
  per = _adversarial_batch()
  eager = clipping.clipped_sum(per, C)
  jitted = clipped_sum(per, C)
  # Summation order may differ: float32 accumulation of 12 terms of ≤ C.
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6,
                                                       atol=1e-6),
               eager, jitted)


X = np.array([
    [3.0, 4.0, 0.0],
    [0.3, 0.4, 0.0],
    [0.0, 0.0, 0.0],
    [1e30, -1e30, 1e30],   # huge finite row: its square overflows
    [np.nan, 1.0, 0.0],
    [np.inf, 0.0, 0.0],
    [1e-3, 0.0, -1e-3],
], np.float32)


def _row_norms(x):
  return np.linalg.norm(np.asarray(x, np.float64), axis=1)


def test_row_norms_no_overflow():
  got = np.asarray(clipping.row_norms(jnp.asarray(X)))
  want = _row_norms(X)
  np.testing.assert_allclose(got[[0, 1, 2, 3, 6]], want[[0, 1, 2, 3, 6]],
                             rtol=1e-6)
  assert np.isnan(got[4]) and np.isinf(got[5])


def test_normalize_rows():
  out = np.asarray(clipping.normalize_rows(jnp.asarray(X)))
  norms = _row_norms(out)
  np.testing.assert_allclose(norms[[0, 1, 3, 6]], 1.0, rtol=1e-6)
  np.testing.assert_allclose(out[0], [0.6, 0.8, 0.0], rtol=1e-6)
  np.testing.assert_array_equal(out[[2, 4, 5]], 0.0)  # zero / NaN / inf
  assert np.all(np.isfinite(out))


def test_clip_rows():
  out = np.asarray(clipping.clip_rows(jnp.asarray(X), max_norm=1.0))
  norms = _row_norms(out)
  assert np.all(np.isfinite(out)) and np.all(norms <= 1.0 + RTOL)
  np.testing.assert_allclose(out[0], [0.6, 0.8, 0.0], rtol=1e-6)
  np.testing.assert_array_equal(out[[1, 2, 6]], X[[1, 2, 6]])  # inside: kept
  assert norms[3] == pytest.approx(1.0, rel=RTOL)   # huge: clipped
  np.testing.assert_array_equal(out[[4, 5]], 0.0)   # NaN / inf: zeroed
  half = np.asarray(clipping.clip_rows(jnp.asarray(X[:2]), max_norm=0.25))
  np.testing.assert_allclose(_row_norms(half), 0.25, rtol=1e-6)


def test_clip_to_box():
  x = jnp.array([[-3.0, 0.2, 7.0], [np.nan, np.inf, -np.inf]])
  out = np.asarray(clipping.clip_to_box(x, low=-1.0, high=2.0))
  np.testing.assert_array_equal(
      out, np.array([[-1.0, 0.2, 2.0], [0.5, 2.0, -1.0]], np.float32))


def test_row_ops_jit_match_eager():
  x = jnp.asarray(X)
  for f in (clipping.normalize_rows, clipping.clip_rows,
            clipping.clip_to_box):
    np.testing.assert_allclose(jax.jit(f)(x), f(x), rtol=1e-6)


def test_integer_rows_and_float64_rows():
  out = clipping.normalize_rows(jnp.array([[3, 4], [0, 0]]))
  np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]], rtol=1e-6)
  with jax.enable_x64(True):
    x = jnp.array([[1e200, -1e200], [3.0, 4.0]])  # squares overflow f64
    assert clipping.clip_rows(x).dtype == jnp.float64
    np.testing.assert_allclose(clipping.row_norms(x), [np.sqrt(2) * 1e200,
                                                       5.0], rtol=1e-12)
    np.testing.assert_allclose(
        np.linalg.norm(clipping.normalize_rows(x), axis=1), 1.0, rtol=1e-12)


def test_mixed_precision_tree():
  # A float16 leaf next to a huge float32 leaf: the norm is computed in the
  # common dtype, so neither leaf is lost to under/overflow.
  g = {"a": jnp.full((3,), 1e30, jnp.float32), "b": jnp.ones(2, jnp.float16)}
  assert float(clipping.global_norm(g)) == pytest.approx(np.sqrt(3) * 1e30,
                                                         rel=1e-6)
  tiny = {"a": jnp.full((3,), 1e-30, jnp.float32),
          "b": jnp.zeros(2, jnp.bfloat16)}
  out = clipping.clip_to_norm(tiny, C)
  np.testing.assert_array_equal(out["a"], tiny["a"])  # inside: untouched
  assert out["b"].dtype == jnp.bfloat16


# -- public-bounds preprocessing ----------------------------------------------


def test_unit_rows():
  x = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0], [255.0, 0.0, 255.0],
                [1e-30, 0.0, 0.0]])
  out = np.asarray(clipping.unit_rows(x, (0, 255)))
  norms = np.linalg.norm(out.astype(np.float64), axis=1)
  np.testing.assert_allclose(norms, [1, 0, 1, 1], atol=1e-6)
  assert norms.max() <= 1 + 1e-6  # float32 rounding only
  np.testing.assert_allclose(out[0], [0.6, 0.8, 0.0], rtol=1e-6)
  # Per-feature highs reweight features before the normalisation.
  per = clipping.unit_rows([[2.0, 2.0]], (0, [2.0, 1.0]))
  np.testing.assert_allclose(per[0], np.array([1.0, 2.0]) / np.sqrt(5),
                             rtol=1e-6)
  # Data-independent: changing another row leaves row 0 unchanged.
  x2 = x.copy()
  x2[2] *= 1000
  np.testing.assert_array_equal(clipping.unit_rows(x2, (0, 255))[0], out[0])
  with pytest.raises(ValueError, match="> 0"):
    clipping.unit_rows(x, (-2, -1))


def test_unit_rows_is_nan_safe_and_keeps_float64():
  x = np.array([[np.nan, 1.0], [np.inf, 0.0], [1e300, 1e300], [0.1, 0.2]])
  with jax.enable_x64(True):
    out = np.asarray(clipping.unit_rows(x))
  assert out.dtype == np.float64
  np.testing.assert_array_equal(out[:2], 0.0)  # non-finite rows → zero
  np.testing.assert_allclose(np.linalg.norm(out[2:], axis=1), 1.0,
                             rtol=1e-15)
  # float64 precision survives (a float32 round trip would not).
  np.testing.assert_allclose(out[3], np.array([0.1, 0.2]) / np.hypot(
      0.1, 0.2), rtol=1e-15)


def test_scale_to_box():
  out = clipping.scale_to_box([[0.0, 127.5, 255.0, 300.0, -5.0]], (0, 255))
  np.testing.assert_allclose(out[0], [-1, 0, 1, 1, -1], atol=1e-6)
  per = clipping.scale_to_box([[1.0, 1.0]], ([0.0, -1.0], [2.0, 1.0]))
  np.testing.assert_allclose(per[0], [0.0, 1.0], atol=1e-6)
  with pytest.raises(ValueError, match="public feature bounds"):
    clipping.scale_to_box([[1.0]], None)
  with pytest.raises(ValueError, match="low < high"):
    clipping.scale_to_box([[1.0]], (1, 1))
  with pytest.raises(ValueError, match="length 3"):
    clipping.scale_to_box(np.zeros((1, 3)), ([0, 0], [1, 1]))
  with pytest.raises(ValueError, match="2-D"):
    clipping.scale_to_box(np.zeros(3), (0, 1))


def test_scale_to_box_is_nan_safe_and_keeps_float64():
  x = np.array([[np.nan, np.inf, -np.inf, 0.3]])
  with jax.enable_x64(True):
    out = np.asarray(clipping.scale_to_box(x, (0, 1)))
  assert out.dtype == np.float64
  # NaN → the box centre, ±inf → the faces; 0.3 → −0.4 to float64 precision.
  np.testing.assert_allclose(out[0], [0.0, 1.0, -1.0, -0.4], rtol=1e-15)
  assert np.all(np.abs(out) <= 1.0)
