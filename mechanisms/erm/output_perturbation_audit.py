"""Audit specs of output perturbation
(:mod:`mechanisms.erm.output_perturbation`).

``output_perturbation``: the noise step of a linear C-SVC's release on
the two exact minimisers of a :data:`ROWS`-row problem whose canary's
label flips between the neighbours (replace-one), where the sensitivity
is attained; the canary sits first, in the middle and last
(``output_perturbation@first`` …).

The broken variant, reported with the unbroken plan's ε, must be caught:
``output_perturbation_add_remove_sensitivity`` (the noise calibrated for
Δ₂ = C, the bound for adding or removing a row, while the neighbours
replace one; canary first).
"""

from __future__ import annotations

import jax.numpy as jnp

from dpcore import accounting
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  check_variant,
  claimed_epsilon,
  identity,
)
from mechanisms.erm import output_perturbation as outp

BROKEN = ("add_remove_sensitivity",)
ROWS = 3
"""Rows of the audited problem: the canary and two rows x = 0 labelled
+1 and −1 (the same in both neighbours)."""


def output_perturbation_spec(*, epsilon: float = 1.0, c: float = 0.1,
                             position: str = "first",
                             broken: str | None = None) -> AuditSpec:
  """Output perturbation of a linear C-SVC (replace-one), canary at
  ``position`` (one of :data:`dpcore.audit_spec.POSITIONS`).

  The canary x = 1 (augmented to [1, 1]/√2, norm 1) has label +1 vs −1.
  C is small enough that every row's margin stays below 1, so each row
  pulls the minimiser by C·y·x̃ and the two exact minimisers are 2C·x̃
  apart — the sensitivity is attained. The minimisers are computed
  host-side by the library's solver; the audit runs the library's noise
  step on them. Statistic: the privacy-loss direction ‖o − w₀‖ − ‖o − w₁‖
  (the likelihood-ratio test).

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
  canary = canary_index(ROWS, position)
  x = jnp.zeros((ROWS, 1)).at[canary, 0].set(1.0)
  others = jnp.asarray([1.0, -1.0])  # the other rows' labels, in order
  y_0 = jnp.insert(others, canary, 1.0)
  y_1 = jnp.insert(others, canary, -1.0)
  w_0, _, _ = outp.fit_linear(x, y_0, c=c)
  w_1, _, _ = outp.fit_linear(x, y_1, c=c)
  plan = outp.make_plan(epsilon=epsilon, c=c)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger, label="output_perturbation")
  w_0 = jnp.asarray(w_0, jnp.float32)
  w_1 = jnp.asarray(w_1, jnp.float32)
  noise_sensitivity = (outp.sensitivity(c) / 2
                       if broken == "add_remove_sensitivity"
                       else plan.sensitivity)

  def mechanism(key, w):
    return outp.perturb(key, w, sensitivity_l2=noise_sensitivity,
                        epsilon=plan.epsilon)

  def statistic(out):
    return jnp.linalg.norm(out - w_0) - jnp.linalg.norm(out - w_1)

  return AuditSpec(
      **identity("output_perturbation", position=None if broken else position,
                 broken=broken, trials=(500_000, 100_000)),
      relation="replace_one",
      settings={"epsilon": epsilon, "c": c, "rows": ROWS,
                "canary_row": canary, "sensitivity": plan.sensitivity,
                "minimiser_sensitivity": outp.sensitivity(c),
                "noise_sensitivity": noise_sensitivity,
                "minimiser_distance": float(jnp.linalg.norm(w_0 - w_1)),
                "variant": broken or "library"},
      mechanism=mechanism, data_0=w_0, data_1=w_1, statistic=statistic,
      delta=0.0, reported_epsilon=claimed_epsilon(ledger, "replace_one"))


def specs() -> list[AuditSpec]:
  """The output-perturbation audit at each canary position, then its
  broken variant."""
  return [*(output_perturbation_spec(position=position)
            for position in POSITIONS),
          output_perturbation_spec(broken="add_remove_sensitivity")]


__all__ = ["BROKEN", "ROWS", "output_perturbation_spec", "specs"]
