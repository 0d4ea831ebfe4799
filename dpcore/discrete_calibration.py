"""Calibration of the exact discrete Gaussian: σ for an (ε, δ) target.

Host-side, on plain floats; returns σ as an exact rational that
:func:`dpcore.discrete.discrete_gaussian` and
:func:`dpcore.lattice.gaussian_mechanism` accept. (The float mechanisms'
calibrations are in :mod:`dpcore.calibration`, which the accountant
imports; this one reads ε from the accountant, hence its own module.)

>>> discrete_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0,
...                         denominator=4)
Fraction(17, 4)
"""

from __future__ import annotations

from fractions import Fraction

from dpcore import accounting, calibration, validation
from dpcore.discrete import round_up


def discrete_gaussian_sigma(*, epsilon: float, delta: float,
                            sensitivity: float, denominator: int = 1
                            ) -> Fraction:
  """Smallest σ (a multiple of 1/denominator) whose zCDP gives (ε, δ).

  The discrete Gaussian is ρ = Δ²/2σ²-zCDP; (ε, δ) is read from ρ by
  :func:`dpcore.accounting.zcdp_epsilon`, the conversion
  :meth:`dpcore.accounting.PrivacyLedger.record_discrete_gaussian` uses.
  """
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  sensitivity = validation.check_positive(sensitivity, "sensitivity")

  def eps_at(sigma):
    return accounting.zcdp_epsilon(
        rho=sensitivity ** 2 / (2 * sigma ** 2), delta=delta)

  lo, hi = 1e-6, 1.0
  while eps_at(hi) > epsilon:
    lo, hi = hi, hi * 2.0
  _, hi = calibration.bisect(lambda sigma: eps_at(sigma) > epsilon, lo, hi,
                             steps=100)
  return round_up(hi, denominator)


__all__ = ["discrete_gaussian_sigma"]
