"""Audit specs of federated DP-SGD's ``trust="distributed"`` mode.

The release audited is :func:`federated.fedsgd.release` with the
distributed discrete Gaussian under simulated secure aggregation
(:mod:`federated.ddgsgd`): the real encoding (clip, scale, rotate,
conditional rounding of every row, exact discrete Gaussian shares,
modulo 2^b), masking, unmasking and decoding. The model is a layered
linear loss whose gradient is −x, trained by SGD from 0 at learning rate
1, so the released model is the sum of the T decoded updates over qN;
the mechanism returns it times qN/C, the decoded sums in units of the
clip norm. The claim is read from the plan's own ledger (an RDP curve
and the padding events) under add/remove of one row.

The settings keep a trial cheap while every piece of the mode runs: a
model of d = D = 2 coordinates, one step, a few participants and rows,
so a trial draws a handful of exact discrete Gaussians. At its default
trials each spec takes 5–22 s of CPU time on the 2-core development CPU
(docs/secure_aggregation.md).

* ``fedsgd_distributed@{first,middle,last}``: 2 participants of 4 rows,
  q = 0.5, T = 1, σ = 0.7·C. The canary row (10·C along e₀, clipped to
  C) is row 0 of participant 0, row 0 of participant 1 or row 3 of
  participant 1; ``data_0`` holds a zero row there (it rounds to exactly
  0, as if absent). Statistic: the released model along e₀.
* ``fedsgd_distributed_share_over_p`` (broken): 4 participants of 2
  rows, otherwise as above, each drawing its share with σ/P instead of
  σ/√P (the sum then has σ/√P = σ/2), reported with the unbroken plan's
  ε.
* ``fedsgd_distributed_unbounded_rounding`` (broken): randomised
  rounding with no norm condition, accounted at the clip norm (Δ = c),
  the mistake of taking the unrounded row's norm for the rounded one's.
  One participant, one row, d = D = 1, one step at q = 1, a grid of
  γ = 2C (c = ½) and one share of s = ½ (the smallest the sum theorem
  takes). The canary, C·e₀, sits at ±½ after scaling and rotation,
  where rounding varies most: it rounds to norm 1 = 2c half of the time.
  Statistic: that coordinate, the released model. (The library's own
  bound for this grid is Δ = √⌊1.5⌋ = 1, which conditional rounding
  enforces; see ``settings``.)
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import jax.numpy as jnp
import optax

from dpcore import accounting, ddg, ddg_accounting, ghost
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  check_variant,
  claimed_epsilon,
  identity,
)
from federated import fedsgd

__all__ = ["BROKEN", "distributed_spec", "specs"]

BROKEN = ("share_over_p", "unbounded_rounding")
"""The broken variants :func:`distributed_spec` builds."""

_BROKEN_TRIALS = {"share_over_p": 10_000, "unbounded_rounding": 20_000}

_CFG = {"sampling_rate": 0.5, "steps": 1, "noise_multiplier": 0.7,
        "clip_norm": 1.0, "dim": 2, "canary_scale": 10.0, "bits": 16}

_LAYOUT = {None: (2, 4), "share_over_p": (4, 2), "unbounded_rounding": (1, 1)}
"""(participants, rows each) of every variant."""


def _loss(layers, example):
  return -layers.dense("w", example[0])[0]


def _coarse_plan(plan: fedsgd.FedSGDPlan, clip: float
                 ) -> tuple[fedsgd.FedSGDPlan, float]:
  """The unbounded-rounding variant's plan and the ε it would claim.

  The grid c = C/γ = ½ in D = 1 coordinate with one share of s = ½; no
  norm condition (the check's bound at its maximum, 2³⁰ − 1); claimed as
  if a row moved the sum by c alone.
  """
  norm, share = 0.5, Fraction(1, 2)
  coarse = dataclasses.replace(
      plan.ddg_params, gamma=clip / norm, bound_sq=2**30 - 1,
      sigma_share=share)
  rdp = ddg_accounting.distributed_rdp(
      sensitivity=norm, sigma_share=float(share), shares=1, dim=1,
      sampling_rate=plan.sampling_rate, steps=plan.steps)
  return dataclasses.replace(plan, ddg_params=coarse), rdp


def distributed_spec(*, position: str = "first", broken: str | None = None,
                     audit_delta: float = 1e-2) -> AuditSpec:
  """One spec of the distributed mode (module docstring).

  Args:
    position: where the canary row sits among all rows (``"first"``,
      ``"middle"``, ``"last"``); the broken variants use ``"first"``.
    broken: None, or one of :data:`BROKEN`.
    audit_delta: the δ the claim is read at.
  """
  check_variant(broken, BROKEN)
  cfg = dict(_CFG)
  participants, rows = _LAYOUT[broken]
  if broken == "unbounded_rounding":
    cfg.update(dim=1, sampling_rate=1.0)
    position = "first"
  elif broken is not None:
    position = "first"
  dim, clip, z = cfg["dim"], cfg["clip_norm"], cfg["noise_multiplier"]
  plan = fedsgd.make_plan([rows] * participants, trust="distributed",
                          sampling_rate=cfg["sampling_rate"],
                          steps=cfg["steps"], clip_norm=clip,
                          noise_multiplier=z, delta=audit_delta,
                          model_size=dim, bits=cfg["bits"])
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  reported = claimed_epsilon(ledger, "add_remove", audit_delta)
  run_plan = plan
  p = plan.ddg_params
  extra = {}
  if broken == "share_over_p":
    run_plan = dataclasses.replace(plan, ddg_params=dataclasses.replace(
        p, sigma_share=ddg.share_sigma(z * p.norm / participants)))
    extra = {"run_sigma_share": float(run_plan.ddg_params.sigma_share)}
  elif broken == "unbounded_rounding":
    run_plan, rdp = _coarse_plan(plan, clip)
    reported = ddg_accounting.rdp_epsilon(rdp, audit_delta)
    c = run_plan.ddg_params.norm
    extra = {"run_granularity": run_plan.ddg_params.gamma,
             "run_sigma_share": 0.5, "claimed_sensitivity": c,
             "library_sensitivity": ddg_accounting.rounded_norm_bound_sq(
                 c, 1, p.beta) ** 0.5}
  direction = jnp.zeros((dim,), jnp.float32).at[0].set(1.0)
  x_0 = jnp.zeros((participants, rows, dim), jnp.float32)
  unit = canary_index(participants * rows, position)
  x_1 = x_0.at[unit // rows, unit % rows].set(
      cfg["canary_scale"] * clip * direction)
  labels = jnp.zeros((participants, rows), jnp.int32)
  mask = jnp.ones((participants, rows), jnp.float32)
  params = {"w": {"w": jnp.zeros((dim, 1), jnp.float32)}}
  loss = ghost.layered(_loss)

  def mechanism(key, x):
    out = fedsgd.release(key, run_plan, loss, params, x, labels, mask,
                         optax.sgd(1.0))
    return out.params["w"]["w"][:, 0] * plan.divisor / clip

  def statistic(w):
    return w @ direction

  return AuditSpec(
      **identity("fedsgd_distributed", position=position, broken=broken,
                 trials=(50_000, _BROKEN_TRIALS.get(broken))),
      relation="add_remove",
      settings={**plan.settings(), **extra,
                "canary_scale": cfg["canary_scale"], "canary_unit": unit,
                "unit": "row", "variant": broken or "library"},
      mechanism=mechanism, data_0=x_0, data_1=x_1, statistic=statistic,
      delta=audit_delta, reported_epsilon=reported)


def specs() -> list[AuditSpec]:
  """Every position of the distributed mode, and its broken variants."""
  return ([distributed_spec(position=p) for p in POSITIONS]
          + [distributed_spec(broken=b) for b in BROKEN])
