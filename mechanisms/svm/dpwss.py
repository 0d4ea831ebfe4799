"""DPWSS: SMO training with working sets chosen by the exponential mechanism.

Two selections, one entry point (:func:`dpwss_train`, ``selection=``):

* ``"paper"`` — Algorithms 1–2 of *DPWSS: differentially private working
  set selection for training support vector machines* (PeerJ CS 7:e799,
  2021) on top of :mod:`mechanisms.svm.smo`, kept so the paper's results can be
  reproduced: i as in WSS4 (the largest violator of I_up), j drawn among
  the never-selected pairs whose score q ≥ σ by the exponential mechanism
  with Δq = 1 − σ (:class:`mechanisms.svm.wss.DPWSS`). **It carries no DP
  guarantee**, for the transcript or the model, and
  :func:`privacy_report` says so (``epsilon: None``, the record of
  :func:`dpcore.accounting.no_guarantee_record`); the paper's ε is
  reported as ``epsilon_nominal``. The per-selection claim is false, not
  merely unproven: the candidate set for j depends on the labels (at α = 0
  it is exactly the rows of one class, so a row can be selectable under D
  and never under a neighbour D′ — an unbounded privacy loss), and i is
  not randomised at all (the largest violator, ties to the last index), so
  it is the changed row itself whenever that row violates most.
  ``launch.experiments.dpwss_audits`` measures both: one selection reported
  by the
  paper at ε = 0.05 audits far above it.
* ``"private"`` — this library's variant (:class:`mechanisms.svm.wss.
  PrivateWSS`): i and j both drawn by the exponential mechanism over all l
  indices, scores clipped to [0, 1] (Δ = 1 for any state), exactly
  ``max_iter`` = T iterations. The transcript of 2T selections is
  (ε, δ)-DP for replace-one neighbours, composed by
  :class:`dpcore.accounting.PrivacyLedger` (proof in ``PrivateWSS``).

In both modes the trained model is NOT differentially private: α, the
gradient and w = Σ α_t y_t x_t are exact functions of the data given the
selections, and a kernel model stores raw rows as support vectors.
``model_is_private`` is always False here; a private release needs its own
mechanism, e.g. :func:`mechanisms.erm.output_perturbation.private_linear_svm`.
Repeats are one ``vmap`` over keys.

>>> import jax, numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.normal(size=(40, 2)); y = np.where(x[:, 0] > 0, 1, -1)
>>> run = dpwss_train(jax.random.key(1), x, y, epsilon=1.0, sigma=0.5,
...                   repeats=2)
>>> len(run.models), run.model_is_private
(2, False)
>>> privacy_report(1.0, 50)["epsilon"] is None  # the paper's: no guarantee
True
>>> private = dpwss_train(jax.random.key(2), x, y, epsilon=0.1, sigma=0.5,
...                       selection="private", max_iter=30)
>>> int(private.iterations[0]), private.pairs[0].shape
(30, (30, 2))
>>> round(privacy_report(0.1, 30, selection="private")["epsilon"], 2)
1.63
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import accounting, memory, options, validation
from mechanisms.svm import kernels, smo, smo_train, wss

DEFAULT_DELTA = 1e-5
SELECTIONS = options.DPWSS_SELECTIONS
RELATION = options.Relation.REPLACE_ONE
"""The neighbouring relation of the private selection (l public)."""

# Why the paper's selection gets no epsilon; carried in its privacy reports.
PAPER_NO_GUARANTEE = (
    "no DP guarantee: the candidate set for j depends on the labels (a row "
    "can be selectable under D and never under a neighbour D'), and i is "
    "the deterministic largest violator, so one selection's privacy loss is "
    "unbounded; epsilon_nominal is the paper's figure, not a guarantee")

# What the private selection's epsilon covers; carried in its reports.
PRIVATE_SCOPE = (
    "replace-one neighbours, l public: the transcript of 2T selected "
    "indices is (epsilon, delta)-DP (each selection an exponential "
    "mechanism with scores in [0, 1], composed adaptively). The trained "
    "SMO model (alpha, w) is NOT private; only an output-perturbation "
    "release is")


# Cap on the pair flags of all repeats of one call together (see
# :func:`resolve_pair_flags`); the per-run cap is ``wss.BITSET_MAX_BYTES``.
PAIR_FLAGS_TOTAL_BYTES = 4 << 30


PAIR_FLAG_MODES = options.PAIR_FLAG_MODES


def resolve_pair_flags(pair_flags: str, num: int, repeats: int) -> str:
  """``"auto"`` → ``"bits"`` when the flags of every repeat fit, else scan.

  The flags take l²/8 bytes per repeat and the repeats run together, so
  ``"auto"`` keeps them when ``repeats`` · l²/8 ≤ 4 GiB (and each run is
  within ``wss.BITSET_MAX_BYTES``): 5 repeats at l = 50,000 take 1.6 GB;
  64 repeats at l = 50,000 (20 GB) scan the pair record instead.
  """
  options.check_one_of(pair_flags, PAIR_FLAG_MODES, "pair_flags")
  if pair_flags != "auto":
    return pair_flags
  per_run = wss.bitset_bytes(num)
  fits = (per_run <= wss.BITSET_MAX_BYTES
          and repeats * per_run <= PAIR_FLAGS_TOTAL_BYTES)
  return "bits" if fits else "scan"


class RepeatsPlan(NamedTuple):
  """How a DPWSS call holds its repeats (:func:`plan_repeats`).

  Attributes:
    precompute: whether Q is cached (shared by every repeat).
    pair_flags: ``"bits"`` or ``"scan"`` (``wss.DPWSS.pair_flags``).
    chunk: repeats run together in one loop; None: all at once.
    estimate: the estimated peak bytes at that chunk.
  """
  precompute: bool
  pair_flags: str
  chunk: int | None
  estimate: int


def plan_repeats(num: int, dim: int, *, repeats: int, max_iter: int,
                 precompute: bool | None = None, pair_flags: str = "auto",
                 dtype: str = "float64", row_dtype: str = "float32",
                 memory_budget: int | None = None,
                 repeat_chunk: int | None = None,
                 fix: str = "memory_budget") -> RepeatsPlan:
  """Sizes a DPWSS call to a memory budget from shapes alone (no work).

  The estimate is ``smo_train.fixed_bytes`` (data, and Q when cached)
  plus ``smo_train.run_bytes`` (loop state, pair flags and record) per
  repeat held at once. In order: Q is cached where
  :func:`smo_train.resolve_precompute` says so *and* it fits with one
  repeat; ``"auto"`` pair flags become ``"scan"`` when one repeat with
  flags does not fit; then the repeats run in the largest chunk that
  fits (:func:`dpcore.memory.largest_chunk`), or in ``repeat_chunk`` when
  given (checked). Chunks give the same runs as all at once: repeat r
  draws from ``split(key, repeats)[r]`` either way.

  Args:
    num: rows of the training data.
    dim: features of the training data.
    repeats: independent runs of the call.
    max_iter: the pair record's length (the iteration cap).
    precompute: as :func:`dpwss_train` (None: automatic).
    pair_flags: as :func:`dpwss_train`.
    dtype: solver precision.
    row_dtype: kernel-row precision.
    memory_budget: bytes the call may use; None: unchecked (all repeats
      at once, the automatic choices of the unbudgeted policy).
    repeat_chunk: repeats per loop, forced (None: chosen).
    fix: the budget's name in messages (``--memory_budget`` for a CLI).

  Returns:
    A :class:`RepeatsPlan`.

  Raises:
    ValueError: bad arguments.
    dpcore.memory.MemoryBudgetError: one repeat (or ``repeat_chunk``
      repeats, or a forced cached Q) exceeds the budget.
  """
  repeats = validation.check_positive_int(repeats, "repeats")
  max_iter = validation.check_positive_int(max_iter, "max_iter")
  budget = smo_train.check_memory_budget(memory_budget)
  if repeat_chunk is not None:
    repeat_chunk = validation.check_positive_int(repeat_chunk,
                                                 "repeat_chunk")
  held = repeats if repeat_chunk is None else min(repeat_chunk, repeats)
  flags = resolve_pair_flags(pair_flags, num, held)
  record = -(-max_iter // wss.PAIR_CHUNK) * wss.PAIR_CHUNK

  def per_run(mode):
    return smo_train.run_bytes(num, dtype=dtype, pair_bits=mode == "bits",
                               record_rows=record)

  cache = smo_train.resolve_precompute_in_budget(
      precompute, num, dim, dtype=dtype, row_dtype=row_dtype,
      memory_budget=budget, repeats=repeats,
      run_extra=per_run("scan") - smo_train.run_bytes(num, dtype=dtype),
      fix=fix)
  fixed = smo_train.fixed_bytes(num, dim, dtype=dtype, row_dtype=row_dtype,
                                precompute=cache)
  if (pair_flags == "auto" and flags == "bits" and budget is not None
      and fixed + per_run("bits") > budget):
    flags = "scan"  # the record alone: the same runs in O(T) memory
  unit = per_run(flags)

  def estimate(chunk):
    return fixed + chunk * unit

  what = (f"DPWSS repeats on {num} x {dim} rows (pair "
          f"{'flags' if flags == 'bits' else 'record'}"
          f"{', cached Q' if cache else ''})")
  if repeat_chunk is None:
    chunk, need = memory.largest_chunk(
        repeats, estimate, budget=budget, what=what,
        fix=f"{fix}, repeats or max_iter")
    return RepeatsPlan(cache, flags, chunk, need)
  need = estimate(held)
  if budget is not None and need > budget:
    raise memory.MemoryBudgetError(
        f"{what} need an estimated {memory.gib(need)} with {held} at "
        f"once, above the memory budget of {memory.gib(budget)}; give a "
        f"smaller repeat_chunk or a larger {fix}.")
  return RepeatsPlan(cache, flags, None if held == repeats else held, need)


def pair_buffer_iterations(num: int) -> int:
  """DPWSS's default iteration cap, sized by its pair buffer (one 8-byte
  row per iteration): max(10⁴, 100·l). The solver's own cap (LIBSVM's
  max(10⁷, 100·l)) is :func:`mechanisms.svm.smo.default_max_iter`."""
  return max(10_000, 100 * num)


def selections_per_iteration(selection: str) -> int:
  """Exponential-mechanism draws per SMO iteration: 1 (paper) or 2."""
  return 2 if check_selection(selection) == "private" else 1


def check_selection(selection) -> str:
  if selection not in SELECTIONS:
    raise ValueError(f"selection must be 'paper' (the paper's DPWSS, no "
                     f"guarantee) or 'private' (both indices private), got "
                     f"{selection!r}.")
  return selection


@dataclasses.dataclass(frozen=True)
class DPWSSRun:
  """The repeats of one DPWSS setting.

  Attributes:
    models: one :class:`smo_train.SVMModel` per repeat.
    epsilon: ε of each exponential-mechanism draw (nominal for
      ``selection="paper"``).
    sigma: the constant factor σ.
    pairs: per repeat, the (iterations, 2) selected pairs (i, j) — the
      selection transcript.
    selection: ``"paper"`` or ``"private"``.
    model_is_private: always False (see the module docstring).
  """
  models: tuple[smo_train.SVMModel, ...]
  epsilon: float
  sigma: float
  pairs: tuple[np.ndarray, ...]
  selection: str = "paper"
  model_is_private: bool = False

  @property
  def iterations(self) -> np.ndarray:
    return np.asarray([m.iterations for m in self.models])

  def privacy_report(self, *, delta: float = DEFAULT_DELTA) -> dict:
    """:func:`privacy_report` of this run (largest iteration count)."""
    return privacy_report(self.epsilon, int(self.iterations.max()),
                          selection=self.selection, delta=delta)

  def selection_report(self, *, delta: float = DEFAULT_DELTA) -> dict:
    """:func:`selection_report` of this run (largest iteration count)."""
    return selection_report(self.epsilon, int(self.iterations.max()),
                            selection=self.selection, delta=delta)


def check_dpwss_parameters(epsilon, sigma) -> tuple[float, float]:
  epsilon = validation.check_epsilon(epsilon)
  sigma = validation.check_in_range(sigma, "sigma", 0.0, 1.0)
  return epsilon, sigma


def dpwss_train(key: jax.Array, x, y, *, epsilon: float, sigma: float,
                kernel: kernels.KernelSpec = smo_train.RBF, c: float = 1.0,
                eps: float = 1e-3, shrinking: bool = False,
                max_iter: int | None = None, repeats: int = 1,
                dtype: str = "float64", precompute: bool | None = None,
                row_dtype: str = "float32",
                ordered_pairs: bool = True,
                pair_flags: str = "auto",
                unroll: int | None = None,
                selection: str = "paper",
                repeat_chunk: int | None = None,
                memory_budget: int | None = None) -> DPWSSRun:
  """Trains ``repeats`` C-SVCs with DPWSS, vmapped over split keys.

  Args:
    key: PRNG key; split into one key per repeat, each folded with the
      iteration number for its selections.
    x: (l, d) training rows, finite.
    y: (l,) labels in {−1, +1}, both present.
    epsilon: ε of each exponential-mechanism draw (the paper's ε; one draw
      per iteration for ``"paper"``, two for ``"private"``).
    sigma: constant factor σ ∈ (0, 1) (paper: Δq = 1 − σ; private: scores
      below σ are floored, see :class:`wss.PrivateWSS`).
    kernel: kernel spec (γ defaults to 1/d).
    c: box constraint C > 0.
    eps: stopping tolerance (LIBSVM's ``-e``; unused by ``"private"``).
    shrinking: LIBSVM's shrinking heuristic (``"paper"`` only).
    max_iter: iteration cap, also the pair record's length (default
      max(10⁴, 100·l)). Required by ``"private"``, which runs exactly
      this many iterations (T).
    repeats: independent runs (the paper averages 5).
    dtype: solver precision (``float64`` enables x64 for this call only).
    precompute: cache Q's rows (default: ``smo_train.resolve_precompute``).
    row_dtype: kernel-row precision (LIBSVM's float32 cache).
    ordered_pairs: the paper's ordered flag I[i][j] (default) or
      unordered pairs.
    pair_flags: how used pairs are looked up (``wss.DPWSS.pair_flags``):
      ``"auto"`` (:func:`resolve_pair_flags`), ``"bits"`` (l²/8 bytes per
      repeat, O(l) per iteration) or ``"scan"`` (O(max_iter) memory,
      O(iteration) per iteration).
    unroll: iterations per loop trip (``smo_train.resolve_unroll``; speed
      only, same result).
    selection: ``"paper"`` (:class:`wss.DPWSS`, the paper's algorithm) or
      ``"private"`` (:class:`wss.PrivateWSS`).
    repeat_chunk: repeats run together in one loop (default: all, or the
      largest chunk ``memory_budget`` allows; :func:`plan_repeats`). The
      runs are the same whatever the chunk.
    memory_budget: bytes the call may use (e.g.
      ``dpcore.memory.default_budget()``); checked from shapes before any
      work. None (default): unchecked.

  Returns:
    A :class:`DPWSSRun`; exits are reported per model, never raised.

  Raises:
    ValueError: bad arguments, ``"private"`` without ``max_iter`` or with
      ``shrinking`` (checked before tracing).
    dpcore.memory.MemoryBudgetError: even one repeat (or
      ``repeat_chunk`` repeats) exceeds ``memory_budget``.

  Privacy: neighbouring datasets differ in one row (replace-one).
  ``"paper"``: none — neither the transcript nor the model is DP (see the
  module docstring); ``epsilon`` is the paper's nominal figure.
  ``"private"``: the transcript of 2·max_iter selections is ε-DP per
  selection given the past transcript, (ε, δ)-DP in total as
  :func:`privacy_report` composes it; the returned models are NOT
  differentially private in either mode.
  """
  validation.check_key(key)
  selection = check_selection(selection)
  epsilon, sigma = check_dpwss_parameters(epsilon, sigma)
  repeats = validation.check_positive_int(repeats, "repeats")
  options.check_one_of(pair_flags, PAIR_FLAG_MODES, "pair_flags")
  if selection == "private":
    if max_iter is None:
      raise ValueError(
          "selection='private' runs exactly max_iter iterations (its "
          "stopping rule may not read the data); pass max_iter=T.")
    if shrinking:
      raise ValueError(
          "selection='private' scores every row; shrinking=True has no "
          "meaning there. Pass shrinking=False.")
  x, y = smo_train.check_svm_inputs(x, y, c=c, eps=eps)
  num = x.shape[0]
  if max_iter is None:
    max_iter = pair_buffer_iterations(num)
  max_iter = validation.check_positive_int(max_iter, "max_iter")
  plan = plan_repeats(num, x.shape[1], repeats=repeats, max_iter=max_iter,
                      precompute=precompute, pair_flags=pair_flags,
                      dtype=dtype, row_dtype=row_dtype,
                      memory_budget=memory_budget, repeat_chunk=repeat_chunk)
  chunk = plan.chunk or repeats
  with jax.enable_x64(dtype == "float64"):
    x, y, spec, config, problem, max_iter = smo_train.solver_setup(
        x, y, kernel=kernel, c=c, eps=eps, max_iter=max_iter, dtype=dtype,
        precompute=plan.precompute, row_dtype=row_dtype,
        shrinking=shrinking, repeats=repeats, unroll=unroll)
    rule_class = wss.PrivateWSS if selection == "private" else wss.DPWSS
    rule = rule_class(buffer_rows=max_iter, ordered_pairs=ordered_pairs,
                      pair_flags=plan.pair_flags)
    params = smo.SolverParams(
        jnp.asarray(c, dtype), jnp.asarray(eps, dtype),
        jnp.asarray(max_iter, jnp.int32),
        wss.DPWSSParams(jnp.asarray(epsilon, dtype),
                        jnp.asarray(sigma, dtype)))
    keys = jax.random.split(key, repeats)
    results = [smo.to_numpy(smo.solve_repeats(
        keys[start:start + chunk], problem, params, config=config,
        rule=rule)) for start in range(0, repeats, chunk)]
  runs = [smo.SMOResult(*(v[r] for v in result))
          for result in results for r in range(len(result.iterations))]
  models = tuple(smo_train.model_from_result(spec, x, y, run)
                 for run in runs)
  pairs = tuple(run.pairs[:model.iterations]
                for run, model in zip(runs, models, strict=True))
  return DPWSSRun(models, epsilon, sigma, pairs, selection)


def check_iterations(iterations) -> int:
  """An iteration count: an integer ≥ 0 (e.g. ``run.iterations.max()``)."""
  if isinstance(iterations, (bool, np.bool_)) or not isinstance(
      iterations, (int, np.integer)) or iterations < 0:
    raise ValueError(
        f"iterations must be an integer ≥ 0 (the iterations run, e.g. "
        f"int(run.iterations.max())), got {iterations!r}.")
  return int(iterations)


def selection_ledger(epsilon: float, iterations: int,
                     ledger: accounting.PrivacyLedger | None = None, *,
                     selection: str = "private"
                     ) -> accounting.PrivacyLedger:
  """A ledger holding the exponential-mechanism draws of ``iterations``.

  Two draws per iteration for ``"private"``, one for ``"paper"`` (whose
  draws are not ε-DP: such a ledger states only what the paper's
  per-selection figure would compose to, see :func:`privacy_report`).
  """
  ledger = accounting.PrivacyLedger() if ledger is None else ledger
  count = check_iterations(iterations) * selections_per_iteration(
      selection)
  if count > 0:
    ledger.record_exponential(epsilon, count=count,
                              label="dpwss_selections", relation=RELATION)
  return ledger


PAPER_NOMINAL_NOTE = (
    "the paper's claimed epsilon for the whole run (its per-selection "
    "figure); not a guarantee")


def privacy_report(epsilon: float, iterations: int, *,
                   selection: str = "paper",
                   delta: float = DEFAULT_DELTA,
                   ledger: accounting.PrivacyLedger | None = None) -> dict:
  """The privacy record of a DPWSS run's selection transcript (+ ``ledger``).

  Args:
    epsilon: ε of each exponential-mechanism draw.
    iterations: iterations actually run (use the largest over repeats).
    selection: ``"paper"`` or ``"private"``.
    delta: δ of the composed (RDP/zCDP) guarantee.
    ledger: an existing ledger holding other releases of the same run
      (e.g. an output-perturbation release); the selections are added to
      it for ``"private"`` and it is left unchanged for ``"paper"``.

  Returns:
    A record with exactly the fields of
    :data:`dpcore.accounting.PRIVACY_FIELDS`.

    ``"paper"``: :func:`dpcore.accounting.no_guarantee_record` with the
    reason :data:`PAPER_NO_GUARANTEE`: ``epsilon`` and ``delta`` are None,
    ``epsilon_nominal`` is the paper's claim for the whole run (= ε), and
    the entries are those of ``ledger`` (a release in it does not make the
    transcript private).

    ``"private"``: ``ledger.report(delta)`` of the 2T selections and any
    other entries: the tightest composed guarantee.

    Mechanism-specific figures (draws, what the paper's claim would
    compose to) are in :func:`selection_report`.
  """
  selection = check_selection(selection)
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  check_iterations(iterations)
  if selection == "paper":
    return accounting.no_guarantee_record(
        PAPER_NO_GUARANTEE, nominal_epsilon=epsilon,
        nominal_note=PAPER_NOMINAL_NOTE,
        entries=() if ledger is None else ledger.entries)
  ledger = selection_ledger(epsilon, iterations, ledger,
                            selection="private")
  return ledger.report(delta)


def selection_report(epsilon: float, iterations: int, *,
                     selection: str = "paper",
                     delta: float = DEFAULT_DELTA) -> dict:
  """DPWSS-specific figures of a run, beside its :func:`privacy_report`.

  Returns:
    A JSON-ready dict: ``selection``, ``iterations``, ``selections``
    (draws made: T for ``"paper"``, 2T for ``"private"``),
    ``epsilon_per_selection``, ``scope`` and ``note``. For ``"paper"``
    also ``epsilon_nominal_basic`` (T·ε) and ``epsilon_nominal_composed``
    (zCDP/RDP at ``delta_nominal``): what composing the paper's
    per-selection claim would give, were it true — figures for comparison
    with the paper, which bound nothing. (None for ``"private"``, whose
    real composition is the privacy record's ``epsilon``.)
  """
  selection = check_selection(selection)
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  iterations = check_iterations(iterations)
  count = iterations * selections_per_iteration(selection)
  report = {"selection": selection, "iterations": iterations,
            "selections": count, "epsilon_per_selection": epsilon,
            "epsilon_nominal_basic": None, "epsilon_nominal_composed": None,
            "delta_nominal": None}
  if selection == "paper":
    composed = 0.0
    if count:
      composed = selection_ledger(epsilon, iterations,
                                  selection="paper").guarantee(delta).epsilon
    report.update(
        epsilon_nominal_basic=epsilon * count,
        epsilon_nominal_composed=composed, delta_nominal=delta,
        scope=PAPER_NO_GUARANTEE,
        note=("the paper's selection carries no DP guarantee; "
              "epsilon_nominal_basic/_composed compose the paper's "
              "per-selection claim, which is false. The SMO model is not "
              "DP."))
  else:
    report.update(
        scope=PRIVATE_SCOPE,
        note=("the privacy record composes the 2T selections (and any "
              "release in the ledger). The SMO model is not DP."))
  return report


def epsilon_per_selection(total_epsilon: float, *, selections: int,
                          delta: float = DEFAULT_DELTA,
                          tol: float = 1e-9) -> float:
  """Largest ε per draw whose ``selections`` draws fit ``total_epsilon``.

  Bisection on the composed guarantee (min of basic and zCDP/RDP) of
  ``selections`` exponential-mechanism draws at ``delta``: the total
  budget split evenly.
  """
  total_epsilon = validation.check_epsilon(total_epsilon, "total_epsilon")
  selections = validation.check_positive_int(selections, "selections")
  delta = validation.check_delta(delta)

  def spent(eps_each):
    ledger = accounting.PrivacyLedger(use_pld=False)
    ledger.record_exponential(eps_each, count=selections,
                              label="selections", relation=RELATION)
    return ledger.guarantee(delta).epsilon

  lo, hi = 0.0, total_epsilon  # k draws never cost less than one
  if spent(hi) <= total_epsilon:
    return hi
  while hi - lo > tol * hi:
    mid = 0.5 * (lo + hi)
    if spent(mid) <= total_epsilon:
      lo = mid
    else:
      hi = mid
  return lo


def epsilon_per_iteration(total_epsilon: float, *, max_iter: int,
                          delta: float = DEFAULT_DELTA,
                          selection: str = "paper",
                          tol: float = 1e-9) -> float:
  """ε per draw so that ``max_iter`` iterations fit ``total_epsilon``.

  ``max_iter`` draws for ``"paper"`` (a nominal split: the paper's draws
  are not ε-DP, so the total is nominal too), 2·``max_iter`` for
  ``"private"`` (a real budget, split evenly over both indices of every
  iteration). See :func:`epsilon_per_selection`.
  """
  max_iter = validation.check_positive_int(max_iter, "max_iter")
  return epsilon_per_selection(
      total_epsilon, selections=max_iter * selections_per_iteration(
          selection), delta=delta, tol=tol)
