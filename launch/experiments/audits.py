"""Worst-case audits of every mechanism in the library.

Each :class:`AuditSpec` names a mechanism, a pair of neighbouring data sets
under the relation the library's accounting uses, a scalar statistic that
separates them, and the ε the library itself reports for the mechanism at
the audited δ (from :class:`dpcore.accounting.PrivacyLedger` or the
mechanism's calibration). :func:`dpcore.auditing.audit` turns the spec
into a 95 % lower bound on ε; ``python -m launch.audit`` runs them all.

A lower bound above ``reported_epsilon`` on an unbroken spec is a privacy
bug. The ``broken=True`` specs are deliberately wrong versions (σ halved,
the DP-SGD mask dropped, clipping skipped, the Laplace scale computed from
the wrong sensitivity) whose ε is still reported from the correct
calibration: the suite must find a bound above it, which shows that the
audits have the power to catch such mistakes.
"""

from __future__ import annotations

import contextlib
from fractions import Fraction

import jax
import jax.numpy as jnp
import optax

from dpcore import (
  accounting,
  auditing,
  calibration,
  clipping,
  discrete_calibration,
  dpsgd,
  exponential,
  ghost,
  noise,
  trainer,
)
from dpcore import lattice as dp_lattice
from federated import feddpdr, fedsgd
from launch.experiments import (
  dpwss_audits,
  feature_audits,
  rff_audits,
  tuning_audits,
)
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  claimed_epsilon,
  spec_name,
)
from mechanisms.erm import objective_perturbation as op
from mechanisms.erm import output_perturbation as outp
from mechanisms.pca import dp_pca


def _identity(output):
  return output


# -- Gaussian and Laplace -----------------------------------------------------


def gaussian_spec(*, epsilon: float = 1.0, delta: float = 1e-5,
                  audit_delta: float = 1e-2, broken: bool = False
                  ) -> AuditSpec:
  """The Gaussian mechanism on a sensitivity-1 count, σ calibrated.

  σ is the analytic calibration for (ε, δ); the ledger's ε is read at
  ``audit_delta``, a δ where a single-threshold test is nearly tight (the
  claim is the whole privacy profile δ(ε), so every point of it may be
  audited). ``broken``: the noise has σ/2.
  """
  sigma = calibration.gaussian_sigma_analytic(epsilon=epsilon, delta=delta,
                                              sensitivity=1.0)
  ledger = accounting.PrivacyLedger()
  ledger.record_gaussian(sigma=sigma, sensitivity=1.0, delta=delta,
                         label="gaussian", relation="add_remove")
  used = sigma / 2.0 if broken else sigma

  def mechanism(key, count):
    return count + noise.gaussian_noise(key, (), stddev=used)

  return AuditSpec(
      name="gaussian_sigma_halved" if broken else "gaussian",
      relation="add_remove",
      settings={"epsilon": epsilon, "delta": delta, "sigma": sigma,
                "sigma_used": used, "sensitivity": 1.0},
      mechanism=mechanism, data_0=jnp.float32(0.0), data_1=jnp.float32(1.0),
      statistic=_identity, delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta),
      nominal_epsilon=None if audit_delta == delta else epsilon,
      default_trials=100_000 if broken else 1_000_000, broken=broken)


def laplace_spec(*, epsilon: float = 1.0, broken: bool = False
                 ) -> AuditSpec:
  """The Laplace mechanism on a sum of values in [0, 2] (L1 sensitivity 2).

  ``broken``: the scale is computed from sensitivity 1 (a count's), so the
  noise is half what the sum needs.
  """
  true_sensitivity = 2.0
  scale = calibration.laplace_scale(epsilon=epsilon,
                                    sensitivity=true_sensitivity)
  ledger = accounting.PrivacyLedger()
  ledger.record_laplace(scale=scale, sensitivity=true_sensitivity,
                        label="laplace", relation="add_remove")
  used = (calibration.laplace_scale(epsilon=epsilon, sensitivity=1.0)
          if broken else scale)

  def mechanism(key, total):
    return total + noise.laplace_noise(key, (), scale=used)

  return AuditSpec(
      name="laplace_wrong_sensitivity" if broken else "laplace",
      relation="add_remove",
      settings={"epsilon": epsilon, "sensitivity": true_sensitivity,
                "scale": scale, "scale_used": used},
      mechanism=mechanism, data_0=jnp.float32(0.0),
      data_1=jnp.float32(true_sensitivity), statistic=_identity, delta=0.0,
      reported_epsilon=claimed_epsilon(ledger, "add_remove"),
      default_trials=100_000 if broken else 1_000_000, broken=broken)


# -- exact (discrete) noise on a grid ------------------------------------------
#
# The query is a mean of three values, whose sensitivity (1/3 of the value
# range) is not a multiple of the grid step γ: the neighbours are placed so
# that nearest rounding pushes them apart by the most it can, ⌈Δ/γ⌉ grid
# steps, against the lattice bound Δ/γ + 1 the ledger uses.


def discrete_gaussian_spec(*, epsilon: float = 1.0, delta: float = 1e-5,
                           audit_delta: float = 1e-2) -> AuditSpec:
  """Discrete Gaussian grid mechanism on a mean of 3 values in [0, 1].

  Δ = 1/3, γ = 2⁻⁴: Δ/γ = 5.33 and the lattice sensitivity is 6.33; the
  neighbours 0.03 and 0.03 + 1/3 round to 0 and 6 grid steps. The
  integer σ is the smallest whose zCDP gives (ε, δ) at the lattice
  sensitivity; the ledger's ε is read at ``audit_delta``.
  """
  granularity = 2.0 ** -4
  value_sensitivity = 1.0 / 3.0
  lattice = dp_lattice.lattice_l2_sensitivity(
      value_sensitivity, granularity=granularity, dim=1)
  sigma = discrete_calibration.discrete_gaussian_sigma(
      epsilon=epsilon, delta=delta, sensitivity=lattice)
  ledger = accounting.PrivacyLedger()
  ledger.record_discrete_gaussian(sigma=float(sigma), sensitivity=lattice,
                                  delta=delta, label="discrete_gaussian",
                                  relation="add_remove")

  def mechanism(key, mean):
    z, _ = dp_lattice.gaussian_mechanism(
        key, mean, sensitivity=value_sensitivity, sigma=sigma,
        granularity=granularity)
    return z.astype(jnp.float32)

  return AuditSpec(
      name="discrete_gaussian", relation="add_remove",
      settings={"epsilon": epsilon, "delta": delta,
                "sigma_lattice": int(sigma), "granularity": granularity,
                "sensitivity": value_sensitivity,
                "lattice_sensitivity": lattice, "rounded_distance": 6},
      mechanism=mechanism, data_0=jnp.float32(0.03),
      data_1=jnp.float32(0.03 + value_sensitivity), statistic=_identity,
      delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta),
      nominal_epsilon=None if audit_delta == delta else epsilon,
      default_trials=300_000)


def discrete_laplace_spec(*, epsilon: float = 1.0) -> AuditSpec:
  """Discrete Laplace grid mechanism on a mean of 3 values in [0, 2].

  Δ₁ = 2/3, γ = 2⁻³: Δ₁/γ = 16/3 and the lattice sensitivity 19/3, so
  the scale t = 19/(3ε) gives ε; the neighbours 0.06 and 0.06 + 2/3
  round to 0 and 6 grid steps (an exact test would show 6/(19/3)·ε).
  """
  granularity = 2.0 ** -3
  value_sensitivity = 2.0 / 3.0
  lattice = Fraction(16, 3) + 1
  scale = lattice / Fraction(epsilon)
  ledger = accounting.PrivacyLedger()
  ledger.record_discrete_laplace(scale=float(scale),
                                 sensitivity=float(lattice),
                                 label="discrete_laplace",
                                 relation="add_remove")

  def mechanism(key, mean):
    z, _ = dp_lattice.laplace_mechanism(
        key, mean, sensitivity=value_sensitivity, scale=scale,
        granularity=granularity)
    return z.astype(jnp.float32)

  return AuditSpec(
      name="discrete_laplace", relation="add_remove",
      settings={"epsilon": epsilon, "scale_lattice": str(scale),
                "granularity": granularity,
                "sensitivity": value_sensitivity,
                "lattice_sensitivity": float(lattice),
                "rounded_distance": 6},
      mechanism=mechanism, data_0=jnp.float32(0.06),
      data_1=jnp.float32(0.06 + value_sensitivity), statistic=_identity,
      delta=0.0, reported_epsilon=claimed_epsilon(ledger, "add_remove"),
      default_trials=1_000_000)


# -- the exponential mechanism -------------------------------------------------


def exponential_spec(*, epsilon: float = 1.0, candidates: int = 20
                     ) -> AuditSpec:
  """Selection among ``candidates`` by scores of sensitivity 1.

  Data are the score vectors (counts of approving rows). Replacing one
  row that approves every candidate but the target by one that approves
  only the target raises the target's score by 1 and lowers every other
  by 1, the change that comes closest to the full e^ε ratio (it tends to
  it as the number of candidates grows). Statistic: the target chosen.
  """
  ledger = accounting.PrivacyLedger()
  ledger.record_exponential(epsilon, label="selection",
                            relation="replace_one")
  base = jnp.full((candidates,), 5.0, jnp.float32)
  scores_0 = base.at[1:].add(1.0)
  scores_1 = base.at[0].add(1.0)

  def mechanism(key, scores):
    index, _ = exponential.exponential_mechanism(
        key, scores, epsilon=epsilon, sensitivity=1.0)
    return index

  return AuditSpec(
      name="exponential", relation="replace_one",
      settings={"epsilon": epsilon, "sensitivity": 1.0,
                "candidates": candidates},
      mechanism=mechanism, data_0=scores_0, data_1=scores_1,
      statistic=lambda index: (index == 0).astype(jnp.float32), delta=0.0,
      reported_epsilon=claimed_epsilon(ledger, "replace_one"),
      default_trials=1_000_000)


# -- DP-PCA --------------------------------------------------------------------


def dp_pca_spec(*, epsilon: float = 1.0, delta: float = 1e-5,
                audit_delta: float = 1e-2, dim: int = 3,
                position: str = "first") -> AuditSpec:
  """Analyze-Gauss DP-PCA (add/remove), a canary row e₁ vs without.

  Both data sets have the same padded shape; the canary's slot (at
  ``position`` among the d rows) is masked out in ``data_0``. The release
  is the full eigendecomposition (k = d), from which the statistic
  rebuilds e₁ᵀ(noisy M)e₁ = Σⱼ λⱼ (vⱼ·e₁)²: the noisy diagonal entry the
  canary adds 1 to.
  """
  plan = dp_pca.make_plan(epsilon=epsilon, delta=delta, k=dim, dim=dim,
                          relation="add_remove")
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  at = canary_index(dim, position)
  # The canary e₁ in row ``at``, the other rows e₂ … e_d.
  rows = jnp.roll(jnp.eye(dim, dtype=jnp.float32), at, axis=0)
  mask_1 = jnp.ones((dim,), jnp.float32)
  mask_0 = mask_1.at[at].set(0.0)

  def mechanism(key, data):
    x, mask = data
    return dp_pca.release(key, plan, x, mask)

  def statistic(result):
    return jnp.sum(result.eigenvalues * result.components[0] ** 2)

  return AuditSpec(
      name=spec_name("dp_pca", position), relation="add_remove",
      settings={"epsilon": epsilon, "delta": delta, "sigma": plan.sigma,
                "d": dim, "k": dim, "calibration": plan.calibration},
      position=position,
      mechanism=mechanism, data_0=(rows, mask_0), data_1=(rows, mask_1),
      statistic=statistic, delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta),
      nominal_epsilon=epsilon, default_trials=300_000)


# -- objective and output perturbation ---------------------------------------


def objective_perturbation_spec(*, loss: str = "huber", epsilon: float = 1.0,
                                lam: float = 100.0) -> AuditSpec:
  """One-row, one-dimensional objective perturbation (replace-one).

  The only row x = 1 has label +1 in ``data_0`` and −1 in ``data_1``. With
  a strong ridge the fit stays where the Huber hinge is linear, so the
  gradient the row contributes flips by the full 2 — the worst case of the
  proof; the logistic loss's derivative is ½ there, so its audit can show
  only about half of ε. Statistic: −β (label −1 pushes β down). Fits run
  in float64 to the library's tolerance.
  """
  plan = op.make_plan(epsilon=epsilon, n=1, lam=lam, loss=loss)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  x = jnp.ones((1, 1))
  mask = jnp.ones((1,))

  def mechanism(key, y):
    return op.release(key, plan, x.astype(jnp.float64), y,
                      mask.astype(jnp.float64)).beta

  return AuditSpec(
      name=f"objective_perturbation_{loss}", relation="replace_one",
      settings={"loss": loss, "epsilon": epsilon, "lam": lam, "n": 1,
                "p": plan.p, "theta": plan.theta},
      mechanism=mechanism, data_0=jnp.ones((1,)), data_1=-jnp.ones((1,)),
      statistic=lambda beta: -beta[0], delta=0.0,
      reported_epsilon=claimed_epsilon(ledger, "replace_one"),
      default_trials=200_000,
      x64=True)


def output_perturbation_spec(*, epsilon: float = 1.0, c: float = 0.1
                             ) -> AuditSpec:
  """Output perturbation of a linear C-SVC (replace-one).

  One row x = 1 (augmented to [1, 1]/√2, norm 1) with label +1 vs −1: the
  exact minimisers are ±C·x̃, 2C apart — the sensitivity is attained. The
  minimisers are computed host-side by the library's solver; the audit
  runs the library's noise step on them. Statistic: the privacy-loss
  direction ‖o − w₀‖ − ‖o − w₁‖ (the likelihood-ratio test).
  """
  x = jnp.ones((1, 1))
  w_0, _, _ = outp.fit_linear(x, jnp.ones((1,)), c=c)
  w_1, _, _ = outp.fit_linear(x, -jnp.ones((1,)), c=c)
  plan = outp.make_plan(epsilon=epsilon, c=c)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger, label="output_perturbation")
  w_0 = jnp.asarray(w_0, jnp.float32)
  w_1 = jnp.asarray(w_1, jnp.float32)

  def mechanism(key, w):
    return outp.perturb(key, w, sensitivity_l2=plan.sensitivity,
                        epsilon=plan.epsilon)

  def statistic(out):
    return jnp.linalg.norm(out - w_0) - jnp.linalg.norm(out - w_1)

  return AuditSpec(
      name="output_perturbation", relation="replace_one",
      settings={"epsilon": epsilon, "c": c, "sensitivity": plan.sensitivity,
                "minimiser_distance": float(jnp.linalg.norm(w_0 - w_1))},
      mechanism=mechanism, data_0=w_0, data_1=w_1, statistic=statistic,
      delta=0.0, reported_epsilon=claimed_epsilon(ledger, "replace_one"),
      default_trials=500_000)


# -- DP-SGD --------------------------------------------------------------------

_DPSGD = {"examples": 8, "sampling_rate": 0.5, "steps": 3,
          "noise_multiplier": 1.0, "clip_norm": 1.0, "dim": 2}


def _dpsgd_release(key, grads, *, variant: str):
  """T DP-SGD updates of fixed per-example gradients, all released.

  ``variant``: ``"library"`` (:func:`dpcore.dpsgd.dp_aggregate` with the
  batch mask), ``"mask_dropped"`` (a hand-written aggregate that sums every
  padded slot) or ``"clip_skipped"`` (unclipped masked sum, noise added by
  ``dp_aggregate(presummed=True)``).
  """
  n, _ = grads.shape
  cfg = _DPSGD
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
  output; the model only post-processes them). Row 0 holds the canary
  gradient (norm C, or 10·C for ``broken="clip_skipped"``), the other rows
  zero gradients. In ``data_0`` the canary is removed: its slot holds a
  zero gradient, which adds nothing to any sum, so the releases are those
  of the data set without it (qN, the divisor, is a public constant).
  Statistic: Σₜ log(1 − q + q·exp((2zₜ − 1)/(2σ²))), the log-likelihood
  ratio of the updates projected on the canary direction (zₜ in units of
  C).

  ``broken``: ``"mask_dropped"`` (padding slots, which repeat row 0, are
  summed) or ``"clip_skipped"`` (per-example gradients are not clipped).
  ``position``: the canary's row (first, middle or last); the broken
  variants keep it first, where padding repeats it.
  """
  cfg = _DPSGD
  variant = broken or "library"
  if variant not in ("library", "mask_dropped", "clip_skipped"):
    raise ValueError(f"broken must be None, 'mask_dropped' or "
                     f"'clip_skipped', got {broken!r}.")
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
  canary_norm = 10.0 * clip if variant == "clip_skipped" else clip
  direction = jnp.zeros((cfg["dim"],), jnp.float32).at[0].set(1.0)
  if broken is not None:
    position = "first"
  grads_1 = jnp.zeros((n, cfg["dim"]), jnp.float32).at[
      canary_index(n, position)].set(canary_norm * direction)
  grads_0 = jnp.zeros_like(grads_1)
  expected = q * n

  def mechanism(key, grads):
    return _dpsgd_release(key, grads, variant=variant)

  def statistic(updates):
    z = updates @ direction * expected / clip  # N(0, σ²) without canary
    return jnp.sum(jnp.logaddexp(
        jnp.log1p(-q), jnp.log(q) + (2.0 * z - 1.0) / (2.0 * sigma**2)))

  name = ("dpsgd" if broken is None else f"dpsgd_{broken}")
  positioned = position if broken is None else None
  return AuditSpec(
      name=spec_name(name, positioned), relation="add_remove",
      settings={**cfg, "max_batch": max_batch, "canary_norm": canary_norm,
                "variant": variant, "canary_row": canary_index(n, position)},
      position=positioned,
      mechanism=mechanism, data_0=grads_0, data_1=grads_1,
      statistic=statistic, delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta),
      default_trials=200_000 if broken is None else 20_000,
      broken=broken is not None)


# -- the DP-SGD trainer end to end, on the layered (ghost) fast path ----------

_TRAINER = {"examples": 8, "sampling_rate": 0.5, "steps": 3,
            "noise_multiplier": 1.0, "clip_norm": 1.0, "dim": 2,
            "learning_rate": 1.0, "canary_scale": 10.0}


def _trainer_canary_loss(layers, example):
  # ℓ(w; x) = −w·x: the gradient is −x whatever w, so the canary row's
  # gradient has norm canary_scale·C and every step must clip it.
  return -layers.dense("w", example)[0]


def trainer_spec(*, broken: str | None = None, audit_delta: float = 1e-2,
                 position: str = "first") -> AuditSpec:
  """A whole :func:`dpcore.trainer.train` run on its fast paths.

  The model is a layered linear loss (:mod:`dpcore.ghost`) whose per-step
  gradient is −x, so the trained weight after T steps of SGD from 0 is
  lr·Σₜ (clipped sum + noise)/qN: the run releases the sum of its T noisy
  updates (the accountant covers every update; this is post-processing).
  The canary row (first, middle or last: ``position``) is 10·C along the
  first axis (clipped to C on the fast path); in ``data_0`` it is a zero
  row, which adds nothing to any
  sum (add/remove, as for ``dpsgd_spec``). Statistic: the released weight
  along the canary direction. ``broken="clip_skipped"`` runs the same
  trainer with a clipped sum that does not clip (C ×10⁶ inside the sum,
  the plan's C for the noise), which the audit must catch.
  """
  cfg = _TRAINER
  if broken not in (None, "clip_skipped"):
    raise ValueError(f"broken must be None or 'clip_skipped', got "
                     f"{broken!r}.")
  n, q, steps = cfg["examples"], cfg["sampling_rate"], cfg["steps"]
  clip = cfg["clip_norm"]
  # Both fast paths: the layered clipped sum and the geometric-gap sampler
  # (the trainer's choice for B ≪ N, forced here on this small N).
  plan = trainer.make_plan(n, sampling_rate=q, steps=steps, clip_norm=clip,
                           noise_multiplier=cfg["noise_multiplier"],
                           delta=audit_delta, sampler="gaps")
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  loss = ghost.layered(_trainer_canary_loss)
  clipped_sum = None
  if broken == "clip_skipped":
    def clipped_sum(params, batch, mask, clip_norm):
      return loss.clipped_sum(params, batch, mask, 1e6 * clip_norm)
  params = {"w": {"w": jnp.zeros((cfg["dim"], 1), jnp.float32)}}
  direction = jnp.zeros((cfg["dim"],), jnp.float32).at[0].set(1.0)
  if broken is not None:
    position = "first"
  x_1 = jnp.zeros((n, cfg["dim"]), jnp.float32).at[
      canary_index(n, position)].set(cfg["canary_scale"] * clip * direction)
  x_0 = jnp.zeros_like(x_1)
  expected = q * n

  def mechanism(key, x):
    return trainer.train(key, plan, loss, params, x,
                         optax.sgd(cfg["learning_rate"]),
                         clipped_sum=clipped_sum).params["w"]["w"][:, 0]

  def statistic(w):
    # Σₜ of the canary-axis updates in units of C/qN: Binomial + N(0, Tσ²).
    return w @ direction * expected / (cfg["learning_rate"] * clip)

  return AuditSpec(
      name=(spec_name("trainer_ghost", position) if broken is None
            else f"trainer_{broken}"),
      relation="add_remove",
      settings={**cfg, "max_batch": plan.max_batch, "sampler": plan.sampler,
                "path": "ghost", "variant": broken or "library",
                "canary_row": canary_index(n, position)},
      position=position if broken is None else None,
      mechanism=mechanism, data_0=x_0, data_1=x_1, statistic=statistic,
      delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta),
      default_trials=200_000 if broken is None else 20_000,
      broken=broken is not None)


# -- federated DP-SGD, every trust model ---------------------------------------


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


def fedsgd_spec(*, trust: str = "server", position: str = "first",
                broken: str | None = None,
                audit_delta: float = 1e-2) -> AuditSpec:
  """Federated DP-SGD (:mod:`federated.fedsgd`), a whole run released.

  The trainer row's set-up (:func:`trainer_spec`: a layered linear loss
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
    ``broken="compacted_mask"`` runs the same release with participants
    chosen by a compacted batch's slot mask (the bug fixed in fedsgd):
    the first participant is over-included and must be caught there.

  What is released: the model (read by the statistic) and the result's
  count of overflowing steps, which depends on the keys and the public
  sizes only (the batch sizes are drawn whatever the rows hold), so it
  cannot tell the neighbours apart; the record holds public settings.
  """
  cfg = dict(_TRAINER)
  if trust not in ("server", "local", "participant"):
    raise ValueError(f"trust must be 'server', 'local' or 'participant', "
                     f"got {trust!r}.")
  if broken not in (None, "compacted_mask") or (
      broken and trust != "participant"):
    raise ValueError(f"broken={broken!r}: only trust='participant' has a "
                     f"broken variant, 'compacted_mask'.")
  participants, rows = {"server": (2, 4), "local": (1, 4),
                        "participant": (4, 2)}[trust]
  q, steps, clip = cfg["sampling_rate"], cfg["steps"], cfg["clip_norm"]
  plan = fedsgd.make_plan([rows] * participants, trust=trust,
                          sampling_rate=q, steps=steps, clip_norm=clip,
                          noise_multiplier=cfg["noise_multiplier"],
                          delta=audit_delta)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  loss = ghost.layered(lambda layers, example: _trainer_canary_loss(
      layers, example[0]))
  params = {"w": {"w": jnp.zeros((cfg["dim"], 1), jnp.float32)}}
  direction = jnp.zeros((cfg["dim"],), jnp.float32).at[0].set(1.0)
  canary = cfg["canary_scale"] * clip * direction
  x_0 = jnp.zeros((participants, rows, cfg["dim"]), jnp.float32)
  if trust == "participant":
    unit = canary_index(participants, position)
    x_1 = x_0.at[unit].set(canary)
  else:
    unit = canary_index(participants * rows, position)
    x_1 = x_0.at[unit // rows, unit % rows].set(canary)
  labels = jnp.zeros((participants, rows), jnp.int32)
  mask = jnp.ones((participants, rows), jnp.float32)

  def release(key, x):
    out = fedsgd.release(key, plan, loss, params, x, labels, mask,
                         optax.sgd(cfg["learning_rate"]))
    return out.params["w"]["w"][:, 0]

  def mechanism(key, x):
    if broken is None:
      return release(key, x)
    with _compacted_inclusion():
      return release(key, x)

  def statistic(w):
    return w @ direction * plan.divisor / (cfg["learning_rate"] * clip)

  base = f"fedsgd_{trust}" + ("" if broken is None else f"_{broken}")
  return AuditSpec(
      name=spec_name(base, position), relation="add_remove",
      settings={**plan.settings(), "canary_scale": cfg["canary_scale"],
                "canary_unit": unit,
                "unit": "participant" if trust == "participant" else "row"},
      mechanism=mechanism, data_0=x_0, data_1=x_1, statistic=statistic,
      delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta),
      default_trials=200_000 if broken is None else 20_000,
      broken=broken is not None, position=position)


# -- FedDPDR, one participant --------------------------------------------------


def feddpdr_spec(*, epsilon: float = 2.0, delta: float = 1e-4,
                 lam: float = 100.0) -> AuditSpec:
  """One FedDPDR-DPML participant's releases: DP-PCA basis and its fit.

  A participant with one row x = e₁ (d = 2, k = 2, two classes), label 1
  in ``data_0`` and 0 in ``data_1`` (replace-one, the relation the
  pipeline is accounted under). The mechanism is
  :func:`federated.feddpdr.train` itself for that one participant; the
  statistic is the released model mapped back to the input space, −(Ûβ̂)₁
  (with k = d the basis is a rotation, so this probes the fit).
  """
  config = feddpdr.Config(mechanism="dpdr_dpml", epsilon=epsilon,
                          delta=delta, k=2, lam=lam)
  plan = feddpdr.make_plan([1], d=2, num_classes=2, config=config)
  x = jnp.zeros((1, 1, 2), jnp.float32).at[0, 0, 0].set(1.0)
  mask = jnp.ones((1, 1), jnp.float32)
  arrays = tuple(jnp.asarray(a) for a in
                 (plan.sigma.astype("float32"), plan.n, plan.p, plan.theta))

  def mechanism(key, labels):
    sigma, n, p, theta = (a.astype(jnp.float64) if i else a
                          for i, a in enumerate(arrays))
    out = feddpdr.train(key[None], feddpdr.Rows(x, labels, mask),
                        feddpdr.Traced(sigma, n, p, theta), config=config,
                        num_classes=2)
    return out.bases[0, 0], out.betas[0, 0, 0]

  def statistic(out):
    basis, beta = out
    return -(basis @ beta)[0]

  return AuditSpec(
      name="feddpdr_participant", relation="replace_one",
      settings={"mechanism": config.mechanism, "epsilon": epsilon,
                "delta": delta, "d": 2, "k": 2, "lam": lam, "n": 1,
                "epsilon_pca": plan.epsilon_pca,
                "epsilon_fit": plan.epsilon_fit},
      mechanism=mechanism, data_0=jnp.ones((1, 1), jnp.int32),
      data_1=jnp.zeros((1, 1), jnp.int32), statistic=statistic,
      delta=delta,
      reported_epsilon=claimed_epsilon(plan.privacy, "replace_one"),
      nominal_epsilon=plan.privacy["epsilon_nominal"],
      default_trials=100_000, x64=True)


# -- all of them ---------------------------------------------------------------


def specs() -> list[AuditSpec]:
  """Every audit of the library, the deliberately broken ones included."""
  out = [
      gaussian_spec(),
      laplace_spec(),
      discrete_gaussian_spec(),
      discrete_laplace_spec(),
      exponential_spec(),
      *(dp_pca_spec(position=p) for p in POSITIONS),
      objective_perturbation_spec(loss="huber"),
      objective_perturbation_spec(loss="logistic"),
      output_perturbation_spec(),
      *(dpsgd_spec(position=p) for p in POSITIONS),
      *(trainer_spec(position=p) for p in POSITIONS),
      *(fedsgd_spec(trust=t, position=p)
        for t in ("server", "local", "participant") for p in POSITIONS),
      feddpdr_spec(),
      gaussian_spec(broken=True),
      laplace_spec(broken=True),
      dpsgd_spec(broken="mask_dropped"),
      dpsgd_spec(broken="clip_skipped"),
      trainer_spec(broken="clip_skipped"),
      fedsgd_spec(trust="participant", broken="compacted_mask"),
  ]
  out.extend(dpwss_audits.specs())
  out.extend(feature_audits.specs())
  out.extend(rff_audits.specs())
  out.extend(tuning_audits.specs())
  return out


def run_spec(key: jax.Array, spec: AuditSpec, *, trials: int | None = None,
             chunk: int = 100_000, memory_budget: int | None = None
             ) -> auditing.AuditResult:
  """Audits ``spec`` (its default trials unless given), in x64 if it asks.

  ``memory_budget`` (bytes, None: no check) bounds the trials vmapped at
  once (:func:`dpcore.auditing.audit`).
  """
  trials = spec.default_trials if trials is None else trials
  with jax.enable_x64(spec.x64):
    data_0 = jax.tree.map(jnp.asarray, spec.data_0)
    data_1 = jax.tree.map(jnp.asarray, spec.data_1)
    return auditing.audit(key, spec.mechanism, data_0, data_1,
                          statistic=spec.statistic, delta=spec.delta,
                          trials=trials, chunk=chunk,
                          memory_budget=memory_budget)


__all__ = ["AuditSpec", "discrete_gaussian_spec", "discrete_laplace_spec",
           "dp_pca_spec", "dpsgd_spec", "exponential_spec",
           "feddpdr_spec", "gaussian_spec", "laplace_spec",
           "objective_perturbation_spec", "output_perturbation_spec",
           "run_spec", "specs"]
