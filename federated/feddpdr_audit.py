"""Audit specs of FedDPDR-DPML (:mod:`federated.feddpdr`), one participant.

``feddpdr_participant@{first,middle,last}``: the DP-PCA basis and the
objective-perturbation fit that one participant releases,
:func:`federated.feddpdr.train` itself, for a participant of
:data:`ROWS` rows whose canary's label flips between the neighbours
(replace-one, the relation the pipeline is accounted under), the canary
first, in the middle or last of its rows (the others are 0: they add
nothing to XᵀX and their projections nothing to the fit), with the ε of
the plan's privacy record and the paper's nominal ε.

The broken variant, reported with the unbroken plan's ε, must be caught:
``feddpdr_participant_clip_skipped`` (the participant's projected rows
reach its fit without being clipped to norm ≤ 1; its canary, the
first row, is 10·e₁, as in the unbroken spec, where the clip binds).

``feddpdr_distributed_moments@{first,middle,last}``: the PCA release of
``aggregation="distributed_moments"`` (:mod:`federated.feddpdr.
secure_moments`): what the server decodes from the secure sum,
:func:`~federated.feddpdr.secure_moments.release` (the keys ``train``
gives), the real encoding (clip, upper(xxᵀ), grid, rotation,
conditional rounding, exact discrete Gaussian shares, modulo 2^b),
masking, unmasking and decoding. 3 participants of 2 rows, d = 2 (D = 4
coordinates), ε₁ = 2 at δ = 10⁻²; the canary row, row 0 of participant
0, row 1 of participant 1 or row 1 of participant 2, is e₀ in ``data_0``
and e₁ in ``data_1`` (replace-one; the other rows are 0, which round to
exactly 0). The exact vectors are then √2 apart, the most two unit rows
can be, while the claim is accounted at 2Δ (the rounded rows' bound),
so a bound near 1/√2 of the claim's μ is all the audit can reach.
Statistic: M₁₁ − M₀₀ of the decoded matrix (the direction u(e₁) − u(e₀)).
Claim: the PCA release's ε from its own ledger entry (the curve against
the server, P shares).
``feddpdr_distributed_moments_share_over_p`` (broken): 9 participants of
one row, each drawing its share with σ/P instead of σ/√P (the sum then
has σ/√P = σ/3), reported with the unbroken plan's ε.

``feddpdr_distributed_moments_dropout@{first,middle,last}``: the same
release with dropouts, in the worst case the protocol proceeds with:
6 participants of one row, ``min_survivors`` P_min = 3, and exactly 3
arrive, participants 0, 2 and 5 (:data:`DROPOUT_SURVIVORS`: spread, so
that a sum read from the first P_min slots instead of the survivors loses
the canary at some positions, which the audits' power check sees); the
canary row is that of the first, middle or last survivor (the dropped
participants' rows are 0), ``alive`` going to
:func:`~federated.feddpdr.secure_moments.release` as the server sees it.
Claim: the plan's own ledger entry (P_min shares), ε₁ = 2 at δ = 10⁻².
``feddpdr_distributed_moments_dropout_all_shares`` (broken): 9
participants of one row, P_min = 1, participant 0 alone arrives, and the
release (the library's, σ calibrated for one share) is reported with the
ε of its curve accounted as if all 9 shares were in the sum, the
smaller claim a wrong share count makes.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from dpcore import accounting, ddg
from dpcore import noise as dp_noise
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  check_variant,
  claimed_epsilon,
  identity,
)
from federated import feddpdr
from federated.feddpdr import secure_moments
from mechanisms.erm import objective_perturbation as op
from mechanisms.pca import dp_pca

BROKEN = ("clip_skipped",)
CANARY_SCALE = 10.0
"""The canary row's norm: the library clips it to 1, the broken variant
does not."""
ROWS = 3
"""The rows of the audited participant: the canary and two rows of 0."""


def unclipped_participant(key, x, labels, mask, traced: feddpdr.Traced, *,
                          config: feddpdr.Config):
  """One DPDR-DPML participant's (basis, β) with the fit's clip left out.

  The broken variant. What :func:`federated.feddpdr.train` runs for
  participant 0 of a two-class ``dpdr_dpml`` run — the same keys, its
  DP-PCA basis (:func:`mechanisms.pca.dp_pca.noisy_basis`), the noise b
  of its one fit — except that the rows projected on the basis go to the
  minimiser as they are: neither the stage nor
  :func:`mechanisms.erm.objective_perturbation.one_vs_rest` clips them to
  norm ≤ 1 (the gap noise z is added as there). On rows of norm ≤ 1 the
  two agree (the basis is orthonormal); p is calibrated for that bound
  alone, so a row of norm r moves the fit's gradient r times as far as
  the noise covers.

  Args:
    key: the repeat's key (``train``'s ``keys[0]``).
    x: (1, n_max, d) the participant's rows.
    labels: (1, n_max) its class ids (0 or 1).
    mask: (1, n_max) 1 for real rows.
    traced: the plan's numbers (σ float32; n, p, θ, ε_g float64).
    config: the run's settings (k, λ, loss, tolerance).

  Returns:
    ``(basis, beta)``: the (d, k) basis and the (k,) classifier.
  """
  static = feddpdr.program(config)
  pca_keys, fit_keys = feddpdr.participant_keys(key, 1)
  x, labels, mask = x[0], labels[0], mask[0]
  basis = dp_pca.noisy_basis(pca_keys[0], x, mask, k=static.k,
                             sigma=traced.sigma[0].astype(x.dtype),
                             topk=static.topk).components
  rows = (x @ basis).astype(jnp.float64)  # not clipped: the defect
  b_key, z_key = jax.random.split(fit_keys[0])
  b = op.perturbation_noise(b_key, static.k, p=traced.p[0], num=1,
                            dtype=rows.dtype)
  z = dp_noise.objective_perturbation_noise(
      z_key, static.k, num=1, dtype=rows.dtype,
      beta=op.gap_rate(epsilon_gap=traced.epsilon_gap[0], tol=static.tol,
                       lam=static.lam, theta=traced.theta[0]))
  y = jnp.where(labels == 1, 1.0, -1.0).astype(rows.dtype)
  fit = op.minimise(rows, y, mask.astype(rows.dtype),
                    num_examples=traced.sizes[0], lam=static.lam,
                    theta=traced.theta[0], b=b[0], loss=static.loss,
                    h=static.huber_h, tol=static.tol,
                    max_iter=static.max_iter)
  return basis, fit.beta + z[0]


def feddpdr_spec(*, epsilon: float = 2.0, delta: float = 1e-4,
                 lam: float = 100.0, position: str = "first",
                 broken: str | None = None) -> AuditSpec:
  """One FedDPDR-DPML participant's releases: DP-PCA basis and its fit.

  A participant of :data:`ROWS` rows (d = 2, k = 2, two classes) whose
  canary, at ``position`` (one of :data:`dpcore.audit_spec.POSITIONS`;
  the broken variant's is first), is x = :data:`CANARY_SCALE`·e₁
  (clipped to e₁ by the library: the audit also tests the clip) with
  label 1 in ``data_0``
  and 0 in ``data_1`` (replace-one, the relation the pipeline is
  accounted under); the other rows are 0, labelled 1 in both. The
  mechanism is
  :func:`federated.feddpdr.train` itself for that one participant; the
  statistic is the released model mapped back to the input space, −(Ûβ̂)₁
  (with k = d the basis is a rotation, so this probes the fit).

  ``broken``: None, or ``"clip_skipped"`` (:data:`BROKEN`): the
  participant's row, which it forgot to normalise, has its projection
  reach the fit unclipped
  (:func:`unclipped_participant`). DP-PCA still clips its copy, and the
  row is the same in both neighbours, so the basis tells nothing; the
  fit's gradient flips by 2·10 where the noise is calibrated for 2.
  Reported with the plan's ε, the audit must find a bound above it.
  """
  check_variant(broken, BROKEN)
  position = "first" if broken else position
  canary = canary_index(ROWS, position)
  config = feddpdr.Config(mechanism="dpdr_dpml", epsilon=epsilon,
                          delta=delta, k=2, lam=lam)
  plan = feddpdr.make_plan([ROWS], dim=2, num_classes=2, config=config)
  row_norm = CANARY_SCALE  # clipped to 1 unless the clip is skipped
  x = jnp.zeros((1, ROWS, 2), jnp.float32).at[0, canary, 0].set(row_norm)
  mask = jnp.ones((1, ROWS), jnp.float32)
  arrays = tuple(jnp.asarray(a) for a in
                 (plan.sigma.astype("float32"), plan.sizes, plan.p, plan.theta,
                  plan.epsilon_gap))

  def mechanism(key, labels):
    traced = feddpdr.Traced(*(a.astype(jnp.float64) if i else a
                              for i, a in enumerate(arrays)))
    if broken == "clip_skipped":
      return unclipped_participant(key, x, labels, mask, traced,
                                   config=config)
    out = feddpdr.train(key[None], feddpdr.Rows(x, labels, mask), traced,
                        config=config, num_classes=2)
    return out.bases[0, 0], out.betas[0, 0, 0]

  def statistic(out):
    basis, beta = out
    return -(basis @ beta)[0]

  return AuditSpec(
      **identity("feddpdr_participant",
                 position=None if broken else position, broken=broken,
                 trials=(100_000, 20_000)),
      relation="replace_one",
      settings={"mechanism": config.mechanism, "epsilon": epsilon,
                "delta": delta, "d": 2, "k": 2, "lam": lam, "n": ROWS,
                "canary_row": canary, "epsilon_pca": plan.epsilon_pca,
                "epsilon_fit": plan.epsilon_fit, "row_norm": row_norm,
                "variant": broken or "library"},
      mechanism=mechanism, data_0=jnp.ones((1, ROWS), jnp.int32),
      data_1=jnp.ones((1, ROWS), jnp.int32).at[0, canary].set(0),
      statistic=statistic,
      delta=delta,
      reported_epsilon=claimed_epsilon(plan.privacy, "replace_one"),
      nominal_epsilon=plan.privacy["epsilon_nominal"], x64=True)


SECURE_BROKEN = ("share_over_p",)
"""The broken variant of :func:`distributed_moments_spec`."""

_SECURE_LAYOUT = {None: (3, 2), "share_over_p": (9, 1)}
"""(participants, rows each) of every variant."""


def distributed_moments_spec(*, position: str = "first",
                             broken: str | None = None,
                             epsilon_pca: float = 2.0,
                             audit_delta: float = 1e-2) -> AuditSpec:
  """One spec of ``aggregation="distributed_moments"`` (module docstring).

  Args:
    position: where the canary row sits among all rows (the broken
      variant uses ``"first"``).
    broken: None, or one of :data:`SECURE_BROKEN`.
    epsilon_pca: ε₁ (the run's ε is twice it).
    audit_delta: the run's δ, at which the claim is read.
  """
  check_variant(broken, SECURE_BROKEN)
  position = position if broken is None else "first"
  participants, rows = _SECURE_LAYOUT[broken]
  dim = 2
  secure = _secure_plan([rows] * participants, epsilon_pca=epsilon_pca,
                        audit_delta=audit_delta)
  reported = _claim(secure, audit_delta)
  run, extra = secure, {}
  if broken == "share_over_p":
    p = secure.params
    run = dataclasses.replace(secure, params=dataclasses.replace(
        p, sigma_share=ddg.share_sigma(
            secure.noise_multiplier * p.norm / participants)))
    extra = {"run_sigma_share": float(run.params.sigma_share)}
  unit = canary_index(participants * rows, position)
  x_0, x_1, mask = _canary_rows(participants, rows, dim, unit)

  def mechanism(key, x):
    return secure_moments.release(key, run, x, mask)

  return AuditSpec(
      **identity("feddpdr_distributed_moments", position=position,
                 broken=broken, trials=(30_000, 10_000)),
      relation="replace_one",
      settings={**_public_settings(secure), **extra,
                "participants": participants,
                "rows": rows, "d": dim, "canary_unit": unit,
                "canary": "e0 -> e1", "unit": "row",
                "variant": broken or "library"},
      mechanism=mechanism, data_0=x_0, data_1=x_1, statistic=_diagonal_move,
      delta=audit_delta, reported_epsilon=reported)


def _secure_plan(sizes, *, epsilon_pca: float, audit_delta: float,
                 min_survivors: int | None = None):
  """The PCA plan of ``distributed_moments`` on ``sizes`` (d = 2, k = 1)."""
  config = feddpdr.Config(epsilon=2 * epsilon_pca, delta=audit_delta, k=1,
                          aggregation="distributed_moments",
                          min_survivors=min_survivors)
  return feddpdr.make_plan(sizes, dim=2, num_classes=2, config=config).pca


def _claim(plan, audit_delta: float) -> float:
  """The ε ``plan`` records, at the audit's δ, under replace-one."""
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  return claimed_epsilon(ledger, "replace_one", audit_delta)


def _canary_rows(participants: int, rows: int, dim: int, unit: int):
  """(data_0, data_1, mask): every row 0 (rounds to exactly 0) but row
  ``unit`` of all participants' rows, e₀ in data_0 and e₁ in data_1."""
  x_0 = jnp.zeros((participants, rows, dim), jnp.float32)
  x_1 = x_0.at[unit // rows, unit % rows, 1].set(1.0)
  x_0 = x_0.at[unit // rows, unit % rows, 0].set(1.0)
  return x_0, x_1, jnp.ones((participants, rows), jnp.float32)


def _diagonal_move(m):
  """M₁₁ − M₀₀ of the decoded matrix: the direction u(e₁) − u(e₀)."""
  return m[1, 1] - m[0, 0]


def _public_settings(secure) -> dict:
  return {k: v for k, v in secure.settings().items() if k != "assumption"}


DROPOUT_BROKEN = ("all_shares",)
"""The broken variant of :func:`distributed_moments_dropout_spec`."""

DROPOUT_SURVIVORS = {None: (6, (0, 2, 5)), "all_shares": (9, (0,))}
"""(participants, the survivors: exactly P_min of them) of every variant."""


def distributed_moments_dropout_spec(*, position: str = "first",
                                     broken: str | None = None,
                                     epsilon_pca: float = 2.0,
                                     audit_delta: float = 1e-2
                                     ) -> AuditSpec:
  """One spec of ``distributed_moments`` with dropouts (module docstring).

  Args:
    position: which survivor holds the canary row (the broken variant
      uses ``"first"``).
    broken: None, or one of :data:`DROPOUT_BROKEN`.
    epsilon_pca: ε₁ (the run's ε is twice it).
    audit_delta: the run's δ, at which the claim is read.
  """
  check_variant(broken, DROPOUT_BROKEN)
  position = position if broken is None else "first"
  participants, survivors = DROPOUT_SURVIVORS[broken]
  dim = 2
  secure = _secure_plan([1] * participants, epsilon_pca=epsilon_pca,
                        audit_delta=audit_delta, min_survivors=len(survivors))
  # The broken claim: the same release, its curve at all P shares.
  reported = _claim(secure if broken is None else dataclasses.replace(
      secure, min_survivors=participants), audit_delta)
  alive = jnp.zeros((participants,), bool).at[jnp.asarray(survivors)].set(
      True)
  unit = survivors[canary_index(len(survivors), position)]
  x_0, x_1, mask = _canary_rows(participants, 1, dim, unit)

  def mechanism(key, x):
    return secure_moments.release(key, secure, x, mask, alive)

  extra = ({} if broken is None else
           {"claimed_shares": participants, "claimed_epsilon_pca": reported})
  return AuditSpec(
      **identity("feddpdr_distributed_moments_dropout", position=position,
                 broken=broken, trials=(30_000, 10_000)),
      relation="replace_one",
      settings={**_public_settings(secure), **extra, "rows": 1, "d": dim,
                "survivors": list(survivors), "canary_unit": unit,
                "canary": "e0 -> e1", "unit": "row",
                "variant": broken or "library"},
      mechanism=mechanism, data_0=x_0, data_1=x_1, statistic=_diagonal_move,
      delta=audit_delta, reported_epsilon=reported)


def specs() -> list[AuditSpec]:
  """The one-participant FedDPDR-DPML audit at every position and its
  broken variant, then every position of the distributed moments and
  theirs, then the same with dropouts and theirs."""
  return ([feddpdr_spec(position=p) for p in POSITIONS]
          + [feddpdr_spec(broken="clip_skipped")]
          + [distributed_moments_spec(position=p) for p in POSITIONS]
          + [distributed_moments_spec(broken=b) for b in SECURE_BROKEN]
          + [distributed_moments_dropout_spec(position=p)
             for p in POSITIONS]
          + [distributed_moments_dropout_spec(broken=b)
             for b in DROPOUT_BROKEN])


__all__ = ["BROKEN", "CANARY_SCALE", "DROPOUT_BROKEN", "DROPOUT_SURVIVORS",
           "ROWS", "SECURE_BROKEN", "distributed_moments_dropout_spec",
           "distributed_moments_spec", "feddpdr_spec", "specs",
           "unclipped_participant"]
