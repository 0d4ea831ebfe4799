"""DPWSS: SMO training with working sets chosen by the exponential mechanism.

Two selections, one mechanism shape: :func:`make_plan` (host side) fixes
the public facts of the selection transcript in a frozen
:class:`DPWSSPlan` (``selection=``), :meth:`DPWSSPlan.record` enters it
in a :class:`dpcore.accounting.PrivacyLedger`, and :func:`release` trains
with it (key first, plan second):

* ``"paper"`` — Algorithms 1–2 of *DPWSS: differentially private working
  set selection for training support vector machines* (PeerJ CS 7:e799,
  2021) on top of :mod:`mechanisms.svm.smo`, kept so the paper's results can be
  reproduced: i as in WSS4 (the largest violator of I_up), j drawn among
  the never-selected pairs whose score q ≥ σ by the exponential mechanism
  with Δq = 1 − σ (:class:`mechanisms.svm.wss.DPWSS`). **It carries no DP
  guarantee**, for the transcript or the model: its plan has ``epsilon``
  and ``delta`` None, refuses to be recorded, and :meth:`DPWSSPlan.report`
  gives the record of :func:`dpcore.accounting.no_guarantee_record`; the
  paper's ε is reported as ``epsilon_nominal``. The per-selection claim is
  false, not merely unproven: the candidate set for j depends on the
  labels (at α = 0 it is exactly the rows of one class, so a row can be
  selectable under D and never under a neighbour D′ — an unbounded privacy
  loss), and i is not randomised at all (the largest violator, ties to the
  last index), so it is the changed row itself whenever that row violates
  most. ``mechanisms.svm.dpwss_audit`` measures both: one selection
  reported by the paper at ε = 0.05 audits far above it.
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
mechanism, e.g. :mod:`mechanisms.erm.output_perturbation`. Repeats are one
``vmap`` over keys; each repeat is its own transcript (the plan accounts
one).

>>> import jax, numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.normal(size=(40, 2)); y = np.where(x[:, 0] > 0, 1, -1)
>>> plan = make_plan(selection_epsilon=1.0, sigma=0.5)
>>> run = release(jax.random.key(1), plan, x, y, repeats=2)
>>> len(run.models), run.model_is_private
(2, False)
>>> plan.epsilon is None, plan.report()["epsilon_nominal"]  # no guarantee
(True, 1.0)
>>> private_plan = make_plan(selection_epsilon=0.1, sigma=0.5,
...                          selection="private", max_iter=30)
>>> private = release(jax.random.key(2), private_plan, x, y)
>>> int(private.iterations[0]), private.pairs[0].shape
(30, (30, 2))
>>> round(private_plan.epsilon, 2), private_plan.delta
(1.63, 1e-05)
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import accounting, calibration, memory, options, validation
from mechanisms.svm import kernels, smo, smo_train, wss

DEFAULT_DELTA = 1e-5
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




def resolve_pair_flags(pair_flags, num_examples: int,
                       repeats: int) -> options.PairFlags:
  """``AUTO`` → ``BITS`` when the flags of every repeat fit, else ``SCAN``.

  The flags take l²/8 bytes per repeat and the repeats run together, so
  ``"auto"`` keeps them when ``repeats`` · l²/8 ≤ 4 GiB (and each run is
  within ``wss.BITSET_MAX_BYTES``): 5 repeats at l = 50,000 take 1.6 GB;
  64 repeats at l = 50,000 (20 GB) scan the pair record instead.
  """
  pair_flags = options.parse(options.PairFlags, pair_flags, "pair_flags")
  if pair_flags is not options.PairFlags.AUTO:
    return pair_flags
  per_run = wss.bitset_bytes(num_examples)
  fits = (per_run <= wss.BITSET_MAX_BYTES
          and repeats * per_run <= PAIR_FLAGS_TOTAL_BYTES)
  return options.PairFlags.BITS if fits else options.PairFlags.SCAN


class RepeatsLayout(NamedTuple):
  """How a DPWSS call holds its repeats in memory (:func:`plan_repeats`).

  A memory layout, not a privacy plan: the privacy facts are in
  :class:`DPWSSPlan`.

  Attributes:
    precompute: whether Q is cached (shared by every repeat).
    pair_flags: ``BITS`` or ``SCAN`` (``wss.DPWSS.pair_flags``).
    chunk: repeats run together in one loop; None: all at once.
    estimate: the estimated peak bytes at that chunk.
  """
  precompute: bool
  pair_flags: options.PairFlags
  chunk: int | None
  estimate: int


def plan_repeats(num_examples: int, dim: int, *, repeats: int, max_iter: int,
                 precompute: bool | None = None,
                 pair_flags: options.PairFlags = options.PairFlags.AUTO,
                 dtype: str = "float64", row_dtype: str = "float32",
                 memory_budget: int | None = None,
                 repeat_chunk: int | None = None) -> RepeatsLayout:
  """Sizes a DPWSS call to a memory budget from shapes alone (no work).

  The estimate is ``smo_train.fixed_bytes`` (data, and Q when cached)
  plus ``smo_train.run_bytes`` (loop state, pair flags and record) per
  repeat held at once. In order: Q is cached where
  :func:`smo_train.resolve_precompute` says so *and* it fits with one
  repeat; ``AUTO`` pair flags become ``SCAN`` when one repeat with
  flags does not fit; then the repeats run in the largest chunk that
  fits (:func:`dpcore.memory.largest_chunk`), or in ``repeat_chunk`` when
  given (checked). Chunks give the same runs as all at once: repeat r
  draws from ``split(key, repeats)[r]`` either way.

  Args:
    num_examples: rows of the training data.
    dim: features of the training data.
    repeats: independent runs of the call.
    max_iter: the pair record's length (the iteration cap).
    precompute: as :func:`release` (None: automatic).
    pair_flags: as :func:`release`.
    dtype: solver precision.
    row_dtype: kernel-row precision.
    memory_budget: bytes the call may use; None: unchecked (all repeats
      at once, the automatic choices of the unbudgeted policy).
    repeat_chunk: repeats per loop, forced (None: chosen).

  Returns:
    A :class:`RepeatsLayout`.

  Raises:
    ValueError: bad arguments.
    dpcore.memory.MemoryBudgetError: one repeat (or ``repeat_chunk``
      repeats, or a forced cached Q) exceeds the budget.
  """
  repeats = validation.check_count(repeats, "repeats")
  max_iter = validation.check_count(max_iter, "max_iter")
  budget = memory.resolve_budget(memory_budget)
  if repeat_chunk is not None:
    repeat_chunk = validation.check_positive_int(repeat_chunk,
                                                 "repeat_chunk")
  held = repeats if repeat_chunk is None else min(repeat_chunk, repeats)
  flags = resolve_pair_flags(pair_flags, num_examples, held)
  record = -(-max_iter // wss.PAIR_CHUNK) * wss.PAIR_CHUNK

  bits, scan = options.PairFlags.BITS, options.PairFlags.SCAN

  def per_run(mode):
    return smo_train.run_bytes(num_examples, dtype=dtype,
                               pair_bits=mode is bits, record_rows=record)

  cache = smo_train.resolve_precompute_in_budget(
      precompute, num_examples, dim, dtype=dtype, row_dtype=row_dtype,
      memory_budget=budget, repeats=repeats,
      run_extra=per_run(scan) - smo_train.run_bytes(num_examples,
                                                    dtype=dtype))
  fixed = smo_train.fixed_bytes(num_examples, dim, dtype=dtype,
                                row_dtype=row_dtype, precompute=cache)
  if (pair_flags == options.PairFlags.AUTO and flags is bits
      and budget is not None and fixed + per_run(bits) > budget):
    flags = scan  # the record alone: the same runs in O(T) memory
  unit = per_run(flags)

  def estimate(chunk):
    return fixed + chunk * unit

  what = (f"DPWSS repeats on {num_examples} x {dim} rows (pair "
          f"{'flags' if flags == 'bits' else 'record'}"
          f"{', cached Q' if cache else ''})")
  if repeat_chunk is None:
    chunk, need = memory.largest_chunk(
        repeats, estimate, budget=budget, what=what,
        fix="memory_budget, repeats or max_iter")
    return RepeatsLayout(cache, flags, chunk, need)
  need = estimate(held)
  if budget is not None and need > budget:
    raise memory.MemoryBudgetError(
        f"{what} need an estimated {memory.size_text(need)} with {held} at "
        f"once, above the memory budget of {memory.size_text(budget)}; give a "
        f"smaller repeat_chunk or a larger memory_budget.")
  return RepeatsLayout(cache, flags, None if held == repeats else held, need)


def pair_buffer_iterations(num_examples: int) -> int:
  """DPWSS's default iteration cap, sized by its pair buffer (one 8-byte
  row per iteration): max(10⁴, 100·l). The solver's own cap (LIBSVM's
  max(10⁷, 100·l)) is :func:`mechanisms.svm.smo.default_max_iter`."""
  return max(10_000, 100 * num_examples)


def selections_per_iteration(selection) -> int:
  """Exponential-mechanism draws per SMO iteration: 1 (paper) or 2."""
  selection = options.parse(options.Selection, selection, "selection")
  return 2 if selection is options.Selection.PRIVATE else 1


def check_selection(selection) -> options.Selection:
  """``options.parse(options.Selection, selection, "selection")``.

  Kept for the audit specs that call it; new code calls
  :func:`dpcore.options.parse`, the one check.
  """
  return options.parse(options.Selection, selection, "selection")


def check_iterations(iterations) -> int:
  """An iteration count: an integer ≥ 0 (e.g. ``run.iterations.max()``)."""
  if isinstance(iterations, (bool, np.bool_)) or not isinstance(
      iterations, (int, np.integer)) or iterations < 0:
    raise ValueError(
        f"iterations must be an integer ≥ 0 (the iterations run, e.g. "
        f"int(run.iterations.max())), got {iterations!r}.")
  return int(iterations)


def _composed_epsilon(epsilon: float, count: int, delta: float, *,
                      use_pld: bool = True) -> float:
  """ε at ``delta`` of ``count`` ε-DP exponential-mechanism draws."""
  ledger = accounting.PrivacyLedger(use_pld=use_pld)
  ledger.record_exponential(epsilon, count=count, label="dpwss_selections",
                            relation=RELATION)
  return ledger.guarantee(delta).epsilon


PAPER_NOMINAL_NOTE = (
    "the paper's claimed epsilon for the whole run (its per-selection "
    "figure); not a guarantee")


@dataclasses.dataclass(frozen=True)
class DPWSSPlan:
  """The public facts of one DPWSS selection transcript (:func:`make_plan`).

  Attributes:
    epsilon: ``"private"``: ε of the transcript's guarantee at ``delta``,
      the ledger's composition of its 2T draws
      (:func:`dpcore.accounting.plan_epsilon`). ``"paper"``: None (no
      guarantee).
    target_epsilon: the total budget :func:`make_plan` split over the
      draws (its ``epsilon=``; ``epsilon`` is at most this); None when ε
      per draw was given directly. For ``"paper"`` a nominal total.
    delta: δ of that guarantee; None for ``"paper"``.
    relation: :attr:`dpcore.options.Relation.REPLACE_ONE` (l public), the
      relation of the private selection's proof and of the paper's claim.
    selection: ``"paper"`` or ``"private"``.
    selection_epsilon: ε of each exponential-mechanism draw (the paper's
      ε; for ``"paper"`` a nominal figure, not a guarantee).
    sigma: the constant factor σ ∈ (0, 1).
    sensitivity: Δ of the scores each draw is calibrated for: 1 for
      ``"private"`` (scores clipped to [0, 1] in every state); the paper's
      Δq = 1 − σ for ``"paper"`` (its claim, which does not hold).
    max_iter: T. ``"private"`` runs exactly T iterations (2T draws);
      ``"paper"`` stops at T at the latest (None: max(10⁴, 100·l), set at
      the release from the data's l, see :func:`pair_buffer_iterations`).
    epsilon_nominal: ``"paper"``: the paper's figure for the run (its
      per-selection ε); None for ``"private"``.
    delta_nominal: ``"paper"``: δ at which :meth:`selection_report`
      composes the paper's per-selection claim; None for ``"private"``.
  """
  epsilon: float | None
  target_epsilon: float | None
  delta: float | None
  relation: options.Relation
  selection: options.Selection
  selection_epsilon: float
  sigma: float
  sensitivity: float
  max_iter: int | None
  epsilon_nominal: float | None = None
  delta_nominal: float | None = None

  @property
  def selections_per_iteration(self) -> int:
    """Exponential-mechanism draws per iteration: 1 (paper) or 2."""
    return selections_per_iteration(self.selection)

  def record(self, ledger: accounting.PrivacyLedger, *,
             label: str = "dpwss_selections") -> None:
    """Records the transcript's 2T draws (``"private"``) in ``ledger``.

    One entry: 2·``max_iter`` ε-DP exponential-mechanism selections
    (each also ε²/8-zCDP), replace-one.

    Raises:
      ValueError: a ``"paper"`` plan, which has no guarantee to record.
    """
    if self.selection is not options.Selection.PRIVATE:
      raise ValueError(
          "the paper's DPWSS selection has no DP guarantee to record; report "
          "accounting.no_guarantee_record(dpwss.PAPER_NO_GUARANTEE, ...) "
          "instead (plan.report() does), or use selection='private'.")
    ledger.record_exponential(
        self.selection_epsilon, count=self.max_iter * 2, label=label,
        relation=self.relation)

  def report(self, ledger: accounting.PrivacyLedger | None = None
             ) -> dict:
    """The privacy record of one transcript (and of ``ledger``'s entries).

    Args:
      ledger: an existing ledger holding other releases of the same run
        (e.g. an output-perturbation release). ``"private"``: the
        selections are recorded into it (:meth:`record`); ``"paper"``: it
        is left unchanged.

    Returns:
      A record with exactly the fields of
      :data:`dpcore.accounting.PRIVACY_FIELDS`. ``"paper"``:
      :func:`dpcore.accounting.no_guarantee_record` with the reason
      :data:`PAPER_NO_GUARANTEE`: ``epsilon`` and ``delta`` None,
      ``epsilon_nominal`` the paper's claim for the whole run, the
      entries those of ``ledger`` (a release in it does not make the
      transcript private). ``"private"``: ``ledger.report(delta)`` of the
      2T selections and any other entries. DPWSS-specific figures are in
      :meth:`selection_report`.
    """
    if self.selection is options.Selection.PAPER:
      return accounting.no_guarantee_record(
          PAPER_NO_GUARANTEE, nominal_epsilon=self.epsilon_nominal,
          nominal_note=PAPER_NOMINAL_NOTE,
          entries=() if ledger is None else ledger.entries)
    ledger = accounting.PrivacyLedger() if ledger is None else ledger
    self.record(ledger)
    return ledger.report(self.delta)

  def selection_report(self, iterations: int) -> dict:
    """DPWSS-specific figures of a run, beside its :meth:`report`.

    Args:
      iterations: iterations actually run (the largest over repeats).

    Returns:
      A JSON-ready dict: ``selection``, ``iterations``, ``selections``
      (draws made: T for ``"paper"``, 2T for ``"private"``),
      ``epsilon_per_selection``, ``scope`` and ``note``. For ``"paper"``
      also ``epsilon_nominal_basic`` (T·ε) and
      ``epsilon_nominal_composed`` (zCDP/RDP at ``delta_nominal``): what
      composing the paper's per-selection claim would give, were it true
      — figures for comparison with the paper, which bound nothing. (None
      for ``"private"``, whose real composition is the privacy record's
      ``epsilon``.)
    """
    iterations = check_iterations(iterations)
    count = iterations * self.selections_per_iteration
    report = {"selection": self.selection, "iterations": iterations,
              "selections": count,
              "epsilon_per_selection": self.selection_epsilon,
              "epsilon_nominal_basic": None,
              "epsilon_nominal_composed": None, "delta_nominal": None}
    if self.selection is options.Selection.PAPER:
      composed = 0.0
      if count:
        composed = _composed_epsilon(self.selection_epsilon, count,
                                     self.delta_nominal)
      report.update(
          epsilon_nominal_basic=self.selection_epsilon * count,
          epsilon_nominal_composed=composed,
          delta_nominal=self.delta_nominal, scope=PAPER_NO_GUARANTEE,
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


def check_settings(*, sigma: float, selection_epsilon: float | None = None,
                   epsilon: float | None = None,
                   delta: float = DEFAULT_DELTA,
                   selection: options.Selection = options.Selection.PAPER,
                   max_iter: int | None = None) -> None:
  """Checks :func:`make_plan`'s settings (host side, before any data).

  :func:`make_plan` runs it; a caller (a script whose flags carry these
  names) may run it first, before any data is read.

  Args:
    sigma, selection_epsilon, epsilon, delta, selection, max_iter: as
      :func:`make_plan`.

  Raises:
    ValueError: one line naming the setting and the fix.
  """
  selection = options.parse(options.Selection, selection, "selection")
  if (selection_epsilon is None) == (epsilon is None):
    raise ValueError(
        "give exactly one of selection_epsilon (ε of each draw) and epsilon "
        "(a total target split over the draws of max_iter iterations).")
  validation.check_in_range(sigma, "sigma", 0.0, 1.0)
  validation.check_delta(delta, "delta")
  if max_iter is not None:
    validation.check_count(max_iter, "max_iter")
  if selection is options.Selection.PRIVATE and max_iter is None:
    raise ValueError(
        "selection='private' runs exactly max_iter iterations (its stopping "
        "rule may not read the data); pass max_iter=T.")
  if epsilon is not None:
    if max_iter is None:
      raise ValueError(
          "a total epsilon is split over the draws of max_iter iterations; "
          "pass max_iter=T, or give selection_epsilon (ε per draw).")
    validation.check_epsilon(epsilon, "epsilon")
  else:
    validation.check_epsilon(selection_epsilon, "selection_epsilon")


def make_plan(*, sigma: float, selection_epsilon: float | None = None,
              epsilon: float | None = None, delta: float = DEFAULT_DELTA,
              selection: options.Selection = options.Selection.PAPER,
              max_iter: int | None = None,
              relation: options.Relation | str = RELATION) -> DPWSSPlan:
  """Checks a DPWSS setting and fixes its transcript's public facts.

  Host side, before any data is read. ε per draw is given directly
  (``selection_epsilon``) or derived from a total target (``epsilon``,
  with ``max_iter``): split evenly over the draws of ``max_iter``
  iterations by :func:`epsilon_per_iteration` — a real budget for
  ``"private"`` (2 draws per iteration), a nominal split for ``"paper"``
  (1 draw per iteration, none of them DP).

  Args:
    sigma: constant factor σ ∈ (0, 1) (paper: Δq = 1 − σ; private: scores
      below σ of the best are floored, see :class:`wss.PrivateWSS`).
    selection_epsilon: ε of each exponential-mechanism draw (the paper's
      ε); or
    epsilon: the total target ε at ``delta`` (exactly one of the two).
    delta: δ of the composed guarantee (``"private"``), or at which the
      paper's claim is composed for comparison (``"paper"``).
    selection: a :class:`dpcore.options.Selection` (or its spelling):
      ``"paper"`` (:class:`wss.DPWSS`, the paper's algorithm) or
      ``"private"`` (:class:`wss.PrivateWSS`).
    max_iter: T, the iteration cap and the pair record's length. Required
      by ``"private"``, which runs exactly T iterations; None for
      ``"paper"``: max(10⁴, 100·l) at the release.
    relation: replace-one, the only relation the selections' privacy is
      stated for (the old spelling ``"replace"`` is mapped).

  Returns:
    A :class:`DPWSSPlan`: for ``"private"``, ``epsilon`` is the ledger's
    composition of the 2T draws at ``delta`` (≤ a total target given,
    kept as ``target_epsilon``);
    for ``"paper"``, ``epsilon`` and ``delta`` are None and the paper's
    per-selection figure is ``epsilon_nominal``.

  Raises:
    ValueError: a bad value, both or neither of ``selection_epsilon`` and
      ``epsilon``, a total ``epsilon`` or ``"private"`` without
      ``max_iter``, or another relation.

  Privacy: neighbouring data sets differ in one row (replace-one, l
  public). ``"paper"``: none — neither the transcript nor the model is DP
  (see the module docstring). ``"private"``: each of the 2T draws is ε-DP
  (Δ = 1) given the past transcript; the transcript is (``epsilon``,
  ``delta``)-DP as the ledger composes it. The models :func:`release`
  returns are NOT differentially private in either mode.
  """
  selection = options.parse(options.Selection, selection, "selection")
  relation = options.parse_relation(relation, "relation")
  if relation is not RELATION:
    raise ValueError(
        f"relation={relation.value}: DPWSS's selections are stated for "
        f"replace-one neighbours only (the l indices are the candidate "
        f"set, so l is public); pass relation='{RELATION.value}'.")
  check_settings(sigma=sigma, selection_epsilon=selection_epsilon,
                 epsilon=epsilon, delta=delta, selection=selection,
                 max_iter=max_iter)
  sigma, delta = float(sigma), float(delta)
  if max_iter is not None:
    max_iter = int(max_iter)
  if epsilon is not None:
    epsilon = float(epsilon)
    selection_epsilon = epsilon_per_iteration(
        epsilon, max_iter=max_iter, delta=delta, selection=selection)
  selection_epsilon = validation.check_epsilon(selection_epsilon,
                                               "selection_epsilon")
  if selection is options.Selection.PAPER:
    return DPWSSPlan(None, epsilon, None, relation, selection,
                     selection_epsilon, sigma, 1.0 - sigma, max_iter,
                     epsilon_nominal=selection_epsilon, delta_nominal=delta)
  plan = DPWSSPlan(None, epsilon, delta, relation, selection,
                   selection_epsilon, sigma, 1.0, max_iter)
  return dataclasses.replace(plan, epsilon=accounting.plan_epsilon(plan))


@dataclasses.dataclass(frozen=True)
class DPWSSRun:
  """The repeats of one DPWSS setting (:func:`release`).

  Attributes:
    models: one :class:`smo_train.SVMModel` per repeat.
    pairs: per repeat, the (iterations, 2) selected pairs (i, j) — the
      selection transcript.
    plan: the :class:`DPWSSPlan` the repeats ran (each repeat is one
      transcript of it).
    model_is_private: always False (see the module docstring).
  """
  models: tuple[smo_train.SVMModel, ...]
  pairs: tuple[np.ndarray, ...]
  plan: DPWSSPlan
  model_is_private: bool = False

  @property
  def iterations(self) -> np.ndarray:
    return np.asarray([m.iterations for m in self.models])

  @property
  def selection(self) -> str:
    return self.plan.selection

  def selection_report(self) -> dict:
    """:meth:`DPWSSPlan.selection_report` at the largest iteration count."""
    return self.plan.selection_report(int(self.iterations.max()))


def release(key: jax.Array, plan: DPWSSPlan, x, y, *,
            kernel: kernels.KernelSpec = smo_train.RBF, c: float = 1.0,
            eps: float = 1e-3, shrinking: bool = False, repeats: int = 1,
            dtype: str = "float64", precompute: bool | None = None,
            row_dtype: str = "float32", ordered_pairs: bool = True,
            pair_flags: options.PairFlags = options.PairFlags.AUTO,
            unroll: int | None = None, repeat_chunk: int | None = None,
            memory_budget: int | str | None = None) -> DPWSSRun:
  """Trains ``repeats`` C-SVCs with DPWSS, vmapped over split keys.

  Host side (the solver's loop is jitted; the repeats run in chunks sized
  from the shapes).

  Args:
    key: PRNG key; split into one key per repeat, each folded with the
      iteration number for its selections.
    plan: from :func:`make_plan` (selection, ε per draw, σ, T).
    x: (l, d) training rows, finite.
    y: (l,) labels in {−1, +1}, both present.
    kernel: kernel spec (γ defaults to 1/d).
    c: box constraint C > 0.
    eps: stopping tolerance (LIBSVM's ``-e``; unused by ``"private"``).
    shrinking: LIBSVM's shrinking heuristic (``"paper"`` only).
    repeats: independent runs (the paper averages 5).
    dtype: solver precision (``float64`` enables x64 for this call only).
    precompute: cache Q's rows (default: ``smo_train.resolve_precompute``).
    row_dtype: kernel-row precision (LIBSVM's float32 cache).
    ordered_pairs: the paper's ordered flag ``I[i][j]`` (default) or
      unordered pairs.
    pair_flags: how used pairs are looked up (a
      :class:`dpcore.options.PairFlags`, ``wss.DPWSS.pair_flags``):
      ``"auto"`` (:func:`resolve_pair_flags`), ``"bits"`` (l²/8 bytes per
      repeat, O(l) per iteration) or ``"scan"`` (O(max_iter) memory,
      O(iteration) per iteration).
    unroll: iterations per loop trip (``smo_train.resolve_unroll``; speed
      only, same result).
    repeat_chunk: repeats run together in one loop (default: all, or the
      largest chunk ``memory_budget`` allows; :func:`plan_repeats`). The
      runs are the same whatever the chunk.
    memory_budget: bytes the call may use, checked from shapes before
      any work; "auto": 3/4 of the memory available now
      (:func:`dpcore.memory.resolve_budget`); None (default): no limit.

  Returns:
    A :class:`DPWSSRun`; exits are reported per model, never raised.

  Raises:
    ValueError: bad arguments, a plan not from :func:`make_plan`, or
      ``shrinking`` with a ``"private"`` plan (checked before tracing).
    dpcore.memory.MemoryBudgetError: even one repeat (or
      ``repeat_chunk`` repeats) exceeds ``memory_budget``.

  Privacy: as the plan states (:func:`make_plan`). ``"paper"``: none.
  ``"private"``: each repeat's transcript of 2T selections is the
  replace-one (``plan.epsilon``, ``plan.delta``)-DP release that
  :meth:`DPWSSPlan.record` accounts (one record per repeat published).
  The returned models are NOT differentially private in either mode.
  """
  validation.check_key(key)
  if not isinstance(plan, DPWSSPlan):
    raise ValueError(f"plan must come from dpwss.make_plan, got "
                     f"{type(plan).__name__}.")
  repeats = validation.check_count(repeats, "repeats")
  options.parse(options.PairFlags, pair_flags, "pair_flags")
  if plan.selection is options.Selection.PRIVATE and shrinking:
    raise ValueError(
        "selection='private' scores every row; shrinking=True has no "
        "meaning there. Pass shrinking=False.")
  x, y = smo_train.check_svm_inputs(x, y, c=c, eps=eps)
  num_examples = x.shape[0]
  max_iter = plan.max_iter
  if max_iter is None:
    max_iter = pair_buffer_iterations(num_examples)
  max_iter = validation.check_count(max_iter, "max_iter")
  layout = plan_repeats(num_examples, x.shape[1], repeats=repeats,
                        max_iter=max_iter, precompute=precompute,
                        pair_flags=pair_flags, dtype=dtype,
                        row_dtype=row_dtype,
                        memory_budget=memory.resolve_budget(memory_budget),
                        repeat_chunk=repeat_chunk)
  chunk = layout.chunk or repeats
  with jax.enable_x64(dtype == "float64"):
    x, y, spec, config, problem, max_iter = smo_train.solver_setup(
        x, y, kernel=kernel, c=c, eps=eps, max_iter=max_iter, dtype=dtype,
        precompute=layout.precompute, row_dtype=row_dtype,
        shrinking=shrinking, repeats=repeats, unroll=unroll)
    rule_class = (wss.PrivateWSS if plan.selection is options.Selection.PRIVATE
                  else wss.DPWSS)
    rule = rule_class(buffer_rows=max_iter, ordered_pairs=ordered_pairs,
                      pair_flags=layout.pair_flags)
    params = smo.SolverParams(
        jnp.asarray(c, dtype), jnp.asarray(eps, dtype),
        jnp.asarray(max_iter, jnp.int32),
        wss.DPWSSParams(jnp.asarray(plan.selection_epsilon, dtype),
                        jnp.asarray(plan.sigma, dtype)))
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
  return DPWSSRun(models, pairs, plan)


def epsilon_per_selection(epsilon: float, *, selections: int,
                          delta: float = DEFAULT_DELTA,
                          tol: float = 1e-9) -> float:
  """Largest ε per draw whose ``selections`` draws fit the total ``epsilon``.

  Bisection on the composed guarantee (min of basic and zCDP/RDP) of
  ``selections`` exponential-mechanism draws at ``delta``: the total
  budget split evenly. A calibration: it records nothing.
  """
  epsilon = validation.check_epsilon(epsilon, "epsilon")
  selections = validation.check_positive_int(selections, "selections")
  delta = validation.check_delta(delta)

  def spent(eps_each):
    return _composed_epsilon(eps_each, selections, delta, use_pld=False)

  lo, hi = 0.0, epsilon  # k draws never cost less than one
  if spent(hi) <= epsilon:
    return hi
  return calibration.bisect(lambda e: spent(e) <= epsilon, lo, hi,
                            rtol=tol)[0]


def epsilon_per_iteration(epsilon: float, *, max_iter: int,
                          delta: float = DEFAULT_DELTA,
                          selection: options.Selection = (
                              options.Selection.PAPER),
                          tol: float = 1e-9) -> float:
  """ε per draw so that ``max_iter`` iterations fit the total ``epsilon``.

  ``max_iter`` draws for ``"paper"`` (a nominal split: the paper's draws
  are not ε-DP, so the total is nominal too), 2·``max_iter`` for
  ``"private"`` (a real budget, split evenly over both indices of every
  iteration). See :func:`epsilon_per_selection`; :func:`make_plan` takes
  a total ``epsilon`` through it.
  """
  max_iter = validation.check_positive_int(max_iter, "max_iter")
  return epsilon_per_selection(
      epsilon, selections=max_iter * selections_per_iteration(
          selection), delta=delta, tol=tol)


__all__ = [
    "DEFAULT_DELTA", "DPWSSPlan", "DPWSSRun", "PAIR_FLAGS_TOTAL_BYTES",
    "PAPER_NOMINAL_NOTE", "PAPER_NO_GUARANTEE",
    "PRIVATE_SCOPE", "RELATION", "RepeatsLayout",
    "check_iterations", "check_selection", "check_settings",
    "epsilon_per_iteration",
    "epsilon_per_selection", "make_plan", "pair_buffer_iterations",
    "plan_repeats", "release", "resolve_pair_flags",
    "selections_per_iteration",
]
