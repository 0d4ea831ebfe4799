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
batched kernels elsewhere. For the d × d matrices of DP-PCA this is also
faster on the CPU: five 784 × 784 ``eigh`` took 142 ms one at a time against
200 ms batched on the 2-core development machine (LAPACK already uses the
cores within one decomposition). For tiny matrices the batched kernel is
faster (fifty 20 × 20: 0.7 ms against 1.3 ms), a cost too small to matter
here.

The results are the same decompositions; only the schedule differs.

Eigenvectors and singular vectors are defined only up to sign, and LAPACK's
choice can flip under a perturbation as small as rounding.
:func:`canonical_signs` fixes one choice (the entry of largest magnitude in
each column is positive, as scikit-learn's ``svd_flip`` does), so a basis
whose eigenvalues are separated is a well-defined function of its matrix:
the same whether it was computed alone, in a batch, chunked or sharded.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


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
