"""Audit specs of objective perturbation
(:mod:`mechanisms.erm.objective_perturbation`).

``objective_perturbation_huber`` and ``objective_perturbation_logistic``:
a one-row, one-dimensional fit whose label flips between the neighbours
(replace-one), with the ε the plan's own ledger claims.
"""

from __future__ import annotations

import jax.numpy as jnp

from dpcore import accounting
from dpcore.audit_spec import AuditSpec, claimed_epsilon
from mechanisms.erm import objective_perturbation as op


def objective_perturbation_spec(*, loss: str = "huber", epsilon: float = 1.0,
                                lam: float = 100.0) -> AuditSpec:
  """One-row, one-dimensional objective perturbation (replace-one).

  The only row x = 1 has label +1 in ``data_0`` and −1 in ``data_1``. With
  a strong ridge the fit stays where the Huber hinge is linear, so the
  gradient the row contributes flips by the full 2 — the worst case of the
  proof; the logistic loss's derivative is ½ there, so its audit can show
  only about half of ε. Statistic: −β (label −1 pushes β down). Fits run
  in float64 to the library's tolerance.
  """
  plan = op.make_plan(epsilon=epsilon, num_examples=1, lam=lam, loss=loss)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  x = jnp.ones((1, 1))
  mask = jnp.ones((1,))

  def mechanism(key, y):
    return op.release(key, plan, x.astype(jnp.float64), y,
                      mask.astype(jnp.float64)).beta

  return AuditSpec(
      name=f"objective_perturbation_{loss}", relation="replace_one",
      settings={"loss": loss, "epsilon": epsilon, "lam": lam, "n": 1,
                "p": plan.p, "theta": plan.theta},
      mechanism=mechanism, data_0=jnp.ones((1,)), data_1=-jnp.ones((1,)),
      statistic=lambda beta: -beta[0], delta=0.0,
      reported_epsilon=claimed_epsilon(ledger, "replace_one"),
      default_trials=200_000,
      x64=True)


def specs() -> list[AuditSpec]:
  """Objective perturbation with the Huber and the logistic loss."""
  return [objective_perturbation_spec(loss="huber"),
          objective_perturbation_spec(loss="logistic")]


__all__ = ["objective_perturbation_spec", "specs"]
