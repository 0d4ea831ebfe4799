"""DP-PCA by Gaussian noise on XᵀX (Analyze Gauss; Algorithm 2 of Wang et al.).

The second-moment matrix M = Σᵢ xᵢxᵢᵀ of the (unmasked) rows gets a
symmetric Gaussian noise matrix — each entry of the upper triangle,
diagonal included, one independent N(0, σ²) draw, mirrored below — and the
top-k eigenvectors of the noisy matrix, in descending eigenvalue order, are
the private basis. M is not centred (as in the paper): centring would need
the data mean, which is a further query.

The one shape (:mod:`dpcore.shape`): :func:`make_plan` validates and
calibrates host-side — σ for (ε, δ) and the neighbouring relation — and
returns a frozen :class:`PcaPlan`; ``plan.record(ledger)`` enters the
release in a ledger; :func:`release` is the release itself, pure, jittable
and vmappable over a leading participant axis (padded rows are removed by
``mask``)::

  plan = dp_pca.make_plan(epsilon=0.5, delta=1e-5, k=5, dim=x.shape[1])
  basis = dp_pca.release(key, plan, x)
  plan.record(ledger)

:func:`noisy_basis` is the kernel :func:`release` runs, for a σ given
directly (e.g. a traced one per participant, as in
:mod:`federated.feddpdr`); :func:`pca` is the non-private basis.

Each eigenvector's sign is fixed by :func:`dpcore.linalg.canonical_signs`
(largest-magnitude entry positive), so a basis whose eigenvalues are
separated does not depend on how the call was batched. Eigenvectors of
close eigenvalues may still come in any rotation of their span: there only
the subspace is meaningful (see :mod:`federated.aggregation`).

Privacy:
  Add/remove-one-row neighbours with ‖x‖ ≤ 1: the query changes by xxᵀ,
  whose upper triangle has L2 norm ≤ ‖xxᵀ‖_F = ‖x‖² ≤ 1, for every n
  (Lemma 4.1 of Wang et al.). Under replacement of one row it changes by
  xxᵀ − x'x'ᵀ, of norm up to √2 (orthogonal unit rows):
  ``make_plan(relation="replace_one")`` calibrates for it. With the σ of
  :func:`make_plan` the released basis is (ε, δ)-DP (post-processing of
  the Gaussian mechanism). :func:`noisy_second_moment` clips every row
  to ‖x‖ ≤ 1 before it touches the data (:func:`clipped_rows`: per row,
  data-independent, a no-op on valid rows), so the sensitivity
  holds whatever the caller passes; host-side, :func:`release` refuses
  concrete rows of norm > 1 outright (:func:`check_pca_inputs`).

Exact noise (``noise="discrete"``, opt-in): XᵀX is computed in integers
(:func:`dpcore.lattice.gram_on_lattice`: every clipped row on the grid
2⁻⁹ with its norm ≤ 1 checked exactly, the products summed exactly in
64 bits), its upper triangle rounded once to the grid γ (a power of two)
and given integer discrete Gaussian noise of σ_lattice = ⌈σ/γ⌉ grid units
(:mod:`dpcore.lattice`), so the release is integer-valued (returned as
integers·γ) and free of the floating-point leak of Mironov 2012. Rounding
adds up to one grid unit per entry to the neighbours' difference: the
lattice L2 sensitivity of the d(d+1)/2 released entries is Δ/γ +
√(d(d+1)/2) (:func:`lattice_sensitivity`), and it holds of the computed
integers, whatever the order of the sum. The release is
(Δ_lattice²/2σ_lattice²)-zCDP (:meth:`PcaPlan.record` of a plan with
``noise="discrete"``).

What float mode does not cover: its query is the float32 sum ``rows.T @
rows``, whose rounding depends on every row, so the computed matrices of
two neighbours can differ by a little more than Δ (measured with a canary
among non-negative unit rows, d = 2: 1.002 at n = 60,000 and 1.031 at
n = 10⁶, against 1), and its noise, added in float arithmetic, is open
to the rounding attack of Mironov 2012. The exact mode is the one whose
guarantee holds of what is computed (docs/exact_noise.md).

References:
  Canonne, Kamath & Steinke, The Discrete Gaussian for Differential
  Privacy, NeurIPS 2020.
  Dwork, Talwar, Thakurta & Zhang, Analyze Gauss: Optimal Bounds for
  Privacy-Preserving Principal Component Analysis, STOC 2014.
  Mironov, On Significance of the Least Significant Bits for
  Differential Privacy, CCS 2012.
  Balle & Wang, Improving the Gaussian Mechanism for Differential Privacy,
  ICML 2018 (analytic calibration).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import (
  accounting,
  clipping,
  discrete,
  discrete_calibration,
  lattice,
  linalg,
  options,
  validation,
)
from dpcore import calibration as dp_calibration
from dpcore import noise as dp_noise


class PcaResult(NamedTuple):
  """Top-k basis (d, k), columns orthonormal, and its k eigenvalues."""
  components: jax.Array
  eigenvalues: jax.Array


def sensitivity(relation: options.Relation | str) -> float:
  """L2 sensitivity of the upper triangle of XᵀX, rows of norm ≤ 1.

  1 under add/remove neighbours (one row's xxᵀ, Frobenius norm ≤ 1; the
  upper triangle of a symmetric noise matrix is what is released), √2 under
  replace-one (xxᵀ − x′x′ᵀ, two unit rank-one terms on orthogonal rows).
  ``relation`` is parsed by :func:`dpcore.options.parse_relation`.
  """
  relation = options.parse_relation(relation, "relation")
  return 1.0 if relation is options.Relation.ADD_REMOVE else math.sqrt(2.0)


def check_noise(noise: str, granularity) -> float | None:
  """Host-side check of the noise option; returns γ (None for float)."""
  options.parse(options.PcaNoise, noise, "noise")
  if noise == "float":
    if granularity is not None:
      raise ValueError("granularity applies only to noise='discrete'.")
    return None
  if granularity is None:
    raise ValueError("noise='discrete' needs a granularity, a power of two "
                     "such as 2**-10 (the grid XᵀX is rounded to).")
  return lattice.check_granularity(granularity)


def lattice_sensitivity(relation: options.Relation | str, *, dim: int,
                        granularity) -> float:
  """L2 sensitivity, in grid units, of the rounded upper triangle of XᵀX.

  Δ/γ + √(d(d+1)/2): nearest rounding of each of the d(d+1)/2 released
  entries can add up to one grid unit to the neighbours' difference
  (:func:`dpcore.lattice.lattice_l2_sensitivity`).
  """
  return lattice.lattice_l2_sensitivity(
      sensitivity(relation), granularity=granularity,
      dim=dim * (dim + 1) // 2)


def lattice_sigma(sigma, *, granularity) -> int:
  """σ in grid units for the discrete mode: ⌈σ/γ⌉ (never less noise)."""
  g = lattice.check_granularity(granularity)
  if isinstance(sigma, jax.core.Tracer):
    raise ValueError("noise='discrete' needs a concrete (host-side) sigma; "
                     "a traced per-participant σ is not supported.")
  value = discrete.round_up(float(sigma) / g)
  discrete.gaussian_params(value)  # validates the range
  return int(value)


def discrete_pca_sigma(*, epsilon: float, delta: float,
                       relation: options.Relation | str, dim: int,
                       granularity) -> float:
  """σ (value units, a whole number of grid steps) for discrete mode.

  The smallest integer lattice σ whose zCDP (lattice sensitivity, RDP
  conversion, as the ledger computes it) gives (ε, δ), times γ.
  """
  g = lattice.check_granularity(granularity)
  sigma = discrete_calibration.discrete_gaussian_sigma(
      epsilon=epsilon, delta=delta,
      sensitivity=lattice_sensitivity(relation, dim=dim, granularity=g))
  return float(sigma) * g


def pca_sigma(*, epsilon: float, delta: float, calibration: str = "analytic",
              sensitivity: float = 1.0) -> float:
  """σ of the noise on XᵀX for (ε, δ)-DP.

  Args:
    epsilon: ε of the PCA step.
    delta: δ of the PCA step.
    calibration: ``"analytic"`` (Balle & Wang, exact for every ε; default)
      or ``"classic"`` (σ = √(2 ln(1.25/δ))/ε, the paper's; refused for
      ε ≥ 1, where it is not proven).
    sensitivity: L2 sensitivity of the upper triangle of XᵀX: 1 for
      add/remove neighbours, √2 for replacement (rows of norm ≤ 1).
  """
  options.parse(options.PcaCalibration, calibration, "calibration")
  return dp_calibration.gaussian_sigma(
      epsilon=epsilon, delta=delta, sensitivity=sensitivity,
      method=calibration)


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["sigma", "epsilon", "target_epsilon", "delta",
                 "sigma_lattice", "sampler"],
    meta_fields=["relation", "sensitivity", "k", "dim", "calibration",
                 "noise", "granularity"])
@dataclasses.dataclass(frozen=True)
class PcaPlan:
  """The public facts of one DP-PCA release (see :func:`make_plan`).

  A pytree whose leaves are σ, ε, the target ε and δ (as
  :class:`federated.fedsgd.FedSGDPlan`), and with ``noise="discrete"``
  the lattice σ and its exact sampler's arrays
  (:func:`dpcore.discrete.gaussian_sampler`): a plan passed to a jitted
  function is an argument, not a constant, and plans that differ only in
  ε share one compiled program.

  Attributes:
    epsilon: the guarantee: the ε at ``delta`` that a ledger holding
      :meth:`record`'s entry (under the plan's relation) reports; at most
      ``target_epsilon``.
    target_epsilon: the budget ε σ was calibrated for (``make_plan``'s
      ``epsilon``).
    delta: δ of the release.
    relation: the neighbouring relation σ is calibrated for
      (:class:`dpcore.options.Relation`).
    sigma: σ of the noise on each upper-triangle entry of XᵀX (value
      units; a whole number of grid steps with discrete noise).
    sensitivity: L2 sensitivity of XᵀX's upper triangle under
      ``relation`` (:func:`sensitivity`: 1 or √2, rows of norm ≤ 1).
    k: components released, 1 ≤ k ≤ dim.
    dim: the data dimension d.
    calibration: ``"analytic"`` or ``"classic"`` (float noise; see
      :func:`pca_sigma`).
    noise: ``"float"`` or ``"discrete"`` (module docstring).
    granularity: the grid γ of discrete noise, else None.
    sigma_lattice: σ in grid units, ⌈σ/γ⌉ (discrete noise), else None.
    sampler: the exact sampler of ``sigma_lattice`` as arrays (discrete
      noise), else None; what :func:`release` draws from.
  """
  epsilon: float
  target_epsilon: float
  delta: float
  relation: options.Relation
  sigma: float
  sensitivity: float
  k: int
  dim: int
  calibration: str = "analytic"
  noise: str = "float"
  granularity: float | None = None
  sigma_lattice: int | None = None
  sampler: discrete.GaussianSampler | None = dataclasses.field(
      default=None, compare=False, repr=False)

  def __post_init__(self):
    # The sampler follows the lattice σ: made here, and made again when a
    # copy changes σ (dataclasses.replace), so the two always agree.
    # (Traced leaves, inside a program, are left as they are.)
    units = self.sigma_lattice
    if isinstance(units, int) and (
        self.sampler is None or int(self.sampler.n) != units * units):
      object.__setattr__(self, "sampler", discrete.gaussian_sampler(units))

  def record(self, ledger, *, label: str = "dp_pca", count: int = 1,
             relation: options.Relation | str | None = None) -> None:
    """Puts ``count`` releases of this plan into ``ledger``.

    Float noise is a Gaussian entry (σ, :attr:`sensitivity`); discrete
    noise a discrete Gaussian entry of σ_lattice and the lattice
    sensitivity (:func:`lattice_sensitivity`).

    Args:
      ledger: a :class:`dpcore.accounting.PrivacyLedger`.
      label: the entry's label.
      count: releases of this plan from the same data.
      relation: account the release under this relation instead of the
        plan's: the same σ with that relation's sensitivity (a σ
        calibrated for add/remove, composed with replace-one releases,
        costs more than its ε). None: the plan's relation.
    """
    relation = (self.relation if relation is None
                else options.parse_relation(relation))
    count = validation.check_positive_int(count, "count")
    if self.noise == "float":
      ledger.record_gaussian(sigma=self.sigma,
                             sensitivity=sensitivity(relation),
                             delta=self.delta, label=label, count=count,
                             relation=relation)
      return
    ledger.record_discrete_gaussian(
        sigma=float(self.sigma_lattice),
        sensitivity=lattice_sensitivity(relation, dim=self.dim,
                                        granularity=self.granularity),
        delta=self.delta, label=label, count=count, relation=relation)


def make_plan(*, epsilon: float, delta: float, k: int, dim: int,
              relation: options.Relation | str = options.Relation.ADD_REMOVE,
              calibration: str = "analytic", noise: str = "float",
              granularity=None) -> PcaPlan:
  """Validates a DP-PCA release and calibrates its σ (host-side).

  Args:
    epsilon: ε > 0, the budget of the release: σ is calibrated for it
      (the plan's ``target_epsilon``; its ``epsilon`` is the guarantee the
      ledger reports, at most this).
    delta: δ in (0, 1).
    k: components to release, 1 ≤ k ≤ dim.
    dim: the data dimension d.
    relation: ``"add_remove"`` (default; sensitivity 1) or
      ``"replace_one"`` (sensitivity √2, e.g. to compose with objective
      perturbation): a :class:`dpcore.options.Relation` or its spelling
      (:func:`dpcore.options.parse_relation`).
    calibration: ``"analytic"`` (Balle & Wang; default) or ``"classic"``
      (the paper's, ε < 1 only); float noise only (:func:`pca_sigma`).
    noise: ``"float"`` (default) or ``"discrete"`` (exact integer noise on
      the grid ``granularity``, σ from :func:`discrete_pca_sigma`).
    granularity: the grid γ of discrete noise, a power of two.

  Returns:
    A :class:`PcaPlan`.

  Raises:
    ValueError: one line naming the argument and the fix.
  """
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  relation = options.parse_relation(relation)
  dim = validation.check_positive_int(dim, "dim")
  k = _check_k(k, dim)
  options.parse(options.PcaCalibration, calibration, "calibration")
  g = check_noise(noise, granularity)
  sens = sensitivity(relation)
  if g is None:
    sigma = pca_sigma(epsilon=epsilon, delta=delta, calibration=calibration,
                      sensitivity=sens)
    return _with_guarantee(PcaPlan(None, epsilon, delta, relation, sigma,
                                   sens, k, dim, calibration))
  if calibration != "analytic":
    raise ValueError(
        f"calibration={calibration!r} applies to float noise only; "
        f"noise='discrete' is calibrated by its zCDP (leave calibration "
        f"at 'analytic').")
  sigma = discrete_pca_sigma(epsilon=epsilon, delta=delta,
                             relation=relation, dim=dim, granularity=g)
  return _with_guarantee(PcaPlan(
      None, epsilon, delta, relation, sigma, sens, k, dim, calibration,
      noise, g, lattice_sigma(sigma, granularity=g)))


def _with_guarantee(plan: PcaPlan) -> PcaPlan:
  """``plan`` with its ``epsilon``: the ledger's ε at δ of its record."""
  return dataclasses.replace(plan, epsilon=accounting.plan_epsilon(plan))


@linalg.full_precision
def second_moment(x, mask):
  """Σᵢ maskᵢ xᵢxᵢᵀ, shape (d, d)."""
  return (x * mask[:, None].astype(x.dtype)).T @ x


def clipped_rows(x, mask):
  """Unmasked rows scaled to norm ≤ 1; masked rows and rows whose squared
  norm is not finite (NaN, ±inf, or overflow) become 0.

  Per row and data-independent, and exact on valid rows (scale 1.0):
  :func:`dpcore.clipping.clip_rows`, then the mask bounded to [0, 1]
  (NaN → 0, :func:`dpcore.clipping.clip_weights`): a weight of 5 would
  otherwise add 25·xxᵀ to XᵀX.

  Rows narrower than float32 (float16, bfloat16) are widened first: at
  their own precision one row could move the sum by 2 (2048 + 1 rounds
  to 2048 in float16).
  """
  x = jnp.asarray(x)
  x = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  weights = clipping.clip_weights(mask)
  return clipping.clip_rows(x) * weights[:, None].astype(x.dtype)


@linalg.full_precision
def noisy_second_moment(key: jax.Array, x, mask, *, sigma,
                        noise: str = "float", granularity=None):
  """XᵀX of the unmasked rows, clipped to norm ≤ 1, plus N(0, σ²) noise.

  With ``noise="discrete"``, XᵀX is computed exactly in integers, its
  upper triangle rounded to the grid ``granularity``
  (:func:`dpcore.lattice.gram_on_lattice`), and gets discrete Gaussian
  noise of ⌈σ/γ⌉ grid units;
  the result is integers·γ (exact floats while |integer| < 2²⁴ in
  float32; the integers are the release, the float view is
  post-processing). σ must then be concrete, or the lattice σ's
  :class:`dpcore.discrete.GaussianSampler` (a plan's ``sampler``, which
  may be traced: the same draws).

  Privacy: see the module docstring (sensitivity 1 under add/remove; the
  clipping of the rows and of the mask to [0, 1] makes every row's
  contribution ‖maskᵢ xᵢ‖ ≤ 1 for any input; in discrete mode the lattice
  sensitivity of :func:`lattice_sensitivity`).
  """
  g = check_noise(noise, granularity)
  if g is None:
    m, upper_noise = second_moment_and_noise(key, x, mask, sigma=sigma)
    return m + dp_noise.symmetric_from_upper(upper_noise, m.shape[0])
  rows = clipped_rows(x, mask)
  _check_lattice_range(rows.shape[0], g)
  units = lattice.gram_on_lattice(rows, g)
  return _lattice_noisy(key, units, sigma=sigma, granularity=g,
                        dtype=rows.dtype)


def _check_lattice_range(num_rows: int, granularity: float) -> None:
  """Refuses rows whose XᵀX could leave the lattice's range.

  An entry of XᵀX is at most n (rows of norm ≤ 1); on the grid that is
  n/γ units, which must stay below 2³⁰ to be held, with its noise, in
  int32.
  """
  if num_rows / granularity >= 2 ** 30:
    raise ValueError(
        f"{num_rows} rows at granularity={granularity:g}: XᵀX's entries "
        f"reach {num_rows} = {num_rows / granularity:.3g} grid units, past "
        f"the lattice's 2^30; use granularity ≥ "
        f"{2.0 ** (math.floor(math.log2(num_rows / 2 ** 30)) + 1):g}.")


def _lattice_noisy(key: jax.Array, units, *, sigma, granularity,
                   dtype=jnp.float32):
  """The upper triangle ``units`` (int32 grid points, row-major) plus
  discrete Gaussian noise of the lattice σ (``sigma`` in data units, or
  its sampler), mirrored to a symmetric matrix of integers·γ in
  ``dtype`` (the discrete branch of :func:`noisy_second_moment`)."""
  sigma_lattice = (sigma if isinstance(sigma, discrete.GaussianSampler)
                   else lattice_sigma(sigma, granularity=granularity))
  size = units.shape[0]
  d = (math.isqrt(8 * size + 1) - 1) // 2
  upper = np.triu_indices(d)
  z = units + discrete.discrete_gaussian(key, (size,), sigma=sigma_lattice)
  full = jnp.zeros((d, d), jnp.int32).at[upper].set(z)
  full = full + jnp.triu(full, 1).T
  return lattice.from_lattice(full, granularity, dtype)


@linalg.full_precision
def second_moment_and_noise(key: jax.Array, x, mask, *, sigma):
  """The two terms of :func:`noisy_second_moment` (float noise), apart.

  Returns ``(m, z)``: m = XᵀX of the clipped, unmasked rows (d × d) and z
  the dim(dim+1)/2 Gaussian draws of the noise's upper triangle, so that
  the release is ``m + dpcore.noise.symmetric_from_upper(z, d)`` — exactly
  what :func:`noisy_second_moment` returns, from the same key. A server
  that adds many participants' releases (``federated.aggregation``) may
  add the m's and the z's and mirror the summed z once: the same sum (the
  mirroring is linear) without building every participant's noise matrix.
  The release, and its privacy, is each participant's m + mirror(z).
  """
  rows = clipped_rows(x, mask)
  m = rows.T @ rows
  d = m.shape[0]
  z = dp_noise.gaussian_noise(key, (d * (d + 1) // 2,), stddev=sigma,
                              dtype=m.dtype)
  return m, z


def check_topk(topk: str) -> str:
  options.parse(options.TopK, topk, "topk")
  return topk


def top_k_by_subspace(key: jax.Array, m, k: int) -> PcaResult:
  """Top k of symmetric ``m`` by :func:`dpcore.linalg.subspace_top_k`.

  Block min(d, 2k + 8), 16 iterations; the key only sets the start block
  (post-processing of an already private matrix: not privacy-relevant). On
  a 2-core CPU about 1.6–1.9× faster than ``eigh`` at d = 784, k = 20 and
  slower at d = 64, capturing the noise-free variance to within 0.4 % of
  exact ``eigh`` on the same noisy matrix (``launch/bench/topk.py``).
  """
  result = linalg.subspace_top_k(key, m, k)
  return PcaResult(result.vectors, result.values)


def top_k_eigenvectors(m, k: int) -> PcaResult:
  """Eigenvectors of the k largest eigenvalues of symmetric m, descending.

  ``eigh`` returns the eigenvalues in ascending order, so the top k are its
  last k columns, reversed; no sort is needed.
  """
  values, vectors = linalg.eigh(m)
  return PcaResult(linalg.canonical_signs(vectors[:, ::-1][:, :k]),
                   values[::-1][:k])


def _check_k(k, d: int) -> int:
  """1 ≤ k ≤ d for the static k (a Python check, also at trace time)."""
  k = validation.check_positive_int(k, "k")
  if k > d:
    raise ValueError(
        f"k={k} exceeds the data dimension d={d}; choose k <= {d}.")
  return k


def _check_data(x, mask) -> None:
  """x a non-empty (n, d) array (finite where concrete), mask (n,)."""
  validation.check_rows(x, "x")
  validation.check_vector(mask, "mask", jnp.shape(x)[0])


def _check_concrete_sigma(sigma) -> None:
  """Refuses a concrete σ that is not a finite number > 0 (tracers and a
  plan's discrete sampler, validated when it was made, pass)."""
  if isinstance(sigma, jax.core.Tracer | discrete.GaussianSampler):
    return  # a traced per-participant σ: checked host-side by its caller
  values = np.asarray(sigma, dtype=np.float64)
  if values.size == 0 or not np.all(np.isfinite(values) & (values > 0)):
    raise ValueError(
        f"sigma must be a finite number > 0 (a plan's, make_plan), got "
        f"{sigma!r}; a zero, negative or NaN σ releases the data's "
        f"eigenvectors without privacy. The noise-free basis is "
        f"dp_pca.pca(x, mask, k=k).")


def noisy_basis(key: jax.Array, x, mask, *, k: int, sigma,
                noise: str = "float", granularity=None,
                topk: str = "eigh") -> PcaResult:
  """Top-k basis of the noisy XᵀX of the rows where ``mask`` is 1.

  The jit/vmap kernel :func:`release` runs, for a σ given directly: a
  traced σ (one per participant under ``vmap``, as in
  :mod:`federated.feddpdr`) cannot be checked here and is the caller's
  responsibility. ``k`` is checked (1 ≤ k ≤ d) when traced, and a
  concrete ``sigma`` must be finite and > 0. A caller with a budget uses
  :func:`make_plan` and :func:`release`, which calibrate σ and check the
  data.

  Args:
    key: PRNG key (one per participant under vmap).
    x: (n_max, d) rows with ‖x‖ ≤ 1 (rows beyond are clipped).
    mask: (n_max,) 1 for real rows, 0 for padding (bounded to [0, 1]).
    k: number of components (static), 1 ≤ k ≤ d.
    sigma: noise standard deviation, > 0 (a plan's ``sigma``; may be
      traced with float noise; concrete with discrete noise).
    noise: ``"float"`` (default) or ``"discrete"`` (exact integer noise on
      the grid ``granularity``; see the module docstring).
    granularity: the grid γ, a power of two (discrete noise only).
    topk: ``"eigh"`` (default, exact) or ``"subspace"`` (block subspace
      iteration, :func:`top_k_by_subspace`; the key is then split into a
      noise key and a start-block key, so the noise differs from
      ``"eigh"``'s for the same key).

  Raises:
    TypeError: ``key`` is not a PRNG key.
    ValueError: k outside 1..d, ``x`` not a non-empty 2-D array, ``mask``
      not of shape (n_max,), a concrete ``x`` with NaN or infinite entries,
      or a concrete σ that is not finite and positive. (Traced values are
      not checked; inside the kernel, non-finite rows count as zero.)

  Privacy:
    (ε, δ)-DP for the (ε, δ) σ was calibrated for, under the neighbouring
    relation matching the sensitivity used (module docstring).
  """
  validation.check_key(key)
  _check_data(x, mask)
  k = _check_k(k, jnp.shape(x)[-1])
  check_noise(noise, granularity)
  check_topk(topk)
  _check_concrete_sigma(sigma)
  if topk == "eigh":
    return top_k_eigenvectors(
        noisy_second_moment(key, x, mask, sigma=sigma, noise=noise,
                            granularity=granularity), k)
  noise_key, start_key = jax.random.split(key)
  return top_k_by_subspace(
      start_key, noisy_second_moment(noise_key, x, mask, sigma=sigma,
                                     noise=noise, granularity=granularity),
      k)


def release(key: jax.Array, plan: PcaPlan, x, mask=None, *,
            topk: str = "eigh") -> PcaResult:
  """The (ε, δ)-DP top-k basis of ``plan`` for the rows of ``x``.

  Pure, jittable and vmappable (σ is the plan's; under ``vmap`` over
  participants, one key and one ``mask`` row each). A concrete ``x`` is
  checked host-side (:func:`check_pca_inputs`: finite, rows of norm ≤ 1);
  inside the mechanism every row is clipped to norm ≤ 1 and the mask to
  [0, 1] all the same, so a traced ``x`` cannot break the guarantee.

  Args:
    key: PRNG key (consumed).
    plan: from :func:`make_plan`.
    x: (n, d) rows with ‖x‖ ≤ 1, d = ``plan.dim`` (not floating: cast to
      float32).
    mask: (n,) 1 for real rows, 0 for padding; None: every row is real.
    topk: ``"eigh"`` (default, exact) or ``"subspace"`` (block subspace
      iteration, :func:`top_k_by_subspace`; the key is then split into a
      noise key and a start-block key, so the noise differs from
      ``"eigh"``'s for the same key). Post-processing either way.

  Returns:
    The :class:`PcaResult` (components (d, k), eigenvalues (k,)).

  Raises:
    TypeError: ``plan`` is not a :class:`PcaPlan`, or ``key`` not a key.
    ValueError: bad data (shape, non-finite, a row of norm > 1 when
      concrete) or a ``d`` other than ``plan.dim``.

  Privacy:
    (plan.epsilon, plan.delta)-DP under ``plan.relation`` for rows of norm
    ≤ 1 (enforced), the noise :meth:`PcaPlan.record` accounts.
  """
  if not isinstance(plan, PcaPlan):
    raise TypeError(f"plan must be a dp_pca.PcaPlan from "
                    f"dp_pca.make_plan, got {type(plan).__name__}.")
  validation.check_key(key)
  # Integers and floats narrower than float32 are read as float32.
  x = jnp.asarray(x)
  x = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  validation.check_rows(x, "x")
  if validation.is_concrete(x):
    check_pca_inputs(x, k=plan.k)
  if jnp.shape(x)[-1] != plan.dim:
    raise ValueError(f"x has d={jnp.shape(x)[-1]} columns but the plan was "
                     f"made for dim={plan.dim}; make the plan with "
                     f"dim=x.shape[1].")
  if mask is None:
    mask = jnp.ones(jnp.shape(x)[0], jnp.result_type(x))
  sigma = plan.sigma if plan.noise == "float" else plan.sampler
  return noisy_basis(key, x, mask, k=plan.k, sigma=sigma, noise=plan.noise,
                     granularity=plan.granularity, topk=topk)


def pca(x, mask, *, k: int) -> PcaResult:
  """Non-private top-k basis of XᵀX (the Non-Priv baseline).

  Checks as :func:`noisy_basis` does (shapes always, values where
  concrete).
  """
  _check_data(x, mask)
  k = _check_k(k, jnp.shape(x)[-1])
  return top_k_eigenvectors(second_moment(x, mask), k)


def check_pca_inputs(x, *, k: int) -> None:
  """Host-side checks: finite (n, d) data, rows of norm ≤ 1, 1 ≤ k ≤ d."""
  arr = validation.check_row_norms(x, "x")
  _check_k(k, arr.shape[1])


__all__ = [
    "PcaPlan", "PcaResult",
    "check_noise", "check_pca_inputs", "check_topk", "clipped_rows",
    "discrete_pca_sigma", "lattice_sensitivity", "lattice_sigma", "make_plan",
    "noisy_basis", "noisy_second_moment", "pca", "pca_sigma", "release",
    "second_moment", "second_moment_and_noise", "sensitivity",
    "top_k_by_subspace", "top_k_eigenvectors",
]
