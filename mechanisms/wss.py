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

Pair memory. The paper keeps an l × l boolean matrix (2.5 GB at
l = 50,000, one byte per flag). Here each run keeps

* a packed bit matrix, one bit per ordered pair: l × ⌈l/32⌉ uint32 words,
  l²/8 bytes (312 MB at l = 50,000, 3.1 MB at l = 5,000). Looking up the
  pairs already used with the current i reads row i (l/32 words) and
  marking a pair sets one bit, so an iteration costs O(l) whatever its
  index;
* a record of the selected pairs in selection order, ``max_iter`` × 2 int32
  (8 bytes per allowed iteration), returned to the caller.

When l²/8 bytes exceed :data:`BITSET_MAX_BYTES` per run the bit matrix is
dropped and the lookup scans the record instead, in chunks (a
``fori_loop`` with a dynamic trip count): O(k + l) at iteration k, O(T² +
T·l) for a run of T iterations, in O(T + l) memory. Both lookups give the
same answer (tested). Pairs are ordered by default, exactly as the paper's
flag I[i][j] (set with i from I_up, tested as I[i][t]);
``ordered_pairs=False`` treats {i, t} and {t, i} as the same pair.
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
# Per-run cap on the packed pair bit matrix (l²/8 bytes): l ≤ 92,681.
BITSET_MAX_BYTES = 1 << 30


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

  def empty_memory(self, num_rows: int) -> PairMemory:
    del num_rows
    return empty_memory(0)

  def remember(self, memory, i, j, found) -> PairMemory:
    del i, j, found
    return memory

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
  """Selected pairs so far.

  ``pairs[:count]`` are the (i, j) rows in selection order. ``bits`` is the
  (l, ⌈l/32⌉) packed flag matrix (bit t % 32 of word [i, t // 32] set when
  pair (i, t) was selected), or a (0, 0) array when only the record is kept.
  """
  pairs: jax.Array  # (buffer_rows, 2) int32, −1 where unused
  count: jax.Array  # int32
  bits: jax.Array   # (l, ⌈l/32⌉) uint32, or (0, 0)


def bitset_bytes(num_rows: int) -> int:
  """Bytes of the packed pair flags of one run with ``num_rows`` rows."""
  return num_rows * (-(-num_rows // 32)) * 4


def empty_memory(rows: int, num_rows: int = 0) -> PairMemory:
  """A record of ``rows`` pairs, plus bit flags for ``num_rows`` data rows.

  ``num_rows = 0`` keeps the record only (lookups scan it).
  """
  padded = max(PAIR_CHUNK, -(-rows // PAIR_CHUNK) * PAIR_CHUNK) if rows else 0
  words = -(-num_rows // 32)
  return PairMemory(jnp.full((padded, 2), -1, jnp.int32),
                    jnp.zeros((), jnp.int32),
                    jnp.zeros((num_rows, words), jnp.uint32))


def _bit(t):
  return jnp.left_shift(jnp.uint32(1), (t % 32).astype(jnp.uint32))


def remember(memory: PairMemory, i, j, found, *,
             symmetric: bool = False) -> PairMemory:
  """Records (i, j) when ``found`` (also flags (j, i) when ``symmetric``).

  Slot ``count`` of the record is written either way (−1s when nothing was
  found); it lies past the filled prefix, so that write is never read.
  """
  bits = memory.bits
  if bits.shape[0]:
    def flag(b, r, t):
      w = t // 32
      return b.at[r, w].set(b[r, w] | jnp.where(found, _bit(t), 0))

    bits = flag(bits, i, j)
    if symmetric:
      bits = flag(bits, j, i)
  if memory.pairs.shape[0] == 0:
    return memory._replace(bits=bits)
  row = jnp.where(found, jnp.stack([i, j]).astype(jnp.int32), -1)
  pairs = memory.pairs.at[memory.count].set(row, mode="drop")
  return PairMemory(pairs, memory.count + found.astype(jnp.int32), bits)


def seen_with(memory: PairMemory, i, num_rows: int, *,
              ordered: bool) -> jax.Array:
  """Boolean (l,) mask: t such that pair (i, t) was selected before.

  With bit flags, row i is unpacked (flags of unordered memories are set
  both ways by :func:`remember`, so ``ordered`` is not needed); otherwise
  the record is scanned.
  """
  if memory.bits.shape[0]:
    words = memory.bits[i]
    shifts = jnp.arange(32, dtype=jnp.uint32)
    flags = jnp.right_shift(words[:, None], shifts) & jnp.uint32(1)
    return flags.reshape(-1)[:num_rows].astype(jnp.bool_)
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
    buffer_rows: capacity of the pair record (the solver's max_iter).
    ordered_pairs: pairs (i, t) and (t, i) are distinct (paper's I[i][j]).
    pair_flags: ``"auto"`` (bit flags when l²/8 ≤ BITSET_MAX_BYTES),
      ``"bits"`` or ``"scan"`` (record only; see the module docstring).

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
  pair_flags: str = "auto"
  name = "dpwss"

  def __post_init__(self):
    if self.pair_flags not in ("auto", "bits", "scan"):
      raise ValueError("pair_flags must be 'auto', 'bits' or 'scan', got "
                       f"{self.pair_flags!r}.")

  def empty_memory(self, num_rows: int) -> PairMemory:
    use_bits = self.pair_flags == "bits" or (
        self.pair_flags == "auto"
        and bitset_bytes(num_rows) <= BITSET_MAX_BYTES)
    return empty_memory(self.buffer_rows, num_rows if use_bits else 0)

  def remember(self, memory, i, j, found) -> PairMemory:
    return remember(memory, i, j, found, symmetric=not self.ordered_pairs)

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
