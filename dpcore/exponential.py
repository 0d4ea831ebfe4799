"""The exponential mechanism, sampled exactly by the Gumbel-max trick.

Candidate t is chosen with probability ∝ exp(ε·score(t) / (2Δ)). Adding
independent standard Gumbel noise to the log-weights ε·score/(2Δ) and taking
the argmax samples that distribution exactly; working with log-weights means
large ε·score never overflows and small weights never underflow to a
rounded-off zero, unlike an inverse-CDF draw over normalised probabilities.
The Gumbel draws come from :func:`dpcore.noise.gumbel_noise`, which reaches
86.6 on the right (``jax.random.gumbel`` in float32 stops near 16.6, so a
candidate far below the best could never win and the ε bound would carry a
hidden δ); its cut-off is ≤ 2⁻¹²³ per candidate (see ``dpcore.noise``).

>>> import jax, jax.numpy as jnp
>>> idx, ok = exponential_mechanism(
...     jax.random.key(0), jnp.array([0.1, 0.9, 0.5]), epsilon=1e4,
...     sensitivity=1.0)
>>> int(idx), bool(ok)
(1, True)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import noise, validation

__all__ = [
    "exponential_log_weights",
    "exponential_mechanism",
    "exponential_probabilities",
]


def _check_arguments(scores, epsilon, sensitivity, mask) -> None:
  """Shapes always (they are static); values where they are concrete."""
  shape = jnp.shape(scores)
  if len(shape) != 1 or shape[0] == 0:
    raise ValueError(
        f"scores must be a non-empty 1-D array (one utility per "
        f"candidate), got shape {shape}; use jax.vmap for a batch.")
  if mask is not None and jnp.shape(mask) != shape:
    raise ValueError(
        f"mask must have the shape of scores {shape}, got "
        f"{jnp.shape(mask)}.")
  validation.check_scale(epsilon, "epsilon", allow_zero=False)
  validation.check_scale(sensitivity, "sensitivity", allow_zero=False)
  if validation.is_concrete(scores) and np.any(np.isnan(np.asarray(
      scores, np.float64))):
    raise ValueError(
        "scores contains NaN; give every candidate a number (exclude "
        "candidates with mask= instead).")


def exponential_log_weights(scores: jax.Array, *, epsilon, sensitivity,
                            mask: jax.Array | None = None) -> jax.Array:
  """ε·score/(2Δ) for valid candidates, −∞ for invalid ones."""
  logits = epsilon * scores / (2.0 * sensitivity)
  if mask is not None:
    logits = jnp.where(mask, logits, -jnp.inf)
  return logits


def exponential_mechanism(key: jax.Array, scores: jax.Array, *, epsilon,
                          sensitivity, mask: jax.Array | None = None
                          ) -> tuple[jax.Array, jax.Array]:
  """Selects one index of ``scores`` by the exponential mechanism.

  Args:
    key: PRNG key, used once.
    scores: 1-D utility of each candidate (higher is better).
    epsilon: privacy parameter of this single selection (may be traced).
    sensitivity: Δ, the most one row can change any candidate's score.
    mask: optional boolean validity mask; invalid candidates are never
      chosen.

  Returns:
    ``(index, any_valid)``: the chosen index (int32) and whether any
    candidate was valid. When none is, ``index`` is 0 and must be ignored.

  Privacy: ε-DP for the selection, given that every score has sensitivity
  ≤ Δ under the neighbouring relation in use, and that the mask itself is
  data-independent or accounted for elsewhere. It is also ε²/8-zCDP
  (Cesar & Rogers 2021), which composes more tightly over many selections.

  Raises:
    TypeError: ``key`` is not a PRNG key.
    ValueError: ``scores`` not a non-empty vector, ``mask`` of another
      shape, or a concrete ε, Δ not finite and > 0 or scores with NaN
      (traced values are the caller's to check).
  """
  validation.check_key(key)
  _check_arguments(scores, epsilon, sensitivity, mask)
  logits = exponential_log_weights(scores, epsilon=epsilon,
                                   sensitivity=sensitivity, mask=mask)
  finite = jnp.isfinite(logits)
  any_valid = jnp.any(finite)
  # Shift the best valid log-weight to 0 before adding the noise: the
  # distribution is unchanged, and the Gumbel draws are not rounded away
  # when ε·score is huge (float32 has ~1e-3 resolution at 1e4).
  top = jnp.max(jnp.where(finite, logits, -jnp.inf))
  logits = logits - jax.lax.stop_gradient(jnp.where(any_valid, top, 0.0))
  gumbel = noise.gumbel_noise(key, logits.shape, dtype=logits.dtype)
  index = jnp.argmax(logits + gumbel).astype(jnp.int32)
  return jnp.where(any_valid, index, 0), any_valid


def exponential_probabilities(scores: jax.Array, *, epsilon, sensitivity,
                              mask: jax.Array | None = None) -> jax.Array:
  """The exact selection probabilities (softmax of the log-weights)."""
  _check_arguments(scores, epsilon, sensitivity, mask)
  logits = exponential_log_weights(scores, epsilon=epsilon,
                                   sensitivity=sensitivity, mask=mask)
  return jax.nn.softmax(logits)
