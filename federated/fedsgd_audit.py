"""Audit specs of federated DP-SGD (:mod:`federated.fedsgd`), by trust model.

The trainer audit's set-up (:mod:`dpcore.trainer_audit`: a layered
linear loss whose gradient is −x, so the model after T steps is the sum
of the T noisy updates), split over participants, a whole run released,
a canary at the first, middle or last unit (add/remove):
``fedsgd_server@…``, ``fedsgd_local@…`` (the unit a row) and
``fedsgd_participant@…`` (the unit a participant). Each trust model has
a broken variant, reported with the unbroken plan's ε, that must be
caught: ``fedsgd_server_noise_halved@first`` and
``fedsgd_local_noise_halved@first`` run the release at half the plan's
noise multiplier; ``fedsgd_participant_compacted_mask@first`` chooses
participants by a compacted batch's slot mask (the bug fixed in fedsgd).
The distributed mode's specs are not here (secure aggregation makes them
slow to run).
"""

from __future__ import annotations

import contextlib

import jax.numpy as jnp
import optax

from dpcore import accounting, dpsgd, ghost, trainer_audit
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  claimed_epsilon,
  spec_name,
)
from federated import fedsgd

TRUST_MODELS = ("server", "local", "participant")
"""The trust models audited here (``"distributed"`` has its own specs)."""

BROKEN = {"server": "noise_halved", "local": "noise_halved",
          "participant": "compacted_mask"}
"""Each trust model's broken variant."""


@contextlib.contextmanager
def _compacted_inclusion():
  """While tracing: participants chosen by a compacted batch's slot mask.

  The bug this variant keeps alive: ``poisson_batch(...).slot_mask`` marks
  the first ``size`` slots, so read per participant it includes
  participant 0 whenever anyone is sampled and the last almost never.
  """
  correct = dpsgd.poisson_inclusion

  def compacted(key, num_units, *, sampling_rate):
    return dpsgd.poisson_batch(key, num_units, sampling_rate=sampling_rate,
                               max_batch=num_units).slot_mask

  dpsgd.poisson_inclusion = compacted
  try:
    yield
  finally:
    dpsgd.poisson_inclusion = correct


def release(key, plan, x, *, learning_rate: float,
            broken: str | None = None):
  """The audited run: :func:`federated.fedsgd.release` of the trainer
  audit's linear loss by SGD from w = 0 on participants' rows ``x``
  (P, rows, d), every row real, the weight released.
  ``broken="compacted_mask"`` chooses participants by a compacted batch's
  slot mask (the fixed bug).
  """
  participants, rows, dim = x.shape
  loss = ghost.layered(lambda layers, example: trainer_audit.canary_loss(
      layers, example[0]))
  params = {"w": {"w": jnp.zeros((dim, 1), jnp.float32)}}
  labels = jnp.zeros((participants, rows), jnp.int32)
  mask = jnp.ones((participants, rows), jnp.float32)
  with (_compacted_inclusion() if broken == "compacted_mask"
        else contextlib.nullcontext()):
    out = fedsgd.release(key, plan, loss, params, x, labels, mask,
                         optax.sgd(learning_rate))
  return out.params["w"]["w"][:, 0]


def fedsgd_spec(*, trust: str = "server", position: str = "first",
                broken: str | None = None,
                audit_delta: float = 1e-2) -> AuditSpec:
  """Federated DP-SGD (:mod:`federated.fedsgd`), a whole run released.

  The trainer row's set-up
  (:func:`dpcore.trainer_audit.trainer_spec`: a layered linear loss
  whose gradient is −x, so the model after T steps is the sum of the T
  noisy updates), split over participants, with a canary of 10·C
  (clipped to C) and a zero in ``data_0`` (add/remove). ``position`` puts
  the canary at the first, middle or last unit:

  * ``"server"``: 2 participants of 4 rows, the canary at participant
    0 row 0, participant 1 row 0 (middle of the 8 rows) or participant 1
    row 3; one noise on the sum.
  * ``"local"``: the guarantee is a participant's against the server,
    which sees that participant's own noisy clipped sums: one participant
    of 4 rows (the released model is exactly a function of what the
    server sees), the canary at row 0, 2 or 3.
  * ``"participant"``: the unit is a participant: 4 participants of 2
    rows, the canary participant (both rows 10·C; its mean gradient
    clipped to C) at index 0, 2 or 3, all-zero rows in ``data_0``.

  ``broken`` (:data:`BROKEN`, the trust model's): ``"noise_halved"`` runs
  the release with a plan of half the noise multiplier;
  ``"compacted_mask"`` runs it with participants chosen by a compacted
  batch's slot mask (the bug fixed in fedsgd): the first participant is
  over-included and must be caught there. Either is reported with the
  unbroken plan's ε.

  What is released: the model (read by the statistic) and the result's
  count of overflowing steps, which depends on the keys and the public
  sizes only (the batch sizes are drawn whatever the rows hold), so it
  cannot tell the neighbours apart; the record holds public settings.
  """
  cfg = dict(trainer_audit.SETTINGS)
  if trust not in TRUST_MODELS:
    raise ValueError(f"trust must be 'server', 'local' or 'participant', "
                     f"got {trust!r}.")
  if broken not in (None, BROKEN[trust]):
    raise ValueError(f"broken must be None or {BROKEN[trust]!r} for "
                     f"trust={trust!r}, got {broken!r}.")
  participants, rows = {"server": (2, 4), "local": (1, 4),
                        "participant": (4, 2)}[trust]
  q, steps, clip = cfg["sampling_rate"], cfg["steps"], cfg["clip_norm"]
  plan = fedsgd.make_plan([rows] * participants, trust=trust,
                          sampling_rate=q, steps=steps, clip_norm=clip,
                          noise_multiplier=cfg["noise_multiplier"],
                          delta=audit_delta)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  run = plan
  if broken == "noise_halved":
    run = fedsgd.make_plan([rows] * participants, trust=trust,
                           sampling_rate=q, steps=steps, clip_norm=clip,
                           noise_multiplier=cfg["noise_multiplier"] / 2,
                           delta=audit_delta)
  direction = jnp.zeros((cfg["dim"],), jnp.float32).at[0].set(1.0)
  canary = cfg["canary_scale"] * clip * direction
  x_0 = jnp.zeros((participants, rows, cfg["dim"]), jnp.float32)
  if trust == "participant":
    unit = canary_index(participants, position)
    x_1 = x_0.at[unit].set(canary)
  else:
    unit = canary_index(participants * rows, position)
    x_1 = x_0.at[unit // rows, unit % rows].set(canary)

  def mechanism(key, x):
    return release(key, run, x, learning_rate=cfg["learning_rate"],
                   broken=broken)

  def statistic(w):
    return w @ direction * plan.divisor / (cfg["learning_rate"] * clip)

  base = f"fedsgd_{trust}" + ("" if broken is None else f"_{broken}")
  return AuditSpec(
      name=spec_name(base, position), relation="add_remove",
      settings={**plan.settings(), "canary_scale": cfg["canary_scale"],
                "canary_unit": unit,
                "unit": "participant" if trust == "participant" else "row",
                **({"noise_multiplier_used": run.noise_multiplier}
                   if broken == "noise_halved" else {})},
      mechanism=mechanism, data_0=x_0, data_1=x_1, statistic=statistic,
      delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta),
      default_trials=200_000 if broken is None else 20_000,
      broken=broken is not None, position=position)


def specs() -> list[AuditSpec]:
  """Every trust model at every canary position, then the participant
  mode's broken variant (caught at the first participant), then the
  server's and the local mode's."""
  return [*(fedsgd_spec(trust=t, position=p)
            for t in TRUST_MODELS for p in POSITIONS),
          fedsgd_spec(trust="participant", broken="compacted_mask"),
          *(fedsgd_spec(trust=t, broken=BROKEN[t])
            for t in ("server", "local"))]


__all__ = ["BROKEN", "TRUST_MODELS", "fedsgd_spec", "release", "specs"]
