"""dpcore.ddg: conditional rounding, the encoder and the decoder."""

import dataclasses
import doctest
import itertools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpcore import ddg, ddg_accounting, discrete, rotation
from tests.dpcore import modes


def test_docstring_examples():
  assert doctest.testmod(ddg).failed == 0


def _norm_sq(z):
  return np.sum(np.asarray(z, np.int64) ** 2, axis=-1)


def test_exact_norm_check_at_the_boundary():
  bound = 3 * 2**16 + 5  # the halves' carry matters
  base = np.zeros((4, 64), np.int64)
  base[:, 0] = 443  # 443² = 196249 = 2·2¹⁶ + 65177
  rest = bound - 443**2
  base[0, 1] = math.isqrt(rest)
  sq = _norm_sq(base[0])
  base[1] = base[0]
  base[1, 2] = math.isqrt(bound - sq)  # exactly the bound when square
  base[2, :] = 1 << 15  # capped terms: far above
  got = ddg._squared_norm_at_most(jnp.asarray(base, jnp.int32), bound)
  want = _norm_sq(base) <= bound
  np.testing.assert_array_equal(np.asarray(got), want)
  # One above and exactly at the bound.
  z = np.zeros((2, 8), np.int64)
  z[0, :2] = [1, 1]
  ok = ddg._squared_norm_at_most(jnp.asarray(z, jnp.int32), 2)
  bad = ddg._squared_norm_at_most(jnp.asarray(z, jnp.int32), 1)
  assert bool(ok[0]) and not bool(bad[0]) and bool(bad[1])


def test_conditional_round_always_meets_the_bound():
  # Rows inside the ball, on it, and far outside it (the fallback).
  c, d = 20.0, 256
  bound = ddg_accounting.rounded_norm_bound_sq(c, d, math.exp(-0.5))
  x = jax.random.normal(jax.random.key(0), (64, d))
  x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
  x = x * jnp.linspace(0.0, 3 * c, 64)[:, None]
  z = ddg.conditional_round(jax.random.key(1), x, bound_sq=bound)
  assert np.all(_norm_sq(z) <= bound)
  inside = np.asarray(jnp.linalg.norm(x, axis=1)) <= c
  # Inside the ball every row is a rounding of x (floor or floor + 1).
  low = np.floor(np.asarray(x))
  diff = np.asarray(z) - low
  assert np.all(np.isin(diff[inside], [0, 1]))


def _first_accepted(key, x, bound, max_tries=64):
  """The specification, one row and one candidate at a time (NumPy)."""
  out = np.zeros(x.shape, np.int64)
  tries = []
  for i, row in enumerate(np.asarray(x, np.float32)):
    low = np.floor(row)
    for t in range(max_tries):
      coins = ddg._unit_floats(discrete.random_words(
          jax.random.fold_in(jax.random.fold_in(key, i), t), (x.shape[1],)))
      z = (low + (np.asarray(coins) < row - low)).astype(np.int64)
      if np.sum(z * z) <= bound:
        out[i] = z
        tries.append(t + 1)
        break
    else:
      z = np.trunc(row).astype(np.int64)
      out[i] = z if np.sum(z * z) <= bound else 0
      tries.append(max_tries)
  return out, np.array(tries)


def test_conditional_round_is_each_rows_first_accepted_candidate():
  # Row i's t-th candidate uses fold_in(fold_in(key, i), t); only rejected
  # rows draw again. Rows well inside the ball, rows that need retries,
  # rows past the ball (the fallback), an integer row and a zero row.
  c, d = 6.0, 16
  bound = ddg_accounting.rounded_norm_bound_sq(c, d, math.exp(-0.5))
  x = jax.random.normal(jax.random.key(20), (40, d))
  x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
  x = x * jnp.linspace(0.5 * c, 1.6 * c, 40)[:, None]
  x = x.at[3].set(jnp.round(x[3])).at[4].set(0.0)
  key = jax.random.key(21)
  got = np.asarray(ddg.conditional_round(key, x, bound_sq=bound))
  want, tries = _first_accepted(key, x, bound)
  np.testing.assert_array_equal(got, want)
  assert np.sum((tries > 1) & (tries < 64)) >= 3  # retries were exercised
  assert np.sum(tries == 64) >= 3                 # and the fallback
  # A small block (rows interleaved across many loop iterations) gives
  # the same outputs: a row's result depends on its key and x alone.
  small = ddg._round_rows(
      lambda i: jax.vmap(lambda j: jax.random.fold_in(key, j))(i),
      lambda i: x[i], jnp.any(x != jnp.floor(x), axis=1), dim=d,
      bound_sq=bound, max_tries=64, block=3)
  fractional = np.asarray(jnp.any(x != jnp.floor(x), axis=1))
  np.testing.assert_array_equal(np.asarray(small)[fractional],
                                want[fractional])


def _rounding_law(x, bound, *, conditioned=True):
  """Exact law of the conditional rounding of one short row (enumerated)."""
  x = np.asarray(x, np.float64)
  low, frac = np.floor(x), x - np.floor(x)
  patterns = np.array(list(itertools.product([0, 1], repeat=x.size)))
  z = low + patterns
  p = np.prod(np.where(patterns == 1, frac, 1 - frac), axis=1)
  if conditioned:
    p = p * (np.sum(z * z, axis=1) <= bound)
  return z.astype(np.int64), p / p.sum()


def test_conditional_round_has_the_law_of_the_first_accepted_draw():
  # A row of 4 coordinates whose plain rounding is rejected ~60 % of the
  # time: 20,000 independent rows (one call) fit the exact conditional law
  # (all 16 roundings enumerated), and the test rejects the unconditioned
  # rounding and a rounding biased by +0.05 per coordinate.
  x = np.array([0.3, 0.5, -0.6, 1.7], np.float32)
  bound = 4
  z, law = _rounding_law(x, bound)
  assert 0.5 < 1 - _rounding_law(x, bound, conditioned=False)[1][
      np.sum(z * z, axis=1) <= bound].sum() < 0.7
  n = 20_000
  draws = np.asarray(ddg.conditional_round(
      jax.random.key(22), np.tile(x, (n, 1)), bound_sq=bound))
  assert np.all(_norm_sq(draws) <= bound)
  index = {tuple(row): k for k, row in enumerate(z)}
  counts = np.bincount([index[tuple(row)] for row in draws],
                       minlength=len(z))

  def pvalue(p):
    keep = p > 0
    if np.any(counts[~keep]):
      return 0.0
    return stats.chisquare(counts[keep], n * p[keep]).pvalue

  assert pvalue(law) > 1e-3
  assert pvalue(_rounding_law(x, bound, conditioned=False)[1]) < 1e-9
  assert pvalue(_rounding_law(x + 0.05, bound)[1]) < 1e-9


def test_single_draw_acceptance_is_at_least_one_minus_beta():
  # The Hoeffding bound behind ⌊Δ²⌋: a plain randomised rounding of a
  # row of norm c passes with probability ≥ 1 − β. Without its slack term
  # (c² + D/4 only) about half the draws would fail.
  # Every coordinate ±½: the rounding variance D/4 is at its largest.
  d, beta = 1024, math.exp(-0.5)
  x = jnp.where(jax.random.bernoulli(jax.random.key(2), 0.5, (1, d)), 0.5,
                -0.5)
  c = float(jnp.linalg.norm(x))
  low = jnp.floor(x)
  coins = jax.random.uniform(jax.random.key(3), (4000, d)) < (x - low)
  z = (low + coins).astype(jnp.int32)
  bound = ddg_accounting.rounded_norm_bound_sq(c, d, beta)
  rate = float(jnp.mean(ddg._squared_norm_at_most(z, bound)))
  assert rate >= 1 - beta
  no_slack = math.floor(c * c + d / 4)
  assert float(jnp.mean(ddg._squared_norm_at_most(z, no_slack))) < 0.7


def test_rounding_is_unbiased_when_rejection_is_rare():
  # β tiny: the condition almost never binds, so E[x̃] = x; the mean of
  # 4000 draws is within 4 standard errors (≤ 0.5/√4000) per coordinate,
  # and floor rounding (bias up to 1) is rejected by the same check.
  d = 32
  x = jax.random.uniform(jax.random.key(4), (d,), minval=-3, maxval=3)
  bound = ddg_accounting.rounded_norm_bound_sq(
      float(jnp.linalg.norm(x)) + 1e-3, d, 1e-12)
  keys = jax.random.split(jax.random.key(5), 4000)
  z = jax.vmap(lambda k: ddg.conditional_round(
      k, x[None], bound_sq=bound)[0])(keys)
  tol = 4 * 0.5 / math.sqrt(4000)
  assert float(jnp.max(jnp.abs(jnp.mean(z, axis=0) - x))) < tol
  assert float(jnp.max(jnp.abs(jnp.floor(x) - x))) > tol


def test_conditional_bias_is_within_its_bound():
  # With β = e^{-1/2} the condition can bind; each coordinate's bias is at
  # most r(2|xⱼ| + 1)/(1 − r), r the rejection probability (≤ β).
  c, d = 4.0, 64
  beta = math.exp(-0.5)
  bound = ddg_accounting.rounded_norm_bound_sq(c, d, beta)
  x = jnp.full((d,), c / math.sqrt(d)) + 0.5  # every coordinate ½ away
  x = x / jnp.linalg.norm(x) * c
  keys = jax.random.split(jax.random.key(6), 4000)
  z = jax.vmap(lambda k: ddg.conditional_round(
      k, x[None], bound_sq=bound)[0])(keys)
  bias = jnp.abs(jnp.mean(z, axis=0) - x)
  allowed = beta * (2 * jnp.abs(x) + 1) / (1 - beta) + 4 * 0.5 / math.sqrt(
      4000)
  assert bool(jnp.all(bias <= allowed))


def test_one_row_moves_the_participant_sum_by_its_own_rounding():
  # Same key, row k weighted 1 or 0: every other row rounds identically,
  # so the integer sums differ by row k's x̃ alone, of norm ≤ Δ.
  c, d = 50.0, 128
  bound = ddg_accounting.rounded_norm_bound_sq(c, d, math.exp(-0.5))
  x = jax.random.normal(jax.random.key(7), (10, d))
  x = x / jnp.linalg.norm(x, axis=1, keepdims=True) * c
  key = jax.random.key(8)
  with_row = ddg.conditional_round(key, x, bound_sq=bound)
  without = ddg.conditional_round(key, x.at[3].set(0.0), bound_sq=bound)
  diff = np.asarray(with_row.sum(0) - without.sum(0))
  np.testing.assert_array_equal(diff, np.asarray(with_row[3]))
  assert _norm_sq(diff) <= bound


def _params(**kw):
  args = dict(dim=50, clip_norm=1.0, bits=16, noise_multiplier=0.0,
              shares=3, rows=12, steps=10)
  args.update(kw)
  return ddg.choose_params(**args)


def test_round_trip_without_noise_is_within_the_rounding_error():
  p = _params()
  rows = jax.random.normal(jax.random.key(9), (3, 4, 50)) * 0.2
  rows = rows / jnp.maximum(1.0, jnp.linalg.norm(rows, axis=-1,
                                                  keepdims=True))
  rot = jax.random.key(10)
  keys = jax.random.split(jax.random.key(11), 3)
  messages = jax.vmap(lambda k, r: ddg.encode(
      k, rot, r, jnp.ones(4), params=p))(keys, rows)
  total = jnp.sum(messages, axis=0, dtype=jnp.uint32)
  got = ddg.decode(total, rot, params=p)
  want = jnp.sum(rows, axis=(0, 1))
  # 12 rows each off by < 1 per rotated coordinate: ‖error‖ < γ·12·√D.
  err = float(jnp.linalg.norm(got - want))
  assert err < p.gamma * 12 * math.sqrt(p.padded)
  # And the error is the rounding's, not a lost row.
  assert err < 0.01 * float(jnp.linalg.norm(rows[0, 0]))


def test_encode_is_the_sum_of_the_rotated_rows_conditional_roundings():
  # encode rotates and rounds only the rows of weight > 0, a block at a
  # time; the message is exactly Σᵢ conditional_round(round key, R·xᵢ/γ)
  # over all rows (rows of weight 0 round to 0) modulo 2^b.
  p = _params()
  rows = jax.random.normal(jax.random.key(23), (9, 50)) * 0.3
  rows = rows / jnp.maximum(1.0, jnp.linalg.norm(rows, axis=1,
                                                 keepdims=True))
  weights = jnp.array([1.0, 0.0, 0.5, 1.0, 0.0, 0.0, 1.0, 0.25, 1.0])
  key, rot = jax.random.key(24), jax.random.key(25)
  msg = ddg.encode(key, rot, rows, weights, params=p)
  round_key = jax.random.split(key)[0]
  ints = ddg.conditional_round(
      round_key, rotation.rotate(rot, rows * weights[:, None] / p.gamma),
      bound_sq=p.bound_sq)
  want = jnp.sum(jax.lax.bitcast_convert_type(ints, jnp.uint32), axis=0,
                 dtype=jnp.uint32) & p.modulus_mask
  np.testing.assert_array_equal(msg, want)
  assert np.all(np.asarray(ints)[np.asarray(weights) == 0] == 0)


@pytest.mark.slow  # equal results along two execution paths
def test_encode_many_is_vmap_of_encode_bitwise():
  # One rounding loop over all participants' rows, with and without given
  # shares; rows of weight 0 anywhere.
  p = _params(noise_multiplier=1.0)
  rows = jax.random.normal(jax.random.key(26), (3, 7, 50)) * 0.3
  weights = (jax.random.uniform(jax.random.key(27), (3, 7)) > 0.4).astype(
      jnp.float32)
  keys = jax.random.split(jax.random.key(28), 3)
  rot = jax.random.key(29)
  shares = ddg.noise_shares(jax.random.key(30), 3, params=p)
  many = ddg.encode_many(keys, rot, rows, weights, params=p, shares=shares)
  each = jax.vmap(lambda k, r, w, s: ddg.encode(k, rot, r, w, params=p,
                                                share=s))(
      keys, rows, weights, shares)
  np.testing.assert_array_equal(many, each)
  drawn = ddg.encode_many(keys, rot, rows, weights, params=p)
  np.testing.assert_array_equal(drawn, jax.vmap(
      lambda k, r, w: ddg.encode(k, rot, r, w, params=p))(keys, rows,
                                                           weights))
  assert not np.array_equal(drawn, many)
  with pytest.raises(ValueError, match="rows must be"):
    ddg.encode_many(keys[:2], rot, rows, weights, params=p)


def test_weights_drop_rows_and_rows_are_clipped():
  p = _params()
  rot, key = jax.random.key(1), jax.random.key(2)
  rows = jnp.zeros((2, 50)).at[0, 0].set(5.0).at[1, 1].set(0.5)
  got = ddg.decode(ddg.encode(key, rot, rows, jnp.array([1.0, 0.0]),
                              params=p), rot, params=p)
  assert float(got[0]) == pytest.approx(1.0, abs=0.01)  # clipped to C
  assert abs(float(got[1])) < 0.01  # weight 0


def test_noise_share_has_the_planned_scale():
  # Decoded noise of one message: R⁻¹ of D i.i.d. N_Z(0, s²) has variance
  # s²γ² per coordinate. 2000 coordinates' sd within 8 % (its standard
  # error is ~1.6 %), which rejects a share of σ/P instead of σ/√P (P = 3).
  p = _params(dim=2000, noise_multiplier=2.0, rows=1)
  want = float(p.sigma_share) * p.gamma
  assert want == pytest.approx(2.0 / math.sqrt(3), rel=0.01)
  msg = ddg.encode(jax.random.key(3), jax.random.key(4),
                   jnp.zeros((1, 2000)), jnp.zeros(1), params=p)
  sd = float(jnp.std(ddg.decode(msg, jax.random.key(4), params=p)))
  assert sd == pytest.approx(want, rel=0.08)
  assert abs(2.0 / 3 - sd) > 0.08 * want


def test_shares_drawn_together_have_the_planned_scale_and_are_added():
  # ddg.noise_shares: rows i.i.d. N_Z(0, s²)^D (sd within 8 % over
  # 3 × 2048 draws, standard error ~1 %), distinct rows; encode adds the
  # given share exactly (zero rows: the message is the share mod 2^b).
  p = _params(dim=2000, noise_multiplier=2.0, rows=1)
  shares = ddg.noise_shares(jax.random.key(5), 3, params=p)
  assert shares.shape == (3, p.padded) and shares.dtype == jnp.int32
  s = float(p.sigma_share)
  assert float(jnp.std(shares)) == pytest.approx(s, rel=0.08)
  assert abs(float(jnp.std(shares)) - s / math.sqrt(3)) > 0.08 * s
  assert not jnp.array_equal(shares[0], shares[1])
  msg = ddg.encode(jax.random.key(6), jax.random.key(7), jnp.zeros((1, 2000)),
                   jnp.ones(1), params=p, share=shares[1])
  want = jax.lax.bitcast_convert_type(shares[1], jnp.uint32) & 0xFFFF
  assert jnp.array_equal(msg, want)
  with pytest.raises(ValueError, match="share must be"):
    ddg.encode(jax.random.key(6), jax.random.key(7), jnp.zeros((1, 2000)),
               jnp.ones(1), params=p, share=shares)
  with pytest.raises(ValueError, match="no noise"):
    ddg.noise_shares(jax.random.key(5), 3, params=_params())


@pytest.mark.slow  # heavy for the default suite (CI time)
def test_encode_is_pure_and_keyed():
  p = _params(noise_multiplier=1.0)
  rows = jnp.ones((2, 50)) * 0.1
  a = ddg.encode(jax.random.key(0), jax.random.key(1), rows, jnp.ones(2),
                 params=p)
  b = ddg.encode(jax.random.key(0), jax.random.key(1), rows, jnp.ones(2),
                 params=p)
  c = ddg.encode(jax.random.key(2), jax.random.key(1), rows, jnp.ones(2),
                 params=p)
  assert jnp.array_equal(a, b) and not jnp.array_equal(a, c)
  assert a.dtype == jnp.uint32 and int(jnp.max(a)) < 2**16


@pytest.mark.slow  # heavy for the default suite (CI time)
def test_choose_params_keeps_the_wrap_probability():
  p = ddg.choose_params(dim=650, clip_norm=1.0, bits=16,
                        noise_multiplier=1.0, shares=2, rows=120, steps=300)
  wrap = ddg.wrap_probability(
      bits=16, padded=p.padded, norm=p.norm, rows=120,
      noise_variance=2 * float(p.sigma_share) ** 2, steps=300)
  assert wrap <= 1e-9
  assert p.sensitivity / p.norm < 1.01  # the rounding costs under 1 %
  # A sum past 2^{b-1} decodes wrongly: wrap-around is real.
  half = 1 << 15
  assert int(ddg.decode(jnp.full((p.padded,), half, jnp.uint32),
                        jax.random.key(0), params=p).size) == 650


def test_choose_params_keeps_each_share_in_the_exact_samplers_range():
  # The largest share the sampler takes is just above the cap.
  assert ddg.share_sigma(ddg.MAX_SHARE_SIGMA) == ddg.MAX_SHARE_SIGMA
  discrete.gaussian_params(ddg.MAX_SHARE_SIGMA + 1000)
  with pytest.raises(ValueError, match="exact sampler"):
    ddg.share_sigma(1.1 * ddg.MAX_SHARE_SIGMA)
  # At 20 bits a large z would ask for s = z·c/√P ≈ 48,000 on the finest
  # grid the modular range allows; the grid is coarsened instead.
  kw = dict(dim=2080, clip_norm=1.0, bits=20, shares=2, rows=1200,
            steps=1)
  p = ddg.choose_params(noise_multiplier=24.0, **kw)
  assert p.sigma_share == ddg.MAX_SHARE_SIGMA
  assert p.norm == pytest.approx(ddg.MAX_SHARE_SIGMA * math.sqrt(2) / 24.0)
  # Where the cap does not bind, the grid is the wrap bound's alone.
  small = ddg.choose_params(noise_multiplier=0.5, **kw)
  assert float(small.sigma_share) < ddg.MAX_SHARE_SIGMA
  assert small.norm > 3 * p.norm


@pytest.mark.parametrize("bad", [dict(bits=7), dict(bits=25),
                                 dict(bits=8, rows=200)])
def test_choose_params_refuses(bad):
  with pytest.raises(ValueError, match="bits"):
    _params(**bad)


@pytest.mark.slow  # equal results along two execution paths
def test_same_messages_with_and_without_x64():
  # The noise shares (the Gaussian sampler's int32 counters), the rotation
  # signs (float32 coins) and the rows scaled in float32 even when the
  # weights come as float64: the same integers and the same decoded sum.
  # A fine grid (c = 2¹⁴) and 512 rows of D = 128: rows scaled and
  # rotated in float64 would round a few of their 65,536 coordinates the
  # other way. One jitted program per mode (compiling is most of the time).
  count, n = 2, 256
  p = ddg.choose_params(dim=100, clip_norm=1.0, bits=24,
                        noise_multiplier=0.05, shares=count,
                        rows=count * n, steps=1)
  rows = np.random.default_rng(0).normal(size=(count, n, 100))
  rows = (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(
      np.float32)
  weights = np.full((count, n), 0.7)  # float64

  @jax.jit
  def run(key, rows, weights):
    keys = jax.random.split(key, count + 1)
    rot = jax.random.key(1)
    msgs = ddg.encode_many(keys[:count], rot, rows, weights, params=p,
                           shares=ddg.noise_shares(keys[count], count,
                                                   params=p))
    one = ddg.encode(keys[0], rot, rows[0], weights[0], params=p)
    total = jnp.sum(msgs, axis=0, dtype=jnp.uint32)
    return msgs, one, ddg.decode(total, rot, params=p)

  modes.assert_same_in_both_modes(
      lambda: run(jax.random.key(0), rows, weights))


def test_params_are_a_pytree_of_the_numbers_that_follow_sigma():
  p = ddg.choose_params(dim=40, clip_norm=1.0, bits=16, noise_multiplier=1.0,
                        shares=3, rows=30, steps=10)
  leaves, treedef = jax.tree.flatten(p)
  gamma, bound_sq, *sampler = leaves
  assert gamma.dtype == np.float32 and gamma == np.float32(p.gamma)
  assert bound_sq.dtype == np.uint32 and int(bound_sq) == p.bound_sq
  assert len(sampler) == len(discrete.GaussianSampler._fields)
  # The static part is the same for another σ; the leaves are not.
  q = ddg.choose_params(dim=40, clip_norm=1.0, bits=16, noise_multiplier=2.0,
                        shares=3, rows=30, steps=10)
  assert jax.tree.structure(q) == treedef and q.sigma_share != p.sigma_share
  # Inside jit the σ-dependent fields are the arrays; the messages are
  # bitwise those of the host values, for either σ.
  rows = jax.random.normal(jax.random.key(1), (6, 40))
  encode = jax.jit(lambda params: ddg.encode(
      jax.random.key(2), jax.random.key(3), rows, jnp.ones(6),
      params=params))
  for params in (p, q):
    want = ddg.encode(jax.random.key(2), jax.random.key(3), rows,
                      jnp.ones(6), params=params)
    np.testing.assert_array_equal(encode(params), want)
  assert encode._cache_size() == 1
  # Without noise (tests only) the sampler is absent, another structure.
  none = ddg.choose_params(dim=40, clip_norm=1.0, bits=16,
                           noise_multiplier=0.0, shares=3, rows=30, steps=10)
  assert len(jax.tree.leaves(none)) == 2


@pytest.mark.parametrize("field, value, match", [
    ("bound_sq", 2 ** 31, "bound_sq"),      # the uint32 halves could wrap
    ("bound_sq", 3.5, "bound_sq"),
    ("padded", 3, "power of two"),
    ("padded", 2 ** 17, "padded"),          # D > 2^16: the low sum wraps
    ("dim", 2048, "dim"),                   # more than padded
    ("bits", 40, "bits"),
    ("sigma_share", Fraction(1, 4), "1/2"),
    ("gamma", 0.0, "gamma"),
])
def test_parameters_built_by_hand_outside_the_exact_range_are_refused(
    field, value, match):
  params = ddg.choose_params(dim=650, clip_norm=1.0, bits=16,
                             noise_multiplier=1.0, shares=2, rows=60,
                             steps=300)
  assert params.padded == 1024
  with pytest.raises(ValueError, match=match):
    dataclasses.replace(params, **{field: value})
