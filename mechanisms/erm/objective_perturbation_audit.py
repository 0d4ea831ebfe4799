"""Audit specs of objective perturbation
(:mod:`mechanisms.erm.objective_perturbation`).

``objective_perturbation_huber`` and ``objective_perturbation_logistic``:
a one-row, one-dimensional fit whose label flips between the neighbours
(replace-one), with the ε the plan's own ledger claims.

Each loss's broken variant, reported with its unbroken plan's ε, must be
caught: ``objective_perturbation_huber_clip_skipped`` and
``objective_perturbation_logistic_clip_skipped`` (the row enters the loss
without being clipped to norm ≤ 1, and it is x = 10).
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
from mechanisms.erm import objective_perturbation as op

BROKEN = ("clip_skipped",)
CANARY_SCALE = 10.0
"""The norm of the broken variant's row (the unbroken one's is 1)."""


def unclipped_release(key, plan: op.ObjectivePerturbationPlan, x, y,
                      mask) -> op.FitResult:
  """``op.release`` with the row clip left out (the broken variant).

  Draws b with the plan's p and minimises J on the rows as given: p is
  calibrated for |ℓ′|·‖x‖ ≤ 1, which nothing here enforces, so a row of
  norm r moves the gradient of J by up to 2r/n between the neighbours
  instead of 2/n.
  """
  b = op.perturbation_noise(key, x.shape[-1], p=plan.p, dtype=x.dtype)
  return op.minimise(x, y, mask, num_examples=plan.num_examples,
                     lam=plan.lam, theta=plan.theta, b=b, loss=plan.loss,
                     h=plan.h)


def objective_perturbation_spec(*, loss: str = "huber", epsilon: float = 1.0,
                                lam: float = 100.0,
                                broken: str | None = None) -> AuditSpec:
  """One-row, one-dimensional objective perturbation (replace-one).

  The only row x = 1 has label +1 in ``data_0`` and −1 in ``data_1``. With
  a strong ridge the fit stays where the Huber hinge is linear, so the
  gradient the row contributes flips by the full 2 — the worst case of the
  proof; the logistic loss's derivative is ½ there, so its audit can show
  only about half of ε. Statistic: −β (label −1 pushes β down). Fits run
  in float64 to the library's tolerance.

  ``broken``: None, or ``"clip_skipped"`` (:data:`BROKEN`): the row is not
  clipped to norm ≤ 1 before the fit (:func:`unclipped_release`) and is
  x = :data:`CANARY_SCALE`, a row a caller forgot to normalise. Near
  β = 0 the two labels then need noise values 2·10 apart where the noise
  is calibrated for 2: a privacy loss up to (p/2)·20 ≈ 9.8 instead of
  (p/2)·2. Reported with the plan's ε, the audit must find a bound above
  it.
  """
  check_variant(broken, BROKEN)
  plan = op.make_plan(epsilon=epsilon, num_examples=1, lam=lam, loss=loss)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  row_norm = CANARY_SCALE if broken == "clip_skipped" else 1.0
  x = jnp.full((1, 1), row_norm)
  mask = jnp.ones((1,))
  release = unclipped_release if broken == "clip_skipped" else op.release

  def mechanism(key, y):
    return release(key, plan, x.astype(jnp.float64), y,
                   mask.astype(jnp.float64)).beta

  return AuditSpec(
      **identity(f"objective_perturbation_{loss}", position=None,
                 broken=broken, trials=(200_000, 20_000)),
      relation="replace_one",
      settings={"loss": loss, "epsilon": epsilon, "lam": lam, "n": 1,
                "p": plan.p, "theta": plan.theta, "row_norm": row_norm,
                "variant": broken or "library"},
      mechanism=mechanism, data_0=jnp.ones((1,)), data_1=-jnp.ones((1,)),
      statistic=lambda beta: -beta[0], delta=0.0,
      reported_epsilon=claimed_epsilon(ledger, "replace_one"), x64=True)


def specs() -> list[AuditSpec]:
  """Objective perturbation with the Huber and the logistic loss, then
  the Huber fit's broken variant, then the logistic fit's."""
  return [objective_perturbation_spec(loss="huber"),
          objective_perturbation_spec(loss="logistic"),
          objective_perturbation_spec(broken="clip_skipped"),
          objective_perturbation_spec(loss="logistic",
                                      broken="clip_skipped")]


__all__ = ["BROKEN", "CANARY_SCALE", "objective_perturbation_spec", "specs",
           "unclipped_release"]
