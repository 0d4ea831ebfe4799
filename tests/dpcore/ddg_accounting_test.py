"""dpcore.ddg_accounting: the distributed discrete Gaussian's RDP bounds."""

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp as dp_rdp
from scipy import special

from dpcore import ddg_accounting as acc


def _dp_accounting_epsilon(sigma, q, steps, delta, orders=None):
  accountant = dp_rdp.RdpAccountant(orders=orders)
  accountant.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(
          q, dp_accounting.GaussianDpEvent(sigma)), steps))
  return accountant.get_epsilon(delta)


def test_rounded_norm_bound_is_the_papers():
  c, d, beta = 100.0, 64, math.exp(-0.5)
  want = c * c + d / 4 + math.sqrt(2 * 0.5) * (c + math.sqrt(d) / 2)
  assert acc.rounded_norm_bound_sq(c, d, beta) == math.floor(want)
  # For a small c the trivial bound (c + √D)² is the smaller one.
  assert acc.rounded_norm_bound_sq(0.1, 4, 1e-30) == math.floor(
      (0.1 + 2.0) ** 2)


def test_tau():
  assert acc.tau(3.0, 1) == 0.0
  s = 0.7
  want = 10 * sum(math.exp(-2 * math.pi**2 * s * s * k / (k + 1))
                  for k in range(1, 5))
  assert acc.tau(s, 5) == pytest.approx(want, rel=1e-12)


def test_one_share_is_the_discrete_gaussian():
  # n = 1: τ = 0 and the bound is the discrete Gaussian's αΔ²/2σ² (CKS).
  rdp = acc.sum_rdp(sensitivity=3.0, sigma_share=4.0, shares=1, dim=100)
  np.testing.assert_allclose(rdp, acc.ORDERS * 9.0 / 32.0, rtol=1e-12)


def test_many_shares_of_large_sigma_are_the_central_gaussian():
  rdp = acc.sum_rdp(sensitivity=3.0, sigma_share=4.0, shares=16, dim=100)
  np.testing.assert_allclose(rdp, acc.ORDERS * 9.0 / (2 * 16 * 16.0),
                             rtol=1e-9)


def test_small_shares_pay_tau():
  wide = acc.sum_rdp(sensitivity=1.0, sigma_share=0.5, shares=8, dim=1000)
  central = acc.ORDERS / (2 * 8 * 0.25)
  assert np.all(wide > central * 1.01)


def test_sum_rdp_refuses_small_shares():
  with pytest.raises(ValueError, match="1/2"):
    acc.sum_rdp(sensitivity=1.0, sigma_share=0.4, shares=2, dim=3)


def test_q_one_is_no_subsampling():
  base = acc.ORDERS * 0.3
  np.testing.assert_array_equal(acc.subsampled_rdp(base, 1.0), base)
  np.testing.assert_array_equal(acc.general_subsampled_rdp(base, 1.0), base)


def test_orders_must_be_consecutive_integers():
  with pytest.raises(ValueError, match="consecutive"):
    acc.subsampled_rdp(np.ones(3), 0.1, orders=np.array([2, 4, 5]))


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.01, 1000),
                                           (1.5, 0.02, 500),
                                           (0.9, 0.005, 2000),
                                           (2.0, 0.05, 300)])
def test_gaussian_limit_is_dp_accountings_sampled_gaussian(sigma, q, steps):
  # τ → 0 and the Gaussian's RDP α/2σ²: the symmetric bound is the exact
  # sampled Gaussian RDP (the binomial expansion), at the same orders.
  delta = 1e-5
  orders = acc.ORDERS.astype(float)
  ours = acc.rdp_epsilon(steps * acc.subsampled_rdp(
      acc.ORDERS / (2 * sigma**2), q), delta)
  exact = _dp_accounting_epsilon(sigma, q, steps, delta, orders=orders)
  assert ours == pytest.approx(exact, rel=1e-6)
  # dp_accounting's own orders (fractional ones too) do at most 5 % better.
  assert ours <= 1.05 * _dp_accounting_epsilon(sigma, q, steps, delta)
  # The general (factor-3) bound is never below it, and a σ 20 % too
  # small is rejected by the equality above.
  general = acc.rdp_epsilon(steps * acc.general_subsampled_rdp(
      acc.ORDERS / (2 * sigma**2), q), delta)
  assert general >= ours
  assert _dp_accounting_epsilon(0.8 * sigma, q, steps, delta,
                                orders=orders) > 1.1 * ours


def test_subsampled_curve_equals_the_exact_gaussian_curve():
  sigma, q = 1.2, 0.05
  ours = acc.subsampled_rdp(acc.ORDERS / (2 * sigma**2), q)
  exact = dp_rdp.rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(  # noqa: E501
      q, sigma, acc.ORDERS.astype(float))
  np.testing.assert_allclose(ours, exact, rtol=1e-9)
  general = acc.general_subsampled_rdp(acc.ORDERS / (2 * sigma**2), q)
  assert np.all(general >= ours) and np.any(general > 1.5 * ours)


def _log_dg(s, half):
  z = np.arange(-half, half + 1, dtype=float)
  lp = -z * z / (2 * s * s)
  return lp - special.logsumexp(lp)


def _log_convolve(a, b):
  out = np.full(len(a) + len(b) - 1, -np.inf)
  for i, ai in enumerate(a):
    out[i:i + len(b)] = np.logaddexp(out[i:i + len(b)], ai + b)
  return out


def _renyi(log_p, log_q, alpha):
  return special.logsumexp(alpha * log_p + (1 - alpha) * log_q) / (alpha - 1)


@pytest.mark.parametrize("s,n,v", [(0.5, 1, 1), (0.5, 2, 1), (0.5, 3, 2),
                                   (0.7, 4, 1), (2.0, 3, 5)])
def test_subsampled_bound_holds_for_exact_sums_of_discrete_gaussians(s, n,
                                                                      v):
  # The exact law of a sum of n shares N_Z(0, s²) (1-D, by convolution),
  # its shift by v and the Poisson mixture M = (1−q)μ + qμ_v: the
  # "remove" divergence D_α(μ‖M) never exceeds the "add" one
  # D_α(M‖μ) (the symmetry lemma), and the bound, fed the theorem's
  # ε(l), is above both.
  base = _log_dg(s, 250)
  mu = base
  for _ in range(n - 1):
    mu = _log_convolve(mu, base)
  log_q = np.concatenate([mu, np.full(v, -np.inf)])
  log_p = np.concatenate([np.full(v, -np.inf), mu])
  keep = np.isfinite(log_q) & np.isfinite(log_p)
  log_q, log_p = log_q[keep], log_p[keep]
  bound_base = acc.sum_rdp(sensitivity=float(v), sigma_share=s, shares=n,
                           dim=1)
  for q in (0.01, 0.1, 0.5):
    log_m = np.logaddexp(math.log1p(-q) + log_q, math.log(q) + log_p)
    bound = acc.subsampled_rdp(bound_base, q)
    for alpha in (2, 3, 8, 20):
      add = _renyi(log_m, log_q, alpha)
      remove = _renyi(log_q, log_m, alpha)
      assert remove <= add + 1e-12
      assert add <= bound[alpha - 2] * (1 + 1e-9) + 1e-12


def test_the_symmetry_is_needed():
  # Without it the "remove" direction can be the larger: P = Bernoulli
  # (0.99) against Q = Bernoulli(0.5) is no shift of a symmetric law.
  log_q, log_p = np.log([0.5, 0.5]), np.log([0.01, 0.99])
  log_m = np.logaddexp(math.log(0.5) + log_q, math.log(0.5) + log_p)
  assert _renyi(log_q, log_m, 8) > 1.5 * _renyi(log_m, log_q, 8)


def test_distributed_rdp_at_large_shares_matches_the_gaussian_limit():
  # Δ = 10, P = 4 shares of s = 20 ⇒ σ_eff = √4·20/10 = 4.
  delta = 1e-6
  rdp = acc.distributed_rdp(sensitivity=10.0, sigma_share=20.0, shares=4,
                            dim=1024, sampling_rate=0.01, steps=2000)
  limit = acc.rdp_epsilon(2000 * acc.subsampled_rdp(
      acc.ORDERS / (2 * 4.0**2), 0.01), delta)
  assert acc.rdp_epsilon(rdp, delta) == pytest.approx(limit, rel=1e-9)
