"""Objective perturbation for linear classifiers (Chaudhuri et al. 2011).

The private classifier is the exact minimiser of a randomly tilted
regularised empirical risk,

  J(β) = (1/n) Σᵢ ℓ(yᵢ xᵢᵀβ) + (λ/2)‖β‖² + (1/n) bᵀβ + (θ/2)‖β‖²,

with ``b`` drawn with density ∝ exp(−(p/2)‖b‖) and (p, θ) from
:func:`perturbation_params`. Two smooth losses are supported: the Huber
hinge (``"huber"``, h = 0.5 as in Wang et al. 2024, curvature bound
c = 1/(2h)) and the logistic loss (``"logistic"``, c = 1/4).

The minimiser is found with ``optax.lbfgs`` (Armijo backtracking line
search, see :func:`_lbfgs` for why not optax's default zoom search) in a
``lax.while_loop`` that stops when ‖∇J‖ ≤ ``tol``. J is (λ+θ)-strongly
convex, so the returned β lies within ‖∇J(β)‖/(λ+θ) of the exact
minimiser: with the default ``tol = 1e-8`` and λ = 0.01 that is ≤ 1e-6 in
L2 norm. Run the solver in float64 (``with jax.enable_x64(True):``
around tracing *and* calling, as :func:`fit` does); float32 cannot reach
1e-8 reliably. A fit that reaches ``max_iter`` is reported through
``converged = False``; callers must treat it as an error, because the
privacy proof assumes the exact minimiser. The checked entry points do:
:func:`fit` (and ``federated.feddpdr.run``) raise :class:`ConvergenceError`.

Multi-class problems are one-vs-rest (:func:`one_vs_rest`): the K binary
fits are one ``vmap`` with independent noise keys. Each fit reads all rows,
so K fits at ε each cost K·ε under sequential composition; the caller
chooses the per-classifier ε (e.g. ε₂/K for a total of ε₂).

Privacy:
  Neighbouring data sets differ in one row (replacement, n fixed: the
  relation of Chaudhuri et al.). Requires ‖xᵢ‖ ≤ 1 for every row (enforced
  by :func:`fit`; the pipeline clips projected rows per row), |ℓ'| ≤ 1 and
  ℓ'' ≤ c (true for both losses), λ > 0, and the exact minimiser. Then the
  released β is ε-DP for the ε given to :func:`perturbation_params`
  (Chaudhuri, Monteleoni & Sarwate 2011, Theorem 9 / Algorithm 2).

References:
  Chaudhuri, Monteleoni & Sarwate, Differentially Private Empirical Risk
  Minimization, JMLR 12, 2011.
  Wang, Zhang, Liang, Wang & Liu, Differentially Private Support Vector
  Machines with Knowledge Aggregation, CMC 78(3), 2024 (Algorithm 3).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpcore import clipping, validation
from dpcore import noise as dp_noise

LOSSES = ("huber", "logistic")
HUBER_H = 0.5


class ConvergenceError(RuntimeError):
  """A fit stopped at its iteration cap: the privacy proof does not apply.

  Its message names the setting to change; launch scripts report it in one
  line (``reported_in_one_line``, read by ``launch.common.run_cli``).
  """
  reported_in_one_line = True


def huber_loss(z, *, h: float = HUBER_H):
  """Huber hinge of the margin z = y xᵀβ (Chapelle 2007).

  0 for z > 1 + h, (1 + h − z)²/(4h) for |1 − z| ≤ h, 1 − z for z < 1 − h.
  """
  quad = (1.0 + h - z) ** 2 / (4.0 * h)
  return jnp.where(z > 1.0 + h, 0.0, jnp.where(z < 1.0 - h, 1.0 - z, quad))


def logistic_loss(z):
  """log(1 + e^{−z}), computed stably."""
  return jnp.logaddexp(0.0, -z)


def curvature_bound(loss: str, *, h: float = HUBER_H) -> float:
  """c with ℓ'' ≤ c: 1/(2h) for the Huber hinge, 1/4 for logistic."""
  if loss == "huber":
    return 1.0 / (2.0 * validation.check_positive(h, "h"))
  if loss == "logistic":
    return 0.25
  raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}.")


@dataclasses.dataclass(frozen=True)
class PerturbationParams:
  """Host-side parameters of one objective-perturbation fit.

  Attributes:
    p: the ε' of Chaudhuri et al.; the noise density is ∝ exp(−(p/2)‖b‖).
    theta: the extra ridge Δ (0 when p > 0 at the first try).
    epsilon: the ε the fit is private for.
    c: curvature bound of the loss.
  """
  p: float
  theta: float
  epsilon: float
  c: float


def perturbation_params(*, epsilon: float, n: int, lam: float,
                        c: float) -> PerturbationParams:
  """p and θ of Algorithm 2 of Chaudhuri et al. (2011).

  p = ε − log(1 + 2c/(nλ) + c²/(n²λ²)); if p > 0 then θ = 0, otherwise
  θ = c/(n(e^{ε/4} − 1)) − λ and p = ε/2.

  Args:
    epsilon: privacy parameter of this fit.
    n: the participant's true number of rows.
    lam: regularisation λ > 0.
    c: curvature bound of the loss (:func:`curvature_bound`).
  """
  epsilon = validation.check_epsilon(epsilon)
  n = validation.check_positive_int(n, "n")
  lam = validation.check_positive(lam, "lam")
  c = validation.check_positive(c, "c")
  ratio = c / (n * lam)
  p = epsilon - math.log1p(2.0 * ratio + ratio * ratio)
  if p > 0:
    return PerturbationParams(p=p, theta=0.0, epsilon=epsilon, c=c)
  theta = c / (n * math.expm1(epsilon / 4.0)) - lam
  return PerturbationParams(p=epsilon / 2.0, theta=theta, epsilon=epsilon,
                            c=c)


def record(ledger, *, epsilon: float, count: int = 1,
           label: str = "objective_perturbation") -> None:
  """Puts ``count`` ε-DP fits (replace-one neighbours) into ``ledger``.

  ``epsilon`` is the ε given to :func:`perturbation_params` for each fit;
  the guarantee assumes each released fit converged (module docstring).
  """
  ledger.record_pure(epsilon, label=label, count=count)


def perturbation_noise(key: jax.Array, dim: int, *, p, num: int | None = None,
                       dtype=jnp.float64) -> jax.Array:
  """b ∈ R^dim with density ∝ exp(−(p/2)‖b‖): ‖b‖ ~ Gamma(dim, 2/p).

  ``num`` independent vectors, shape (num, dim), from one sampler call
  (:func:`dpcore.noise.objective_perturbation_noise`).
  """
  return dp_noise.objective_perturbation_noise(key, dim, beta=p / 2.0,
                                               num=num, dtype=dtype)


def objective(beta, x, y, mask, *, n, lam, theta, b, loss: str,
              h: float = HUBER_H):
  """J(β) of the module docstring; masked rows (padding) contribute 0."""
  z = y * (x @ beta)
  if loss == "huber":
    per_row = huber_loss(z, h=h)
  else:
    per_row = logistic_loss(z)
  data = jnp.sum(mask * per_row) / n
  ridge = 0.5 * (lam + theta) * jnp.sum(beta * beta)
  return data + ridge + jnp.dot(b, beta) / n


class FitResult(NamedTuple):
  """Outcome of one minimisation.

  Attributes:
    beta: the minimiser found, shape (k,).
    grad_norm: ‖∇J(β)‖ at ``beta``.
    iterations: L-BFGS iterations used.
    converged: ``grad_norm ≤ tol`` (False also for a non-finite result).
  """
  beta: jax.Array
  grad_norm: jax.Array
  iterations: jax.Array
  converged: jax.Array


# Absolute slack of the Armijo test, per dtype (see _lbfgs).
_ARMIJO_ATOL = {"float64": 1e-11, "float32": 1e-4}


class _LoopState(NamedTuple):
  beta: jax.Array
  opt_state: optax.OptState
  value: jax.Array
  grad: jax.Array
  iteration: jax.Array


def _lbfgs(dtype) -> optax.GradientTransformationExtraArgs:
  """optax L-BFGS with an Armijo backtracking line search, free of lax.cond.

  optax's default zoom line search branches with ``lax.cond``; under
  ``vmap`` (fits batched over classes, participants and repeats) a cond
  with a batched predicate becomes a select that broadcasts every operand,
  including the closed-over data, to the batch size — at MNIST scale tens
  of GB and most of the run time. Backtracking without a stored gradient
  needs only ``while_loop`` and ``where``. J is strongly convex, so every
  step satisfies the curvature condition sᵀy ≥ (λ+θ)‖s‖² > 0 that L-BFGS
  needs, and Armijo backtracking from the unit step suffices.

  Near the minimiser the decrease the Armijo test asks for (of the order
  of ‖∇J‖²/(λ+θ), ~1e-14 at ‖∇J‖ = 1e-8) falls below the rounding of J
  itself, so the test can fail at every trial step: the search then ran
  all 40 backtracking steps (40 more evaluations of J) in iteration after
  iteration, and under ``vmap`` every fit waited for the slowest. The test
  therefore allows an increase of ``_ARMIJO_ATOL`` (1e-11 in float64: well
  above J's rounding for |J| up to ~1e3, well below any decrease that
  matters away from the minimiser). Convergence is still judged by
  ‖∇J‖ ≤ tol at the point returned.
  """
  linesearch = optax.scale_by_backtracking_linesearch(
      max_backtracking_steps=40, store_grad=False, increase_factor=1e9,
      max_learning_rate=1.0, atol=_ARMIJO_ATOL[jnp.dtype(dtype).name])
  return optax.lbfgs(linesearch=linesearch)


def minimise(x, y, mask, *, n, lam, theta, b, loss: str = "huber",
             h: float = HUBER_H, tol: float = 1e-8,
             max_iter: int = 500) -> FitResult:
  """Minimises J with L-BFGS until ‖∇J‖ ≤ tol or ``max_iter`` iterations.

  Pure and vmappable: ``n``, ``lam``, ``theta`` and ``b`` may be traced
  (one value per participant or class under ``vmap``); ``loss``, ``h``,
  ``tol`` and ``max_iter`` are static. The dtype follows ``x``. Under
  ``vmap`` the loop runs until the slowest fit stops; finished fits are
  left unchanged.

  Args:
    x: (n_max, k) rows, ‖x‖ ≤ 1 assumed (not checked inside jit).
    y: (n_max,) labels in {−1, +1}.
    mask: (n_max,) 1 for real rows, 0 for padding.
    n: true number of rows (Σ mask).
    lam: λ.
    theta: extra ridge θ.
    b: (k,) linear perturbation (zeros for a non-private fit).
    loss: ``"huber"`` or ``"logistic"``.
    h: Huber width.
    tol: stop when ‖∇J‖ ≤ tol.
    max_iter: iteration cap (reaching it leaves ``converged`` False).
  """
  dtype = x.dtype
  y = y.astype(dtype)
  mask = mask.astype(dtype)
  b = b.astype(dtype)

  def fun(beta):
    return objective(beta, x, y, mask, n=n, lam=lam, theta=theta, b=b,
                     loss=loss, h=h)

  solver = _lbfgs(dtype)
  beta0 = jnp.zeros(x.shape[-1], dtype)
  value_and_grad = jax.value_and_grad(fun)
  init = _LoopState(beta0, solver.init(beta0), *value_and_grad(beta0),
                    jnp.asarray(0, jnp.int32))

  def cond(state):
    return (state.iteration < max_iter) & (
        jnp.linalg.norm(state.grad) > tol)

  def body(state):
    updates, opt_state = solver.update(
        state.grad, state.opt_state, state.beta, value=state.value,
        grad=state.grad, value_fn=fun)
    beta = optax.apply_updates(state.beta, updates)
    # Value and gradient at the new point are computed here rather than
    # taken from the line search: that keeps lax.cond out (see _lbfgs).
    return _LoopState(beta, opt_state, *value_and_grad(beta),
                      state.iteration + 1)

  final = jax.lax.while_loop(cond, body, init)
  # The gradient at the returned point, recomputed (not the line search's).
  grad_norm = jnp.linalg.norm(jax.grad(fun)(final.beta))
  converged = (grad_norm <= tol) & jnp.all(jnp.isfinite(final.beta))
  return FitResult(final.beta, grad_norm, final.iteration, converged)


def objective_perturbation(key: jax.Array, x, y, mask, *, n, p, theta, lam,
                           loss: str = "huber", h: float = HUBER_H,
                           tol: float = 1e-8, max_iter: int = 500,
                           private: bool = True) -> FitResult:
  """One private binary fit: draws b, then minimises J.

  A raw, jit/vmap-friendly kernel: it validates nothing and never raises.
  The checked entry points are :func:`fit` (one data set) and
  ``federated.feddpdr.run`` (participants); whoever calls this kernel
  directly must validate the arguments host-side and check
  ``converged`` before releasing ``beta``: a fit that did not converge
  carries no privacy guarantee.

  ``p`` and ``theta`` come from :func:`perturbation_params` (host-side) and
  may be traced. ``private=False`` gives the non-private fit (b = 0, θ = 0).

  Returns:
    A :class:`FitResult`; release ``beta`` only when ``converged``.

  Privacy:
    ε-DP under replacement of one row, for the ε that produced (p, θ),
    given λ > 0 and convergence (see the module docstring). Rows are
    clipped to ‖x‖ ≤ 1 and the mask to [0, 1] (NaN → 0) first (per row,
    no-ops on valid input), so every row enters the loss at most once with
    the bound the proof needs, whatever the input.
  """
  dim = x.shape[-1]
  if private:
    x, mask = _enforce_bounds(x, mask)
    b = perturbation_noise(key, dim, p=p, dtype=x.dtype)
  else:
    b = jnp.zeros(dim, x.dtype)
    theta = 0.0
  return minimise(x, y, mask, n=n, lam=lam, theta=theta, b=b, loss=loss,
                  h=h, tol=tol, max_iter=max_iter)


def _enforce_bounds(x, mask):
  """Rows clipped to ‖x‖ ≤ 1 and the mask to [0, 1] (NaN → 0): per row,
  data-independent, a no-op on valid input (the proof's bounds)."""
  return clipping.clip_rows(x), clipping.clip_weights(mask)


def one_vs_rest(key: jax.Array, x, labels, mask, *, num_classes: int, n, p,
                theta, lam, loss: str = "huber", h: float = HUBER_H,
                tol: float = 1e-8, max_iter: int = 500,
                private: bool = True) -> FitResult:
  """K one-vs-rest fits as one ``vmap`` (a single fit when K = 2).

  A raw kernel like :func:`objective_perturbation`: no validation, no
  raising inside jit. ``federated.feddpdr.run`` is its checked entry
  point; a direct caller must check every ``converged`` before releasing
  the models.

  Args:
    key: PRNG key. The K noise vectors are drawn together, row c for
      class c (``perturbation_noise(key, k, p=p, num=K)``): one sampler
      call instead of K, which keeps the vmapped program small.
    x: (n_max, k) rows with ‖x‖ ≤ 1.
    labels: (n_max,) class indices in [0, K).
    mask: (n_max,) 1 for real rows.
    num_classes: K ≥ 2. For K = 2 one classifier separates class 1 (+1)
      from class 0 (−1).
    n, p, theta, lam: as in :func:`objective_perturbation` (p, θ for the
      per-classifier ε).

  Returns:
    FitResult with a leading axis of size K (or 1 when K = 2).

  Privacy:
    Each fit is as in :func:`objective_perturbation` (ε-DP under
    replacement of one row, given convergence); the K fits read the same
    rows, so together they are K·ε-DP (sequential composition).
  """
  fits = 1 if num_classes == 2 else num_classes
  targets = jnp.arange(fits) + (1 if num_classes == 2 else 0)
  dim = x.shape[-1]
  if private:
    x, mask = _enforce_bounds(x, mask)
    b = perturbation_noise(key, dim, p=p, num=fits, dtype=x.dtype)
  else:
    b = jnp.zeros((fits, dim), x.dtype)
    theta = 0.0

  def one(b_c, target):
    y = jnp.where(labels == target, 1.0, -1.0).astype(x.dtype)
    return minimise(x, y, mask, n=n, lam=lam, theta=theta, b=b_c, loss=loss,
                    h=h, tol=tol, max_iter=max_iter)

  return jax.vmap(one)(b, targets)


def decision_scores(x, betas, num_classes: int):
  """(m, K) class scores for OvR models ``betas`` of shape (K or 1, k)."""
  scores = x @ betas.T
  if num_classes == 2:
    return jnp.concatenate([-scores, scores], axis=-1)
  return scores


def fit(key: jax.Array, x, y, *, epsilon: float | None, lam: float,
        loss: str = "huber", h: float = HUBER_H, tol: float = 1e-8,
        max_iter: int = 500) -> tuple[FitResult, PerturbationParams | None]:
  """Checked, float64, single-data-set binary fit (labels ±1).

  Validates inputs before tracing, refuses rows of norm > 1, computes
  (p, θ), runs :func:`objective_perturbation` under float64, and raises
  :class:`ConvergenceError` unless the fit converged (‖∇J‖ ≤ ``tol``), so
  a returned fit is always one the guarantee covers. ``epsilon=None``
  gives the non-private fit (held to the same convergence test).

  Args:
    key: PRNG key (consumed).
    x: (n, d) data, every row of L2 norm ≤ 1.
    y: (n,) labels in {−1, +1}.
    epsilon: ε > 0 of the fit, or None for the non-private fit.
    lam: λ > 0.
    loss: ``"huber"`` or ``"logistic"``.
    h: Huber width > 0.
    tol: gradient-norm tolerance, finite and > 0.
    max_iter: L-BFGS iteration cap, a positive integer.

  Returns:
    ``(FitResult, PerturbationParams or None)``.

  Raises:
    ValueError: an invalid argument (named in the message).
    ConvergenceError: the fit stopped at ``max_iter`` (or went non-finite)
      before ‖∇J‖ ≤ ``tol``.

  Privacy:
    ε-DP under replacement of one row (module docstring); the release is
    refused when the minimiser was not reached.
  """
  validation.check_key(key)
  if loss not in LOSSES:
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}.")
  c = curvature_bound(loss, h=h)  # also checks h > 0
  tol = validation.check_positive(tol, "tol")
  max_iter = validation.check_positive_int(max_iter, "max_iter")
  x = validation.check_row_norms(x, "x")
  y = validation.check_labels(y, "y", binary_pm1=True, n_rows=x.shape[0])
  lam = validation.check_positive(lam, "lam")
  n = x.shape[0]
  params = None
  if epsilon is not None:
    params = perturbation_params(epsilon=epsilon, n=n, lam=lam, c=c)
  with jax.enable_x64(True):
    xd = jnp.asarray(np.asarray(x, np.float64))
    result = jax.jit(
        objective_perturbation,
        static_argnames=("loss", "h", "tol", "max_iter", "private"))(
            key, xd, jnp.asarray(y, jnp.float64), jnp.ones(n, jnp.float64),
            n=float(n), p=params.p if params else 1.0,
            theta=params.theta if params else 0.0, lam=lam, loss=loss, h=h,
            tol=tol, max_iter=max_iter, private=params is not None)
    result = jax.device_get(result)
  if not bool(result.converged):
    raise ConvergenceError(
        f"the {'private' if params else 'non-private'} fit did not "
        f"converge: ‖∇J‖ = {float(result.grad_norm):.3g} > tol={tol:g} "
        f"after {int(result.iterations)} of max_iter={max_iter} "
        f"iterations. The privacy proof assumes the exact minimiser, so "
        f"the model is not released. Raise max_iter; at a very small "
        f"epsilon the noise b and the extra ridge θ are huge and the "
        f"solver may not reach tol at all.")
  return result, params
