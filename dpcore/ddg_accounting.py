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

Rows are Poisson-sampled at rate q, under add/remove of one row. Given
the other rows, a step's output is Z + S under one neighbour and
Z + S + B·v under the other: S the other sampled rows' integer sum (the
same law under both), B ~ Bernoulli(q), v the added row's rounded vector
(‖v‖ ≤ Δ). exp((α−1)D_α(P‖Q)) = ΣP^αQ^{1−α} is jointly convex, so the
step's divergence, either way round, is at most the worst over S and v
of the pair M = (1−q)μ + qμ_v against μ (μ the law of Z, μ_v its shift by
v; S shifts both alike). For that pair, at integer α ≥ 2:

* M against μ ("add"): E_μ[(M/μ)^α] = Σ_l C(α,l)(1−q)^{α−l} q^l
  E_μ[(μ_v/μ)^l] exactly (the binomial expansion of Mironov, Talwar &
  Zhang 2019 for the sampled Gaussian), and E_μ[(μ_v/μ)^l] =
  e^{(l−1)D_l(μ_v‖μ)} ≤ e^{(l−1)ε(l)} term by term.
* μ against M ("remove"): at most the "add" divergence, because the pair
  is *symmetric*: μ is symmetric (every share is), so z ↦ v − z maps μ
  to μ_v and back, and the privacy loss L = log(μ_v/μ) has under μ_v the
  law of −L under μ. :func:`subsampled_rdp` gives the proof (elementary;
  it needs that symmetry only, not the Gaussian's form).

Hence, for integer α ≥ 2,

    ε_q(α) ≤ 1/(α−1) · log{ (1−q)^{α−1}(αq − q + 1)
                            + Σ_{l=2}^{α} C(α,l) q^l (1−q)^{α−l}
                              e^{(l−1)ε(l)} },

and also ε_q(α) ≤ ε(α) (a mixture, joint convexity). With the
Gaussian's ε(l) = lΔ²/2σ² this is exactly the sampled Gaussian's RDP
that dp_accounting computes (tested); the sum bound's τ is the only
price of the discrete shares. Zhu & Wang ("Poisson Subsampled Rényi
Differential Privacy", ICML 2019) give the same sum with a factor 3 on
the terms l ≥ 3 for *any* mechanism (:func:`general_subsampled_rdp`,
kept for mechanisms without the symmetry; the reference implementation,
google-research/federated ``distributed_dp``, uses it for the DDG).
T steps compose to T·ε_q(α) (Mironov 2017, Proposition 1), converted to
(ε, δ) by dp_accounting's RDP conversion (:func:`rdp_epsilon`, the one
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
    "ORDERS", "distributed_rdp", "general_subsampled_rdp", "rdp_epsilon",
    "rounded_norm_bound_sq", "subsampled_rdp", "sum_rdp", "tau",
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


def _checked(base, sampling_rate, orders):
  q = validation.check_in_range(sampling_rate, "sampling_rate", 0.0, 1.0,
                                high_inclusive=True)
  orders = np.asarray(orders)
  base = np.asarray(base, dtype=np.float64)
  if (orders.ndim != 1 or orders[0] != 2
      or np.any(np.diff(orders) != 1) or base.shape != orders.shape):
    raise ValueError("orders must be the consecutive integers 2…max and "
                     "base one value per order.")
  return q, orders, base


def _binomial_bound(base, q, orders, factor):
  """min{ε(α), log(head + Σ_{l≥2} c_l C(α,l) q^l (1−q)^{α−l}
  e^{(l−1)ε(l)})/(α−1)}, c_2 = 1 and c_l = ``factor`` for l ≥ 3."""
  log_q, log_1q = math.log(q), math.log1p(-q)
  out = np.empty_like(base)
  for i, alpha in enumerate(orders.tolist()):
    ls = np.arange(2, alpha + 1)
    terms = (special.gammaln(alpha + 1) - special.gammaln(ls + 1)
             - special.gammaln(alpha - ls + 1)
             + (alpha - ls) * log_1q + ls * log_q + (ls - 1) * base[ls - 2])
    if factor != 1.0:
      terms[1:] += math.log(factor)
    head = (alpha - 1) * log_1q + math.log1p((alpha - 1) * q)
    total = special.logsumexp(np.concatenate([[head], terms]))
    out[i] = min(total / (alpha - 1), base[i])
  return out


def subsampled_rdp(base: np.ndarray, sampling_rate: float,
                   orders=ORDERS) -> np.ndarray:
  """Poisson subsampling at rate q of a *symmetric* shift mechanism.

  The bound of the module docstring: for integer α ≥ 2,
  ε_q(α) ≤ min{ε(α), log[(1−q)^{α−1}(αq − q + 1) + Σ_{l=2}^{α} C(α,l)
  q^l (1−q)^{α−l} e^{(l−1)ε(l)}]/(α−1)}, valid when ε(l) bounds
  D_l(μ_v‖μ) for every shift v and μ is symmetric (μ(z) = μ(−z)): true of
  a sum of discrete Gaussian shares, and of one share.

  Proof of the "remove" direction (the "add" one is the exact binomial
  expansion). Let F be the law of L = log(μ_v/μ) under μ. The map
  z ↦ v − z swaps μ and μ_v, so e^l dF(l) = dF(−l). With
  a_l = 1 − q + q·e^l and M = (1−q)μ + qμ_v,

    E_μ[(M/μ)^α] − E_M[(μ/M)^α] = ∫ (a_l^α − a_l^{1−α}) dF(l)
                                = ∫_{u>0} ψ(u) dF(u),

  folding l < 0 onto u = −l > 0, where ψ(u) = a_u^α − a_u^{1−α} +
  e^u(a_{−u}^α − a_{−u}^{1−α}). Put a = a_u, b = a_{−u}, A = log a,
  B = −log b, t = α − ½; then ψ = 2(√a·sinh(tA) − e^u√b·sinh(tB)).
  A ≥ B (it reads c ≤ e^u − 1 with c = q(e^u − 1), i.e. q ≤ 1), so
  sinh(tA)/sinh(tB) does not decrease in t (y·coth y increases in
  y > 0), and ψ ≥ 0 at every α ≥ 2 follows from α = 2, where
  ψ = c³(1/(1 + c) − 1/(e^u(e^u − c))) ≥ 0 because e^u(e^u − c) ≥ 1 + c
  is again c ≤ e^u − 1. So the "remove" divergence never exceeds the
  "add" one. (For the Gaussian this is Mironov, Talwar & Zhang 2019's
  result; the tests also check it on exact sums of discrete Gaussians.)

  Args:
    base: ε(l) of the unsampled mechanism at every integer l = 2…max,
      indexed by ``orders`` (which must be the consecutive integers
      2, 3, …, max).
    sampling_rate: q in (0, 1].
    orders: the integer orders of ``base``.

  Returns:
    ε_q(α) at each order, never above ε(α).
  """
  q, orders, base = _checked(base, sampling_rate, orders)
  if q == 1.0:
    return base.copy()
  return _binomial_bound(base, q, orders, 1.0)


def general_subsampled_rdp(base: np.ndarray, sampling_rate: float,
                           orders=ORDERS) -> np.ndarray:
  """Zhu & Wang's bound for Poisson subsampling of *any* mechanism.

  As :func:`subsampled_rdp` with a factor 3 on the terms l ≥ 3 (Zhu &
  Wang, ICML 2019, the general upper bound): for a mechanism whose pair
  is not symmetric. Not used for the distributed discrete Gaussian,
  whose pair is; kept to show what the symmetry saves.
  """
  q, orders, base = _checked(base, sampling_rate, orders)
  if q == 1.0:
    return base.copy()
  return _binomial_bound(base, q, orders, 3.0)


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
