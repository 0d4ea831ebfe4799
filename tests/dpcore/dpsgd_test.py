"""Tests of dpcore.dpsgd: Poisson sampling and the DP aggregation transform."""

import fractions
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from dpcore import clipping, dpsgd

N, Q = 500, 0.05


@pytest.fixture(scope="module")
def batch_sizes():
  keys = jax.random.split(jax.random.key(11), 4000)
  sample = jax.jit(jax.vmap(
      lambda k: dpsgd.poisson_batch(k, N, sampling_rate=Q, max_batch=80)))
  return sample(keys)


def _binomial_chi2_pvalue(sizes, n, q):
  # Bins with expected count ≥ 5; the tails are pooled into the end bins.
  values = np.arange(n + 1)
  probs = stats.binom.pmf(values, n, q)
  lo = int(stats.binom.ppf(0.001, n, q))
  hi = int(stats.binom.isf(0.001, n, q))
  edges = list(range(lo, hi + 1))
  expected = [stats.binom.cdf(lo, n, q)]
  expected += [probs[v] for v in edges[1:-1]]
  expected += [stats.binom.sf(hi - 1, n, q)]
  observed = [np.sum(sizes <= lo)]
  observed += [np.sum(sizes == v) for v in edges[1:-1]]
  observed += [np.sum(sizes >= hi)]
  expected = np.asarray(expected) * len(sizes)
  return stats.chisquare(observed, expected * (np.sum(observed)
                                                / np.sum(expected))).pvalue


def test_batch_sizes_follow_binomial_and_reject_wrong_q(batch_sizes):
  sizes = np.asarray(batch_sizes.size)
  assert _binomial_chi2_pvalue(sizes, N, Q) > 1e-3
  # The same sample is clearly not Binomial(N, 0.9q) nor Binomial(N, 1.1q).
  assert _binomial_chi2_pvalue(sizes, N, 0.9 * Q) < 1e-6
  assert _binomial_chi2_pvalue(sizes, N, 1.1 * Q) < 1e-6


def test_each_row_is_included_with_probability_q(batch_sizes):
  idx = np.asarray(batch_sizes.indices)
  mask = np.asarray(batch_sizes.mask).astype(bool)
  counts = np.bincount(idx[mask], minlength=N)
  # Every row's inclusion count ~ Binomial(4000, q): mean 200, sd ≈ 13.8.
  assert abs(counts.mean() - 4000 * Q) < 1.0
  assert stats.kstest(
      (counts - 4000 * Q) / math.sqrt(4000 * Q * (1 - Q)), "norm").pvalue > 1e-3


def test_batch_indices_are_distinct_and_mask_matches_size(batch_sizes):
  for b in range(20):
    size = int(batch_sizes.size[b])
    mask = np.asarray(batch_sizes.mask[b])
    assert mask.sum() == min(size, 80)
    chosen = np.asarray(batch_sizes.indices[b])[mask > 0]
    assert len(set(chosen.tolist())) == len(chosen)


def test_max_batch_size_bounds_overflow():
  b = dpsgd.max_batch_size(14000, sampling_rate=0.01, steps=5000,
                           overflow_probability=1e-9)
  assert 5000 * stats.binom.sf(b, 14000, 0.01) <= 1e-9
  assert 5000 * stats.binom.sf(b - 1, 14000, 0.01) > 1e-9
  p = dpsgd.truncation_probability(14000, sampling_rate=0.01, steps=5000,
                                   max_batch=b)
  assert p == pytest.approx(5000 * stats.binom.sf(b, 14000, 0.01), rel=1e-12)
  assert 0.0 < p <= 1e-9
  assert dpsgd.truncation_probability(
      100, sampling_rate=0.5, steps=10, max_batch=50) == pytest.approx(
          min(1.0, 10 * stats.binom.sf(50, 100, 0.5)))


def _aggregate_noise(sigma, clip, n_draws=20000, seed=3):
  tx = dpsgd.dp_aggregate(jax.random.key(seed), clip_norm=clip,
                          noise_multiplier=sigma, expected_batch_size=1.0)
  zeros = {"a": jnp.zeros((4, n_draws // 2)), "b": jnp.zeros((4, 2, 5))}
  out, _ = tx.update(zeros, tx.init(None), mask=jnp.ones(4))
  return np.concatenate([np.ravel(out["a"])])


def test_noise_has_calibrated_scale_and_rejects_wrong_scale():
  sigma, clip = 1.3, 0.5
  z = _aggregate_noise(sigma, clip)
  assert stats.kstest(z, stats.norm(0.0, sigma * clip).cdf).pvalue > 1e-3
  assert stats.kstest(z, stats.norm(0.0, 0.8 * sigma * clip).cdf).pvalue < 1e-6


def test_update_clips_sums_and_divides_by_expected_batch():
  key = jax.random.key(0)
  grads = {"w": jax.random.normal(key, (6, 3)) * 5.0,
           "v": jnp.ones((6, 2))}
  mask = jnp.array([1, 1, 0, 1, 1, 0], jnp.float32)
  tx = dpsgd.dp_aggregate(key, clip_norm=0.7, noise_multiplier=0.0,
                          expected_batch_size=2.5)
  out, state = tx.update(grads, tx.init(None), mask=mask)
  ref, _ = clipping.clipped_sum(grads, 0.7, weights=mask)
  for k in grads:
    np.testing.assert_allclose(out[k], ref[k] / 2.5, rtol=1e-6)
  assert int(state.count) == 1


def test_key_in_state_fresh_noise_each_step_and_pure():
  tx = dpsgd.dp_aggregate(jax.random.key(5), clip_norm=1.0,
                          noise_multiplier=1.0, expected_batch_size=1.0,
                          presummed=True)
  zero = {"w": jnp.zeros((50,))}
  s0 = tx.init(zero)
  a, s1 = tx.update(zero, s0)
  a_again, _ = tx.update(zero, s0)
  b, _ = tx.update(zero, s1)
  np.testing.assert_array_equal(a["w"], a_again["w"])
  assert not np.allclose(a["w"], b["w"])
  # A different base key gives different noise.
  other = dpsgd.dp_aggregate(jax.random.key(6), clip_norm=1.0,
                             noise_multiplier=1.0, expected_batch_size=1.0,
                             presummed=True)
  c, _ = other.update(zero, other.init(zero))
  assert not np.allclose(a["w"], c["w"])


def test_chains_with_optax_optimisers_under_jit():
  params = {"w": jnp.ones((3,))}
  tx = optax.chain(
      dpsgd.dp_aggregate(jax.random.key(1), clip_norm=1.0,
                         noise_multiplier=0.5, expected_batch_size=4.0),
      optax.adam(1e-2))
  state = tx.init(params)

  @jax.jit
  def step(params, state, per_example):
    updates, state = tx.update(per_example, state, params,
                               mask=jnp.ones(4))
    return optax.apply_updates(params, updates), state

  params, state = step(params, state, {"w": jnp.ones((4, 3))})
  assert params["w"].shape == (3,)
  assert np.all(np.isfinite(params["w"]))


def _zero_noise_aggregate(**kwargs):
  return dpsgd.dp_aggregate(jax.random.key(0), clip_norm=1.0,
                            noise_multiplier=0.0, expected_batch_size=1.0,
                            **kwargs)


def test_forgetting_the_mask_is_an_error_not_a_leak():
  # Padding slots of a Poisson batch point at row 0; without the mask they
  # would enter the sum. The update refuses to run without it, eagerly,
  # under jit and inside optax.chain.
  grads = {"w": jnp.ones((6, 3))}
  tx = _zero_noise_aggregate()
  with pytest.raises(ValueError, match="mask=batch.mask"):
    tx.update(grads, tx.init(None))
  with pytest.raises(ValueError, match="needs mask="):
    jax.jit(lambda g, s: tx.update(g, s))(grads, tx.init(None))
  chained = optax.chain(_zero_noise_aggregate(), optax.sgd(0.1))
  w = jnp.zeros(3)
  with pytest.raises(ValueError, match="needs mask="):
    chained.update(grads, chained.init(w), w)
  # A mask of the wrong shape is refused too.
  with pytest.raises(ValueError, match="leading example axis"):
    tx.update(grads, tx.init(None), mask=jnp.ones(5))


def test_presummed_refuses_a_mask_it_could_not_apply():
  tx = _zero_noise_aggregate(presummed=True)
  with pytest.raises(ValueError, match="presummed"):
    tx.update({"w": jnp.ones(3)}, tx.init(None), mask=jnp.ones(3))


def test_padding_slots_of_a_poisson_batch_are_left_out():
  # Row 0 has a gradient far from every other row's; the padding slots of
  # the batch repeat it. With the batch's mask the aggregate equals the
  # clipped sum over the sampled rows alone.
  n = 50
  grads_all = jnp.concatenate([jnp.full((1, 2), 10.0),
                               jnp.tile(jnp.array([[0.0, 0.1]]), (n - 1, 1))])
  batch = dpsgd.poisson_batch(jax.random.key(2), n, sampling_rate=0.1,
                              max_batch=20)
  size = int(batch.size)
  assert 0 < size < 20 and 0 not in np.asarray(batch.indices[:size])
  tx = _zero_noise_aggregate()
  out, _ = tx.update({"g": grads_all[batch.indices]}, tx.init(None),
                     mask=batch.mask)
  np.testing.assert_allclose(out["g"], [0.0, 0.1 * size], rtol=1e-6)


def test_mask_values_are_bounded_to_zero_one():
  grads = {"w": jnp.ones((3, 2))}
  tx = _zero_noise_aggregate()
  # A mask entry of 5 counts once; NaN and negative entries count zero.
  out, _ = tx.update(grads, tx.init(None),
                     mask=jnp.array([5.0, jnp.nan, -2.0]))
  ref, _ = tx.update(grads, tx.init(None), mask=jnp.array([1.0, 0.0, 0.0]))
  # Clipped to norm 1: each unit-entry row of norm √2 becomes 1/√2 each.
  np.testing.assert_allclose(out["w"], ref["w"])
  np.testing.assert_allclose(out["w"], [2**-0.5] * 2, rtol=1e-6)


def test_paper_noise_multiplier_formula():
  sigma = dpsgd.paper_noise_multiplier(epsilon=0.6, delta=1e-5,
                                       sampling_rate=0.01, steps=5000)
  assert sigma == pytest.approx(
      2 * 0.01 * math.sqrt(5000 * math.log(1e5)) / 0.6)


@pytest.mark.parametrize("kwargs, match", [
    ({"clip_norm": 0.0, "noise_multiplier": 1.0}, "clip_norm"),
    ({"clip_norm": -1.0, "noise_multiplier": 1.0}, "clip_norm"),
    ({"clip_norm": 1.0, "noise_multiplier": -0.1}, "noise_multiplier"),
])
def test_bad_aggregate_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    dpsgd.dp_aggregate(jax.random.key(0), expected_batch_size=1.0, **kwargs)


@pytest.mark.parametrize("q", [0.0, -0.1, 1.5])
def test_bad_sampling_rate(q):
  with pytest.raises(ValueError, match="sampling_rate"):
    dpsgd.max_batch_size(100, sampling_rate=q, steps=10)
  with pytest.raises(ValueError, match="sampling_rate"):
    dpsgd.paper_noise_multiplier(epsilon=1.0, delta=1e-5, sampling_rate=q,
                                 steps=10)
  with pytest.raises(ValueError, match="sampling_rate"):
    dpsgd.poisson_batch(jax.random.key(0), 10, sampling_rate=q, max_batch=5)


# -- Poisson sampling rate: integer threshold, never above q ------------------

# q values whose float32 rounding lies above q, so that the old construction
# (a float32 uniform, a multiple of 2⁻²³, compared with float32(q)) included
# rows with probability > q. 0.5 + 3·2⁻²⁶ is a multiple of 2⁻³², so the new
# rate is exactly q; 1 − 2⁻²⁶ rounded to float32 is 1.0 (old rate 1).
ROUNDS_UP = [0.1, 0.5 + 3 * 2**-26, 1 - 2**-26, 0.3, 0.7]


def _old_float32_rate(q):
  # P(k·2⁻²³ < float32(q)) for k uniform on {0, …, 2²³ − 1}.
  q32 = fractions.Fraction(float(np.float32(q)))
  return min(fractions.Fraction(1),
             fractions.Fraction(math.ceil(q32 * 2**23), 2**23))


@pytest.mark.parametrize("q", ROUNDS_UP + [0.01, 1 / 3, 1e-3, 0.05, 0.25])
def test_inclusion_threshold_is_exact_and_never_above_q(q):
  threshold = dpsgd.inclusion_threshold(q)
  exact = fractions.Fraction(q)
  assert threshold == math.floor(exact * 2**32)
  rate = dpsgd.realised_sampling_rate(q)
  assert rate == fractions.Fraction(threshold, 2**32)
  assert 0 <= exact - rate < fractions.Fraction(1, 2**32)


@pytest.mark.parametrize("q", ROUNDS_UP)
def test_old_float32_comparison_exceeded_q_where_new_does_not(q):
  assert _old_float32_rate(q) > fractions.Fraction(q)
  assert dpsgd.realised_sampling_rate(q) <= fractions.Fraction(q)


def test_rates_that_are_multiples_of_two_to_minus_32_are_exact():
  for q in (0.5, 0.25, 2**-20, 0.5 + 3 * 2**-26):
    assert dpsgd.realised_sampling_rate(q) == fractions.Fraction(q)
  assert dpsgd.inclusion_threshold(1.0) == 2**32


def test_membership_is_the_integer_comparison_of_the_random_bits():
  # With key(14) row 63213 draws bits 2³¹ + 343: below the old float32
  # cut-off (it read as u = 0.5 < float32(q)) but above ⌊q·2³²⌋ = 2³¹ + 192.
  # The old construction included it; the exact threshold must not.
  q, n, key = 0.5 + 3 * 2**-26, 2**16, jax.random.key(14)
  bits = np.asarray(jax.random.bits(key, (n,), jnp.uint32))
  assert bits[63213] == 2**31 + 343
  assert float(jax.random.uniform(key, (n,))[63213]) < np.float32(q)
  batch = dpsgd.poisson_batch(key, n, sampling_rate=q, max_batch=n)
  chosen = np.asarray(batch.indices)[: int(batch.size)]
  expected = np.nonzero(bits < dpsgd.inclusion_threshold(q))[0]
  np.testing.assert_array_equal(np.sort(chosen), expected)
  assert 63213 not in chosen


def test_rate_one_takes_every_row_and_traced_rates_are_refused():
  batch = dpsgd.poisson_batch(jax.random.key(0), 7, sampling_rate=1.0,
                              max_batch=7)
  assert int(batch.size) == 7 and np.all(np.asarray(batch.mask) == 1.0)
  with pytest.raises(ValueError, match="concrete"):
    jax.jit(lambda q: dpsgd.poisson_batch(
        jax.random.key(0), 7, sampling_rate=q, max_batch=7))(0.5)


# -- the one step-count rule ---------------------------------------------------

@pytest.mark.parametrize("epochs, q, steps", [
    (50, 0.01, 5000), (1, 0.3, 3), (2.6, 0.5, 5), (1, 1.0, 1), (1, 0.9, 1),
    (3, 0.05, 60)])
def test_num_steps(epochs, q, steps):
  assert dpsgd.num_steps(epochs=epochs, sampling_rate=q) == steps


@pytest.mark.parametrize("kwargs", [
    {"epochs": 0, "sampling_rate": 0.1}, {"epochs": -1, "sampling_rate": 0.1},
    {"epochs": 1, "sampling_rate": 0.0}, {"epochs": 1, "sampling_rate": 1.5}])
def test_num_steps_refuses_bad_arguments(kwargs):
  with pytest.raises(ValueError):
    dpsgd.num_steps(**kwargs)
