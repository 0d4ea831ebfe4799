"""Audit specs of FedDPDR-DPML (:mod:`federated.feddpdr`), one participant.

``feddpdr_participant``: the DP-PCA basis and the objective-perturbation
fit that one participant releases, :func:`federated.feddpdr.train`
itself, for a one-row participant whose label flips between the
neighbours (replace-one, the relation the pipeline is accounted under),
with the ε of the plan's privacy record and the paper's nominal ε.

The broken variant, reported with the unbroken plan's ε, must be caught:
``feddpdr_participant_clip_skipped`` (the participant's projected rows
reach its fit without being clipped to norm ≤ 1, and its row is 10·e₁).
"""

from __future__ import annotations

import jax.numpy as jnp

from dpcore.audit_spec import AuditSpec, claimed_epsilon
from federated import feddpdr
from mechanisms.erm import objective_perturbation as op
from mechanisms.pca import dp_pca

BROKEN = ("clip_skipped",)
CANARY_SCALE = 10.0
"""The norm of the broken variant's row (the unbroken one's is 1)."""


def unclipped_participant(key, x, labels, mask, traced: feddpdr.Traced, *,
                          config: feddpdr.Config):
  """One DPDR-DPML participant's (basis, β) with the fit's clip left out.

  The broken variant. What :func:`federated.feddpdr.train` runs for
  participant 0 of a two-class ``dpdr_dpml`` run — the same keys, its
  DP-PCA basis (:func:`mechanisms.pca.dp_pca.noisy_basis`), the noise b
  of its one fit — except that the rows projected on the basis go to the
  minimiser as they are: neither the stage nor
  :func:`mechanisms.erm.objective_perturbation.one_vs_rest` clips them to
  norm ≤ 1. On rows of norm ≤ 1 the two agree (the basis is
  orthonormal); p is calibrated for that bound alone, so a row of norm r
  moves the fit's gradient r times as far as the noise covers.

  Args:
    key: the repeat's key (``train``'s ``keys[0]``).
    x: (1, n_max, d) the participant's rows.
    labels: (1, n_max) its class ids (0 or 1).
    mask: (1, n_max) 1 for real rows.
    traced: the plan's numbers (σ float32; n, p, θ float64).
    config: the run's settings (k, λ, loss, tolerance).

  Returns:
    ``(basis, beta)``: the (d, k) basis and the (k,) classifier.
  """
  static = feddpdr.program(config)
  pca_keys, fit_keys = feddpdr.participant_keys(key, 1)
  x, labels, mask = x[0], labels[0], mask[0]
  basis = dp_pca.noisy_basis(pca_keys[0], x, mask, k=static.k,
                             sigma=traced.sigma[0].astype(x.dtype),
                             topk=static.topk).components
  z = (x @ basis).astype(jnp.float64)  # not clipped: the defect
  b = op.perturbation_noise(fit_keys[0], static.k, p=traced.p[0], num=1,
                            dtype=z.dtype)
  y = jnp.where(labels == 1, 1.0, -1.0).astype(z.dtype)
  fit = op.minimise(z, y, mask.astype(z.dtype), num_examples=traced.sizes[0],
                    lam=static.lam, theta=traced.theta[0], b=b[0],
                    loss=static.loss, h=static.huber_h, tol=static.tol,
                    max_iter=static.max_iter)
  return basis, fit.beta


def feddpdr_spec(*, epsilon: float = 2.0, delta: float = 1e-4,
                 lam: float = 100.0, broken: str | None = None
                 ) -> AuditSpec:
  """One FedDPDR-DPML participant's releases: DP-PCA basis and its fit.

  A participant with one row x = e₁ (d = 2, k = 2, two classes), label 1
  in ``data_0`` and 0 in ``data_1`` (replace-one, the relation the
  pipeline is accounted under). The mechanism is
  :func:`federated.feddpdr.train` itself for that one participant; the
  statistic is the released model mapped back to the input space, −(Ûβ̂)₁
  (with k = d the basis is a rotation, so this probes the fit).

  ``broken``: None, or ``"clip_skipped"`` (:data:`BROKEN`): the
  participant's row is :data:`CANARY_SCALE`·e₁, a row it forgot to
  normalise, and its projection reaches the fit unclipped
  (:func:`unclipped_participant`). DP-PCA still clips its copy, and the
  row is the same in both neighbours, so the basis tells nothing; the
  fit's gradient flips by 2·10 where the noise is calibrated for 2.
  Reported with the plan's ε, the audit must find a bound above it.
  """
  if broken not in (None, *BROKEN):
    raise ValueError(f"broken must be None or one of {BROKEN}, got "
                     f"{broken!r}.")
  config = feddpdr.Config(mechanism="dpdr_dpml", epsilon=epsilon,
                          delta=delta, k=2, lam=lam)
  plan = feddpdr.make_plan([1], dim=2, num_classes=2, config=config)
  row_norm = CANARY_SCALE if broken == "clip_skipped" else 1.0
  x = jnp.zeros((1, 1, 2), jnp.float32).at[0, 0, 0].set(row_norm)
  mask = jnp.ones((1, 1), jnp.float32)
  arrays = tuple(jnp.asarray(a) for a in
                 (plan.sigma.astype("float32"), plan.sizes, plan.p, plan.theta))

  def mechanism(key, labels):
    sigma, n, p, theta = (a.astype(jnp.float64) if i else a
                          for i, a in enumerate(arrays))
    traced = feddpdr.Traced(sigma, n, p, theta)
    if broken == "clip_skipped":
      return unclipped_participant(key, x, labels, mask, traced,
                                   config=config)
    out = feddpdr.train(key[None], feddpdr.Rows(x, labels, mask), traced,
                        config=config, num_classes=2)
    return out.bases[0, 0], out.betas[0, 0, 0]

  def statistic(out):
    basis, beta = out
    return -(basis @ beta)[0]

  return AuditSpec(
      name=("feddpdr_participant" if broken is None
            else f"feddpdr_participant_{broken}"),
      relation="replace_one",
      settings={"mechanism": config.mechanism, "epsilon": epsilon,
                "delta": delta, "d": 2, "k": 2, "lam": lam, "n": 1,
                "epsilon_pca": plan.epsilon_pca,
                "epsilon_fit": plan.epsilon_fit, "row_norm": row_norm,
                "variant": broken or "library"},
      mechanism=mechanism, data_0=jnp.ones((1, 1), jnp.int32),
      data_1=jnp.zeros((1, 1), jnp.int32), statistic=statistic,
      delta=delta,
      reported_epsilon=claimed_epsilon(plan.privacy, "replace_one"),
      nominal_epsilon=plan.privacy["epsilon_nominal"],
      default_trials=100_000 if broken is None else 20_000, x64=True,
      broken=broken is not None)


def specs() -> list[AuditSpec]:
  """The one-participant FedDPDR-DPML audit, then its broken variant."""
  return [feddpdr_spec(), feddpdr_spec(broken="clip_skipped")]


__all__ = ["BROKEN", "CANARY_SCALE", "feddpdr_spec", "specs",
           "unclipped_participant"]
