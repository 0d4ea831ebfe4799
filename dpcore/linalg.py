"""Symmetric eigendecomposition and thin SVD that batch safely on the CPU.

``jnp.linalg.eigh`` and ``jnp.linalg.svd`` call LAPACK through jaxlib. On
the CPU, jaxlib spreads a *batch* of matrices (what ``vmap`` produces) over
XLA's intra-op thread pool and then blocks the calling thread until the
items are done. When that calling thread is itself one of the pool's
threads, and every other pool thread is blocked the same way, nothing is
left to run the items: the program hangs. This happens under ``shard_map``
over several CPU devices (``--xla_force_host_platform_device_count``) on a
machine with as many cores as devices. We saw it with jax 0.10.2 on 2 cores
and 2 devices: both pool threads waited inside the batched ``ssyevd``
kernel, every run.

:func:`eigh` and :func:`svd` therefore decompose a batch one matrix at a
time on the CPU (``jax.custom_batching.sequential_vmap``) and keep the
batched kernels elsewhere; so does the Cholesky factorisation and
triangular solve of :func:`orthonormalize`, whose batched ``potrf`` and
``trsm`` kernels hang the same way when two run side by side in one
program, even on one device. For the d × d matrices of DP-PCA this is also
faster on the CPU: five 784 × 784 ``eigh`` took 142 ms one at a time against
200 ms batched on the 2-core development machine (LAPACK already uses the
cores within one decomposition). For tiny matrices the batched kernel is
faster (fifty 20 × 20: 0.7 ms against 1.3 ms), a cost too small to matter
here.

The results are the same decompositions, up to rounding (a jitted batch
can differ in the last bits); only the schedule differs. The in-turn path
supports ``jit``, ``vmap`` and forward-mode ``jvp``, not reverse-mode
``grad`` (nothing in the library differentiates through them).

Eigenvectors and singular vectors are defined only up to sign, and LAPACK's
choice can flip under a perturbation as small as rounding.
:func:`canonical_signs` fixes one choice (the entry of largest magnitude in
each column is positive, as scikit-learn's ``svd_flip`` does), so a basis
whose eigenvalues are separated is a well-defined function of its matrix:
the same whether it was computed alone, in a batch, chunked or sharded.

Top-k without a full decomposition. :func:`subspace_top_k` finds the k
largest eigenpairs of a symmetric d × d matrix by block subspace iteration
(matrix products with a d × p block, orthonormalised by shifted
Cholesky-QR, then a p × p Rayleigh–Ritz ``eigh``), at O(d²p) a step
instead of the O(d³) of :func:`eigh`. :func:`eigh_top_k` is the exact
reference with the same result type. :func:`captured_variance` and
:func:`captured_variance_ratio` measure what an approximate basis keeps of
a noise-free matrix; :func:`subspace_distance` compares two bases.

Products at full precision. Where the platform allows it, XLA computes a
float32 matrix product with fewer mantissa bits: on NVIDIA GPUs since
Ampere, JAX's default precision rounds the operands to TensorFloat-32
(10 explicit bits, a relative error up to about 2⁻¹¹ per operand), and
on TPUs to bfloat16 (7 bits). A sum
of rows whose norms were bounded (XᵀX of clipped rows, a clipped gradient
sum, a weighted sum of clipped messages) would then add rows up to about
2⁻¹⁰ longer than the bound the accounting assumes, and a clip factor
computed by one product would not match the product it scales; on an
H100 a ghost-clipped example moved the sum by 1.0004·C. The library
traces those sums and the norms computed by products (ghost clipping's),
and the orthonormalisation of :func:`subspace_top_k`, under
:func:`full_precision`; products before a bound is enforced (a model's
forward and backward pass, whose outputs are clipped, a data-independent
feature map, a projection clipped afterwards) keep the platform's
default.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpcore import validation

__all__ = [
    "TopK",
    "canonical_signs",
    "captured_variance",
    "captured_variance_ratio",
    "eigh",
    "eigh_top_k",
    "full_precision",
    "orthonormalize",
    "subspace_distance",
    "subspace_top_k",
    "thin_svd",
]


def full_precision(fn):
  """``fn`` with every float32 matrix product it traces at full precision.

  Its body is traced under ``jax.default_matmul_precision("highest")``,
  inside a caller's ``jit`` or ``vmap`` too (module docstring: why a
  bounded sum needs it). Products in float64 and on the CPU are computed
  at full precision anyway; the decorator changes nothing there.
  """

  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    with jax.default_matmul_precision("highest"):
      return fn(*args, **kwargs)

  return wrapped


def _eigh(m):
  return jnp.linalg.eigh(m)


def _thin_svd(a):
  return jnp.linalg.svd(a, full_matrices=False)


_eigh_in_turn = jax.custom_batching.sequential_vmap(_eigh)
_thin_svd_in_turn = jax.custom_batching.sequential_vmap(_thin_svd)


def eigh(m):
  """``(eigenvalues ascending, eigenvectors)`` of symmetric ``m`` (..., d, d).

  Under ``vmap`` on the CPU the matrices are decomposed in turn (module
  docstring).
  """
  return jax.lax.platform_dependent(m, cpu=_eigh_in_turn, default=_eigh)


def thin_svd(a):
  """``(U, s, Vᵀ)`` of ``a`` (..., m, n) with ``full_matrices=False``.

  Under ``vmap`` on the CPU the matrices are decomposed in turn (module
  docstring).
  """
  return jax.lax.platform_dependent(a, cpu=_thin_svd_in_turn,
                                    default=_thin_svd)


def canonical_signs(vectors):
  """Flips each column of ``vectors`` (..., d, k) so that its entry of
  largest magnitude is positive (the first such entry on ties).

  A column whose largest entries are tied in magnitude with opposite signs
  stays ambiguous; for a generic column the choice is stable under small
  perturbations of the matrix it came from.
  """
  top = jnp.argmax(jnp.abs(vectors), axis=-2, keepdims=True)
  lead = jnp.take_along_axis(vectors, top, axis=-2)
  return vectors * jnp.where(lead < 0, -1, 1).astype(vectors.dtype)


class TopK(NamedTuple):
  """The k largest eigenpairs of a symmetric matrix, descending.

  Attributes:
    vectors: (..., d, k) orthonormal eigenvectors, signs fixed by
      :func:`canonical_signs`.
    values: (..., k) eigenvalues (Ritz values for :func:`subspace_top_k`),
      descending.
    residuals: (..., k) ‖M uⱼ − λⱼ uⱼ‖ for each column: 0 up to rounding
      for an exact eigenpair; the convergence measure of an iterative one.
  """
  vectors: jax.Array
  values: jax.Array
  residuals: jax.Array


def eigh_top_k(m, k: int) -> TopK:
  """The k largest eigenpairs of symmetric ``m`` (..., d, d) by :func:`eigh`.

  The exact reference for :func:`subspace_top_k` (residuals are computed,
  one d × d × k product).
  """
  m = _check_square(m)
  k = _check_top_k(k, m.shape[-1])
  values, vectors = eigh(m)
  values = values[..., ::-1][..., :k]
  vectors = canonical_signs(vectors[..., ::-1][..., :k])
  return TopK(vectors, values, _residuals(m @ vectors, vectors, values))


def _check_square(m):
  """``m`` as an array of shape (..., d, d), d ≥ 1 (a static check)."""
  m = jnp.asarray(m)
  if m.ndim < 2 or m.shape[-1] != m.shape[-2] or m.shape[-1] == 0:
    raise ValueError(
        f"m must be a square matrix (or a batch of them), shape (..., d, "
        f"d), got shape {m.shape}.")
  return m


def _check_top_k(k, d: int) -> int:
  if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= d:
    raise ValueError(f"k must be an integer in [1, d={d}], got {k!r}.")
  return k


def _residuals(mv, vectors, values):
  return jnp.linalg.norm(mv - vectors * values[..., None, :], axis=-2)


def _gram(y):
  g = jnp.swapaxes(y, -1, -2) @ y
  return 0.5 * (g + jnp.swapaxes(g, -1, -2))


def _cholesky_qr(y, shift):
  """One Cholesky-QR pass: Y R⁻¹ with RᵀR = YᵀY + shift·‖Y‖²_F/p · I.

  The shift (relative to the mean squared column norm) keeps the Cholesky
  factorisation from breaking down when Y is ill-conditioned; the span is
  unchanged (R is invertible), only the orthonormality of one pass is
  approximate, which the next pass repairs.
  """
  g = _gram(y)
  p = g.shape[-1]
  scale = jnp.trace(g, axis1=-2, axis2=-1)[..., None, None] / p
  # A zero block (M = 0) keeps a positive diagonal.
  tiny = jnp.finfo(g.dtype).tiny
  g = g + (shift * scale + tiny) * jnp.eye(p, dtype=g.dtype)
  return jnp.vectorize(_factor_and_solve, signature="(p,p),(d,p)->(d,p)")(
      g, y)


def _factor_and_solve_one(g, y):
  """Y L⁻ᵀ for the Cholesky factor L of one p × p ``g`` (Qᵀ = L⁻¹ Yᵀ)."""
  lower = jnp.linalg.cholesky(g)
  return jax.lax.linalg.triangular_solve(lower, y, left_side=False,
                                         lower=True, transpose_a=True)


_factor_and_solve_in_turn = jax.custom_batching.sequential_vmap(
    _factor_and_solve_one)


def _factor_and_solve(g, y):
  """:func:`_factor_and_solve_one`; a batch on the CPU in turn.

  jaxlib's batched ``potrf`` and ``trsm`` kernels wait on the intra-op
  pool like its batched ``ssyevd`` (module docstring), and two of them
  running side by side (two independent orthonormalisations in one
  program, as FedDPDR's private and noise-free top-k are) hung every run
  on 2 cores with jax 0.10.2.
  """
  return jax.lax.platform_dependent(g, y, cpu=_factor_and_solve_in_turn,
                                    default=_factor_and_solve_one)


@full_precision
def orthonormalize(y):
  """Orthonormal basis of the span of the columns of ``y`` (..., d, p).

  Shifted Cholesky-QR followed by two plain-ish passes (CholeskyQR3 in the
  sense of Fukaya et al., 2020): three p × p Cholesky factorisations and
  three d × p triangular solves, no Householder reflections. The first
  shift (about 10·p·ε of the mean squared column norm) bounds the
  condition number the first pass can leave; the later ones (ε-sized)
  only prevent a breakdown. Columns of ``y`` that are linearly dependent
  to working precision come back with norms below 1: pass a full-rank
  block (:func:`subspace_top_k` shifts its matrix so that its blocks are).

  References:
    Fukaya, Kannan, Nakatsukasa, Yamamoto & Yanagisawa, Shifted Cholesky
    QR for computing the QR factorization of ill-conditioned matrices,
    SIAM J. Sci. Comput. 42(1), 2020.
  """
  eps = jnp.finfo(y.dtype).eps
  p = y.shape[-1]
  q = _cholesky_qr(y, 10.0 * p * eps)
  q = _cholesky_qr(q, eps)
  return _cholesky_qr(q, eps)


@full_precision
def subspace_top_k(key: jax.Array, m, k: int, *, block: int | None = None,
                   iterations: int = 16) -> TopK:
  """The k largest eigenpairs of symmetric ``m`` by block subspace iteration.

  Starting from a random d × p block (p = ``block``), repeats
  Q ← orth((M + αI) Q) ``iterations`` times, then takes the Ritz pairs of
  QᵀMQ (a p × p :func:`eigh`) and keeps the k largest. Each step costs one
  d × d × p product and three p × p Cholesky factorisations
  (:func:`orthonormalize`), so for p ≪ d it is much cheaper than
  :func:`eigh`. The column of the j-th eigenvector converges like
  (|λ_{p+1}| / |λ_j|)^iterations, so a block larger than k (default
  p = min(d, 2k + 8)) speeds it up. The shift α = 10⁻³‖M‖_F/√d makes
  every block full-rank (a rank-deficient M is handled in float32) and
  does not change the eigenvectors.

  What is found: the iteration favours eigenvalues of large magnitude, and
  the Ritz step then keeps the k algebraically largest in the block. For a
  positive semi-definite M that is the exact top k in the limit; for an
  indefinite one (a DP-PCA noisy second moment) it is exact when the k
  largest eigenvalues are among the p of largest magnitude, i.e. when at
  most p − k eigenvalues below the k-th are larger in magnitude than it:
  the default block leaves k + 8 places for such negative ones. The
  ``residuals`` of the result measure the convergence of each pair.

  Works on a batch (leading axes of ``m``) and under ``jit``/``vmap``; the
  loop is a ``lax.fori_loop`` of fixed length (``k``, ``block`` and
  ``iterations`` are static).

  Args:
    key: PRNG key of the random start block, one block per matrix of a
      batch. Not privacy-relevant: the result is post-processing of ``m``
      whatever the start (``m`` is already private); the key only makes the
      start reproducible and must not be a key used for noise.
    m: (..., d, d) symmetric matrix (only its symmetric part is used by
      the Ritz step).
    k: number of eigenpairs, 1 ≤ k ≤ d.
    block: block size p, k ≤ p ≤ d (default min(d, 2k + 8)).
    iterations: subspace iterations ≥ 0 (0 gives the Ritz pairs of the
      random start).

  Returns:
    :class:`TopK`: (..., d, k) orthonormal vectors (canonical signs), the
    k Ritz values descending, and the residual norm of each pair.

  Raises:
    ValueError: k, block or iterations out of range.
  """
  validation.check_key(key)
  m = _check_square(m)
  d = m.shape[-1]
  k = _check_top_k(k, d)
  p = min(d, 2 * k + 8) if block is None else block
  if isinstance(p, bool) or not isinstance(p, int) or not k <= p <= d:
    raise ValueError(
        f"block must be an integer in [k={k}, d={d}], got {block!r}.")
  if (isinstance(iterations, bool) or not isinstance(iterations, int)
      or iterations < 0):
    raise ValueError(
        f"iterations must be an integer >= 0, got {iterations!r}.")
  dtype = m.dtype if jnp.issubdtype(m.dtype, jnp.floating) else jnp.float32
  m = m.astype(dtype)
  start = jax.random.normal(key, m.shape[:-2] + (d, p), dtype)
  # α: a small positive shift, relative to the matrix's scale
  # (‖M‖_F/√d is the root-mean-square eigenvalue), so that (M + αI)Q has
  # full rank even where M has not.
  # The zero matrix gets α = 1 (any positive shift will do).
  scale = jnp.linalg.norm(m, axis=(-2, -1))[..., None, None] / d ** 0.5
  alpha = jnp.where(scale > 0, 1e-3 * scale, 1.0).astype(dtype)

  def step(_, q):
    return orthonormalize(m @ q + alpha * q)

  q = jax.lax.fori_loop(0, iterations, step, orthonormalize(start))
  mq = m @ q
  ritz_values, ritz_vectors = eigh(_gram_like(q, mq))
  ritz_vectors = ritz_vectors[..., ::-1][..., :k]
  values = ritz_values[..., ::-1][..., :k]
  vectors = q @ ritz_vectors
  mv = mq @ ritz_vectors
  # Residuals do not depend on the signs: computed before fixing them.
  return TopK(canonical_signs(vectors), values,
              _residuals(mv, vectors, values))


def _gram_like(q, mq):
  h = jnp.swapaxes(q, -1, -2) @ mq
  return 0.5 * (h + jnp.swapaxes(h, -1, -2))


def captured_variance(basis, m_clean):
  """tr(Uᵀ M U): the variance of the noise-free ``m_clean`` (..., d, d)
  that the (..., d, k) orthonormal ``basis`` U captures."""
  return jnp.sum(basis * (m_clean @ basis), axis=(-2, -1))


def captured_variance_ratio(basis, reference, m_clean):
  """tr(UᵀMU) / tr(U*ᵀMU*): what ``basis`` captures of the noise-free
  ``m_clean`` relative to ``reference`` U*.

  With U* the exact top k of the same noisy matrix (:func:`eigh_top_k`)
  this is the utility of an approximate top-k relative to exact ``eigh``;
  1 means no loss. It can exceed 1 (the exact top k of a noisy matrix is
  not the best basis for the clean one), so convergence is better read
  from :func:`subspace_distance` or the residuals.
  """
  return captured_variance(basis, m_clean) / captured_variance(
      reference, m_clean)


def subspace_distance(a, b):
  """‖(I − AAᵀ)B‖₂ for orthonormal (..., d, k) bases of equal k: the sine
  of the largest principal angle between their spans, which equals
  ‖AAᵀ − BBᵀ‖₂ (0: the same subspace; 1: a direction of one is orthogonal
  to the other).

  Computed from the residual B − A(AᵀB) itself, not from 1 − cos², so a
  float32 distance is accurate well below √ε.
  """
  if jnp.shape(a) != jnp.shape(b) or jnp.ndim(a) < 2:
    raise ValueError(
        f"a and b must be bases of the same shape (..., d, k), got "
        f"{jnp.shape(a)} and {jnp.shape(b)}.")
  rest = b - a @ (jnp.swapaxes(a, -1, -2) @ b)
  largest = eigh(_gram(rest))[0][..., -1]
  return jnp.sqrt(jnp.maximum(largest, 0.0))
