"""Audit specs of federated DP-SGD's ``trust="distributed"`` mode.

The release audited is :func:`federated.fedsgd.release` with the
distributed discrete Gaussian under simulated secure aggregation: what
the server decodes from the masked messages, turned into the model (the
trainer row's set-up of :mod:`.audits`: a layered linear loss whose
gradient is −x, SGD from 0, so the model is the sum of the T decoded
updates). The claim is the plan's own ledger (an RDP curve and the
padding events), under add/remove of one row.

* ``fedsgd_distributed@{first,middle,last}``: 2 participants of 4 rows,
  the canary row (10·C along e₀, clipped to C) at row 0 of participant 0,
  row 0 of participant 1, row 3 of participant 1; a zero row in
  ``data_0``. Statistic: the released model along e₀.
* ``fedsgd_distributed_share_over_p`` (broken): 4 participants, each
  share drawn with σ/P instead of σ/√P (variance σ²/P², so the sum has
  σ/√P), reported with the unbroken plan's ε.
* ``fedsgd_distributed_unbounded_rounding`` (broken): plain randomised
  rounding with no norm condition, on a coarse grid (c = C/γ = 1) in
  D = 1024 dimensions, accounted as if a row moved the integer sum by c.
  The canary's rounding adds ‖e‖² ≈ D/6 grid units² spread over every
  coordinate (a zero row rounds to exactly 0), far beyond c; the
  statistic reads the whole released update, its squared norm.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import optax

from dpcore import accounting, ddg, ddg_accounting, ghost
from federated import fedsgd
from dpcore.audit_spec import (
    POSITIONS,
    AuditSpec,
    canary_index,
    claimed_epsilon,
    spec_name,
)

_CFG = {"sampling_rate": 0.5, "steps": 3, "noise_multiplier": 1.0,
        "clip_norm": 1.0, "dim": 2, "learning_rate": 1.0,
        "canary_scale": 10.0, "bits": 16}

BROKEN = ("share_over_p", "unbounded_rounding")


def _loss(layers, example):
  return -layers.dense("w", example[0])[0]


def distributed_spec(*, position: str = "first", broken: str | None = None,
                     audit_delta: float = 1e-2) -> AuditSpec:
  """One spec of the distributed mode (module docstring)."""
  if broken not in (None, *BROKEN):
    raise ValueError(f"broken must be None or one of {BROKEN}, got "
                     f"{broken!r}.")
  cfg = dict(_CFG)
  participants, rows = {None: (2, 4), "share_over_p": (4, 2),
                        "unbounded_rounding": (2, 1)}[broken]
  if broken == "unbounded_rounding":
    cfg.update(dim=1024, steps=1, sampling_rate=1.0)
  dim, clip = cfg["dim"], cfg["clip_norm"]
  plan = fedsgd.make_plan([rows] * participants, trust="distributed",
                          sampling_rate=cfg["sampling_rate"],
                          steps=cfg["steps"], clip_norm=clip,
                          noise_multiplier=cfg["noise_multiplier"],
                          delta=audit_delta, model_size=dim,
                          bits=cfg["bits"])
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  reported = claimed_epsilon(ledger, "add_remove", audit_delta)
  run_plan = plan
  p = plan.ddg_params
  if broken == "share_over_p":
    z = cfg["noise_multiplier"]
    run_plan = dataclasses.replace(plan, ddg_params=dataclasses.replace(
        p, sigma_share=ddg.share_sigma(z * p.norm / participants)))
  elif broken == "unbounded_rounding":
    # Grid c = 1 and no norm condition (the check's bound at its maximum);
    # claimed as if the rounded row moved the sum by c alone.
    coarse = dataclasses.replace(
        p, gamma=clip, bound_sq=2**30 - 1,
        sigma_share=ddg.share_sigma(cfg["noise_multiplier"]
                                    / math.sqrt(participants)))
    run_plan = dataclasses.replace(plan, ddg_params=coarse)
    rdp = ddg_accounting.distributed_rdp(
        sensitivity=1.0, sigma_share=float(coarse.sigma_share),
        shares=participants, dim=coarse.padded, sampling_rate=1.0,
        steps=1)
    reported = ddg_accounting.rdp_epsilon(rdp, audit_delta)
  if broken is not None:
    position = "first"
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
                         optax.sgd(cfg["learning_rate"]))
    return out.params["w"]["w"][:, 0] * plan.divisor / (
        cfg["learning_rate"] * clip)

  if broken == "unbounded_rounding":
    def statistic(w):
      return jnp.sum(jnp.square(w))
  else:
    def statistic(w):
      return w @ direction

  name = ("fedsgd_distributed" if broken is None
          else f"fedsgd_distributed_{broken}")
  return AuditSpec(
      name=spec_name(name, position if broken is None else None),
      relation="add_remove",
      settings={**plan.settings(), "canary_scale": cfg["canary_scale"],
                "canary_unit": unit, "unit": "row",
                "variant": broken or "library"},
      mechanism=mechanism, data_0=x_0, data_1=x_1, statistic=statistic,
      delta=audit_delta, reported_epsilon=reported,
      default_trials=50_000 if broken is None else 5_000,
      broken=broken is not None,
      position=position if broken is None else None)


def specs() -> list[AuditSpec]:
  """Every position of the distributed mode, and its broken variants."""
  return ([distributed_spec(position=p) for p in POSITIONS]
          + [distributed_spec(broken=b) for b in BROKEN])


__all__ = ["BROKEN", "distributed_spec", "specs"]
