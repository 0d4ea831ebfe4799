"""dpcore.discrete: exact pmfs, parameters, keys, and the ledger entries."""

import math
from fractions import Fraction

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import rdp
from scipy import stats

from dpcore import accounting, discrete
from tests.dpcore import compiles, modes


def _pmf(log_weight, support):
  w = np.exp(np.array([log_weight(z) for z in support], np.float64))
  return w / w.sum()


def _gaussian_pmf(sigma, support):
  return _pmf(lambda z: -z * z / (2.0 * sigma * sigma), support)


def _laplace_pmf(scale, support):
  return _pmf(lambda z: -abs(z) / scale, support)


def _chi2_pvalue(draws, pmf, support):
  """Chi-squared goodness of fit; the tails pooled into one bin each."""
  draws = np.asarray(draws)
  n = draws.size
  expected = pmf * n
  keep = expected >= 5.0
  lo, hi = support[keep][0], support[keep][-1]
  inside = [np.sum(draws == z) for z in support[keep]]
  obs = np.array([np.sum(draws < lo)] + inside + [np.sum(draws > hi)], float)
  exp = np.concatenate([[expected[support < lo].sum()], expected[keep],
                        [expected[support > hi].sum()]])
  mask = exp > 0
  stat = np.sum((obs[mask] - exp[mask]) ** 2 / exp[mask])
  return stats.chi2.sf(stat, mask.sum() - 1)


_N = 200_000


@pytest.fixture(scope="module")
def gaussian_draws():
  return np.asarray(discrete.discrete_gaussian(jax.random.key(1), (_N,),
                                               sigma=3))


@pytest.fixture(scope="module")
def laplace_draws():
  return np.asarray(discrete.discrete_laplace(jax.random.key(2), (_N,),
                                              scale=Fraction(3, 2)))


def _assert_fits_only_the_right_scale(draws, pmf, scale, support):
  """int32 draws that fit pmf(scale) and reject a scale 10 % off."""
  assert draws.dtype == np.int32
  assert _chi2_pvalue(draws, pmf(scale, support), support) > 1e-3
  for wrong in (1.1 * scale, 0.9 * scale):
    assert _chi2_pvalue(draws, pmf(wrong, support), support) < 1e-9


def test_discrete_gaussian_matches_pmf_and_rejects_wrong_sigma(
    gaussian_draws):
  _assert_fits_only_the_right_scale(gaussian_draws, _gaussian_pmf, 3.0,
                                    np.arange(-60, 61))


def test_discrete_laplace_matches_pmf_and_rejects_wrong_scale(laplace_draws):
  _assert_fits_only_the_right_scale(laplace_draws, _laplace_pmf, 1.5,
                                    np.arange(-80, 81))


def test_discrete_gaussian_rational_sigma_below_one():
  # σ = 3/4: the Laplace proposal has t = 1 and σ² = 9/16 is not an int.
  draws = np.asarray(discrete.discrete_gaussian(
      jax.random.key(3), (50_000,), sigma=Fraction(3, 4)))
  support = np.arange(-15, 16)
  assert _chi2_pvalue(draws, _gaussian_pmf(0.75, support), support) > 1e-3
  assert _chi2_pvalue(draws, _gaussian_pmf(0.825, support), support) < 1e-9


def test_discrete_gaussian_long_division_path(monkeypatch):
  # With a 2-row exponent table every proposal |y| ≥ 2 takes the word-level
  # long division (the path that |y| > 64·t + 64 takes in normal use).
  monkeypatch.setattr(discrete, "_TABLE_MAX", 2)
  # The rational path is jitted, and JAX caches its traces by function: a
  # new function traces with the 2-row table, and the module's compiled
  # programs (full table) are neither reused nor replaced.
  rational = discrete._rational_gaussian.__wrapped__
  monkeypatch.setattr(discrete, "_rational_gaussian", jax.jit(
      lambda *args: rational(*args), static_argnums=(1, 2)))
  draws = np.asarray(discrete.discrete_gaussian(jax.random.key(12),
                                                (30_000,), sigma=3))
  support = np.arange(-40, 41)
  assert _chi2_pvalue(draws, _gaussian_pmf(3.0, support), support) > 1e-3
  assert _chi2_pvalue(draws, _gaussian_pmf(3.3, support), support) < 1e-9
  # A traced sampler of the same 2-row table, under a vmap over keys:
  # bitwise the rational path's draws (the second key's).
  keys = jax.random.split(jax.random.key(13), 2)
  got = jax.vmap(lambda k, s: discrete.discrete_gaussian(k, (500,), sigma=s),
                 in_axes=(0, None))(keys, discrete.gaussian_sampler(3))
  np.testing.assert_array_equal(
      got[1], discrete.discrete_gaussian(keys[1], (500,), sigma=3))


def test_under_vmap_the_division_runs_only_for_lanes_past_the_table(
    monkeypatch):
  # The long division is counted each time it runs. σ = 4913/16: the
  # cut-off L = 54,471 is below the sampler's 2¹⁶ rows, so no proposal
  # needs it, and under a vmap over keys it must not run (a cond on the
  # lanes would become a select there and run it at every step); the
  # draws are each key's alone. With a 2-row table it does run.
  runs = []
  divide = discrete.divmod64

  def counted(*words):
    jax.debug.callback(lambda: runs.append(1))
    return divide(*words)

  monkeypatch.setattr(discrete, "divmod64", counted)

  def draw(k, s):
    return discrete.discrete_gaussian(k, (500,), sigma=s)

  sampler = discrete.gaussian_sampler(Fraction(4913, 16))
  assert int(sampler.limit) < int(sampler.table_size)
  keys = jax.random.split(jax.random.key(14), 2)
  got = jax.jit(jax.vmap(draw, in_axes=(0, None)))(keys, sampler)
  jax.effects_barrier()
  assert runs == []
  np.testing.assert_array_equal(got[1], draw(keys[1], sampler))
  monkeypatch.setattr(discrete, "_TABLE_MAX", 2)
  jax.block_until_ready(jax.vmap(draw, in_axes=(0, None))(
      keys, discrete.gaussian_sampler(3)))
  jax.effects_barrier()
  assert runs

def test_discrete_gaussian_at_the_ddg_share_scale_and_in_refilled_lanes():
  # σ = 4911/16 ≈ 307 (the MNIST benchmark's noise share), 40,960 draws:
  # the machine runs 2,560 lanes, so all but the first 2,560 elements are
  # run by lanes refilled after an earlier element was accepted. The whole
  # batch and the refilled elements alone fit the pmf, and a σ 5 % off is
  # rejected.
  sigma = Fraction(4911, 16)
  n = 40_960
  assert discrete._lanes(n) == 2_560
  draws = np.asarray(discrete.discrete_gaussian(jax.random.key(13), (n,),
                                                sigma=sigma))
  support = np.arange(-3000, 3001)
  bins = np.arange(-100, 101)  # bins of 30 integers, ±3000 → ±100

  def binned_pvalue(part, scale):
    pmf = np.bincount(support // 30 + 100, _gaussian_pmf(scale, support))
    return _chi2_pvalue(part // 30, pmf[:bins.size], bins)

  s = float(sigma)
  for part in (draws, draws[discrete._lanes(n):]):
    assert binned_pvalue(part, s) > 1e-3
  for wrong in (0.95 * s, 1.05 * s):
    assert binned_pvalue(draws, wrong) < 1e-9


def test_random_words_are_jax_threefry_words_two_per_hash():
  # The Gaussian sampler's words: for a Threefry key, exactly what
  # jax.random.bits returns without jax_threefry_partitionable; other
  # key implementations fall back to jax.random.bits.
  key = jax.random.key(14)
  with jax.threefry_partitionable(False):
    want = jax.random.bits(key, (7, 5), jnp.uint32)
  got = discrete.random_words(key, (7, 5))
  assert got.dtype == jnp.uint32
  np.testing.assert_array_equal(got, want)
  rbg = jax.random.key(14, impl="rbg")
  np.testing.assert_array_equal(discrete.random_words(rbg, (6,)),
                                jax.random.bits(rbg, (6,), jnp.uint32))
  # Uniform bytes over 2^16 words (chi-squared over 256 bins).
  w = np.asarray(discrete.random_words(key, (1 << 16,)))
  counts = np.bincount((w >> 24).astype(np.int64), minlength=256)
  assert stats.chisquare(counts).pvalue > 1e-3


@pytest.mark.parametrize("num,den", [
    (1, 2), (7, 3), (3, 1)])
def test_bernoulli_exp_frequency(num, den):
  p = math.exp(-num / den)
  # Enough draws that a 5 % relative error is 8 standard errors.
  n = math.ceil((8 / 0.05) ** 2 * (1 - p) / p)
  draws = np.asarray(discrete.bernoulli_exp(
      jax.random.key(num * 10 + den), (n,), numerator=num, denominator=den))
  assert draws.dtype == np.bool_
  hits = int(draws.sum())
  # Two-sided binomial test: passes for p, fails for 1.05·p.
  assert stats.binomtest(hits, n, p).pvalue > 1e-3
  assert stats.binomtest(hits, n, 1.05 * p).pvalue < 1e-6


def test_bernoulli_exp_zero_is_always_one():
  assert bool(jnp.all(discrete.bernoulli_exp(
      jax.random.key(0), (1000,), numerator=0, denominator=3)))


def test_purity_keys_jit_and_vmap():
  f = jax.jit(lambda k: discrete.discrete_gaussian(k, (2, 50), sigma=2))
  a = f(jax.random.key(7))
  np.testing.assert_array_equal(a, f(jax.random.key(7)))
  np.testing.assert_array_equal(
      a, discrete.discrete_gaussian(jax.random.key(7), (2, 50), sigma=2))
  assert not np.array_equal(a, f(jax.random.key(8)))
  assert a.shape == (2, 50) and a.dtype == jnp.int32
  keys = jax.random.split(jax.random.key(9), 3)
  batched = jax.vmap(lambda k: discrete.discrete_laplace(
      k, (20,), scale=2))(keys)
  for i in range(3):
    np.testing.assert_array_equal(
        batched[i], discrete.discrete_laplace(keys[i], (20,), scale=2))


def test_parameter_validation():
  with pytest.raises(ValueError, match="round_up"):
    discrete.discrete_gaussian(jax.random.key(0), (2,), sigma=3.7296)
  with pytest.raises(ValueError, match="> 0"):
    discrete.discrete_gaussian(jax.random.key(0), (2,), sigma=-1)
  with pytest.raises(ValueError, match="finite"):
    discrete.discrete_laplace(jax.random.key(0), (2,), scale=float("nan"))
  with pytest.raises(ValueError, match="cut-off"):
    discrete.discrete_gaussian(jax.random.key(0), (2,), sigma=30_000)
  with pytest.raises(ValueError, match="too large"):
    discrete.discrete_laplace(jax.random.key(0), (2,), scale=2 ** 26)
  with pytest.raises(ValueError, match="denominator"):
    discrete.bernoulli_exp(jax.random.key(0), (2,), numerator=1,
                           denominator=0)
  assert discrete.round_up(3.7296, 16) == Fraction(60, 16)
  assert discrete.round_up(Fraction(7, 2)) == 4
  # In range: the cut-off mass is checked and tiny.
  assert discrete.cutoff_mass(sigma=17_000) <= discrete.MAX_CUTOFF_MASS
  assert discrete.cutoff_mass(scale=2 ** 22) <= discrete.MAX_CUTOFF_MASS


def _zcdp_epsilon(rho, delta):
  """min over α > 1 of the CKS (Prop. 12) conversion of ρ-zCDP, by hand."""
  best = math.inf
  for alpha in np.linspace(1.001, 2000.0, 400_000):
    eps = (alpha * rho + math.log1p(-1.0 / alpha)
           - (math.log(delta) + math.log(alpha)) / (alpha - 1.0))
    best = min(best, eps)
  return best


def test_ledger_discrete_gaussian_against_dp_accounting():
  sigma, sens, delta, count = 10.0, 3.5, 1e-6, 4
  ledger = accounting.PrivacyLedger()
  ledger.record_discrete_gaussian(sigma=sigma, sensitivity=sens,
                                  delta=delta, label="dg", count=count,
                                  relation="add_remove")
  (entry,) = ledger.entries
  rho = count * sens ** 2 / (2 * sigma ** 2)
  # Same RDP curve as a Gaussian of noise multiplier σ/Δ, composed count
  # times: dp_accounting's own Gaussian accountant is the oracle.
  acc = rdp.RdpAccountant()
  acc.compose(dp_accounting.GaussianDpEvent(sigma / sens), count)
  assert entry.epsilon == pytest.approx(acc.get_epsilon(delta), rel=1e-9)
  # And the hand-made conversion (a finer α grid) is a touch lower.
  by_hand = _zcdp_epsilon(rho, delta)
  assert by_hand <= entry.epsilon <= by_hand * 1.01
  assert entry.epsilon < rho + 2 * math.sqrt(rho * math.log(1 / delta))
  g = ledger.guarantee(delta)
  assert g.epsilon == pytest.approx(entry.epsilon, rel=1e-9)
  # A wrong σ gives a clearly different ε.
  assert abs(_zcdp_epsilon(rho / 1.21, delta) - entry.epsilon) > 0.05


def test_ledger_discrete_laplace():
  ledger = accounting.PrivacyLedger()
  ledger.record_discrete_laplace(scale=4.0, sensitivity=2.0, label="dl",
                                 count=3, relation="add_remove")
  (entry,) = ledger.entries
  assert entry.epsilon == pytest.approx(1.5) and entry.delta == 0.0
  acc = rdp.RdpAccountant()
  acc.compose(dp_accounting.ZCDpEvent(0.5 ** 2 / 2), 3)
  assert ledger.guarantee(1e-5).rdp_epsilon == pytest.approx(
      acc.get_epsilon(1e-5), rel=1e-9)
  assert ledger.report(1e-5)["epsilon"] <= 1.5
  with pytest.raises(ValueError):
    ledger.record_discrete_laplace(scale=0.0, sensitivity=1.0, label="x",
                                   relation="add_remove")
  with pytest.raises(ValueError):
    ledger.record_discrete_gaussian(sigma=1.0, sensitivity=1.0, delta=0.0,
                                    label="x", relation="add_remove")


# A Python int, jnp.sum or jnp.nonzero widens to int64 under x64; the
# samplers keep their words and counters 32-bit, so a key gives the same
# draws in both modes (σ = 300 at 1,000 draws also runs the tail's lanes).
@pytest.mark.parametrize("name,draw", [
    ("bernoulli_exp", lambda k: discrete.bernoulli_exp(
        k, (200,), numerator=5, denominator=3)),
    ("discrete_laplace", lambda k: discrete.discrete_laplace(
        k, (200,), scale=Fraction(7, 3))),
    ("discrete_gaussian", lambda k: discrete.discrete_gaussian(
        k, (1000,), sigma=300.0)),
    ("random_words", lambda k: discrete.random_words(k, (3, 5))),
])
def test_same_draws_with_and_without_x64(name, draw):
  modes.assert_same_in_both_modes(lambda: draw(jax.random.key(0)))


def test_a_sampler_draws_as_its_rational_in_one_program_for_every_sigma():
  # The arrays of gaussian_sampler(σ), traced, give bitwise the draws of
  # the rational σ (the audited path), and one compiled program serves
  # every σ (the table at full size, the constants as arguments).
  draw = jax.jit(lambda k, s: discrete.discrete_gaussian(k, (600,), sigma=s))
  for i, sigma in enumerate([Fraction(5, 2), Fraction(1227, 4)]):
    want = discrete.discrete_gaussian(jax.random.key(i), (600,), sigma=sigma)
    got = draw(jax.random.key(i), discrete.gaussian_sampler(sigma))
    np.testing.assert_array_equal(got, want)
    assert got.dtype == jnp.int32
  assert draw._cache_size() == 1
  sampler = discrete.gaussian_sampler(Fraction(1227, 4))
  assert sampler.table.shape == (1 << 16, 4) and sampler.table.dtype == (
      np.uint32)
  with pytest.raises(ValueError, match="sigma=3.7296"):
    discrete.gaussian_sampler(3.7296)  # not an exact rational


def test_an_eager_call_compiles_nothing_for_a_shape_and_sigma_drawn_before():
  # Outside jit a rational σ's sampler is one compiled program per (size,
  # σ): a second call with another key reuses it (before, its while loops
  # were compiled again at every eager call).
  def draw(seed):
    key = jax.random.key(seed)
    return [discrete.discrete_gaussian(key, (37,), sigma=Fraction(7, 2)),
            discrete.discrete_laplace(key, (5, 3), scale=Fraction(5, 2))]

  assert compiles.sees_a_new_program()
  draw(0)
  assert compiles.compiled(lambda: draw(1)) == []
