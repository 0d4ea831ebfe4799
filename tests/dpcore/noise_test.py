"""Statistical and tail-reach tests for dpcore.noise.

Every sampler is checked with a fixed key by a KS test that must pass for
the right distribution and must reject the same samples against a 20 %
wrong scale (p < 1e-3), so a scale bug cannot slip through. The tail reach
(how far a sampler can go at all, which is what the privacy proofs need) is
computed from the construction: the extreme bit patterns are fed through
the samplers, and the same is done for JAX's float32 samplers, which fall
short.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from scipy import special, stats

from dpcore import noise
from tests.dpcore import compiles

N = 50_000     # draws per KS test: a 20 % scale error gives p ~ 1e-100.
PASS_P = 1e-3  # a fixed key; the right law passes with a wide margin.
REJECT_P = 1e-3


def _ks(samples, dist):
  return stats.kstest(np.asarray(samples, np.float64).ravel(), dist.cdf
                      ).pvalue


def _check_scale(samples, make_dist, scale):
  """KS passes at ``scale`` and rejects 0.8× and 1.2× of it."""
  assert _ks(samples, make_dist(scale)) > PASS_P
  assert _ks(samples, make_dist(0.8 * scale)) < REJECT_P
  assert _ks(samples, make_dist(1.2 * scale)) < REJECT_P


def test_gaussian_noise_distribution():
  z = noise.gaussian_noise(jax.random.key(1), (N,), stddev=2.5)
  assert z.shape == (N,) and z.dtype == jnp.float32
  _check_scale(z, lambda s: stats.norm(scale=s), 2.5)


def test_laplace_noise_distribution():
  z = noise.laplace_noise(jax.random.key(2), (N,), scale=0.7)
  assert z.shape == (N,) and z.dtype == jnp.float32
  _check_scale(z, lambda s: stats.laplace(scale=s), 0.7)
  # Not a Gaussian of the same variance either.
  assert _ks(z, stats.norm(scale=0.7 * np.sqrt(2.0))) < REJECT_P


def test_traced_scales_under_vmap():
  # Each participant gets its own scale; all must be honoured.
  scales = jnp.array([0.5, 1.0, 4.0])
  keys = jax.random.split(jax.random.key(3), 3)
  z = jax.vmap(lambda k, s: noise.gaussian_noise(k, (N // 2,), stddev=s))(
      keys, scales)
  for row, s in zip(z, [0.5, 1.0, 4.0], strict=True):
    _check_scale(row, lambda t: stats.norm(scale=t), s)


# -- symmetric Gaussian noise (Analyze-Gauss) --------------------------------

DIM = 4
SYM_DRAWS = 20_000


@pytest.fixture(scope="module")
def symmetric_draws():
  keys = jax.random.split(jax.random.key(4), SYM_DRAWS)
  draw = jax.jit(jax.vmap(
      lambda k: noise.symmetric_gaussian_noise(k, DIM, stddev=1.5)))
  return np.asarray(draw(keys), np.float64)


def test_symmetric_noise_is_symmetric(symmetric_draws):
  e = symmetric_draws
  np.testing.assert_array_equal(e, np.swapaxes(e, 1, 2))


def test_symmetric_noise_distinct_entries_are_n0_sigma2(symmetric_draws):
  rows, cols = np.triu_indices(DIM)  # diagonal and upper triangle
  distinct = symmetric_draws[:, rows, cols]  # (draws, DIM(DIM+1)/2)
  # Every position on its own (this catches e.g. E + Eᵀ, whose diagonal
  # has twice the standard deviation of its off-diagonal).
  for j in range(distinct.shape[1]):
    assert _ks(distinct[:, j], stats.norm(scale=1.5)) > PASS_P / 10
  _check_scale(distinct, lambda s: stats.norm(scale=s), 1.5)


def test_symmetric_noise_positions_are_independent(symmetric_draws):
  rows, cols = np.triu_indices(DIM)
  distinct = symmetric_draws[:, rows, cols]
  corr = np.corrcoef(distinct, rowvar=False)
  off = corr[~np.eye(len(rows), dtype=bool)]
  # Under independence each sample correlation is ≈ N(0, 1/draws); 5 sd.
  assert np.max(np.abs(off)) < 5.0 / np.sqrt(SYM_DRAWS)
  # Squares too (uncorrelated ≠ independent in general).
  corr2 = np.corrcoef(distinct**2, rowvar=False)
  assert np.max(np.abs(corr2[~np.eye(len(rows), dtype=bool)])) < (
      5.0 / np.sqrt(SYM_DRAWS))


# -- objective perturbation noise --------------------------------------------

OP_DIM = 5
OP_BETA = 2.0
OP_DRAWS = 20_000


@pytest.fixture(scope="module")
def op_draws():
  keys = jax.random.split(jax.random.key(5), OP_DRAWS)
  draw = jax.jit(jax.vmap(lambda k: noise.objective_perturbation_noise(
      k, OP_DIM, beta=OP_BETA)))
  return np.asarray(draw(keys), np.float64)


def test_objective_perturbation_norm_is_gamma(op_draws):
  # Density ∝ exp(−β‖b‖) in R^k ⇒ ‖b‖ ~ Gamma(shape k, scale 1/β).
  norms = np.linalg.norm(op_draws, axis=1)
  _check_scale(norms, lambda s: stats.gamma(OP_DIM, scale=s), 1 / OP_BETA)
  # The classic off-by-one (shape k − 1) is rejected as well.
  assert _ks(norms, stats.gamma(OP_DIM - 1, scale=1 / OP_BETA)) < REJECT_P


def test_objective_perturbation_direction_is_uniform(op_draws):
  u = op_draws / np.linalg.norm(op_draws, axis=1, keepdims=True)
  # On the uniform sphere in R^k, u_i² ~ Beta(1/2, (k − 1)/2) ...
  right = stats.beta(0.5, (OP_DIM - 1) / 2)
  wrong = stats.beta(0.5, OP_DIM / 2)  # the law for R^(k+1)
  for i in range(OP_DIM):
    assert _ks(u[:, i] ** 2, right) > PASS_P / OP_DIM
  assert _ks(u[:, 0] ** 2, wrong) < REJECT_P
  # ... each coordinate's sign is a fair coin, and E[u] = 0 (5 sd bounds).
  positive = np.mean(u > 0, axis=0)
  assert np.all(np.abs(positive - 0.5) < 5 * 0.5 / np.sqrt(OP_DRAWS))
  assert np.all(np.abs(u.mean(axis=0)) < 5 / np.sqrt(OP_DIM * OP_DRAWS))
  # Direction independent of the radius.
  norms = np.linalg.norm(op_draws, axis=1)
  assert abs(np.corrcoef(norms, u[:, 0] ** 2)[0, 1]) < 5 / np.sqrt(OP_DRAWS)


def test_objective_perturbation_rejects_wrong_beta(op_draws):
  # A sampler that used β' = 0.8β (e.g. ε instead of ε/2 mix-ups) is
  # caught on the radius: the density test is on the scale 1/β.
  norms = np.linalg.norm(op_draws, axis=1)
  assert _ks(norms, stats.gamma(OP_DIM, scale=1 / (0.8 * OP_BETA))) < (
      REJECT_P)


def test_objective_perturbation_rows_of_one_call():
  # num=K rows from one call: each row has the one-vector law, and rows
  # are independent (a sampler that reused draws across rows, or gave
  # every row the same radius, is rejected).
  num = 4
  keys = jax.random.split(jax.random.key(6), OP_DRAWS // num)
  draws = np.asarray(jax.jit(jax.vmap(
      lambda k: noise.objective_perturbation_noise(
          k, OP_DIM, beta=OP_BETA, num=num)))(keys), np.float64)
  assert draws.shape == (OP_DRAWS // num, num, OP_DIM)
  norms = np.linalg.norm(draws, axis=-1)
  for i in range(num):
    assert _ks(norms[:, i], stats.gamma(OP_DIM, scale=1 / OP_BETA)) > (
        PASS_P / num)
  assert _ks(norms[:, 0], stats.gamma(OP_DIM, scale=1 / (0.8 * OP_BETA))) < (
      REJECT_P)
  bound = 5 / np.sqrt(norms.shape[0])
  corr = np.corrcoef(norms.T)
  assert np.all(np.abs(corr[np.triu_indices(num, 1)]) < bound)
  cos = np.einsum("si,si->s", draws[:, 0], draws[:, 1]) / (
      norms[:, 0] * norms[:, 1])
  assert abs(cos.mean()) < 5 / np.sqrt(OP_DIM * norms.shape[0])
  # num=None is the first row's law with the same shape as before.
  one = noise.objective_perturbation_noise(jax.random.key(0), OP_DIM,
                                           beta=OP_BETA)
  assert one.shape == (OP_DIM,)


# -- purity, jit, dtypes -------------------------------------------------------

SAMPLERS = {
    "gaussian": lambda k: noise.gaussian_noise(k, (7,), stddev=1.3),
    "laplace": lambda k: noise.laplace_noise(k, (7,), scale=1.3),
    "gumbel": lambda k: noise.gumbel_noise(k, (7,)),
    "exponential": lambda k: noise.exponential_noise(k, (7,)),
    "symmetric": lambda k: noise.symmetric_gaussian_noise(k, 3, stddev=1.3),
    "objective": lambda k: noise.objective_perturbation_noise(k, 7, beta=1.3),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_purity_and_jit(name):
  f = SAMPLERS[name]
  jf = jax.jit(f)
  k1, k2 = jax.random.key(10), jax.random.key(11)
  a = jf(k1)
  np.testing.assert_array_equal(a, jf(k1))
  assert not np.allclose(a, jf(k2))
  # jit(f) == f: the same arithmetic, up to float32 rounding of fused ops.
  np.testing.assert_allclose(f(k1), a, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_dtype_is_kept_under_x64(name):
  # A float64 scale must not promote float32 noise when x64 is on.
  with jax.enable_x64(True):
    f = {
        "gaussian": lambda k: noise.gaussian_noise(
            k, (3,), stddev=np.float64(2.0)),
        "laplace": lambda k: noise.laplace_noise(
            k, (3,), scale=np.float64(2.0)),
        "gumbel": lambda k: noise.gumbel_noise(k, (3,)),
        "exponential": lambda k: noise.exponential_noise(k, (3,)),
        "symmetric": lambda k: noise.symmetric_gaussian_noise(
            k, 3, stddev=np.float64(2.0)),
        "objective": lambda k: noise.objective_perturbation_noise(
            k, 3, beta=np.float64(2.0)),
    }[name]
    assert f(jax.random.key(0)).dtype == jnp.float32
    g = noise.gaussian_noise(jax.random.key(0), (3,), stddev=2.0,
                             dtype=jnp.float64)
    assert g.dtype == jnp.float64


# -- tail reach, from the construction -----------------------------------------
#
# A sampler's reach is the largest |value| any bit pattern can give; the
# exact law's mass beyond it is what the mechanism silently cuts off (module
# docstring of dpcore.noise). The JAX float32 constructions are replicated
# here from their bits and checked against jax.random itself.


def _jax_uniform_from_bits(bits, minval, maxval):
  """jax.random.uniform's float32 map (23 mantissa bits, then an affine)."""
  floats = lax.bitcast_convert_type(
      (bits >> np.uint32(9)) | np.uint32(0x3F800000), jnp.float32) - 1.0
  return jnp.maximum(minval, floats * (maxval - minval) + minval)


def _jax_normal_from_bits(bits):
  lo = np.nextafter(np.float32(-1.0), np.float32(0.0))
  u = _jax_uniform_from_bits(bits, lo, np.float32(1.0))
  return np.float32(np.sqrt(2.0)) * lax.erf_inv(u)


def _jax_laplace_from_bits(bits):
  u = _jax_uniform_from_bits(
      bits, np.float32(-1.0 + np.finfo(np.float32).epsneg), np.float32(1.0))
  return jnp.sign(u) * jnp.log1p(-jnp.abs(u))


def _jax_gumbel_from_bits(bits):
  u = _jax_uniform_from_bits(bits, np.float32(np.finfo(np.float32).tiny),
                             np.float32(1.0))
  return -jnp.log(-jnp.log(u))


# Every 32-bit pattern maps monotonically, so its ends give the reach.
_EXTREME_BITS = jnp.array([0, 1, 2**31, 2**32 - 2, 2**32 - 1], jnp.uint32)


def test_jax_replicas_reproduce_jax_random():
  key = jax.random.key(7)
  bits = jax.random.bits(key, (2000,), jnp.uint32)
  for replica, sampler in ((_jax_normal_from_bits, jax.random.normal),
                           (_jax_laplace_from_bits, jax.random.laplace),
                           (_jax_gumbel_from_bits, jax.random.gumbel)):
    np.testing.assert_allclose(replica(bits), sampler(key, (2000,)),
                               rtol=1e-6, atol=1e-7)


def _use_words(monkeypatch, hi, lo, refine=((0, 0), (0, 0))):
  """Makes the samplers read these words instead of random ones."""
  refine = np.asarray(refine, np.uint32)

  def fake_words(key, num, *, block=0):
    del key
    if block == 1:
      return jnp.asarray(refine[:num, 0]), jnp.asarray(refine[:num, 1])
    return (jnp.broadcast_to(jnp.asarray(hi, jnp.uint32), (num,)),
            jnp.broadcast_to(jnp.asarray(lo, jnp.uint32), (num,)))

  monkeypatch.setattr(noise, "random_words", fake_words)
  # The sampler is jitted, and JAX caches its traces by function: a new
  # function traces with these words, and the module's compiled
  # programs (real words) are neither reused nor replaced.
  draws = noise._draws.__wrapped__
  monkeypatch.setattr(noise, "_draws", jax.jit(
      lambda *args: draws(*args), static_argnums=(0, 1, 3, 4)))


GAUSS_REACH = 12.8966  # −ndtri(2⁻¹²⁵), the refined cell
GAUSS_COARSE = 9.1553  # −ndtri(2⁻⁶⁵), a hit that is not refined


def test_gaussian_reach_from_extreme_bits(monkeypatch):
  # Today's float32 jax.random.normal cannot pass the bound of 8 below.
  jax_reach = float(jnp.max(jnp.abs(_jax_normal_from_bits(_EXTREME_BITS))))
  assert 5.3 < jax_reach < 5.5
  assert 2 * stats.norm.sf(jax_reach) > 1e-8  # its cut-off per draw
  # All-zero words: every draw is in the extreme cell; the first and the
  # last are refined, the rest (the ≥ 3-hits case) stay at 2⁻⁶⁵.
  _use_words(monkeypatch, 0, 0)
  z = np.asarray(noise.gaussian_noise(jax.random.key(0), (5,), stddev=1.0))
  np.testing.assert_allclose(z, -np.array([GAUSS_REACH, GAUSS_COARSE,
                                           GAUSS_COARSE, GAUSS_COARSE,
                                           GAUSS_REACH]), rtol=1e-5)
  _use_words(monkeypatch, 0, 2**31)  # the sign bit set: the upper tail
  z = np.asarray(noise.gaussian_noise(jax.random.key(0), (3,), stddev=2.0))
  np.testing.assert_allclose(z, 2.0 * np.array(
      [GAUSS_REACH, GAUSS_COARSE, GAUSS_REACH]), rtol=1e-5)
  reach = float(np.max(np.abs(z))) / 2.0
  assert reach >= 8.0
  assert 2 * stats.norm.sf(reach) <= noise.CUTOFF_PER_DRAW


def test_gaussian_reach_of_a_single_draw(monkeypatch):
  _use_words(monkeypatch, 0, 0, refine=((0, 0), (0, 0)))
  z = noise.gaussian_noise(jax.random.key(0), (), stddev=1.0)
  np.testing.assert_allclose(z, -GAUSS_REACH, rtol=1e-5)


def test_bulk_formula_matches_exact_ndtri():
  # The common path (no draw below 2⁻³³) uses a trimmed ndtri; it must
  # agree with scipy to float32 precision on all of [2⁻³³, ½].
  m = np.concatenate([np.geomspace(2.0**-33, 0.5, 50_000),
                      np.linspace(1e-4, 0.5, 50_000)]).astype(np.float32)
  exact = -special.ndtri(m.astype(np.float64))
  upper = jnp.ones(m.shape, bool)
  ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
  for f in (noise._gaussian_bulk, noise.gaussian_from_uniform):
    err = np.abs(np.asarray(f(upper, jnp.asarray(m)), np.float64) - exact)
    assert np.max(err / np.maximum(ulp, 1e-30)) < 8.0  # float32 ulps


def test_coarse_path_is_taken_above_two_to_minus_33(monkeypatch):
  # hi = 1: m = 2⁻³³ + ..., no refinement, the bulk formula.
  _use_words(monkeypatch, 1, 0)
  z = noise.gaussian_noise(jax.random.key(0), (4,), stddev=1.0)
  m = 2.0**-33 + 0.5 * 2.0**-64
  np.testing.assert_allclose(z, special.ndtri(m) * np.ones(4), rtol=1e-6)


def test_deep_tail_law_in_the_refined_cell():
  # Given the extreme cell, m must be uniform on (0, 2⁻⁶⁴), i.e.
  # 2⁶⁴·P(Z < −|z|) uniform on (0, 1), and the transform must keep it so
  # far out (|z| between 9.08 and 12.9).
  hi, lo = jax.random.bits(jax.random.key(8), (2, 20_000, 2), jnp.uint32)
  zeros = jnp.zeros((2,), jnp.uint32)
  draw = jax.vmap(lambda rh, rl: noise.gaussian_from_uniform(
      *noise.two_sided_uniform_from_words(zeros, zeros, rh, rl,
                                          jnp.float32)))
  z = np.abs(np.asarray(draw(hi, lo), np.float64)).ravel()
  assert z.min() > 9.0 and z.max() <= GAUSS_REACH + 1e-4
  assert stats.kstest(special.ndtr(-z) * 2.0**64, "uniform").pvalue > PASS_P
  # A 0.5 % error in z this far out is rejected.
  assert stats.kstest(special.ndtr(-1.005 * z) * 2.0**64,
                      "uniform").pvalue < REJECT_P


TAIL_N = 2_000_000


def test_gaussian_tail_frequency_beyond_four_sigma():
  z = np.asarray(noise.gaussian_noise(jax.random.key(12), (TAIL_N,),
                                      stddev=1.5))
  count = int(np.sum(np.abs(z) > 4.0 * 1.5))

  def within(p):  # 5 binomial standard deviations
    return abs(count - TAIL_N * p) < 5 * math.sqrt(TAIL_N * p * (1 - p))

  assert within(2 * stats.norm.sf(4.0))  # ≈ 127 expected
  assert not within(2 * stats.norm.sf(4.0 / 0.8))  # a 0.8σ sampler: ≈ 1


def test_laplace_reach_and_no_hidden_delta(monkeypatch):
  jax_reach = float(jnp.max(jnp.abs(_jax_laplace_from_bits(_EXTREME_BITS))))
  assert 15.0 < jax_reach < 17.0
  # A pure-ε Laplace mechanism sampled so would carry a hidden δ of about
  # (1 + e^ε)·e^(−reach) per draw: ~1e-7 at ε = 1, far from "pure".
  assert (1 + math.e) * math.exp(-jax_reach) > 1e-8
  _use_words(monkeypatch, 0, 2**31)
  z = np.asarray(noise.laplace_noise(jax.random.key(0), (3,), scale=0.5))
  np.testing.assert_allclose(z, 0.5 * np.array(
      [124 * math.log(2), 64 * math.log(2), 124 * math.log(2)]), rtol=1e-6)
  reach = float(np.max(z)) / 0.5
  assert math.exp(-reach) <= noise.CUTOFF_PER_DRAW  # the documented mass
  # ... which stays negligible even at ε = 20 over 10¹² draws.
  assert noise.cutoff_delta(20.0, 10**12) < 1e-15


def test_laplace_tail_frequency():
  z = np.asarray(noise.laplace_noise(jax.random.key(13), (400_000,),
                                     scale=0.7))
  count = int(np.sum(np.abs(z) > 6.0 * 0.7))
  p, p_wrong = math.exp(-6.0), math.exp(-6.0 / 0.8)
  sd = math.sqrt(400_000 * p)
  assert abs(count - 400_000 * p) < 5 * sd  # ≈ 991 expected
  assert abs(count - 400_000 * p_wrong) > 5 * math.sqrt(400_000 * p_wrong)
  # Both signs equally often in the tail.
  pos = int(np.sum(z > 6.0 * 0.7))
  assert abs(pos - count / 2) < 5 * math.sqrt(count / 4)


def test_gumbel_distribution_and_right_tail():
  g = noise.gumbel_noise(jax.random.key(14), (N,))
  assert g.dtype == jnp.float32
  _check_scale(g, lambda s: stats.gumbel_r(scale=s), 1.0)
  assert _ks(g, stats.gumbel_r(loc=0.1)) < REJECT_P
  big = noise.gumbel_noise(jax.random.key(15), (400_000,))
  count = int(np.sum(np.asarray(big) > 6.0))
  p = stats.gumbel_r.sf(6.0)  # ≈ 2.5e-3
  assert abs(count - 400_000 * p) < 5 * math.sqrt(400_000 * p)


def test_gumbel_reach(monkeypatch):
  jax_reach = float(jnp.max(_jax_gumbel_from_bits(_EXTREME_BITS)))
  assert 15.0 < jax_reach < 17.0
  _use_words(monkeypatch, 0, 2**31)  # U → 1: the right tail
  right = np.asarray(noise.gumbel_noise(jax.random.key(0), (3,)))
  np.testing.assert_allclose(right, [125 * math.log(2), 65 * math.log(2),
                                     125 * math.log(2)], rtol=1e-6)
  _use_words(monkeypatch, 0, 0)  # U → 0: the left tail
  left = np.asarray(noise.gumbel_noise(jax.random.key(0), (3,)))
  np.testing.assert_allclose(left, -np.log([125 * math.log(2),
                                            65 * math.log(2),
                                            125 * math.log(2)]), rtol=1e-6)
  # Mass beyond: P(G > 86.6) ≈ e^(−86.6) and P(G < −4.46) = e^(−86.6).
  cut = stats.gumbel_r.sf(right.max()) + stats.gumbel_r.cdf(left.min())
  assert cut <= noise.CUTOFF_PER_DRAW


def test_exponential_distribution():
  e = noise.exponential_noise(jax.random.key(16), (N,))
  _check_scale(e, lambda s: stats.expon(scale=s), 1.0)


def test_norm_noise_radius_reach(monkeypatch):
  # ‖b‖ is a sum of dim Exp(1) draws, each reaching 86.6 (jax.random.gamma
  # rests on a float32 normal that stops at 5.4σ).
  _use_words(monkeypatch, 0, 0)
  b = noise.objective_perturbation_noise(jax.random.key(0), 5, beta=2.0)
  radius = float(np.linalg.norm(np.asarray(b, np.float64)))
  # One call of 2·5 draws (radius first, direction after): with every word
  # 0, the call's first and last draws are refined (m = 2⁻¹²⁵, E = 125 ln 2)
  # and the others stay at m = 2⁻⁶⁵ (E = 65 ln 2); the first draw is a
  # radius draw, the last a direction draw.
  expected = (125 + 4 * 65) * math.log(2) / 2.0
  np.testing.assert_allclose(radius, expected, rtol=1e-5)


def test_cutoff_delta():
  assert noise.cutoff_delta(1.0, 0) == 0.0
  one = noise.cutoff_delta(0.0, 1)
  assert one == pytest.approx(2 * 2.0**-123)
  assert noise.cutoff_delta(8.0, 10) == pytest.approx(
      10 * (1 + math.exp(8.0)) * 2.0**-123)
  assert noise.cutoff_delta(1e4, 1) == math.inf or (
      noise.cutoff_delta(1e4, 1) > 1e200)
  with pytest.raises(ValueError, match="epsilon"):
    noise.cutoff_delta(float("nan"), 1)


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
def test_random_words_bits_are_balanced(impl):
  key = jax.random.key(17, impl=impl)
  hi, lo = noise.random_words(key, 20_000)
  bits = np.unpackbits(np.stack([np.asarray(hi), np.asarray(lo)], axis=1)
                       .view(np.uint8), axis=1)  # (20000, 64)
  mean = bits.mean(axis=0)
  assert np.all(np.abs(mean - 0.5) < 5 * 0.5 / np.sqrt(20_000))
  # The two words of a draw are not tied to each other.
  corr = np.corrcoef(np.asarray(hi, np.float64), np.asarray(lo, np.float64))
  assert abs(corr[0, 1]) < 5 / np.sqrt(20_000)
  # The other block is a different stream.
  hi1, _ = noise.random_words(key, 20_000, block=1)
  assert np.mean(np.asarray(hi1) == np.asarray(hi)) < 0.01


def test_non_threefry_key_gives_the_right_law():
  z = noise.gaussian_noise(jax.random.key(18, impl="rbg"), (N,), stddev=2.5)
  _check_scale(z, lambda s: stats.norm(scale=s), 2.5)


def test_symmetric_noise_draws_each_distinct_entry_once():
  e = np.asarray(noise.symmetric_gaussian_noise(jax.random.key(19), 9,
                                                stddev=1.0))
  rows, cols = np.triu_indices(9)
  distinct = e[rows, cols]
  assert len(np.unique(distinct)) == len(distinct)  # no draw used twice
  np.testing.assert_array_equal(np.sort(distinct), np.sort(np.asarray(
      noise.gaussian_noise(jax.random.key(19), (45,), stddev=1.0))))



def test_an_eager_call_compiles_nothing_for_a_shape_drawn_before():
  # Outside jit the sampler is one compiled program per (law, shape,
  # dtype): a second call with another key and scale reuses it. (Before,
  # its lax.cond was compiled again at every eager call.)
  def draw(seed, scale):
    key = jax.random.key(seed)
    return [noise.gaussian_noise(key, (37,), stddev=scale),
            noise.laplace_noise(key, (5, 3), scale=scale),
            noise.exponential_noise(key, (11,)),
            noise.gumbel_noise(key, (11,)),
            noise.objective_perturbation_noise(key, 6, beta=scale),
            noise.objective_perturbation_noise(key, 4, beta=scale, num=3)]

  assert compiles.sees_a_new_program()
  draw(0, 1.0)
  assert compiles.compiled(lambda: draw(1, 2.0)) == []


@pytest.mark.parametrize("sampler, name", [
    (noise.gaussian_noise, "stddev"), (noise.laplace_noise, "scale")])
def test_a_scale_larger_than_the_noise_is_refused(sampler, name):
  # One draw broadcast over several entries is not independent noise:
  # a (3,) scale on a scalar draw gave three equal values.
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="each entry needs its own draw"):
    sampler(key, (), **{name: jnp.ones(3)})
  with pytest.raises(ValueError, match="each entry needs its own draw"):
    sampler(key, (3, 1), **{name: jnp.ones(4)})
  # A scale per entry, or one broadcast into the shape, is drawn per entry.
  per_entry = sampler(key, (3,), **{name: jnp.array([1.0, 2.0, 3.0])})
  assert len(set(np.asarray(per_entry).tolist())) == 3
  assert sampler(key, (2, 3), **{name: jnp.ones(3)}).shape == (2, 3)
