"""Audit specs of the linear ScatterNet's head
(:mod:`mechanisms.features.scatternet`).

The mechanism is :func:`mechanisms.features.scatternet.release` itself:
the softmax head from zero, momentum SGD, :func:`dpcore.trainer.train` on
its fast paths (the layered loss, the geometric-gap sampler). The
features before it are audited where they are made
(:mod:`mechanisms.features.scattering_audit` for scattering and group
norm, :mod:`mechanisms.features.normalization_audit` for ``norm="data"``),
and the ledger composes the two releases.

Neighbours (add/remove, the relation the DP-SGD plan records; N and q
public): N = 8 rows of d = 4 features, K = 2 classes. Every row but one is
blank (all zeros): its gradient on the weights W is xᵀ(p − e_y) = 0, so
it adds nothing to W's sum. The audited output is W alone (post-processing
of the release), so a blank row stands for an absent one even though its
bias gradient is not zero. ``data_1`` holds the canary at
the first, middle or last row (``position``): features of norm 14.1
(label 1), so its gradient, of norm ≈ 10 at the zero start, is clipped
to C; ``data_0`` a blank row there.

One step (T = 1): the first momentum step is a plain SGD step, so the
released W is −η (s·g_W + z_W) / (qN), s ~ Bernoulli(q) whether the canary
was sampled, g_W the W-part of its clipped gradient (fixed: the zero
start is public) and z_W the Gaussian noise N(0, σ²C²) on W. Statistic:
−W along g_W's direction, in units of ησC/(qN): N(0, 1) without the
canary, the q-mixture of N(‖g_W‖/(σC), 1) and N(0, 1) with it
(‖g_W‖ = 0.9975 C). Reported ε: the plan's own ledger at the audit's δ.

``broken="noise_quartered"`` trains with a plan whose σ is a quarter of
the one whose ε it reports, the canary at the first row: the audit must
catch it.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from dpcore import accounting, trainer
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  check_variant,
  claimed_epsilon,
  identity,
)
from mechanisms.features import scatternet

AUDIT_DELTA = 1e-2
BROKEN = ("noise_quartered",)

_SETTINGS = {"examples": 8, "dim": 4, "classes": 2, "canary_label": 1,
             "canary_value": 7.07, "sampling_rate": 0.5, "steps": 1,
             "noise_multiplier": 1.0, "clip_norm": 1.0,
             "learning_rate": 1.0, "momentum": 0.9}


def _canary_direction(cfg) -> tuple[np.ndarray, float]:
  """(unit direction of the canary's clipped W-gradient, its norm / C)."""
  x = np.full(cfg["dim"], cfg["canary_value"])
  p = np.full(cfg["classes"], 1.0 / cfg["classes"])  # the zero start
  residual = p - np.eye(cfg["classes"])[cfg["canary_label"]]
  g_w, g_b = np.outer(x, residual), residual
  norm = float(np.sqrt(np.sum(g_w ** 2) + np.sum(g_b ** 2)))
  if not norm > 2.0 * cfg["clip_norm"]:
    raise AssertionError(f"the canary's gradient has norm {norm}, not well "
                         f"above C: clipping would not bind.")
  w_norm = float(np.linalg.norm(g_w))
  return (g_w / w_norm).astype(np.float32), w_norm / norm


def head_spec(*, position: str = "first", broken: str | None = None,
              audit_delta: float = AUDIT_DELTA) -> AuditSpec:
  """:func:`scatternet.release`, a canary row at ``position``.

  See the module docstring. ``broken``: None, or one of :data:`BROKEN`
  (then the canary is at the first row).
  """
  cfg = _SETTINGS
  check_variant(broken, BROKEN)
  position = position if broken is None else "first"
  n, q, clip = cfg["examples"], cfg["sampling_rate"], cfg["clip_norm"]
  plan = trainer.make_plan(n, sampling_rate=q, steps=cfg["steps"],
                           clip_norm=clip,
                           noise_multiplier=cfg["noise_multiplier"],
                           delta=audit_delta, sampler="gaps")
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  used = plan
  if broken == "noise_quartered":
    used = dataclasses.replace(
        plan, noise_multiplier=plan.noise_multiplier / 4)
  recipe = scatternet.Recipe(learning_rate=cfg["learning_rate"],
                             momentum=cfg["momentum"])
  row = canary_index(n, position)
  data_0 = np.zeros((n, cfg["dim"]), np.float32)
  data_1 = data_0.copy()
  data_1[row] = cfg["canary_value"]
  labels = np.zeros(n, np.int32)
  labels[row] = cfg["canary_label"]
  direction, w_share = _canary_direction(cfg)
  direction = jnp.asarray(direction)
  scale = q * n / (cfg["learning_rate"] * cfg["noise_multiplier"] * clip)

  def mechanism(key, x):
    return scatternet.release(key, used, recipe, x, jnp.asarray(labels),
                              cfg["classes"])["out"]["w"]

  def statistic(w):
    return -jnp.sum(w * direction) * scale

  return AuditSpec(
      **identity("scatternet_head", position=position, broken=broken,
                 trials=(200_000, 20_000)),
      relation=plan.relation,
      settings={**cfg, "max_batch": plan.max_batch, "sampler": plan.sampler,
                "noise_multiplier_used": used.noise_multiplier,
                "canary_w_share": w_share,
                "variant": broken or "library", "canary_row": row},
      mechanism=mechanism, data_0=data_0, data_1=data_1,
      statistic=statistic, delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, plan.relation, audit_delta))


def specs() -> list[AuditSpec]:
  """The head at every canary position, and its broken variant."""
  return [*(head_spec(position=p) for p in POSITIONS),
          *(head_spec(broken=b) for b in BROKEN)]


__all__ = ["AUDIT_DELTA", "BROKEN", "head_spec", "specs"]
