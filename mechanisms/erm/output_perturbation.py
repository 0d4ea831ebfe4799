"""A private release of a linear C-SVC by output perturbation.

Chaudhuri, Monteleoni & Sarwate (2011), Algorithm 1: train the exact
minimiser of a strongly convex regularised loss, then add noise b ∈ R^k with
density ∝ exp(−ε‖b‖/Δ) — ‖b‖ ~ Gamma(shape k, scale Δ/ε), direction uniform.

Sensitivity for C-SVC. The primal min_w ½‖w‖² + C Σ_t hinge(y_t wᵀx_t) is
(1/(nC))-times Chaudhuri's (1/n)Σℓ + (λ/2)‖w‖² with λ = 1/(nC). If two data
sets differ in one row (replace-one) and ‖x‖ ≤ 1, the objectives differ by
C(ℓ_k − ℓ′_k), a 2C-Lipschitz function of w (hinge is 1-Lipschitz in the
margin); 1-strong convexity then gives ‖w − w′‖² ≤ 2C‖w − w′‖, so
Δ₂ = 2C = 2/(nλ). No differentiability is needed for this bound.

The bias. LIBSVM's b is unpenalised, and Chaudhuri's analysis does not
cover an unpenalised coordinate (the optimal b can move with every row). We
therefore append a constant feature and solve the bias-free problem on
x̃ = [x, 1]/√2 (so ‖x̃‖ ≤ 1 whenever ‖x‖ ≤ 1): the bias becomes a
penalised weight, the noise is added to all d + 1 weights, and the released
(w, b) = (w̃[:d], w̃[d])/√2 is post-processing. The bias-free dual (no
yᵀα = 0 constraint) is solved by dual coordinate descent (as LIBLINEAR's
L1-loss SVM) to a projected-gradient tolerance.

The solver's gap is accounted, not assumed away. The bound 2C holds for
the exact minimisers w*; the solver returns ŵ = Σ αᵢyᵢx̃ᵢ for a feasible
α (0 ≤ α ≤ C). Weak duality and 1-strong convexity give
½‖ŵ − w*‖² ≤ P(ŵ) − P(w*) ≤ P(ŵ) − D(α) = G, the duality gap, which
the solver computes with a bound on its float64 rounding
(:func:`certified_gap`). It keeps iterating until that certified G is
≤ (ρC)²/2 (ρ = the plan's ``gap_fraction``, default 1 %), so
‖ŵ − w*‖ ≤ ρC for both neighbours and ‖ŵ(D) − ŵ(D′)‖ ≤ 2C(1 + ρ): the
plan's sensitivity, for which the noise is drawn. A fit that does not
get there within ``max_epochs`` is not released (:class:`ConvergenceError`;
the refusal itself is an event the proof does not cover). The rounding
bound grows about as n²C against the target's (ρC)²/2, so on large data it
can be out of reach: the solver then stops, and the release refuses, as
soon as the projected-gradient gap is within ``EARLY_STOP_TOL`` (1e-8)
with the rounding bound alone above the target.

Only the linear kernel has a finite-dimensional w to perturb; any other
kernel is refused (its model stores training rows as support vectors).

The one shape (:mod:`dpcore.shape`): :func:`make_plan` validates ε and C
and fixes the sensitivity 2C(1 + ρ) and the noise scale Δ₂/ε in a frozen
:class:`OutputPerturbationPlan`; ``plan.record(ledger, count=r)`` enters r
releases in a ledger; :func:`release` trains and perturbs (one key, or a
batch of r keys for r independent noise draws of the one training).
:func:`perturb` is the noise step alone, a building block for weights of
a known sensitivity (random-feature models, an audit's canary)::

  plan = outp.make_plan(epsilon=1.0, c=0.3)
  model = outp.release(key, plan, x, y)
  plan.record(ledger)

Privacy:
  Neighbouring data sets differ by replacing one row (n public). With
  every ‖x‖ ≤ 1 (refused otherwise) the exact minimiser over x̃ has L2
  sensitivity 2C (Chaudhuri et al. 2011, Theorem 6) and the released
  solver output 2C(1 + ρ) (above), so noise of density
  ∝ exp(−ε‖b‖/(2C(1 + ρ))) makes the released (w, b) ε-DP (pure).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dpcore import accounting, clipping, options, validation
from dpcore import noise as dp_noise
from mechanisms.erm.objective_perturbation import ConvergenceError

BIAS_SCALE = 1.0 / math.sqrt(2.0)
EARLY_STOP_TOL = 1e-8
"""The projected-gradient gap below which the solver gives up on a
certificate whose rounding bound alone is above the target."""
RELATION = options.Relation.REPLACE_ONE
"""The neighbouring relation output perturbation is proven under (n public)."""


def check_linear_kernel(kernel) -> None:
  """Raises unless ``kernel`` (a KernelSpec or its name) is linear."""
  kind = getattr(kernel, "kind", kernel)
  if kind != "linear":
    raise ValueError(
        f"output perturbation needs the linear kernel, got {kind!r}: a "
        f"non-linear kernel SVM stores training rows as support vectors and "
        f"has no finite weight vector to perturb. Use kernel='linear' or "
        f"release='none' (which is not private).")


DEFAULT_GAP_FRACTION = 0.01
"""The default ρ: the solver's certified distance to the exact minimiser
is at most ρ·C, which widens the sensitivity 2C by the factor 1 + ρ."""


def sensitivity(c: float) -> float:
  """L2 sensitivity 2C of the exact bias-free C-SVC minimiser (‖x‖ ≤ 1).

  A release's noise is drawn for the plan's ``sensitivity``, 2C(1 + ρ),
  which also covers the solver's gap (module docstring).
  """
  return 2.0 * validation.check_positive(c, "c")


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["epsilon", "target_epsilon", "delta", "c", "sensitivity",
                 "scale", "gap_fraction"],
    meta_fields=["relation"])
@dataclasses.dataclass(frozen=True)
class OutputPerturbationPlan:
  """The public facts of an output-perturbed linear C-SVC (see make_plan).

  A pytree whose leaves are its numbers (ε, the target, δ, C, Δ₂ and the
  scale; the relation is static), like the other plans.

  Attributes:
    epsilon: the guarantee of each release (pure DP), as a ledger holding
      :meth:`record`'s entry reports it: the budget itself, the noise
      being calibrated exactly.
    target_epsilon: the budget ε of each release (``make_plan``'s).
    delta: 0 (pure DP).
    relation: replace-one (:data:`RELATION`; n public).
    c: C > 0 of the C-SVC.
    sensitivity: Δ₂ = 2C(1 + ρ) of the released augmented weights: 2C
      of the exact minimiser (:func:`sensitivity`), widened by the
      solver's certified gap.
    scale: Δ₂/ε, the Gamma scale of the noise norm.
    gap_fraction: ρ: :func:`release` certifies that its solution is within
      ρ·C of the exact minimiser.
  """
  epsilon: float
  target_epsilon: float
  delta: float
  relation: options.Relation
  c: float
  sensitivity: float
  scale: float
  gap_fraction: float = DEFAULT_GAP_FRACTION

  @property
  def gap_target(self) -> float:
    """(ρC)²/2: the certified duality gap :func:`release` must reach
    (then ‖ŵ − w*‖ ≤ ρC)."""
    return 0.5 * (self.gap_fraction * self.c) ** 2

  def record(self, ledger, *, label: str = "output_perturbation",
             count: int = 1) -> None:
    """Enters ``count`` releases of this plan (same data) in ``ledger``.

    Each release is pure ε-DP (replace-one, ‖x‖ ≤ 1); ``count`` releases
    computed from the same data compose.

    Args:
      ledger: a :class:`dpcore.accounting.PrivacyLedger`.
      label: the entry's label.
      count: releases published from the same data (e.g. the number of
        keys given to :func:`release`).
    """
    ledger.record_pure(self.target_epsilon, label=label,
                       count=validation.check_positive_int(count, "count"),
                       relation=self.relation)


def make_plan(*, epsilon: float, c: float,
              gap_fraction: float = DEFAULT_GAP_FRACTION
              ) -> OutputPerturbationPlan:
  """Validates an output-perturbation release and fixes its noise.

  Args:
    epsilon: ε > 0 of each release.
    c: C > 0 of the C-SVC.
    gap_fraction: ρ in (0, 1]: the solver must certify a solution within
      ρ·C of the exact minimiser, and the sensitivity is 2C(1 + ρ).

  Returns:
    An :class:`OutputPerturbationPlan` (Δ₂ = 2C(1 + ρ), scale Δ₂/ε).

  Raises:
    ValueError: a non-positive or non-finite ε or C, or ρ outside (0, 1].
  """
  epsilon = validation.check_epsilon(epsilon)
  gap_fraction = validation.check_positive(gap_fraction, "gap_fraction")
  if gap_fraction > 1.0:
    raise ValueError(f"gap_fraction must be in (0, 1]: the solver's "
                     f"certified distance to the exact minimiser, as a "
                     f"fraction of C; got {gap_fraction}.")
  delta2 = sensitivity(c) * (1.0 + gap_fraction)
  plan = OutputPerturbationPlan(None, epsilon, 0.0, RELATION, float(c),
                                delta2, delta2 / epsilon, gap_fraction)
  return dataclasses.replace(plan, epsilon=accounting.plan_epsilon(plan))


def perturb(key: jax.Array, weights: jax.Array, *, sensitivity_l2: float,
            epsilon: float) -> jax.Array:
  """weights + noise of density ∝ exp(−ε‖b‖/Δ₂): the noise step alone.

  A building block for weights the caller computed (a random-feature
  model's, an audit's canary minimisers); :func:`release` is the checked
  release of a C-SVC, with Δ₂ and ε from its plan.

  ε and Δ₂ may be traced (e.g. a plan's leaves, under ``jit``: one
  program for every ε); concrete ones are checked here.

  Privacy: ε-DP for the weights when ``sensitivity_l2`` bounds their L2
  change between neighbouring data sets (Chaudhuri et al. 2011, Thm 6).
  """
  validation.check_key(key)
  if validation.is_concrete((epsilon, sensitivity_l2)):
    epsilon = validation.check_epsilon(epsilon)
    sensitivity_l2 = validation.check_positive(sensitivity_l2,
                                               "sensitivity_l2")
  # Density ∝ exp(−ε‖b‖/Δ₂): the law of objective perturbation's noise
  # with β = ε/Δ₂, drawn by the one sampler of it (tail-safe, see
  # dpcore.noise).
  noise = dp_noise.objective_perturbation_noise(
      key, weights.shape[0], beta=epsilon / sensitivity_l2,
      dtype=jnp.result_type(float))
  return weights + noise.astype(weights.dtype)


class _CDState(NamedTuple):
  alpha: jax.Array
  w: jax.Array
  epoch: jax.Array
  gap: jax.Array
  certified: jax.Array
  rounding: jax.Array


def certified_gap(x, y, c, alpha):
  """(ŵ, a bound on the duality gap G at α, rounding included).

  ŵ = x̃ᵀ(α∘y) is computed afresh from α (float64, rows x̃ of norm ≤ 1,
  0 ≤ α ≤ C). The returned bound is Ĝ + e ≥ P(ŵ) − D(α), where
  Ĝ = ‖ŵ‖² + C Σ max(0, 1 − yᵢŵᵀx̃ᵢ) − Σα is the computed gap and e
  bounds its rounding, to first order with a margin of 4 (8u per
  operation, u the unit roundoff, any order of summation): the three sums,
  the margins' dot products (d·u·‖ŵ‖ each, C·n of them), and
  ½‖w(α)‖² − ½‖ŵ‖² ≤ ‖ŵ‖e_w + e_w² for the error e_w ≤ (n + 16)·8u·Σα
  of ŵ itself. Then ‖ŵ − w*‖ ≤ √(2(Ĝ + e)) (module docstring).
  """
  w, gap, rounding = _gap_terms(x, y, c, alpha)
  return w, gap + rounding


def _gap_terms(x, y, c, alpha):
  """(ŵ, Ĝ, e): :func:`certified_gap`'s computed gap and rounding bound
  apart."""
  n, d = x.shape
  w = x.T @ (alpha * y)
  hinge = jnp.sum(jnp.maximum(0.0, 1.0 - y * (x @ w)))
  total = jnp.sum(alpha)
  norm2 = w @ w
  gap = norm2 + c * hinge - total
  u8 = 4.0 * jnp.finfo(x.dtype).eps
  e_w = u8 * (n + 16) * total
  norm = jnp.sqrt(norm2)
  rounding = u8 * ((n + d + 16) * (norm2 + c * hinge + total)
                   + c * n * (d + 4) * norm) + norm * e_w + e_w * e_w
  return w, gap, rounding


@jax.jit
def _dual_cd(x, y, c, tol, max_epochs, target):
  """Bias-free L1-loss SVM dual, cyclic coordinate descent, until the
  projected-gradient gap ≤ ``tol`` and the certified duality gap
  (:func:`certified_gap`) ≤ ``target`` (∞: not asked), or until it is
  clear the certificate cannot get there: the projected-gradient gap is
  within ``EARLY_STOP_TOL`` (α near the optimum, where the rounding bound
  no longer moves) and the rounding bound alone is above ``target``."""
  qd = jnp.sum(x * x, axis=1)

  def step(t, carry):
    alpha, w, pg_max, pg_min = carry
    g = y[t] * (x[t] @ w) - 1.0
    pg = jnp.where(alpha[t] <= 0, jnp.minimum(g, 0.0),
                   jnp.where(alpha[t] >= c, jnp.maximum(g, 0.0), g))
    new = jnp.clip(alpha[t] - g / jnp.maximum(qd[t], 1e-300), 0.0, c)
    new = jnp.where((pg != 0) & (qd[t] > 0), new, alpha[t])
    w = w + (new - alpha[t]) * y[t] * x[t]
    return (alpha.at[t].set(new), w, jnp.maximum(pg_max, pg),
            jnp.minimum(pg_min, pg))

  def epoch(state):
    alpha, w, pg_max, pg_min = lax.fori_loop(
        0, x.shape[0], step,
        (state.alpha, state.w, jnp.asarray(-jnp.inf, x.dtype),
         jnp.asarray(jnp.inf, x.dtype)))
    zero = jnp.asarray(0.0, x.dtype)
    gap, rounding = lax.cond(jnp.isfinite(target),
                             lambda: _gap_terms(x, y, c, alpha)[1:],
                             lambda: (zero, zero))
    return _CDState(alpha, w, state.epoch + 1, pg_max - pg_min,
                    gap + rounding, rounding)

  def cond(state):
    # Near the optimum (projected-gradient gap ≤ EARLY_STOP_TOL, whatever
    # the caller's tol) the rounding bound no longer moves.
    unreachable = ((state.gap <= jnp.minimum(tol, EARLY_STOP_TOL))
                   & (state.rounding > target))
    return (((state.gap > tol) | ~(state.certified <= target))
            & ~unreachable & (state.epoch < max_epochs))

  inf = jnp.asarray(jnp.inf, x.dtype)
  init = _CDState(jnp.zeros(x.shape[0], x.dtype), jnp.zeros(x.shape[1],
                                                              x.dtype),
                  jnp.zeros((), jnp.int32), inf, inf,
                  jnp.zeros((), x.dtype))
  return lax.while_loop(cond, epoch, init)


def augment(x) -> np.ndarray:
  """[x, 1]/√2: the constant feature that makes the bias penalised."""
  x = np.asarray(x, np.float64)
  return np.hstack([x, np.ones((x.shape[0], 1))]) * BIAS_SCALE


@dataclasses.dataclass(frozen=True)
class LinearRelease:
  """A released linear model f(x) = w·x + b.

  Attributes:
    w: (d,) weights; b: bias.
    epsilon: ε of the release (pure DP).
    sensitivity: Δ₂ = 2C(1 + ρ) of the augmented weights (the plan's).
    noise_scale: Δ₂/ε, the Gamma scale of the noise norm.
    epochs: coordinate-descent epochs; gap: final projected-gradient gap.

  The noiseless solution is never a field here. ``epochs`` and ``gap``
  are the solver's, functions of the data that the guarantee does not
  cover: diagnostics, not for publication beside the model.
  """
  w: np.ndarray
  b: float
  epsilon: float
  sensitivity: float
  noise_scale: float
  epochs: int
  gap: float

  def decision_function(self, x) -> np.ndarray:
    return np.asarray(x, np.float64) @ self.w + self.b


def _check_fit_inputs(x, y, *, c, tol, max_epochs):
  """Host-side checks shared by the entry points; returns (x, y).

  Labels in {−1, +1}; one class alone is a legitimate (if trivial) fit,
  e.g. the one-row data sets of the audits. The private release requires
  both classes itself.
  """
  x = validation.check_matrix(x, "x")
  y = validation.check_labels(y, "y", classes=(-1, 1), num_examples=x.shape[0])
  validation.check_positive(c, "c")
  validation.check_positive(tol, "tol")
  validation.check_positive_int(max_epochs, "max_epochs")
  return x, y


def fit_linear(x, y, *, c: float, tol: float = 1e-8,
               max_epochs: int = 10_000) -> tuple[np.ndarray, int, float]:
  """Bias-free linear C-SVC on ``augment(x)``; returns (w̃, epochs, gap).

  Non-private; checks its data (finite, labels ±1) and settings itself.
  """
  x, y = _check_fit_inputs(x, y, c=c, tol=tol, max_epochs=max_epochs)
  with jax.enable_x64(True):
    state = _dual_cd(*_solver_args(x, y, c=c, tol=tol, max_epochs=max_epochs,
                                   target=np.inf))
    return (np.asarray(state.w), int(state.epoch), float(state.gap))


def _solver_args(x, y, *, c, tol, max_epochs, target):
  """:func:`_dual_cd`'s arguments on ``augment(x)``, float64 (under
  ``jax.enable_x64``)."""
  return (jnp.asarray(augment(x)), jnp.asarray(y, jnp.float64),
          jnp.asarray(c, jnp.float64), jnp.asarray(tol, jnp.float64),
          jnp.asarray(max_epochs, jnp.int32),
          jnp.asarray(target, jnp.float64))


def _certified_fit(x, y, *, plan, tol, max_epochs):
  """The release's solve: ŵ recomputed from α, the epochs, the
  projected-gradient gap, the certified duality gap and its rounding
  bound."""
  with jax.enable_x64(True):
    args = _solver_args(x, y, c=plan.c, tol=tol, max_epochs=max_epochs,
                        target=plan.gap_target)
    state = _dual_cd(*args)
    w, gap, rounding = jax.jit(_gap_terms)(args[0], args[1], args[2],
                                           state.alpha)
    return (np.asarray(w), int(state.epoch), float(state.gap),
            float(gap + rounding), float(rounding))


def release(key: jax.Array, plan: OutputPerturbationPlan, x, y, *,
            tol: float = 1e-8, max_epochs: int = 10_000,
            kernel="linear") -> LinearRelease | list[LinearRelease]:
  """Trains a linear C-SVC and releases (w, b) by output perturbation.

  Args:
    key: a PRNG key, or a batch (r,) of keys: r independent releases of
      the one (deterministic) training, one noise draw per key.
    plan: from :func:`make_plan` (its C is the C-SVC's).
    x: (n, d) rows with ‖x‖ ≤ 1 (refused otherwise; normalise per row
      first). Rows within ``check_row_norms``' tolerance above 1 are
      clipped to 1.
    y: labels in {−1, +1}, both present.
    tol: projected-gradient stopping tolerance of the solver (it also
      runs until the plan's certified duality gap is reached, so ``tol``
      does not bear on the guarantee).
    max_epochs: cap on coordinate-descent epochs.
    kernel: must be linear; anything else is refused.

  Returns:
    A :class:`LinearRelease` for one key; a list of r for a batch.

  Raises:
    TypeError: ``plan`` is not an :class:`OutputPerturbationPlan`, or
      ``key`` not a key (batch).
    ValueError: a non-linear kernel, bad data or settings.
    ConvergenceError: the solver stopped at ``max_epochs`` before its
      projected-gradient gap reached ``tol`` or its certified duality gap
      the plan's ``gap_target``, or earlier, once the rounding bound of
      that gap alone was above the target (nothing is released).

  Privacy: neighbouring data sets differ by replacing one row; with every
  ‖x‖ ≤ 1 the minimiser of ½‖w̃‖² + CΣhinge over x̃ = [x, 1]/√2 has L2
  sensitivity 2C, the certified solution 2C(1 + ρ), so adding noise
  ∝ exp(−ε‖b‖/(2C(1 + ρ))) makes (w, b) ε-DP (pure; module docstring).
  Each key is one release: ``plan.record(ledger, count=r)`` for r keys.
  """
  if not isinstance(plan, OutputPerturbationPlan):
    raise TypeError(f"plan must be an output_perturbation."
                    f"OutputPerturbationPlan from make_plan, got "
                    f"{type(plan).__name__}.")
  if not math.isclose(plan.sensitivity,
                      sensitivity(plan.c) * (1.0 + plan.gap_fraction),
                      rel_tol=1e-12):
    raise ValueError(
        f"plan.sensitivity={plan.sensitivity} is not 2C(1 + gap_fraction) "
        f"for c={plan.c}, gap_fraction={plan.gap_fraction}: the noise would "
        f"not cover the gap the solver certifies; make the plan with "
        f"make_plan.")
  single = not _is_key_batch(key)
  keys = validation.check_key(key)[None] if single else key
  check_linear_kernel(kernel)
  x = _enforce_bound(validation.check_row_norms(x, "x"))
  y = validation.check_labels(y, "y", binary_pm1=True, num_examples=x.shape[0])
  _check_fit_inputs(x, y, c=plan.c, tol=tol, max_epochs=max_epochs)
  w_aug, epochs, gap, certified, rounding = _certified_fit(
      x, y, plan=plan, tol=tol, max_epochs=max_epochs)
  certified_ok = gap <= tol and certified <= plan.gap_target  # NaN: False
  if (not certified_ok and gap <= min(tol, EARLY_STOP_TOL)
      and rounding > plan.gap_target):
    raise ConvergenceError(
        f"the output-perturbation fit cannot be certified at this size: "
        f"the float64 rounding bound of its duality gap alone is "
        f"{rounding:.3g}, above the plan's target {plan.gap_target:.3g} "
        f"= (gap_fraction·C)²/2 (it grows about as n²C against a target "
        f"of order C²), found after {epochs} epochs. The model is not "
        f"released. Raise the plan's gap_fraction or its c, or train on "
        f"fewer rows.")
  if not certified_ok:
    raise ConvergenceError(
        f"the output-perturbation fit did not converge: projected-gradient "
        f"gap {gap:.3g} (tol={tol:g}), certified duality gap "
        f"{certified:.3g} (the plan's target {plan.gap_target:.3g}) after "
        f"{epochs} of max_epochs={max_epochs} epochs. The noise covers a "
        f"solution within gap_fraction·C of the exact minimiser, so the "
        f"model is not released. Raise max_epochs (a larger c needs more "
        f"epochs) or the plan's gap_fraction.")
  releases = []
  for one in keys:
    with jax.enable_x64(True):
      noisy = np.asarray(perturb(one, jnp.asarray(w_aug),
                                 sensitivity_l2=plan.sensitivity,
                                 epsilon=plan.target_epsilon))
    releases.append(LinearRelease(
        w=noisy[:-1] * BIAS_SCALE, b=float(noisy[-1] * BIAS_SCALE),
        epsilon=plan.epsilon, sensitivity=plan.sensitivity,
        noise_scale=plan.scale, epochs=epochs, gap=gap))
  return releases[0] if single else releases


def _enforce_bound(x: np.ndarray) -> np.ndarray:
  """Rows clipped to ‖x‖ ≤ 1 in float64: the proof's bound, enforced per
  row and data-independently (``check_row_norms`` lets rows within its
  tolerance of 1 through; rows of norm ≤ 1 are kept bit for bit)."""
  with jax.enable_x64(True):
    return np.asarray(clipping.clip_rows(jnp.asarray(x, jnp.float64)))


def _is_key_batch(key) -> bool:
  """True for a 1-D batch of keys (:func:`dpcore.validation.check_key`)."""
  try:
    validation.check_key(key, batch=True)
  except TypeError:
    return False
  return True


__all__ = [
    "BIAS_SCALE", "DEFAULT_GAP_FRACTION", "EARLY_STOP_TOL", "LinearRelease",
    "OutputPerturbationPlan", "RELATION", "augment", "certified_gap",
    "check_linear_kernel", "fit_linear", "make_plan", "perturb", "release",
    "sensitivity",
]
