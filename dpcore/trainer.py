"""A generic DP-SGD trainer: Poisson batches, clipping, noise, lax.scan.

Two halves, so that the steps run are the steps accounted:

* :func:`make_plan` (host side) fixes everything public about a run: N,
  q, the step count T (from ``steps`` or from ``epochs`` through
  :func:`dpcore.dpsgd.num_steps`), C, σ (given, or calibrated for a target
  (ε, δ)), the padded batch size B, δ and the neighbouring relation (add or
  remove one row: Poisson subsampling's). Its :meth:`DPSGDPlan.record`
  writes the ledger entries of exactly that run (T Poisson-subsampled
  Gaussian steps and the padding's truncation event).
  :func:`nonprivate_plan` describes the same batches without clipping or
  noise (a reference run; it has no guarantee and refuses to be recorded).
* :func:`train` runs the plan: one ``lax.scan`` over T steps, each drawing
  a Poisson batch (O(B) geometric gaps when B ≪ N), forming the clipped
  sum of per-example gradients of ``loss(params, example)`` — without
  per-example gradients for a layered loss (:mod:`dpcore.ghost`), by
  ``vmap(grad)`` otherwise, or by a caller's closed form — then noising and
  averaging it through :func:`dpcore.dpsgd.dp_aggregate` and stepping an
  optax optimiser.

DP logistic regression in a few lines:

>>> import jax, jax.numpy as jnp, optax
>>> from dpcore import accounting, trainer
>>> x = jax.random.uniform(jax.random.key(0), (1000, 5), minval=-1.0)
>>> y = (x @ jnp.arange(1.0, 6.0) > 0).astype(jnp.float32)
>>> def loss(w, example):
...   xi, yi = example
...   return optax.sigmoid_binary_cross_entropy(xi @ w, yi)
>>> plan = trainer.make_plan(1000, sampling_rate=0.05, epochs=5,
...                          clip_norm=1.0, noise_multiplier=1.0, delta=1e-5)
>>> result = trainer.train(jax.random.key(1), plan, loss, jnp.zeros(5),
...                        (x, y), optax.sgd(0.5))
>>> float(jnp.mean((x @ result.params > 0) == y)) > 0.9
True
>>> ledger = accounting.PrivacyLedger()
>>> plan.record(ledger)
>>> plan.steps, round(ledger.guarantee(1e-5).epsilon, 2)
(100, 3.5)

References:
  Abadi et al., Deep Learning with Differential Privacy, CCS 2016.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpcore import accounting, clipping, dpsgd, ghost, options, validation

RELATION = options.Relation.ADD_REMOVE
"""DP-SGD's relation: Poisson subsampling's amplification is proven for
one row added or removed."""

__all__ = [
    "ClippedSumFn", "DPSGDPlan", "RELATION", "TrainKeys", "TrainResult",
    "clipped_batch_sum", "make_ledger_plan", "make_plan", "nonprivate_plan",
    "resolve_noise",
    "per_example_clipped_sum", "split_keys", "train",
]

PyTree = Any
ClippedSumFn = Callable[[PyTree, PyTree, jax.Array, float], PyTree]


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["clip_norm", "noise_multiplier", "epsilon",
                 "target_epsilon", "delta"],
    meta_fields=["num_examples", "sampling_rate", "steps", "max_batch",
                 "truncation_probability", "sampler", "sampler_departure",
                 "private", "relation"])
@dataclasses.dataclass(frozen=True)
class DPSGDPlan:
  """The public description of one DP-SGD run (see make_plan).

  A pytree whose leaves are the run's numbers C, σ, ε, the target ε and δ;
  its structure (N, q, T, B, the sampler, the truncation and sampler
  bounds, ``private``, the relation) is static aux data. So under
  ``jax.jit`` a plan passed as an argument gives one compiled program for
  every ε (and C) of the same run shape. The sampling rate q stays static:
  the Poisson samplers turn it into an exact integer threshold (or a gap
  table) host-side (:func:`dpcore.dpsgd.inclusion_threshold`).

  Attributes:
    num_examples: N, rows of the training data.
    sampling_rate: q, each row's inclusion probability per step.
    steps: T.
    clip_norm: C, the joint L2 bound on each example's gradient.
    noise_multiplier: σ; the noise std per coordinate is σC (σ = 0: no
      noise and no guarantee, for tests).
    max_batch: B, the padded batch size.
    truncation_probability: P(some step samples more than B rows), the
      union bound of :func:`dpcore.dpsgd.truncation_probability`.
    sampler: the Poisson sampler's method, ``"gaps"`` (cost O(B) per
      step) or ``"bernoulli"`` (O(N)); see :func:`dpcore.dpsgd.poisson_batch`.
    sampler_departure: a bound on the total variation between the run's
      sampled batches and exact Poisson sampling
      (:func:`dpcore.dpsgd.sampler_departure`; 0 for ``"bernoulli"``).
    private: False only for :func:`nonprivate_plan`'s plans: no clipping
      (C = ∞), no noise, no guarantee.
    epsilon: the guarantee: the ε at ``delta`` that a ledger holding
      :meth:`record`'s entries reports (the T steps, the padding's
      truncation and the sampler's departure composed; at most
      ``target_epsilon`` when σ was calibrated). None where there is no
      guarantee to state: no ``delta``, σ = 0, or a non-private plan.
    target_epsilon: the budget ε that σ was calibrated for
      (:func:`make_plan` with ``epsilon=``); None when σ was given
      directly.
    delta: the δ at which :meth:`record` states the steps' stand-alone ε
      and ``epsilon`` holds (the calibration's target δ when
      ``target_epsilon`` is set); None when not given (``record`` then
      needs ``delta=``) and for a non-private plan.
    relation: add/remove one row (:data:`RELATION`): the relation
      Poisson subsampling's amplification is proven under.
  """
  num_examples: int
  sampling_rate: float
  steps: int
  clip_norm: float
  noise_multiplier: float
  max_batch: int
  truncation_probability: float
  sampler: str = "bernoulli"
  sampler_departure: float = 0.0
  private: bool = True
  epsilon: float | None = None
  target_epsilon: float | None = None
  delta: float | None = None
  relation: options.Relation = RELATION

  @property
  def expected_batch_size(self) -> float:
    """qN, the public divisor of the noisy gradient sum."""
    return self.sampling_rate * self.num_examples

  def record(self, ledger: accounting.PrivacyLedger, *,
             delta: float | None = None, label: str = "dpsgd",
             padding_label: str = "poisson_batch_padding",
             sampler_label: str = "poisson_sampler_departure") -> None:
    """Records this run in ``ledger``: T sampled Gaussians + the padding.

    Args:
      ledger: the run's ledger.
      delta: δ at which the steps' stand-alone ε is stated (basic
        composition; the ledger's RDP/PLD ε is taken at its report δ).
        Default: the plan's ``delta``. Kept for plans made with σ and no
        δ; given beside a plan's own δ it must equal it.
      label: the DP-SGD entry's label.
      padding_label: the truncation entry's label.
      sampler_label: the label of the sampler's departure from exact
        Poisson sampling (recorded only when it is above 0).

    Raises:
      ValueError: the plan has no guarantee (:func:`nonprivate_plan`, or
        σ = 0); no δ (neither the plan's nor ``delta``), or a ``delta``
        other than the plan's.
    """
    if not self.private:
      raise ValueError(
          "this plan is non-private (trainer.nonprivate_plan: no clipping, "
          "no noise): it has no DP guarantee to record; report "
          "accounting.no_guarantee_record(accounting.NON_PRIVATE) instead.")
    if self.noise_multiplier <= 0:
      raise ValueError(
          "this plan has noise_multiplier=0 (no noise): it has no DP "
          "guarantee to record; report accounting.no_guarantee_record(...) "
          "instead.")
    if delta is None:
      delta = self.delta
    elif self.delta is not None and delta != self.delta:
      raise ValueError(
          f"delta={delta} differs from the plan's delta={self.delta}; leave "
          f"delta out (the plan's is used).")
    if delta is None:
      raise ValueError(
          "this plan has no delta: give make_plan(..., delta=...) (or "
          "record(ledger, delta=...)).")
    ledger.record_subsampled_gaussian(
        noise_multiplier=self.noise_multiplier,
        sampling_rate=self.sampling_rate, steps=self.steps, delta=delta,
        label=label, relation=self.relation)
    ledger.record_truncation(self.truncation_probability,
                             label=padding_label)
    if self.sampler_departure > 0:
      ledger.record_truncation(self.sampler_departure, label=sampler_label)


def resolve_noise(*, noise_multiplier: float | None, epsilon: float | None,
                  delta: float | None, sampling_rate: float, steps: int
                  ) -> tuple[float, float | None, float | None]:
  """σ given, or calibrated from (ε, δ) for T Poisson-subsampled steps.

  Returns ``(noise_multiplier, target_epsilon, delta)`` checked: exactly
  one of σ and ε must be given (ε needs δ; it comes back as the target,
  None for a σ given); δ alone is kept for the record.

  Raises:
    ValueError: neither or both of σ and ε, or a bad value (named).
  """
  if delta is not None:
    delta = validation.check_delta(delta)
  if noise_multiplier is None:
    if epsilon is None or delta is None:
      raise ValueError(
          "give noise_multiplier=, or epsilon= and delta= to calibrate it.")
    epsilon = validation.check_epsilon(epsilon)
    noise_multiplier = accounting.calibrate_dpsgd_noise(
        epsilon=epsilon, delta=delta, sampling_rate=sampling_rate,
        steps=steps)
  elif epsilon is not None:
    raise ValueError(
        "give noise_multiplier= or epsilon= (σ calibrated for it), not both.")
  noise_multiplier = validation.check_non_negative(noise_multiplier,
                                                   "noise_multiplier")
  return noise_multiplier, epsilon, delta


def make_plan(num_examples: int, *, sampling_rate: float, clip_norm: float,
              noise_multiplier: float | None = None,
              epsilon: float | None = None, delta: float | None = None,
              steps: int | None = None, epochs: float | None = None,
              max_batch: int | None = None,
              overflow_probability: float = 1e-9,
              sampler: str = "auto") -> DPSGDPlan:
  """Validates a DP-SGD run and derives its σ, step count and batch size.

  Args:
    num_examples: N.
    sampling_rate: q in (0, 1].
    clip_norm: C > 0.
    noise_multiplier: σ ≥ 0, given directly; or None to calibrate it for
      ``epsilon`` at ``delta`` (:func:`dpcore.accounting.calibrate_dpsgd_noise`
      over this q and T). σ = 0 runs without noise, for tests only: such a
      plan has no guarantee and :meth:`DPSGDPlan.record` refuses it.
    epsilon: the budget ε σ is calibrated for (only without
      ``noise_multiplier``); the plan keeps it as ``target_epsilon``, and
      its ``epsilon`` is the guarantee the ledger reports (at most this).
    delta: δ of the target, and the δ at which the plan's record states
      the steps' stand-alone ε and ``epsilon`` holds (optional with
      ``noise_multiplier``: without it the plan states no ε).
    steps: T; or
    epochs: E, turned into T by :func:`dpcore.dpsgd.num_steps` (exactly
      one of the two).
    max_batch: B; default :func:`dpcore.dpsgd.max_batch_size` at
      ``overflow_probability``. Its truncation probability P is recorded
      and counted in the reported δ; a B whose (1 + e^ε)·P does not fit
      in ``delta`` is refused (the plan's ε would hold at no δ near it).
    overflow_probability: target P(truncation) for the default B.
    sampler: ``"auto"`` (:func:`dpcore.dpsgd.choose_sampler`: geometric
      gaps when B is small against N, else one coin per row), ``"gaps"``
      or ``"bernoulli"``. Either has Poisson sampling's law; the gaps'
      table quantisation is bounded and recorded (``sampler_departure``).

  Returns:
    A :class:`DPSGDPlan` (relation add/remove one row).

  Raises:
    ValueError: an argument out of range, or neither (or both) of
      ``noise_multiplier`` and ``epsilon``; one line naming the fix.
  """
  num_examples = validation.check_count(num_examples, "num_examples")
  sampling_rate = validation.check_in_range(
      sampling_rate, "sampling_rate", 0.0, 1.0, high_inclusive=True)
  clip_norm = validation.check_positive(clip_norm, "clip_norm")
  # T (given, or from epochs) fits int32: validation.check_count.
  steps = accounting.dpsgd_steps(sampling_rate=sampling_rate, steps=steps,
                                 epochs=epochs)
  noise_multiplier, target, delta = resolve_noise(
      noise_multiplier=noise_multiplier, epsilon=epsilon, delta=delta,
      sampling_rate=sampling_rate, steps=steps)
  if max_batch is None:
    max_batch = dpsgd.max_batch_size(
        num_examples, sampling_rate=sampling_rate, steps=steps,
        overflow_probability=overflow_probability)
  max_batch = validation.check_positive_int(max_batch, "max_batch")
  truncation = dpsgd.truncation_probability(
      num_examples, sampling_rate=sampling_rate, steps=steps,
      max_batch=max_batch)
  if sampler == "auto":
    sampler = dpsgd.choose_sampler(num_examples, max_batch,
                                   sampling_rate=sampling_rate)
  departure = dpsgd.sampler_departure(
      num_examples, sampling_rate=sampling_rate, steps=steps,
      max_batch=max_batch, method=sampler)
  plan = DPSGDPlan(num_examples, sampling_rate, steps, clip_norm,
                   noise_multiplier, max_batch, truncation, sampler,
                   departure, target_epsilon=target, delta=delta)
  return dataclasses.replace(plan, epsilon=_guarantee(plan))


def make_ledger_plan(num_examples: int, *, epsilon: float, delta: float,
                     before=(), tolerance: float = 1e-3,
                     **kwargs) -> DPSGDPlan:
  """The plan whose σ makes the LEDGER's ε of the whole run meet ``epsilon``.

  :func:`make_plan` calibrates σ by RDP for DP-SGD alone; the ledger then
  reports the tightest of its compositions (PLD for Gaussian steps), so
  such a plan is reported below its target (0.913 for 1, 2.755 for 3 at
  the scattering recipe of ``launch.features``): σ larger than needed.
  Here σ is the smallest, to a factor ``1 + tolerance``, for which a
  ledger holding the releases in ``before`` (plans recorded ahead of
  DP-SGD's, e.g. a data normalisation's) and this plan reports at most
  ``epsilon`` at ``delta``.

  Args:
    num_examples: N.
    epsilon: the target ε of everything ``before`` and the training
      release, at ``delta``.
    delta: δ.
    before: plans (anything with ``record(ledger)``) recorded first.
    tolerance: relative width of the final σ bracket.
    **kwargs: :func:`make_plan`'s other arguments (``sampling_rate``,
      ``clip_norm``, ``steps`` or ``epochs``, …), not ``noise_multiplier``.

  Returns:
    A :class:`DPSGDPlan` made with ``noise_multiplier=`` σ; its
    ``target_epsilon`` is None (σ was given), its ``epsilon`` its own
    guarantee.

  Raises:
    ValueError: ``before`` alone costs ``epsilon`` or more (checked first,
      before any bisection), or a bad argument.
  """
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  tolerance = validation.check_positive(tolerance, "tolerance")
  for name in ("noise_multiplier", "delta", "epsilon"):
    if name in kwargs:
      raise ValueError(f"make_ledger_plan calibrates σ: drop {name}=.")
  refusal = (f"epsilon={epsilon} is below what the releases before DP-SGD "
             f"cost alone; give them less (e.g. more noise).")
  if before and accounting.composed_epsilon(before, delta) >= epsilon:
    raise ValueError(refusal)

  def plan(sigma):
    return make_plan(num_examples, noise_multiplier=sigma, delta=delta,
                     **kwargs)

  def total(sigma):
    return accounting.composed_epsilon([*before, plan(sigma)], delta)

  # RDP's σ for DP-SGD alone: the ledger (tighter) gives it at most ε.
  hi = make_plan(num_examples, epsilon=epsilon, delta=delta,
                 **kwargs).noise_multiplier
  f_hi = total(hi)
  for _ in range(40):
    if f_hi <= epsilon:
      break
    hi *= 1.5
    f_hi = total(hi)
  else:
    raise ValueError(refusal)
  lo = hi / 1.25
  f_lo = total(lo)
  while f_lo <= epsilon:
    hi, f_hi, lo = lo, f_lo, lo / 1.25
    f_lo = total(lo)
  # Illinois regula falsi on log σ ↦ log ε (smooth and decreasing), the
  # bracket kept: total(lo) > ε ≥ total(hi).
  target, side = math.log(epsilon), 0
  g_lo, g_hi = math.log(f_lo) - target, math.log(f_hi) - target
  while hi / lo > 1.0 + tolerance:
    a, b = math.log(lo), math.log(hi)
    mid = math.exp(b - g_hi * (b - a) / (g_hi - g_lo))
    mid = min(max(mid, lo * (1.0 + tolerance / 4)), hi / (1.0 + tolerance / 4))
    g_mid = math.log(total(mid)) - target
    if g_mid > 0.0:
      lo, g_lo = mid, g_mid
      g_hi, side = (g_hi / 2.0 if side == -1 else g_hi), -1
    else:
      hi, g_hi = mid, g_mid
      g_lo, side = (g_lo / 2.0 if side == 1 else g_lo), 1
  return plan(hi)


@functools.lru_cache(maxsize=256)
def _guarantee(plan: DPSGDPlan) -> float | None:
  """The plan's ``epsilon``: the ledger's ε at its δ after :meth:`record`.

  None without a guarantee (σ = 0, no δ, or non-private). Cached per plan
  (a frozen, hashable description): the PLD composition takes about a
  second, and callers (tests, sweeps) often make the same plan again.
  """
  if not plan.private or plan.noise_multiplier <= 0 or plan.delta is None:
    return None
  return accounting.plan_epsilon(plan)


def nonprivate_plan(num_examples: int, *, sampling_rate: float,
                    steps: int | None = None, epochs: float | None = None,
                    max_batch: int | None = None,
                    overflow_probability: float = 1e-9,
                    sampler: str = "auto") -> DPSGDPlan:
  """A plan for plain minibatch SGD over DP-SGD's Poisson batches.

  The batches (q, T, B, sampler) are those :func:`make_plan` gives for the
  same arguments, so a private and a non-private run of one key see the
  same rows; :func:`train` then sums the unclipped gradients (C = ∞),
  adds no noise and divides by qN. The plan says so (``private=False``)
  and :meth:`DPSGDPlan.record` refuses it.

  Args:
    num_examples: N.
    sampling_rate: q in (0, 1].
    steps: T; or
    epochs: E (exactly one of the two).
    max_batch: B (default as in :func:`make_plan`).
    overflow_probability: target P(truncation) for the default B.
    sampler: as in :func:`make_plan`.

  Returns:
    A :class:`DPSGDPlan` with ``private=False``, ``clip_norm=inf`` and
    ``noise_multiplier=0``.

  Privacy: none; a run of it reports
  ``accounting.no_guarantee_record(accounting.NON_PRIVATE)``.
  """
  plan = make_plan(num_examples, sampling_rate=sampling_rate, clip_norm=1.0,
                   noise_multiplier=0.0, steps=steps, epochs=epochs,
                   max_batch=max_batch,
                   overflow_probability=overflow_probability, sampler=sampler)
  return dataclasses.replace(plan, clip_norm=math.inf, private=False)


class TrainKeys(NamedTuple):
  """The two random streams of a run: batch sampling and gradient noise.

  Step t samples its batch from ``fold_in(sampling, t)`` and draws its
  noise from ``fold_in(noise, t)`` (split per parameter leaf), so no key is
  used twice. The two must be distinct keys (e.g. from one ``split``).
  """
  sampling: jax.Array
  noise: jax.Array


def split_keys(key: jax.Array) -> TrainKeys:
  """``TrainKeys(*jax.random.split(key))``: the streams of :func:`train`."""
  sampling, noise_key = jax.random.split(key)
  return TrainKeys(sampling, noise_key)


class TrainResult(NamedTuple):
  """Output of :func:`train`.

  Attributes:
    params: the trained parameters (released under the plan's guarantee;
      none for a :func:`nonprivate_plan`).
    overflow_steps: steps whose Poisson batch exceeded B (rows dropped);
      the chance of any is bounded by the plan's truncation probability.
  """
  params: PyTree
  overflow_steps: jax.Array


def per_example_clipped_sum(loss: Callable[[PyTree, PyTree], jax.Array]
                            ) -> ClippedSumFn:
  """The default clipped sum: ``vmap(grad(loss))`` then a joint clip.

  Returns ``clipped_sum(params, batch, mask, clip_norm)`` =
  Σᵢ maskᵢ · clip_C(∇ loss(params, exampleᵢ)), non-finite gradients
  zeroed (:func:`dpcore.clipping.clipped_sum`).
  """
  per_example_grad = jax.vmap(jax.grad(loss), in_axes=(None, 0))

  def clipped_sum(params, batch, mask, clip_norm):
    grads = per_example_grad(params, batch)
    total, _ = clipping.clipped_sum(grads, clip_norm, weights=mask)
    return total

  return clipped_sum


def _check_data(data, num_examples):
  for leaf in jax.tree.leaves(data):
    if jnp.ndim(leaf) < 1 or jnp.shape(leaf)[0] != num_examples:
      raise ValueError(
          f"every data leaf needs a leading axis of the plan's "
          f"num_examples={num_examples} rows, got a leaf of shape "
          f"{jnp.shape(leaf)}.")


def _unclipped_sum(loss: Callable[[PyTree, PyTree], jax.Array]
                   ) -> ClippedSumFn:
  """Σᵢ maskᵢ · ∇ℓᵢ, one gradient of the masked sum (a non-private plan)."""
  per_example_loss = jax.vmap(loss, in_axes=(None, 0))

  def unclipped_sum(params, batch, mask, clip_norm):
    del clip_norm  # ∞ in a non-private plan: nothing is clipped
    return jax.grad(
        lambda p: jnp.sum(mask * per_example_loss(p, batch)))(params)

  return unclipped_sum


def _resolve_clipped_sum(loss, clipped_sum, plan) -> ClippedSumFn:
  if clipped_sum is None and plan.private and isinstance(
      loss, ghost.LayeredLoss):
    return loss.clipped_sum
  if clipped_sum is None:
    if loss is None:
      raise ValueError("give a per-example loss or a clipped_sum.")
    if not callable(loss):
      raise TypeError(
          f"loss must be a function loss(params, example), got {loss!r}.")
    if not plan.private:
      return _unclipped_sum(loss)
    return per_example_clipped_sum(loss)
  if not callable(clipped_sum):
    raise TypeError(f"clipped_sum must be a function, got {clipped_sum!r}.")
  return clipped_sum


def clipped_batch_sum(sampling_key: jax.Array, plan: DPSGDPlan, step,
                      loss: Callable[[PyTree, PyTree], jax.Array] | None,
                      params: PyTree, data: PyTree, *,
                      clipped_sum: ClippedSumFn | None = None
                      ) -> tuple[PyTree, jax.Array]:
  """Step ``step``'s Poisson batch and its clipped gradient sum, no noise.

  The part of a DP-SGD step that touches the data: the batch drawn from
  ``fold_in(sampling_key, step)`` at the plan's q, padded to B, and
  Σᵢ maskᵢ · clip_C(∇ℓᵢ) over it (the layered fast path for a
  :class:`dpcore.ghost.LayeredLoss`). :func:`train` adds the noise; a
  federated trainer can instead vmap this over participants and noise the
  server's sum. Returns ``(clipped sum, overflowed)``, the second a bool:
  the batch had more than B rows (some were dropped).

  Privacy: adding or removing one row of ``data`` moves the sum by at most
  C in L2 norm; the sum itself is not private until noised.
  """
  validation.check_key(sampling_key, "sampling_key")
  if not isinstance(plan, DPSGDPlan):
    raise ValueError(f"plan must come from make_plan, got {type(plan)}.")
  data = jax.tree.map(jnp.asarray, data)
  _check_data(data, plan.num_examples)
  clipped_sum = _resolve_clipped_sum(loss, clipped_sum, plan)
  return _clipped_batch_sum(sampling_key, plan, step, clipped_sum, params,
                            data)


def _clipped_batch_sum(sampling_key, plan, step, clipped_sum, params, data):
  batch = dpsgd.poisson_batch(
      jax.random.fold_in(sampling_key, step), plan.num_examples,
      sampling_rate=plan.sampling_rate, max_batch=plan.max_batch,
      method=plan.sampler)
  rows = jax.tree.map(lambda a: a[batch.indices], data)
  total = clipped_sum(params, rows, batch.slot_mask, plan.clip_norm)
  return total, batch.size > plan.max_batch


def _divide(divisor: float) -> optax.GradientTransformation:
  """The non-private plan's aggregation: the sum over qN, no noise."""

  def update_fn(updates, state, params=None):
    del params
    return jax.tree.map(lambda g: g / divisor, updates), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(),
                                      update_fn)


def train(key: jax.Array | TrainKeys, plan: DPSGDPlan,
          loss: Callable[[PyTree, PyTree], jax.Array] | None,
          params: PyTree, data: PyTree,
          optimizer: optax.GradientTransformation, *,
          clipped_sum: ClippedSumFn | None = None,
          post_update: Callable[[PyTree], PyTree] | None = None,
          unroll: int = 1) -> TrainResult:
  """Runs the plan's T DP-SGD steps as one ``lax.scan`` (jit/vmap-able).

  Step t: a Poisson batch at rate q padded to B rows; the clipped sum
  Σ_batch clip_C(∇ℓᵢ); plus N(0, σ²C²I); divided by qN; one step of
  ``optimizer``; then ``post_update`` (e.g. a projection). A plan from
  :func:`nonprivate_plan` runs the same steps on the same batches with the
  plain sum Σ_batch ∇ℓᵢ (C = ∞; by default the gradient of the masked sum
  of ``loss``) and no noise: plain minibatch SGD, for reference.

  Args:
    key: a PRNG key (split by :func:`split_keys`) or explicit
      :class:`TrainKeys`.
    plan: from :func:`make_plan` (or :func:`nonprivate_plan`); its steps,
      q, C, σ and B are what run.
    loss: per-example loss ``loss(params, example)``, ``example`` one row
      of ``data`` (same pytree, leading axis removed). A
      :class:`dpcore.ghost.LayeredLoss` (``ghost.layered(fn)``) takes the
      fast path: per-example norms from layer inputs and output gradients,
      no per-example gradients (equal to the ``vmap(grad)`` path to float
      rounding). May be None when ``clipped_sum`` is given.
    params: initial parameters (a pytree, data-independent or already
      accounted for by the caller).
    data: pytree of arrays with N rows each (e.g. ``(x, y)``).
    optimizer: optax transformation applied to the privatised mean
      gradient.
    clipped_sum: optional fast path ``clipped_sum(params, batch, mask,
      clip_norm)`` returning Σᵢ maskᵢ · clip_C(∇ℓᵢ) (params-shaped), e.g.
      from closed-form per-example norms. It must apply the mask and
      bound every example's contribution by C in joint L2 norm: the
      guarantee rests on it. Default: the layered loss's
      :meth:`~dpcore.ghost.LayeredLoss.clipped_sum`, else
      :func:`per_example_clipped_sum` (``vmap(grad)``). Under a
      non-private plan C = ∞: the masked sum of unclipped gradients.
    post_update: optional ``params -> params`` after every step
      (post-processing).
    unroll: steps per trip of the ``lax.scan`` loop (a speed setting: the
      keys are derived from the step index, so the result does not depend
      on it).

  Returns:
    A :class:`TrainResult`.

  Under ``jax.jit`` with the loss and optimizer closed over, one
  compilation serves every key, data set and initial parameters of the
  same shapes, and, with the plan passed as an argument (a pytree whose
  leaves are C, σ and the budget), every ε of the same run shape;
  ``jax.vmap`` over keys runs seeds, over keys and data (equal row
  counts) runs participants.

  Privacy: under add/remove-one of a row of ``data``, each step is the
  Poisson-subsampled Gaussian mechanism (sensitivity C, noise σC) and T
  of them compose as ``plan.record`` states; the padding to B departs
  from it with probability ≤ ``plan.truncation_probability``, also
  recorded. ``params`` and ``optimizer`` must not depend on the data. A
  :func:`nonprivate_plan` run has no guarantee.
  """
  if not isinstance(plan, DPSGDPlan):
    raise ValueError(f"plan must come from make_plan, got {type(plan)}.")
  if isinstance(key, TrainKeys):
    validation.check_key(key.sampling, "key.sampling")
    validation.check_key(key.noise, "key.noise")
    keys = key
  else:
    keys = split_keys(validation.check_key(key))
  data = jax.tree.map(jnp.asarray, data)
  _check_data(data, plan.num_examples)
  clipped_sum = _resolve_clipped_sum(loss, clipped_sum, plan)
  unroll = validation.check_positive_int(unroll, "unroll")
  if not hasattr(optimizer, "update"):
    raise TypeError(
        f"optimizer must be an optax GradientTransformation, got "
        f"{optimizer!r}; e.g. optax.sgd(0.1).")
  if plan.private:
    aggregate = dpsgd.dp_aggregate(
        keys.noise, clip_norm=plan.clip_norm,
        noise_multiplier=plan.noise_multiplier,
        expected_batch_size=plan.expected_batch_size, presummed=True)
  else:
    aggregate = _divide(plan.expected_batch_size)
  tx = optax.chain(aggregate, optimizer)

  def step(carry, t):
    params, opt_state, overflow = carry
    total, overflowed = _clipped_batch_sum(keys.sampling, plan, t,
                                           clipped_sum, params, data)
    updates, opt_state = tx.update(total, opt_state, params)
    params = optax.apply_updates(params, updates)
    if post_update is not None:
      params = post_update(params)
    overflow = overflow + overflowed
    return (params, opt_state, overflow), None

  carry = (params, tx.init(params), jnp.zeros((), jnp.int32))
  (params, _, overflow), _ = jax.lax.scan(
      step, carry, jnp.arange(plan.steps), unroll=min(unroll, plan.steps))
  return TrainResult(params, overflow)
