"""Working-set selection rules for the SMO solver: WSS2 and DPWSS.

Notation (LIBSVM's, for the C-SVC dual min ½αᵀQα − eᵀα, 0 ≤ α ≤ C,
yᵀα = 0, with G = Qα − e):

* I_up  = {t | α_t < C, y_t = +1  or  α_t > 0, y_t = −1}
* I_low = {t | α_t < C, y_t = −1  or  α_t > 0, y_t = +1}
* m = max_{I_up} −y_t G_t,  M′ = max_{I_low} y_t G_t; the point is
  stationary (to tolerance eps) when m + M′ < eps.

Both rules take i = the maximiser of −y_t G_t over I_up (ties go to the last
index, as in LIBSVM). They differ in j:

* :class:`WSS2` (Fan, Chen & Lin 2005; LIBSVM ≥ 2.8): the t ∈ I_low with
  −y_t G_t < m that minimises −b²/ā, b = m + y_t G_t, ā = K_ii + K_tt −
  2K_it (τ when not positive). Deterministic.
* :class:`DPWSS` (the PeerJ CS 7:e799 paper, Algorithm 1): candidates are
  t ∈ I_low whose pair (i, t) was never selected before, with
  m + y_t G_t > eps and score q(t) = (m + y_t G_t)/(m + M′) ≥ σ; j is drawn
  by the exponential mechanism with weights exp(ε q / (2Δq)), Δq = 1 − σ
  (Gumbel-max, :func:`dpcore.exponential.exponential_mechanism`).

Pair memory. The paper keeps an l × l boolean matrix; at l = 50,000 that is
2.5 GB, so here the selected pairs live in a fixed buffer of
``max_iter`` rows × 2 int32 (8 bytes per allowed iteration). To find the
pairs already used with the current i, the filled prefix of the buffer is
scanned in chunks (a ``fori_loop`` with a dynamic trip count), so iteration
k costs O(k + l) and a run of T iterations O(T² + T·l) time and O(T + l)
memory. Pairs are ordered by default, exactly as the paper's flag I[i][j]
(set with i from I_up, tested as I[i][t]); ``ordered_pairs=False`` treats
{i, t} and {t, i} as the same pair.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from dpcore import exponential

# Exit codes of the solver (see ``smo.EXIT_REASONS``).
RUNNING = 0
STATIONARY = 1
NO_CANDIDATE = 2
MAX_ITER = 3

PAIR_CHUNK = 256


class Selection(NamedTuple):
  """A working set {i, j}, or the reason there is none.

  ``row_i`` is K(x_i, ·) when the rule already computed it, else ``None``.
  """
  i: jax.Array
  j: jax.Array
  status: jax.Array  # RUNNING when found, else STATIONARY / NO_CANDIDATE
  row_i: jax.Array | None


def last_argmax(values: jax.Array) -> jax.Array:
  """Index of the last maximum (LIBSVM's ``>=`` scans keep the last one)."""
  n = values.shape[0]
  return (n - 1 - jnp.argmax(values[::-1])).astype(jnp.int32)


def violation_sets(alpha, y, c, active):
  """Masks of I_up and I_low (restricted to the active rows)."""
  below_c = alpha < c
  above_0 = alpha > 0
  pos = y > 0
  in_up = active & jnp.where(pos, below_c, above_0)
  in_low = active & jnp.where(pos, above_0, below_c)
  return in_up, in_low


def _first_index(alpha, grad, y, c, active):
  """i, m and M′ shared by both rules."""
  yg = y * grad
  in_up, in_low = violation_sets(alpha, y, c, active)
  neg_inf = jnp.asarray(-jnp.inf, grad.dtype)
  up_scores = jnp.where(in_up, -yg, neg_inf)
  i = last_argmax(up_scores)
  m = up_scores[i]
  m_low = jnp.max(jnp.where(in_low, yg, neg_inf))
  return i, m, m_low, yg, in_low


@dataclasses.dataclass(frozen=True)
class WSS2:
  """LIBSVM's second-order selection; needs no key and no pair memory."""
  name = "wss2"
  buffer_rows = 0

  def select(self, *, alpha, grad, y, qd, c, eps, tau, active, row_fn,
             memory, key, params):
    del memory, key, params
    i, m, m_low, yg, in_low = _first_index(alpha, grad, y, c, active)
    row_i = row_fn(i)
    grad_diff = m + yg
    quad = qd[i] + qd - 2.0 * row_i
    quad = jnp.where(quad > 0, quad, tau)
    gain = (grad_diff * grad_diff) / quad  # = −obj_diff
    cand = in_low & (grad_diff > 0)
    j = last_argmax(jnp.where(cand, gain, -jnp.inf))
    status = jnp.where(
        m + m_low < eps, STATIONARY,
        jnp.where(jnp.any(cand), RUNNING, NO_CANDIDATE)).astype(jnp.int32)
    return Selection(i, j, status, row_i)


class PairMemory(NamedTuple):
  """Selected pairs so far: ``pairs[:count]`` are (i, j) rows."""
  pairs: jax.Array  # (buffer_rows, 2) int32, −1 where unused
  count: jax.Array  # int32


def empty_memory(rows: int) -> PairMemory:
  padded = max(PAIR_CHUNK, -(-rows // PAIR_CHUNK) * PAIR_CHUNK) if rows else 0
  return PairMemory(jnp.full((padded, 2), -1, jnp.int32),
                    jnp.zeros((), jnp.int32))


def remember(memory: PairMemory, i, j, found) -> PairMemory:
  """Appends (i, j) when ``found`` (the buffer holds max_iter rows).

  Slot ``count`` is written either way (−1s when nothing was found); it
  lies past the filled prefix, so that write is never read.
  """
  if memory.pairs.shape[0] == 0:
    return memory
  row = jnp.where(found, jnp.stack([i, j]).astype(jnp.int32), -1)
  pairs = memory.pairs.at[memory.count].set(row, mode="drop")
  return PairMemory(pairs, memory.count + found.astype(jnp.int32))


def seen_with(memory: PairMemory, i, num_rows: int, *,
              ordered: bool) -> jax.Array:
  """Boolean (l,) mask: t such that pair (i, t) was selected before."""
  if memory.pairs.shape[0] == 0:
    return jnp.zeros((num_rows,), jnp.bool_)

  def scan_chunk(chunk, seen):
    start = chunk * PAIR_CHUNK
    block = lax.dynamic_slice(memory.pairs, (start, jnp.zeros_like(start)),
                              (PAIR_CHUNK, 2))
    valid = jnp.arange(PAIR_CHUNK) + start < memory.count
    hit = valid & (block[:, 0] == i)
    seen = seen.at[jnp.where(hit, block[:, 1], num_rows)].set(
        True, mode="drop")
    if not ordered:
      back = valid & (block[:, 1] == i)
      seen = seen.at[jnp.where(back, block[:, 0], num_rows)].set(
          True, mode="drop")
    return seen

  chunks = (memory.count + PAIR_CHUNK - 1) // PAIR_CHUNK
  return lax.fori_loop(0, chunks, scan_chunk,
                       jnp.zeros((num_rows,), jnp.bool_))


class DPWSSParams(NamedTuple):
  """Traced parameters of DPWSS (changing them does not recompile)."""
  epsilon: jax.Array  # per-selection ε
  sigma: jax.Array    # constant factor σ ∈ (0, 1)


def dpwss_scores(*, m, m_low, yg, in_low, seen, eps, sigma):
  """Score q(t) and the candidate mask of Algorithm 1 (lines 5–12)."""
  violation = m + yg
  q = violation / (m + m_low)
  cand = in_low & ~seen & (violation > eps) & (q >= sigma)
  return q, cand


@dataclasses.dataclass(frozen=True)
class DPWSS:
  """The paper's DPWSS rule (WSS4 candidates + exponential mechanism).

  Attributes:
    buffer_rows: capacity of the pair memory (the solver's max_iter).
    ordered_pairs: pairs (i, t) and (t, i) are distinct (paper's I[i][j]).

  Privacy: one selection is ε-DP for the choice of j *given the current
  state (α, G)*, when every score q has sensitivity ≤ 1 − σ (the paper's
  claim, which assumes q ∈ [σ, 1] for both neighbours; the candidate set
  itself is data-dependent and not privatised). T selections compose to
  T·ε (basic) or, as ε²/8-zCDP each, to about ε√(T/2 · log(1/δ)) at δ —
  never to ε. The trained α (and w) are exact functions of the data given
  the selections, so the released model is NOT differentially private.
  """
  buffer_rows: int
  ordered_pairs: bool = True
  name = "dpwss"

  def select(self, *, alpha, grad, y, qd, c, eps, tau, active, row_fn,
             memory, key, params):
    del qd, tau, row_fn
    i, m, m_low, yg, in_low = _first_index(alpha, grad, y, c, active)
    seen = seen_with(memory, i, y.shape[0], ordered=self.ordered_pairs)
    q, cand = dpwss_scores(m=m, m_low=m_low, yg=yg, in_low=in_low,
                           seen=seen, eps=eps, sigma=params.sigma)
    j, any_valid = exponential.exponential_mechanism(
        key, jnp.where(cand, q, 0.0), epsilon=params.epsilon,
        sensitivity=1.0 - params.sigma, mask=cand)
    status = jnp.where(
        m + m_low < eps, STATIONARY,
        jnp.where(any_valid, RUNNING, NO_CANDIDATE)).astype(jnp.int32)
    return Selection(i, j, status, None)
