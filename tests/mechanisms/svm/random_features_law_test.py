"""mechanisms.svm.random_features: DP-SGD on φ uses rows at rate q.

Issue #33: a law test at the call site, not only at the sampler. The
mechanism itself, :func:`mechanisms.svm.random_features.release_dpsgd`
(φ computed inside it, then :func:`dpcore.trainer.train` on the layered
fast path), is run for one step with σ = 0 and a clip (1000) no gradient
reaches, from its own zero initial parameters, with SGD of rate 1, and the
rows it used are read back from the released model. The model maps the
inputs through random features first, so the read-back goes through the
loss's output layer:

* softmax over K = N classes, row i labelled i: at zero parameters every
  row's softmax is uniform, so row i's bias gradient is 1/K − e_i and the
  released bias is (s − |S|/K) / (qN), s_i = 1 iff row i was used and |S|
  the batch size. The positive entries are the rows used, and the bias is
  checked to be exactly that two-level vector
  (:func:`test_softmax_uses_each_row_at_rate_q`, both samplers).
* the Huber hinge for labels ±1 (one output): at zero parameters every
  margin is 0, in the hinge's linear part, so row i's gradient is
  −y_i (φ_i, 1) and the released weight is Φᵀ (s ⊙ y) / (qN) for the
  N × D feature matrix Φ (D = 64 ≥ N, full row rank): the linear system
  Φᵀ c = qN·w is solved for c = s ⊙ y
  (:func:`test_huber_hinge_uses_each_row_at_rate_q`).

Each table of (runs, N) uses is checked by ``tests/law.py`` (every row's
rate, the batch-size law Binomial(N, q), pairs) and must reject 0.8q and
1.25q.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechanisms.svm import random_features as rff
from tests import law

N, Q, RUNS, D = 16, 0.2, 4000, 64
CLIP = 1000.0  # ‖∇ℓ‖ ≤ ‖(φ, 1)‖ ≤ √3 for both losses: it never binds


def _plan(loss, *, sampler=None):
  plan = rff.make_dpsgd_plan(
      N, epsilon=1.0, delta=1e-5, sampling_rate=Q, epochs=1.0,
      learning_rate=1.0, clip_norm=CLIP, loss=loss,
      num_classes=N if loss == "softmax" else 2)
  steps = dataclasses.replace(plan.dpsgd, noise_multiplier=0.0, steps=1)
  if sampler is not None:
    steps = dataclasses.replace(steps, sampler=sampler)
  return dataclasses.replace(plan, dpsgd=steps)


def _data(labels):
  x = jax.random.normal(jax.random.key(7), (N, 3), jnp.float32)
  fmap = rff.make_feature_map(jax.random.key(8), dim=3,
                              num_features=D)
  return fmap, x, jnp.asarray(labels)


def _release(plan, fmap, x, y, *, runs=RUNS, seed=0):
  keys = jax.random.split(jax.random.key(seed), runs)
  out = jax.vmap(lambda k: rff.release_dpsgd(k, plan, fmap, x, y))(keys)
  return (np.asarray(out["out"]["w"], np.float64),
          np.asarray(out["out"]["b"], np.float64))


@pytest.mark.parametrize("sampler", ["bernoulli", "gaps"])
def test_softmax_uses_each_row_at_rate_q(sampler):
  plan = _plan("softmax", sampler=sampler)
  fmap, x, y = _data(np.arange(N))
  _, bias = _release(plan, fmap, x, y)
  scaled = bias * plan.dpsgd.expected_batch_size  # s − |S|/K
  used = (scaled > 0).astype(np.int64)
  sizes = used.sum(axis=1, keepdims=True)
  # The read-back is exact: the bias is s − |S|/K to float rounding (a run
  # using every row, or none, would read as none; at q = 0.2 neither of
  # the 4000 runs uses all 16).
  np.testing.assert_allclose(scaled + sizes / N, used, atol=1e-4)
  law.assert_law(used, Q)


def test_huber_hinge_uses_each_row_at_rate_q():
  plan = _plan("huber_hinge")
  labels = np.where(np.arange(N) % 2 == 0, 1.0, -1.0)
  fmap, x, y = _data(labels)
  w, bias = _release(plan, fmap, x, y)
  phi = np.asarray(rff.features(fmap, x), np.float64)  # (N, D), public map
  scale = plan.dpsgd.expected_batch_size
  coef, *_ = np.linalg.lstsq(phi.T, (w[:, :, 0] * scale).T, rcond=None)
  signed = law.counts(coef.T, 1.0)  # s ⊙ y
  used = np.abs(signed)
  np.testing.assert_array_equal(signed, used * labels[None, :].astype(int))
  # The bias carries the same uses: Σ s_i y_i / (qN).
  np.testing.assert_allclose(bias[:, 0] * scale, signed.sum(axis=1),
                             atol=1e-3)
  law.assert_law(used, Q)
