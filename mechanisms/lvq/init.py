"""Prototype initialisation for G(M)LVQ: class means, exact or private.

The private version (Brinkrolf et al. 2018, Sec. 3) releases the class
counts N_j and the class sums S_j = Σ_{c(x)=j} x with Laplace noise and
sets each prototype to S̃_j / Ñ_j. Data must lie in the box [−1, 1]^d
(see :func:`check_box`; :func:`dpcore.clipping.scale_to_box` maps public
bounds onto it and clips every coordinate).

Two mechanisms, each in the one shape (:mod:`dpcore.shape`): the paper's
Laplace initialisation (:func:`make_laplace_plan` → :class:`LaplacePlan`,
:func:`release_laplace`) and a Gaussian alternative
(:func:`make_gaussian_plan` → :class:`GaussianPlan`,
:func:`release_gaussian`). The exact class means
(:func:`class_mean_prototypes`) are the non-private reference.

>>> import jax, jax.numpy as jnp
>>> from dpcore import accounting
>>> x = jax.random.uniform(jax.random.key(0), (200, 3), minval=-1.0)
>>> y = jnp.arange(200) % 2
>>> plan = make_laplace_plan(epsilon=1.0, dim=3)
>>> release_laplace(jax.random.key(1), plan, x, y, num_classes=2).shape
(2, 3)
>>> ledger = accounting.PrivacyLedger()
>>> plan.record(ledger)
>>> round(ledger.guarantee(1e-5).epsilon, 6)
1.0
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import calibration, clipping, linalg, noise, options, validation
from dpcore.accounting import PrivacyLedger

__all__ = [
    "BOX_TOLERANCE", "GaussianPlan", "LaplacePlan", "RELATION",
    "check_box", "check_classes_present", "check_init_inputs",
    "class_mean_prototypes", "gaussian_means", "laplace_means",
    "make_gaussian_plan",
    "make_laplace_plan",
    "prototype_labels", "release_gaussian", "release_laplace",
]

RELATION = options.Relation.ADD_REMOVE
"""The private inits' relation: one row added or removed (counts, sums)."""

BOX_TOLERANCE = 1e-5


def check_box(x, name: str = "x", *, low: float = -1.0, high: float = 1.0
              ) -> np.ndarray:
  """Requires every coordinate of ``x`` to lie in [low, high].

  The Laplace sensitivity of the class sums assumes it. Out-of-box data is
  refused rather than silently rescaled; :func:`dpcore.clipping.scale_to_box`
  (an affine map of *public* bounds, then a per-coordinate clip) is the fix.
  """
  arr = validation.check_matrix(x, name)
  lo, hi = float(arr.min()), float(arr.max())
  if lo < low - BOX_TOLERANCE or hi > high + BOX_TOLERANCE:
    raise ValueError(
        f"{name} has values in [{lo:.6g}, {hi:.6g}], outside the declared "
        f"box [{low}, {high}] that the sensitivity of the private "
        f"initialisation assumes; map public feature bounds onto [-1, 1] "
        f"with dpcore.clipping.scale_to_box(x, (low, high)) (which also "
        f"clips every coordinate), never with bounds computed from the "
        f"private data.")
  return arr


def check_classes_present(y, num_classes: int, name: str = "y"
                          ) -> np.ndarray:
  """Requires labels in 0..k−1 and at least one row of every class.

  The class set is public; a class without training rows is a user error
  (its prototype would be pure noise). The check runs on the trusted
  curator's side before training; its outcome is not part of the release.
  """
  arr = validation.check_labels(y, name, classes=range(num_classes))
  counts = np.bincount(arr.astype(np.int64), minlength=num_classes)
  empty = np.flatnonzero(counts == 0).tolist()
  if empty:
    raise ValueError(
        f"{name} has no rows of class index {empty[:10]} (of {num_classes} "
        f"classes); every class needs training rows. Drop the class from "
        f"the class set or add data.")
  return arr


def prototype_labels(num_classes: int, prototypes_per_class: int = 1
                     ) -> jax.Array:
  """Class index of each prototype: [0, .., 0, 1, .., 1, ...]."""
  validation.check_positive_int(num_classes, "num_classes")
  validation.check_positive_int(prototypes_per_class, "prototypes_per_class")
  return jnp.repeat(jnp.arange(num_classes), prototypes_per_class)


def check_init_inputs(key, x, y, num_classes) -> int:
  """Checks of the initialisations, before tracing where they can be.

  Always (shapes and types are static): the key, ``x`` a non-empty
  (n, d) array, ``y`` of shape (n,), ``num_classes`` a positive integer.
  Where concrete (not traced): ``x`` finite and ``y`` class indices in
  0..k−1 (one-hot encoding would silently drop any other label). The
  box [−1, 1]^d is not required here (the private versions clip to it);
  :func:`check_box` is the stricter host-side check.
  """
  validation.check_key(key)
  validation.check_rows(x, "x")
  validation.check_vector(y, "y", jnp.shape(x)[0])
  num_classes = validation.check_positive_int(num_classes, "num_classes")
  if validation.is_concrete(y):
    validation.check_labels(np.asarray(y), "y", classes=range(num_classes))
  return num_classes


def _spread(key, means, prototypes_per_class, jitter):
  # Several prototypes of a class start at its mean plus small public noise
  # (data-independent), so they can separate.
  protos = jnp.repeat(means, prototypes_per_class, axis=0)
  if prototypes_per_class == 1:
    return protos
  return jnp.clip(protos + jitter * jax.random.normal(key, protos.shape),
                  -1.0, 1.0)


def class_mean_prototypes(key: jax.Array, x, y, *, num_classes: int,
                          prototypes_per_class: int = 1,
                          jitter: float = 0.01) -> jax.Array:
  """Exact class means (non-private), shape (k · prototypes_per_class, d).

  Inputs are checked by :func:`check_init_inputs`.
  """
  check_init_inputs(key, x, y, num_classes)
  one_hot = jax.nn.one_hot(y, num_classes, dtype=x.dtype)
  counts = jnp.sum(one_hot, axis=0)
  sums = one_hot.T @ x
  means = sums / jnp.maximum(counts, 1.0)[:, None]
  return _spread(key, means, prototypes_per_class, jitter)


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["epsilon", "delta"],
                   meta_fields=["relation", "dim"])
@dataclasses.dataclass(frozen=True)
class LaplacePlan:
  """The public facts of the Laplace initialisation.

  Made by :func:`make_laplace_plan`.

  Attributes:
    epsilon: ε₁ of the whole initialisation (ε₁/2 for the counts, ε₁/2
      for the sums).
    delta: 0 (pure ε-DP).
    relation: add/remove one row (:data:`RELATION`).
    dim: d; the class sums' L1 sensitivity (the counts' is 1).

  A pytree whose leaves are ε₁ and δ: under ``jax.jit`` a plan passed as
  an argument gives one compiled program for every ε₁.
  """
  epsilon: float
  delta: float
  relation: options.Relation
  dim: int

  @property
  def count_scale(self) -> float:
    """The counts' Laplace scale, 2/ε₁ (sensitivity 1 at ε₁/2)."""
    return 2.0 / self.epsilon

  @property
  def sum_scale(self) -> float:
    """The sums' Laplace scale, 2d/ε₁ (sensitivity d at ε₁/2)."""
    return 2.0 * self.dim / self.epsilon

  def record(self, ledger: PrivacyLedger) -> None:
    """Records the two Laplace releases (class counts, class sums)."""
    half = self.epsilon / 2.0
    ledger.record_laplace(
        scale=calibration.laplace_scale(epsilon=half, sensitivity=1.0),
        sensitivity=1.0, label="init_class_counts", relation=self.relation)
    ledger.record_laplace(
        scale=calibration.laplace_scale(epsilon=half,
                                        sensitivity=float(self.dim)),
        sensitivity=float(self.dim), label="init_class_sums",
        relation=self.relation)


def make_laplace_plan(*, epsilon: float, dim: int) -> LaplacePlan:
  """The paper's private initialisation at ε₁ on d features.

  Args:
    epsilon: ε₁ > 0 of the whole initialisation.
    dim: d, the features (rows in [−1, 1]^d).

  Returns:
    A :class:`LaplacePlan`; :func:`release_laplace` draws its noise and
    ``plan.record(ledger)`` accounts it.

  Raises:
    ValueError: ε₁ not finite and > 0, or d not a positive integer.

  Privacy: see :func:`release_laplace`.
  """
  epsilon = validation.check_epsilon(epsilon, "epsilon_init")
  dim = validation.check_positive_int(dim, "dim")
  return LaplacePlan(epsilon, 0.0, RELATION, dim)


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["epsilon", "delta", "noise_multiplier"],
                   meta_fields=["relation", "dim"])
@dataclasses.dataclass(frozen=True)
class GaussianPlan:
  """The public facts of the Gaussian initialisation.

  Made by :func:`make_gaussian_plan`.

  Attributes:
    epsilon: ε₁ the noise is calibrated for.
    delta: δ₁, its stand-alone δ.
    relation: add/remove one row (:data:`RELATION`).
    dim: d.
    noise_multiplier: σ_init, the noise std per unit of L2 sensitivity.

  A pytree whose leaves are ε₁, δ₁ and σ_init (as :class:`LaplacePlan`).
  """
  epsilon: float
  delta: float
  relation: options.Relation
  dim: int
  noise_multiplier: float

  @property
  def sensitivity(self) -> float:
    """√(1 + d): the L2 sensitivity of the counts and sums together."""
    return float(np.sqrt(1.0 + self.dim))

  def record(self, ledger: PrivacyLedger) -> None:
    """Records the one Gaussian release (stand-alone δ = ``delta``)."""
    sens = self.sensitivity
    ledger.record_gaussian(sigma=self.noise_multiplier * sens,
                           sensitivity=sens, delta=self.delta,
                           label="init_gaussian_counts_sums",
                           relation=self.relation)


def make_gaussian_plan(*, epsilon: float, delta: float,
                       dim: int) -> GaussianPlan:
  """The Gaussian initialisation, (ε₁, δ₁)-DP on d features.

  Args:
    epsilon: ε₁.
    delta: δ₁.
    dim: d.

  Returns:
    A :class:`GaussianPlan` whose σ_init is
    ``calibration.gaussian_sigma_analytic(ε₁, δ₁, 1)`` (per unit of
    sensitivity).

  Raises:
    ValueError: an argument out of range, named.

  Privacy: see :func:`release_gaussian`.
  """
  epsilon = validation.check_epsilon(epsilon, "epsilon_init")
  delta = validation.check_delta(delta)
  dim = validation.check_positive_int(dim, "dim")
  sigma = calibration.gaussian_sigma_analytic(epsilon=epsilon, delta=delta,
                                              sensitivity=1.0)
  return GaussianPlan(epsilon, delta, RELATION, dim, sigma)


def _check_plan(plan, kind, x):
  if not isinstance(plan, kind):
    raise TypeError(f"plan must be a {kind.__name__} (from make_"
                    f"{kind.__name__[:-4].lower()}_plan), got {plan!r}.")
  if jnp.shape(x)[1] != plan.dim:
    raise ValueError(f"x has {jnp.shape(x)[1]} features and the plan "
                     f"dim={plan.dim}; make the plan with dim=x.shape[1].")


@linalg.full_precision
def _noisy_means(count_key, sum_key, x, y, *, num_classes, min_count,
                 count_noise, sum_noise):
  """Class means of noisy counts and sums (``count_noise(key, shape)``,
  ``sum_noise(key, shape)`` added), floored and clipped to the box
  (post-processing). The rows are used as given: the callers clip."""
  one_hot = jax.nn.one_hot(y, num_classes, dtype=x.dtype)
  counts = jnp.sum(one_hot, axis=0)
  sums = one_hot.T @ x
  noisy_counts = counts + count_noise(count_key, counts.shape)
  noisy_sums = sums + sum_noise(sum_key, sums.shape)
  means = noisy_sums / jnp.maximum(noisy_counts, min_count)[:, None]
  return jnp.clip(means, -1.0, 1.0)


def laplace_means(count_key, sum_key, plan: LaplacePlan, x, y, *,
                  num_classes: int, min_count: float = 1.0) -> jax.Array:
  """The Laplace init's class means of rows ``x`` AS GIVEN (no clip).

  The noise step of :func:`release_laplace`: Laplace(2/ε₁) on the counts
  and Laplace(2d/ε₁) on the sums. Its guarantee needs rows in
  [−1, 1]^d, which :func:`release_laplace` enforces before calling it;
  on other rows it is not private (the audit's broken variant).
  """
  return _noisy_means(
      count_key, sum_key, x, y, num_classes=num_classes, min_count=min_count,
      count_noise=lambda k, shape: noise.laplace_noise(
          k, shape, scale=plan.count_scale, dtype=x.dtype),
      sum_noise=lambda k, shape: noise.laplace_noise(
          k, shape, scale=plan.sum_scale, dtype=x.dtype))


def release_laplace(key: jax.Array, plan: LaplacePlan, x, y, *,
                    num_classes: int, prototypes_per_class: int = 1,
                    min_count: float = 1.0,
                    jitter: float = 0.01) -> jax.Array:
  """Class means from Laplace-noised counts and sums (jit/vmap-friendly).

  Args:
    key: PRNG key (consumed).
    plan: from :func:`make_laplace_plan` (ε₁, d).
    x: (n, d) data in [−1, 1]^d (checked host-side by :func:`check_box`;
      clipped to the box here too, so the sensitivity holds for any input).
    y: (n,) class indices in 0..k−1.
    num_classes: k (public).
    prototypes_per_class: prototypes per class (all start at the noisy mean
      plus data-independent jitter).
    min_count: noisy counts are floored at this before dividing (guards
      tiny or negative counts; post-processing).
    jitter: std of the public jitter when several prototypes share a class.

  Returns:
    (k · prototypes_per_class, d) prototypes, clipped to [−1, 1]^d.

  Privacy: neighbouring data sets differ by adding or removing one row. The
  count histogram (N_1..N_k) has L1 sensitivity 1 and gets Laplace(2/ε₁);
  the class sums over [−1, 1]^d have L1 sensitivity d (one row changes one
  class's sum by at most 1 per coordinate) and get Laplace(2d/ε₁). Each is
  ε₁/2-DP, together ε₁-DP (basic composition); dividing, flooring and
  clipping are post-processing. ``plan.record(ledger)`` accounts it.

  Raises:
    TypeError, ValueError: by :func:`check_init_inputs`, a plan of another
      kind, or a plan for another d.
  """
  check_init_inputs(key, x, y, num_classes)
  _check_plan(plan, LaplacePlan, x)
  x = clipping.clip_to_box(x)  # per row, data-independent; no-op in the box
  count_key, sum_key, spread_key = jax.random.split(key, 3)
  means = laplace_means(count_key, sum_key, plan, x, y,
                        num_classes=num_classes, min_count=min_count)
  return _spread(spread_key, means, prototypes_per_class, jitter)


def gaussian_means(count_key, sum_key, plan: GaussianPlan, x, y, *,
                   num_classes: int, min_count: float = 1.0) -> jax.Array:
  """The Gaussian init's class means of rows ``x`` AS GIVEN (no clip).

  The noise step of :func:`release_gaussian`: N(0, (σ_init √(1 + d))²) on
  every count and sum. Its guarantee needs rows in [−1, 1]^d, which
  :func:`release_gaussian` enforces before calling it; on other rows it
  is not private (the audit's broken variant).
  """
  d = x.shape[1]
  stddev = plan.noise_multiplier * jnp.sqrt(jnp.asarray(1.0 + d, x.dtype))
  gaussian = lambda k, shape: noise.gaussian_noise(  # noqa: E731
      k, shape, stddev=stddev, dtype=x.dtype)
  return _noisy_means(count_key, sum_key, x, y, num_classes=num_classes,
                      min_count=min_count, count_noise=gaussian,
                      sum_noise=gaussian)


def release_gaussian(key: jax.Array, plan: GaussianPlan, x, y, *,
                     num_classes: int, prototypes_per_class: int = 1,
                     min_count: float = 1.0,
                     jitter: float = 0.01) -> jax.Array:
  """Class means from Gaussian-noised counts and sums (an alternative).

  Not the paper's mechanism: the counts and the class sums form one query
  whose L2 sensitivity is √(1 + d) (one row moves one count by 1 and one
  class sum by at most √d in L2 over [−1, 1]^d), far below the L1
  sensitivity d the Laplace version pays for each sum. Every entry gets
  N(0, (σ_init √(1 + d))²).

  Args:
    key: PRNG key (consumed).
    plan: from :func:`make_gaussian_plan` (σ_init, d).
    x: (n, d) data in [−1, 1]^d (clipped to the box here).
    y: (n,) class indices.
    num_classes: k.
    prototypes_per_class, min_count, jitter: as in
      :func:`release_laplace`.

  Privacy: the Gaussian mechanism with noise multiplier σ_init on a query
  of L2 sensitivity √(1 + d) (add/remove-one); (ε₁, δ₁)-DP, the plan's
  calibration. ``plan.record(ledger)`` accounts it.

  Raises:
    TypeError, ValueError: by :func:`check_init_inputs`, a plan of another
      kind, or a plan for another d.
  """
  check_init_inputs(key, x, y, num_classes)
  _check_plan(plan, GaussianPlan, x)
  x = clipping.clip_to_box(x)  # per row, data-independent; no-op in the box
  count_key, sum_key, spread_key = jax.random.split(key, 3)
  means = gaussian_means(count_key, sum_key, plan, x, y,
                         num_classes=num_classes, min_count=min_count)
  return _spread(spread_key, means, prototypes_per_class, jitter)
