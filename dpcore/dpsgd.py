"""DP-SGD building blocks: Poisson sampling and the private aggregation.

* :func:`poisson_batch` draws a Poisson-subsampled batch (every example
  independently with probability q) as a fixed-size, jit-friendly index
  array plus a 0/1 mask; :func:`max_batch_size` picks the fixed size so that
  truncation is vanishingly rare, and the batch reports when it happens.
* :func:`dp_aggregate` is an optax ``GradientTransformation`` that clips
  per-example gradients jointly to L2 norm C, sums them, adds N(0, σ²C²) to
  every coordinate and divides by the expected batch size qN. Its PRNG key
  lives in its state, so it chains with any optax optimiser, and its
  ``update`` requires the batch's mask (padding slots repeat row 0, so a
  forgotten mask would let them into the sum)::

    tx = optax.chain(dp_aggregate(key, clip_norm=0.5, noise_multiplier=1.1,
                                  expected_batch_size=140.0),
                     optax.sgd(0.1))
    updates, state = tx.update(per_example_grads, state, params,
                               mask=batch.mask)

The accounting (:func:`dpcore.accounting.calibrate_dpsgd_noise`,
``PrivacyLedger.record_subsampled_gaussian``) assumes exactly this Poisson
sampling; shuffled fixed-size batches would be a different mechanism.

References:
  Abadi et al., Deep Learning with Differential Privacy, CCS 2016.
"""

from __future__ import annotations

import fractions
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from scipy import stats

from dpcore import clipping, noise, validation


class PoissonBatch(NamedTuple):
  """A Poisson-sampled batch padded to a fixed size.

  Attributes:
    indices: (max_batch,) row indices; padding slots hold index 0.
    mask: (max_batch,) 1.0 for sampled rows, 0.0 for padding.
    size: number of rows sampled (before truncation to ``max_batch``).
  """
  indices: jax.Array
  mask: jax.Array
  size: jax.Array


def max_batch_size(num_examples: int, *, sampling_rate: float, steps: int,
                   overflow_probability: float = 1e-9) -> int:
  """Smallest B with P(some step samples more than B rows) ≤ the tolerance.

  Uses the union bound T · P(Binomial(N, q) > B) ≤ ``overflow_probability``.
  A run that does overflow is reported by :class:`PoissonBatch.size`.

  Privacy: truncation makes the run differ from true Poisson sampling only
  on an event of probability ≤ ``overflow_probability`` (the same for every
  data set of N rows), so an (ε, δ) guarantee of the untruncated mechanism
  holds for the padded one with δ + (1 + e^ε)·``overflow_probability``.
  Record :func:`truncation_probability` of the chosen size in the ledger
  (``PrivacyLedger.record_truncation``) and it is counted in the δ reported.
  """
  num_examples = validation.check_positive_int(num_examples, "num_examples")
  sampling_rate = validation.check_in_range(
      sampling_rate, "sampling_rate", 0.0, 1.0, high_inclusive=True)
  steps = validation.check_positive_int(steps, "steps")
  overflow_probability = validation.check_in_range(
      overflow_probability, "overflow_probability", 0.0, 1.0)
  per_step = overflow_probability / steps
  b = int(stats.binom.isf(per_step, num_examples, sampling_rate))
  while b < num_examples and stats.binom.sf(
      b, num_examples, sampling_rate) > per_step:
    b += 1
  return max(1, min(b, num_examples))


def truncation_probability(num_examples: int, *, sampling_rate: float,
                           steps: int, max_batch: int) -> float:
  """min(1, T · P(Binomial(N, q) > B)): the chance some step drops rows.

  The union bound over T steps of padded Poisson batches of size B; the
  same for every data set of N rows, as the ledger's truncation event needs.
  """
  num_examples = validation.check_positive_int(num_examples, "num_examples")
  sampling_rate = validation.check_in_range(
      sampling_rate, "sampling_rate", 0.0, 1.0, high_inclusive=True)
  steps = validation.check_positive_int(steps, "steps")
  max_batch = validation.check_positive_int(max_batch, "max_batch")
  return float(min(1.0, steps * stats.binom.sf(max_batch, num_examples,
                                                 sampling_rate)))


_THRESHOLD_BITS = 32


def inclusion_threshold(sampling_rate: float) -> int:
  """⌊q · 2³²⌋, the integer threshold :func:`poisson_batch` compares with.

  Computed in exact rational arithmetic from the binary value of the float
  q, so a row is included with probability exactly
  :func:`realised_sampling_rate` = ⌊q · 2³²⌋ / 2³² ∈ (q − 2⁻³², q]: never
  above the q the accountant is given. (A float32 uniform compared with q,
  the old construction, rounds q to float32 first and can round it up.)
  Returns 2³² for q = 1 (every row included).
  """
  q = _check_static_rate(sampling_rate)
  return math.floor(fractions.Fraction(q) * 2**_THRESHOLD_BITS)


def realised_sampling_rate(sampling_rate: float) -> fractions.Fraction:
  """The exact inclusion probability of :func:`poisson_batch` at rate q.

  ⌊q · 2³²⌋ / 2³² as a fraction: ≤ q, and below it by less than 2⁻³²
  (0 for every q that is a multiple of 2⁻³², e.g. 0.5, 0.25, 1).
  """
  return fractions.Fraction(inclusion_threshold(sampling_rate),
                            2**_THRESHOLD_BITS)


def _check_static_rate(sampling_rate) -> float:
  if isinstance(sampling_rate, jax.core.Tracer):
    raise ValueError(
        "sampling_rate must be a concrete Python number (it sets the "
        "integer inclusion threshold host-side); mark it static under jit.")
  return validation.check_in_range(
      sampling_rate, "sampling_rate", 0.0, 1.0, high_inclusive=True)


def poisson_batch(key: jax.Array, num_examples: int, *, sampling_rate: float,
                  max_batch: int) -> PoissonBatch:
  """Includes each of ``num_examples`` rows independently with prob. ≤ q.

  Row i is included iff its 32 random bits, read as an unsigned integer,
  are below :func:`inclusion_threshold` ⌊q · 2³²⌋: an integer comparison,
  so the realised rate is exactly :func:`realised_sampling_rate` ≤ q.

  Args:
    key: PRNG key (consumed).
    num_examples: N (static).
    sampling_rate: q, a concrete number in (0, 1] (not traced).
    max_batch: static padded size; rows beyond it are dropped (see
      :func:`max_batch_size` for a size that makes this negligible).

  Returns:
    A :class:`PoissonBatch`; ``size`` ~ Binomial(N, q′) with
    q′ = ⌊q · 2³²⌋ / 2³² ∈ (q − 2⁻³², q].

  Privacy: the accountant is given q. The Poisson-subsampled Gaussian's
  privacy curve is non-decreasing in the sampling rate, so the realised
  q′ ≤ q is covered by the ε accounted for q.
  """
  validation.check_key(key)
  num_examples = validation.check_positive_int(num_examples, "num_examples")
  max_batch = validation.check_positive_int(max_batch, "max_batch")
  threshold = inclusion_threshold(sampling_rate)
  if threshold >= 2**_THRESHOLD_BITS:
    take = jnp.ones((num_examples,), bool)
  else:
    bits = jax.random.bits(key, (num_examples,), jnp.uint32)
    take = bits < jnp.uint32(threshold)
  size = jnp.sum(take)
  (indices,) = jnp.nonzero(take, size=max_batch, fill_value=0)
  mask = (jnp.arange(max_batch) < size).astype(jnp.float32)
  return PoissonBatch(indices, mask, size)


def num_steps(*, epochs: float, sampling_rate: float) -> int:
  """T = max(1, round(E / q)): the DP-SGD step count of E epochs at rate q.

  The one place the step count of an epochs-based run is derived: the
  trainer (:func:`dpcore.trainer.make_plan`), the accountant
  (:func:`dpcore.accounting.dpsgd_epsilon` and
  :func:`~dpcore.accounting.calibrate_dpsgd_noise` with ``epochs=``) and
  the launch harnesses all call it, so the steps run and the steps
  accounted cannot drift apart. An epoch is 1/q steps (each example is
  expected in q of them, once per epoch on average).
  """
  epochs = validation.check_positive(epochs, "epochs")
  sampling_rate = validation.check_in_range(
      sampling_rate, "sampling_rate", 0.0, 1.0, high_inclusive=True)
  return max(1, round(epochs / sampling_rate))


class DPAggregateState(NamedTuple):
  """State of :func:`dp_aggregate`: the base key and the step counter."""
  key: jax.Array
  count: jax.Array


def _missing_mask_error() -> ValueError:
  return ValueError(
      "dp_aggregate's update needs mask=: the (batch,) 0/1 mask of the "
      "padded batch, e.g. tx.update(grads, state, params, mask=batch.mask) "
      "for batch = poisson_batch(...), or mask=jnp.ones(n) for a batch "
      "without padding. Without it the padding slots, which repeat row 0, "
      "would enter the sum and the accounted guarantee would not hold.")


def _check_mask(mask, tree) -> None:
  """Trace-time shape check: one mask entry per example of every leaf."""
  shape = jnp.shape(mask)
  for leaf in jax.tree.leaves(tree):
    if len(shape) != 1 or jnp.ndim(leaf) < 1 or (
        jnp.shape(leaf)[0] != shape[0]):
      raise ValueError(
          f"mask must have shape (batch,) matching the leading example "
          f"axis of the per-example gradients, got mask shape {shape} and "
          f"a gradient leaf of shape {jnp.shape(leaf)}.")


def dp_aggregate(key: jax.Array, *, clip_norm: float,
                 noise_multiplier: float, expected_batch_size: float,
                 presummed: bool = False
                 ) -> optax.GradientTransformationExtraArgs:
  """Clip per-example gradients, sum, add Gaussian noise, divide by qN.

  Args:
    key: base PRNG key; step t draws its noise from ``fold_in(key, t)``.
    clip_norm: C > 0, the joint L2 bound on each example's gradient.
    noise_multiplier: σ ≥ 0; the noise std per coordinate is σC (σ = 0
      switches the noise off, for testing only: no privacy).
    expected_batch_size: qN, the divisor of the noisy sum (a public
      constant, unlike the realised batch size).
    presummed: if True, ``update`` receives an already clipped and masked
      sum (e.g. from a closed-form clipping such as
      :func:`mechanisms.lvq.clip.clipped_gradient_sum`, whose ``mask`` is
      required) and only adds noise and divides; the caller is then
      responsible for the clipping and for applying the mask, and
      ``update`` refuses a ``mask`` (a sum has no example axis to mask).

  Returns:
    A transformation whose ``update(updates, state, params=None, *,
    mask)`` takes per-example gradients (leaves with a leading example
    axis) and the (batch,) 0/1 ``mask`` of the padded batch slots
    (:attr:`PoissonBatch.mask`; ``jnp.ones(batch)`` when nothing is
    padded). ``mask`` is required unless ``presummed``: calling ``update``
    without it raises ``ValueError`` when traced. Mask values are bounded
    to [0, 1] (NaN → 0) before use.

  Privacy: with Poisson sampling at rate q, the clipped, masked sum has L2
  sensitivity C under add/remove-one, so each step is the sampled Gaussian
  mechanism with noise multiplier σ; T steps are accounted by
  :func:`dpcore.accounting.dpsgd_epsilon` (RDP). The mask is what keeps
  the padding slots (copies of row 0) out of the sum; with ``presummed``
  the caller's clipped sum must carry the same bound.
  """
  validation.check_key(key)
  clip_norm = validation.check_positive(clip_norm, "clip_norm")
  noise_multiplier = validation.check_non_negative(noise_multiplier,
                                                   "noise_multiplier")
  expected_batch_size = validation.check_positive(
      expected_batch_size, "expected_batch_size")
  stddev = float(noise_multiplier) * clip_norm

  def init_fn(params):
    del params
    return DPAggregateState(key, jnp.zeros((), jnp.int32))

  def update_fn(updates, state, params=None, *, mask=None, **extra):
    del params, extra
    if presummed:
      if mask is not None:
        raise ValueError(
            "dp_aggregate(presummed=True) takes an already clipped sum: "
            "apply the mask where the sum is formed (e.g. "
            "lvq_clip.clipped_gradient_sum(..., mask=batch.mask)) and call "
            "update without mask=.")
      summed = updates
    else:
      if mask is None:
        raise _missing_mask_error()
      _check_mask(mask, updates)
      summed, _ = clipping.clipped_sum(updates, clip_norm, weights=mask)
    step_key = jax.random.fold_in(state.key, state.count)
    leaves, treedef = jax.tree.flatten(summed)
    keys = jax.random.split(step_key, len(leaves))
    noisy = [
        (g + noise.gaussian_noise(k, g.shape, stddev=stddev, dtype=g.dtype))
        / expected_batch_size for g, k in zip(leaves, keys, strict=True)]
    return (jax.tree.unflatten(treedef, noisy),
            DPAggregateState(state.key, state.count + 1))

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def paper_noise_multiplier(*, epsilon: float, delta: float,
                           sampling_rate: float, steps: int) -> float:
  """σ = 2q√(T log(1/δ))/ε, the rule used by Brinkrolf et al. (2018).

  An asymptotic bound with a loose constant; the ε this σ actually gives is
  :func:`dpcore.accounting.dpsgd_epsilon` of it, which is what a run should
  report.
  """
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  sampling_rate = validation.check_in_range(
      sampling_rate, "sampling_rate", 0.0, 1.0, high_inclusive=True)
  steps = validation.check_positive_int(steps, "steps")
  return 2.0 * sampling_rate * math.sqrt(steps * math.log(1.0 / delta)) / (
      epsilon)
