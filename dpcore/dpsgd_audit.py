"""Audit specs of DP-SGD's noisy aggregation (:mod:`dpcore.dpsgd`).

A few DP-SGD steps on fixed per-example gradients, every noisy update
released, a canary row at the first, middle or last position
(add/remove): ``dpsgd@first``, ``dpsgd@middle``, ``dpsgd@last``. The
broken variants, reported with the unbroken plan's ε, must be caught:
``dpsgd_mask_dropped`` (the padding slots, which repeat row 0, summed)
and ``dpsgd_clip_skipped`` (per-example gradients not clipped).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dpcore import accounting, clipping, dpsgd, noise
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  check_variant,
  claimed_epsilon,
  identity,
)

_DPSGD = {"examples": 8, "sampling_rate": 0.5, "steps": 3,
          "noise_multiplier": 1.0, "clip_norm": 1.0, "dim": 2}


def dpsgd_release(key, grads, *, variant: str = "library",
                  settings=None):
  """T DP-SGD updates of fixed per-example gradients, all released.

  ``variant``: ``"library"`` (:func:`dpcore.dpsgd.dp_aggregate` with the
  batch mask), ``"mask_dropped"`` (a hand-written aggregate that sums every
  padded slot) or ``"clip_skipped"`` (unclipped masked sum, noise added by
  ``dp_aggregate(presummed=True)``). ``settings``: the audit's (the
  default) or a variant of them (the law test reads the batches back at
  σ = 0).
  """
  n, _ = grads.shape
  cfg = _DPSGD if settings is None else settings
  expected = cfg["sampling_rate"] * cfg["examples"]
  max_batch = dpsgd.max_batch_size(n, sampling_rate=cfg["sampling_rate"],
                                   steps=cfg["steps"])
  sample_key, noise_key = jax.random.split(key)
  tx = dpsgd.dp_aggregate(
      noise_key, clip_norm=cfg["clip_norm"],
      noise_multiplier=cfg["noise_multiplier"], expected_batch_size=expected,
      presummed=variant == "clip_skipped")
  state = tx.init(None)
  released = []
  for t in range(cfg["steps"]):
    batch = dpsgd.poisson_batch(jax.random.fold_in(sample_key, t), n,
                                sampling_rate=cfg["sampling_rate"],
                                max_batch=max_batch)
    rows = grads[batch.indices]
    if variant == "library":
      update, state = tx.update(rows, state, None, mask=batch.slot_mask)
    elif variant == "clip_skipped":
      update, state = tx.update(batch.slot_mask @ rows, state, None)
    else:  # mask_dropped: every slot, padding (row 0) included, is summed
      summed, _ = clipping.clipped_sum(rows, cfg["clip_norm"])
      step_key = jax.random.fold_in(noise_key, t)
      update = (summed + noise.gaussian_noise(
          step_key, summed.shape,
          stddev=cfg["noise_multiplier"] * cfg["clip_norm"])) / expected
    released.append(update)
  return jnp.stack(released)


def dpsgd_spec(*, broken: str | None = None, audit_delta: float = 1e-2,
               position: str = "first") -> AuditSpec:
  """A few DP-SGD steps on fixed gradients, a canary at row 0 (add/remove).

  Every step's noisy update is released, as the accountant assumes (the
  updates of DP-G(M)LVQ training are :func:`dpcore.dpsgd.dp_aggregate`'s
  output; the model only post-processes them). The canary row holds a
  gradient of norm 10·C, which the library clips to C (so the audit also
  tests that clip; ``broken="clip_skipped"`` differs from it only in
  the mechanism), the other rows zero gradients. In ``data_0`` the canary
  is removed: its slot holds a zero gradient, which adds nothing to any
  sum, so the releases are those of the data set without it (qN, the
  divisor, is a public constant).
  Statistic: Σₜ log(1 − q + q·exp((2zₜ − 1)/(2σ²))), the log-likelihood
  ratio of the updates projected on the canary direction (zₜ in units of
  C).

  ``broken``: ``"mask_dropped"`` (padding slots, which repeat row 0, are
  summed) or ``"clip_skipped"`` (per-example gradients are not clipped).
  ``position``: the canary's row (first, middle or last); the broken
  variants keep it first, where padding repeats it.
  """
  cfg = _DPSGD
  check_variant(broken, ("mask_dropped", "clip_skipped"))
  variant = broken or "library"
  n, q, steps = cfg["examples"], cfg["sampling_rate"], cfg["steps"]
  sigma, clip = cfg["noise_multiplier"], cfg["clip_norm"]
  max_batch = dpsgd.max_batch_size(n, sampling_rate=q, steps=steps)
  ledger = accounting.PrivacyLedger()
  ledger.record_subsampled_gaussian(noise_multiplier=sigma, sampling_rate=q,
                                    steps=steps, delta=audit_delta,
                                    label="dpsgd", relation="add_remove")
  truncation = dpsgd.truncation_probability(n, sampling_rate=q, steps=steps,
                                            max_batch=max_batch)
  if truncation > 0:
    ledger.record_truncation(truncation, label="poisson_batch_padding")
  canary_norm = 10.0 * clip  # clipped to C unless the clip is skipped
  direction = jnp.zeros((cfg["dim"],), jnp.float32).at[0].set(1.0)
  if broken is not None:
    position = "first"
  grads_1 = jnp.zeros((n, cfg["dim"]), jnp.float32).at[
      canary_index(n, position)].set(canary_norm * direction)
  grads_0 = jnp.zeros_like(grads_1)
  expected = q * n

  def mechanism(key, grads):
    return dpsgd_release(key, grads, variant=variant)

  def statistic(updates):
    z = updates @ direction * expected / clip  # N(0, σ²) without canary
    return jnp.sum(jnp.logaddexp(
        jnp.log1p(-q), jnp.log(q) + (2.0 * z - 1.0) / (2.0 * sigma**2)))

  return AuditSpec(
      **identity("dpsgd", position=position, broken=broken,
                 trials=(200_000, 20_000)),
      relation="add_remove",
      settings={**cfg, "max_batch": max_batch, "canary_norm": canary_norm,
                "variant": variant, "canary_row": canary_index(n, position)},
      mechanism=mechanism, data_0=grads_0, data_1=grads_1,
      statistic=statistic, delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta))


def specs() -> list[AuditSpec]:
  """DP-SGD at every canary position, then its two broken variants."""
  return [*(dpsgd_spec(position=p) for p in POSITIONS),
          dpsgd_spec(broken="mask_dropped"),
          dpsgd_spec(broken="clip_skipped")]


__all__ = ["dpsgd_release", "dpsgd_spec", "specs"]
