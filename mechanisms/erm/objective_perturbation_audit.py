"""Audit specs of objective perturbation
(:mod:`mechanisms.erm.objective_perturbation`).

``objective_perturbation_huber`` and ``objective_perturbation_logistic``:
a one-dimensional fit on :data:`ROWS` rows whose canary's label flips
between the neighbours (replace-one), with the ε the plan's own ledger
claims; the canary sits first, in the middle and last
(``objective_perturbation_huber@first`` …), the other rows blank (x = 0:
their loss is a constant, so they add nothing to the fit).

Each loss's broken variant, reported with its unbroken plan's ε, must be
caught: ``objective_perturbation_huber_clip_skipped`` and
``objective_perturbation_logistic_clip_skipped`` (the canary enters the
loss without being clipped to norm ≤ 1, and it is x = 10; first row).

The released fits carry the gap noise z (the library's release). That
part of the guarantee, 1 % of ε for a distance of at most 2·tol/(λ+θ),
about 2e-10 here, is far below what any sampled audit can resolve; its
evidence is the law test of z on the release and the radius test in
``tests/mechanisms/erm/objective_perturbation_test.py``. The audit is at
the ledger's δ, (1 + e^ε)·2⁻¹⁰⁰ from the cap on the noise's norm.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dpcore import accounting
from dpcore import noise as dp_noise
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  check_variant,
  claimed_epsilon,
  identity,
)
from mechanisms.erm import objective_perturbation as op

BROKEN = ("clip_skipped",)
ROWS = 3
"""Rows of the audited problem: the canary and two blank rows."""
CANARY_SCALE = 10.0
"""The canary row's norm: the library clips it to 1, the broken variant
does not."""


def unclipped_release(key, plan: op.ObjectivePerturbationPlan, x, y,
                      mask) -> op.FitResult:
  """``op.release`` with the row clip left out (the broken variant).

  Draws b with the plan's p, minimises J on the rows as given and adds the
  gap noise z, with the library's keys: p is calibrated for |ℓ′|·‖x‖ ≤ 1,
  which nothing here enforces, so a row of norm r moves the gradient of J
  by up to 2r/n between the neighbours instead of 2/n.
  """
  b_key, z_key = jax.random.split(key)
  dim = x.shape[-1]
  b = op.perturbation_noise(b_key, dim, p=plan.p, num=1, dtype=x.dtype)
  z = dp_noise.objective_perturbation_noise(z_key, dim, beta=plan.gap_rate,
                                            num=1, dtype=x.dtype)
  fit = op.minimise(x, y, mask, num_examples=plan.num_examples,
                    lam=plan.lam, theta=plan.theta, b=b[0], loss=plan.loss,
                    h=plan.h, tol=plan.tol)
  return fit._replace(beta=fit.beta + z[0])


def objective_perturbation_spec(*, loss: str = "huber", epsilon: float = 1.0,
                                lam: float = 100.0, position: str = "first",
                                broken: str | None = None) -> AuditSpec:
  """One-dimensional objective perturbation (replace-one), canary at
  ``position`` (one of :data:`dpcore.audit_spec.POSITIONS`) among
  :data:`ROWS` rows.

  The canary x = :data:`CANARY_SCALE`, clipped to 1 by the library (the
  audit also tests the clip), has label +1 in ``data_0`` and −1 in
  ``data_1``; the
  other rows are x = 0 with label +1 in both. With a strong ridge the fit
  stays where the Huber hinge is linear, so the gradient the canary
  contributes flips by the full 2 — the worst case of the proof; the
  logistic loss's derivative is ½ there, so its audit can show only about
  half of ε. Statistic: −β (label −1 pushes β down). Fits run in float64
  to the library's tolerance.

  ``broken``: None, or ``"clip_skipped"`` (:data:`BROKEN`): the row is not
  clipped to norm ≤ 1 before the fit (:func:`unclipped_release`), a row a
  caller forgot to normalise. Near
  β = 0 the two labels then need noise values 2·10 apart where the noise
  is calibrated for 2: a privacy loss up to (p/2)·20 ≈ 9.8 instead of
  (p/2)·2. Reported with the plan's ε, the audit must find a bound above
  it.
  """
  check_variant(broken, BROKEN)
  canary = canary_index(ROWS, position)
  plan = op.make_plan(epsilon=epsilon, num_examples=ROWS, lam=lam, loss=loss)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  row_norm = CANARY_SCALE  # clipped to 1 unless the clip is skipped
  x = jnp.zeros((ROWS, 1)).at[canary, 0].set(row_norm)
  mask = jnp.ones((ROWS,))
  release = unclipped_release if broken == "clip_skipped" else op.release

  def mechanism(key, y):
    return release(key, plan, x.astype(jnp.float64), y,
                   mask.astype(jnp.float64)).beta

  labels = jnp.ones((ROWS,))
  return AuditSpec(
      **identity(f"objective_perturbation_{loss}",
                 position=None if broken else position, broken=broken,
                 trials=(200_000, 20_000)),
      relation="replace_one",
      settings={"loss": loss, "epsilon": epsilon, "lam": lam, "n": ROWS,
                "p": plan.p, "theta": plan.theta,
                "epsilon_gap": plan.epsilon_gap, "row_norm": row_norm,
                "canary_row": canary, "variant": broken or "library"},
      mechanism=mechanism, data_0=labels,
      data_1=labels.at[canary].set(-1.0),
      statistic=lambda beta: -beta[0], delta=ledger.guarantee().delta,
      reported_epsilon=claimed_epsilon(ledger, "replace_one"), x64=True)


def specs() -> list[AuditSpec]:
  """Objective perturbation with the Huber and the logistic loss at each
  canary position, then the Huber fit's broken variant, then the
  logistic fit's."""
  return [*(objective_perturbation_spec(loss=loss, position=position)
            for loss in ("huber", "logistic") for position in POSITIONS),
          objective_perturbation_spec(broken="clip_skipped"),
          objective_perturbation_spec(loss="logistic",
                                      broken="clip_skipped")]


__all__ = ["BROKEN", "CANARY_SCALE", "ROWS", "objective_perturbation_spec",
           "specs", "unclipped_release"]
