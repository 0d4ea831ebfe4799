"""Audit specs of Analyze-Gauss DP-PCA (:mod:`mechanisms.pca.dp_pca`).

``dp_pca@first``, ``@middle``, ``@last``: the whole eigendecomposition
released for a canary row e₁ at each position among the d rows, against
the same padded rows with the canary masked out (add/remove), with the
ε the plan's own ledger claims.
"""

from __future__ import annotations

import jax.numpy as jnp

from dpcore import accounting
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  claimed_epsilon,
  spec_name,
)
from mechanisms.pca import dp_pca


def dp_pca_spec(*, epsilon: float = 1.0, delta: float = 1e-5,
                audit_delta: float = 1e-2, dim: int = 3,
                position: str = "first") -> AuditSpec:
  """Analyze-Gauss DP-PCA (add/remove), a canary row e₁ vs without.

  Both data sets have the same padded shape; the canary's slot (at
  ``position`` among the d rows) is masked out in ``data_0``. The release
  is the full eigendecomposition (k = d), from which the statistic
  rebuilds e₁ᵀ(noisy M)e₁ = Σⱼ λⱼ (vⱼ·e₁)²: the noisy diagonal entry the
  canary adds 1 to.
  """
  plan = dp_pca.make_plan(epsilon=epsilon, delta=delta, k=dim, dim=dim,
                          relation="add_remove")
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  at = canary_index(dim, position)
  # The canary e₁ in row ``at``, the other rows e₂ … e_d.
  rows = jnp.roll(jnp.eye(dim, dtype=jnp.float32), at, axis=0)
  mask_1 = jnp.ones((dim,), jnp.float32)
  mask_0 = mask_1.at[at].set(0.0)

  def mechanism(key, data):
    x, mask = data
    return dp_pca.release(key, plan, x, mask)

  def statistic(result):
    return jnp.sum(result.eigenvalues * result.components[0] ** 2)

  return AuditSpec(
      name=spec_name("dp_pca", position), relation="add_remove",
      settings={"epsilon": epsilon, "delta": delta, "sigma": plan.sigma,
                "d": dim, "k": dim, "calibration": plan.calibration},
      position=position,
      mechanism=mechanism, data_0=(rows, mask_0), data_1=(rows, mask_1),
      statistic=statistic, delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta),
      nominal_epsilon=epsilon, default_trials=300_000)


def specs() -> list[AuditSpec]:
  """DP-PCA with its canary first, in the middle and last."""
  return [dp_pca_spec(position=p) for p in POSITIONS]


__all__ = ["dp_pca_spec", "specs"]
