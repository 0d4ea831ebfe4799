"""DP-PCA by Gaussian noise on XᵀX (Analyze Gauss; Algorithm 2 of Wang et al.).

The second-moment matrix M = Σᵢ xᵢxᵢᵀ of the (unmasked) rows gets a
symmetric Gaussian noise matrix — each entry of the upper triangle,
diagonal included, one independent N(0, σ²) draw, mirrored below — and the
top-k eigenvectors of the noisy matrix, in descending eigenvalue order, are
the private basis. M is not centred (as in the paper): centring would need
the data mean, which is a further query.

:func:`dp_pca` and :func:`pca` are pure, jit-compiled and vmappable over a
leading participant axis: padded rows are removed by ``mask`` and σ may be
a traced per-participant value. σ itself is computed host-side by
:func:`pca_sigma`. :func:`private_basis` is the checked entry point for one
data set: it validates the data and k, calibrates σ for (ε, δ) and the
neighbouring relation, and runs :func:`dp_pca`.

Each eigenvector's sign is fixed by :func:`dpcore.linalg.canonical_signs`
(largest-magnitude entry positive), so a basis whose eigenvalues are
separated does not depend on how the call was batched. Eigenvectors of
close eigenvalues may still come in any rotation of their span: there only
the subspace is meaningful (see :mod:`federated.aggregation`).

Privacy:
  Add/remove-one-row neighbours with ‖x‖ ≤ 1: the query changes by xxᵀ,
  whose upper triangle has L2 norm ≤ ‖xxᵀ‖_F = ‖x‖² ≤ 1, for every n
  (Lemma 4.1 of Wang et al.). Under replacement of one row it changes by
  xxᵀ − x'x'ᵀ, of norm up to √2 (orthogonal unit rows): pass
  ``sensitivity=math.sqrt(2)`` to :func:`pca_sigma` for that relation. With
  σ from :func:`pca_sigma` the released basis is (ε, δ)-DP (post-processing
  of the Gaussian mechanism). :func:`noisy_second_moment` clips every row
  to ‖x‖ ≤ 1 before it touches the data (:func:`clipped_rows`: per row,
  data-independent, a no-op on valid rows), so the sensitivity
  holds whatever the caller passes; host-side, :func:`check_pca_inputs`
  refuses rows of norm > 1 outright.

Exact noise (``noise="discrete"``, opt-in): the upper triangle of XᵀX is
rounded to the grid γ (a power of two) and gets integer discrete Gaussian
noise of σ_lattice = ⌈σ/γ⌉ grid units (:mod:`dpcore.discrete`), so the
release is integer-valued (returned as integers·γ) and free of the
floating-point leak of Mironov 2012. Rounding adds up to one grid unit per
entry to the neighbours' difference: the lattice L2 sensitivity of the
d(d+1)/2 released entries is Δ/γ + √(d(d+1)/2)
(:func:`lattice_sensitivity`), and the release is
(Δ_lattice²/2σ_lattice²)-zCDP (:func:`record` with ``noise="discrete"``).

References:
  Canonne, Kamath & Steinke, The Discrete Gaussian for Differential
  Privacy, NeurIPS 2020.
  Dwork, Talwar, Thakurta & Zhang, Analyze Gauss: Optimal Bounds for
  Privacy-Preserving Principal Component Analysis, STOC 2014.
  Balle & Wang, Improving the Gaussian Mechanism for Differential Privacy,
  ICML 2018 (analytic calibration).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import calibration as dp_calibration
from dpcore import clipping, discrete, linalg, validation
from dpcore import noise as dp_noise

CALIBRATIONS = ("analytic", "classic")
NEIGHBOURING = ("add_remove", "replace")
NOISE = ("float", "discrete")
TOPK = ("eigh", "subspace")
"""How the top-k of the noisy matrix is found (post-processing either way)."""


class PcaResult(NamedTuple):
  """Top-k basis (d, k), columns orthonormal, and its k eigenvalues."""
  components: jax.Array
  eigenvalues: jax.Array


def sensitivity(neighbouring: str) -> float:
  """L2 sensitivity of the upper triangle of XᵀX, rows of norm ≤ 1.

  1 under add/remove neighbours (one row's xxᵀ, Frobenius norm ≤ 1; the
  upper triangle of a symmetric noise matrix is what is released), √2 under
  replace-one (xxᵀ − x′x′ᵀ, two unit rank-one terms on orthogonal rows).
  """
  if neighbouring not in NEIGHBOURING:
    raise ValueError(
        f"neighbouring must be one of {NEIGHBOURING}, got {neighbouring!r}.")
  return 1.0 if neighbouring == "add_remove" else math.sqrt(2.0)


def check_noise(noise: str, granularity) -> float | None:
  """Host-side check of the noise option; returns γ (None for float)."""
  if noise not in NOISE:
    raise ValueError(f"noise must be one of {NOISE}, got {noise!r}.")
  if noise == "float":
    if granularity is not None:
      raise ValueError("granularity applies only to noise='discrete'.")
    return None
  if granularity is None:
    raise ValueError("noise='discrete' needs a granularity, a power of two "
                     "such as 2**-10 (the grid XᵀX is rounded to).")
  return discrete.check_granularity(granularity)


def lattice_sensitivity(neighbouring: str, *, dim: int,
                        granularity) -> float:
  """L2 sensitivity, in grid units, of the rounded upper triangle of XᵀX.

  Δ/γ + √(d(d+1)/2): nearest rounding of each of the d(d+1)/2 released
  entries can add up to one grid unit to the neighbours' difference
  (:func:`dpcore.discrete.lattice_l2_sensitivity`).
  """
  return discrete.lattice_l2_sensitivity(
      sensitivity(neighbouring), granularity=granularity,
      dim=dim * (dim + 1) // 2)


def lattice_sigma(sigma, *, granularity) -> int:
  """σ in grid units for the discrete mode: ⌈σ/γ⌉ (never less noise)."""
  g = discrete.check_granularity(granularity)
  if isinstance(sigma, jax.core.Tracer):
    raise ValueError("noise='discrete' needs a concrete (host-side) sigma; "
                     "a traced per-participant σ is not supported.")
  value = discrete.round_up(float(sigma) / g)
  discrete.gaussian_params(value)  # validates the range
  return int(value)


def record(ledger, *, sigma: float, delta: float, neighbouring: str,
           label: str = "dp_pca", count: int = 1, noise: str = "float",
           granularity=None, dim: int | None = None) -> None:
  """Puts ``count`` DP-PCA releases with noise σ into ``ledger``.

  With ``noise="discrete"`` (``granularity`` and the data dimension
  ``dim`` required) the lattice σ = ⌈σ/γ⌉ and the lattice sensitivity
  (:func:`lattice_sensitivity`) are recorded as a discrete Gaussian.
  """
  g = check_noise(noise, granularity)
  if g is None:
    ledger.record_gaussian(sigma=sigma,
                           sensitivity=sensitivity(neighbouring),
                           delta=delta, label=label, count=count)
    return
  if not (isinstance(dim, int) and dim >= 1):
    raise ValueError(f"noise='discrete' needs dim, the data dimension d "
                     f"(an int ≥ 1), got {dim!r}.")
  ledger.record_discrete_gaussian(
      sigma=float(lattice_sigma(sigma, granularity=g)),
      sensitivity=lattice_sensitivity(neighbouring, dim=dim, granularity=g),
      delta=delta, label=label, count=count)


def discrete_pca_sigma(*, epsilon: float, delta: float, neighbouring: str,
                       dim: int, granularity) -> float:
  """σ (value units, a whole number of grid steps) for discrete mode.

  The smallest integer lattice σ whose zCDP (lattice sensitivity, RDP
  conversion, as the ledger computes it) gives (ε, δ), times γ.
  """
  g = discrete.check_granularity(granularity)
  sigma = discrete.discrete_gaussian_sigma(
      epsilon=epsilon, delta=delta,
      sensitivity=lattice_sensitivity(neighbouring, dim=dim, granularity=g))
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
  if calibration not in CALIBRATIONS:
    raise ValueError(
        f"calibration must be one of {CALIBRATIONS}, got {calibration!r}.")
  return dp_calibration.gaussian_sigma(
      epsilon=epsilon, delta=delta, sensitivity=sensitivity,
      method=calibration)


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
  """
  weights = clipping.clip_weights(mask)
  return clipping.clip_rows(x) * weights[:, None].astype(x.dtype)


def noisy_second_moment(key: jax.Array, x, mask, *, sigma,
                        noise: str = "float", granularity=None):
  """XᵀX of the unmasked rows, clipped to norm ≤ 1, plus N(0, σ²) noise.

  With ``noise="discrete"``, the upper triangle is rounded to the grid
  ``granularity`` and gets discrete Gaussian noise of ⌈σ/γ⌉ grid units;
  the result is integers·γ (exact floats while |integer| < 2²⁴ in
  float32; the integers are the release, the float view is
  post-processing). σ must then be concrete.

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
  m = rows.T @ rows
  sigma_lattice = lattice_sigma(sigma, granularity=g)
  d = m.shape[0]
  upper = np.triu_indices(d)
  z = discrete.to_lattice(m[upper], g) + discrete.discrete_gaussian(
      key, (len(upper[0]),), sigma=sigma_lattice)
  full = jnp.zeros((d, d), jnp.int32).at[upper].set(z)
  full = full + jnp.triu(full, 1).T
  return discrete.from_lattice(full, g, m.dtype)


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
  if topk not in TOPK:
    raise ValueError(f"topk must be one of {TOPK}, got {topk!r}.")
  return topk


def top_k_by_subspace(key: jax.Array, m, k: int) -> PcaResult:
  """Top k of symmetric ``m`` by :func:`dpcore.linalg.subspace_top_k`.

  Block min(d, 2k + 8), 16 iterations; the key only sets the start block
  (post-processing of an already private matrix: not privacy-relevant). On
  a 2-core CPU about 1.6–1.9× faster than ``eigh`` at d = 784, k = 20 and
  slower at d = 64, capturing the noise-free variance to within 0.4 % of
  exact ``eigh`` on the same noisy matrix (``launch/bench_topk.py``).
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
  """Refuses a concrete σ that is not a finite number > 0 (tracers pass)."""
  if isinstance(sigma, jax.core.Tracer):
    return  # a traced per-participant σ: checked host-side by its caller
  values = np.asarray(sigma, dtype=np.float64)
  if values.size == 0 or not np.all(np.isfinite(values) & (values > 0)):
    raise ValueError(
        f"sigma must be a finite number > 0 (from pca_sigma), got "
        f"{sigma!r}; a zero, negative or NaN σ releases the data's "
        f"eigenvectors without privacy. The noise-free basis is "
        f"dp_pca.pca(x, mask, k=k).")


def dp_pca(key: jax.Array, x, mask, *, k: int, sigma, noise: str = "float",
           granularity=None, topk: str = "eigh") -> PcaResult:
  """Private top-k basis of the rows of ``x`` where ``mask`` is 1.

  The jit/vmap kernel. ``k`` is checked (1 ≤ k ≤ d) when traced, and a
  concrete ``sigma`` must be finite and > 0; a traced σ (one per
  participant under ``vmap``, as in :mod:`federated.feddpdr`) cannot be
  checked here and is the caller's responsibility. For a single data set,
  :func:`private_basis` validates the data and calibrates σ itself.

  Args:
    key: PRNG key (one per participant under vmap).
    x: (n_max, d) rows with ‖x‖ ≤ 1 (rows beyond are clipped).
    mask: (n_max,) 1 for real rows, 0 for padding (bounded to [0, 1]).
    k: number of components (static), 1 ≤ k ≤ d.
    sigma: noise standard deviation from :func:`pca_sigma`, > 0 (may be
      traced with float noise; concrete with discrete noise, e.g. from
      :func:`discrete_pca_sigma`).
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


def private_basis(key: jax.Array, x, *, k: int, epsilon: float,
                  delta: float, neighbouring: str = "add_remove",
                  calibration: str = "analytic", noise: str = "float",
                  granularity=None, topk: str = "eigh"
                  ) -> tuple[PcaResult, float]:
  """Checked (ε, δ)-DP top-k basis of one data set (all rows real).

  Validates the data host-side (:func:`check_pca_inputs`: a non-empty,
  finite (n, d) matrix with rows of norm ≤ 1, 1 ≤ k ≤ d), calibrates σ with
  :func:`pca_sigma` for the neighbouring relation, and runs :func:`dp_pca`.

  Args:
    key: PRNG key (consumed).
    x: (n, d) data, every row of L2 norm ≤ 1.
    k: number of components, 1 ≤ k ≤ d.
    epsilon: ε > 0 of this release.
    delta: δ in (0, 1) of this release.
    neighbouring: ``"add_remove"`` (sensitivity 1) or ``"replace"``
      (sensitivity √2, e.g. to compose with objective perturbation).
    calibration: ``"analytic"`` or ``"classic"`` (see :func:`pca_sigma`;
      float noise only).
    noise: ``"float"`` or ``"discrete"`` (σ from
      :func:`discrete_pca_sigma`, a whole number of grid steps).
    granularity: the grid γ for discrete noise (a power of two).
    topk: ``"eigh"`` or ``"subspace"`` (see :func:`dp_pca`).

  Returns:
    ``(PcaResult, sigma)``: the basis and the σ to record in a ledger
    (:func:`record` with the same ``noise`` and ``granularity``).

  Privacy:
    (ε, δ)-DP under ``neighbouring`` for rows of norm ≤ 1 (checked here
    and enforced by clipping inside the mechanism).
  """
  validation.check_key(key)
  sens = sensitivity(neighbouring)
  g = check_noise(noise, granularity)
  check_pca_inputs(x, k=k)
  arr = np.asarray(x)
  if not np.issubdtype(arr.dtype, np.floating):
    arr = arr.astype(np.float32)
  rows = jnp.asarray(arr)
  if g is not None:
    sigma = discrete_pca_sigma(epsilon=epsilon, delta=delta,
                               neighbouring=neighbouring, dim=arr.shape[1],
                               granularity=g)
    result = _dp_pca_discrete_jit(
        key, rows, jnp.ones(arr.shape[0], rows.dtype), k=k, sigma=sigma,
        noise="discrete", granularity=g, topk=check_topk(topk))
    return result, sigma
  sigma = pca_sigma(epsilon=epsilon, delta=delta, calibration=calibration,
                    sensitivity=sens)
  result = _dp_pca_jit(key, rows, jnp.ones(arr.shape[0], rows.dtype), k=k,
                       sigma=sigma, topk=check_topk(topk))
  return result, sigma


def pca(x, mask, *, k: int) -> PcaResult:
  """Non-private top-k basis of XᵀX (the Non-Priv baseline).

  Checks as :func:`dp_pca` does (shapes always, values where concrete).
  """
  _check_data(x, mask)
  k = _check_k(k, jnp.shape(x)[-1])
  return top_k_eigenvectors(second_moment(x, mask), k)


def check_pca_inputs(x, *, k: int) -> None:
  """Host-side checks: finite (n, d) data, rows of norm ≤ 1, 1 ≤ k ≤ d."""
  arr = validation.check_row_norms(x, "x")
  _check_k(k, arr.shape[1])


_dp_pca_jit = jax.jit(dp_pca, static_argnames=("k", "topk"))
_dp_pca_discrete_jit = jax.jit(
    dp_pca, static_argnames=("k", "sigma", "noise", "granularity", "topk"))
