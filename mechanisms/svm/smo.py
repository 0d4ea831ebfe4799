"""A C-SVC dual SMO solver as one ``lax.while_loop`` (LIBSVM's algorithm).

Solves min_α ½αᵀQα − eᵀα subject to 0 ≤ α ≤ C, yᵀα = 0, with
Q_st = y_s y_t K(x_s, x_t), by two-variable steps. Each iteration picks a
working set {i, j} with a rule from :mod:`mechanisms.svm.wss` (LIBSVM's WSS2, or
the paper's DPWSS), solves the two-variable problem analytically, clips it
to the box, and updates the gradient G = Qα − e with the two kernel rows
K(x_i, ·), K(x_j, ·) — computed on demand (a single run keeps the last
rows it used, :class:`RowCache`, and reads a row asked for again; sparse
rows are formed from their nonzero features, :class:`kernels.SparseRows`),
or read from a precomputed matrix when ``precompute`` says so. Nothing of
size l × l is needed.

Faithfulness to LIBSVM 3.x (``-s 0``):
* same selection (ties to the last index), same update and clipping order,
  τ = 1e-12, stopping when m − M < eps, bias b = −ρ with ρ the mean of
  y_t G_t over free α_t (midpoint of the bounds when none is free), and
  objective ½Σα_t(G_t − 1);
* LIBSVM stores kernel rows in single precision (``Qfloat``) while α, G and
  the diagonal are double: ``row_dtype='float32'`` (default) rounds rows the
  same way, which is what makes iteration counts identical;
* shrinking (``-h 1``): every min(l, 1000) iterations, bounded variables
  that cannot be part of a violating pair are made inactive; once the gap
  falls to 10·eps all rows are reactivated once; when the active set is
  optimal, all rows are reactivated and checked again. Here the inactive
  rows are a mask and G is kept exact for every row (rows are computed in
  full anyway), so LIBSVM's gradient reconstruction is not needed; the
  selection path is LIBSVM's up to tie-breaking among permuted indices.
  Shrinking thus changes the path, not the cost per iteration.

Precision: the solver state is float64 by default; the entry points
(:mod:`mechanisms.svm.smo_train`, :mod:`mechanisms.svm.dpwss`)
enable x64 only inside themselves (``jax.enable_x64``), leaving the rest
of the program's defaults alone. ``dtype='float32'`` is faster and
reaches the same optimum only to ~1e-4 relative in the objective (G is
accumulated over thousands of rank-2 updates in single precision); its
paths and iteration counts differ from LIBSVM's.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mechanisms.svm import kernels, wss

__all__ = [
    "EXIT_REASONS",
    "Problem",
    "ROW_CACHE_BYTES",
    "ROW_CACHE_SLOTS",
    "RowCache",
    "SMOResult",
    "SMOState",
    "SolverConfig",
    "SolverParams",
    "TAU",
    "bias_and_objective",
    "default_max_iter",
    "default_row_cache",
    "exit_reason",
    "make_problem",
    "row_cache_dtype",
    "shrink",
    "solve",
    "solve_repeats",
    "take_step",
    "to_numpy",
]

EXIT_REASONS = {
    wss.RUNNING: "running",
    wss.STATIONARY: "stationary",
    wss.NO_CANDIDATE: "no_candidate",
    wss.MAX_ITER: "max_iter",
}
TAU = 1e-12


class Problem(NamedTuple):
  """The training data as the solver sees it."""
  x: jax.Array           # (l, d)
  sq: jax.Array          # (l,) squared row norms
  y: jax.Array           # (l,) ±1, solver dtype
  qd: jax.Array          # (l,) K(x_t, x_t)
  kmat: jax.Array | None  # (l, l) precomputed rows, or None
  sparse: kernels.SparseRows | None = None  # rows by nonzero features


class SolverParams(NamedTuple):
  """Traced scalars (changing them does not recompile)."""
  c: jax.Array
  eps: jax.Array
  max_iter: jax.Array
  rule: wss.DPWSSParams | None


class RowCache(NamedTuple):
  """The last kernel rows of one run, kept in the loop carry.

  ``rows[s]`` is K(x_t, ·) for ``t = tags[s]``, stored exactly as
  :func:`_rows` returns it (already rounded through ``row_dtype``), so a
  cached row is bitwise the row a recomputation would give. A slot is
  written together with its tag, so ``tags[s] = t`` always means
  ``rows[s]`` holds row t.
  """
  rows: jax.Array  # (m, l) in the narrower of the solver and row dtypes
  tags: jax.Array  # (m,) int32 row index held by each slot, −1: empty
  used: jax.Array  # (m,) int32 last iteration that used the slot, −1: never


class SMOState(NamedTuple):
  """The ``while_loop`` carry."""
  alpha: jax.Array
  grad: jax.Array
  iteration: jax.Array   # updates done (LIBSVM's #iter)
  status: jax.Array      # wss.RUNNING until an exit
  active: jax.Array      # (l,) bool, shrinking's active set
  counter: jax.Array     # iterations to the next shrinking
  unshrunk: jax.Array    # the one-time reactivation at 10·eps happened
  memory: wss.PairMemory
  cache: RowCache        # recently used kernel rows; (0, l) when off


class SMOResult(NamedTuple):
  """What a run returns (batched over repeats under ``vmap``)."""
  alpha: jax.Array
  grad: jax.Array
  bias: jax.Array
  objective: jax.Array
  iterations: jax.Array
  exit_code: jax.Array
  pairs: jax.Array       # (max_iter', 2) selected (i, j); −1 unused (DPWSS)


@dataclasses.dataclass(frozen=True)
class SolverConfig:
  """Static solver settings (changing them recompiles).

  Attributes:
    kernel: a resolved :class:`kernels.KernelSpec`.
    shrinking: LIBSVM's ``-h 1`` heuristic.
    row_dtype: precision kernel rows are rounded to (LIBSVM: float32).
    unroll: SMO iterations per trip of the ``while_loop``. Results do not
      depend on it (a step of a run that has exited changes nothing), only
      speed does: on a GPU each trip ends with the loop condition read back
      by the host, which several iterations then share; a run may compute
      up to ``unroll − 1`` discarded steps after it exits.
    row_cache: kernel rows kept between iterations of a single run
      (:func:`solve`) when rows are computed on demand: ``None``
      (automatic) keeps :func:`default_row_cache` rows, an int m ≥ 0
      keeps min(m, l) (0: no cache). A row asked for again is read back
      instead of recomputed (least recently used rows are evicted); the
      stored rows are the computed ones, so results are bitwise the same
      with any m. Ignored with a precomputed Q and by
      :func:`solve_repeats` (under ``vmap`` the ``lax.cond`` that skips
      the computation would compute both branches).
  """
  kernel: kernels.KernelSpec
  shrinking: bool = False
  row_dtype: str = "float32"
  unroll: int = 1
  row_cache: int | None = None

  def __post_init__(self):
    if not (isinstance(self.unroll, int) and self.unroll >= 1):
      raise ValueError(f"unroll must be an int ≥ 1, got {self.unroll!r}.")
    if self.row_cache is not None and not (
        isinstance(self.row_cache, int) and not isinstance(
            self.row_cache, bool) and self.row_cache >= 0):
      raise ValueError(
          f"row_cache must be None (automatic) or an int ≥ 0 (rows; 0 "
          f"turns the cache off), got {self.row_cache!r}.")


def make_problem(spec: kernels.KernelSpec, x, y, *, dtype, precompute: bool,
                 row_dtype: str, sparse: bool = False) -> Problem:
  """Casts the data and builds the diagonal (and Q's rows if asked).

  With ``sparse`` (and no ``precompute``), kernel rows are computed from
  the rows' nonzero features (:class:`kernels.SparseRows`): faster on the
  CPU when most features are zero, a different summation order than the
  dense product (so paths can part in the last bits).
  """
  rows = kernels.sparse_rows(x, dtype) if sparse and not precompute else None
  x = jnp.asarray(x, dtype)
  y = jnp.asarray(y, dtype)
  kmat = None
  if precompute:  # kept in row_dtype (LIBSVM's cache precision)
    kmat = kernels.kernel_matrix(spec, x, x).astype(
        row_cache_dtype(dtype, row_dtype))
  sq = (kernels.squared_norms(x) if rows is None
        else kernels.sparse_squared_norms(rows))
  return Problem(x, sq, y, kernels.kernel_diagonal(spec, x, sq=sq), kmat,
                 rows)


def _rows(problem: Problem, config: SolverConfig, idx) -> jax.Array:
  """K(x_idx, ·) rows rounded like LIBSVM's cache, in the solver dtype."""
  if problem.kmat is not None:
    return jnp.take(problem.kmat, idx, axis=0).astype(problem.x.dtype)
  if problem.sparse is not None:
    k = jnp.stack([
        kernels.sparse_kernel_row(config.kernel, problem.sparse, problem.sq,
                                  idx[r]) for r in range(idx.shape[0])])
  else:
    k = kernels.kernel_rows(config.kernel, problem.x, problem.sq, idx)
  # Rounded through the narrower of the two: float64 rows of a float32
  # solver are its float32 values (and x64 may be off in that mode).
  narrow = row_cache_dtype(problem.x.dtype, config.row_dtype)
  return k.astype(narrow).astype(problem.x.dtype)


# The automatic row cache: at most this many rows and bytes. On the CPU
# a run's re-requests are mostly recent (WSS2 on 5,000 MNIST rows: 20.5 %
# of rows hit with 256 slots, 21.3 % with 1,024, 25.1 % with all 5,000),
# while the cache's buffer is written in full at the start of every call,
# which on 4,601 × 49 rows cost more than 1,024 slots saved.
ROW_CACHE_SLOTS = 1024
ROW_CACHE_BYTES = 1 << 26  # 64 MiB


def row_cache_dtype(dtype: str, row_dtype: str) -> str:
  """The narrower of the two: it holds :func:`_rows`'s values exactly."""
  return min(str(dtype), str(row_dtype), key=lambda d: np.dtype(d).itemsize)


def default_row_cache(num_examples: int, *, dtype: str,
                      row_dtype: str) -> int:
  """Rows of the automatic cache: min(l, ROW_CACHE_SLOTS, ROW_CACHE_BYTES).

  ``dtype`` and ``row_dtype`` are the solver's and the rows' precision
  (the cache holds rows in the narrower one).
  """
  row = num_examples * np.dtype(row_cache_dtype(dtype, row_dtype)).itemsize
  return min(num_examples, ROW_CACHE_SLOTS, ROW_CACHE_BYTES // max(row, 1))


def _cache_rows(problem: Problem, config: SolverConfig, axis_name) -> int:
  """Slots of the row cache of a run (static; 0: no cache)."""
  if problem.kmat is not None or axis_name is not None:
    return 0
  num = problem.y.shape[0]
  if config.row_cache is None:
    return default_row_cache(num, dtype=problem.x.dtype,
                             row_dtype=config.row_dtype)
  return min(config.row_cache, num)


def _empty_cache(slots: int, num: int, dtype) -> RowCache:
  return RowCache(jnp.zeros((slots, num), dtype),
                  jnp.full((slots,), -1, jnp.int32),
                  jnp.full((slots,), -1, jnp.int32))


def _cache_find(tags: jax.Array, idx) -> tuple[jax.Array, jax.Array]:
  """(whether row ``idx`` is cached, its slot; 0 when it is not)."""
  match = (tags == idx) & (idx >= 0)
  slot = jnp.max(jnp.where(match, jnp.arange(tags.shape[0],
                                             dtype=jnp.int32), 0))
  return jnp.any(match), slot


def _cached_row(cache: RowCache, compute, idx, dtype) -> jax.Array:
  """Row ``idx`` from ``cache`` on a hit, else ``compute(idx)``.

  A ``lax.cond``: on the CPU a hit really skips the computation.
  """
  hit, slot = _cache_find(cache.tags, idx)
  return lax.cond(hit, lambda: cache.rows[slot].astype(dtype),
                  lambda: compute(idx))


def _cache_insert(cache: RowCache, idx, row, stamp) -> RowCache:
  """Puts row ``idx`` in its slot, else in the least recently used one."""
  hit, slot = _cache_find(cache.tags, idx)
  oldest = jnp.min(cache.used)
  first_oldest = jnp.min(jnp.where(
      cache.used == oldest,
      jnp.arange(cache.used.shape[0], dtype=jnp.int32), cache.used.shape[0]))
  slot = jnp.where(hit, slot, first_oldest)
  return RowCache(cache.rows.at[slot].set(row.astype(cache.rows.dtype)),
                  cache.tags.at[slot].set(idx.astype(jnp.int32)),
                  cache.used.at[slot].set(stamp))


def take_step(alpha, grad, y, qd, c, i, j, row_i, row_j):
  """The analytic two-variable update, clipped to [0, C] (LIBSVM's order).

  Returns the new α and G. ``row_i``/``row_j`` are K(x_i, ·), K(x_j, ·).
  """
  ai, aj, gi, gj = alpha[i], alpha[j], grad[i], grad[j]
  quad = qd[i] + qd[j] - 2.0 * row_i[j]
  quad = jnp.where(quad > 0, quad, TAU)
  differ = y[i] != y[j]

  # y_i ≠ y_j: α_i − α_j is conserved.
  delta = (-gi - gj) / quad
  diff = ai - aj
  ni, nj = ai + delta, aj + delta
  lo_fix = jnp.where(diff > 0, nj < 0, ni < 0)
  ni, nj = (jnp.where(lo_fix, jnp.where(diff > 0, diff, 0.0), ni),
            jnp.where(lo_fix, jnp.where(diff > 0, 0.0, -diff), nj))
  # C_i = C_j = C, so LIBSVM's test diff > C_i − C_j is diff > 0.
  hi_fix = jnp.where(diff > 0, ni > c, nj > c)
  ni, nj = (jnp.where(hi_fix, jnp.where(diff > 0, c, c + diff), ni),
            jnp.where(hi_fix, jnp.where(diff > 0, c - diff, c), nj))
  d_ni, d_nj = ni, nj

  # y_i = y_j: α_i + α_j is conserved.
  delta = (gi - gj) / quad
  total = ai + aj
  ni, nj = ai - delta, aj + delta
  first = jnp.where(total > c, ni > c, nj < 0)
  ni, nj = (jnp.where(first, jnp.where(total > c, c, total), ni),
            jnp.where(first, jnp.where(total > c, total - c, 0.0), nj))
  second = jnp.where(total > c, nj > c, ni < 0)
  ni, nj = (jnp.where(second, jnp.where(total > c, total - c, 0.0), ni),
            jnp.where(second, jnp.where(total > c, c, total), nj))

  ni = jnp.where(differ, d_ni, ni)
  nj = jnp.where(differ, d_nj, nj)
  dai, daj = ni - ai, nj - aj
  q_i = (y[i] * y) * row_i
  q_j = (y[j] * y) * row_j
  grad = grad + (q_i * dai + q_j * daj)
  alpha = alpha.at[i].set(ni).at[j].set(nj)
  return alpha, grad


def shrink(alpha, grad, y, c, eps, active, unshrunk):
  """LIBSVM's shrinking test on the active mask (see module docstring)."""
  yg = y * grad
  in_up, in_low = wss.violation_sets(alpha, y, c, active)
  neg_inf = jnp.asarray(-jnp.inf, grad.dtype)
  gmax1 = jnp.max(jnp.where(in_up, -yg, neg_inf))
  gmax2 = jnp.max(jnp.where(in_low, yg, neg_inf))
  reopen = ~unshrunk & (gmax1 + gmax2 <= eps * 10)
  active = active | reopen
  all_up, _ = wss.violation_sets(alpha, y, c, jnp.ones_like(active))
  at_bound = (alpha >= c) | (alpha <= 0)
  drop = at_bound & jnp.where(all_up, yg > gmax2, -yg > gmax1)
  return active & ~drop, unshrunk | reopen


def bias_and_objective(alpha, grad, y, c):
  """LIBSVM's b = −ρ and the dual objective ½Σα_t(G_t − 1)."""
  yg = y * grad
  upper = alpha >= c
  lower = alpha <= 0
  free = ~upper & ~lower
  pos = y > 0
  ub_mask = (upper & ~pos) | (lower & pos)
  lb_mask = (upper & pos) | (lower & ~pos)
  ub = jnp.min(jnp.where(ub_mask, yg, jnp.inf))
  lb = jnp.max(jnp.where(lb_mask, yg, -jnp.inf))
  n_free = jnp.sum(free)
  rho = jnp.where(n_free > 0,
                  jnp.sum(jnp.where(free, yg, 0.0)) / jnp.maximum(n_free, 1),
                  (ub + lb) / 2)
  objective = jnp.sum(alpha * (grad - 1.0)) / 2
  return -rho, objective


_REPEATS = "repeats"


def _any(pred, axis_name):
  """``pred`` of this run, or whether it holds for any run of the batch."""
  if axis_name is None:
    return pred
  return lax.psum(pred.astype(jnp.int32), axis_name) > 0


def _where(pred, new, old):
  """``new`` where ``pred`` (a scalar of this run), else ``old`` (pytrees)."""
  return jax.tree.map(lambda a, b: jnp.where(pred, a, b), new, old)


def _loop(problem: Problem, params: SolverParams, config: SolverConfig,
          rule, axis_name=None):
  """(init, running, step, finish) of the SMO loop for one run.

  ``step(state, key)`` is a no-op for a run that has already exited, so a
  batch of runs can share one ``while_loop`` (see :func:`solve_repeats`).
  With ``axis_name`` (the step then runs under ``vmap`` with that axis
  name), the shrinking heuristic's two branches are taken when *any* run of
  the batch needs them and applied to the runs that do: a ``lax.cond`` on a
  per-run predicate would become a select that computes both branches,
  including a second selection, at every iteration of every run.
  """
  num = problem.y.shape[0]
  dtype = problem.x.dtype
  c = params.c.astype(dtype)
  eps = params.eps.astype(dtype)
  period = min(num, 1000)
  row_fn = functools.partial(_rows, problem, config)
  slots = _cache_rows(problem, config, axis_name)
  cache_dtype = row_cache_dtype(dtype, config.row_dtype)

  def one_row(idx):
    return row_fn(idx[None])[0]

  def fetch(cache, idx):
    if not slots:
      return one_row(idx)
    return _cached_row(cache, one_row, idx, dtype)

  def select(state, active, sub_key):
    return rule.select(
        alpha=state.alpha, grad=state.grad, y=problem.y, qd=problem.qd, c=c,
        eps=eps, tau=TAU, active=active,
        row_fn=lambda i: fetch(state.cache, i), memory=state.memory,
        key=sub_key, params=params.rule)

  def running(state: SMOState):
    return (state.status == wss.RUNNING) & (state.iteration < params.max_iter)

  def step(state: SMOState, key) -> SMOState:
    live = running(state)
    counter = state.counter - 1
    active, unshrunk = state.active, state.unshrunk
    if config.shrinking:
      due = counter == 0

      def do_shrink(a, u):
        return _where(due, shrink(state.alpha, state.grad, problem.y, c,
                                  eps, a, u), (a, u))

      active, unshrunk = lax.cond(_any(due, axis_name), do_shrink,
                                  lambda a, u: (a, u), active, unshrunk)
    counter = jnp.where(counter == 0, period, counter)
    key_a, key_b = jax.random.split(jax.random.fold_in(key, state.iteration))
    sel = select(state, active, key_a)
    if config.shrinking:
      # Optimal on the active set: reactivate everything and look again.
      retry = (sel.status != wss.RUNNING) & ~jnp.all(active)
      everything = jnp.ones_like(active)

      def again(_):
        new = select(state, everything, key_b)
        redo = (new, everything,
                jnp.where(new.status == wss.RUNNING, 1, counter))
        return _where(retry, redo, (sel, active, counter))

      sel, active, counter = lax.cond(
          _any(retry, axis_name), again, lambda _: (sel, active, counter),
          None)
    found = (sel.status == wss.RUNNING) & live
    cache = state.cache
    if slots:
      # Rows kept are exactly the rows computed, so whatever is evicted
      # the results are those of recomputation.
      row_i = fetch(cache, sel.i) if sel.row_i is None else sel.row_i
      stamp = state.iteration
      cache = _cache_insert(cache, sel.i, row_i, stamp)
      row_j = fetch(cache, sel.j)
      cache = _cache_insert(cache, sel.j, row_j, stamp)
    elif sel.row_i is None:
      rows = row_fn(jnp.stack([sel.i, sel.j]))
      row_i, row_j = rows[0], rows[1]
    else:
      row_i, row_j = sel.row_i, one_row(sel.j)
    alpha, grad = take_step(state.alpha, state.grad, problem.y, problem.qd,
                            c, sel.i, sel.j, row_i, row_j)
    keep = functools.partial(jnp.where, live)
    return SMOState(
        alpha=jnp.where(found, alpha, state.alpha),
        grad=jnp.where(found, grad, state.grad),
        iteration=state.iteration + found.astype(jnp.int32),
        status=keep(sel.status, state.status),
        active=keep(active, state.active),
        counter=keep(counter, state.counter),
        unshrunk=keep(unshrunk, state.unshrunk),
        memory=rule.remember(state.memory, sel.i, sel.j, found),
        cache=cache)

  def init() -> SMOState:
    return SMOState(
        alpha=jnp.zeros((num,), dtype), grad=-jnp.ones((num,), dtype),
        iteration=jnp.zeros((), jnp.int32),
        status=jnp.asarray(wss.RUNNING, jnp.int32),
        active=jnp.ones((num,), jnp.bool_),
        # LIBSVM counts down from min(l, 1000), decrementing before testing.
        counter=jnp.asarray(period, jnp.int32),
        unshrunk=jnp.zeros((), jnp.bool_),
        memory=rule.empty_memory(num),
        cache=_empty_cache(slots, num, cache_dtype))

  def finish(final: SMOState) -> SMOResult:
    status = jnp.where(final.status == wss.RUNNING, wss.MAX_ITER,
                       final.status)
    bias, objective = bias_and_objective(final.alpha, final.grad, problem.y,
                                         c)
    return SMOResult(final.alpha, final.grad, bias, objective,
                     final.iteration, status.astype(jnp.int32),
                     final.memory.pairs)

  return init, running, step, finish


@functools.partial(jax.jit, static_argnames=("config", "rule"))
def solve(key: jax.Array, problem: Problem, params: SolverParams, *,
          config: SolverConfig, rule) -> SMOResult:
  """Runs SMO with selection ``rule`` from α = 0 until an exit.

  A raw kernel: it validates nothing (inside ``jit`` shapes are the
  contract). The validated entry points are
  :func:`mechanisms.svm.smo_train.wss2_train` and
  :func:`mechanisms.svm.dpwss.release`, which check the data, labels
  and settings host-side and build ``problem`` and ``params``.

  Args:
    key: PRNG key (folded with the iteration; unused by WSS2).
    problem: from :func:`make_problem`.
    params: C, eps, max_iter and the rule's traced parameters.
    config: static settings.
    rule: :class:`wss.WSS2` or :class:`wss.DPWSS`.

  Returns:
    :class:`SMOResult`; ``exit_code`` is one of ``EXIT_REASONS``.
  """
  init, running, step, finish = _loop(problem, params, config, rule)
  final = lax.while_loop(
      running, _unrolled(lambda s: step(s, key), config.unroll), init())
  return finish(final)


@functools.partial(jax.jit, static_argnames=("config", "rule"))
def solve_repeats(keys: jax.Array, problem: Problem, params: SolverParams,
                  *, config: SolverConfig, rule) -> SMOResult:
  """Independent runs, one per key, in one loop (results batched).

  A raw kernel like :func:`solve`; validated by
  :func:`mechanisms.svm.dpwss.release`.

  Equivalent to ``jax.vmap(solve)`` over ``keys`` but cheaper: ``vmap`` of
  a ``while_loop`` selects between old and new values of the *whole* carry
  every iteration, which for DPWSS's pair memory (a max_iter × 2 record and
  l²/32 flag words per run) dominates the cost. Here the loop runs while
  any run is live, the step is ``vmap``-ed, and a run that has exited is
  left unchanged by its step.
  """
  init, running, step, finish = _loop(problem, params, config, rule,
                                      axis_name=_REPEATS)
  states = jax.vmap(lambda _: init())(keys)
  batch_step = lambda s: jax.vmap(step, axis_name=_REPEATS)(s, keys)  # noqa: E731
  final = lax.while_loop(lambda s: jnp.any(jax.vmap(running)(s)),
                         _unrolled(batch_step, config.unroll), states)
  return jax.vmap(finish)(final)


def _unrolled(step, times: int):
  """``step`` applied ``times`` times in a row (one loop trip)."""
  def body(state):
    for _ in range(times):
      state = step(state)
    return state
  return body


def default_max_iter(num_examples: int) -> int:
  """LIBSVM's cap: max(10⁷, 100·l)."""
  return max(10_000_000, 100 * num_examples)


def exit_reason(code) -> str:
  return EXIT_REASONS[int(code)]


_PAIRS_BUCKET = 4096


def to_numpy(result: SMOResult) -> SMOResult:
  """Host copy of a (possibly batched) result, pairs record trimmed.

  The pair record is allocated for ``max_iter`` rows (DPWSS's default:
  max(10⁴, 100·l)) but only the first ``iterations`` are used; it is sliced on
  the device to the longest run, rounded up to a multiple of 4,096 rows
  (few distinct shapes, so few compilations of the slice), before the
  transfer. Untrimmed, 64 DPWSS repeats on 4,601 rows moved 235 MB to the
  host per call, which on an H100 took longer than the solver itself.
  Rows past a run's ``iterations`` stay −1.
  """
  iterations = np.asarray(result.iterations)
  pairs = result.pairs
  rows = pairs.shape[-2]
  if rows:
    longest = int(iterations.max(initial=0))
    keep = min(rows, -(-max(longest, 1) // _PAIRS_BUCKET) * _PAIRS_BUCKET)
    if keep < rows:
      pairs = pairs[..., :keep, :]
  return SMOResult(*(np.asarray(v) for v in result._replace(
      pairs=pairs, iterations=iterations)))
