"""Host-side accounting of the distributed discrete Gaussian (DDG).

Every quantity here is in *integer units* (the lattice the participants
round to, :mod:`dpcore.ddg`). The mechanism of one step is

    Z = Σ_rows x̃_i + Σ_{p=1}^{n} X_p,   X_p ~ N_Z(0, s²)^D i.i.d.,

x̃_i each row's conditionally rounded vector (‖x̃_i‖₂ ≤ Δ, enforced), n
the noise shares in the sum and s each share's σ. A sum of discrete
Gaussians is not a discrete Gaussian, so its Rényi divergence is bounded
by the paper's theorem, not by the discrete Gaussian's ρ = Δ²/2σ²:

  Kairouz, Liu & Steinke 2021, Theorem 1 (and Proposition 14): for
  s ≥ 1/2, any integer shift Δ ∈ Z^D and α ≥ 1,

    D_α(Z ‖ Z + Δ) ≤ min{ α‖Δ‖²/(2ns²) + τD,  α(‖Δ‖/(√n·s) + τ√D)²/2 },
    τ = 10 Σ_{k=1}^{n−1} exp(−2π²s²·k/(k+1)).

  (τ = 0 for n = 1: one share is a discrete Gaussian, Canonne, Kamath &
  Steinke 2020, Theorem 14.) The bound holds for ±Δ alike, so for both
  directions of a neighbouring pair.

Rows are Poisson-sampled at rate q. The subsampled curve is the general
upper bound for *any* mechanism whose RDP at integer orders l is ε(l)
(Zhu & Wang, "Poisson Subsampled Rényi Differential Privacy", ICML 2019,
the factor-3 bound; Theorem 5 there in the numbering of the ICML text as
the reference implementation cites it, google-research/federated
``distributed_dp``; their tighter formula needs a condition on M that we
do not assume), under add/remove of one row, for integer α ≥ 2:

    ε_q(α) ≤ 1/(α−1) · log{ (1−q)^{α−1}(αq − q + 1)
                            + C(α,2) q²(1−q)^{α−2} e^{ε(2)}
                            + 3 Σ_{l=3}^{α} C(α,l) q^l (1−q)^{α−l}
                              e^{(l−1)ε(l)} },

and also ε_q(α) ≤ ε(α) (subsampling is a mixture). T steps compose to
T·ε_q(α) (Mironov 2017, Proposition 1), converted to (ε, δ) by
dp_accounting's RDP conversion (:func:`rdp_epsilon`, the one
:mod:`dpcore.accounting` uses for its RDP accountant). Everything here is
a float upper bound evaluated in float64; the orders are the integers
2…256 (:data:`ORDERS`).
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant as _rdp
from scipy import special

from dpcore import validation

__all__ = [
    "ORDERS", "distributed_rdp", "rdp_epsilon", "rounded_norm_bound_sq",
    "subsampled_rdp", "sum_rdp", "tau",
]

ORDERS = np.arange(2, 257)
"""The integer Rényi orders 2…256 of every curve here."""


def rounded_norm_bound_sq(norm: float, dim: int, beta: float) -> int:
  """⌊Δ²⌋: the squared L2 bound conditional rounding enforces.

  For x ∈ R^D with ‖x‖ ≤ c, randomised rounding x̃ᵢ ∈ {⌊xᵢ⌋, ⌊xᵢ⌋ + 1}
  (up with probability xᵢ − ⌊xᵢ⌋) has E‖x̃‖² = ‖x‖² + Σ pᵢ(1 − pᵢ) ≤
  c² + D/4, and ‖x̃‖² is a sum of independent terms, term i ranging over
  an interval of length |2⌊xᵢ⌋ + 1| ≤ 2|xᵢ| + 1, whose squares sum to at
  most (2c + √D)² (Cauchy–Schwarz on ‖x‖₁ ≤ √D·c). Hoeffding then gives
  P(‖x̃‖² > c² + D/4 + t) ≤ exp(−2t²/(2c + √D)²) = β at
  t = √(2 log(1/β))·(c + √D/2): the bound of Kairouz, Liu & Steinke 2021
  (Section 4.1), accepted with probability ≥ 1 − β per draw. Any x̃ is
  also within ‖x‖ + √D, so the smaller of the two is taken.

  Privacy depends only on the integer returned: :func:`dpcore.ddg.
  conditional_round` never outputs a vector whose exact squared norm
  exceeds it, so one row moves an integer sum by at most √(that).

  Args:
    norm: c > 0, the bound on ‖x‖ before rounding (integer units).
    dim: D, the dimension rounded.
    beta: β in (0, 1), the per-draw rejection probability bound.
  """
  c = validation.check_positive(norm, "norm")
  dim = validation.check_positive_int(dim, "dim")
  beta = validation.check_in_range(beta, "beta", 0.0, 1.0)
  hoeffding = (c * c + dim / 4.0
               + math.sqrt(2.0 * math.log(1.0 / beta))
               * (c + math.sqrt(dim) / 2.0))
  trivial = (c + math.sqrt(dim)) ** 2
  return int(math.floor(min(hoeffding, trivial)))


def tau(sigma_share: float, shares: int) -> float:
  """τ = 10 Σ_{k=1}^{n−1} exp(−2π²s²·k/(k+1)) (Theorem 1 of the paper)."""
  s = validation.check_positive(sigma_share, "sigma_share")
  n = validation.check_positive_int(shares, "shares")
  k = np.arange(1, n, dtype=np.float64)
  return float(10.0 * np.sum(np.exp(-2.0 * math.pi**2 * s * s
                                    * k / (k + 1.0))))


def sum_rdp(*, sensitivity: float, sigma_share: float, shares: int,
            dim: int, orders=ORDERS) -> np.ndarray:
  """RDP of one unsampled step: Δ-shifted sum of n shares N_Z(0, s²)^D.

  Theorem 1 of Kairouz, Liu & Steinke 2021 (module docstring), the min
  of its two forms, at each order.

  Raises:
    ValueError: s < 1/2 (outside the theorem), or bad arguments.
  """
  delta = validation.check_positive(sensitivity, "sensitivity")
  s = validation.check_positive(sigma_share, "sigma_share")
  if s < 0.5:
    raise ValueError(f"sigma_share={s} < 1/2: the distributed discrete "
                     f"Gaussian bound needs each share's σ ≥ 1/2.")
  n = validation.check_positive_int(shares, "shares")
  dim = validation.check_positive_int(dim, "dim")
  t = tau(s, n)
  a = np.asarray(orders, dtype=np.float64)
  scale = delta / (math.sqrt(n) * s)
  first = a * scale**2 / 2.0 + t * dim
  second = a * (scale + t * math.sqrt(dim)) ** 2 / 2.0
  return np.minimum(first, second)


def subsampled_rdp(base: np.ndarray, sampling_rate: float,
                   orders=ORDERS) -> np.ndarray:
  """Zhu & Wang's general bound for Poisson subsampling at rate q.

  Args:
    base: ε(l) of the unsampled mechanism at every integer l = 2…max,
      indexed by ``orders`` (which must be the consecutive integers
      2, 3, …, max).
    sampling_rate: q in (0, 1].
    orders: the integer orders of ``base``.

  Returns:
    ε_q(α) at each order (module docstring), never above ε(α).
  """
  q = validation.check_in_range(sampling_rate, "sampling_rate", 0.0, 1.0,
                                high_inclusive=True)
  orders = np.asarray(orders)
  base = np.asarray(base, dtype=np.float64)
  if (orders.ndim != 1 or orders[0] != 2
      or np.any(np.diff(orders) != 1) or base.shape != orders.shape):
    raise ValueError("orders must be the consecutive integers 2…max and "
                     "base one value per order.")
  if q == 1.0:
    return base.copy()
  log_q, log_1q = math.log(q), math.log1p(-q)
  out = np.empty_like(base)
  for i, alpha in enumerate(orders.tolist()):
    ls = np.arange(2, alpha + 1)
    eps_l = base[ls - 2]
    terms = (special.gammaln(alpha + 1) - special.gammaln(ls + 1)
             - special.gammaln(alpha - ls + 1)
             + (alpha - ls) * log_1q + ls * log_q + (ls - 1) * eps_l)
    terms[1:] += math.log(3.0)  # l ≥ 3 carry the factor 3
    head = (alpha - 1) * log_1q + math.log(alpha * q - q + 1.0)
    total = special.logsumexp(np.concatenate([[head], terms]))
    out[i] = min(total / (alpha - 1), base[i])
  return out


def distributed_rdp(*, sensitivity: float, sigma_share: float, shares: int,
                    dim: int, sampling_rate: float, steps: int
                    ) -> np.ndarray:
  """T·ε_q(α): T Poisson-subsampled steps of the distributed sum.

  The composed RDP curve at :data:`ORDERS` (module docstring): the sum
  bound of :func:`sum_rdp`, subsampled by :func:`subsampled_rdp`, times T.
  """
  steps = validation.check_positive_int(steps, "steps")
  base = sum_rdp(sensitivity=sensitivity, sigma_share=sigma_share,
                 shares=shares, dim=dim)
  return steps * subsampled_rdp(base, sampling_rate)


def rdp_epsilon(rdp: np.ndarray, delta: float, orders=ORDERS) -> float:
  """ε at δ of an RDP curve (dp_accounting's conversion)."""
  delta = validation.check_delta(delta)
  eps, _ = _rdp.compute_epsilon(np.asarray(orders, dtype=np.float64),
                                np.asarray(rdp, dtype=np.float64), delta)
  return float(eps)
