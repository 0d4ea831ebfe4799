"""Audit specs of the private data normalisation (its Gaussian release).

The mechanism is :func:`mechanisms.features.normalization.release` as the
linear ScatterNet calls it (:func:`mechanisms.features.scatternet.normalise`,
``norm="data"``), on a tiny set of feature maps: n = 64 examples of
K = 4 channels of 2 × 2. What it releases, (mean, var) per channel, is
all the audit's statistic reads.

Neighbours (add/remove one example, the relation the plan records; n is
public, as in DP-SGD). Every example but one is a *background* example
whose feature maps are +w and −w on alternate positions of every channel:
its per-channel means are 0 and its mean squares w², so it moves only
the second moment, well inside the clip bound (‖sᵢ‖ = 2w² = 0.9 C_s).
The background keeps the released variance far from 0, so that
``max(second − mean², 0)`` never clamps and second = var + mean² is read
back exactly. ``data_1`` holds the canary at the first, middle or last
row (``position``): feature maps constant at 3 in every channel, so
‖mᵢ‖ = 6 C_m and ‖sᵢ‖ = 18 C_s: both clips bind and the canary's
normalised statistics are (u, u), u = 1_K/2, of norm √2, the
sensitivity. ``data_0`` holds a blank example there (all zeros: its
statistics are exactly 0 and it adds nothing to either sum), the data set
without the canary.

Statistic: the released sums read back from (mean, var) — Σa =
n·mean/C_m and Σb = n·(var + mean²)/C_s — projected on the canary's
direction (u, u)/√2, in units of the noise's σ: N(0, 1) without the
canary, N(√2/σ, 1) with it. Reported ε: the plan's own ledger at the
audit's δ.

Broken variants, the canary at the first row, ε reported from the
correct plan:

* ``clip_skipped``: the per-example statistics are divided by the bounds
  but never clipped (the canary moves the sums by 6u and 18u);
* ``sensitivity_one``: σ calibrated for sensitivity 1, as if the means and
  the mean squares were two releases that need not be composed
  (σ/√2 of the plan's).
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

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
from mechanisms.features import normalization

AUDIT_DELTA = 1e-2
BROKEN = ("clip_skipped", "sensitivity_one")

_SETTINGS = {"examples": 64, "channels": 4, "side": 2,
             "noise_multiplier": 1.0, "clip_mean": 1.0, "clip_square": 1.0,
             "background_square": 0.45, "canary_value": 3.0,
             "plan_delta": 1e-5}


def _unclipped_release(key, plan: normalization.DataNormPlan, features):
  """``release`` with the per-example clip left out (the broken variant)."""
  x = jnp.asarray(features, jnp.float32)
  a = x.mean(axis=(-2, -1)) / plan.clip_mean
  b = jnp.square(x).mean(axis=(-2, -1)) / plan.clip_square
  z = dp_noise.gaussian_noise(key, (2, plan.channels), stddev=plan.sigma)
  mean = plan.clip_mean * (a.sum(axis=0) + z[0]) / plan.num_examples
  second = plan.clip_square * (b.sum(axis=0) + z[1]) / plan.num_examples
  return normalization.NormStats(
      mean, jnp.maximum(second - jnp.square(mean), 0.0))


def data_sets(position: str) -> tuple[np.ndarray, np.ndarray, int]:
  """(data_0, data_1, canary row): background, blank or canary at a row."""
  cfg = _SETTINGS
  n, k, side = cfg["examples"], cfg["channels"], cfg["side"]
  w = math.sqrt(cfg["background_square"])
  signs = np.where(np.indices((side, side)).sum(axis=0) % 2 == 0, 1.0, -1.0)
  data_0 = np.broadcast_to(w * signs, (n, k, side, side)).astype(np.float32)
  data_0 = data_0.copy()
  row = canary_index(n, position)
  data_0[row] = 0.0
  data_1 = data_0.copy()
  data_1[row] = cfg["canary_value"]
  return data_0, data_1, row


def data_norm_spec(*, position: str = "first", broken: str | None = None,
                   audit_delta: float = AUDIT_DELTA) -> AuditSpec:
  """The data normalisation's release, a canary example at ``position``.

  See the module docstring. ``broken``: None, or one of :data:`BROKEN`
  (then the canary is at the first row).
  """
  cfg = _SETTINGS
  check_variant(broken, BROKEN)
  position = position if broken is None else "first"
  n, k = cfg["examples"], cfg["channels"]
  plan = normalization.make_plan(
      epsilon=None, noise_multiplier=cfg["noise_multiplier"],
      delta=cfg["plan_delta"], num_examples=n, channels=k,
      clip_mean=cfg["clip_mean"], clip_square=cfg["clip_square"])
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  data_0, data_1, row = data_sets(position)
  for name, rows in (("background", data_0[row - 1 if row else 1]),
                     ("canary", data_1[row])):
    m = np.linalg.norm(rows.mean(axis=(-2, -1)))
    s = np.linalg.norm(np.square(rows).mean(axis=(-2, -1)))
    binds = m > cfg["clip_mean"] and s > cfg["clip_square"]
    inside = m <= cfg["clip_mean"] and s <= cfg["clip_square"]
    if (name == "canary") != binds or (name == "background") != inside:
      raise AssertionError(f"the {name} example's statistics (‖m‖={m}, "
                           f"‖s‖={s}) do not sit where the spec needs.")
  used = plan
  if broken == "sensitivity_one":
    used = dataclasses.replace(plan, sigma=plan.sigma / plan.sensitivity)
  release = (_unclipped_release if broken == "clip_skipped"
             else normalization.release)

  def mechanism(key, features):
    stats = release(key, used, features)
    return jnp.stack([stats.mean, stats.var])

  direction = np.full((2 * k,), 1.0 / math.sqrt(2 * k), np.float32)

  def statistic(out):
    mean, var = out[0], out[1]
    sum_a = n * mean / plan.clip_mean
    sum_b = n * (var + jnp.square(mean)) / plan.clip_square
    return jnp.concatenate([sum_a, sum_b]) @ direction / plan.sigma

  return AuditSpec(
      **identity("features_data_norm", position=position, broken=broken,
                 trials=(1_000_000, 100_000)),
      relation=plan.relation,
      settings={**cfg, "sigma": plan.sigma, "sigma_used": used.sigma,
                "sensitivity": plan.sensitivity,
                "variant": broken or "library", "canary_row": row},
      mechanism=mechanism, data_0=data_0, data_1=data_1,
      statistic=statistic, delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, plan.relation, audit_delta))


def specs() -> list[AuditSpec]:
  """The release at every canary position, and its broken variants."""
  return [*(data_norm_spec(position=p) for p in POSITIONS),
          *(data_norm_spec(broken=b) for b in BROKEN)]


__all__ = ["AUDIT_DELTA", "BROKEN", "data_norm_spec", "data_sets", "specs"]
