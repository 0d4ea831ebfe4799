"""Federated DP-SGD over the participant axis, under four trust models.

Participants hold disjoint rows, stacked as an array axis
(:class:`federated.partition.Participants`: x (P, n, d), y (P, n), a row
mask for the padding). Every step, every participant works on its own rows
in one ``vmap`` (``chunk`` participants at a time when memory asks for it),
and a server combines what they send. One model is trained for all
classes (e.g. softmax regression, :mod:`mechanisms.erm.softmax`), so no ε
is split over classes.

Trust models (``trust``), each with its own accounting:

* ``"server"`` — *server noise*. Each participant Poisson-samples its rows
  at rate q, clips every example's gradient to C and sends the clipped sum;
  the server adds one N(0, σ²C²I) to the total and divides by qN (N the
  rows of all participants). The union of the rows is then
  Poisson-sampled at rate q, as in central DP-SGD: every row gets the
  subsampled Gaussian guarantee (σ, q, T) against anyone who sees the
  model or the noisy totals. This assumes *secure aggregation*: the server
  learns the sum of the participants' messages, not each message (an
  unnoised clipped sum is not private on its own). Since only that sum is
  seen, the simulation gathers the participants' sampled rows into one
  batch of G rows (:attr:`FedSGDPlan.server_batch`) before clipping: the
  same sum, at the cost of about qN rows a step instead of P padded
  batches.
* ``"local"`` — *local noise*. Each participant adds its own
  N(0, σ²C²I) to its clipped sum before sending; the server is not
  trusted. Each participant's rows get the subsampled Gaussian guarantee
  (σ, q, T) against the server; the ledger reports that one (the same for
  every participant: q, σ and T are theirs alike). The released model
  carries P independent noises, so its rows are in fact covered at
  σ√P; the record states it as ``central_noise_multiplier``.
* ``"participant"`` — *participant-level* DP (DP-FedSGD). The unit of
  privacy is a participant: each step includes every participant with
  probability q (Poisson over participants), each included one computes
  the mean gradient over its rows at the current model and clips it as a
  whole to C; the server adds N(0, σ²C²I) and divides by qP. Subsampled
  Gaussian (σ, q, T) under adding or removing one participant with all its
  rows.
* ``"distributed"`` — *distributed discrete Gaussian* under simulated
  secure aggregation (:mod:`federated.ddgsgd`). Rows are sampled as for
  ``"local"``; each participant clips, scales, rotates and conditionally
  rounds *every row* to integers (row L2 norm ≤ Δ on the grid, so one row
  moves the sum by ≤ Δ), sums them, adds its own discrete Gaussian share
  of variance σ²/P and sends the sum modulo 2^b, masked by pairwise
  secure-aggregation masks (:mod:`federated.secagg`). The server sees
  masked messages only; their sum is the central noisy sum. Against the
  server (given secure aggregation): T Poisson-subsampled steps of the
  sum of P_min shares (``min_survivors``, the protocol's threshold),
  accounted by Kairouz, Liu & Steinke's Theorem 1 and Zhu & Wang's
  subsampling bound (:mod:`dpcore.ddg_accounting`), recorded as an RDP
  curve. Should secure aggregation fail, each participant's rows keep the
  guarantee of its own share (``settings()["own_epsilon"]``).

Host side, :func:`make_plan` fixes every public fact (P, n, q, T, C, σ
given or calibrated for a target (ε, δ), the padded batch B, the trust
model, the relation) and :meth:`FedSGDPlan.record` writes the run's ledger
entries; :func:`release` is the pure release, key first, plan second.
Sizes (rows per participant, P) are public, as everywhere in
:mod:`federated`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpcore import (
  accounting,
  clipping,
  ddg,
  ddg_accounting,
  dpsgd,
  ghost,
  linalg,
  noise,
  options,
  trainer,
  validation,
)
from federated import ddgsgd

PyTree = Any

__all__ = [
    "FedSGDPlan", "RELATION", "make_plan", "release",
]

RELATION = options.Relation.ADD_REMOVE
"""The relation of every trust model: one row added or removed (for
``"participant"``, one participant's rows)."""

_ASSUMPTIONS = {
    "server": ("secure aggregation: the server sees only the sum of the "
               "participants' clipped sums, to which it adds the noise"),
    "local": ("none: each participant noises its own clipped sum; the "
              "guarantee is each participant's against the server"),
    "participant": ("the unit of privacy is a participant (all its rows); "
                    "the server adds the noise to the sum of clipped "
                    "participant updates"),
    "distributed": ("secure aggregation (simulated, federated.secagg): the "
                    "server sees only the modular sum of the masked "
                    "messages; at least min_survivors participants' noise "
                    "shares are in every sum released"),
}


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["clip_norm", "noise_multiplier", "row_plan", "epsilon",
                 "target_epsilon", "delta", "ddg_params"],
    meta_fields=["trust", "num_participants", "rows", "num_examples",
                 "sampling_rate", "steps", "truncation_probability",
                 "sampler_departure", "relation", "server_batch",
                 "min_survivors"])
@dataclasses.dataclass(frozen=True)
class FedSGDPlan:
  """The public description of one federated DP-SGD run (see make_plan).

  Attributes:
    trust: ``"server"``, ``"local"``, ``"participant"`` or
      ``"distributed"``.
    num_participants: P.
    rows: n, the padded rows per participant (the longest participant).
    num_examples: N, the real rows of all participants.
    sampling_rate: q, per row (server, local) or per participant.
    steps: T.
    clip_norm: C.
    noise_multiplier: σ (per participant for ``"local"``).
    row_plan: the per-participant :class:`dpcore.trainer.DPSGDPlan` of
      the row-level trust models (n rows, B, the sampler), else None. It
      only samples and clips: its own σ is 0, the noise is this plan's.
    truncation_probability: P(some participant's batch exceeds B, or
      (``"server"``) the step's sampled slots exceed ``server_batch``, in
      some step): the union bound (0 for ``"participant"``).
    sampler_departure: the samplers' departure from exact Poisson
      sampling, over all participants and steps.
    epsilon: the guarantee: the ε at ``delta`` that a ledger holding
      :meth:`record`'s entries reports (at most ``target_epsilon`` when σ
      was calibrated); None where there is none to state (no ``delta``,
      or σ = 0).
    target_epsilon: the budget ε σ was calibrated for (:func:`make_plan`
      with ``epsilon=``); None when σ was given directly.
    delta: the δ at which :meth:`record` states the steps' stand-alone ε
      and ``epsilon`` holds (the target's δ when σ was calibrated).
    relation: add/remove one row (for ``"participant"``, one participant
      with all its rows): :data:`RELATION`.
    server_batch: ``"server"`` only (else None): G, the rows of one step's
      clipped sum. The participants' sampled slots (P·B of them, about
      q·P·n filled) are gathered into G rows before the per-example
      gradients, so a step costs about q·N rows, not P·B; G is chosen like
      B (:func:`dpcore.dpsgd.max_batch_size` over P·n slots), its
      overflow is part of ``truncation_probability``.
    ddg_params: ``"distributed"`` only: the grid, bits and noise share
      (:class:`dpcore.ddg.DDGParams`).
    min_survivors: ``"distributed"`` only: P_min, the fewest participants
      a step's secure sum proceeds with; the guarantee counts P_min noise
      shares.

  A pytree whose leaves are C, σ, the row plan's C and σ, ε, the target
  ε and δ, and for ``"distributed"`` the numbers of its
  :class:`dpcore.ddg.DDGParams` that follow σ (the grid step, the
  rounding bound, the noise share's sampler); the other facts, q
  included, are static. Under ``jax.jit`` a plan passed as an argument
  gives one compiled program for every ε of the same run shape.
  """
  trust: str
  num_participants: int
  rows: int
  num_examples: int
  sampling_rate: float
  steps: int
  clip_norm: float
  noise_multiplier: float
  row_plan: trainer.DPSGDPlan | None
  truncation_probability: float
  sampler_departure: float
  epsilon: float | None
  target_epsilon: float | None
  delta: float | None
  relation: options.Relation = RELATION
  server_batch: int | None = None
  ddg_params: ddg.DDGParams | None = None
  min_survivors: int | None = None

  @property
  def divisor(self) -> float:
    """qN (rows) or qP (participants): the public divisor of the sum."""
    if self.trust == "participant":
      return self.sampling_rate * self.num_participants
    return self.sampling_rate * self.num_examples

  @property
  def assumption(self) -> str:
    """What the guarantee assumes of the server, in words."""
    return _ASSUMPTIONS[self.trust]

  @property
  def central_noise_multiplier(self) -> float:
    """The noise of the released model per unit of sensitivity."""
    if self.trust == "local":
      return self.noise_multiplier * math.sqrt(self.num_participants)
    return self.noise_multiplier

  def record(self, ledger: accounting.PrivacyLedger, *,
             label: str | None = None) -> None:
    """Records the run: T subsampled Gaussians and the sampling events.

    The steps' stand-alone ε is stated at the plan's δ.

    Raises:
      ValueError: σ = 0 (no guarantee), or a plan without δ.
    """
    label = label or f"fedsgd_{self.trust}"
    delta = self.delta
    if delta is None:
      raise ValueError("this plan has no delta: give make_plan(..., "
                       "delta=...).")
    if self.trust == "distributed":
      if self.ddg_params.sigma_share is None:
        raise ValueError(
            "this plan has noise_multiplier=0 (no noise): it has no DP "
            "guarantee to record; report "
            "accounting.no_guarantee_record(...) instead.")
      rdp = ddgsgd.central_rdp(self.ddg_params, shares=self.min_survivors,
                               sampling_rate=self.sampling_rate,
                               steps=self.steps, relation=self.relation)
      ledger.record_rdp_curve(
          orders=ddg_accounting.ORDERS, rdp=rdp, delta=delta, label=label,
          relation=self.relation,
          params={"sensitivity": self.ddg_params.sensitivity,
                  "sigma_share": float(self.ddg_params.sigma_share),
                  "shares": self.min_survivors, "dim": self.ddg_params.padded,
                  "sampling_rate": self.sampling_rate, "steps": self.steps})
      ledger.record_truncation(self.truncation_probability,
                               label=f"{label}_padding")
      if self.sampler_departure > 0:
        ledger.record_truncation(self.sampler_departure,
                                 label=f"{label}_sampler_departure")
      return
    if self.trust == "participant":
      if self.noise_multiplier <= 0:
        raise ValueError(
            "this plan has noise_multiplier=0 (no noise): it has no DP "
            "guarantee to record; report "
            "accounting.no_guarantee_record(...) instead.")
      ledger.record_subsampled_gaussian(
          noise_multiplier=self.noise_multiplier,
          sampling_rate=self.sampling_rate, steps=self.steps, delta=delta,
          label=label, relation=self.relation)
      return
    # The row-level run is DP-SGD's own record (one path): the participants'
    # σ, and their padding and sampler events summed over participants.
    dataclasses.replace(
        self.row_plan, noise_multiplier=float(self.noise_multiplier),
        truncation_probability=self.truncation_probability,
        sampler_departure=self.sampler_departure,
        delta=float(delta)).record(ledger, label=label)

  def settings(self) -> dict:
    """JSON-ready public settings (for records)."""
    out = {"trust": self.trust, "assumption": self.assumption,
           "participants": self.num_participants, "rows": self.rows,
           "total_rows": self.num_examples,
           "sampling_rate": self.sampling_rate, "steps": self.steps,
           "clip_norm": self.clip_norm,
           "noise_multiplier": self.noise_multiplier,
           "central_noise_multiplier": self.central_noise_multiplier}
    if self.row_plan is not None:
      out["max_batch"] = self.row_plan.max_batch
      out["sampler"] = self.row_plan.sampler
    if self.server_batch is not None:
      out["server_batch"] = self.server_batch
    if self.ddg_params is not None:
      p = self.ddg_params
      out.update({
          "bits": p.bits, "padded_dim": p.padded, "model_dim": p.dim,
          "granularity": p.gamma, "beta": p.beta,
          "rounded_sensitivity": p.sensitivity,
          "sigma_share": (None if p.sigma_share is None
                          else float(p.sigma_share)),
          "min_survivors": self.min_survivors,
          "bits_per_participant_step": p.bits * p.padded,
          "float32_bits_per_participant_step": 32 * p.dim,
          "wrap_probability": ddg.wrap_probability(
              bits=p.bits, padded=p.padded, norm=p.norm,
              rows=self.num_participants * self.row_plan.max_batch,
              noise_variance=(0.0 if p.sigma_share is None else
                              self.num_participants
                              * float(p.sigma_share) ** 2),
              steps=self.steps)})
      if p.sigma_share is not None and self.delta is not None:
        # Each participant's rows if secure aggregation fails: its message
        # alone (one share), against the server, with the padding's and
        # the sampler's departures (at most the run's) charged as the
        # central record charges them.
        own = accounting.PrivacyLedger()
        own.record_rdp_curve(
            orders=ddg_accounting.ORDERS, rdp=ddgsgd.own_rdp(
                p, sampling_rate=self.sampling_rate, steps=self.steps,
                relation=self.relation),
            delta=self.delta, label="own_share", relation=self.relation)
        departure = min(1.0, self.truncation_probability
                        + self.sampler_departure)
        if departure > 0:
          own.record_truncation(departure, label="own_departure")
        g = own.guarantee(self.delta)
        out["own_epsilon"], out["own_delta"] = g.epsilon, g.delta
    return out


def make_plan(sizes, *, trust: str, sampling_rate: float, clip_norm: float,
              noise_multiplier: float | None = None,
              epsilon: float | None = None, delta: float | None = None,
              steps: int | None = None, epochs: float | None = None,
              overflow_probability: float = 1e-9,
              model_size: int | None = None, bits: int = 16,
              min_survivors: int | None = None) -> FedSGDPlan:
  """Validates a federated DP-SGD run and derives its public facts.

  Args:
    sizes: rows of each participant (public), length P.
    trust: ``"server"``, ``"local"``, ``"participant"`` or
      ``"distributed"`` (module doc).
    sampling_rate: q in (0, 1]: per row, or per participant for
      ``"participant"``.
    clip_norm: C > 0.
    noise_multiplier: σ ≥ 0, given directly (σ = 0: no noise and no
      guarantee, tests only); or None to calibrate it for ``epsilon`` at
      ``delta`` (:func:`dpcore.accounting.calibrate_dpsgd_noise` at this q
      and T).
    epsilon: the budget ε σ is calibrated for (only without
      ``noise_multiplier``), kept as ``target_epsilon``; the plan's
      ``epsilon`` is the guarantee its record composes to (at most this).
    delta: the target's δ, and the δ the record states the steps' ε at
      (needed by :meth:`FedSGDPlan.record`; without it the plan states no
      ε).
    steps: T; or
    epochs: E (T = round(E/q), :func:`dpcore.dpsgd.num_steps`).
    overflow_probability: the padded batch B of a participant is chosen so
      that P(any participant's batch exceeds it in any step) ≤ this; for
      ``"server"`` the gathered rows G so that P(the sampled rows exceed
      G in any step) ≤ this / 1000.
    model_size: ``"distributed"`` only: d, the model's parameter count
      (the length of the vectors rounded and summed).
    bits: ``"distributed"`` only: b, bits per coordinate of the messages
      and of the modular sum.
    min_survivors: ``"distributed"`` only: P_min ≤ P, the fewest
      participants a step proceeds with (default P: no dropouts); the
      guarantee counts P_min shares of σ²/P each. With ``epsilon``, σ is
      calibrated by the distributed accounting
      (:func:`federated.ddgsgd.calibrate`), not the Gaussian's.

  Returns:
    A :class:`FedSGDPlan`.

  Raises:
    ValueError: an argument out of range, or neither (or both) of
      ``noise_multiplier`` and ``epsilon``.
  """
  trust = options.parse(options.Trust, trust, "trust")
  sizes = np.asarray(sizes)
  if sizes.ndim != 1 or sizes.size == 0 or not np.issubdtype(
      sizes.dtype, np.integer) or np.any(sizes < 1):
    raise ValueError(f"sizes must be a non-empty list of row counts ≥ 1, "
                     f"got {sizes.tolist()!r}.")
  q = validation.check_in_range(sampling_rate, "sampling_rate", 0.0, 1.0,
                                high_inclusive=True)
  clip_norm = validation.check_positive(clip_norm, "clip_norm")
  steps = accounting.dpsgd_steps(sampling_rate=q, steps=steps, epochs=epochs)
  if trust == "distributed":
    # The arguments are checked here; σ is calibrated below, by the
    # distributed accounting (trainer.resolve_noise's is the Gaussian's).
    if (noise_multiplier is None) == (epsilon is None) or (
        epsilon is not None and delta is None):
      raise ValueError("give noise_multiplier=, or epsilon= and delta= to "
                       "calibrate it (not both).")
    if delta is not None:
      delta = validation.check_delta(delta)
    if epsilon is not None:
      epsilon = validation.check_epsilon(epsilon)
    sigma = noise_multiplier
  else:
    sigma, epsilon, delta = trainer.resolve_noise(
        noise_multiplier=noise_multiplier, epsilon=epsilon, delta=delta,
        sampling_rate=q, steps=steps)
  overflow_probability = validation.check_in_range(
      overflow_probability, "overflow_probability", 0.0, 1.0)
  count, rows, total = int(sizes.size), int(sizes.max()), int(sizes.sum())
  # The programs index the P × n padded slots (≥ the rows) with int32.
  validation.check_count_product(
      {"participants": count, "rows of the largest participant": rows},
      "participants × rows", fix="split the data over fewer or smaller "
      "participants (the padded slots are P × max(sizes))")
  row_plan, server_batch, truncation, departure = _row_sampling(
      trust, count, rows, sampling_rate=q, steps=steps, clip_norm=clip_norm,
      overflow_probability=overflow_probability)
  ddg_params = survivors = None
  if trust == "distributed":
    sigma, ddg_params, survivors = _distributed_noise(
        count, model_size=model_size, min_survivors=min_survivors,
        epsilon=epsilon, noise_multiplier=sigma, delta=delta,
        clip_norm=clip_norm, bits=bits, rows=count * row_plan.max_batch,
        sampling_rate=q, steps=steps,
        departure=min(1.0, truncation + departure))
  plan = FedSGDPlan(trust, count, rows, total, q, steps, clip_norm, sigma,
                    row_plan, truncation, departure, None, epsilon, delta,
                    server_batch=server_batch, ddg_params=ddg_params,
                    min_survivors=survivors)
  return dataclasses.replace(plan, epsilon=_guarantee(plan))


def _row_sampling(trust, count, rows, *, sampling_rate, steps, clip_norm,
                  overflow_probability):
  """(row_plan, server_batch, truncation, departure) of the row sampling.

  Every trust model but ``"participant"`` Poisson-samples each
  participant's rows into a padded batch of B (``row_plan``, overflow
  shared out over the P participants); ``"server"`` also gathers the
  sampled slots into G rows (``server_batch``). ``truncation`` is the
  probability that some batch overflows, ``departure`` the sampler's
  (both charged to δ by the plan's record).
  """
  if trust == "participant":
    return None, None, 0.0, 0.0
  row_plan = trainer.make_plan(
      rows, sampling_rate=sampling_rate, steps=steps, clip_norm=clip_norm,
      noise_multiplier=0.0,
      overflow_probability=overflow_probability / count)
  truncation = count * row_plan.truncation_probability
  departure = min(1.0, count * row_plan.sampler_departure)
  server_batch = None
  if trust == "server":
    # The sampled slots of a step number Binomial(P·n, q) whatever the
    # data (padding slots are sampled too, then weighted 0).
    slots, filled = count * rows, count * row_plan.max_batch
    # A thousandth of the participants' share: G grows by a few rows, and
    # the guarantee by nothing visible.
    server_batch = min(filled, dpsgd.max_batch_size(
        slots, sampling_rate=sampling_rate, steps=steps,
        overflow_probability=overflow_probability * 1e-3))
    if server_batch < filled:  # else no step can overflow it
      truncation += dpsgd.truncation_probability(
          slots, sampling_rate=sampling_rate, steps=steps,
          max_batch=server_batch)
  return row_plan, server_batch, min(1.0, truncation), departure


def _distributed_noise(count, *, model_size, min_survivors, epsilon,
                       noise_multiplier, delta, clip_norm, bits, rows,
                       sampling_rate, steps, departure):
  """``"distributed"``'s (σ, grid, P_min): σ given or calibrated by the
  distributed accounting (:func:`federated.ddgsgd.calibrate`)."""
  if model_size is None:
    raise ValueError('trust="distributed" needs model_size= (the '
                     'number of model parameters summed).')
  model_size = validation.check_positive_int(model_size, "model_size")
  survivors = count if min_survivors is None else (
      validation.check_positive_int(min_survivors, "min_survivors"))
  if survivors > count:
    raise ValueError(f"min_survivors={survivors} exceeds the {count} "
                     f"participants.")
  sigma, ddg_params = ddgsgd.calibrate(
      epsilon=epsilon, noise_multiplier=noise_multiplier, delta=delta,
      dim=model_size, clip_norm=clip_norm, bits=bits, count=count,
      survivors=survivors, rows=rows, sampling_rate=sampling_rate,
      steps=steps, departure=departure)
  return sigma, ddg_params, survivors


def _guarantee(plan: FedSGDPlan) -> float | None:
  """The plan's ``epsilon``: the ledger's ε at its δ after ``record``;
  None without δ or without noise (no guarantee to state)."""
  if plan.delta is None:
    return None
  if plan.trust == "distributed":
    if plan.ddg_params.sigma_share is None:
      return None
  elif plan.noise_multiplier <= 0:
    return None
  return accounting.plan_epsilon(plan)


def _check_participants(plan, x, y, mask):
  shape = (plan.num_participants, plan.rows)
  if jnp.shape(x)[:2] != shape or jnp.shape(y)[:2] != shape or (
      jnp.shape(mask) != shape):
    raise ValueError(
        f"participants' x, y and mask need leading axes {shape} (P, n) of "
        f"the plan, got x {jnp.shape(x)}, y {jnp.shape(y)}, mask "
        f"{jnp.shape(mask)}.")
  if validation.is_concrete(mask):
    # The plan's N sets the divisor qN (and the distributed grid's row
    # bound): a mask of other rows would be mis-scaled in silence.
    real = int(np.count_nonzero(np.asarray(mask) > 0))
    if real != plan.num_examples:
      raise ValueError(
          f"mask marks {real} real rows, but the plan was made for N = "
          f"{plan.num_examples} (make_plan's sizes); make the plan from "
          f"these participants' sizes.")


def _map(fn, args, chunk):
  """vmap over the participant axis, ``chunk`` participants at a time."""
  if chunk is None:
    return jax.vmap(fn)(*args)
  return jax.lax.map(lambda a: fn(*a), args, batch_size=chunk)


def _noise_like(key, tree, stddev):
  leaves, treedef = jax.tree.flatten(tree)
  keys = jax.random.split(key, len(leaves))
  return jax.tree.unflatten(treedef, [
      noise.gaussian_noise(k, a.shape, stddev=stddev, dtype=a.dtype)
      for a, k in zip(leaves, keys, strict=True)])


def release(key: jax.Array, plan: FedSGDPlan,
          loss: Callable[[PyTree, PyTree], jax.Array], params: PyTree,
          x, y, mask, optimizer: optax.GradientTransformation, *,
          chunk: int | None = None, alive=None) -> trainer.TrainResult:
  """Runs the plan's T federated steps as one ``lax.scan`` (jit-able).

  Args:
    key: PRNG key; participant p's sampling stream is ``fold_in(sampling,
      p)``, its noise stream (``"local"``) ``fold_in(noise, p)``, and step
      t folds in t, so no key is used twice.
    plan: from :func:`make_plan`.
    loss: per-example loss ``loss(params, (x_row, y_row))``; a
      :class:`dpcore.ghost.LayeredLoss` (e.g.
      :func:`mechanisms.erm.softmax.loss`) takes
      the fast clipping path.
    params: initial model (data-independent).
    x, y, mask: (P, n, ...) rows, labels and the 0/1 row mask of the
      padding (e.g. a :class:`federated.partition.Participants`).
    optimizer: the server's optax optimiser, applied to the noisy mean.
    chunk: participants per vmapped block (memory), None for all at once;
      the result does not depend on it beyond float rounding. Unused by
      ``"server"``, whose step holds G gathered rows, not P batches.
    alive: ``"distributed"`` only: (T, P) 0/1, whose messages reach the
      server at each step (default all). A step with fewer than
      ``plan.min_survivors`` aborts (secure aggregation's threshold) and
      leaves the model and optimiser state as they were. Dropouts must
      not depend on the data or the noise.

  Returns:
    A :class:`dpcore.trainer.TrainResult`: the model (released under the
    plan's guarantee) and the (participant) steps whose batch exceeded B,
    summed.

  Privacy: under :attr:`FedSGDPlan.relation` (add/remove one row; for
  ``"participant"``, one participant), T steps of the Poisson-subsampled
  Gaussian mechanism (sensitivity C, noise σC) as the module docstring
  describes for each trust model, recorded by :meth:`FedSGDPlan.record`.
  The row mask is bounded to [0, 1] and multiplies the batch mask, so a
  padding row never enters a sum.
  """
  validation.check_key(key)
  if not isinstance(plan, FedSGDPlan):
    raise ValueError(f"plan must come from make_plan, got {type(plan)}.")
  x, y, mask = jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask)
  _check_participants(plan, x, y, mask)
  if not callable(loss):
    raise TypeError(f"loss must be a function, got {loss!r}.")
  if chunk is not None:
    chunk = validation.check_positive_int(chunk, "chunk")
  if not hasattr(optimizer, "update"):
    raise TypeError(f"optimizer must be an optax GradientTransformation, "
                    f"got {optimizer!r}.")
  mask = clipping.clip_weights(mask)
  if plan.trust == "distributed":
    shape = (plan.steps, plan.num_participants)
    alive = (jnp.ones(shape, bool) if alive is None
             else jnp.asarray(alive).astype(bool))
    if alive.shape != shape:
      raise ValueError(f"alive must be (T, P) = {shape}, got "
                       f"{alive.shape}.")
  elif alive is not None:
    raise ValueError('alive= is for trust="distributed" only.')
  sampling, noise_key = jax.random.split(key)
  run = _Run(plan=plan, loss=loss, x=x, y=y, mask=mask, sampling=sampling,
             noise_key=noise_key, alive=alive, chunk=chunk)
  noisy_sum = _NOISY_SUMS[plan.trust]

  def step(carry, t):
    params, state, overflow = carry
    total, over, ok = noisy_sum(run, t, params)
    grads = jax.tree.map(lambda s: s / plan.divisor, total)
    updates, new_state = optimizer.update(grads, state, params)
    new_params = optax.apply_updates(params, updates)
    if ok is not None:  # an aborted secure sum leaves the step undone
      keep = functools.partial(jnp.where, ok)
      new_params = jax.tree.map(keep, new_params, params)
      new_state = jax.tree.map(keep, new_state, state)
    return (new_params, new_state, overflow + over), None

  carry = (params, optimizer.init(params), jnp.zeros((), jnp.int32))
  (params, _, overflow), _ = jax.lax.scan(step, carry,
                                          jnp.arange(plan.steps))
  return trainer.TrainResult(params, overflow)


class _Run(NamedTuple):
  """What every step of one :func:`release` reads (built once per trace).

  ``sampling`` and ``noise_key`` are the two halves of the run's key;
  ``alive`` is ``"distributed"``'s (T, P) survivors, else None.
  """
  plan: FedSGDPlan
  loss: Callable
  x: jax.Array
  y: jax.Array
  mask: jax.Array
  sampling: jax.Array
  noise_key: jax.Array
  alive: jax.Array | None
  chunk: int | None

  @property
  def stddev(self):
    return self.plan.noise_multiplier * self.plan.clip_norm

  def clipped_sum(self, params, batch, weights, clip_norm):
    """Σ wᵢ·clip(∇ℓ(params, rowᵢ), C): the layered fast path or vmap."""
    inner = (self.loss.clipped_sum
             if isinstance(self.loss, ghost.LayeredLoss)
             else trainer.per_example_clipped_sum(self.loss))
    return inner(params, batch, weights, clip_norm)

  def central_noise(self, t, total):
    """``total`` + N(0, σ²C²I) from the server's stream at step t."""
    return jax.tree.map(jnp.add, total, _noise_like(
        jax.random.fold_in(self.noise_key, t), total, self.stddev))


# One function per trust model: step t's noisy sum of clipped gradients
# (a pytree like the model), the batches that overflowed B, and whether
# the step went through (None: always).

def _server_sum(run: _Run, t, params):
  """``"server"``: the participants' Poisson batches, then one clipped sum
  over the sampled slots gathered into G rows (the same rows and weights
  as summing each participant's batch; only the order of the sum moves),
  then the server's noise."""
  plan, participants = run.plan, jnp.arange(run.plan.num_participants)

  def draw(p):
    batch = dpsgd.poisson_batch(
        jax.random.fold_in(jax.random.fold_in(run.sampling, p), t),
        plan.rows, sampling_rate=plan.sampling_rate,
        max_batch=plan.row_plan.max_batch, method=plan.row_plan.sampler)
    over = batch.size > plan.row_plan.max_batch
    return batch.indices, batch.slot_mask, over
  indices, taken, over = jax.vmap(draw)(participants)
  taken = taken.reshape(-1)
  slot = jnp.cumsum(taken > 0) - 1
  room = plan.server_batch
  target = jnp.where((taken > 0) & (slot < room), slot, room)  # room: drop
  owner = jnp.repeat(participants, indices.shape[1])

  def gather(values):
    return jnp.zeros((room,), values.dtype).at[target].set(values,
                                                           mode="drop")
  who, row = gather(owner), gather(indices.reshape(-1))
  weight = gather(taken) * run.mask[who, row]
  total = run.clipped_sum(params, (run.x[who, row], run.y[who, row]),
                          weight, plan.clip_norm)
  dropped = jnp.sum(taken > 0) > room
  return (run.central_noise(t, total),
          jnp.sum(over) + dropped.astype(jnp.int32), None)


def _messages_sum(run: _Run, message, chosen):
  """Σₚ chosen[p]·(participant p's message), and its overflows."""
  sums, over = _map(message, (jnp.arange(run.plan.num_participants),
                              run.x, run.y, run.mask), run.chunk)
  total = jax.tree.map(linalg.full_precision(
      lambda s: jnp.tensordot(chosen.astype(s.dtype), s, axes=1)), sums)
  return total, jnp.sum(over)


def _local_sum(run: _Run, t, params):
  """``"local"``: each participant noises its own clipped batch sum from
  its own stream; the server adds the messages."""
  plan = run.plan

  def masked(params, batch, batch_mask, clip_norm):
    xb, yb, mb = batch
    return run.clipped_sum(params, (xb, yb), batch_mask * mb, clip_norm)

  def message(p, xp, yp, mp):
    total, over = trainer.clipped_batch_sum(
        jax.random.fold_in(run.sampling, p), plan.row_plan, t, None, params,
        (xp, yp, mp), clipped_sum=masked)
    total = jax.tree.map(jnp.add, total, _noise_like(
        jax.random.fold_in(jax.random.fold_in(run.noise_key, p), t), total,
        run.stddev))
    return total, over
  total, over = _messages_sum(run, message,
                              jnp.ones((plan.num_participants,), jnp.float32))
  return total, over, None


def _participant_sum(run: _Run, t, params):
  """``"participant"``: one coin per participant, in place (participant p
  is in the step iff chosen[p] = 1; a compacted batch's slot mask would
  not say so); each one's mean gradient clipped as a whole; the server's
  noise."""
  plan = run.plan

  def message(p, xp, yp, mp):
    del p
    # A padding row is weighted 0, but 0·NaN is NaN in the loss and its
    # gradient: zero the padding so only real rows reach the sum.
    xp = jnp.where(jnp.reshape(mp > 0, mp.shape + (1,) * (xp.ndim - 1)),
                   xp, 0)

    def mean_loss(w):
      losses = jax.vmap(run.loss, in_axes=(None, 0))(w, (xp, yp))
      return jnp.sum(losses * mp) / jnp.maximum(jnp.sum(mp), 1.0)
    return clipping.clip_to_norm(jax.grad(mean_loss)(params),
                                 plan.clip_norm), jnp.zeros((), bool)
  chosen = dpsgd.poisson_inclusion(
      jax.random.fold_in(run.sampling, t), plan.num_participants,
      sampling_rate=plan.sampling_rate)
  total, over = _messages_sum(run, message, chosen)
  return run.central_noise(t, total), over, None


def _distributed_sum(run: _Run, t, params):
  """``"distributed"``: participants encode and mask; the server sees the
  masked messages only (:func:`federated.ddgsgd.step_sum`)."""
  return ddgsgd.step_sum(run.noise_key, t, params, run.loss, run.x, run.y,
                         run.mask, run.alive[t], plan=run.plan,
                         chunk=run.chunk)


_NOISY_SUMS = {options.Trust.SERVER: _server_sum,
               options.Trust.LOCAL: _local_sum,
               options.Trust.PARTICIPANT: _participant_sum,
               options.Trust.DISTRIBUTED: _distributed_sum}
