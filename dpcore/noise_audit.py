"""Audit specs of the noise primitives: Gaussian, Laplace, grid, selection.

Each spec (:class:`dpcore.audit_spec.AuditSpec`) runs one of the library's
samplers (:mod:`dpcore.noise`, :mod:`dpcore.lattice`,
:mod:`dpcore.exponential`) on a worst-case pair of neighbouring values
under the relation its ledger entry records, with the ε that entry
claims. Every spec has a broken variant, which reports the correct
calibration's ε and must be caught: ``gaussian_sigma_halved`` and
``discrete_gaussian_sigma_halved`` (σ/2), ``laplace_wrong_sensitivity``
(the scale of a count's sensitivity on a sum's),
``discrete_laplace_scale_halved`` (t/2) and
``exponential_sensitivity_halved`` (the weights exp(ε·s/2Δ) drawn for
Δ/2, i.e. without the factor ½ the proof needs).
"""

from __future__ import annotations

from fractions import Fraction

import jax.numpy as jnp

from dpcore import (
  accounting,
  calibration,
  discrete_calibration,
  exponential,
  noise,
)
from dpcore import lattice as dp_lattice
from dpcore.audit_spec import AuditSpec, claimed_epsilon


def _identity(output):
  return output


# -- Gaussian and Laplace -----------------------------------------------------


def gaussian_spec(*, epsilon: float = 1.0, delta: float = 1e-5,
                  audit_delta: float = 1e-2, broken: bool = False
                  ) -> AuditSpec:
  """The Gaussian mechanism on a sensitivity-1 count, σ calibrated.

  σ is the analytic calibration for (ε, δ); the ledger's ε is read at
  ``audit_delta``, a δ where a single-threshold test is nearly tight (the
  claim is the whole privacy profile δ(ε), so every point of it may be
  audited). ``broken``: the noise has σ/2.
  """
  sigma = calibration.gaussian_sigma_analytic(epsilon=epsilon, delta=delta,
                                              sensitivity=1.0)
  ledger = accounting.PrivacyLedger()
  ledger.record_gaussian(sigma=sigma, sensitivity=1.0, delta=delta,
                         label="gaussian", relation="add_remove")
  used = sigma / 2.0 if broken else sigma

  def mechanism(key, count):
    return count + noise.gaussian_noise(key, (), stddev=used)

  return AuditSpec(
      name="gaussian_sigma_halved" if broken else "gaussian",
      relation="add_remove",
      settings={"epsilon": epsilon, "delta": delta, "sigma": sigma,
                "sigma_used": used, "sensitivity": 1.0},
      mechanism=mechanism, data_0=jnp.float32(0.0), data_1=jnp.float32(1.0),
      statistic=_identity, delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta),
      nominal_epsilon=None if audit_delta == delta else epsilon,
      default_trials=100_000 if broken else 1_000_000, broken=broken)


def laplace_spec(*, epsilon: float = 1.0, broken: bool = False
                 ) -> AuditSpec:
  """The Laplace mechanism on a sum of values in [0, 2] (L1 sensitivity 2).

  ``broken``: the scale is computed from sensitivity 1 (a count's), so the
  noise is half what the sum needs.
  """
  true_sensitivity = 2.0
  scale = calibration.laplace_scale(epsilon=epsilon,
                                    sensitivity=true_sensitivity)
  ledger = accounting.PrivacyLedger()
  ledger.record_laplace(scale=scale, sensitivity=true_sensitivity,
                        label="laplace", relation="add_remove")
  used = (calibration.laplace_scale(epsilon=epsilon, sensitivity=1.0)
          if broken else scale)

  def mechanism(key, total):
    return total + noise.laplace_noise(key, (), scale=used)

  return AuditSpec(
      name="laplace_wrong_sensitivity" if broken else "laplace",
      relation="add_remove",
      settings={"epsilon": epsilon, "sensitivity": true_sensitivity,
                "scale": scale, "scale_used": used},
      mechanism=mechanism, data_0=jnp.float32(0.0),
      data_1=jnp.float32(true_sensitivity), statistic=_identity, delta=0.0,
      reported_epsilon=claimed_epsilon(ledger, "add_remove"),
      default_trials=100_000 if broken else 1_000_000, broken=broken)


# -- exact (discrete) noise on a grid ------------------------------------------
#
# The query is a mean of three values, whose sensitivity (1/3 of the value
# range) is not a multiple of the grid step γ: the neighbours are placed so
# that nearest rounding pushes them apart by the most it can, ⌈Δ/γ⌉ grid
# steps, against the lattice bound Δ/γ + 1 the ledger uses.


def discrete_gaussian_spec(*, epsilon: float = 1.0, delta: float = 1e-5,
                           audit_delta: float = 1e-2,
                           broken: bool = False) -> AuditSpec:
  """Discrete Gaussian grid mechanism on a mean of 3 values in [0, 1].

  Δ = 1/3, γ = 2⁻⁴: Δ/γ = 5.33 and the lattice sensitivity is 6.33; the
  neighbours 0.03 and 0.03 + 1/3 round to 0 and 6 grid steps. The
  integer σ is the smallest whose zCDP gives (ε, δ) at the lattice
  sensitivity; the ledger's ε is read at ``audit_delta``. ``broken``: the
  noise has σ/2.
  """
  granularity = 2.0 ** -4
  value_sensitivity = 1.0 / 3.0
  lattice = dp_lattice.lattice_l2_sensitivity(
      value_sensitivity, granularity=granularity, dim=1)
  sigma = discrete_calibration.discrete_gaussian_sigma(
      epsilon=epsilon, delta=delta, sensitivity=lattice)
  ledger = accounting.PrivacyLedger()
  ledger.record_discrete_gaussian(sigma=float(sigma), sensitivity=lattice,
                                  delta=delta, label="discrete_gaussian",
                                  relation="add_remove")
  used = sigma / 2 if broken else sigma

  def mechanism(key, mean):
    z, _ = dp_lattice.gaussian_mechanism(
        key, mean, sensitivity=value_sensitivity, sigma=used,
        granularity=granularity)
    return z.astype(jnp.float32)

  settings = {"epsilon": epsilon, "delta": delta,
              "sigma_lattice": int(sigma), "granularity": granularity,
              "sensitivity": value_sensitivity,
              "lattice_sensitivity": lattice, "rounded_distance": 6}
  if broken:
    settings["sigma_lattice_used"] = str(used)
  return AuditSpec(
      name="discrete_gaussian_sigma_halved" if broken
      else "discrete_gaussian", relation="add_remove", settings=settings,
      mechanism=mechanism, data_0=jnp.float32(0.03),
      data_1=jnp.float32(0.03 + value_sensitivity), statistic=_identity,
      delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta),
      nominal_epsilon=None if audit_delta == delta else epsilon,
      default_trials=50_000 if broken else 300_000, broken=broken)


def discrete_laplace_spec(*, epsilon: float = 1.0, broken: bool = False
                          ) -> AuditSpec:
  """Discrete Laplace grid mechanism on a mean of 3 values in [0, 2].

  Δ₁ = 2/3, γ = 2⁻³: Δ₁/γ = 16/3 and the lattice sensitivity 19/3, so
  the scale t = 19/(3ε) gives ε; the neighbours 0.06 and 0.06 + 2/3
  round to 0 and 6 grid steps (an exact test would show 6/(19/3)·ε).
  ``broken``: the noise has scale t/2 (an exact test would show twice
  that).
  """
  granularity = 2.0 ** -3
  value_sensitivity = 2.0 / 3.0
  lattice = Fraction(16, 3) + 1
  scale = lattice / Fraction(epsilon)
  ledger = accounting.PrivacyLedger()
  ledger.record_discrete_laplace(scale=float(scale),
                                 sensitivity=float(lattice),
                                 label="discrete_laplace",
                                 relation="add_remove")
  used = scale / 2 if broken else scale

  def mechanism(key, mean):
    z, _ = dp_lattice.laplace_mechanism(
        key, mean, sensitivity=value_sensitivity, scale=used,
        granularity=granularity)
    return z.astype(jnp.float32)

  settings = {"epsilon": epsilon, "scale_lattice": str(scale),
              "granularity": granularity, "sensitivity": value_sensitivity,
              "lattice_sensitivity": float(lattice), "rounded_distance": 6}
  if broken:
    settings["scale_lattice_used"] = str(used)
  return AuditSpec(
      name="discrete_laplace_scale_halved" if broken else "discrete_laplace",
      relation="add_remove", settings=settings,
      mechanism=mechanism, data_0=jnp.float32(0.06),
      data_1=jnp.float32(0.06 + value_sensitivity), statistic=_identity,
      delta=0.0, reported_epsilon=claimed_epsilon(ledger, "add_remove"),
      default_trials=100_000 if broken else 1_000_000, broken=broken)


# -- the exponential mechanism -------------------------------------------------


def exponential_spec(*, epsilon: float = 1.0, candidates: int = 20,
                     broken: bool = False) -> AuditSpec:
  """Selection among ``candidates`` by scores of sensitivity 1.

  Data are the score vectors (counts of approving rows). Replacing one
  row that approves every candidate but the target by one that approves
  only the target raises the target's score by 1 and lowers every other
  by 1, the change that comes closest to the full e^ε ratio (it tends to
  it as the number of candidates grows). Statistic: the target chosen.
  ``broken``: the draw is told Δ = ½, so its weights are exp(ε·s), not
  exp(ε·s/2): 2ε-DP, reported as ε.
  """
  ledger = accounting.PrivacyLedger()
  ledger.record_exponential(epsilon, label="selection",
                            relation="replace_one")
  base = jnp.full((candidates,), 5.0, jnp.float32)
  scores_0 = base.at[1:].add(1.0)
  scores_1 = base.at[0].add(1.0)
  told = 0.5 if broken else 1.0

  def mechanism(key, scores):
    index, _ = exponential.exponential_mechanism(
        key, scores, epsilon=epsilon, sensitivity=told)
    return index

  return AuditSpec(
      name="exponential_sensitivity_halved" if broken else "exponential",
      relation="replace_one",
      settings={"epsilon": epsilon, "sensitivity": 1.0,
                "candidates": candidates,
                **({"sensitivity_used": told} if broken else {})},
      mechanism=mechanism, data_0=scores_0, data_1=scores_1,
      statistic=lambda index: (index == 0).astype(jnp.float32), delta=0.0,
      reported_epsilon=claimed_epsilon(ledger, "replace_one"),
      default_trials=100_000 if broken else 1_000_000, broken=broken)


# -- all of them ---------------------------------------------------------------


_SPECS = (gaussian_spec, laplace_spec, discrete_gaussian_spec,
          discrete_laplace_spec, exponential_spec)


def specs() -> list[AuditSpec]:
  """The noise audits, then each one's broken variant."""
  return ([spec() for spec in _SPECS]
          + [spec(broken=True) for spec in _SPECS])


__all__ = ["discrete_gaussian_spec", "discrete_laplace_spec",
           "exponential_spec", "gaussian_spec", "laplace_spec", "specs"]
