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
  mask = np.asarray(batch_sizes.slot_mask).astype(bool)
  counts = np.bincount(idx[mask], minlength=N)
  # Every row's inclusion count ~ Binomial(4000, q): mean 200, sd ≈ 13.8.
  assert abs(counts.mean() - 4000 * Q) < 1.0
  assert stats.kstest(
      (counts - 4000 * Q) / math.sqrt(4000 * Q * (1 - Q)), "norm").pvalue > 1e-3


def test_batch_indices_are_distinct_and_mask_matches_size(batch_sizes):
  for b in range(20):
    size = int(batch_sizes.size[b])
    mask = np.asarray(batch_sizes.slot_mask[b])
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
  with pytest.raises(ValueError, match="mask=batch.slot_mask"):
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
                     mask=batch.slot_mask)
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
  assert int(batch.size) == 7 and np.all(np.asarray(batch.slot_mask) == 1.0)
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


# -- the gaps sampler: O(B) per batch, the same law --------------------------
#
# Every law test runs its statistic twice: on method="gaps", where it must
# pass, and on a deliberately wrong sampler written here, where it must fail.

def _gaps(n, q, max_batch):
  return jax.jit(jax.vmap(lambda k: dpsgd.poisson_batch(
      k, n, sampling_rate=q, max_batch=max_batch, method="gaps")))


def _membership(batches, n):
  """(trials, n) 0/1 matrix: row i in trial t's batch."""
  idx = np.asarray(batches.indices)
  mask = np.asarray(batches.slot_mask)
  out = np.zeros((idx.shape[0], n))
  np.add.at(out, (np.arange(idx.shape[0])[:, None], idx), mask)
  return out


def _bernoulli_rows(rates):
  # A wrong sampler when the rates are wrong: row i included w.p. rates[i].
  rates = jnp.asarray(rates)

  def sample(key):
    take = jax.random.uniform(key, rates.shape) < rates
    return take.astype(jnp.float32)
  return jax.jit(jax.vmap(sample))


def _fixed_size_rows(n, k):
  # A uniformly random k-subset of the n rows: the right marginals at
  # q = k/n, negatively correlated pairs, a constant size.
  def sample(key):
    perm = jax.random.permutation(key, n)
    return (perm < k).astype(jnp.float32)
  return jax.jit(jax.vmap(sample))


def _with_replacement_sizes(n, q):
  # Binomial(n, q) draws of a row, with replacement: the distinct count.
  def sample(key):
    k1, k2 = jax.random.split(key)
    draws = jnp.sum(jax.random.uniform(k1, (n,)) < q)
    rows = jax.random.randint(k2, (n,), 0, n)
    hit = jnp.zeros(n, bool).at[rows].max(jnp.arange(n) < draws)
    return jnp.sum(hit)
  return jax.jit(jax.vmap(sample))


GAP_TRIALS = 4000


@pytest.fixture(scope="module")
def gap_batches():
  keys = jax.random.split(jax.random.key(12), GAP_TRIALS)
  return _gaps(N, Q, 80)(keys)


def _rows_follow_rate(members, q):
  # Each row's count over the trials ~ Binomial(trials, q), independently
  # across rows: the sum of squared z-scores is χ²(n).
  trials, n = members.shape
  z = (members.sum(0) - trials * q) / math.sqrt(trials * q * (1 - q))
  return stats.chi2.sf(np.sum(z**2), n)


def test_gaps_include_every_row_with_probability_q(gap_batches):
  members = _membership(gap_batches, N)
  assert _rows_follow_rate(members, Q) > 1e-3
  keys = jax.random.split(jax.random.key(13), GAP_TRIALS)
  # Rejected: the rate 10 % too low everywhere, or right on average but
  # 20 % low in the second half of the rows (as a sampler stopping short
  # of the last rows would be).
  low = np.asarray(_bernoulli_rows(np.full(N, 0.9 * Q))(keys))
  assert _rows_follow_rate(low, Q) < 1e-6
  tilted = np.where(np.arange(N) < N // 2, 1.2 * Q, 0.8 * Q)
  assert _rows_follow_rate(
      np.asarray(_bernoulli_rows(tilted)(keys)), Q) < 1e-6


def test_gaps_batch_sizes_follow_binomial(gap_batches):
  sizes = np.asarray(gap_batches.size)
  assert _binomial_chi2_pvalue(sizes, N, Q) > 1e-3
  # Rejected: fixed-size batches.
  assert _binomial_chi2_pvalue(np.full(GAP_TRIALS, round(N * Q)), N, Q) < 1e-6
  # On 40 rows at q = 0.3, and rejected there: Binomial(N, q)-many draws
  # with replacement, whose duplicates (1.7 on average) make the count of
  # distinct rows fall short.
  n, q = 40, 0.3
  keys = jax.random.split(jax.random.key(14), GAP_TRIALS)
  sizes = np.asarray(_gaps(n, q, n)(keys).size)
  assert _binomial_chi2_pvalue(sizes, n, q) > 1e-3
  distinct = np.asarray(_with_replacement_sizes(n, q)(keys))
  assert _binomial_chi2_pvalue(distinct, n, q) < 1e-6


PAIR_N, PAIR_Q, PAIR_TRIALS = 16, 0.3125, 40000  # qN = 5 rows


def _pairs_independent(members, q):
  """|z| < 4.5 for P(i and j in) = q² over adjacent and distant pairs."""
  trials, n = members.shape
  pairs = [(i, i + 1) for i in range(n - 1)]
  pairs += [(i, i + n // 2) for i in range(n // 2)]
  p = q * q
  both = np.array([np.sum(members[:, i] * members[:, j]) for i, j in pairs])
  z = (both - trials * p) / math.sqrt(trials * p * (1 - p))
  return bool(np.all(np.abs(z) < 4.5)), z


def test_gaps_rows_are_pairwise_independent():
  keys = jax.random.split(jax.random.key(15), PAIR_TRIALS)
  batches = _gaps(PAIR_N, PAIR_Q, PAIR_N)(keys)
  members = _membership(batches, PAIR_N)
  ok, z = _pairs_independent(members, PAIR_Q)
  assert ok, z
  # Rejected: a uniform 5-subset, whose every row has the right rate q
  # but whose pairs are in together with 5·4/(16·15) = 0.083 < q² = 0.098.
  fixed = np.asarray(_fixed_size_rows(PAIR_N, 5)(keys))
  assert abs(fixed.mean() - PAIR_Q) < 1e-9
  ok, z = _pairs_independent(fixed, PAIR_Q)
  assert not ok and np.all(z < 0), z


def test_gaps_batches_are_sorted_distinct_and_padded(gap_batches):
  idx = np.asarray(gap_batches.indices)
  mask = np.asarray(gap_batches.slot_mask)
  sizes = np.asarray(gap_batches.size)
  assert idx.dtype == np.int32 and mask.dtype == np.float32
  assert np.all(sizes <= 81)
  for b in range(GAP_TRIALS):
    k = min(int(sizes[b]), 80)
    np.testing.assert_array_equal(mask[b], np.arange(80) < k)
    assert np.all(np.diff(idx[b, :k]) > 0) and np.all(idx[b, :k] < N)
    assert np.all(idx[b, k:] == 0)


def test_gaps_overflow_is_reported_as_max_batch_plus_one():
  keys = jax.random.split(jax.random.key(16), 50)
  batches = _gaps(200, 0.5, 3)(keys)
  np.testing.assert_array_equal(batches.size, 4)
  np.testing.assert_array_equal(batches.slot_mask, 1.0)
  assert np.all(np.diff(np.asarray(batches.indices), axis=1) > 0)
  # q = 1: every row, in order; more rows than slots reads B + 1.
  full = _gaps(7, 1.0, 7)(keys[:2])
  np.testing.assert_array_equal(full.indices, np.tile(np.arange(7), (2, 1)))
  np.testing.assert_array_equal(full.size, 7)
  cut = _gaps(7, 1.0, 4)(keys[:2])
  np.testing.assert_array_equal(cut.indices, np.tile(np.arange(4), (2, 1)))
  np.testing.assert_array_equal(cut.size, 5)


def test_gaps_sampler_is_pure_jittable_and_vmappable():
  key = jax.random.key(3)

  def sample(k):
    return dpsgd.poisson_batch(k, 1000, sampling_rate=0.02, max_batch=60,
                               method="gaps")
  one = jax.jit(sample)
  a, b = one(key), one(key)
  np.testing.assert_array_equal(a.indices, b.indices)
  np.testing.assert_array_equal(a.slot_mask, b.slot_mask)
  assert int(a.size) == int(b.size)
  keys = jax.random.split(key, 8)
  many = jax.jit(jax.vmap(sample))(keys)
  assert many.indices.shape == (8, 60) and many.size.shape == (8,)
  np.testing.assert_array_equal(many.indices[2], one(keys[2]).indices)
  assert int(many.size[2]) == int(one(keys[2]).size)
  # Different keys, different batches.
  assert len({tuple(np.asarray(r).tolist()) for r in many.indices}) == 8


def test_auto_and_the_default_method():
  keys = jax.random.split(jax.random.key(4), 2)

  def sampler(n, q, b, **method):
    return jax.jit(jax.vmap(lambda k: dpsgd.poisson_batch(
        k, n, sampling_rate=q, max_batch=b, **method)))
  default = sampler(300, 0.1, 70)(keys)
  bern = sampler(300, 0.1, 70, method="bernoulli")(keys)
  np.testing.assert_array_equal(default.indices, bern.indices)
  assert dpsgd.choose_sampler(300, 70) == "bernoulli"
  auto = sampler(300, 0.1, 70, method="auto")(keys)
  np.testing.assert_array_equal(auto.indices, bern.indices)
  n, q = 60000, 256 / 60000
  b = dpsgd.max_batch_size(n, sampling_rate=q, steps=4688)
  assert dpsgd.choose_sampler(n, b) == "gaps"
  auto = sampler(n, q, b, method="auto")(keys)
  gaps = sampler(n, q, b, method="gaps")(keys)
  np.testing.assert_array_equal(auto.indices, gaps.indices)
  # The rule: (B + 1)·⌈log₂(N + 1)⌉ ≤ 2N.
  assert dpsgd.choose_sampler(1024, 185) == "gaps"  # 186 · 11 = 2046
  assert dpsgd.choose_sampler(1024, 186) == "bernoulli"  # 187 · 11 = 2057
  # A table too large to build: bernoulli, when the rate is given.
  assert dpsgd.choose_sampler(10**7, 100) == "gaps"
  assert dpsgd.choose_sampler(10**7, 100, sampling_rate=1e-5) == "bernoulli"
  with pytest.raises(ValueError, match="MAX_GAP_TABLE"):
    dpsgd.poisson_batch(keys[0], 10**7, sampling_rate=1e-5, max_batch=100,
                        method="gaps")


@pytest.mark.parametrize("q, n", [(0.3, 1000), (0.01, 50), (1 / 3, 10**6),
                                  (1e-12, 100), (0.999, 20), (2**-10, 2000)])
def test_gap_table_is_the_exact_cdf_to_the_stated_error(q, n):
  table = dpsgd.gap_table(n, sampling_rate=q)
  f = table.thresholds()
  assert table.high.dtype == table.low.dtype == np.uint32
  assert f == sorted(f) and f[-1] < 2**64
  r = 1 - fractions.Fraction(q)
  tiny = fractions.Fraction(1, 2**64)
  power = fractions.Fraction(1)  # (1 − q)^g, exact
  exact_departure = fractions.Fraction(0)
  for g in range(n):
    power *= r
    if g < len(f):
      err = abs(f[g] - (1 - power) * 2**64)
      stated = fractions.Fraction(1, 2) + fractions.Fraction(g + 1, 2**63)
      assert err <= stated or (f[g] == 2**64 - 1 and err < 1), (g, err)
      exact_departure += err / 2**64
    # L = min(N, the smallest L with (1 − q)^L ≤ 2⁻⁶⁴).
    if power <= tiny or g == n - 1:
      assert table.length == len(f) == g + 1
      break
  if table.length < n:
    assert f[-1] == 2**64 - 1
    exact_departure += power
  # The bound is above the exact total, by no more than twice the
  # fixed-point error allowed for: Σ 4(g + 1) + 2L units of 2⁻¹²⁸.
  length = table.length
  slack = fractions.Fraction(2 * length * (length + 1) + 2 * length, 2**128)
  assert exact_departure <= table.gap_departure <= exact_departure + slack


def test_table_search_is_the_exact_64_bit_count():
  # q = 1e-12: consecutive F_g share their high word, so the low word and
  # the lexicographic comparison decide; U at, just below and just above
  # every threshold, plus 0 and 2⁶⁴ − 1.
  table = dpsgd.gap_table(100, sampling_rate=1e-12)
  f = np.array(table.thresholds(), np.uint64)
  assert len(set(table.high.tolist())) < len(f)
  u = np.concatenate([f, f - np.uint64(1), f + np.uint64(1),
                      np.array([0, 2**64 - 1], np.uint64)])
  u_high = jnp.asarray((u >> np.uint64(32)).astype(np.uint32))
  u_low = jnp.asarray((u & np.uint64(0xFFFFFFFF)).astype(np.uint32))
  got = dpsgd._table_count(jnp.asarray(table.high), jnp.asarray(table.low),
                           table.length, u_high, u_low)
  np.testing.assert_array_equal(got, np.searchsorted(f, u, side="right"))


def test_saturating_row_sums_do_not_overflow_int32():
  cap = 2**31 - 1
  steps = jnp.array([2**30, 2**30, 5, cap, 1, 0], jnp.int32)
  ends = jax.jit(lambda s: dpsgd._saturating_cumsum(s, cap))(steps)
  np.testing.assert_array_equal(ends, [2**30, cap, cap, cap, cap, cap])
  small = jnp.array([3, 4, 0, 2], jnp.int32)
  np.testing.assert_array_equal(dpsgd._saturating_cumsum(small, 100),
                                [3, 7, 7, 9])


def test_sampler_departure_is_tiny_for_mnist_and_grows_with_steps():
  n, q, t = 60000, 256 / 60000, 4688
  b = dpsgd.max_batch_size(n, sampling_rate=q, steps=t)
  d = dpsgd.sampler_departure(n, sampling_rate=q, steps=t, max_batch=b,
                              method="gaps")
  # ≈ (B + 1) · T · L · 2⁻⁶⁶ with L = 10376: 2.5e-10, far below δ = 1e-5.
  assert 1e-11 < d < 1e-9
  table = dpsgd.gap_table(n, sampling_rate=q)
  assert fractions.Fraction(d) >= (b + 1) * t * table.gap_departure
  assert d == pytest.approx((b + 1) * t * table.length * 2.0**-66, rel=0.05)
  d2 = dpsgd.sampler_departure(n, sampling_rate=q, steps=2 * t, max_batch=b,
                               method="gaps")
  assert d2 == pytest.approx(2 * d, rel=1e-12) and d2 > d
  assert dpsgd.sampler_departure(n, sampling_rate=q, steps=t, max_batch=b,
                                 method="auto") == d
  assert dpsgd.sampler_departure(n, sampling_rate=q, steps=t, max_batch=b,
                                 method="bernoulli") == 0.0
  assert dpsgd.sampler_departure(n, sampling_rate=1.0, steps=t, max_batch=b,
                                 method="gaps") == 0.0
  assert dpsgd.sampler_departure(10, sampling_rate=0.3, steps=10**30,
                                 max_batch=5, method="gaps") == 1.0


@pytest.mark.parametrize("method", ["Gaps", "poisson", "", None, 1])
def test_bad_sampler_names_are_refused(method):
  with pytest.raises(ValueError, match="method must be one of"):
    dpsgd.poisson_batch(jax.random.key(0), 10, sampling_rate=0.5,
                        max_batch=5, method=method)
  with pytest.raises(ValueError, match="method must be one of"):
    dpsgd.sampler_departure(10, sampling_rate=0.5, steps=3, max_batch=5,
                            method=method)


def test_gaps_refuses_traced_rates_and_bad_arguments():
  with pytest.raises(ValueError, match="concrete"):
    jax.jit(lambda q: dpsgd.poisson_batch(
        jax.random.key(0), 7, sampling_rate=q, max_batch=7,
        method="gaps"))(0.5)
  with pytest.raises(ValueError, match="sampling_rate"):
    dpsgd.poisson_batch(jax.random.key(0), 10, sampling_rate=0.0,
                        max_batch=5, method="gaps")
  with pytest.raises(ValueError, match="num_examples"):
    dpsgd.gap_table(0, sampling_rate=0.5)
  with pytest.raises(ValueError, match="sampling_rate < 1"):
    dpsgd.gap_table(10, sampling_rate=1.0)
  with pytest.raises(ValueError, match="max_batch"):
    dpsgd.sampler_departure(10, sampling_rate=0.5, steps=3, max_batch=0,
                            method="gaps")
  with pytest.raises(ValueError, match="steps"):
    dpsgd.sampler_departure(10, sampling_rate=0.5, steps=0, max_batch=3,
                            method="gaps")
  with pytest.raises(ValueError, match="max_batch"):
    dpsgd.choose_sampler(10, 0)
