"""Tests of mechanisms.features.normalization: group norm, data norm."""

import math

import jax
import numpy as np
import pytest
from scipy import stats

from dpcore import accounting, shape
from mechanisms.features import normalization as nm


def _features(n=50, k=6, seed=0):
  rng = np.random.default_rng(seed)
  scale = np.linspace(0.1, 3.0, k)[None, :, None, None]
  return (rng.random((n, k, 3, 3)) * scale + scale).astype(np.float32)


def test_group_norm_normalises_each_group_of_each_example():
  x = _features()
  y = np.asarray(nm.group_norm(x, num_groups=3))
  groups = y.reshape(len(x), 3, -1)
  np.testing.assert_allclose(groups.mean(-1), 0.0, atol=1e-5)
  np.testing.assert_allclose(groups.var(-1), 1.0, rtol=1e-3)
  # Per example: changing another example changes nothing.
  x2 = x.copy()
  x2[1:] *= 7.0
  np.testing.assert_array_equal(np.asarray(nm.group_norm(x2, num_groups=3))[0],
                                y[0])
  # Groups are consecutive channels: with G = 3, channels 0–1 share one.
  assert not np.allclose(y.reshape(len(x), 6, -1).mean(-1)[:, 0], 0.0,
                         atol=1e-3)


def test_group_norm_refuses_groups_that_do_not_divide():
  with pytest.raises(ValueError, match="num_groups=4 must divide the 6"):
    nm.group_norm(_features(), num_groups=4)


def test_plan_has_the_shape_and_its_ledger_epsilon():
  plan = nm.make_plan(epsilon=0.5, delta=1e-5, num_examples=50, channels=6,
                      clip_mean=1.0, clip_square=2.0)
  shape.check_plan(plan)
  shape.check_release(nm.release)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  assert ledger.guarantee(delta=1e-5).epsilon == pytest.approx(0.5, rel=1e-4)
  assert plan.sensitivity == pytest.approx(math.sqrt(2))
  by_sigma = nm.make_plan(epsilon=None, noise_multiplier=8.0, delta=1e-5,
                          num_examples=50, channels=6, clip_mean=1.0,
                          clip_square=2.0)
  assert by_sigma.sigma == pytest.approx(8.0 * math.sqrt(2))
  ledger = accounting.PrivacyLedger()
  by_sigma.record(ledger)
  assert ledger.guarantee(delta=1e-5).epsilon == pytest.approx(
      by_sigma.epsilon, rel=1e-3)
  with pytest.raises(ValueError, match="exactly one"):
    nm.make_plan(epsilon=1.0, noise_multiplier=8.0, delta=1e-5,
                 num_examples=5, channels=6, clip_mean=1.0, clip_square=1.0)


def test_noise_scale_is_the_plans_sigma_and_rejects_a_wrong_one():
  # Zero features: the noisy sums are the noise alone.
  plan = nm.make_plan(epsilon=1.0, delta=1e-5, num_examples=4, channels=8,
                      clip_mean=1.0, clip_square=1.0)
  x = np.zeros((4, 8, 2, 2), np.float32)
  keys = jax.random.split(jax.random.key(3), 500)
  a, b = jax.vmap(lambda k: nm.noisy_sums(k, plan, x))(keys)
  z = np.concatenate([np.ravel(a), np.ravel(b)])  # 8,000 draws
  assert stats.kstest(z / plan.sigma, "norm").pvalue > 1e-3
  for wrong in (0.8, 1.25):
    assert stats.kstest(z / (wrong * plan.sigma), "norm").pvalue < 1e-6


def test_sensitivity_is_enforced_inside_the_release():
  plan = nm.make_plan(epsilon=1.0, delta=1e-5, num_examples=50, channels=6,
                      clip_mean=0.5, clip_square=0.5,
                      relation="replace_one")
  x = _features()
  x_far = x.copy()
  x_far[7] = 1e6  # one example replaced by a huge one
  key = jax.random.key(0)  # same key: the same noise, so only data differs
  diff = np.concatenate([np.asarray(u) - np.asarray(v) for u, v in zip(
      nm.noisy_sums(key, plan, x), nm.noisy_sums(key, plan, x_far),
      strict=True)])
  assert np.linalg.norm(diff) <= plan.sensitivity * (1 + 1e-5)
  assert plan.sensitivity == pytest.approx(2 * math.sqrt(2))
  # Unclipped, the same replacement would move the sums by ~1e12.
  raw = np.square(x_far[7]).mean(axis=(-2, -1))
  assert np.linalg.norm(raw) > 1e6 * plan.sensitivity


def test_release_estimates_mean_and_variance_and_standardizes():
  x = _features(n=2000)
  means = x.mean(axis=(0, 2, 3))
  var = x.var(axis=(0, 2, 3))
  norms = np.linalg.norm(x.mean(axis=(2, 3)), axis=1)
  squares = np.linalg.norm(np.square(x).mean(axis=(2, 3)), axis=1)
  plan = nm.make_plan(epsilon=2.0, delta=1e-5, num_examples=2000,
                      channels=6, clip_mean=float(norms.max()) * 1.01,
                      clip_square=float(squares.max()) * 1.01)
  got = nm.release(jax.random.key(1), plan, x)
  # Noise std σ·C/n on each statistic (clipping is a no-op here).
  tol_mean = 5 * plan.sigma * plan.clip_mean / 2000
  np.testing.assert_allclose(got.mean, means, atol=tol_mean)
  np.testing.assert_allclose(got.var, var, atol=5 * plan.sigma * (
      plan.clip_square + 2 * plan.clip_mean * means.max()) / 2000)
  y = np.asarray(nm.standardize(x, got))
  np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0.0, atol=0.2)
  zero = nm.standardize(x, nm.NormStats(got.mean, got.var.at[2].set(0.0)))
  np.testing.assert_array_equal(np.asarray(zero)[:, 2], 0.0)


def test_release_refuses_features_of_another_shape():
  plan = nm.make_plan(epsilon=1.0, delta=1e-5, num_examples=50, channels=6,
                      clip_mean=1.0, clip_square=1.0)
  with pytest.raises(ValueError, match="n=50, K=6"):
    nm.release(jax.random.key(0), plan, _features(n=49))
