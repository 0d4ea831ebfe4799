"""Normalising scattering features: per-example (free) or private data norm.

Two ways to put the K channels of (N, K, h, w) features on one scale, the
two that Tramèr & Boneh's ScatterNet models offer (their ``input_norm``:
``GroupNorm(num_groups, K, affine=False)`` or ``"BN"``, a standardisation
by privately estimated per-channel statistics):

* :func:`group_norm` — each example normalised by its own statistics over
  groups of consecutive channels. It reads one example only, so it is part
  of the per-example map in front of the model: it costs no privacy.
* Data normalisation, a mechanism of the one shape (:mod:`dpcore.shape`):
  :func:`make_plan` → :class:`DataNormPlan`, ``plan.record(ledger)``,
  :func:`release` → :class:`NormStats` (per-channel mean and variance of
  the training set, noisy), then :func:`standardize` (post-processing).

Data normalisation, exactly: for each example i, mᵢ ∈ R^K is its
per-channel spatial mean and sᵢ ∈ R^K its per-channel spatial mean of
squares. Each is clipped to an L2 norm bound (``clip_mean``,
``clip_square``: public constants, never computed from the data) and
divided by it, so aᵢ = clip(mᵢ)/C_m and bᵢ = clip(sᵢ)/C_s have norm ≤ 1.
The query is Σᵢ (aᵢ, bᵢ) ∈ R^{2K}; it gets N(0, σ²) noise on every
coordinate. The mean is C_m·(noisy Σa)/n and the second moment
C_s·(noisy Σb)/n, with n the plan's ``num_examples`` — a public number
(the same convention as DP-SGD's divisor qN), not the count of the rows
passed (the release refuses rows of another count). The variance is
max(second moment − mean², 0).

Privacy:
  Add/remove one example: the query moves by (aᵢ, bᵢ), of L2 norm ≤ √2
  whatever the data (the clipping is inside :func:`release`); replace
  one: by the difference of two such vectors, ≤ 2√2. The noisy sums are
  the Gaussian mechanism at σ for that sensitivity, (ε, δ)-DP with the ε
  of :func:`make_plan` (analytic calibration, exact for every ε); the
  mean, variance and standardised features are post-processing of them
  and of the public (n, C_m, C_s). The standardised *training* features
  are not themselves a release: a model trained on them (e.g. by DP-SGD)
  must be private on its own, and its ledger composes with this one's
  entry (:meth:`DataNormPlan.record`).

References:
  Tramèr & Boneh, Differentially Private Learning Needs Better Features
  (or Much More Data), ICLR 2021 (ScatterNet models; data normalisation,
  Section 3 and Appendix).
  Wu & He, Group Normalization, ECCV 2018.
  Balle & Wang, Improving the Gaussian Mechanism for Differential
  Privacy, ICML 2018.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpcore import accounting, calibration, clipping, options, validation
from dpcore import noise as dp_noise

__all__ = [
    "DataNormPlan", "NormStats", "group_norm", "make_plan", "noisy_sums",
    "release", "sensitivity", "standardize",
]


def group_norm(features, *, num_groups: int, eps: float = 1e-5
               ) -> jax.Array:
  """Per-example group normalisation of (…, K, h, w) features.

  The K channels are split into ``num_groups`` groups of K/G consecutive
  channels; each group of each example is shifted and scaled to mean 0 and
  variance 1 over its channels and positions (no learned affine, as
  ``torch.nn.GroupNorm(G, K, affine=False)``). G = 1 normalises each
  example as a whole, G = K each channel on its own.

  Privacy: none needed — each output depends on its own example only.
  """
  shape = jnp.shape(features)
  if len(shape) < 3:
    raise ValueError(f"features must be (…, K, h, w), got shape {shape}.")
  channels = shape[-3]
  num_groups = validation.check_positive_int(num_groups, "num_groups")
  if channels % num_groups:
    raise ValueError(f"num_groups={num_groups} must divide the {channels} "
                     f"channels (e.g. 27 or 81 for 81 channels).")
  eps = validation.check_positive(eps, "eps")
  x = jnp.asarray(features)
  grouped = x.reshape(*shape[:-3], num_groups, -1)
  mean = grouped.mean(axis=-1, keepdims=True)
  var = grouped.var(axis=-1, keepdims=True)
  return ((grouped - mean) * jax.lax.rsqrt(var + eps)).reshape(shape)


def sensitivity(relation: options.Relation | str) -> float:
  """L2 sensitivity of Σᵢ (aᵢ, bᵢ): √2 (add/remove) or 2√2 (replace one)."""
  relation = options.parse_relation(relation)
  return math.sqrt(2.0) * (1.0 if relation is options.Relation.ADD_REMOVE
                           else 2.0)


@dataclasses.dataclass(frozen=True)
class DataNormPlan:
  """The public facts of one private data normalisation (see make_plan).

  Attributes:
    epsilon: ε of the release at ``delta`` (the target, or the exact ε of
      the given noise multiplier).
    delta: δ.
    relation: the neighbouring relation σ is calibrated for.
    sigma: σ of the noise on each of the 2K coordinates of the normalised
      sums (units of the clip bounds).
    sensitivity: L2 sensitivity of those sums (:func:`sensitivity`).
    num_examples: n, the public divisor.
    channels: K.
    clip_mean: C_m, the L2 bound on an example's per-channel means.
    clip_square: C_s, the L2 bound on its per-channel mean squares.
  """
  epsilon: float
  delta: float
  relation: options.Relation
  sigma: float
  sensitivity: float
  num_examples: int
  channels: int
  clip_mean: float
  clip_square: float

  def record(self, ledger: accounting.PrivacyLedger, *,
             label: str = "data_normalization") -> None:
    """Puts the release into ``ledger``: one Gaussian (σ, sensitivity)."""
    ledger.record_gaussian(sigma=self.sigma, sensitivity=self.sensitivity,
                           delta=self.delta, label=label,
                           relation=self.relation)


def make_plan(*, epsilon: float | None, delta: float, num_examples: int,
              channels: int, clip_mean: float, clip_square: float,
              noise_multiplier: float | None = None,
              relation: options.Relation | str = options.Relation.ADD_REMOVE
              ) -> DataNormPlan:
  """Validates a private data normalisation and calibrates its σ.

  Args:
    epsilon: target ε > 0; or None with ``noise_multiplier`` given.
    delta: δ in (0, 1).
    num_examples: n, rows of the training features (public).
    channels: K.
    clip_mean: C_m > 0, bound on ‖mᵢ‖ (public; a constant of the recipe).
    clip_square: C_s > 0, bound on ‖sᵢ‖ (public).
    noise_multiplier: σ/Δ given directly (Tramèr & Boneh's σ_norm, e.g.
      8); the plan's ε is then the exact ε of that Gaussian at δ. Give
      exactly one of ``epsilon`` and ``noise_multiplier``.
    relation: ``"add_remove"`` (default, DP-SGD's) or ``"replace_one"``.

  Returns:
    A :class:`DataNormPlan`.

  Raises:
    ValueError: one line naming the argument and the fix.
  """
  delta = validation.check_delta(delta)
  relation = options.parse_relation(relation)
  num_examples = validation.check_positive_int(num_examples, "num_examples")
  channels = validation.check_positive_int(channels, "channels")
  clip_mean = validation.check_positive(clip_mean, "clip_mean")
  clip_square = validation.check_positive(clip_square, "clip_square")
  sens = sensitivity(relation)
  if (epsilon is None) == (noise_multiplier is None):
    raise ValueError("give epsilon= or noise_multiplier=, exactly one.")
  if epsilon is not None:
    epsilon = validation.check_epsilon(epsilon)
    sigma = calibration.gaussian_sigma(epsilon=epsilon, delta=delta,
                                       sensitivity=sens)
  else:
    multiplier = validation.check_positive(noise_multiplier,
                                           "noise_multiplier")
    sigma = multiplier * sens
    epsilon = accounting.gaussian_epsilon(noise_multiplier=multiplier,
                                          delta=delta)
  return DataNormPlan(epsilon, delta, relation, float(sigma), sens,
                      num_examples, channels, clip_mean, clip_square)


class NormStats(NamedTuple):
  """Per-channel mean and variance (K,) each; noisy, from :func:`release`."""
  mean: jax.Array
  var: jax.Array


def _check_features(plan: DataNormPlan, features) -> None:
  shape = jnp.shape(features)
  if len(shape) != 4 or shape[:2] != (plan.num_examples, plan.channels):
    raise ValueError(
        f"features must be (n, K, h, w) with n={plan.num_examples}, "
        f"K={plan.channels} of the plan, got shape {shape}.")


def noisy_sums(key: jax.Array, plan: DataNormPlan, features
               ) -> tuple[jax.Array, jax.Array]:
  """(Σᵢ aᵢ + z₁, Σᵢ bᵢ + z₂): the Gaussian mechanism itself (jittable).

  aᵢ, bᵢ are example i's clipped and scaled per-channel means and mean
  squares (module docstring); z ~ N(0, σ²I_{2K}). Non-finite statistics
  count as 0 (:func:`dpcore.clipping.clip_rows`).
  """
  _check_features(plan, features)
  x = jnp.asarray(features, jnp.float32)
  means = x.mean(axis=(-2, -1))
  squares = jnp.square(x).mean(axis=(-2, -1))
  a = clipping.clip_rows(means, max_norm=plan.clip_mean) / plan.clip_mean
  b = clipping.clip_rows(squares, max_norm=plan.clip_square) / (
      plan.clip_square)
  z = dp_noise.gaussian_noise(key, (2, plan.channels), stddev=plan.sigma)
  return a.sum(axis=0) + z[0], b.sum(axis=0) + z[1]


def release(key: jax.Array, plan: DataNormPlan, features) -> NormStats:
  """The private per-channel mean and variance of (n, K, h, w) features.

  Privacy: :func:`noisy_sums` is the Gaussian mechanism of the plan
  (module docstring); the rest is post-processing.
  """
  sum_a, sum_b = noisy_sums(key, plan, features)
  mean = plan.clip_mean * sum_a / plan.num_examples
  second = plan.clip_square * sum_b / plan.num_examples
  return NormStats(mean, jnp.maximum(second - jnp.square(mean), 0.0))


def standardize(features, stats: NormStats, *, eps: float = 1e-5
                ) -> jax.Array:
  """(x − mean)/√(var + eps) per channel of (…, K, h, w) features.

  A channel whose noisy variance came out 0 is set to 0 (it carries no
  usable scale). Post-processing: no privacy cost of its own.
  """
  x = jnp.asarray(features)
  mean = stats.mean[:, None, None]
  var = stats.var[:, None, None]
  out = (x - mean) * jax.lax.rsqrt(var + eps)
  return jnp.where(var > 0, out, 0.0)
