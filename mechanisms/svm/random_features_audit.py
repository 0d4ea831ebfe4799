"""Audit specs of the random-feature SVM releases.

Two specs of :mod:`mechanisms.svm.random_features`, each on a tiny problem
whose neighbours differ in one canary row, under the relation the
learner's accounting uses:

* ``rff_dpsgd`` (add/remove): :func:`random_features.release_dpsgd` itself
  — features computed inside, the layered Huber-hinge loss, ghost
  clipping, Poisson batches, noise — on 8 rows of which only row 0, the
  canary, has a label. A row labelled 0 has margin 0 and gradient
  ℓ′(0)·0·[φ, 1] = 0 exactly, so it adds nothing to any sum: ``data_0``
  (canary labelled 0) is the data set without the canary, ``data_1``
  (labelled +1) the one with it, N and q public as in the trainer. At
  w = 0 the canary's gradient is −[φ(x_c), 1], of norm > 1 = C, so every
  step that samples it moves the weights by exactly C along its direction
  (the learning rate keeps its margin in the hinge's linear part).
  Statistic: the released (w, bias) along that direction in units of
  C·lr/(qN), ~ Binomial(T, q) + N(0, Tσ²) with the canary and N(0, Tσ²)
  without. Reported ε: the ledger's, from the plan's ``record``
  (:meth:`random_features.RFFDPSGDPlan.record`), at the audit's δ.
* ``rff_output_perturbation`` (replace-one, n = 3): one canary row chosen
  from the PUBLIC map so that every cos(ω_jᵀx + b_j) = 1, i.e.
  ‖φ(x_c)‖ = √2, the bound: its augmented row has norm exactly 1. The
  other two rows are copies of it labelled +1 and −1 (the same in both
  neighbours: at this small C every margin stays below 1, so their pulls
  cancel), and the exact minimisers for the canary labelled +1 and −1
  are 2C apart — the sensitivity is attained. The canary sits first, in
  the middle and last. The minimisers are computed host-side by
  :func:`random_features.exact_weights`; the audit runs the release's
  noise step (:func:`mechanisms.erm.output_perturbation.perturb` at the
  plan's Δ₂ and ε, as :func:`random_features.release_output_perturbation`
  draws it). Statistic: ‖o − w₀‖ − ‖o − w₁‖.

Each has a broken variant, reported with the correct ε, that the audit
must catch (which shows the statistic has the power to catch such a
mistake): ``rff_dpsgd_sigma_halved``, the DP-SGD spec with σ halved
(``broken=True``), and ``rff_output_perturbation_unscaled_features``, the
noise sized for features of norm ≤ 1 where ‖φ‖ reaches √2 (the
release's φ/√2 forgotten: Δ₂ read as 2C/√2).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import accounting
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  claimed_epsilon,
  spec_name,
)
from mechanisms.erm import output_perturbation
from mechanisms.svm import random_features

AUDIT_DELTA = 1e-2
FEATURE_SEED = 7  # the public feature key of both audits

_DPSGD = {"examples": 8, "sampling_rate": 0.5, "epochs": 1.5,
          "target_epsilon": 2.0, "clip_norm": 1.0, "learning_rate": 1e-3,
          "input_dim": 2, "num_features": 4}
_OUTPUT = {"epsilon": 1.0, "c": 0.1, "input_dim": 2, "num_features": 2}


def dpsgd_spec(*, audit_delta: float = AUDIT_DELTA, broken: bool = False,
               position: str = "first") -> AuditSpec:
  """The DP-SGD release on random features, a canary row (add/remove).

  The canary sits at the first, middle or last row (``position``).

  ``broken=True`` runs the same release with σ halved while reporting the
  correct plan's ε: a deliberately wrong variant the audit must catch.
  """
  cfg = _DPSGD
  fmap = random_features.make_feature_map(
      jax.random.key(FEATURE_SEED), dim=cfg["input_dim"],
      num_features=cfg["num_features"])
  n, q = cfg["examples"], cfg["sampling_rate"]
  plan = random_features.make_dpsgd_plan(
      n, epsilon=cfg["target_epsilon"], delta=audit_delta, sampling_rate=q,
      epochs=cfg["epochs"], learning_rate=cfg["learning_rate"],
      clip_norm=cfg["clip_norm"])
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  if broken:
    plan = dataclasses.replace(plan, dpsgd=dataclasses.replace(
        plan.dpsgd, noise_multiplier=plan.noise_multiplier / 2))
  canary = jnp.asarray([0.3, -0.2], jnp.float32)
  at = canary_index(n, position)
  x = jnp.zeros((n, cfg["input_dim"]), jnp.float32).at[at].set(canary)
  y_1 = jnp.zeros((n,), jnp.float32).at[at].set(1.0)
  y_0 = jnp.zeros_like(y_1)
  phi = random_features.features(fmap, canary)
  direction = jnp.concatenate([phi, jnp.ones((1,), phi.dtype)])
  direction = direction / jnp.linalg.norm(direction)
  scale = q * n / (cfg["learning_rate"] * cfg["clip_norm"])

  def mechanism(key, y):
    params = random_features.release_dpsgd(key, plan, fmap, x, y)
    return jnp.concatenate([params["out"]["w"][:, 0], params["out"]["b"]])

  def statistic(flat):
    return flat @ direction * scale

  return AuditSpec(
      name=("rff_dpsgd_sigma_halved" if broken
            else spec_name("rff_dpsgd", position)),
      position=None if broken else position,
      relation="add_remove",
      settings={**cfg, "steps": plan.steps,
                "noise_multiplier": plan.noise_multiplier,
                "max_batch": plan.dpsgd.max_batch, "loss": plan.loss,
                "canary_row": at,
                "canary_feature_norm": float(jnp.linalg.norm(phi))},
      mechanism=mechanism, data_0=y_0, data_1=y_1, statistic=statistic,
      delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta),
      default_trials=20_000 if broken else 200_000, broken=broken)


def attaining_row(feature_map: random_features.FeatureMap) -> np.ndarray:
  """x with ω_jᵀx + b_j = 0 for every j (needs D = d): ‖φ(x)‖ = √2."""
  omega = np.asarray(feature_map.omega, np.float64)
  offset = np.asarray(feature_map.offset, np.float64)
  if omega.shape[0] != omega.shape[1]:
    raise ValueError(f"an attaining row needs D = d, got omega of shape "
                     f"{omega.shape}.")
  return np.linalg.solve(omega.T, -offset)


def output_perturbation_spec(*, epsilon: float | None = None,
                             broken: bool = False,
                             position: str = "first") -> AuditSpec:
  """Output perturbation on random features, sensitivity attained, the
  canary at ``position`` of three rows.

  ``broken``: the noise is drawn for Δ₂/√2, the sensitivity of features
  of norm ≤ 1 (the φ/√2 scaling forgotten), and the plan's ε reported
  (canary first).
  """
  cfg = dict(_OUTPUT)
  if epsilon is not None:
    cfg["epsilon"] = epsilon
  fmap = random_features.make_feature_map(
      jax.random.key(FEATURE_SEED), dim=cfg["input_dim"],
      num_features=cfg["num_features"])
  plan = random_features.make_output_perturbation_plan(
      c=cfg["c"], epsilon=cfg["epsilon"])
  position = "first" if broken else position
  canary = canary_index(3, position)
  x = np.repeat(attaining_row(fmap)[None], 3, axis=0)
  others = np.array([1.0, -1.0])  # the other rows' labels, in order
  w_0 = random_features.exact_weights(plan, fmap, x,
                                      np.insert(others, canary, 1.0))
  w_1 = random_features.exact_weights(plan, fmap, x,
                                      np.insert(others, canary, -1.0))
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  w_0 = jnp.asarray(w_0, jnp.float32)
  w_1 = jnp.asarray(w_1, jnp.float32)
  exact = output_perturbation.sensitivity(plan.c)  # 2C, attained here
  noise_sensitivity = (exact / math.sqrt(2.0) if broken
                       else plan.sensitivity)

  def mechanism(key, w):
    return output_perturbation.perturb(
        key, w, sensitivity_l2=noise_sensitivity, epsilon=plan.epsilon)

  def statistic(out):
    return jnp.linalg.norm(out - w_0) - jnp.linalg.norm(out - w_1)

  phi = np.asarray(random_features.features(fmap, x[:1].astype(np.float32)))
  return AuditSpec(
      name=("rff_output_perturbation_unscaled_features" if broken
            else spec_name("rff_output_perturbation", position)),
      position=None if broken else position, relation="replace_one",
      settings={**cfg, "rows": 3, "canary_row": canary,
                "sensitivity": plan.sensitivity,
                "minimiser_sensitivity": exact,
                "canary_feature_norm": float(np.linalg.norm(phi)),
                "feature_bound": math.sqrt(2.0),
                "minimiser_distance": float(jnp.linalg.norm(w_0 - w_1)),
                **({"noise_sensitivity": noise_sensitivity} if broken
                   else {})},
      mechanism=mechanism, data_0=w_0, data_1=w_1, statistic=statistic,
      delta=0.0, reported_epsilon=claimed_epsilon(ledger, "replace_one"),
      default_trials=500_000, broken=broken)


def specs() -> list[AuditSpec]:
  """The random-feature audits: two unbroken (each must stay below its
  reported ε), then the σ-halved DP-SGD variant and the unscaled-features
  output perturbation (each must be caught)."""
  return [*(dpsgd_spec(position=p) for p in POSITIONS),
          *(output_perturbation_spec(position=p) for p in POSITIONS),
          dpsgd_spec(broken=True),
          output_perturbation_spec(broken=True)]


__all__ = ["attaining_row", "dpsgd_spec", "output_perturbation_spec",
           "specs"]
