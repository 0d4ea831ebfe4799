"""Audit specs of output perturbation
(:mod:`mechanisms.erm.output_perturbation`).

``output_perturbation``: the noise step of a linear C-SVC's release on
the two exact minimisers of a one-row problem whose label flips between
the neighbours (replace-one), where the sensitivity is attained.
"""

from __future__ import annotations

import jax.numpy as jnp

from dpcore import accounting
from dpcore.audit_spec import AuditSpec, claimed_epsilon
from mechanisms.erm import output_perturbation as outp


def output_perturbation_spec(*, epsilon: float = 1.0, c: float = 0.1
                             ) -> AuditSpec:
  """Output perturbation of a linear C-SVC (replace-one).

  One row x = 1 (augmented to [1, 1]/√2, norm 1) with label +1 vs −1: the
  exact minimisers are ±C·x̃, 2C apart — the sensitivity is attained. The
  minimisers are computed host-side by the library's solver; the audit
  runs the library's noise step on them. Statistic: the privacy-loss
  direction ‖o − w₀‖ − ‖o − w₁‖ (the likelihood-ratio test).
  """
  x = jnp.ones((1, 1))
  w_0, _, _ = outp.fit_linear(x, jnp.ones((1,)), c=c)
  w_1, _, _ = outp.fit_linear(x, -jnp.ones((1,)), c=c)
  plan = outp.make_plan(epsilon=epsilon, c=c)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger, label="output_perturbation")
  w_0 = jnp.asarray(w_0, jnp.float32)
  w_1 = jnp.asarray(w_1, jnp.float32)

  def mechanism(key, w):
    return outp.perturb(key, w, sensitivity_l2=plan.sensitivity,
                        epsilon=plan.epsilon)

  def statistic(out):
    return jnp.linalg.norm(out - w_0) - jnp.linalg.norm(out - w_1)

  return AuditSpec(
      name="output_perturbation", relation="replace_one",
      settings={"epsilon": epsilon, "c": c, "sensitivity": plan.sensitivity,
                "minimiser_distance": float(jnp.linalg.norm(w_0 - w_1))},
      mechanism=mechanism, data_0=w_0, data_1=w_1, statistic=statistic,
      delta=0.0, reported_epsilon=claimed_epsilon(ledger, "replace_one"),
      default_trials=500_000)


def specs() -> list[AuditSpec]:
  """The output-perturbation audit."""
  return [output_perturbation_spec()]


__all__ = ["output_perturbation_spec", "specs"]
