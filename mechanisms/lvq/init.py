"""Prototype initialisation for G(M)LVQ: class means, exact or private.

The private version (Brinkrolf et al. 2018, Sec. 3) releases the class
counts N_j and the class sums S_j = Σ_{c(x)=j} x with Laplace noise and
sets each prototype to S̃_j / Ñ_j. Data must lie in the box [−1, 1]^d
(see :func:`check_box`; :func:`dpcore.clipping.scale_to_box` maps public
bounds onto it and clips every coordinate).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import calibration, clipping, noise, options, validation
from dpcore.accounting import PrivacyLedger

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


def private_prototypes(key: jax.Array, x, y, *, num_classes: int, epsilon,
                       prototypes_per_class: int = 1, min_count: float = 1.0,
                       jitter: float = 0.01) -> jax.Array:
  """Class means from Laplace-noised counts and sums (jit/vmap-friendly).

  Args:
    key: PRNG key (consumed).
    x: (n, d) data in [−1, 1]^d (checked host-side by :func:`check_box`;
      clipped to the box here too, so the sensitivity holds for any input).
    y: (n,) class indices in 0..k−1.
    num_classes: k (public).
    epsilon: ε₁ of the whole initialisation (may be traced).
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
  clipping are post-processing. Record with :func:`record_private_init`.

  Raises:
    TypeError, ValueError: by :func:`check_init_inputs`, or a concrete
      ``epsilon`` that is not finite and > 0.
  """
  check_init_inputs(key, x, y, num_classes)
  validation.check_scale(epsilon, "epsilon", allow_zero=False)
  d = x.shape[1]
  x = clipping.clip_to_box(x)  # per row, data-independent; no-op in the box
  count_key, sum_key, spread_key = jax.random.split(key, 3)
  one_hot = jax.nn.one_hot(y, num_classes, dtype=x.dtype)
  counts = jnp.sum(one_hot, axis=0)
  sums = one_hot.T @ x
  noisy_counts = counts + noise.laplace_noise(
      count_key, counts.shape, scale=2.0 / epsilon, dtype=x.dtype)
  noisy_sums = sums + noise.laplace_noise(
      sum_key, sums.shape, scale=2.0 * d / epsilon, dtype=x.dtype)
  means = noisy_sums / jnp.maximum(noisy_counts, min_count)[:, None]
  means = jnp.clip(means, -1.0, 1.0)
  return _spread(spread_key, means, prototypes_per_class, jitter)


def gaussian_private_prototypes(key: jax.Array, x, y, *, num_classes: int,
                                noise_multiplier,
                                prototypes_per_class: int = 1,
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
    x: (n, d) data in [−1, 1]^d (clipped to the box here).
    y: (n,) class indices.
    num_classes: k.
    noise_multiplier: σ_init, the noise std per unit of L2 sensitivity.
    prototypes_per_class, min_count, jitter: as in
      :func:`private_prototypes`.

  Privacy: the Gaussian mechanism with noise multiplier σ_init on a query
  of L2 sensitivity √(1 + d) (add/remove-one); (ε₁, δ₁)-DP for σ_init from
  ``calibration.gaussian_sigma_analytic(ε₁, δ₁, 1)``. Record with
  :func:`record_gaussian_init`.

  Raises:
    TypeError, ValueError: by :func:`check_init_inputs`, or a concrete
      ``noise_multiplier`` that is not finite and ≥ 0.
  """
  check_init_inputs(key, x, y, num_classes)
  validation.check_scale(noise_multiplier, "noise_multiplier")
  d = x.shape[1]
  x = clipping.clip_to_box(x)  # per row, data-independent; no-op in the box
  count_key, sum_key, spread_key = jax.random.split(key, 3)
  one_hot = jax.nn.one_hot(y, num_classes, dtype=x.dtype)
  counts = jnp.sum(one_hot, axis=0)
  sums = one_hot.T @ x
  stddev = noise_multiplier * jnp.sqrt(jnp.asarray(1.0 + d, x.dtype))
  noisy_counts = counts + noise.gaussian_noise(
      count_key, counts.shape, stddev=stddev, dtype=x.dtype)
  noisy_sums = sums + noise.gaussian_noise(
      sum_key, sums.shape, stddev=stddev, dtype=x.dtype)
  means = noisy_sums / jnp.maximum(noisy_counts, min_count)[:, None]
  means = jnp.clip(means, -1.0, 1.0)
  return _spread(spread_key, means, prototypes_per_class, jitter)


def record_gaussian_init(ledger: PrivacyLedger, *, noise_multiplier: float,
                         dim: int, delta: float) -> None:
  """Records :func:`gaussian_private_prototypes` (stand-alone δ ``delta``)."""
  sens = float(np.sqrt(1.0 + validation.check_positive_int(dim, "dim")))
  ledger.record_gaussian(sigma=noise_multiplier * sens, sensitivity=sens,
                         delta=delta, label="init_gaussian_counts_sums",
                         relation=RELATION)


def record_private_init(ledger: PrivacyLedger, *, epsilon: float, dim: int
                        ) -> None:
  """Records the two Laplace releases of :func:`private_prototypes`."""
  epsilon = validation.check_epsilon(epsilon, "epsilon_init")
  dim = validation.check_positive_int(dim, "dim")
  half = epsilon / 2.0
  ledger.record_laplace(
      scale=calibration.laplace_scale(epsilon=half, sensitivity=1.0),
      sensitivity=1.0, label="init_class_counts", relation=RELATION)
  ledger.record_laplace(
      scale=calibration.laplace_scale(epsilon=half, sensitivity=float(dim)),
      sensitivity=float(dim), label="init_class_sums", relation=RELATION)
