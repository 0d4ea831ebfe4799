"""Audit specs of output perturbation
(:mod:`mechanisms.erm.output_perturbation`).

``output_perturbation``: the noise step of a linear C-SVC's release on
the two exact minimisers of a one-row problem whose label flips between
the neighbours (replace-one), where the sensitivity is attained.

The broken variant, reported with the unbroken plan's ε, must be caught:
``output_perturbation_add_remove_sensitivity`` (the noise calibrated for
Δ₂ = C, the bound for adding or removing a row, while the neighbours
replace one).
"""

from __future__ import annotations

import jax.numpy as jnp

from dpcore import accounting
from dpcore.audit_spec import (
  AuditSpec,
  check_variant,
  claimed_epsilon,
  identity,
)
from mechanisms.erm import output_perturbation as outp

BROKEN = ("add_remove_sensitivity",)


def output_perturbation_spec(*, epsilon: float = 1.0, c: float = 0.1,
                             broken: str | None = None) -> AuditSpec:
  """Output perturbation of a linear C-SVC (replace-one).

  One row x = 1 (augmented to [1, 1]/√2, norm 1) with label +1 vs −1: the
  exact minimisers are ±C·x̃, 2C apart — the sensitivity is attained. The
  minimisers are computed host-side by the library's solver; the audit
  runs the library's noise step on them. Statistic: the privacy-loss
  direction ‖o − w₀‖ − ‖o − w₁‖ (the likelihood-ratio test).

  ``broken``: None, or ``"add_remove_sensitivity"`` (:data:`BROKEN`): the
  noise is drawn for Δ₂ = C. Adding or removing a row adds one C-Lipschitz
  term to the 1-strongly convex objective, which moves the minimiser by
  at most C; replacing one (the relation output perturbation is proven
  and accounted under) changes it by two such terms, 2C. The noise is
  then half as wide as the replace-one ε needs: the release is 2ε-DP on
  these neighbours (attained), reported with the plan's ε, and the audit
  must find a bound above it.
  """
  check_variant(broken, BROKEN)
  x = jnp.ones((1, 1))
  w_0, _, _ = outp.fit_linear(x, jnp.ones((1,)), c=c)
  w_1, _, _ = outp.fit_linear(x, -jnp.ones((1,)), c=c)
  plan = outp.make_plan(epsilon=epsilon, c=c)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger, label="output_perturbation")
  w_0 = jnp.asarray(w_0, jnp.float32)
  w_1 = jnp.asarray(w_1, jnp.float32)
  noise_sensitivity = (plan.c if broken == "add_remove_sensitivity"
                       else plan.sensitivity)

  def mechanism(key, w):
    return outp.perturb(key, w, sensitivity_l2=noise_sensitivity,
                        epsilon=plan.epsilon)

  def statistic(out):
    return jnp.linalg.norm(out - w_0) - jnp.linalg.norm(out - w_1)

  return AuditSpec(
      **identity("output_perturbation", position=None, broken=broken,
                 trials=(500_000, 100_000)),
      relation="replace_one",
      settings={"epsilon": epsilon, "c": c, "sensitivity": plan.sensitivity,
                "noise_sensitivity": noise_sensitivity,
                "minimiser_distance": float(jnp.linalg.norm(w_0 - w_1)),
                "variant": broken or "library"},
      mechanism=mechanism, data_0=w_0, data_1=w_1, statistic=statistic,
      delta=0.0, reported_epsilon=claimed_epsilon(ledger, "replace_one"))


def specs() -> list[AuditSpec]:
  """The output-perturbation audit, then its broken variant."""
  return [output_perturbation_spec(),
          output_perturbation_spec(broken="add_remove_sensitivity")]


__all__ = ["BROKEN", "output_perturbation_spec", "specs"]
