"""Audit specs of Analyze-Gauss DP-PCA (:mod:`mechanisms.pca.dp_pca`).

``dp_pca@first``, ``@middle``, ``@last``: the whole eigendecomposition
released for a canary row 10·e₁ (clipped to e₁: the audit also tests the
clip) at each position among the d rows, against
the same padded rows with the canary masked out (add/remove), with the
ε the plan's own ledger claims. ``dp_pca_discrete@…``: the same with the
exact noise (``noise="discrete"``: XᵀX on the grid γ = 2⁻⁸ plus discrete
Gaussian noise, accounted at the lattice sensitivity). ``dp_pca_replace@…``
(``relation="replace_one"``): the canary row is e₁ in ``data_1`` and e₂
in ``data_0``, the other rows 0, and the statistic the noisy
M₁₁ − M₂₂, which the replacement moves by 2 (the sensitivity √2 of the
upper triangle, along its direction).

Each has a broken variant, reported with the unbroken plan's ε, that must
be caught: ``dp_pca_clip_skipped`` and ``dp_pca_discrete_clip_skipped``
(the same rows, the canary first, enter XᵀX without being clipped to
norm ≤ 1), ``dp_pca_replace_sensitivity_one`` (the noise of the
add/remove plan, calibrated for sensitivity 1, under the replace-one
claim).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from dpcore import accounting, lattice
from dpcore import noise as dp_noise
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  check_variant,
  claimed_epsilon,
  identity,
)
from mechanisms.pca import dp_pca

BROKEN = ("clip_skipped",)
GRID = 2.0 ** -8
"""The grid of the discrete mode's specs."""
CANARY_SCALE = 10.0
"""The canary row's norm: the library clips it to 1, the broken variant
does not."""


def unclipped_release(key, plan: dp_pca.PcaPlan, x, mask) -> dp_pca.PcaResult:
  """``dp_pca.release`` with the row clip left out (the broken variant).

  XᵀX of the unmasked rows as given, plus the plan's symmetric noise drawn
  as :func:`dp_pca.second_moment_and_noise` draws it: the σ is calibrated
  for rows of norm ≤ 1, which nothing here enforces, so a row of norm r
  moves XᵀX by r² instead of at most 1.
  """
  m = dp_pca.second_moment(x, mask)
  d = m.shape[0]
  if plan.noise == "discrete":
    # Rows of norm > 1 would be zeroed by the exact integer XᵀX
    # (dpcore.lattice.integer_rows): the float one rounded to the grid.
    units = lattice.to_lattice(m[np.triu_indices(d)], plan.granularity)
    noisy = dp_pca._lattice_noisy(key, units, sigma=plan.sampler,
                                  granularity=plan.granularity)
  else:
    z = dp_noise.gaussian_noise(key, (d * (d + 1) // 2,),
                                stddev=plan.sigma, dtype=m.dtype)
    noisy = m + dp_noise.symmetric_from_upper(z, d)
  return dp_pca.top_k_eigenvectors(noisy, plan.k)


def dp_pca_spec(*, epsilon: float = 1.0, delta: float = 1e-5,
                audit_delta: float = 1e-2, dim: int = 3,
                position: str = "first", broken: str | None = None,
                noise: str = "float") -> AuditSpec:
  """Analyze-Gauss DP-PCA (add/remove), a canary row e₁ vs without.

  Both data sets have the same padded shape; the canary's slot (at
  ``position`` among the d rows) is masked out in ``data_0``. The release
  is the full eigendecomposition (k = d), from which the statistic
  rebuilds e₁ᵀ(noisy M)e₁ = Σⱼ λⱼ (vⱼ·e₁)²: the noisy diagonal entry the
  canary, :data:`CANARY_SCALE`·e₁ clipped to e₁, adds 1 to.

  ``broken``: None, or ``"clip_skipped"`` (:data:`BROKEN`): the rows are
  not clipped to norm ≤ 1 before XᵀX (:func:`unclipped_release`), and the
  canary, at the first row, is a row a caller forgot to normalise. It
  adds 100 to the diagonal entry where the noise
  is calibrated for 1; reported with the plan's ε, the audit must find a
  bound above it. ``noise="discrete"``: the exact noise on the grid
  :data:`GRID` (the spec ``dp_pca_discrete``).
  """
  check_variant(broken, BROKEN)
  position = position if broken is None else "first"
  discrete = noise == "discrete"
  plan = dp_pca.make_plan(epsilon=epsilon, delta=delta, k=dim, dim=dim,
                          relation="add_remove", noise=noise,
                          granularity=GRID if discrete else None)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  at = canary_index(dim, position)
  canary_norm = CANARY_SCALE  # clipped to 1 unless the clip is skipped
  # The canary 10·e₁ in row ``at``, the other rows e₂ … e_d.
  rows = jnp.roll(jnp.eye(dim, dtype=jnp.float32), at, axis=0)
  rows = rows.at[at].multiply(canary_norm)
  mask_1 = jnp.ones((dim,), jnp.float32)
  mask_0 = mask_1.at[at].set(0.0)
  release = unclipped_release if broken == "clip_skipped" else dp_pca.release

  def mechanism(key, data):
    x, mask = data
    return release(key, plan, x, mask)

  def statistic(result):
    return jnp.sum(result.eigenvalues * result.components[0] ** 2)

  return AuditSpec(
      **identity("dp_pca_discrete" if discrete else "dp_pca",
                 position=position, broken=broken,
                 trials=(300_000, 20_000)),
      relation="add_remove",
      settings={"epsilon": epsilon, "delta": delta, "sigma": plan.sigma,
                "d": dim, "k": dim, "calibration": plan.calibration,
                "noise": noise,
                **({"granularity": GRID, "sigma_lattice": plan.sigma_lattice}
                   if discrete else {}),
                "variant": broken or "library", "canary_row": at,
                "canary_norm": canary_norm},
      mechanism=mechanism, data_0=(rows, mask_0), data_1=(rows, mask_1),
      statistic=statistic, delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", audit_delta),
      nominal_epsilon=epsilon)


def replace_spec(*, epsilon: float = 1.0, delta: float = 1e-5,
                 audit_delta: float = 1e-2, dim: int = 3,
                 position: str = "first", broken: str | None = None
                 ) -> AuditSpec:
  """DP-PCA under replace-one: the canary row e₁ against e₂.

  The other rows are 0 (they add nothing to XᵀX). The statistic rebuilds
  the noisy M₁₁ − M₂₂ = Σⱼ λⱼ ((vⱼ)₁² − (vⱼ)₂²) from the released
  eigendecomposition (k = d): the replacement moves it by 2, the noise
  of the two diagonal entries has variance 2σ². ``broken``: None, or
  ``"sensitivity_one"``: the release draws the σ of the add/remove plan
  (sensitivity 1) under the replace-one plan's claim (√2).
  """
  check_variant(broken, ("sensitivity_one",))
  position = position if broken is None else "first"
  common = {"epsilon": epsilon, "delta": delta, "k": dim, "dim": dim}
  plan = dp_pca.make_plan(**common, relation="replace_one")
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  noisy = (plan if broken is None
           else dp_pca.make_plan(**common, relation="add_remove"))
  at = canary_index(dim, position)
  x_0 = jnp.zeros((dim, dim), jnp.float32).at[at, 1].set(1.0)
  x_1 = jnp.zeros((dim, dim), jnp.float32).at[at, 0].set(1.0)
  mask = jnp.ones((dim,), jnp.float32)

  def mechanism(key, x):
    return dp_pca.release(key, noisy, x, mask)

  def statistic(result):
    v = result.components
    return jnp.sum(result.eigenvalues * (v[0] ** 2 - v[1] ** 2))

  return AuditSpec(
      **identity("dp_pca_replace", position=position, broken=broken,
                 trials=(300_000, 100_000)),
      relation="replace_one",
      settings={"epsilon": epsilon, "delta": delta, "sigma": noisy.sigma,
                "d": dim, "k": dim, "calibration": plan.calibration,
                "variant": broken or "library", "canary_row": at},
      mechanism=mechanism, data_0=x_0, data_1=x_1, statistic=statistic,
      delta=audit_delta,
      reported_epsilon=claimed_epsilon(ledger, "replace_one", audit_delta),
      nominal_epsilon=epsilon)


def specs() -> list[AuditSpec]:
  """DP-PCA with float and with exact noise (add/remove) and under
  replace-one, each with its canary first, in the middle and last, then
  their broken variants."""
  return [*(dp_pca_spec(position=p) for p in POSITIONS),
          *(dp_pca_spec(position=p, noise="discrete") for p in POSITIONS),
          *(replace_spec(position=p) for p in POSITIONS),
          dp_pca_spec(broken="clip_skipped"),
          dp_pca_spec(broken="clip_skipped", noise="discrete"),
          replace_spec(broken="sensitivity_one")]


__all__ = ["BROKEN", "CANARY_SCALE", "GRID", "dp_pca_spec", "replace_spec",
           "specs", "unclipped_release"]
