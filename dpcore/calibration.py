"""Noise calibration: how much noise a sensitivity and a budget require.

Host-side functions of plain floats (they run before any tracing).

>>> round(laplace_scale(epsilon=0.5, sensitivity=1.0), 6)
2.0
>>> round(gaussian_sigma_classic(epsilon=0.5, delta=1e-5, sensitivity=1.0), 4)
9.6896
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scipy import special

from dpcore import validation

__all__ = [
    "MAX_EPSILON",
    "bisect",
    "check_calibrated_epsilon",
    "gaussian_delta",
    "gaussian_sigma",
    "gaussian_sigma_analytic",
    "gaussian_sigma_classic",
    "laplace_scale",
]


def bisect(below: Callable[[float], bool], lo: float, hi: float, *,
           rtol: float | None = None, steps: int | None = None,
           geometric: bool = False) -> tuple[float, float]:
  """Narrows ``[lo, hi]`` around the point where ``below`` turns False.

  Every calibration here searches a monotone condition: ``below(x)``
  True for x under the answer, False at and above it. On entry
  ``below(lo)`` holds and ``below(hi)`` does not (the caller brackets;
  neither end is evaluated here). Each step tests the midpoint
  (arithmetic, or geometric when ``geometric``) and moves the end on its
  side, so the invariant holds on return: a caller that needs the
  condition False (noise large enough) takes ``hi``, one that needs it
  True (a budget not exceeded) takes ``lo``.

  Stops after ``steps`` steps or once the bracket is narrow: hi − lo ≤
  ``rtol``·hi (hi/lo − 1 ≤ ``rtol`` when ``geometric``), whichever is
  first; give at least one of the two.

  >>> lo, hi = bisect(lambda x: x * x < 2.0, 1.0, 2.0, rtol=1e-12)
  >>> round(hi, 9), lo < 2.0 ** 0.5 <= hi
  (1.414213562, True)
  """
  if rtol is None and steps is None:
    raise ValueError("bisect needs rtol, steps or both.")

  def narrow(lo, hi):
    if rtol is None:
      return False
    return hi / lo - 1.0 <= rtol if geometric else hi - lo <= rtol * hi

  step = 0
  while not narrow(lo, hi) and (steps is None or step < steps):
    mid = math.sqrt(lo * hi) if geometric else 0.5 * (lo + hi)
    if below(mid):
      lo = mid
    else:
      hi = mid
    step += 1
  return lo, hi


def laplace_scale(*, epsilon: float, sensitivity: float) -> float:
  """Scale b of the Laplace mechanism: b = Δ₁ / ε.

  Privacy: adding Laplace(b) noise to a query of L1 sensitivity Δ₁ is ε-DP.
  """
  epsilon = validation.check_epsilon(epsilon)
  sensitivity = validation.check_positive(sensitivity, "sensitivity")
  return sensitivity / epsilon


def gaussian_sigma_classic(*, epsilon: float, delta: float,
                           sensitivity: float) -> float:
  """σ = Δ₂ √(2 ln(1.25/δ)) / ε, the classic Gaussian mechanism.

  Privacy: (ε, δ)-DP for a query of L2 sensitivity Δ₂, proven only for
  ε < 1 (Dwork & Roth 2014, Thm 3.22). Larger ε is refused.

  References:
    Dwork & Roth, The Algorithmic Foundations of Differential Privacy, 2014.
  """
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  sensitivity = validation.check_positive(sensitivity, "sensitivity")
  if epsilon >= 1.0:
    raise ValueError(
        f"the classic Gaussian calibration is proven only for epsilon < 1, "
        f"got epsilon={epsilon}; use gaussian_sigma_analytic (Balle & Wang "
        f"2018), which is exact for every epsilon.")
  return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


MAX_EPSILON = 1e6
"""The largest ε the calibrations accept (tested up to it; tests use ε this
large as "practically no noise")."""


def check_calibrated_epsilon(epsilon, name: str = "epsilon") -> float:
  """A finite ε > 0 that the calibrations handle (≤ :data:`MAX_EPSILON`).

  The analytic Gaussian and the DP-SGD calibrations are checked up to
  10⁶; far beyond, e^ε and the tails they compare leave double precision
  (1e300 raised ``OverflowError``), and such a guarantee says nothing.
  """
  epsilon = validation.check_epsilon(epsilon, name)
  if epsilon > MAX_EPSILON:
    raise ValueError(
        f"{name}={epsilon:g} is beyond what the calibrations handle "
        f"(ε ≤ {MAX_EPSILON:g}; such a guarantee says nothing anyway); "
        f"choose a smaller {name}, e.g. {name}=8.")
  return epsilon


def gaussian_delta(*, sigma: float, epsilon: float,
                   sensitivity: float = 1.0) -> float:
  """Exact δ(ε) of the Gaussian mechanism with noise σ (Balle & Wang, Thm 8).

  δ = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ), evaluated in log space so
  large ε does not overflow.
  """
  sigma = validation.check_positive(sigma, "sigma")
  epsilon = validation.check_non_negative(epsilon, "epsilon")
  sensitivity = validation.check_positive(sensitivity, "sensitivity")
  a = sensitivity / (2.0 * sigma)
  b = epsilon * sigma / sensitivity
  log_first = float(special.log_ndtr(a - b))
  log_second = epsilon + float(special.log_ndtr(-a - b))
  if log_second >= log_first:  # e^ε Φ(…) ≥ Φ(…): δ is 0 (no overflow)
    return 0.0
  return float(math.exp(log_first) - math.exp(log_second))


def gaussian_sigma_analytic(*, epsilon: float, delta: float,
                            sensitivity: float, rtol: float = 1e-12) -> float:
  """Smallest σ for which the Gaussian mechanism is (ε, δ)-DP, for any ε > 0.

  Solves δ(σ) = δ (:func:`gaussian_delta`, decreasing in σ) by bisection in
  log σ to relative precision ``rtol``; the result is rounded up, so it is
  never below the σ at which the float64 δ(σ) meets δ. That evaluation
  has its own rounding: against 60-digit arithmetic the true δ at the
  returned σ exceeds the target by at most 1.4e-11 of it at ε ≥ 10⁻³,
  δ ≥ 10⁻¹² (−5e-12, i.e. below it, at ε = 1, δ = 10⁻⁵), by 2e-7 at
  ε = 10⁻⁴, δ = 10⁻¹⁰⁰ and 1e-4 at ε = 10⁻⁸, δ = 10⁻⁵⁰.

  Privacy: (ε, δ)-DP for a query of L2 sensitivity Δ₂, exactly (the
  condition is necessary and sufficient).

  References:
    Balle & Wang, Improving the Gaussian Mechanism for Differential Privacy:
    Analytical Calibration and Optimal Denoising, ICML 2018.
  """
  epsilon = check_calibrated_epsilon(epsilon)
  delta = validation.check_delta(delta)
  sensitivity = validation.check_positive(sensitivity, "sensitivity")

  def too_small(sigma):
    return gaussian_delta(sigma=sigma, epsilon=epsilon,
                          sensitivity=sensitivity) > delta

  lo, hi = sensitivity * 1e-3, sensitivity
  while not too_small(lo):
    lo /= 2.0
  while too_small(hi):
    hi *= 2.0
  return bisect(too_small, lo, hi, rtol=rtol, geometric=True)[1]


def gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float,
                   method: str = "analytic") -> float:
  """Dispatches to the ``"analytic"`` or ``"classic"`` calibration."""
  if method == "analytic":
    return gaussian_sigma_analytic(epsilon=epsilon, delta=delta,
                                   sensitivity=sensitivity)
  if method == "classic":
    return gaussian_sigma_classic(epsilon=epsilon, delta=delta,
                                  sensitivity=sensitivity)
  raise ValueError(
      f"method must be 'analytic' or 'classic', got {method!r}.")
