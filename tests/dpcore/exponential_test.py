"""Tests for the Gumbel-max exponential mechanism (dpcore.exponential).

Frequencies of many vmapped draws are compared by χ² with the exact
selection law softmax(ε·q / (2Δ)), computed here in float64 NumPy
independently of the library; the same test must reject the law for a
wrong ε (0.8ε) and for a missing factor 2.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpcore import exponential, noise

DRAWS = 200_000
SCORES = np.array([0.0, 1.0, 2.5, 3.0, 0.5, 2.0], np.float32)
EPSILON = 1.2
SENSITIVITY = 1.5


def _law(scores, epsilon, sensitivity, mask=None, factor=2.0):
  logits = epsilon * np.asarray(scores, np.float64) / (factor * sensitivity)
  if mask is not None:
    logits = np.where(mask, logits, -np.inf)
  w = np.exp(logits - logits.max())
  return w / w.sum()


def _draw(key, scores, *, epsilon, sensitivity, mask=None, n=DRAWS):
  keys = jax.random.split(key, n)
  f = jax.jit(jax.vmap(lambda k: exponential.exponential_mechanism(
      k, scores, epsilon=epsilon, sensitivity=sensitivity, mask=mask)))
  idx, ok = f(keys)
  return np.asarray(idx), np.asarray(ok)


def _chi2_p(idx, probs):
  counts = np.bincount(idx, minlength=len(probs))
  support = probs > 0
  assert counts[~support].sum() == 0
  return stats.chisquare(counts[support], len(idx) * probs[support]).pvalue


@pytest.fixture(scope="module")
def draws():
  return _draw(jax.random.key(0), jnp.asarray(SCORES), epsilon=EPSILON,
               sensitivity=SENSITIVITY)


def test_frequencies_match_exact_law(draws):
  idx, ok = draws
  assert ok.all()
  assert _chi2_p(idx, _law(SCORES, EPSILON, SENSITIVITY)) > 1e-3


def test_chi2_rejects_wrong_epsilon_and_factor(draws):
  idx, _ = draws
  assert _chi2_p(idx, _law(SCORES, 0.8 * EPSILON, SENSITIVITY)) < 1e-3
  assert _chi2_p(idx, _law(SCORES, 1.2 * EPSILON, SENSITIVITY)) < 1e-3
  # ε·q/Δ (no factor 2) is a different mechanism: rejected.
  assert _chi2_p(idx, _law(SCORES, EPSILON, SENSITIVITY, factor=1.0)) < 1e-3


def test_library_probabilities_are_the_exact_law():
  got = exponential.exponential_probabilities(
      jnp.asarray(SCORES), epsilon=EPSILON, sensitivity=SENSITIVITY)
  np.testing.assert_allclose(got, _law(SCORES, EPSILON, SENSITIVITY),
                             rtol=1e-5)  # float32 softmax


def test_masked_candidates_never_chosen():
  mask = np.array([True, False, True, False, True, True])  # drop 2 best
  idx, ok = _draw(jax.random.key(1), jnp.asarray(SCORES), epsilon=EPSILON,
                  sensitivity=SENSITIVITY, mask=jnp.asarray(mask),
                  n=DRAWS // 2)
  assert ok.all()
  assert not np.isin(idx, np.flatnonzero(~mask)).any()
  assert _chi2_p(idx, _law(SCORES, EPSILON, SENSITIVITY, mask)) > 1e-3


def test_all_invalid():
  idx, ok = exponential.exponential_mechanism(
      jax.random.key(2), jnp.asarray(SCORES), epsilon=1.0, sensitivity=1.0,
      mask=jnp.zeros(len(SCORES), bool))
  assert not bool(ok) and int(idx) == 0


def test_huge_epsilon_picks_argmax():
  idx, ok = _draw(jax.random.key(3), jnp.asarray(SCORES), epsilon=1e6,
                  sensitivity=1.0, n=2000)
  assert ok.all() and (idx == int(np.argmax(SCORES))).all()


def test_huge_scores_do_not_overflow():
  # Scores shifted by 2**20: ε·q/(2Δ) ≈ 5e5, where exp overflows float32
  # (and float64). The scores and shifted log-weights are exact in float32
  # (multiples of 1/2 below 2**21), so the same keys must give the same
  # choices as the unshifted scores, draw for draw.
  base = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 0.5], np.float32)
  shifted = base + np.float32(2.0**20)
  assert np.all(shifted - np.float32(2.0**20) == base)
  key = jax.random.key(4)
  a, _ = _draw(key, jnp.asarray(base), epsilon=1.0, sensitivity=1.0,
               n=DRAWS // 2)
  b, ok = _draw(key, jnp.asarray(shifted), epsilon=1.0, sensitivity=1.0,
                n=DRAWS // 2)
  assert ok.all()
  np.testing.assert_array_equal(a, b)
  assert _chi2_p(b, _law(base, 1.0, 1.0)) > 1e-3


def test_tiny_weights_do_not_underflow_to_nan():
  # exp(−1e4) underflows; those candidates are simply (almost) never drawn.
  scores = jnp.array([0.0, -2e4, 0.0, -3e4])
  idx, ok = _draw(jax.random.key(5), scores, epsilon=1.0, sensitivity=1.0,
                  n=20_000)
  assert ok.all() and set(np.unique(idx)) == {0, 2}
  assert abs(np.mean(idx == 0) - 0.5) < 5 * 0.5 / np.sqrt(20_000)


def test_purity_jit_and_traced_epsilon():
  scores = jnp.asarray(SCORES)

  def f(key, eps):
    return exponential.exponential_mechanism(key, scores, epsilon=eps,
                                             sensitivity=1.0)[0]

  keys = jax.random.split(jax.random.key(6), 64)
  a = jax.vmap(f, in_axes=(0, None))(keys, 1.0)
  np.testing.assert_array_equal(a, jax.vmap(f, in_axes=(0, None))(keys, 1.0))
  for k, want in zip(keys[:2], a[:2], strict=True):
    assert int(f(k, 1.0)) == int(want) == int(jax.jit(f)(k, 1.0))
  # Different keys: different choices somewhere.
  assert len(np.unique(np.asarray(a))) > 1
  # ε traced and vmapped: each lane uses its own ε.
  eps = jnp.array([1e-6, 1e6])
  picks = jax.vmap(f)(keys[:2], eps)
  assert int(picks[1]) == int(np.argmax(SCORES))


def test_no_retracing():
  calls = []

  @jax.jit
  def f(key, eps):
    calls.append(1)
    return exponential.exponential_mechanism(
        key, jnp.asarray(SCORES), epsilon=eps, sensitivity=1.0)

  for i in range(5):
    f(jax.random.key(i), 0.5 + i)
  assert len(calls) == 1


def test_float64_scores_under_x64():
  with jax.enable_x64(True):
    scores = jnp.asarray(SCORES, jnp.float64) + 1e12  # exp overflows f64
    idx, ok = exponential.exponential_mechanism(
        jax.random.key(7), scores, epsilon=1e3, sensitivity=1.0)
    assert bool(ok) and int(idx) == int(np.argmax(SCORES))
    assert idx.dtype == jnp.int32


def test_a_far_worse_candidate_can_still_win(monkeypatch):
  # The law gives candidate 1 probability ≈ e^(−80) > 0, so some Gumbel
  # draw must let it win: the right tail reaches 86.6 (float32
  # jax.random.gumbel stops near 16, so a gap above ~20 could never be
  # overcome and ε-DP would fail outright for such score vectors).
  hi = jnp.array([2**31, 0], jnp.uint32)  # candidate 0: U = ¼, G ≈ −0.33
  lo = jnp.array([0, 2**31], jnp.uint32)  # candidate 1: U → 1, G = 86.6

  def fake_words(key, num, *, block=0):
    del key
    if block == 1:
      return jnp.zeros((num,), jnp.uint32), jnp.zeros((num,), jnp.uint32)
    return hi[:num], lo[:num]

  monkeypatch.setattr(noise, "random_words", fake_words)
  # The sampler is jitted, and JAX caches its traces by function: a new
  # function traces with these words, and the module's compiled
  # programs (real words) are neither reused nor replaced.
  draws = noise._draws.__wrapped__
  monkeypatch.setattr(noise, "_draws", jax.jit(
      lambda *args: draws(*args), static_argnums=(0, 1, 3, 4)))
  eps, sens = 1.0, 1.0
  scores = jnp.array([0.0, -80.0 * 2.0 * sens / eps])  # log-weights 0, −80
  idx, ok = exponential.exponential_mechanism(
      jax.random.key(0), scores, epsilon=eps, sensitivity=sens)
  assert bool(ok) and int(idx) == 1
  # With a gap of 90 (beyond the reach) the best candidate wins, as the
  # documented cut-off (≤ 2⁻¹²³ per draw) says it may.
  idx, _ = exponential.exponential_mechanism(
      jax.random.key(0), scores * 90.0 / 80.0, epsilon=eps,
      sensitivity=sens)
  assert int(idx) == 0
