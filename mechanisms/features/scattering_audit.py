"""Audit specs of the scattering features + DP-SGD head.

The linear ScatterNet (:mod:`mechanisms.features.scatternet`) on a tiny
problem: the mechanism takes the raw images, computes their order-2
scattering transform (:func:`mechanisms.features.scattering.scattering`,
traced inside the mechanism, so jitted and vmapped with it), normalises each
example by group normalisation
(:func:`mechanisms.features.normalization.group_norm`: per example, no
privacy cost) and trains a head by :func:`dpcore.trainer.train` on its
fast paths (the layered loss, the geometric-gap sampler), as
:func:`mechanisms.features.scatternet.release` does.

The head is the trainer row's layered linear loss ℓ(w; φ) = −w·φ
(:func:`dpcore.trainer_audit.canary_loss`), whose gradient
is −φ(x) whatever w, so the weight trained by SGD from 0 is
lr·Σₜ (clipped sum + noise)/qN: the run releases the sum of its T noisy
updates (post-processing of what the accountant covers).

Neighbours (add/remove, the relation the DP-SGD plan records): 8 images
of 8 × 8, J = 1, L = 4 (5 channels of 4 × 4, 80 features). Every image is
blank (all zeros) but the canary's; a blank image's transform is exactly
zero (every filter is linear in the image) and group normalisation maps
an all-zero group to exactly zero ((0 − 0)·rsqrt(0 + eps)), so a blank
row's gradient is exactly zero and adds nothing to any sum. ``data_1``
holds the canary image (a fixed pseudo-random image in [0, 1]) at the
first, middle or last row (``position``); ``data_0`` a blank image
there: the data set without the canary, N and q public as in the
trainer. The canary's normalised features have norm ≈ √80 ≈ 8.9 = 8.9·C
(group normalisation with G = 1 makes their mean 0 and variance 1), so
every step that samples it is clipped to C along its direction u.

Statistic: the released weight along u, in units of lr·C/(qN):
Binomial(T, q) + N(0, Tσ²) with the canary, N(0, Tσ²) without. Reported
ε: the plan's own ledger at the audit's δ.

``broken="clip_skipped"`` runs the same pipeline with a clipped sum that
does not clip (C ×10⁶ inside the sum, the plan's C for the noise), the
canary at the first row, its ε reported from the correct plan: the audit
must catch it.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from dpcore import accounting, ghost, trainer, trainer_audit
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  check_variant,
  claimed_epsilon,
  identity,
)
from mechanisms.features import normalization, scattering

AUDIT_DELTA = 1e-2
CANARY_SEED = 3  # the fixed canary image

_FEATURES = {"examples": 8, "side": 8, "J": 1, "L": 4, "num_groups": 1,
             "sampling_rate": 0.5, "steps": 3, "noise_multiplier": 1.0,
             "clip_norm": 1.0, "learning_rate": 1.0}


def _features(images):
  """Scattering transform then group normalisation, flattened (N, K·h·w)."""
  cfg = _FEATURES
  feats = scattering.scattering(images, J=cfg["J"], L=cfg["L"])
  feats = normalization.group_norm(feats, num_groups=cfg["num_groups"])
  return feats.reshape(feats.shape[0], -1)


def canary_image() -> np.ndarray:
  """The canary: a fixed pseudo-random side × side image in [0, 1]."""
  side = _FEATURES["side"]
  return np.random.default_rng(CANARY_SEED).uniform(
      size=(side, side)).astype(np.float32)


def features_dpsgd_spec(*, position: str = "first",
                        broken: str | None = None,
                        audit_delta: float = AUDIT_DELTA) -> AuditSpec:
  """Scattering + group norm + the DP-SGD trainer, a canary image.

  See the module docstring. ``position``: the canary's row (first,
  middle or last); ``broken="clip_skipped"`` keeps it first.
  """
  cfg = _FEATURES
  check_variant(broken, ("clip_skipped",))
  n, q, steps = cfg["examples"], cfg["sampling_rate"], cfg["steps"]
  clip, lr = cfg["clip_norm"], cfg["learning_rate"]
  plan = trainer.make_plan(n, sampling_rate=q, steps=steps, clip_norm=clip,
                           noise_multiplier=cfg["noise_multiplier"],
                           delta=audit_delta, sampler="gaps")
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  loss = ghost.layered(trainer_audit.canary_loss)
  clipped_sum = None
  if broken == "clip_skipped":
    def clipped_sum(params, batch, mask, clip_norm):
      return loss.clipped_sum(params, batch, mask, 1e6 * clip_norm)
  position = position if broken is None else "first"
  row = canary_index(n, position)
  side = cfg["side"]
  canary = canary_image()
  images_0 = np.zeros((n, side, side), np.float32)
  images_1 = images_0.copy()
  images_1[row] = canary
  phi = np.asarray(_features(jnp.asarray(canary[None])))[0]
  phi_norm = float(np.linalg.norm(phi))
  if not phi_norm > 2.0 * clip:
    raise AssertionError(f"the canary's features have norm {phi_norm}, "
                         f"not well above C = {clip}: clipping would not "
                         f"bind.")
  blank = np.asarray(_features(jnp.asarray(images_0[:1])))
  if np.any(blank != 0.0):
    raise AssertionError("a blank image's normalised features are not "
                         "exactly zero: data_0 would not remove the canary.")
  direction = jnp.asarray(phi / phi_norm, jnp.float32)
  expected = q * n

  def mechanism(key, images):
    return trainer_audit.release(key, plan, _features(images),
                                 learning_rate=lr, clipped_sum=clipped_sum)

  def statistic(w):
    # Σₜ of the canary-direction updates in units of C/qN.
    return w @ direction * expected / (lr * clip)

  return AuditSpec(
      **identity("features_dpsgd", position=position, broken=broken,
                 trials=(200_000, 20_000)),
      relation="add_remove",
      settings={**cfg, "max_batch": plan.max_batch, "sampler": plan.sampler,
                "path": "ghost", "norm": "group",
                "num_features": int(phi.shape[0]),
                "canary_feature_norm": phi_norm,
                "variant": broken or "library", "canary_row": row},
      mechanism=mechanism, data_0=images_0, data_1=images_1,
      statistic=statistic, delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta))


def specs() -> list[AuditSpec]:
  """The features pipeline at every canary position, and its broken twin."""
  return [*(features_dpsgd_spec(position=p) for p in POSITIONS),
          features_dpsgd_spec(broken="clip_skipped")]


__all__ = ["canary_image", "features_dpsgd_spec", "specs"]
