"""Audit specs of the DP-SGD trainer end to end (:mod:`dpcore.trainer`).

A whole :func:`dpcore.trainer.train` run on its fast paths (the layered
ghost-clipped loss, the geometric-gap sampler), a canary row at the
first, middle or last position (add/remove): ``trainer_ghost@first``,
``@middle``, ``@last``. ``trainer_clip_skipped``, reported with the
unbroken plan's ε, runs the same trainer with a clipped sum that does
not clip, and must be caught.

:func:`canary_loss` and :data:`SETTINGS` are the set-up the other
trainer-based audits share (federated DP-SGD's, the features
pipeline's).
"""

from __future__ import annotations

import jax.numpy as jnp
import optax

from dpcore import accounting, ghost, trainer
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  check_variant,
  claimed_epsilon,
  identity,
)

SETTINGS = {"examples": 8, "sampling_rate": 0.5, "steps": 3,
            "noise_multiplier": 1.0, "clip_norm": 1.0, "dim": 2,
            "learning_rate": 1.0, "canary_scale": 10.0}
"""The trainer audit's settings (read, never modified, by the others)."""


def canary_loss(layers, example):
  """ℓ(w; x) = −w·x, a layered linear loss (:mod:`dpcore.ghost`).

  Its gradient is −x whatever w, so a canary row's gradient has the
  canary's norm (canary_scale·C) and every step must clip it; a zero row
  adds nothing to any sum.
  """
  return -layers.dense("w", example)[0]


def release(key, plan, x, *, learning_rate: float, clipped_sum=None):
  """The audited run: :func:`dpcore.trainer.train` of :func:`canary_loss`
  by SGD from w = 0 on rows ``x``, the weight released (its T updates
  summed). ``clipped_sum``: the trainer's argument (a broken variant).
  """
  params = {"w": {"w": jnp.zeros((x.shape[-1], 1), jnp.float32)}}
  return trainer.train(key, plan, ghost.layered(canary_loss), params, x,
                       optax.sgd(learning_rate),
                       clipped_sum=clipped_sum).params["w"]["w"][:, 0]


def trainer_spec(*, broken: str | None = None, audit_delta: float = 1e-2,
                 position: str = "first") -> AuditSpec:
  """A whole :func:`dpcore.trainer.train` run on its fast paths.

  The model is a layered linear loss (:mod:`dpcore.ghost`) whose per-step
  gradient is −x, so the trained weight after T steps of SGD from 0 is
  lr·Σₜ (clipped sum + noise)/qN: the run releases the sum of its T noisy
  updates (the accountant covers every update; this is post-processing).
  The canary row (first, middle or last: ``position``) is 10·C along the
  first axis (clipped to C on the fast path); in ``data_0`` it is a zero
  row, which adds nothing to any sum (add/remove, as for
  :func:`dpcore.dpsgd_audit.dpsgd_spec`). Statistic: the released weight
  along the canary direction. ``broken="clip_skipped"`` runs the same
  trainer with a clipped sum that does not clip (C ×10⁶ inside the sum,
  the plan's C for the noise), which the audit must catch.
  """
  cfg = SETTINGS
  check_variant(broken, ("clip_skipped",))
  n, q, steps = cfg["examples"], cfg["sampling_rate"], cfg["steps"]
  clip = cfg["clip_norm"]
  # Both fast paths: the layered clipped sum and the geometric-gap sampler
  # (the trainer's choice for B ≪ N, forced here on this small N).
  plan = trainer.make_plan(n, sampling_rate=q, steps=steps, clip_norm=clip,
                           noise_multiplier=cfg["noise_multiplier"],
                           delta=audit_delta, sampler="gaps")
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  loss = ghost.layered(canary_loss)
  clipped_sum = None
  if broken == "clip_skipped":
    def clipped_sum(params, batch, mask, clip_norm):
      return loss.clipped_sum(params, batch, mask, 1e6 * clip_norm)
  direction = jnp.zeros((cfg["dim"],), jnp.float32).at[0].set(1.0)
  position = position if broken is None else "first"
  x_1 = jnp.zeros((n, cfg["dim"]), jnp.float32).at[
      canary_index(n, position)].set(cfg["canary_scale"] * clip * direction)
  x_0 = jnp.zeros_like(x_1)
  expected = q * n

  def mechanism(key, x):
    return release(key, plan, x, learning_rate=cfg["learning_rate"],
                   clipped_sum=clipped_sum)

  def statistic(w):
    # Σₜ of the canary-axis updates in units of C/qN: Binomial + N(0, Tσ²).
    return w @ direction * expected / (cfg["learning_rate"] * clip)

  return AuditSpec(
      **identity("trainer_ghost" if broken is None else "trainer",
                 position=position, broken=broken, trials=(200_000, 20_000)),
      relation="add_remove",
      settings={**cfg, "max_batch": plan.max_batch, "sampler": plan.sampler,
                "path": "ghost", "variant": broken or "library",
                "canary_row": canary_index(n, position)},
      mechanism=mechanism, data_0=x_0, data_1=x_1, statistic=statistic,
      delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta))


def specs() -> list[AuditSpec]:
  """The trainer at every canary position, then its clip-skipped twin."""
  return [*(trainer_spec(position=p) for p in POSITIONS),
          trainer_spec(broken="clip_skipped")]


__all__ = ["SETTINGS", "canary_loss", "release", "specs", "trainer_spec"]
