"""FedDPDR's ``aggregation="distributed_moments"``: XᵀX under secure sums.

``aggregation="moments"`` has every participant release its own noisy
upper(XᵢᵀXᵢ) + Zᵢ (local trust: each release private alone) and the server
take the top k of the sum. Here the same sum is formed with the
distributed discrete Gaussian (:mod:`dpcore.ddg`) under simulated secure
aggregation (:mod:`federated.secagg`), the machinery of federated
DP-SGD's ``trust="distributed"`` (:mod:`federated.ddgsgd`):

1. participant i clips its rows to norm ≤ 1 and bounds its mask to
   [0, 1] as DP-PCA does (:func:`mechanisms.pca.dp_pca.clipped_rows`);
   each row x gives u = upper(xxᵀ), the row-major upper triangle with the
   diagonal that DP-PCA noises (d(d+1)/2 entries, ‖u‖ ≤ ‖xxᵀ‖_F = ‖x‖²
   ≤ 1);
2. :func:`dpcore.ddg.encode` scales every u to the grid, rotates it by
   the public key, rounds *each row* conditionally (‖ũ‖ ≤ Δ on the grid),
   sums them, adds the participant's share N_Z(0, s²)^D and reduces
   modulo 2^b; :func:`federated.secagg.mask_message` masks it
   (:func:`message`, participant side);
3. the server gets only :func:`federated.secagg.server_sum` of the
   masked messages that arrive, removes the dropped participants' pair
   masks with the survivors' revealed seeds
   (:func:`federated.secagg.unmasking`), decodes the sum
   (:func:`dpcore.ddg.decode`), mirrors it to a symmetric matrix
   (:func:`server_moments`) and takes the top k
   (:func:`federated.aggregation.moments_aggregate`), as for ``moments``.

Dropouts. ``alive`` (P,) says whose messages arrive; it is a traced
argument, so one compiled program serves every dropout pattern. A
dropped participant's message, its rows and its noise share are not in
the sum. With fewer than P_min = ``min_survivors`` survivors the protocol
aborts (:func:`federated.secagg.server_sum`'s ``ok`` False): the release
is then a matrix of NaNs, never a sum that could pass for a decoded one
(the abort depends on ``alive`` alone, which is public, so it tells
nothing about the data). Dropouts must not depend on the data or the
noise.

Keys: participant i encodes with its DP-PCA key
(:func:`federated.feddpdr.participant_keys`; ``encode`` splits it into
its rounding and noise streams), and the rotation and the masks come from
:func:`federated.feddpdr.keys.protocol_keys`, a stream of their own.

Privacy (replace-one of a row of one participant, the relation FedDPDR
is accounted under, :data:`federated.feddpdr.RELATION`): a replaced row
moves the integer sum by ũ − ũ′, ‖ũ − ũ′‖ ≤ 2Δ (Δ =
``params.sensitivity``; the √2 of the exact vectors does not survive the
rounding). The server sees one unsampled sum of at least P_min shares: RDP from
:func:`dpcore.ddg_accounting.sum_rdp` at sensitivity 2Δ, shares P_min
(:func:`federated.ddgsgd.central_rdp` with ``relation="replace_one"``,
``sampling_rate=1``, one step), recorded as an RDP curve; s is calibrated
(:func:`federated.ddgsgd.calibrate`) so that this release alone meets the
PCA part of the budget, (ε₁, δ). The curve counts P_min shares, the
fewest the protocol proceeds with (:func:`federated.ddgsgd.central_rdp`:
more survivors only add independent noise), so it holds for every
dropout pattern the release does not abort on. Should secure aggregation
fail, the
server sees participant i's message: its own share alone (shares = 1),
the ``own_epsilon_pca`` of :meth:`SecureMomentsPlan.settings`. Wrap-around
(a coordinate leaving the b-bit range) is an accuracy failure, bounded by
:func:`dpcore.ddg.wrap_probability` and recorded.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import (
  accounting,
  clipping,
  ddg,
  ddg_accounting,
  options,
  rotation,
  validation,
)
from dpcore import noise as dp_noise
from federated import ddgsgd, secagg
from federated.feddpdr.keys import participant_keys, protocol_keys
from mechanisms.pca import dp_pca

__all__ = [
    "ASSUMPTION", "BITS", "LABEL", "MAX_DIM", "SecureMomentsPlan",
    "check_dim", "check_min_survivors", "make_plan", "message",
    "noise_free_params", "noisy_moments", "params_record", "release",
    "server_moments", "upper_dim", "upper_rows",
]

BITS = 20
"""b, bits per coordinate of every message (≤ :data:`dpcore.ddg.MAX_BITS`)."""

LABEL = "dp_pca_secure_sum"
"""The ledger label of the release."""

ASSUMPTION = ("secure aggregation (simulated, federated.secagg): the server "
              "sees only the modular sum of the masked messages that "
              "arrive; at least min_survivors participants' noise shares "
              "are in the sum (the protocol aborts otherwise)")
"""What the central guarantee assumes (the record's ``assumption``)."""


def upper_dim(dim: int) -> int:
  """d(d+1)/2: the upper triangle of a d × d matrix, diagonal included."""
  return dim * (dim + 1) // 2


def _largest_dim() -> int:
  d = 1
  while rotation.padded_dim(upper_dim(d + 1)) <= ddg.MAX_PADDED_DIM:
    d += 1
  return d


MAX_DIM = _largest_dim()
"""The largest d whose d(d+1)/2 pads to at most
:data:`dpcore.ddg.MAX_PADDED_DIM` coordinates (361)."""


def check_dim(dim: int) -> int:
  """d ≤ :data:`MAX_DIM`, or a one-line ValueError saying what to use."""
  dim = validation.check_positive_int(dim, "dim")
  if dim > MAX_DIM:
    padded = rotation.padded_dim(upper_dim(dim))
    raise ValueError(
        f"aggregation=distributed_moments sums upper(xxᵀ), d(d+1)/2 = "
        f"{upper_dim(dim)} coordinates for d={dim}, padded to {padded} > "
        f"{ddg.MAX_PADDED_DIM} (dpcore.ddg.MAX_PADDED_DIM): it takes d <= "
        f"{MAX_DIM}; use aggregation=moments, or fewer features.")
  return dim


@dataclasses.dataclass(frozen=True)
class SecureMomentsPlan:
  """The public facts of the secure sum of the participants' XᵢᵀXᵢ.

  Attributes:
    epsilon: the release's guarantee against the server at ``delta``
      (the ledger's ε of :meth:`record`); at most ``target_epsilon``.
    target_epsilon: ε₁, the budget s was calibrated for.
    delta: δ of the release.
    relation: replace-one (the curve's sensitivity is 2Δ).
    params: the grid, bits and share σ (:class:`dpcore.ddg.DDGParams`).
    noise_multiplier: z, the central σ = z·c grid units when all P
      arrive (z in the rows' units: the decoded sum's noise then has
      σ ≈ z per entry, and z·√(P_min/P) with P_min survivors).
    participants: P, every participant adds one share.
    min_survivors: P_min ≤ P, the fewest survivors the protocol proceeds
      with (its threshold), the shares the curve is accounted at.
    rows: the most rows summed (the wrap-around bound's m).
    dim: d.
  """
  epsilon: float | None
  target_epsilon: float
  delta: float
  relation: options.Relation
  params: ddg.DDGParams
  noise_multiplier: float
  participants: int
  min_survivors: int
  rows: int
  dim: int

  @property
  def sensitivity(self) -> float:
    """2Δ: a replaced row's move of the integer sum (L2, grid units)."""
    return ddgsgd.sensitivity(self.params, self.relation)

  def _rdp(self, shares: int, relation) -> np.ndarray:
    return ddgsgd.central_rdp(self.params, shares=shares, sampling_rate=1.0,
                              steps=1, relation=relation or self.relation)

  def record(self, ledger: accounting.PrivacyLedger, *, label: str = LABEL,
             relation: options.Relation | str | None = None,
             own: bool = False) -> None:
    """Puts the release into ``ledger``: its RDP curve against the server.

    Args:
      ledger: a :class:`dpcore.accounting.PrivacyLedger`.
      label: the entry's label.
      relation: the relation to account it under (None: the plan's);
        add/remove has sensitivity Δ, replace-one 2Δ.
      own: the participant's own guarantee if secure aggregation fails
        (its share alone, shares = 1) instead of the central one (P_min
        shares).
    """
    relation = options.parse_relation(relation or self.relation)
    shares = 1 if own else self.min_survivors
    ledger.record_rdp_curve(
        orders=ddg_accounting.ORDERS, rdp=self._rdp(shares, relation),
        delta=self.delta, label=label, relation=relation,
        params={"sensitivity": ddgsgd.sensitivity(self.params, relation),
                "sigma_share": float(self.params.sigma_share),
                "shares": shares, "dim": self.params.padded})

  def own_epsilon(self) -> float:
    """The release's ε at δ against the server if secure aggregation
    fails: one participant's message, its share alone."""
    ledger = accounting.PrivacyLedger()
    self.record(ledger, own=True)
    return ledger.guarantee(self.delta).epsilon

  def settings(self) -> dict:
    """JSON-ready public facts, both guarantees of the PCA release."""
    return {**params_record(self.params, rows=self.rows,
                            count=self.participants,
                            min_survivors=self.min_survivors),
            "assumption": ASSUMPTION,
            "sensitivity": self.sensitivity,
            "noise_multiplier": self.noise_multiplier,
            "epsilon_pca": self.epsilon,
            "target_epsilon_pca": self.target_epsilon,
            "own_epsilon_pca": self.own_epsilon(), "delta": self.delta}


def params_record(params: ddg.DDGParams, *, rows: int, count: int,
                  min_survivors: int | None = None) -> dict:
  """The grid's facts, with the wrap-around bound of one sum.

  ``shares`` and ``min_survivors`` are P_min (``min_survivors``, default
  P = ``count``), the shares the guarantee counts on, and
  ``central_sigma`` the decoded noise's σ with exactly P_min survivors
  (the least); ``participants`` is P, and the wrap-around bound is that
  of all P shares and ``rows`` rows (the most)."""
  share = None if params.sigma_share is None else float(params.sigma_share)
  survivors = count if min_survivors is None else min_survivors
  return {
      "trust": "distributed", "bits": params.bits,
      "padded_dim": params.padded, "upper_dim": params.dim,
      "granularity": params.gamma, "beta": params.beta,
      "rounded_sensitivity": params.sensitivity, "sigma_share": share,
      "shares": survivors, "participants": count,
      "min_survivors": survivors,
      "central_sigma": (None if share is None
                        else share * math.sqrt(survivors) * params.gamma),
      "bits_per_participant": params.bits * params.padded,
      "wrap_probability": ddg.wrap_probability(
          bits=params.bits, padded=params.padded, norm=params.norm,
          rows=rows, noise_variance=count * (share or 0.0) ** 2, steps=1)}


def _calibrated(epsilon, *, delta, dim, count, rows, bits, survivors=None):
  return ddgsgd.calibrate(
      epsilon=epsilon, noise_multiplier=None if epsilon else 0.0,
      delta=delta, dim=upper_dim(dim), clip_norm=1.0, bits=bits,
      count=count, survivors=count if survivors is None else survivors,
      rows=rows, sampling_rate=1.0, steps=1,
      relation=options.Relation.REPLACE_ONE)


def check_min_survivors(min_survivors: int | None, count: int) -> int:
  """P_min: ``min_survivors`` in [1, P] (None: P, no dropouts), or a
  one-line ValueError."""
  if min_survivors is None:
    return count
  survivors = validation.check_positive_int(min_survivors, "min_survivors")
  if survivors > count:
    raise ValueError(f"min_survivors={survivors} exceeds the {count} "
                     f"participants; choose min_survivors <= {count}.")
  return survivors


def make_plan(*, epsilon: float, delta: float, dim: int, count: int,
              rows: int, bits: int = BITS,
              min_survivors: int | None = None) -> SecureMomentsPlan:
  """Calibrates the share σ so that the release meets (ε₁, δ) (host-side).

  Args:
    epsilon: ε₁, the PCA part of the budget.
    delta: δ.
    dim: d ≤ :data:`MAX_DIM`.
    count: P, the participants (each adds a share).
    rows: the most rows summed (Σ nᵢ), for the wrap-around bound.
    bits: b.
    min_survivors: P_min ≤ P, the fewest participants whose messages the
      protocol proceeds with (fewer: it aborts); s is calibrated so that
      P_min shares alone meet (ε₁, δ). None: P (every participant must
      arrive).

  Returns:
    A :class:`SecureMomentsPlan` whose ``epsilon`` (the ledger's) is at
    most ``epsilon``, within the calibration's 0.1 % on z.

  Raises:
    ValueError: one line naming the argument and the fix.
  """
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  dim = check_dim(dim)
  count = validation.check_positive_int(count, "count")
  survivors = check_min_survivors(min_survivors, count)
  rows = validation.check_positive_int(rows, "rows")
  z, params = _calibrated(epsilon, delta=delta, dim=dim, count=count,
                          rows=rows, bits=bits, survivors=survivors)
  plan = SecureMomentsPlan(None, epsilon, delta,
                           options.Relation.REPLACE_ONE, params, z, count,
                           survivors, rows, dim)
  return dataclasses.replace(plan, epsilon=accounting.plan_epsilon(plan))


def noise_free_params(*, dim: int, count: int, rows: int,
                      bits: int = BITS) -> ddg.DDGParams:
  """The grid of the same sum without noise (``nonpriv``: rounding only)."""
  return _calibrated(None, delta=None, dim=check_dim(dim), count=count,
                     rows=rows, bits=bits)[1]


def upper_rows(x: jax.Array, mask: jax.Array) -> jax.Array:
  """(n, d(d+1)/2) float32: upper(xxᵀ) of every row, clipped as DP-PCA
  clips (:func:`mechanisms.pca.dp_pca.clipped_rows`: norm ≤ 1, the mask
  bounded to [0, 1]), so each has norm ≤ 1 whatever the input."""
  rows = dp_pca.clipped_rows(jnp.asarray(x, jnp.float32), mask)
  i, j = np.triu_indices(rows.shape[-1])
  return rows[:, i] * rows[:, j]


def message(key: jax.Array, rotation_key: jax.Array, setup_key: jax.Array,
            index, x: jax.Array, mask: jax.Array, *, params: ddg.DDGParams,
            count: int) -> jax.Array:
  """Participant ``index``'s masked message (participant side).

  Args:
    key: the participant's key (its DP-PCA key: rounding and noise share).
    rotation_key: the public rotation key.
    setup_key: the secure-aggregation setup (participants only).
    index: the participant's index in [0, P).
    x: (n, d) its rows; mask: (n,) 1 for real rows.
    params: the plan's :class:`dpcore.ddg.DDGParams`.
    count: P.

  Returns:
    uint32 (D,): Σ ũ + its share, modulo 2^b, masked.
  """
  weights = (clipping.clip_weights(mask) > 0).astype(jnp.float32)
  encoded = ddg.encode(key, rotation_key, upper_rows(x, mask), weights,
                       params=params)
  return secagg.mask_message(setup_key, 0, jnp.int32(index), encoded,
                             count=count, bits=params.bits)


def _alive(alive, count: int) -> jax.Array:
  """(P,) bool: ``alive`` (None: every participant arrives)."""
  if alive is None:
    return jnp.ones((count,), bool)
  if jnp.shape(alive) != (count,):
    raise ValueError(f"alive must be ({count},), one flag per participant, "
                     f"got shape {jnp.shape(alive)}.")
  return jnp.asarray(alive).astype(bool)


def server_moments(masked: jax.Array, alive: jax.Array,
                   rotation_key: jax.Array, setup_key: jax.Array, *,
                   params: ddg.DDGParams, dim: int,
                   min_survivors: int | None = None) -> jax.Array:
  """The server's (d, d) symmetric Σ_{i alive} XᵢᵀXᵢ + noise (server side).

  Args:
    masked: uint32 (P, D), the masked messages (a dropped participant's
      row is ignored: it never arrived).
    alive: (P,) bool, whose messages arrived (traced).
    rotation_key: the public rotation key.
    setup_key: the secure-aggregation setup; the server uses only what
      the survivors reveal of it (:func:`federated.secagg.unmasking`).
    params: the plan's :class:`dpcore.ddg.DDGParams`.
    dim: d.
    min_survivors: P_min, the protocol's threshold (None: P).

  Returns:
    (d, d) float32: the decoded secure sum of the survivors' messages,
    mirrored; all NaN where fewer than P_min arrived (the protocol
    aborts, :func:`federated.secagg.server_sum`).
  """
  count = masked.shape[0]
  threshold = check_min_survivors(min_survivors, count)
  alive = _alive(alive, count)
  correction = secagg.unmasking(setup_key, 0, alive, count=count,
                                padded=params.padded, bits=params.bits)
  total, ok = secagg.server_sum(masked, alive, correction, bits=params.bits,
                                threshold=threshold)
  upper = jnp.where(ok, ddg.decode(total, rotation_key, params=params),
                    jnp.float32(jnp.nan))
  return dp_noise.symmetric_from_upper(upper, dim)


def noisy_moments(key: jax.Array, x: jax.Array, mask: jax.Array,
                  alive: jax.Array | None = None, *, params: ddg.DDGParams,
                  min_survivors: int | None = None) -> jax.Array:
  """The server's matrix of one repeat: every participant's message with
  the keys :func:`federated.feddpdr.train` gives them, summed securely.

  Args:
    key: the repeat's key.
    x: (P, n, d) rows; mask: (P, n).
    alive: (P,) bool, whose messages reach the server (traced); None:
      every participant's.
    params: the plan's :class:`dpcore.ddg.DDGParams`.
    min_survivors: P_min, the protocol's threshold (None: P).

  Returns:
    (d, d) float32, what the server decodes (its top k is the basis); all
    NaN where fewer than P_min arrived (:func:`server_moments`).
  """
  count, _, dim = x.shape
  alive = _alive(alive, count)
  pca_keys, _ = participant_keys(key, count)
  rotation_key, setup_key = protocol_keys(key)
  masked = jax.vmap(lambda k, i, xi, mi: message(
      k, rotation_key, setup_key, i, xi, mi, params=params, count=count))(
          pca_keys, jnp.arange(count, dtype=jnp.int32), x, mask)
  return server_moments(masked, alive, rotation_key, setup_key,
                        params=params, dim=dim, min_survivors=min_survivors)


def release(key: jax.Array, plan: SecureMomentsPlan, x: jax.Array,
            mask: jax.Array, alive: jax.Array | None = None) -> jax.Array:
  """The release of ``plan``: :func:`noisy_moments` at its parameters.

  Pure and jittable; what ``plan.record`` accounts (the server's decoded
  (d, d) matrix; its top k is post-processing).

  Args:
    key: the repeat's key.
    plan: from :func:`make_plan`.
    x: (P, n, d) rows; mask: (P, n) 1 for real rows.
    alive: (P,) bool, whose messages reach the server (traced, so one
      program serves every pattern; it must not depend on the data or
      the noise); None: every participant's. Fewer than
      ``plan.min_survivors`` survivors abort the protocol: the matrix is
      then all NaN.

  Privacy: replace-one of a row of one participant moves the integer sum
  by ≤ 2Δ (each row clipped to norm ≤ 1 and rounded to norm ≤ Δ here,
  whatever the input); the sum carries at least P_min shares N_Z(0, s²)
  (else it is not released): the plan's RDP curve against the server,
  given secure aggregation (module docstring). A dropped participant's
  rows are not in the sum.
  """
  if not isinstance(plan, SecureMomentsPlan):
    raise TypeError(f"plan must be a SecureMomentsPlan (from make_plan), "
                    f"got {type(plan).__name__}.")
  if x.shape[0] != plan.participants or x.shape[-1] != plan.dim:
    raise ValueError(f"x must be ({plan.participants}, n, {plan.dim}) for "
                     f"this plan, got {x.shape}.")
  if validation.is_concrete(mask):
    real = int(np.count_nonzero(np.asarray(mask) > 0))
    if real > plan.rows:
      raise ValueError(
          f"mask marks {real} rows, more than the {plan.rows} the plan's "
          f"grid was chosen for (make_plan(rows=...)): the b-bit sum could "
          f"wrap around; make the plan for these rows.")
  alive = _alive(alive, plan.participants)
  return noisy_moments(key, x, mask, alive, params=plan.params,
                       min_survivors=plan.min_survivors)
