"""Federated DP-SGD's ``trust="distributed"`` step: DDG under secure sums.

The pieces :mod:`federated.fedsgd` puts together for its fourth trust
model: each participant encodes its Poisson-sampled rows with the
distributed discrete Gaussian (:mod:`dpcore.ddg`: per-row clip, scale,
rotate, conditional rounding, its noise share of σ²/P, modulo 2^b) and
masks the message (:mod:`federated.secagg`); the server receives only the
masked messages, sums them, removes the dropped participants' masks,
and decodes the sum. Host side, :func:`calibrate` picks the grid and σ
for a target ε and :func:`central_rdp` / :func:`own_rdp` give the two
guarantees the plan states. FedDPDR's ``distributed_moments``
(:mod:`federated.feddpdr.secure_moments`) calibrates its one unsampled
sum with the same three, under replace-one (``relation``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from dpcore import (
  accounting,
  calibration,
  ddg,
  ddg_accounting,
  dpsgd,
  options,
  validation,
)
from federated import secagg

__all__ = [
    "calibrate", "central_rdp", "own_rdp", "sensitivity", "step_sum",
]


_MOVED_ROWS = {options.Relation.ADD_REMOVE: 1, options.Relation.REPLACE_ONE: 2}
"""Rounded rows a neighbour moves the integer sum by: one row's x̃ added
or removed (‖x̃‖ ≤ Δ), or one replaced, x̃ − x̃′ (≤ 2Δ: the √2 of the
exact vectors does not survive rounding)."""


def sensitivity(params: ddg.DDGParams,
                relation: options.Relation = options.Relation.ADD_REMOVE
                ) -> float:
  """The integer sum's L2 sensitivity under ``relation``: Δ or 2Δ
  (Δ = ``params.sensitivity``, :data:`_MOVED_ROWS`)."""
  return _MOVED_ROWS[options.parse_relation(relation)] * params.sensitivity


def central_rdp(params: ddg.DDGParams, *, shares: int, sampling_rate: float,
                steps: int,
                relation: options.Relation = options.Relation.ADD_REMOVE
                ) -> np.ndarray:
  """The run's RDP against the server, given secure aggregation.

  T steps of the Poisson-subsampled (rate q, per row) sum of ``shares``
  (= P_min, the fewest survivors the protocol proceeds with) noise shares
  of s² each, row sensitivity Δ = ``params.sensitivity``:
  :func:`dpcore.ddg_accounting.distributed_rdp`. More survivors only add
  independent noise (post-processing), so P_min is the worst case.
  Under ``relation="replace_one"`` the sensitivity is 2Δ
  (:func:`sensitivity`) and the sum must be unsampled (q = 1: the
  subsampling bound is proven for add/remove).
  """
  if params.sigma_share is None:
    raise ValueError("no noise (noise_multiplier=0): no guarantee.")
  relation = options.parse_relation(relation)
  if relation == options.Relation.REPLACE_ONE and sampling_rate != 1.0:
    raise ValueError(f"relation=replace_one is accounted for unsampled sums "
                     f"only (sampling_rate=1), got {sampling_rate}.")
  return ddg_accounting.distributed_rdp(
      sensitivity=sensitivity(params, relation),
      sigma_share=float(params.sigma_share), shares=shares,
      dim=params.padded, sampling_rate=sampling_rate, steps=steps)


def own_rdp(params: ddg.DDGParams, *, sampling_rate: float, steps: int,
            relation: options.Relation = options.Relation.ADD_REMOVE
            ) -> np.ndarray:
  """One participant's RDP if secure aggregation fails (its share alone).

  The server then sees the participant's message: its integer row sum
  plus one discrete Gaussian share N_Z(0, s²) (τ = 0), subsampled.
  """
  return central_rdp(params, shares=1, sampling_rate=sampling_rate,
                     steps=steps, relation=relation)


def _epsilon(z, *, dim, clip_norm, bits, count, survivors, rows,
             sampling_rate, steps, delta, beta, departure, relation):
  """The ε reported for multiplier z: the central curve and the
  departure events composed at ``delta``, as the plan records them."""
  params = ddg.choose_params(dim=dim, clip_norm=clip_norm, bits=bits,
                             noise_multiplier=z, shares=count, rows=rows,
                             steps=steps, beta=beta)
  rdp = central_rdp(params, shares=survivors, sampling_rate=sampling_rate,
                    steps=steps, relation=relation)
  book = accounting.PrivacyLedger()
  book.record_rdp_curve(orders=ddg_accounting.ORDERS, rdp=rdp, delta=delta,
                        label="ddgsgd", relation=relation)
  if departure > 0:
    book.record_truncation(departure, label="ddgsgd_departure")
  return book.guarantee(delta).epsilon, params


def calibrate(*, epsilon: float | None, noise_multiplier: float | None,
              delta: float, dim: int, clip_norm: float, bits: int,
              count: int, survivors: int, rows: int, sampling_rate: float,
              steps: int, beta: float = math.exp(-0.5),
              departure: float = 0.0,
              relation: options.Relation = options.Relation.ADD_REMOVE
              ) -> tuple[float, ddg.DDGParams]:
  """(z, params): z given, or the smallest z (to 0.1 %) meeting ``epsilon``.

  z is the central noise multiplier (σ = z·C in gradient units, z·c on
  the grid); every candidate's ε is what the run's record composes to at
  ``delta``: the full :func:`central_rdp` (rounded sensitivity, rational
  shares, P_min shares) composed with ``departure``, the probability of
  the events the run departs from the accounted mechanism on (padded
  batches overflowing, the sampler's inexactness), which costs
  (1 + e^ε)·P of δ. The z returned meets the target. ``relation``: the
  neighbours the curve is for (:func:`central_rdp`; replace-one needs
  ``sampling_rate=1``).
  """
  departure = validation.check_in_range(departure, "departure", 0.0, 1.0,
                                        low_inclusive=True)
  kw = dict(dim=dim, clip_norm=clip_norm, bits=bits, count=count,
            survivors=survivors, rows=rows, sampling_rate=sampling_rate,
            steps=steps, delta=delta, beta=beta, departure=departure,
            relation=options.parse_relation(relation))
  if noise_multiplier is not None:
    z = validation.check_non_negative(noise_multiplier, "noise_multiplier")
    return z, ddg.choose_params(dim=dim, clip_norm=clip_norm, bits=bits,
                                noise_multiplier=z, shares=count, rows=rows,
                                steps=steps, beta=beta)
  epsilon = validation.check_epsilon(epsilon)
  lo, hi = 0.0, 1.0
  while _epsilon(hi, **kw)[0] > epsilon:
    lo, hi = hi, 2.0 * hi
    if hi > 1e4:
      raise ValueError(f"no noise multiplier ≤ 1e4 reaches epsilon="
                       f"{epsilon}; raise epsilon or delta.")
  _, hi = calibration.bisect(
      lambda z: not (z > 0 and _epsilon(z, **kw)[0] <= epsilon), lo, hi,
      rtol=1e-3)
  eps, params = _epsilon(hi, **kw)
  assert eps <= epsilon  # hi always meets the target
  return hi, params


def step_sum(key: jax.Array, t, params_model, loss, x, y, mask, alive, *,
             plan, chunk=None):
  """One step's decoded gradient sum (a pytree like the model) and flags.

  Participant side (inside ``participant``): sample, per-example
  gradients, :func:`dpcore.ddg.encode` with the participant's noise
  share (row p of :func:`dpcore.ddg.noise_shares`, drawn for all
  participants in one call: the same law, twice as fast),
  :func:`federated.secagg.mask_message`; only the masked message leaves
  it. Without ``chunk`` the participants' encodings run as one
  :func:`dpcore.ddg.encode_many` (bitwise the ``vmap`` of ``encode``,
  without a loop that waits for the participant with the most rows).
  Server side: the masked messages, ``alive`` and the survivors' unmasking go to
  :func:`federated.secagg.server_sum`, then :func:`dpcore.ddg.decode`.

  Returns ``(sum, overflowed batches, ok)``: ``ok`` False when fewer
  than P_min survived (the protocol aborts; the sum is zero).
  """
  p_ddg = plan.ddg_params
  count = plan.num_participants
  sampling, noise_key, setup, rotation_root, share_root = jax.random.split(
      key, 5)
  rotation_key = jax.random.fold_in(rotation_root, t)  # public
  _, unravel = ravel_pytree(params_model)

  # Every participant's noise share, row p of one exact draw (the
  # simulation's shortcut, ddg.noise_shares; each row is that
  # participant's own N_Z(0, s²)^D).
  shares = (None if p_ddg.sigma_share is None else ddg.noise_shares(
      jax.random.fold_in(share_root, t), count, params=p_ddg))

  def rows_of(p, xp, yp, mp):
    batch = dpsgd.poisson_batch(
        jax.random.fold_in(jax.random.fold_in(sampling, p), t), plan.rows,
        sampling_rate=plan.sampling_rate, max_batch=plan.row_plan.max_batch,
        method=plan.row_plan.sampler)
    xb, yb = xp[batch.indices], yp[batch.indices]
    weight = batch.slot_mask * mp[batch.indices]
    grads = jax.vmap(jax.grad(loss), in_axes=(None, 0))(params_model,
                                                        (xb, yb))
    flat = jax.vmap(lambda g: ravel_pytree(g)[0])(grads)
    return flat, weight, batch.size > plan.row_plan.max_batch

  def round_key(p):
    return jax.random.fold_in(jax.random.fold_in(noise_key, p), t)

  def masked_message(p, message):
    return secagg.mask_message(setup, t, p, message, count=count,
                               bits=p_ddg.bits)

  def participant(p, xp, yp, mp, share):
    flat, weight, over = rows_of(p, xp, yp, mp)
    message = ddg.encode(round_key(p), rotation_key, flat, weight,
                         params=p_ddg,
                         share=None if shares is None else share)
    return masked_message(p, message), over

  ids = jnp.arange(count)
  if chunk is None:
    # All participants' rows at once: ddg.encode_many is vmap(encode)
    # bitwise, in one rounding loop over every participant's rows.
    flat, weight, over = jax.vmap(rows_of)(ids, x, y, mask)
    messages = ddg.encode_many(jax.vmap(round_key)(ids), rotation_key, flat,
                               weight, params=p_ddg, shares=shares)
    masked = jax.vmap(masked_message)(ids, messages)
  else:
    args = (ids, x, y, mask,
            jnp.zeros((count, 0), jnp.int32) if shares is None else shares)
    masked, over = jax.lax.map(lambda a: participant(*a), args,
                               batch_size=chunk)
  # Server side: masked messages, who arrived, the revealed unmasking.
  correction = secagg.unmasking(setup, t, alive, count=count,
                                padded=p_ddg.padded, bits=p_ddg.bits)
  total, ok = secagg.server_sum(masked, alive, correction, bits=p_ddg.bits,
                                threshold=plan.min_survivors)
  flat_sum = ddg.decode(total, rotation_key, params=p_ddg)
  dropped_over = jnp.sum(over & alive, dtype=jnp.int32)
  return unravel(flat_sum), dropped_over, ok
