"""dpcore.discrete_calibration: the smallest σ that meets (ε, δ)."""

from dpcore import accounting, discrete_calibration


def test_discrete_gaussian_sigma_calibration():
  sigma = discrete_calibration.discrete_gaussian_sigma(
      epsilon=1.0, delta=1e-5, sensitivity=10.0)
  assert sigma.denominator == 1
  ledger = accounting.PrivacyLedger()
  ledger.record_discrete_gaussian(sigma=float(sigma), sensitivity=10.0,
                                  delta=1e-5, label="a", relation="add_remove")
  assert ledger.entries[0].epsilon <= 1.0
  ledger = accounting.PrivacyLedger()
  ledger.record_discrete_gaussian(sigma=float(sigma) - 1, sensitivity=10.0,
                                  delta=1e-5, label="b", relation="add_remove")
  assert ledger.entries[0].epsilon > 1.0
