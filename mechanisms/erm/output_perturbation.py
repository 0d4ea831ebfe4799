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
L1-loss SVM) to a projected-gradient tolerance; the DP proof assumes the
exact minimiser, so ``tol`` should be small.

Only the linear kernel has a finite-dimensional w to perturb; any other
kernel is refused (its model stores training rows as support vectors).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dpcore import noise as dp_noise
from dpcore import validation

BIAS_SCALE = 1.0 / math.sqrt(2.0)


def check_linear_kernel(kernel) -> None:
  """Raises unless ``kernel`` (a KernelSpec or its name) is linear."""
  kind = getattr(kernel, "kind", kernel)
  if kind != "linear":
    raise ValueError(
        f"output perturbation needs the linear kernel, got {kind!r}: a "
        f"non-linear kernel SVM stores training rows as support vectors and "
        f"has no finite weight vector to perturb. Use kernel='linear' or "
        f"release='none' (which is not private).")


def sensitivity(c: float) -> float:
  """L2 sensitivity 2C of the bias-free C-SVC minimiser (‖x‖ ≤ 1)."""
  return 2.0 * validation.check_positive(c, "c")


def perturb(key: jax.Array, weights: jax.Array, *, sensitivity_l2: float,
            epsilon: float) -> jax.Array:
  """weights + noise of density ∝ exp(−ε‖b‖/Δ₂).

  Privacy: ε-DP for the weights when ``sensitivity_l2`` bounds their L2
  change between neighbouring data sets (Chaudhuri et al. 2011, Thm 6).
  """
  validation.check_key(key)
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


@jax.jit
def _dual_cd(x, y, c, tol, max_epochs):
  """Bias-free L1-loss SVM dual, cyclic coordinate descent."""
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
    return _CDState(alpha, w, state.epoch + 1, pg_max - pg_min)

  def cond(state):
    return (state.gap > tol) & (state.epoch < max_epochs)

  init = _CDState(jnp.zeros(x.shape[0], x.dtype), jnp.zeros(x.shape[1],
                                                              x.dtype),
                  jnp.zeros((), jnp.int32), jnp.asarray(jnp.inf, x.dtype))
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
    sensitivity: Δ₂ = 2C of the augmented weights.
    noise_scale: Δ₂/ε, the Gamma scale of the noise norm.
    epochs: coordinate-descent epochs; gap: final projected-gradient gap.
    exact_w, exact_b: the noiseless solution (for diagnostics only; never
      release them).
  """
  w: np.ndarray
  b: float
  epsilon: float
  sensitivity: float
  noise_scale: float
  epochs: int
  gap: float
  exact_w: np.ndarray
  exact_b: float

  def decision_function(self, x) -> np.ndarray:
    return np.asarray(x, np.float64) @ self.w + self.b


def _check_fit_inputs(x, y, *, c, tol, max_epochs):
  """Host-side checks shared by the entry points; returns (x, y).

  Labels in {−1, +1}; one class alone is a legitimate (if trivial) fit,
  e.g. the one-row data sets of the audits. The private release requires
  both classes itself.
  """
  x = validation.check_matrix(x, "x")
  y = validation.check_labels(y, "y", classes=(-1, 1), n_rows=x.shape[0])
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
    state = _dual_cd(jnp.asarray(augment(x)), jnp.asarray(y, jnp.float64),
                     jnp.asarray(c, jnp.float64),
                     jnp.asarray(tol, jnp.float64),
                     jnp.asarray(max_epochs, jnp.int32))
    return (np.asarray(state.w), int(state.epoch), float(state.gap))


def private_linear_svm(key: jax.Array, x, y, *, c: float, epsilon: float,
                       tol: float = 1e-8, max_epochs: int = 10_000,
                       kernel="linear") -> LinearRelease:
  """Trains a linear C-SVC and releases (w, b) by output perturbation.

  Args:
    key: PRNG key for the noise (used once).
    x: (n, d) rows with ‖x‖ ≤ 1 (enforced; normalise per row first).
    y: labels in {−1, +1}.
    c: C > 0.
    epsilon: ε of the release.
    tol: projected-gradient stopping tolerance of the solver.
    max_epochs: cap on coordinate-descent epochs.
    kernel: must be linear; anything else is refused.

  Returns:
    :class:`LinearRelease`.

  Privacy: neighbouring data sets differ by replacing one row; with every
  ‖x‖ ≤ 1 the minimiser of ½‖w̃‖² + CΣhinge over x̃ = [x, 1]/√2 has L2
  sensitivity 2C, so adding noise ∝ exp(−ε‖b‖/(2C)) makes (w, b) ε-DP
  (pure), assuming the exact minimiser (``tol`` bounds the deviation).
  """
  validation.check_key(key)
  return private_linear_svms(key[None], x, y, c=c, epsilon=epsilon, tol=tol,
                             max_epochs=max_epochs, kernel=kernel)[0]


def private_linear_svms(keys: jax.Array, x, y, *, c: float, epsilon: float,
                        tol: float = 1e-8, max_epochs: int = 10_000,
                        kernel="linear") -> list[LinearRelease]:
  """Independent releases, one per key, of one (deterministic) training.

  Same arguments as :func:`private_linear_svm` except ``keys`` (k,).
  Each release on its own is ε-DP; publishing k of them costs k·ε.
  """
  validation.check_key(keys, "keys", batch=True)
  check_linear_kernel(kernel)
  epsilon = validation.check_epsilon(epsilon)
  x = validation.check_row_norms(x, "x")
  y = validation.check_labels(y, "y", binary_pm1=True, n_rows=x.shape[0])
  delta2 = sensitivity(c)
  w_aug, epochs, gap = fit_linear(x, y, c=c, tol=tol, max_epochs=max_epochs)
  releases = []
  for key in keys:
    with jax.enable_x64(True):
      noisy = np.asarray(perturb(key, jnp.asarray(w_aug),
                                 sensitivity_l2=delta2, epsilon=epsilon))
    releases.append(LinearRelease(
        w=noisy[:-1] * BIAS_SCALE, b=float(noisy[-1] * BIAS_SCALE),
        epsilon=epsilon, sensitivity=delta2, noise_scale=delta2 / epsilon,
        epochs=epochs, gap=gap, exact_w=w_aug[:-1] * BIAS_SCALE,
        exact_b=float(w_aug[-1] * BIAS_SCALE)))
  return releases


def record(ledger, *, epsilon: float, count: int = 1,
           label: str = "output_perturbation"):
  """Enters ``count`` releases of :func:`private_linear_svm` in ``ledger``.

  Each release is pure ε-DP (replace-one, ‖x‖ ≤ 1, see
  :func:`private_linear_svm`); ``count`` releases computed from the same
  data compose. The mechanism states its own cost: callers record through
  this function, never with a hand-written entry.

  Args:
    ledger: a :class:`dpcore.accounting.PrivacyLedger`.
    epsilon: ε of each release (as passed to the release).
    count: releases published from the same data.
    label: the entry's label.

  Returns:
    ``ledger`` (the entry added).
  """
  ledger.record_pure(validation.check_epsilon(epsilon), label=label,
                     count=validation.check_positive_int(count, "count"))
  return ledger
