"""Audit spec of FedDPDR-DPML (:mod:`federated.feddpdr`), one participant.

``feddpdr_participant``: the DP-PCA basis and the objective-perturbation
fit that one participant releases, :func:`federated.feddpdr.train`
itself, for a one-row participant whose label flips between the
neighbours (replace-one, the relation the pipeline is accounted under),
with the ε of the plan's privacy record and the paper's nominal ε.
"""

from __future__ import annotations

import jax.numpy as jnp

from dpcore.audit_spec import AuditSpec, claimed_epsilon
from federated import feddpdr


def feddpdr_spec(*, epsilon: float = 2.0, delta: float = 1e-4,
                 lam: float = 100.0) -> AuditSpec:
  """One FedDPDR-DPML participant's releases: DP-PCA basis and its fit.

  A participant with one row x = e₁ (d = 2, k = 2, two classes), label 1
  in ``data_0`` and 0 in ``data_1`` (replace-one, the relation the
  pipeline is accounted under). The mechanism is
  :func:`federated.feddpdr.train` itself for that one participant; the
  statistic is the released model mapped back to the input space, −(Ûβ̂)₁
  (with k = d the basis is a rotation, so this probes the fit).
  """
  config = feddpdr.Config(mechanism="dpdr_dpml", epsilon=epsilon,
                          delta=delta, k=2, lam=lam)
  plan = feddpdr.make_plan([1], dim=2, num_classes=2, config=config)
  x = jnp.zeros((1, 1, 2), jnp.float32).at[0, 0, 0].set(1.0)
  mask = jnp.ones((1, 1), jnp.float32)
  arrays = tuple(jnp.asarray(a) for a in
                 (plan.sigma.astype("float32"), plan.n, plan.p, plan.theta))

  def mechanism(key, labels):
    sigma, n, p, theta = (a.astype(jnp.float64) if i else a
                          for i, a in enumerate(arrays))
    out = feddpdr.train(key[None], feddpdr.Rows(x, labels, mask),
                        feddpdr.Traced(sigma, n, p, theta), config=config,
                        num_classes=2)
    return out.bases[0, 0], out.betas[0, 0, 0]

  def statistic(out):
    basis, beta = out
    return -(basis @ beta)[0]

  return AuditSpec(
      name="feddpdr_participant", relation="replace_one",
      settings={"mechanism": config.mechanism, "epsilon": epsilon,
                "delta": delta, "d": 2, "k": 2, "lam": lam, "n": 1,
                "epsilon_pca": plan.epsilon_pca,
                "epsilon_fit": plan.epsilon_fit},
      mechanism=mechanism, data_0=jnp.ones((1, 1), jnp.int32),
      data_1=jnp.zeros((1, 1), jnp.int32), statistic=statistic,
      delta=delta,
      reported_epsilon=claimed_epsilon(plan.privacy, "replace_one"),
      nominal_epsilon=plan.privacy["epsilon_nominal"],
      default_trials=100_000, x64=True)


def specs() -> list[AuditSpec]:
  """The one-participant FedDPDR-DPML audit."""
  return [feddpdr_spec()]


__all__ = ["feddpdr_spec", "specs"]
