"""Audit specs of DP-G(M)LVQ's training steps (:mod:`mechanisms.lvq.train`).

The initialisation is audited on its own (:mod:`mechanisms.lvq.init_audit`);
these specs audit what :func:`mechanisms.lvq.train.release` runs after it:
the plan's DP-SGD steps with G(M)LVQ's own clipped sums, from public
prototypes. One spec per clipped sum: ``dplvq_glvq`` and ``dplvq_gmlvq``
(the closed-form norms, ``ghost_clipping=True``) and ``dplvq_glvq_vmap``
(``vmap(grad)``), each with a canary row first, in the middle or last
(add/remove). Each has a ``_clip_skipped`` twin, reported with the same
ε, whose clipped sum does not clip (C ×10⁶ inside the sum, the plan's C
for the noise); the audit must catch it.

The set-up. Two classes, one prototype each, at ±0.1·e₂ (Ω = I for
GMLVQ). The canary is 10·e₁ of class 0: its gradient pulls its own
prototype towards +e₁ and pushes the other one towards −e₁, with norm
0.14 (0.144 with Ω's part), far above C = 0.05, so every step clips it.
Every other row, and the canary's slot in ``data_0``, is 10⁶·(−e₂) of
class 1: at that distance a row's gradient has norm 1.4·10⁻⁶ (3·10⁻⁵ C),
so it stands in for an absent row. The statistic is (w₀ − w₁)·e₁ in units
of √2·C·η/(qN): a sampled canary adds about one to it at each step (0.98
with Ω's share of the clipped norm), the noise N(0, σ²) per step.
"""

from __future__ import annotations

import jax
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
from mechanisms.lvq import clip as lvq_clip
from mechanisms.lvq import train as lvq_train

SETTINGS = {"examples": 8, "sampling_rate": 0.5, "steps": 3,
            "noise_multiplier": 1.0, "clip_norm": 0.05, "dim": 2,
            "learning_rate": 1.0, "canary": 10.0, "far": 1e6}
"""The audit's settings (see the module docstring)."""

MODES = {"dplvq_glvq": ("glvq", True), "dplvq_gmlvq": ("gmlvq", True),
         "dplvq_glvq_vmap": ("glvq", False)}
"""Each spec's (model, ghost_clipping)."""


def public_params(model: str) -> dict:
  """The public starting point: prototypes ±0.1·e₂, Ω = I for GMLVQ."""
  params = {"prototypes": jnp.asarray([[0.0, 0.1], [0.0, -0.1]],
                                      jnp.float32)}
  if model == "gmlvq":
    params["omega"] = jnp.eye(SETTINGS["dim"], dtype=jnp.float32)
  return params


def neighbours(position: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(x_0, x_1, y)``: far rows of class 1, and in ``x_1`` the canary
  10·e₁ of class 0 at ``position``."""
  cfg = SETTINGS
  n, row = cfg["examples"], canary_index(cfg["examples"], position)
  x_0 = np.zeros((n, cfg["dim"]), np.float32)
  x_0[:, 1] = -cfg["far"]
  x_1 = x_0.copy()
  x_1[row] = [cfg["canary"], 0.0]
  y = np.ones(n, np.int32)
  y[row] = 0
  return x_0, x_1, y


def _skipping_clip(ghost_clipping: bool, labels):
  """A clipped sum that does not clip: C ×10⁶ inside the sum."""
  def clipped_sum(params, batch, mask, clip_norm):
    xb, yb = batch
    if ghost_clipping:
      total, _ = lvq_clip.clipped_gradient_sum(
          params, xb, yb, labels, clip_norm=1e6 * clip_norm, mask=mask)
    else:
      total, _ = lvq_clip.clipped_gradient_sum_vmap(
          params, xb, yb, labels, clip_norm=1e6 * clip_norm, mask=mask)
    return total
  return clipped_sum


def train_spec(base: str, *, position: str = "first",
               broken: str | None = None,
               audit_delta: float = 1e-2) -> AuditSpec:
  """The DP-SGD steps of :func:`mechanisms.lvq.train.release` with the
  clipped sum of ``base`` (:data:`MODES`), a canary at ``position``.

  See the module docstring. ``broken``: None or ``"clip_skipped"`` (then
  the canary is at the first row).
  """
  cfg = SETTINGS
  check_variant(broken, ("clip_skipped",))
  model, ghost_clipping = MODES[base]
  position = position if broken is None else "first"
  n, q, clip = cfg["examples"], cfg["sampling_rate"], cfg["clip_norm"]
  plan = trainer.make_plan(n, sampling_rate=q, steps=cfg["steps"],
                           clip_norm=clip,
                           noise_multiplier=cfg["noise_multiplier"],
                           delta=audit_delta, sampler=lvq_train.SAMPLER)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger, label="dpsgd")
  config = lvq_train.TrainConfig(
      model=model, num_classes=2, sampling_rate=q,
      learning_rate=cfg["learning_rate"], max_batch=plan.max_batch,
      ghost_clipping=ghost_clipping).validate()
  labels = jnp.asarray([0, 1])
  params = public_params(model)
  replacement = (None if broken is None
                 else _skipping_clip(ghost_clipping, labels))
  x_0, x_1, y = neighbours(position)
  unit = np.sqrt(2.0) * clip * cfg["learning_rate"] / (q * n)

  def mechanism(key, x):
    keys = trainer.TrainKeys(*jax.random.split(key))
    result = lvq_train._run(keys, plan, params, x, jnp.asarray(y), labels,
                            config, clipped_sum=replacement)
    return result.params["prototypes"]

  def statistic(prototypes):
    return (prototypes[0, 0] - prototypes[1, 0]) / unit

  return AuditSpec(
      **identity(base, position=position, broken=broken,
                 trials=(200_000, 20_000)),
      relation="add_remove",
      settings={**cfg, "model": model, "ghost_clipping": ghost_clipping,
                "max_batch": plan.max_batch, "sampler": plan.sampler,
                "variant": broken or "library",
                "canary_row": canary_index(n, position)},
      mechanism=mechanism, data_0=x_0, data_1=x_1, statistic=statistic,
      delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta))


def specs() -> list[AuditSpec]:
  """Each clipped sum at every canary position, then the clip-skipped
  twins."""
  return [*(train_spec(base, position=p) for base in MODES
            for p in POSITIONS),
          *(train_spec(base, broken="clip_skipped") for base in MODES)]


__all__ = ["MODES", "SETTINGS", "neighbours", "public_params", "specs",
           "train_spec"]
