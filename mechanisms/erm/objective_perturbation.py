"""Objective perturbation for linear classifiers (Chaudhuri et al. 2011).

The private classifier is the exact minimiser of a randomly tilted
regularised empirical risk,

  J(β) = (1/n) Σᵢ ℓ(yᵢ xᵢᵀβ) + (λ/2)‖β‖² + (1/n) bᵀβ + (θ/2)‖β‖²,

over the n = ``num_examples`` true rows, with ``b`` drawn with density
∝ exp(−(p/2)‖b‖) and (p, θ) from :func:`make_plan`. Two smooth losses
are supported: the Huber hinge (``"huber"``, h = 0.5 as in Wang et al.
2024, curvature bound c = 1/(2h)) and the logistic loss (``"logistic"``,
c = 1/4).

The minimiser is found with ``optax.lbfgs`` (Armijo backtracking line
search, see :func:`_lbfgs` for why not optax's default zoom search) in a
``lax.while_loop`` that stops when ‖∇J‖ ≤ ``tol`` (the plan's). The
fits run in float64: call under ``with jax.enable_x64(True):``, tracing
*and* calling, with float64 rows (in float32 the rounding bound below
exceeds the default tol, so no fit converges).

The solver's gap is accounted, not assumed away. Chaudhuri et al.'s
proof covers the exact minimiser β*; the solver returns β̂. J is
(λ+θ)-strongly convex, so ‖β̂ − β*‖ ≤ ‖∇J(β̂)‖/(λ+θ). A private fit
counts as converged when the computed ‖∇J(β̂)‖ ≤ tol, β̂ is finite,
‖b‖ ≤ B, and a bound on float64's rounding of that norm, taken at
‖b‖ = B, is ≤ tol too (:func:`rounding_bound`, from public numbers
only: n, the rows' count, d, λ, θ, c, tol and B). Then the true
‖∇J(β̂)‖ ≤ 2·tol and ‖β̂ − β*‖ ≤ r = 2·tol/(λ+θ). B = :func:`noise_cap`
is the point ‖b‖ exceeds with probability :data:`NOISE_CAP_TAIL`
(2⁻¹⁰⁰): on every data set the capped fit departs from the uncapped one
with at most that probability, which the plan records
(``record_truncation``: a δ of (1 + e^ε)·2⁻¹⁰⁰ per fit). Each released
fit is β̂ + z, with z of density ∝ exp(−(ε_g/r)‖z‖), its rate computed
inside the fit from ε_g, λ, θ and the tol the fit stops at (so it cannot
be sized for another tol). For every b, the laws of β̂ + z and β* + z
are then within e^{ε_g} of each other. With the fit's ε split as
ε_fit = ε_op + 2ε_g (``gap_fraction`` = 2ε_g/ε_fit, default 1 %), the
chain β̂(D) + z ≈ β*(D) + z ≈ β*(D′) + z ≈ β̂(D′) + z gives ε_fit for
the released fit: ε_g, then ε_op (objective perturbation, post-processed
by adding z), then ε_g. At λ = 0.01, tol = 1e-8 and ε_fit = 0.1, ‖z‖ is
about d·4·10⁻³.

What the chain needs and the ledger does not hold: every fit converges.
A fit that stops at ``max_iter`` (or goes non-finite) is not released:
:func:`release` raises :class:`ConvergenceError` on concrete values, and
under ``jit`` or ``vmap`` the caller checks ``converged``
(``federated.feddpdr`` does, and raises the same error). That refusal
depends on the data; if it happens with probability at most ρ on every
data set, the guarantee is (ε_fit, e^{ε_fit}·ρ) rather than ε_fit. The
library does not bound ρ; a refusal is always loud. Settings whose
rounding bound exceeds tol whatever the data are refused before any work
(:func:`release`, on concrete plans).

The one shape (:mod:`dpcore.shape`): :func:`make_plan` validates and
calibrates (p, θ) host-side into a frozen :class:`ObjectivePerturbationPlan`;
``plan.record(ledger)`` enters its fits in a ledger; :func:`release` draws
the noise and minimises::

  plan = op.make_plan(epsilon=0.5, num_examples=x.shape[0], lam=0.01)
  with jax.enable_x64(True):
    fit = op.release(key, plan, x64, y64)  # y in {−1, +1}
  plan.record(ledger)

Multi-class problems are one-vs-rest (a plan with ``num_classes=K``;
:func:`one_vs_rest` is the kernel, for (n, p, θ) given directly, e.g.
traced per participant): the K binary fits are one ``vmap`` with
independent noise. Each fit reads all rows, so K fits compose
sequentially: ``make_plan(epsilon=ε, num_classes=K)`` gives each fit
ε/K (``plan.epsilon_fit``), and the plan records the K fits, ε in all.
:func:`fit_nonprivate` is the noise-free fit (no release).

Privacy:
  Neighbouring data sets differ in one row (replacement, n fixed: the
  relation of Chaudhuri et al.). Requires ‖xᵢ‖ ≤ 1 for every row (refused
  by :func:`release` when concrete, and every row clipped inside it),
  |ℓ'| ≤ 1 and ℓ'' ≤ c (true for both losses), λ > 0, and a converged
  fit. The exact minimiser is ε_op-DP (Chaudhuri, Monteleoni & Sarwate
  2011, Theorem 9 / Algorithm 2); the released β̂ + z is ε_fit-DP
  (the solver's gap above).

References:
  Chaudhuri, Monteleoni & Sarwate, Differentially Private Empirical Risk
  Minimization, JMLR 12, 2011.
  Wang, Zhang, Liang, Wang & Liu, Differentially Private Support Vector
  Machines with Knowledge Aggregation, CMC 78(3), 2024 (Algorithm 3).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.stats

from dpcore import accounting, clipping, options, validation
from dpcore import noise as dp_noise

RELATION = options.Relation.REPLACE_ONE
"""The neighbouring relation objective perturbation is proven under."""
HUBER_H = 0.5


class ConvergenceError(RuntimeError):
  """A fit did not converge (iteration cap, non-finite β, the rounding
  bound or the noise cap): the privacy proof does not apply.

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
  options.parse(options.ERMLoss, loss, "loss")
  if loss == "huber":
    return 1.0 / (2.0 * validation.check_positive(h, "h"))
  return 0.25


DEFAULT_TOL = 1e-8
"""The fits' default gradient-norm tolerance."""
NOISE_CAP_TAIL = 2.0 ** -100
"""P[‖b‖ > B] for the cap B of :func:`noise_cap`, per fit."""
DEFAULT_GAP_FRACTION = 0.01
"""The default share of each fit's ε that covers the solver's gap."""


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["num_examples", "p", "theta", "lam", "epsilon",
                 "target_epsilon", "epsilon_fit", "delta", "gap_fraction",
                 "epsilon_gap"],
    meta_fields=["relation", "c", "loss", "h", "num_classes", "tol"])
@dataclasses.dataclass(frozen=True)
class ObjectivePerturbationPlan:
  """The public facts of objective-perturbation fits (see :func:`make_plan`).

  A pytree whose leaves are its numbers (n, p, θ, λ, ε_g and the
  budget); the loss, h, c, K and tol are static. Plans stack
  into a batch that ``vmap`` maps over (e.g. participants of different
  sizes), and under ``jax.jit`` plans that differ only in ε share one
  compiled program.

  Attributes:
    epsilon: the guarantee of one release (all its :attr:`fits` fits), as
      a ledger holding :meth:`record`'s entry reports it (pure DP:
      :attr:`fits` × ``epsilon_fit``); at most ``target_epsilon``.
    target_epsilon: the budget of one release (``make_plan``'s
      ``epsilon``).
    epsilon_fit: ε of each released fit, ``target_epsilon`` /
      :attr:`fits`: (1 − ``gap_fraction``)·ε_fit calibrates p and θ, the
      rest covers the solver's gap (module docstring).
    delta: 0: each fit is ε_fit-DP given convergence, but for the noise
      cap (module docstring), which :meth:`record` enters as a truncation
      of probability 2⁻¹⁰⁰ per fit.
    relation: replace-one (:data:`RELATION`), the relation of the proof.
    num_examples: n, the true number of rows (public under replace-one).
    p: the ε' of Chaudhuri et al.; the noise density is ∝ exp(−(p/2)‖b‖).
    theta: the extra ridge Δ (0 when p > 0 at the first try).
    lam: the regularisation λ > 0.
    c: the curvature bound of the loss (:func:`curvature_bound`).
    loss: ``"huber"`` or ``"logistic"``.
    h: the Huber width.
    num_classes: None: one binary fit on labels ±1. K ≥ 2: one-vs-rest on
      class ids 0 … K−1 (:attr:`fits` fits).
    tol: the fits stop, and count as converged, at ‖∇J‖ ≤ tol.
    gap_fraction: 2ε_g/ε_fit, the share of each fit's ε that covers the
      solver's gap.
    epsilon_gap: ε_g = ``gap_fraction``·ε_fit/2, the ε of each side of
      the solver's gap.
  """
  epsilon: float
  target_epsilon: float
  epsilon_fit: float
  delta: float
  relation: options.Relation
  num_examples: int
  p: float
  theta: float
  lam: float
  c: float
  loss: str = "huber"
  h: float = HUBER_H
  num_classes: int | None = None
  tol: float = DEFAULT_TOL
  gap_fraction: float = DEFAULT_GAP_FRACTION
  epsilon_gap: float | None = None

  @property
  def gap_rate(self) -> float:
    """ε_g/r, r = 2·tol/(λ+θ): the gap noise z of each released fit has
    density ∝ exp(−gap_rate·‖z‖) (:func:`gap_rate`)."""
    return gap_rate(epsilon_gap=self.epsilon_gap, tol=self.tol,
                    lam=self.lam, theta=self.theta)

  @property
  def fits(self) -> int:
    """Fits per release: 1 for a binary plan or K = 2, else K."""
    if self.num_classes is None or self.num_classes == 2:
      return 1
    return self.num_classes

  def record(self, ledger, *, label: str = "objective_perturbation",
             count: int = 1) -> None:
    """Puts ``count`` releases in ``ledger``: :attr:`fits` fits of
    ``epsilon_fit`` each per release (one pure entry), and the noise cap
    of those fits (one truncation entry, ``label + "_noise_cap"``,
    probability 2⁻¹⁰⁰ per fit).

    Replace-one neighbours; each released fit converged (module
    docstring: ε_op for the exact minimiser and 2ε_g for the solver's
    gap, ``epsilon_fit`` in all).
    """
    count = validation.check_positive_int(count, "count")
    fits = count * self.fits
    ledger.record_pure(self.epsilon_fit, label=label, count=fits,
                       relation=self.relation)
    ledger.record_truncation(min(1.0, fits * NOISE_CAP_TAIL),
                             label=f"{label}_noise_cap")


def gap_rate(*, epsilon_gap: float, tol: float, lam: float,
             theta: float) -> float:
  """ε_g/r, r = 2·tol/(λ+θ): the rate of the noise that covers the gap
  between a converged fit and the exact minimiser (module docstring).

  A fit is converged when its computed ‖∇J‖ ≤ tol and the rounding of
  that norm is ≤ tol (:func:`rounding_bound`), so the true ‖∇J‖ ≤ 2·tol
  and, J being (λ+θ)-strongly convex, the fit is within r of the exact
  minimiser. Noise of density ∝ exp(−(ε_g/r)‖z‖) then keeps the laws of
  the two within e^{ε_g}.
  """
  return epsilon_gap * (lam + theta) / (2.0 * tol)


def noise_cap(p, dim: int):
  """B, the norm of b that the fits accept: P[‖b‖ > B] = 2⁻¹⁰⁰.

  ‖b‖ ~ Gamma(dim, 2/p), so B = (2/p)·q with q the Gamma(dim, 1) point
  of upper tail :data:`NOISE_CAP_TAIL` (SciPy, host-side, ``dim`` being
  static). ``p`` may be traced; p = ∞ (no noise) gives B = 0.
  """
  q = float(scipy.stats.gamma.isf(NOISE_CAP_TAIL, dim))
  return 2.0 * q / p


def rounding_bound(*, num_examples, rows: int, dim: int, lam, theta,
                   b_norm, tol, c: float, dtype):
  """A bound on the rounding of a computed ‖∇J(β)‖ at a fit where it is
  ≤ ``tol``, from public numbers only (and ``b_norm``: a private fit
  passes the cap B of :func:`noise_cap`, never ‖b‖ itself).

  ∇J = (1/n) Σᵢ mᵢℓ′ᵢyᵢxᵢ + (λ+θ)β + b/n over the ``rows`` rows (mask
  mᵢ ∈ [0, 1], ‖xᵢ‖ ≤ 1, |ℓ′| ≤ 1), so the data term has norm
  ≤ a = rows/n and its sum's rounding is at most about rows·u·a whatever
  the order of summation (u the unit roundoff). The other two terms have
  norm at most a + ‖b‖/n + tol where the computed gradient is ≤ tol. A
  row's margin yᵢxᵢᵀβ is rounded by about d·u·‖β‖, which moves ℓ′ by at
  most c times that, with ‖β‖ ≤ (a + ‖b‖/n + tol)/(λ+θ). The bound
  takes 8u = 4·eps per operation:

    4·eps·[(rows + d + 16)·s + c·d·a·s/(λ+θ)],  s = a + ‖b‖/n + tol.

  In float64 at n = rows = 60,000, d = 784, λ = 0.01 and small ‖b‖/n it
  is about 1.3e-10, far below the default tol = 1e-8; in float32 it is
  about 7e-2, so float32 fits never count as converged at that tol.
  """
  eps = jnp.finfo(dtype).eps
  a = rows / num_examples
  s = a + b_norm / num_examples + tol
  return 4.0 * eps * ((rows + dim + 16.0) * s
                      + c * dim * a * s / (lam + theta))


def make_plan(*, epsilon: float, num_examples: int, lam: float,
              loss: str = "huber", h: float = HUBER_H,
              num_classes: int | None = None, tol: float = DEFAULT_TOL,
              gap_fraction: float = DEFAULT_GAP_FRACTION
              ) -> ObjectivePerturbationPlan:
  """Validates objective perturbation and calibrates p, θ (host-side).

  Each fit's ε_fit = ε/K (K fits of a one-vs-rest plan, else ε_fit = ε)
  is split: ε_op = (1 − ``gap_fraction``)·ε_fit for the exact minimiser,
  ε_g = ``gap_fraction``·ε_fit/2 for each side of the solver's gap
  (module docstring). Algorithm 2 of Chaudhuri et al. (2011) for ε′ =
  ε_op and n = ``num_examples``: p = ε′ − log(1 + 2c/(nλ) + c²/(n²λ²));
  if p > 0 then θ = 0, otherwise θ = c/(n(e^{ε′/4} − 1)) − λ and
  p = ε′/2. The gap noise's rate is :func:`gap_rate` (``plan.gap_rate``).

  Args:
    epsilon: ε > 0, the budget of one release: its K fits get ε/K each
      (the plan's ``epsilon_fit``; one fit, ε, for a binary plan or
      K = 2).
    num_examples: n, the true number of rows.
    lam: regularisation λ > 0.
    loss: ``"huber"`` (default) or ``"logistic"``.
    h: Huber width > 0.
    num_classes: None (default) for one binary fit on labels ±1; K ≥ 2
      for one-vs-rest on class ids (K fits, one when K = 2).
    tol: the gradient-norm tolerance the fits stop at (finite, > 0); the
      gap noise is sized for it.
    gap_fraction: the share of each fit's ε that covers the solver's gap,
      in (0, 1).

  Returns:
    An :class:`ObjectivePerturbationPlan`.

  Raises:
    ValueError: one line naming the argument and the fix.
  """
  epsilon = validation.check_epsilon(epsilon)
  n = validation.check_positive_int(num_examples, "num_examples")
  lam = validation.check_positive(lam, "lam")
  tol = validation.check_positive(tol, "tol")
  gap_fraction = validation.check_positive(gap_fraction, "gap_fraction")
  if gap_fraction >= 1.0:
    raise ValueError(f"gap_fraction must be in (0, 1): the share of each "
                     f"fit's epsilon that covers the solver's gap, got "
                     f"{gap_fraction}.")
  c = curvature_bound(loss, h=h)  # also checks loss and h
  if num_classes is not None:
    num_classes = validation.check_positive_int(num_classes, "num_classes")
    if num_classes < 2:
      raise ValueError(f"num_classes must be >= 2 (or None for a binary "
                       f"fit on labels ±1), got {num_classes}.")
  fits = 1 if num_classes is None or num_classes == 2 else num_classes
  eps_fit = epsilon / fits
  eps_op = (1.0 - gap_fraction) * eps_fit
  ratio = c / (n * lam)
  p = eps_op - math.log1p(2.0 * ratio + ratio * ratio)
  theta = 0.0
  if p <= 0:
    theta = c / (n * math.expm1(eps_op / 4.0)) - lam
    p = eps_op / 2.0
  plan = ObjectivePerturbationPlan(None, epsilon, eps_fit, 0.0, RELATION, n,
                                   p, theta, lam, c, loss, h, num_classes,
                                   tol, gap_fraction,
                                   gap_fraction * eps_fit / 2.0)
  return dataclasses.replace(plan, epsilon=accounting.plan_epsilon(plan))


def perturbation_noise(key: jax.Array, dim: int, *, p, num: int | None = None,
                       dtype=jnp.float64) -> jax.Array:
  """b ∈ R^dim with density ∝ exp(−(p/2)‖b‖): ‖b‖ ~ Gamma(dim, 2/p).

  ``num`` independent vectors, shape (num, dim), from one sampler call
  (:func:`dpcore.noise.objective_perturbation_noise`).
  """
  return dp_noise.objective_perturbation_noise(key, dim, beta=p / 2.0,
                                               num=num, dtype=dtype)


def objective(beta, x, y, mask, *, num_examples, lam, theta, b, loss: str,
              h: float = HUBER_H):
  """J(β) of the module docstring (n = ``num_examples``); masked rows
  (padding) contribute 0."""
  n = num_examples
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
    converged: ``grad_norm ≤ tol`` with its rounding bound ≤ tol, β
      finite and, for a private fit, ‖b‖ within its cap
      (:func:`minimise`).
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


def minimise(x, y, mask, *, num_examples, lam, theta, b,
             loss: str = "huber",
             h: float = HUBER_H, tol: float = DEFAULT_TOL,
             max_iter: int = 500, b_cap=None) -> FitResult:
  """Minimises J with L-BFGS until ‖∇J‖ ≤ tol or ``max_iter`` iterations.

  Pure and vmappable: ``num_examples``, ``lam``, ``theta`` and ``b`` may
  be traced
  (one value per participant or class under ``vmap``); ``loss``, ``h``,
  ``tol`` and ``max_iter`` are static. The dtype follows ``x``. Under
  ``vmap`` the loop runs until the slowest fit stops; finished fits are
  left unchanged.

  Args:
    x: (n_max, k) rows, ‖x‖ ≤ 1 assumed (not checked inside jit).
    y: (n_max,) labels in {−1, +1}.
    mask: (n_max,) 1 for real rows, 0 for padding.
    num_examples: n, the true number of rows (Σ mask).
    lam: λ.
    theta: extra ridge θ.
    b: (k,) linear perturbation (zeros for a non-private fit).
    loss: ``"huber"`` or ``"logistic"``.
    h: Huber width.
    tol: stop when ‖∇J‖ ≤ tol.
    max_iter: iteration cap (reaching it leaves ``converged`` False).
    b_cap: None: the rounding bound is taken at ‖b‖ (a non-private fit).
      A number B: taken at B, and ``converged`` also needs ‖b‖ ≤ B (a
      private fit, :func:`noise_cap`: then whether a fit converges does
      not depend on ‖b‖ but for the 2⁻¹⁰⁰ event).

  ``converged`` holds where the computed ‖∇J‖ ≤ tol, its rounding is
  ≤ tol too (:func:`rounding_bound`: then the true ‖∇J‖ ≤ 2·tol) and β
  is finite.
  """
  dtype = x.dtype
  y = y.astype(dtype)
  mask = mask.astype(dtype)
  b = b.astype(dtype)

  def fun(beta):
    return objective(beta, x, y, mask, num_examples=num_examples, lam=lam,
                     theta=theta, b=b,
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
  b_norm = jnp.linalg.norm(b)
  rounding = rounding_bound(
      num_examples=num_examples, rows=x.shape[0], dim=x.shape[-1], lam=lam,
      theta=theta, b_norm=b_norm if b_cap is None else b_cap, tol=tol,
      c=curvature_bound(loss, h=h), dtype=dtype)
  converged = ((grad_norm <= tol) & (rounding <= tol)
               & jnp.all(jnp.isfinite(final.beta)))
  if b_cap is not None:
    converged = converged & (b_norm <= b_cap)
  return FitResult(final.beta, grad_norm, final.iteration, converged)


def release(key: jax.Array, plan: ObjectivePerturbationPlan, x, y,
            mask=None, *, max_iter: int = 500) -> FitResult:
  """The plan's private fit(s): draws b, minimises J to the plan's tol,
  adds the gap noise z.

  Pure, jittable and vmappable. Concrete arguments are checked host-side
  (rows finite and of norm ≤ 1, the labels, n against the rows); inside,
  rows are clipped to ‖x‖ ≤ 1 and the mask to [0, 1] (NaN → 0) all the
  same (per row, no-ops on valid input), so every row enters the loss at
  most once with the bound the proof needs, whatever the input. The dtype
  follows ``x``: run in float64 (module docstring).

  Args:
    key: PRNG key (consumed). A one-vs-rest plan draws its K noise
      vectors together, row c for class c (:func:`one_vs_rest`).
    plan: from :func:`make_plan`.
    x: (n_max, k) rows with ‖x‖ ≤ 1.
    y: (n_max,) labels: ±1 for a binary plan, class ids in [0, K) for a
      one-vs-rest plan.
    mask: (n_max,) 1 for real rows (Σ mask = ``plan.num_examples``);
      None: all rows are real (n_max = ``plan.num_examples``).
    max_iter: L-BFGS iteration cap.

  Returns:
    A :class:`FitResult` whose ``beta`` is the released β̂ + z (the
    other fields describe β̂); with a leading axis of size :attr:`fits`
    for a one-vs-rest plan.

  Raises:
    TypeError: ``plan`` is not an :class:`ObjectivePerturbationPlan`, or
      ``key`` not a key.
    ValueError: an invalid argument (named in the message).
    ConvergenceError: on concrete values, a fit is not converged
      (:func:`minimise`: stopped at ``max_iter``, went non-finite, or the
      rounding bound exceeds ``plan.tol``). Under ``jit``/``vmap``
      nothing can raise: release ``beta`` only where ``converged``.

  Privacy:
    ``plan.epsilon_fit``-DP per fit, ``plan.epsilon`` for all
    :attr:`fits` fits together, under replacement of one row, given
    λ > 0 and convergence (module docstring);
    :meth:`ObjectivePerturbationPlan.record` accounts it.
  """
  if not isinstance(plan, ObjectivePerturbationPlan):
    raise TypeError(f"plan must be an objective_perturbation."
                    f"ObjectivePerturbationPlan from make_plan, got "
                    f"{type(plan).__name__}.")
  validation.check_key(key)
  max_iter = validation.check_positive_int(max_iter, "max_iter")
  validation.check_rows(x, "x")
  rows = jnp.shape(x)[0]
  if validation.is_concrete(x):
    validation.check_row_norms(x, "x")
  if validation.is_concrete(y):
    if plan.num_classes is None:
      validation.check_labels(y, "y", binary_pm1=True, num_examples=rows)
    else:
      validation.check_labels(y, "y", classes=range(plan.num_classes),
                              num_examples=rows)
  if mask is None:
    mask = jnp.ones(rows, jnp.result_type(x))
    if validation.is_concrete(plan.num_examples) and (
        rows != plan.num_examples):
      raise ValueError(f"x has {rows} rows but the plan was made for "
                       f"num_examples={plan.num_examples}; make the plan "
                       f"with num_examples=x.shape[0].")
  check_rounding(plan, rows=rows, dim=jnp.shape(x)[1],
                 dtype=jnp.result_type(x))
  result = _release(key, plan, x, y, mask, max_iter=max_iter)
  if validation.is_concrete(result) and not bool(
      np.all(np.asarray(result.converged))):
    raise _not_converged(result, tol=plan.tol, max_iter=max_iter,
                         private=True, dtype=jnp.result_type(x))
  return result


def check_rounding(plan: ObjectivePerturbationPlan, *, rows: int, dim: int,
                   dtype=jnp.float64) -> None:
  """Refuses, before any work, a concrete plan whose rounding bound at
  the noise cap (:func:`rounding_bound`, :func:`noise_cap`) exceeds its
  tol for fits on ``rows`` rows of dimension ``dim``: no such fit could
  converge, whatever the data. :func:`release` calls it; a caller of
  :func:`one_vs_rest` (``federated.feddpdr``) calls it host-side.

  Raises:
    ValueError: one line naming the bound and the fix (a larger tol).
  """
  if not validation.is_concrete((plan.p, plan.theta, plan.num_examples,
                                 plan.epsilon_gap)):
    return
  if plan.epsilon_gap is None:
    raise ValueError("plan.epsilon_gap is None: make the plan with "
                     "make_plan, which splits each fit's epsilon.")
  bound = float(rounding_bound(
      num_examples=float(plan.num_examples), rows=rows, dim=dim,
      lam=plan.lam, theta=plan.theta, b_norm=noise_cap(plan.p, dim),
      tol=plan.tol, c=plan.c, dtype=dtype))
  if not bound <= plan.tol:
    raise ValueError(
        f"tol={plan.tol:g} is below the {jnp.dtype(dtype).name} rounding "
        f"bound {bound:.3g} of ‖∇J‖ for these settings (n={plan.num_examples}"
        f", {rows} rows, d={dim}, p={plan.p:.3g}), so no fit could be "
        f"certified: make the plan with a larger tol"
        + ("." if jnp.dtype(dtype) == jnp.float64 else
           ", or run in float64 (`with jax.enable_x64(True):`, float64 "
           "rows)."))


def _release(key, plan, x, y, mask, *, max_iter) -> FitResult:
  """The kernel of :func:`release` (no checks)."""
  fit = dict(num_examples=plan.num_examples, p=plan.p, theta=plan.theta,
             epsilon_gap=plan.epsilon_gap, lam=plan.lam, loss=plan.loss,
             h=plan.h, tol=plan.tol, max_iter=max_iter)
  if plan.num_classes is not None:
    return one_vs_rest(key, x, y, mask, num_classes=plan.num_classes, **fit)
  # |y| = 1 is part of the bound the proof needs (|ℓ′·y|·‖x‖ ≤ 1): a
  # traced label is mapped to ±1 here, as one_vs_rest does, since only a
  # concrete one can be refused.
  signs = jnp.where(y > 0, 1.0, -1.0)[None]
  return jax.tree.map(lambda a: a[0],
                      _private_fits(key, x, signs, mask, **fit))


def _private_fits(key, x, signs, mask, *, num_examples, p, theta,
                  epsilon_gap, lam, loss, h, tol, max_iter) -> FitResult:
  """F private fits on the same rows, one per row of ``signs`` (F, n_max)
  of ±1 labels: rows and mask bounded, noise b for each fit's objective,
  each converged β̂ released as β̂ + z, z's rate from ε_g and the tol the
  fits stop at (module docstring)."""
  x, mask = _enforce_bounds(x, mask)
  fits, dim = signs.shape[0], x.shape[-1]
  b_key, z_key = jax.random.split(key)
  b = perturbation_noise(b_key, dim, p=p, num=fits, dtype=x.dtype)
  rate = gap_rate(epsilon_gap=epsilon_gap, tol=tol, lam=lam, theta=theta)
  z = dp_noise.objective_perturbation_noise(z_key, dim, beta=rate,
                                            num=fits, dtype=x.dtype)
  cap = noise_cap(p, dim)

  def one(b_c, y):
    return minimise(x, y.astype(x.dtype), mask, num_examples=num_examples,
                    lam=lam, theta=theta, b=b_c, loss=loss, h=h, tol=tol,
                    max_iter=max_iter, b_cap=cap)

  result = jax.vmap(one)(b, signs)
  return result._replace(beta=result.beta + z)


def _not_converged(result, *, tol, max_iter, private,
                   dtype=jnp.float64) -> ConvergenceError:
  worst = int(np.argmax(np.asarray(result.grad_norm).reshape(-1)))
  grad_norm = float(np.asarray(result.grad_norm).reshape(-1)[worst])
  iterations = int(np.asarray(result.iterations).reshape(-1)[worst])
  if grad_norm <= tol:  # the rounding bound, the cap or a non-finite β
    return ConvergenceError(
        f"the {'private' if private else 'non-private'} fit reached "
        f"‖∇J‖ = {grad_norm:.3g} <= tol={tol:g}, but the rounding bound of "
        f"that norm exceeds tol, the noise b exceeds its cap (probability "
        f"2^-100), or β is not finite, so its distance to the exact "
        f"minimiser is not bounded and the model is not released. Raise "
        f"tol, or run in float64 (`with jax.enable_x64(True):`, float64 "
        f"rows).")
  return ConvergenceError(
      f"the {'private' if private else 'non-private'} fit did not "
      f"converge: ‖∇J‖ = {grad_norm:.3g} > tol={tol:g} after "
      f"{iterations} of max_iter={max_iter} iterations. The privacy proof "
      f"needs ‖∇J‖ ≤ tol (a fit within 2·tol/(λ+θ) of the minimiser), so "
      f"the model is not "
      f"released. Raise max_iter; at a very small epsilon the noise b and "
      f"the extra ridge θ are huge and the solver may not reach tol at all."
      + ("" if jnp.dtype(dtype) == jnp.float64 else
         f" The rows are {jnp.dtype(dtype).name}, where ‖∇J‖ rarely gets "
         f"below tol: call it under `with jax.enable_x64(True):` with "
         f"float64 rows."))


def _enforce_bounds(x, mask):
  """Rows clipped to ‖x‖ ≤ 1 and the mask to [0, 1] (NaN → 0): per row,
  data-independent, a no-op on valid input (the proof's bounds)."""
  return clipping.clip_rows(x), clipping.clip_weights(mask)


def one_vs_rest(key: jax.Array, x, labels, mask, *, num_classes: int,
                num_examples, p, theta, lam, epsilon_gap=None,
                loss: str = "huber", h: float = HUBER_H,
                tol: float = DEFAULT_TOL, max_iter: int = 500,
                private: bool = True) -> FitResult:
  """K one-vs-rest fits as one ``vmap`` (a single fit when K = 2).

  The kernel a one-vs-rest plan's :func:`release` runs, for n, p, θ and
  ε_g given directly (e.g. traced, one per participant, as in
  ``federated.feddpdr``, whose checked entry point it is): no
  validation, no raising inside jit. A direct caller takes p, θ and
  ``epsilon_gap`` from a plan made for this ``lam`` (the gap noise's rate
  follows from them and the ``tol`` given here) and must check every
  ``converged`` before releasing the models. ``private=False`` is the
  noise-free fit (b = 0, θ = 0, z = 0, no clipping).

  Args:
    key: PRNG key. Split in two: the K noise vectors b are drawn together
      from the first, row c for class c, and the K gap noises z from the
      second (one sampler call each instead of K, which keeps the
      vmapped program small).
    x: (n_max, k) rows with ‖x‖ ≤ 1.
    labels: (n_max,) class indices in [0, K).
    mask: (n_max,) 1 for real rows.
    num_classes: K ≥ 2. For K = 2 one classifier separates class 1 (+1)
      from class 0 (−1).
    num_examples, p, theta, lam, epsilon_gap: n, the true rows, and p,
      θ, λ and ε_g of a plan (:class:`ObjectivePerturbationPlan`);
      ``epsilon_gap`` is required when ``private``.
    tol: the fits stop, and the gap noise is sized, at ‖∇J‖ ≤ tol.

  Returns:
    FitResult with a leading axis of size K (or 1 when K = 2); ``beta``
    is the released β̂ + z.

  Privacy:
    Each fit is as in :func:`release` (``epsilon_fit``-DP under
    replacement of one row, given convergence); the K fits read the same
    rows, so together they are K·``epsilon_fit``-DP (sequential
    composition).
  """
  fits = 1 if num_classes == 2 else num_classes
  targets = jnp.arange(fits) + (1 if num_classes == 2 else 0)
  signs = jnp.where(labels[None] == targets[:, None], 1.0, -1.0)
  if private:
    if epsilon_gap is None:
      raise ValueError("one_vs_rest(private=True) needs epsilon_gap, the "
                       "epsilon of each side of the solver's gap: take it "
                       "from the plan (plan.epsilon_gap).")
    return _private_fits(key, x, signs, mask, num_examples=num_examples,
                         p=p, theta=theta, epsilon_gap=epsilon_gap, lam=lam,
                         loss=loss, h=h, tol=tol, max_iter=max_iter)

  def one(y):
    return minimise(x, y.astype(x.dtype), mask, num_examples=num_examples,
                    lam=lam, theta=0.0, b=jnp.zeros(x.shape[-1], x.dtype),
                    loss=loss, h=h, tol=tol, max_iter=max_iter)

  return jax.vmap(one)(signs)


def decision_scores(x, betas, num_classes: int):
  """(m, K) class scores for OvR models ``betas`` of shape (K or 1, k)."""
  scores = x @ betas.T
  if num_classes == 2:
    return jnp.concatenate([-scores, scores], axis=-1)
  return scores


def fit_nonprivate(x, y, *, lam: float, loss: str = "huber",
                   h: float = HUBER_H, tol: float = DEFAULT_TOL,
                   max_iter: int = 500) -> FitResult:
  """The noise-free fit (b = 0, θ = 0): checked, in float64. Not private.

  Validates its inputs like :func:`release` (rows of norm ≤ 1, labels
  ±1), minimises J under float64 and raises :class:`ConvergenceError`
  unless ‖∇J‖ ≤ ``tol``: the baseline a private fit is compared with.

  Args:
    x: (n, d) data, every row of L2 norm ≤ 1.
    y: (n,) labels in {−1, +1}.
    lam: λ > 0.
    loss: ``"huber"`` or ``"logistic"``.
    h: Huber width > 0.
    tol: gradient-norm tolerance, finite and > 0.
    max_iter: L-BFGS iteration cap, a positive integer.

  Returns:
    The :class:`FitResult` (host arrays).

  Raises:
    ValueError: an invalid argument (named in the message).
    ConvergenceError: the fit stopped before ‖∇J‖ ≤ ``tol``.
  """
  curvature_bound(loss, h=h)  # checks loss and h > 0
  tol = validation.check_positive(tol, "tol")
  max_iter = validation.check_positive_int(max_iter, "max_iter")
  x = validation.check_row_norms(x, "x")
  y = validation.check_labels(y, "y", binary_pm1=True, num_examples=x.shape[0])
  lam = validation.check_positive(lam, "lam")
  n = x.shape[0]
  with jax.enable_x64(True):
    xd = jnp.asarray(np.asarray(x, np.float64))
    result = jax.jit(minimise, static_argnames=(
        "loss", "h", "tol", "max_iter"))(
            xd, jnp.asarray(y, jnp.float64), jnp.ones(n, jnp.float64),
            num_examples=float(n), lam=lam, theta=0.0,
            b=jnp.zeros(xd.shape[-1], jnp.float64), loss=loss, h=h, tol=tol,
            max_iter=max_iter)
    result = jax.device_get(result)
  if not bool(result.converged):
    raise _not_converged(result, tol=tol, max_iter=max_iter, private=False)
  return result


__all__ = [
    "ConvergenceError", "DEFAULT_GAP_FRACTION", "DEFAULT_TOL", "FitResult",
    "HUBER_H", "NOISE_CAP_TAIL", "ObjectivePerturbationPlan", "RELATION",
    "check_rounding", "curvature_bound", "decision_scores", "fit_nonprivate",
    "gap_rate", "huber_loss", "logistic_loss", "make_plan", "minimise",
    "noise_cap", "objective", "one_vs_rest", "perturbation_noise", "release",
    "rounding_bound",
]
