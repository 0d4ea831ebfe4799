"""HOG features checked against scikit-image's ``skimage.feature.hog``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from skimage.feature import _hoghistogram
from skimage.feature import hog as sk_hog
from sklearn.datasets import load_sample_image

from mechanisms.features import hog as hog_lib

# Both sides are float32 where it matters: scikit-image sums each cell in a
# C float, we compute in float32 throughout. Descriptor entries lie in
# [0, 1] and pass through ~20 rounding steps of 2**-24 ≈ 6e-8 each, so 2e-6
# bounds the disagreement (observed: ~7e-8); a pixel put in a wrong bin or
# cell moves entries by ~1e-2, far above it.
ATOL = 2e-6


def _crops(n_per_image: int, size: int = 32) -> np.ndarray:
  """Real photographs (bundled with scikit-learn): random uint8 crops."""
  rng = np.random.default_rng(0)
  crops = []
  for name in ("china.jpg", "flower.jpg"):
    img = load_sample_image(name)
    for _ in range(n_per_image):
      r = rng.integers(0, img.shape[0] - size)
      c = rng.integers(0, img.shape[1] - size)
      crops.append(img[r:r + size, c:c + size])
  return np.stack(crops)


def _sk(images, *, cell=4, bins=9, block=2, block_norm="L2-Hys"):
  colour = images.ndim == 4
  return np.stack([
      sk_hog(im, orientations=bins, pixels_per_cell=(cell, cell),
             cells_per_block=(block, block), block_norm=block_norm,
             channel_axis=-1 if colour else None)
      for im in images])


def test_colour_crops_match_skimage_and_paper_dim():
  images = _crops(6)
  ours = np.asarray(hog_lib.hog_batch(images))
  ref = _sk(images)
  assert ours.shape == (12, 1764) == ref.shape
  assert hog_lib.output_dim(32, 32) == 1764  # 7·7 blocks × 2·2 × 9.
  assert ref.max() > 0.1  # the comparison is not between near-zeros.
  np.testing.assert_allclose(ours, ref, rtol=0, atol=ATOL)


def test_grey_crops_match_skimage():
  images = _crops(3)[..., 1]
  np.testing.assert_allclose(np.asarray(hog_lib.hog_batch(images)),
                             _sk(images), rtol=0, atol=ATOL)


def test_random_float_images_of_odd_size_match_skimage():
  # 37×29 is not a multiple of the cell: trailing pixels are ignored.
  images = np.random.default_rng(1).random((4, 37, 29, 3), np.float32)
  ours = np.asarray(hog_lib.hog_batch(images))
  assert ours.shape == (4, hog_lib.output_dim(37, 29)) == (4, 8 * 6 * 36)
  np.testing.assert_allclose(ours, _sk(images), rtol=0, atol=ATOL)


@pytest.mark.parametrize("cell,bins,block,block_norm,atol", [
    (3, 7, 2, "L2", ATOL),
    (5, 8, 3, "L1", ATOL),
    # sqrt magnifies float32 error of small entries: d√v = dv / (2√v).
    (6, 12, 1, "L1-sqrt", 2e-5),
])
def test_other_settings_match_skimage(cell, bins, block, block_norm, atol):
  images = _crops(1, size=40)
  kwargs = dict(cell=cell, bins=bins, block=block, block_norm=block_norm)
  np.testing.assert_allclose(
      np.asarray(hog_lib.hog_batch(images, **kwargs)),
      _sk(images, **kwargs), rtol=0, atol=atol)


def test_orientation_binning_exact_for_every_integer_gradient():
  # Raw 0..255 pixels give central differences in [-255, 255]; bin all
  # 511² (row, col) gradient pairs with scikit-image's own Cython routine
  # (cells of one pixel) and with ours: every bin must agree.
  g = np.arange(-255, 256, dtype=np.float64)
  g_row, g_col = np.meshgrid(g, g, indexing="ij")
  n = g.size
  hist = np.zeros((n, n, 9))
  _hoghistogram.hog_histograms(g_col, g_row, 1, 1, n, n, n, n, 9, hist)
  moving = np.hypot(g_row, g_col) > 0
  ref = np.argmax(hist, axis=-1)[moving]
  ours = np.asarray(hog_lib._orientation_bins(
      jnp.asarray(g_row, jnp.float32), jnp.asarray(g_col, jnp.float32), 9))
  np.testing.assert_array_equal(ours[moving], ref)
  # The check can fail: signed angles or a half-bin shift would not pass.
  shifted = np.asarray(hog_lib._orientation_bins(
      jnp.asarray(g_row + 0.3 * g_col, jnp.float32),
      jnp.asarray(g_col, jnp.float32), 9))
  assert np.mean(shifted[moving] != ref) > 0.05


def test_single_jit_vmap_and_chunked_agree():
  images = _crops(4)[:7]
  batch = np.asarray(hog_lib.hog_batch(images))
  one = np.asarray(hog_lib.hog(images[3]))
  # Same arithmetic, possibly fused differently by XLA: ulp-level only.
  np.testing.assert_allclose(one, batch[3], rtol=0, atol=1e-7)
  # chunk 3 does not divide 7: the remainder path is exercised.
  chunked = np.asarray(hog_lib.hog_chunked(images, chunk=3))
  np.testing.assert_allclose(chunked, batch, rtol=0, atol=1e-7)
  rows = images.reshape(7, -1).astype(np.float32)
  feats = hog_lib.hog_features(rows, (32, 32, 3), chunk=3)
  assert feats.dtype == np.float32
  np.testing.assert_allclose(feats, batch, rtol=0, atol=1e-7)


def test_float64_under_x64_matches_skimage():
  images = _crops(1).astype(np.float64)
  with jax.enable_x64(True):
    ours = hog_lib.hog_batch(images)
    assert ours.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(ours), _sk(images), rtol=0,
                               atol=ATOL)


def test_flat_constant_image_gives_zeros():
  out = np.asarray(hog_lib.hog(np.full((16, 16, 3), 7, np.uint8)))
  assert out.shape == (hog_lib.output_dim(16, 16),)
  np.testing.assert_array_equal(out, 0.0)


@pytest.mark.parametrize("image,kwargs,match", [
    (np.zeros((7, 32)), {}, "smaller than one block"),
    (np.zeros((32, 32)), {"block_norm": "L3"}, "block_norm"),
    (np.zeros((2, 32, 32, 3)), {}, "hog_batch"),
    (np.zeros((32, 32)), {"cell": 0}, "cell"),
])
def test_rejects_bad_arguments(image, kwargs, match):
  with pytest.raises(ValueError, match=match):
    hog_lib.hog(image, **kwargs)


def test_hog_features_rejects_wrong_image_shape():
  with pytest.raises(ValueError, match="image_shape"):
    hog_lib.hog_features(np.zeros((3, 1024), np.float32), (32, 32, 3))
