"""dpcore.ddg_accounting: the distributed discrete Gaussian's RDP bounds."""

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp as dp_rdp

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


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.01, 1000),
                                           (1.5, 0.02, 500),
                                           (0.9, 0.005, 2000)])
def test_gaussian_limit_bounds_dp_accounting_from_above_and_is_close(
    sigma, q, steps):
  # τ → 0 and the Gaussian's RDP α/2σ² plugged into the general
  # subsampling bound: valid (≥ the exact subsampled Gaussian) and close.
  delta = 1e-5
  ours = acc.rdp_epsilon(steps * acc.subsampled_rdp(
      acc.ORDERS / (2 * sigma**2), q), delta)
  exact = _dp_accounting_epsilon(sigma, q, steps, delta)
  assert exact <= ours <= 1.3 * exact
  # The band rejects a σ 20 % too small.
  assert _dp_accounting_epsilon(0.8 * sigma, q, steps, delta) > 1.3 * exact


def test_subsampled_curve_is_above_the_exact_gaussian_curve():
  sigma, q = 1.2, 0.05
  ours = acc.subsampled_rdp(acc.ORDERS / (2 * sigma**2), q)
  exact = dp_rdp.rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(  # noqa: E501
      q, sigma, acc.ORDERS.astype(float))
  assert np.all(ours >= exact * (1 - 1e-9))


def test_distributed_rdp_at_large_shares_matches_the_gaussian_limit():
  # Δ = 10, P = 4 shares of s = 20 ⇒ σ_eff = √4·20/10 = 4.
  delta = 1e-6
  rdp = acc.distributed_rdp(sensitivity=10.0, sigma_share=20.0, shares=4,
                            dim=1024, sampling_rate=0.01, steps=2000)
  limit = acc.rdp_epsilon(2000 * acc.subsampled_rdp(
      acc.ORDERS / (2 * 4.0**2), 0.01), delta)
  assert acc.rdp_epsilon(rdp, delta) == pytest.approx(limit, rel=1e-9)
