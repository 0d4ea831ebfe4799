"""Working-set selection rules for SMO: WSS2, DPWSS and PrivateWSS.

Notation (LIBSVM's, for the C-SVC dual min ½αᵀQα − eᵀα, 0 ≤ α ≤ C,
yᵀα = 0, with G = Qα − e):

* I_up  = {t | α_t < C, y_t = +1  or  α_t > 0, y_t = −1}
* I_low = {t | α_t < C, y_t = −1  or  α_t > 0, y_t = +1}
* m = max_{I_up} −y_t G_t,  M′ = max_{I_low} y_t G_t; the point is
  stationary (to tolerance eps) when m + M′ < eps.

WSS2 and DPWSS take i = the maximiser of −y_t G_t over I_up (ties go to
the last index, as in LIBSVM). They differ in j:

* :class:`WSS2` (Fan, Chen & Lin 2005; LIBSVM ≥ 2.8): the t ∈ I_low with
  −y_t G_t < m that minimises −b²/ā, b = m + y_t G_t, ā = K_ii + K_tt −
  2K_it (τ when not positive). Deterministic.
* :class:`DPWSS` (the PeerJ CS 7:e799 paper, Algorithm 1): candidates are
  t ∈ I_low whose pair (i, t) was never selected before, with
  m + y_t G_t > eps and score q(t) = (m + y_t G_t)/(m + M′) ≥ σ; j is drawn
  by the exponential mechanism with weights exp(ε q / (2Δq)), Δq = 1 − σ
  (Gumbel-max, :func:`dpcore.exponential.exponential_mechanism`). This
  selection is NOT differentially private: i is deterministic (often the
  very row an attacker asks about) and the candidate set for j depends on
  the labels, so a row can be selectable under D and never under D′.
* :class:`PrivateWSS` (this library's variant, not the paper's): i and j
  are both drawn by the exponential mechanism over all l indices, with
  scores clipped to [0, 1] (a data-independent support and Δ = 1 for any
  state), and no data-dependent exit: the solver runs exactly max_iter
  steps. Each selection is ε-DP given the past transcript; see its
  docstring for the proof.

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
flag ``I[i][j]`` (set with i from I_up, tested as ``I[i][t]``);
``ordered_pairs=False`` treats {i, t} and {t, i} as the same pair.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from dpcore import exponential, options

__all__ = [
    "BITSET_MAX_BYTES",
    "DPWSS",
    "DPWSSParams",
    "MAX_ITER",
    "NO_CANDIDATE",
    "PAIR_CHUNK",
    "PairMemory",
    "PrivateWSS",
    "RUNNING",
    "STATIONARY",
    "Selection",
    "WSS2",
    "bitset_bytes",
    "dpwss_scores",
    "empty_memory",
    "last_argmax",
    "last_max",
    "private_first_scores",
    "private_second_scores",
    "remember",
    "seen_with",
    "violation_sets",
]

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
  return last_max(values)[0]


def last_max(values: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(index of the last maximum, the maximum) of a 1-D array.

  Equal to ``n − 1 − argmax(values[::-1])`` (NaN counts as the maximum,
  and then the last NaN is taken), but computed as a max followed by a max
  over the matching indices: two reductions that vectorise, where
  ``argmax``'s value-and-index reduction runs element by element on the
  CPU (about 19 µs against 3 µs at 4,601 rows, twice per SMO iteration).
  """
  top = jnp.max(values)
  hit = (values == top) | jnp.isnan(values)
  index = jnp.max(jnp.where(hit, jnp.arange(values.shape[0],
                                            dtype=jnp.int32), -1))
  return index, top


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
  i, m = last_max(up_scores)  # m = up_scores[i]
  m_low = jnp.max(jnp.where(in_low, yg, neg_inf))
  return i, m, m_low, yg, in_low


@dataclasses.dataclass(frozen=True)
class WSS2:
  """LIBSVM's second-order selection; needs no key and no pair memory."""
  name = "wss2"
  buffer_rows = 0

  def empty_memory(self, num_examples: int) -> PairMemory:
    del num_examples
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
    j, best = last_max(jnp.where(cand, gain, -jnp.inf))
    # Any candidate ⇔ best > −∞ (a candidate's gain is ≥ 0, or NaN).
    any_cand = (best > -jnp.inf) | jnp.isnan(best)
    status = jnp.where(
        m + m_low < eps, STATIONARY,
        jnp.where(any_cand, RUNNING, NO_CANDIDATE)).astype(jnp.int32)
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


def bitset_bytes(num_examples: int) -> int:
  """Bytes of the packed pair flags of one run on ``num_examples`` rows."""
  return num_examples * (-(-num_examples // 32)) * 4


def empty_memory(rows: int, num_examples: int = 0) -> PairMemory:
  """A record of ``rows`` pairs, plus bit flags for ``num_examples`` rows.

  ``num_examples = 0`` keeps the record only (lookups scan it).
  """
  padded = max(PAIR_CHUNK, -(-rows // PAIR_CHUNK) * PAIR_CHUNK) if rows else 0
  words = -(-num_examples // 32)
  return PairMemory(jnp.full((padded, 2), -1, jnp.int32),
                    jnp.zeros((), jnp.int32),
                    jnp.zeros((num_examples, words), jnp.uint32))


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


def seen_with(memory: PairMemory, i, num_examples: int, *,
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
    return flags.reshape(-1)[:num_examples].astype(jnp.bool_)
  if memory.pairs.shape[0] == 0:
    return jnp.zeros((num_examples,), jnp.bool_)

  def scan_chunk(chunk, seen):
    start = chunk * PAIR_CHUNK
    block = lax.dynamic_slice(memory.pairs, (start, jnp.zeros_like(start)),
                              (PAIR_CHUNK, 2))
    valid = jnp.arange(PAIR_CHUNK) + start < memory.count
    hit = valid & (block[:, 0] == i)
    seen = seen.at[jnp.where(hit, block[:, 1], num_examples)].set(
        True, mode="drop")
    if not ordered:
      back = valid & (block[:, 1] == i)
      seen = seen.at[jnp.where(back, block[:, 0], num_examples)].set(
          True, mode="drop")
    return seen

  chunks = (memory.count + PAIR_CHUNK - 1) // PAIR_CHUNK
  return lax.fori_loop(0, chunks, scan_chunk,
                       jnp.zeros((num_examples,), jnp.bool_))


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
    ordered_pairs: pairs (i, t) and (t, i) are distinct (paper's ``I[i][j]``).
    pair_flags: a :class:`dpcore.options.PairFlags`: ``AUTO`` (bit flags
      when l²/8 ≤ BITSET_MAX_BYTES), ``BITS`` or ``SCAN`` (record only;
      see the module docstring). A spelling is stored as the member.

  Privacy: none, for the transcript or the model. The paper calls each
  selection ε-DP with score sensitivity 1 − σ, but (a) the candidate set
  for j depends on the data (at α = 0 it is exactly the rows labelled −1,
  so a row can be selectable under D and never under its neighbour D′:
  an unbounded privacy loss), and (b) i is not randomised at all (the
  largest violator, ties to the last index), so it is the changed row
  itself whenever that row violates most. The ε parameter is therefore
  nominal. The trained α (and w) are exact functions of the data given
  the selections. :class:`PrivateWSS` is the variant with a guarantee.
  """
  buffer_rows: int
  ordered_pairs: bool = True
  pair_flags: options.PairFlags = options.PairFlags.AUTO
  name = "dpwss"

  def __post_init__(self):
    object.__setattr__(self, "pair_flags", options.parse(
        options.PairFlags, self.pair_flags, "pair_flags"))

  def empty_memory(self, num_examples: int) -> PairMemory:
    use_bits = self.pair_flags is options.PairFlags.BITS or (
        self.pair_flags is options.PairFlags.AUTO
        and bitset_bytes(num_examples) <= BITSET_MAX_BYTES)
    return empty_memory(self.buffer_rows, num_examples if use_bits else 0)

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


def _unit_scores(raw, valid, sigma):
  """(raw − σ)/(1 − σ) clipped to [0, 1]; 0 where not ``valid`` or NaN.

  Whatever ``raw`` holds (any data, any state), the result lies in [0, 1]:
  this range, not any property of ``raw``, is what the privacy proof of
  :class:`PrivateWSS` uses.
  """
  score = (raw - sigma) / (1.0 - sigma)
  score = jnp.where(valid & jnp.isfinite(score), score, 0.0)
  return jnp.clip(score, 0.0, 1.0)


def private_first_scores(*, yg, in_up, in_low, sigma):
  """Scores in [0, 1] for i: how much −y_t G_t violates, t ∈ I_up.

  raw(t) = (−y_t G_t − M)/(m − M) with m = max_{I_up} −y_t G_t and
  M = min_{I_low} −y_t G_t: 1 for LIBSVM's i (the largest violator), 0 for
  a row that violates with nobody. Rows outside I_up, and every row once
  the gap m − M is not positive, get the floor score 0.
  """
  viol = -yg
  m = jnp.max(jnp.where(in_up, viol, -jnp.inf))
  low = jnp.min(jnp.where(in_low, viol, jnp.inf))
  gap = m - low
  ok = jnp.isfinite(gap) & (gap > 0)
  raw = (viol - low) / jnp.where(ok, gap, 1.0)
  return _unit_scores(raw, in_up & ok, sigma)


def private_second_scores(*, yg, in_low, i, seen, sigma):
  """Scores in [0, 1] for j given i: the paper's q(t), floored not masked.

  raw(t) = (−y_i G_i + y_t G_t)/(−y_i G_i + M′), M′ = max_{I_low} y_t G_t:
  the paper's q(t) with the drawn i in place of the largest violator, 1 for
  the t ∈ I_low that violates most with i. Rows outside I_low, pairs
  (i, t) already selected, and every row when i violates with nobody get
  the floor score 0 instead of leaving the support.
  """
  v_i = -yg[i]
  top = v_i + jnp.max(jnp.where(in_low, yg, -jnp.inf))
  ok = jnp.isfinite(top) & (top > 0)
  raw = (v_i + yg) / jnp.where(ok, top, 1.0)
  return _unit_scores(raw, in_low & ~seen & ok, sigma)


@dataclasses.dataclass(frozen=True)
class PrivateWSS(DPWSS):
  """Both indices of the working set drawn by the exponential mechanism.

  A variant of the paper's rule with a proof. Per iteration, i is drawn
  over all l indices with scores :func:`private_first_scores`, then j
  over all l indices with :func:`private_second_scores`, each with
  weights exp(ε·s/2) (Δ = 1) by Gumbel-max; σ keeps the paper's role (a
  score below σ of the best is floored, and scores are rescaled by
  1/(1 − σ)). The rule never reports an exit, so the solver runs exactly
  ``max_iter`` (= T) iterations. ``params`` is a :class:`DPWSSParams`; the
  shrinking mask ``active`` is ignored (every row is scored), and the
  stopping tolerance is not used.

  Attributes: as :class:`DPWSS` (the pair memory holds the transcript).

  Privacy: neighbouring data sets differ in one row (replace-one; the
  number of rows l is public, and the indices 0..l−1 are the candidate
  set). The output is the transcript τ = ((i₁, j₁), …, (i_T, j_T)).

  1. *State.* Before iteration k the solver state s_k = (α, G, pair
     memory) is a deterministic function of the data D and of the past
     transcript τ_<k (SMO's update is exact). Scores are functions of
     (D, s_k), hence of (D, τ_<k), and of i_k for j_k.
  2. *Range, hence sensitivity.* Every score is clipped into [0, 1]
     (:func:`_unit_scores`), for every data set and every state. So for
     any D, D′ and any fixed τ_<k, |s_D(t) − s_D′(t)| ≤ 1 for every t:
     Δ = 1 holds without any assumption on how the state moved. A bound
     on how one row moves G would not do: the state itself differs
     between D and D′.
  3. *Support.* Invalid rows (outside I_up / I_low, pairs already used,
     NaN) get score 0, the floor, never −∞: the support is all l indices
     for every D. (The used-pair filter reads only τ_<k anyway.)
  4. *One selection.* With weights exp(ε s(t)/2) and s ∈ [0, 1], for any
     t: P_D(t)/P_D′(t) = e^{ε(s_D(t) − s_D′(t))/2} · Z_D′/Z_D ≤ e^{ε/2} ·
     e^{ε/2} = e^ε, and the log-ratio varies over t by at most ε (ε-bounded
     range), so each selection is ε-DP and ε²/8-zCDP (Cesar & Rogers
     2021) *conditionally on τ_<k* (and on i_k for j_k).
  5. *Transcript.* The stopping rule is data-independent (T iterations
     exactly), so τ is an adaptive composition of 2T such selections:
     2Tε-DP by basic composition and 2T·ε²/8-zCDP, which
     :class:`dpcore.accounting.PrivacyLedger` converts to (ε, δ).

  Not covered: add/remove neighbours (l changes, and with it the index
  set), and the trained model. α, G and w = Σ α_t y_t x_t are exact
  functions of the data given τ, so they are NOT private; a private model
  needs its own mechanism, e.g.
  :func:`mechanisms.erm.output_perturbation.release`, with its own
  budget. Floating-point effects of the Gumbel-max draw are ignored, as
  everywhere in this library.
  """
  name = "private_dpwss"

  def select(self, *, alpha, grad, y, qd, c, eps, tau, active, row_fn,
             memory, key, params):
    del qd, eps, tau, active, row_fn
    key_i, key_j = jax.random.split(key)
    yg = y * grad
    everyone = jnp.ones(y.shape, jnp.bool_)
    in_up, in_low = violation_sets(alpha, y, c, everyone)
    first = private_first_scores(yg=yg, in_up=in_up, in_low=in_low,
                                 sigma=params.sigma)
    i, _ = exponential.exponential_mechanism(
        key_i, first, epsilon=params.epsilon, sensitivity=1.0,
        mask=self._first_support(in_up))
    seen = seen_with(memory, i, y.shape[0], ordered=self.ordered_pairs)
    second = private_second_scores(yg=yg, in_low=in_low, i=i, seen=seen,
                                   sigma=params.sigma)
    j, _ = exponential.exponential_mechanism(
        key_j, second, epsilon=params.epsilon, sensitivity=1.0,
        mask=self._second_support(in_low, seen))
    return Selection(i, j, jnp.asarray(RUNNING, jnp.int32), None)

  def _first_support(self, in_up):
    """The candidates i is drawn from: every row (None), whatever the data;
    an invalid row has the floor score 0 instead (the proof's step 3)."""
    del in_up
    return None

  def _second_support(self, in_low, seen):
    """The candidates j is drawn from: every row (None), as for i."""
    del in_low, seen
    return None
