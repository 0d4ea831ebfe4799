"""Experiment logic of ``launch.dpwss`` (no flags; importable anywhere).

One run is a :class:`Setting`: a frozen, keyword-only dataclass whose
fields are the script's flags, spelt as the library's parameters
(``selection_epsilon``, ``epsilon``, ``sigma``, ``max_iter``, ``c``,
``eps``, ``kernel``, ``gamma``, …), so the library's messages name them.
:meth:`Setting.check` refuses a bad one before any data is read, and
:func:`run` trains it and returns its record, whose settings are
``dataclasses.asdict(setting)`` (also the resume key, :func:`key`). The
two grids, :func:`run_table` and :func:`run_selection_comparison`, vary a
base Setting. See ``launch/dpwss.py`` for the protocol, scaling and
privacy notes.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from typing import NamedTuple

import jax
import numpy as np

from dpcore import accounting, clipping, memory, metrics, options, validation
from launch import common, vocabulary
from launch.data import loaders as data
from mechanisms.erm import output_perturbation
from mechanisms.svm import dpwss, kernels, smo_train

TABLE_GRID = ((1.0, 0.1), (1.0, 0.3), (1.0, 0.5), (1.0, 0.7), (0.5, 0.7),
              (0.1, 0.7))
METRICS = ("auc", "accuracy", "precision", "recall", "f1", "mcc")
# The private-selection comparison (``run_selection_comparison``): the
# paper's selection at these (ε per draw, σ), and the private variant at
# these total ε (at δ = 1e-5) and iteration counts T.
PAPER_SETTINGS = ((1.0, 0.5), (0.1, 0.7))
PRIVATE_TOTAL_EPSILONS = (1.0, 10.0, 100.0)
PRIVATE_ITERATIONS = (500, 2000)
PRIVATE_SIGMA = 0.5
# A private draw weighs its l indices by exp(ε·s/2) with scores s in
# [0, 1] (wss.PrivateWSS), so two weights differ by at most e^(ε/2): below
# this ε per draw (0.05 %) the selections are uniform for practical
# purposes and the run learns next to nothing from its budget.
NEAR_UNIFORM_EPSILON = 1e-3
# Iterations (over all repeats) from which a run is announced as long: the
# solver's loop runs on the device with no report until it ends.
LONG_RUN_ITERATIONS = 10_000_000

_DPWSS = vocabulary.WorkingSet.DPWSS
_WSS2 = vocabulary.WorkingSet.WSS2
_NO_RELEASE = vocabulary.Release.NONE


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setting:
  """One run of ``launch.dpwss``: a data set, a selection, the solver.

  The fields are the script's flags and, where the library has the
  setting, its parameter names. A field that does not apply is None:
  with ``wss="wss2"`` the selection's (``selection``,
  ``selection_epsilon``, ``epsilon``, ``sigma``), without a release
  ``release_epsilon``.

  Attributes:
    dataset: a :func:`launch.data.loaders.load_dataset` name.
    classes: (POS, NEG) of a multi-class set, or None.
    scaling: a :class:`launch.vocabulary.Scaling`.
    eval: a :class:`launch.vocabulary.EvalSplit`: score on the training
      rows (the paper) or the test split.
    wss: a :class:`launch.vocabulary.WorkingSet`: LIBSVM's WSS2 or DPWSS.
    selection: DPWSS's :class:`dpcore.options.Selection`.
    selection_epsilon: ε of each exponential-mechanism draw (the paper's
      ε); or
    epsilon: a total ε target at ``delta``, split over the draws of
      ``max_iter`` iterations (:func:`mechanisms.svm.dpwss.make_plan`).
    sigma: σ ∈ (0, 1).
    delta: δ of the composed guarantee.
    max_iter: the iteration cap T (None: the solver's).
    kernel, gamma, coef0, degree: :class:`mechanisms.svm.kernels.KernelSpec`.
    c: C.
    eps: the stopping tolerance.
    shrinking: LIBSVM's shrinking.
    dtype: the solver's precision.
    repeats: independent runs (vmapped; WSS2 trains once, a release draws
      once per repeat).
    seed: the root of the run's keys (with the data set's name).
    release: a :class:`launch.vocabulary.Release`.
    release_epsilon: ε of the output perturbation.
  """
  dataset: str = "heart"
  classes: tuple[int, int] | None = None
  scaling: str = vocabulary.Scaling.AUTO
  eval: str = vocabulary.EvalSplit.TRAIN
  wss: str = _DPWSS
  selection: str | None = options.Selection.PAPER
  selection_epsilon: float | None = 1.0
  epsilon: float | None = None
  sigma: float | None = 0.5
  delta: float = dpwss.DEFAULT_DELTA
  max_iter: int | None = None
  kernel: str = options.Kernel.RBF
  gamma: float | None = None
  coef0: float = 0.0
  degree: int = 3
  c: float = 1.0
  eps: float = 1e-3
  shrinking: bool = False
  dtype: str = vocabulary.SolverDtype.FLOAT64
  repeats: int = 5
  seed: int = 0
  release: str = _NO_RELEASE
  release_epsilon: float | None = 1.0

  def __post_init__(self):
    unused = []
    if self.wss == _WSS2:
      unused += ["selection", "selection_epsilon", "epsilon", "sigma"]
    if self.release == _NO_RELEASE:
      unused.append("release_epsilon")
    for name in unused:
      object.__setattr__(self, name, None)

  def check(self) -> Setting:
    """Refuses a bad setting before any data is read or code compiled.

    Returns:
      The setting.

    Raises:
      ValueError: the first bad value, in one line naming the field (the
        flag) and the fix.
    """
    options.parse(vocabulary.WorkingSet, self.wss, "wss")
    if self.wss == _DPWSS:
      dpwss.check_settings(
          sigma=self.sigma, selection_epsilon=self.selection_epsilon,
          epsilon=self.epsilon, delta=self.delta, selection=self.selection,
          max_iter=self.max_iter)
    else:
      validation.check_delta(self.delta, "delta")
    smo_train.check_solver_settings(c=self.c, eps=self.eps,
                                    max_iter=self.max_iter, dtype=self.dtype)
    kernels.check_settings(self.kernel, gamma=self.gamma, coef0=self.coef0,
                           degree=self.degree)
    validation.check_positive_int(self.repeats, "repeats")
    options.parse(vocabulary.Scaling, self.scaling, "scaling")
    options.parse(vocabulary.EvalSplit, self.eval, "eval")
    options.parse(vocabulary.Release, self.release, "release")
    if self.release != _NO_RELEASE:
      validation.check_epsilon(self.release_epsilon, "release_epsilon")
      output_perturbation.check_linear_kernel(self.kernel)
      check_release_scaling(self.scaling)
    if self.classes is not None:
      parse_classes(self.classes)
    return self

  def plan(self) -> dpwss.DPWSSPlan:
    """The selection's :class:`mechanisms.svm.dpwss.DPWSSPlan`."""
    return dpwss.make_plan(
        sigma=self.sigma, selection_epsilon=self.selection_epsilon,
        epsilon=self.epsilon, delta=self.delta, selection=self.selection,
        max_iter=self.max_iter)

  def baseline(self) -> Setting:
    """The WSS2 run that objError and iterationRatio compare with: the
    same data and solver, the solver's own iteration cap, no release."""
    return dataclasses.replace(self, wss=_WSS2, max_iter=None,
                               release=_NO_RELEASE)

  def warning(self) -> str | None:
    """A one-line warning, before any work, for a DPWSS setting that is
    useless (near-uniform private selections) or effectively endless (a
    long loop with no report until it ends); None for an ordinary one.

    Names the per-draw ε and the iterations the run is expected to take
    (``"private"`` runs exactly ``max_iter`` per repeat; ``"paper"`` at
    most ``max_iter``).
    """
    if self.wss != _DPWSS or self.max_iter is None:
      return None
    private = self.selection == options.Selection.PRIVATE
    each = self.selection_epsilon
    if self.epsilon is not None:
      each = dpwss.epsilon_per_iteration(
          self.epsilon, max_iter=self.max_iter, delta=self.delta,
          selection=self.selection)
    draws = self.max_iter * dpwss.selections_per_iteration(self.selection)
    iterations = self.max_iter * self.repeats
    problems = []
    if private and each < NEAR_UNIFORM_EPSILON:
      split = ("" if self.epsilon is None else
               f" (ε {self.epsilon:g} split over {draws:,} draws)")
      problems.append(
          f"the per-draw ε is {each:.3g}{split}, so every selection is "
          f"uniform to within e^(ε/2) - 1 = {math.expm1(each / 2):.2g}")
    if iterations >= LONG_RUN_ITERATIONS or problems:
      problems.append(
          f"the run takes {'exactly' if private else 'up to'} "
          f"{self.max_iter:,} iterations × {self.repeats} repeat(s) = "
          f"{iterations:,}, reported only by a line every "
          f"{common.HEARTBEAT_S:g} s")
    if not problems:
      return None
    if len(problems) == 1:  # a long run only: say its ε too
      problems[0] += f" at a per-draw ε of {each:.3g}"
    return ("warning: " + "; ".join(problems) + "; lower max_iter or "
            "raise the ε if this is not what you meant.")


KEY_FIELDS = tuple(f.name for f in dataclasses.fields(Setting))
"""A record's resume key: its settings, the fields of :class:`Setting`."""


def key(setting: Setting) -> tuple:
  """The resume key of ``setting``'s record (:func:`common.record_key`)."""
  return common.record_key(dataclasses.asdict(setting), KEY_FIELDS)


# -- data ----------------------------------------------------------------------


def parse_classes(text) -> tuple[int, int] | None:
  """``"POS,NEG"`` (or a pair) → ``(pos, neg)``; None/"" → None.

  Raises:
    ValueError: not exactly two distinct integers (the SVM is binary).
  """
  if text is None or text == "":
    return None
  parts = text.split(",") if isinstance(text, str) else list(text)
  try:
    values = tuple(int(str(v).strip()) for v in parts)
  except ValueError:
    raise ValueError(f"classes={text!r}: class ids must be integers, "
                     f"e.g. classes=3,8.") from None
  if len(values) != 2 or values[0] == values[1]:
    raise ValueError(
        f"classes={text!r}: the SVM is binary, so give exactly two "
        f"different class ids POS,NEG (e.g. classes=3,8).")
  return values


def binary_labels(y, classes, name):
  """(rows kept, their labels ±1): ``classes`` (POS → +1), or a set's two.

  Raises:
    ValueError: a class of ``classes`` absent, or a multi-class set
      without ``classes``.
  """
  y = np.asarray(y)
  values = np.unique(y)
  if classes is not None:
    pos, neg = classes
    missing = [c for c in (pos, neg) if c not in values]
    if missing:
      raise ValueError(
          f"classes={pos},{neg}: class(es) {missing} do not occur in "
          f"{name!r}, whose labels are {values.tolist()}; pick two of "
          f"those.")
    keep = (y == pos) | (y == neg)
    return keep, np.where(y[keep] == pos, 1.0, -1.0)
  if len(values) != 2:
    raise ValueError(
        f"{name!r} has {len(values)} classes {values.tolist()[:20]}; the "
        f"SVM is binary: pick two with classes=POS,NEG (e.g. "
        f"classes={values[0]},{values[-1]}).")
  return np.ones(y.shape, bool), np.where(y == values.max(), 1.0, -1.0)


def scale_rows(x, bounds, scaling, fit_rows):
  """``x`` scaled by rule ``scaling`` (float64 throughout)."""
  if scaling == vocabulary.Scaling.NONE:
    return x
  if scaling == vocabulary.Scaling.MINMAX:
    # Reads the data: outside any guarantee (see launch/dpwss.py).
    low, high = fit_rows.min(axis=0), fit_rows.max(axis=0)
    span = np.where(high > low, high - low, 1.0)
    return 2.0 * (x - low) / span - 1.0
  with jax.enable_x64(True):
    if scaling == vocabulary.Scaling.BOX:
      return np.asarray(clipping.scale_to_box(x, bounds), np.float64)
    if scaling == vocabulary.Scaling.UNIT_ROWS:
      return np.asarray(clipping.unit_rows(x, bounds), np.float64)
    return np.asarray(clipping.clip_rows(x, max_norm=1.0), np.float64)


def resolve_scaling(name, scaling, bounds) -> vocabulary.Scaling:
  """The concrete rule ``auto``/``auto_minmax`` stands for on ``name``.

  Raises:
    ValueError: ``auto`` for a set without public bounds, or ``box`` for
      one (minmax reads the data and has to be asked for by name).
  """
  scaling = options.parse(vocabulary.Scaling, scaling, "scaling")
  auto = (vocabulary.Scaling.AUTO, vocabulary.Scaling.AUTO_MINMAX)
  if scaling in auto:
    if bounds is not None:
      return vocabulary.Scaling.BOX
    if name.startswith("svmlight:"):
      return vocabulary.Scaling.NONE
    if scaling == vocabulary.Scaling.AUTO_MINMAX:
      return vocabulary.Scaling.MINMAX
    raise ValueError(
        f"{name!r} has no public feature bounds, and min/max scaling reads "
        f"the data, outside any guarantee. Pass scaling=auto_minmax to "
        f"min/max-scale such sets as LIBSVM's svm-scale did for the "
        f"paper (resolved.scaling 'minmax' in the record), or a "
        f"data-independent scaling=unit_rows, unit_ball or none.")
  if scaling == vocabulary.Scaling.BOX and bounds is None:
    raise ValueError(f"scaling=box: {name!r} has no public feature "
                     f"bounds to map; use unit_rows, unit_ball, none or "
                     f"(reading the data) minmax.")
  return scaling


def check_datasets(datasets, *, data_dir=None, scaling=None) -> None:
  """Every name of a data set list found, its scaling resolvable by name.

  Reads no data: public bounds are known by name (``svmlight:`` and
  ``arff:`` files are resolved when loaded).

  Raises:
    ValueError: an empty list or an unknown name, or a scaling the set
      cannot take.
    FileNotFoundError: a set's files are missing.
  """
  if not datasets:
    raise ValueError("no data set given: give at least one name (e.g. "
                     "heart).")
  for name in datasets:
    data.check_dataset(name, data_dir=data_dir)
    if scaling is not None and not name.startswith(("svmlight:", "arff:")):
      resolve_scaling(name, scaling, data.public_bounds(name))


class Prepared(NamedTuple):
  """A data set as a run trains and scores on it (float64 rows, ±1)."""
  x: np.ndarray
  y: np.ndarray
  x_eval: np.ndarray
  y_eval: np.ndarray
  scaling: vocabulary.Scaling  # the rule used (``auto`` resolved)


def prepare(setting: Setting, *, data_dir=None) -> Prepared:
  """Loads ``setting``'s data set as float64 ±1 train and eval rows.

  The file's own precision is kept (float64 from svmlight/ARFF files), so
  a float64 solver follows LIBSVM's path on the same file. With a private
  release the rows are also bounded to the unit ball
  (:func:`release_rows`).
  """
  name = setting.dataset
  ds = data.load_dataset(name, data_dir=data_dir)
  scaling = resolve_scaling(name, setting.scaling, ds.bounds)
  release = setting.release != _NO_RELEASE
  if release:
    check_release_scaling(scaling)
  keep, y_train = binary_labels(ds.y_train, setting.classes, name)
  x_train = np.asarray(ds.x_train, np.float64)[keep]
  if setting.eval == vocabulary.EvalSplit.TEST:
    if ds.x_test is None:
      raise ValueError(f"eval=test: {name!r} has no test split; use "
                       f"eval=train.")
    keep_t, y_eval = binary_labels(ds.y_test, setting.classes, name)
    x_eval = np.asarray(ds.x_test, np.float64)[keep_t]
  else:
    x_eval, y_eval = x_train, y_train
  fit = x_train
  x_train = scale_rows(x_train, ds.bounds, scaling, fit)
  x_eval = scale_rows(x_eval, ds.bounds, scaling, fit)
  if release:
    x_train, x_eval = release_rows(x_train), release_rows(x_eval)
  return Prepared(x_train, y_train, x_eval, y_eval, scaling)


# -- one setting ---------------------------------------------------------------


def _report(y, scores) -> dict:
  """The metrics at full precision (float64 scores, Python floats)."""
  with jax.enable_x64(True):
    rep = metrics.binary_report(np.asarray(y, np.int32),
                                np.asarray(scores, np.float64))
    return {k: float(rep[k]) for k in METRICS}


def _mean_metrics(per_repeat):
  return {k: float(np.mean([r[k] for r in per_repeat])) for k in METRICS}


def run(setting: Setting, *, data_dir=None, memory_budget=None,
        prepared: Prepared | None = None, baseline: dict | None = None,
        progress=None) -> dict:
  """Trains one setting (all repeats) and returns its JSON record.

  Args:
    setting: the run (checked here first).
    data_dir: where the data set's files are.
    memory_budget: bytes the training may use, ``"auto"`` (3/4 of the
      memory available, :func:`dpcore.memory.resolve_budget`) or None (no
      limit): the repeats run in chunks that fit, or the setting is
      refused in one line naming the estimate and the budget.
    prepared: :func:`prepare` of this setting, to reuse.
    baseline: the record of :meth:`Setting.baseline` for objError and
      iterationRatio (run here when missing).
    progress: a reporter of progress lines (e.g.
      :func:`launch.common.progress`), or None.

  Returns:
    The record: ``dataclasses.asdict(setting)``, then what the automatic
    settings resolved to (``resolved``), the metrics (mean of the
    repeats, and ``per_repeat``) and the privacy of everything released
    (``privacy``: the fields of :data:`dpcore.accounting.PRIVACY_FIELDS`;
    DPWSS's own figures under ``dpwss``,
    :meth:`mechanisms.svm.dpwss.DPWSSPlan.selection_report`).
  """
  s = setting.check()
  if prepared is None:
    prepared = prepare(s, data_dir=data_dir)
  x, y, x_eval, y_eval, scaling = prepared
  budget = memory.resolve_budget(memory_budget)
  spec = kernels.KernelSpec(s.kernel, gamma=s.gamma, coef0=s.coef0,
                            degree=s.degree).resolve(x.shape[1])
  solver = dict(kernel=spec, c=s.c, eps=s.eps, shrinking=s.shrinking,
                dtype=s.dtype, memory_budget=budget)
  root = jax.random.fold_in(jax.random.key(s.seed),
                            zlib.crc32(s.dataset.encode()))
  train_key, release_key = jax.random.split(root)
  plan, run_, models, compile_s, seconds = _train(
      s, x, y, train_key, solver, budget=budget, progress=progress)
  per_repeat = []
  for m in models:
    rec = _report(y_eval, m.decision_function(x_eval))
    rec.update(obj=float(m.objective), bias=float(m.bias),
               iterations=int(m.iterations),
               exit_reason=m.exit_reason, n_sv=int(m.support.size))
    per_repeat.append(rec)
  record = {
      **dataclasses.asdict(s),
      "resolved": {"scaling": scaling, "gamma": spec.gamma},
      "n_train": int(x.shape[0]), "n_eval": int(x_eval.shape[0]),
      **_mean_metrics(per_repeat),
      "obj": float(np.mean([r["obj"] for r in per_repeat])),
      "iterations": float(np.mean([r["iterations"] for r in per_repeat])),
      "exit_reason": sorted({r["exit_reason"] for r in per_repeat}),
      "per_repeat": per_repeat,
      "seconds": seconds, "compile_seconds": compile_s,
  }
  record.update(_privacy(s, plan, run_, release_key, prepared))
  record["privacy_scope"] = (
      "the selection transcript (DPWSS) and any released_model; each "
      "repeat counts as its own run (one selection transcript and one "
      "release each). Not covered: the trained SMO model's own figures "
      "(per_repeat and their means: objective, bias, support vectors, "
      "iterations, metrics on the eval split), which read the data "
      "without noise")
  record["model_is_private"] = s.release != _NO_RELEASE
  record["privacy_note"] = _privacy_note(s)
  if plan is not None:
    if baseline is None:
      baseline = run(s.baseline(), prepared=prepared, memory_budget=budget,
                     progress=progress)
    record["wss2_obj"] = baseline["obj"]
    record["wss2_iterations"] = baseline["iterations"]
    record["obj_error"] = abs(record["obj"] - baseline["obj"])
    record["iteration_ratio"] = record["iterations"] / max(
        baseline["iterations"], 1)
  return record


def _train(s: Setting, x, y, key, solver: dict, *, budget, progress):
  """The SMO model(s): WSS2's one, or DPWSS's repeats from ``key``.

  Returns ``(plan, run, models, compile seconds, seconds)``; ``plan`` and
  ``run`` are None for WSS2.
  """
  plan = run_ = None
  if s.wss == _DPWSS:
    plan = s.plan()
    cap = (s.max_iter if s.max_iter is not None
           else dpwss.pair_buffer_iterations(x.shape[0]))
    _repeats_chunk(x.shape, setting=s, max_iter=cap, budget=budget,
                   progress=progress)
  if progress is not None:
    progress(f"{s.dataset}: {s.wss}"
             + (f" ({s.selection}, ε={plan.selection_epsilon:.4g}, "
                f"σ={s.sigma:g}, {s.repeats} repeats)" if plan else "")
             + f", shrinking={bool(s.shrinking)}: compiling and training "
             f"on {x.shape[0]} rows")
  if plan is None:
    model, compile_s, seconds = common.timed(
        lambda: smo_train.wss2_train(x, y, max_iter=s.max_iter, **solver))
    models = [model]
  else:
    # The solver's loop reports nothing until it ends: a line every
    # common.HEARTBEAT_S seconds says it is still running (host side; the
    # program and its results are untouched).
    with common.heartbeat(f"{s.dataset}: dpwss (≤ {cap:,} iterations × "
                          f"{s.repeats} repeat(s))", progress=progress):
      run_, compile_s, seconds = common.timed(
          lambda: dpwss.release(key, plan, x, y, repeats=s.repeats,
                                **solver))
    models = list(run_.models)
  return plan, run_, models, compile_s, seconds


def _privacy(s: Setting, plan, run_, key, prepared: Prepared) -> dict:
  """The record's privacy of everything released, in one ledger: the
  selection transcript (DPWSS) and the released model, if any."""
  x, y, x_eval, y_eval, _ = prepared
  out = {}
  ledger = accounting.PrivacyLedger()
  if s.release != _NO_RELEASE:
    release_plan = output_perturbation.make_plan(
        epsilon=float(s.release_epsilon), c=s.c)
    release_plan.record(ledger)
    out["released_model"] = _release(
        key, release_plan, x, y, x_eval, y_eval, repeats=s.repeats)
  if plan is not None:
    out["privacy"] = plan.report(ledger)
    out["dpwss"] = run_.selection_report()
  elif s.release != _NO_RELEASE:
    out["privacy"] = ledger.report(s.delta)
    out["dpwss"] = None
  else:
    out["privacy"] = accounting.no_guarantee_record(accounting.NON_PRIVATE)
    out["dpwss"] = None
  return out


def _privacy_note(s: Setting) -> str:
  model = ("The trained SMO model is not differentially private; only a "
           "released_model from output perturbation is (model_is_private), "
           "with its own epsilon.")
  if s.wss != _DPWSS:
    return model
  if s.selection == options.Selection.PAPER:
    return ("The paper's DPWSS selection carries no DP guarantee "
            "(privacy.epsilon is null; the paper's figure is "
            "privacy.epsilon_nominal). " + model)
  return ("Private selection: privacy.epsilon covers the transcript of "
          "2T selected indices (replace-one neighbours). " + model)


def _repeats_chunk(shape, *, setting, max_iter, budget, progress) -> None:
  """Sizes the repeats to the memory budget from the shapes (no work):
  :func:`mechanisms.svm.dpwss.plan_repeats`, its chunk reported through
  ``progress`` when the repeats do not all fit at once.

  Raises:
    dpcore.memory.MemoryBudgetError: one line naming the estimate, the
      budget and the settings to change.
  """
  layout = dpwss.plan_repeats(*shape, repeats=setting.repeats,
                              max_iter=max_iter, dtype=setting.dtype,
                              memory_budget=budget)
  if layout.chunk is not None and progress is not None:
    progress(f"repeat chunk {layout.chunk} of {setting.repeats} (estimated "
             f"{memory.size_text(layout.estimate)} of a "
             f"{memory.size_text(budget)} memory budget; memory_budget or "
             f"repeats to change)")


# -- the private release and its scaling rules ---------------------------------


def check_release_scaling(scaling) -> None:
  """A private release needs data-independent scaling (not ``minmax``)."""
  if scaling in (vocabulary.Scaling.MINMAX, vocabulary.Scaling.AUTO_MINMAX):
    raise ValueError(
        f"release=output_perturbation needs data-independent scaling; "
        f"scaling={scaling} reads the data (min/max). Use scaling="
        f"unit_rows, unit_ball, box or none.")


def release_rows(x) -> np.ndarray:
  """Rows bounded to the unit ball (x/max(1, ‖x‖); non-finite rows → 0).

  Output perturbation's sensitivity 2C assumes ‖x‖ ≤ 1; this per-row,
  data-independent map makes it hold (:func:`dpcore.clipping.clip_rows`).
  """
  with jax.enable_x64(True):
    return np.asarray(clipping.clip_rows(np.asarray(x, np.float64),
                                         max_norm=1.0), np.float64)


def _release(key, plan, x, y, x_eval, y_eval, *, repeats) -> dict:
  """Output-perturbed linear models (one noise draw per repeat).

  Its ledger entry is ``plan.record``
  (:class:`mechanisms.erm.output_perturbation.OutputPerturbationPlan`).
  """
  releases = output_perturbation.release(
      jax.random.split(key, repeats), plan, x, y)
  per = [_report(y_eval, rel.decision_function(x_eval)) for rel in releases]
  # Its guarantee is in the record's one "privacy" (the run's ledger);
  # here only what the release is and how it scored.
  return {"scope": "the released (w, b) alone, fitted on the data "
                   "independently of the SMO run",
          "sensitivity": plan.sensitivity,
          "noise_scale": plan.scale,
          "bias": "constant feature appended: x~ = [x, 1]/sqrt(2)",
          **_mean_metrics(per), "per_repeat": per}


# -- the grids -----------------------------------------------------------------


def _run_grid(grids, *, out, data_dir, memory_budget, progress):
  """Runs each data set's grid of Settings, resuming from ``out``.

  ``grids`` maps each data set to its Settings, its first the WSS2
  baseline of the DPWSS runs up to the next WSS2 one. Every Setting is
  checked and every data set loaded before the first run; each new record
  is printed, then appended to ``out`` (:func:`launch.common.emit_record`).
  """
  for grid in grids.values():
    for s in grid:
      s.check()
  prepared = {}
  for name, grid in grids.items():
    progress(f"{name}: loading and checking")
    prepared[name] = prepare(grid[0], data_dir=data_dir)
  done = common.done_keys(out, KEY_FIELDS)
  records = []
  for d, (name, grid) in enumerate(grids.items(), 1):
    progress(f"dataset {d}/{len(grids)}: {name}")
    finished = sum(key(s) in done for s in grid)
    if finished:
      progress(f"{name}: skipping {finished} finished runs (found in out)")
    baseline = None
    for s in grid:
      if key(s) in done:
        rec = next(r for r in reversed(common.read_jsonl(out))
                   if common.record_key(r, KEY_FIELDS) == key(s))
      else:
        rec = run(s, prepared=prepared[name], memory_budget=memory_budget,
                  baseline=None if s.wss == _WSS2 else baseline,
                  progress=progress)
        common.emit_record(rec, out)
        progress(f"{name}: done in {rec['seconds']:.1f}s "
                 f"(+{rec['compile_seconds']:.1f}s compiling), "
                 f"{rec['iterations']:,.0f} iterations, accuracy "
                 f"{rec['accuracy']:.4f}")
      if s.wss == _WSS2:
        baseline = rec
      records.append(rec)
  return records


def run_table(base: Setting, datasets, *, out, table_md=None, data_dir=None,
              memory_budget=None, progress=common.progress) -> list[dict]:
  """The paper's Table-3 grid on each data set; resumes from ``out``.

  Per data set and shrinking (on, off): WSS2, then the paper's DPWSS at
  each (ε per draw, σ) of :data:`TABLE_GRID`; the data, solver and kernel
  settings are ``base``'s, nothing is released. ``table_md``:
  :func:`markdown_table` of every record in ``out``.
  """
  check_datasets(datasets, data_dir=data_dir, scaling=base.scaling)
  grids = {}
  for name in datasets:
    grids[name] = []
    for shrinking in (True, False):
      wss2 = dataclasses.replace(base.baseline(), dataset=name,
                                 shrinking=shrinking)
      grids[name] += [wss2] + [
          dataclasses.replace(wss2, wss=_DPWSS,
                              selection=options.Selection.PAPER,
                              selection_epsilon=e, sigma=g,
                              max_iter=base.max_iter)
          for e, g in TABLE_GRID]
  records = _run_grid(grids, out=out, data_dir=data_dir,
                      memory_budget=memory_budget, progress=progress)
  if table_md:
    with open(table_md, "w", encoding="utf-8") as f:
      f.write(markdown_table(common.read_jsonl(out), datasets,
                             classes=base.classes))
  return records


def markdown_table(records, datasets, *, classes=None) -> str:
  """Table 3's layout: dataset, shrinking, metric; WSS2 then DPWSS columns.

  Uses the latest record of each cell among ``records`` with the given
  ``classes`` (the pair of a multi-class set). Rows beyond the paper's: the
  guarantee (none for the paper's selection), and what composing the
  paper's per-selection claim would give, were it true — basic (T·ε, T the
  largest iteration count of the repeats) and zCDP/RDP at the run's δ.
  """
  want = list(classes) if classes else None
  head = ["Dataset", "Shrinking", "Metric", "WSS2"] + [
      f"DPWSS ε={e:g} σ={s:g}" for e, s in TABLE_GRID]
  lines = ["| " + " | ".join(head) + " |",
           "|" + "---|" * len(head)]
  rows = list(METRICS) + ["obj", "iterations", "obj_error",
                          "iteration_ratio", "epsilon_guarantee",
                          "epsilon_nominal_basic",
                          "epsilon_nominal_composed"]
  for name in datasets:
    for shrinking in (True, False):
      def pick(wss, eps=None, sig=None, name=name, shrinking=shrinking):
        for r in reversed(records):
          if (r["dataset"] == name and r["wss"] == wss
              and r.get("selection") != options.Selection.PRIVATE
              and r.get("classes") == want
              and r["shrinking"] == shrinking
              and r.get("selection_epsilon") == eps
              and r.get("sigma") == sig):
            return r
        return None
      cols = [pick(_WSS2)] + [pick(_DPWSS, e, s) for e, s in TABLE_GRID]
      label = name if want is None else f"{name} {want[0]} vs {want[1]}"
      for metric in rows:
        cells = []
        for r in cols:
          v = None if r is None else _cell(r, metric)
          cells.append("–" if v is None else _fmt(metric, v))
        lines.append(f"| {label} | {int(shrinking)} | {metric} | "
                     + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def _cell(record, metric):
  if metric.startswith("epsilon"):
    if record["wss"] != _DPWSS:
      return None
    privacy = record["privacy"]
    if metric == "epsilon_guarantee":
      return "none" if privacy.get("epsilon") is None else privacy["epsilon"]
    return (record.get("dpwss") or {}).get(metric)
  return record.get(metric)


def _fmt(metric, v):
  if isinstance(v, str):
    return v
  if metric.startswith("epsilon"):
    return f"{v:.1f}"
  if metric == "iterations":
    return f"{v:,.0f}"
  if metric == "obj":
    return f"{v:.2f}"
  return f"{v:.4f}"


def run_selection_comparison(base: Setting, datasets, *, out, table_md=None,
                             paper_settings=PAPER_SETTINGS,
                             epsilons=PRIVATE_TOTAL_EPSILONS,
                             iterations=PRIVATE_ITERATIONS,
                             sigma=PRIVATE_SIGMA, data_dir=None,
                             memory_budget=None, progress=common.progress
                             ) -> list[dict]:
  """WSS2, the paper's selection and the private one, on each data set.

  Shrinking off everywhere (the private selection scores every row). The
  paper's runs use (ε per draw, σ) from ``paper_settings`` and stop on
  their own; the private runs (at ``sigma``) spend each total ε of
  ``epsilons`` (at ``base.delta``) over exactly T iterations, T from
  ``iterations``; the data, solver and kernel settings are ``base``'s.
  Resumes from ``out``; writes :func:`selection_markdown` to
  ``table_md``.
  """
  for total in epsilons:
    validation.check_epsilon(total, "epsilons")
  for steps in iterations:
    validation.check_positive_int(steps, "iterations")
  check_datasets(datasets, data_dir=data_dir, scaling=base.scaling)
  grids = {}
  for name in datasets:
    wss2 = dataclasses.replace(base.baseline(), dataset=name,
                               shrinking=False)
    grids[name] = [wss2] + [
        dataclasses.replace(wss2, wss=_DPWSS,
                            selection=options.Selection.PAPER,
                            selection_epsilon=e, sigma=g)
        for e, g in paper_settings] + [
            dataclasses.replace(wss2, wss=_DPWSS,
                                selection=options.Selection.PRIVATE,
                                epsilon=float(total), sigma=sigma,
                                max_iter=int(steps))
            for steps in iterations for total in epsilons]
  records = _run_grid(grids, out=out, data_dir=data_dir,
                      memory_budget=memory_budget, progress=progress)
  if table_md:
    with open(table_md, "w", encoding="utf-8") as f:
      f.write(selection_markdown(common.read_jsonl(out), datasets))
  return records


def selection_markdown(records, datasets) -> str:
  """One row per setting: guarantee, objective, accuracy, iterations.

  The latest record of each (dataset, setting) among ``records``; only
  runs without shrinking and with the default classes.
  """
  head = ["dataset", "selection", "ε per draw", "ε guarantee (δ)",
          "dual objective", "accuracy (train)", "iterations"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for name in datasets:
    latest = {}
    for r in records:
      if r["dataset"] != name or r["shrinking"] or r.get("classes"):
        continue
      latest[(r["wss"], r.get("selection"), r.get("selection_epsilon"),
              r.get("sigma"), r.get("max_iter"), r.get("epsilon"))] = r
    for r in latest.values():
      privacy = r["privacy"]
      if r["wss"] == _WSS2:
        label, draw, guarantee = "WSS2 (LIBSVM)", "–", "none (no noise)"
      elif r["selection"] == options.Selection.PAPER:
        label = f"paper, σ={r['sigma']:g}"
        draw = f"{r['dpwss']['epsilon_per_selection']:g} (nominal)"
        guarantee = "none (paper claims {:g})".format(
            privacy["epsilon_nominal"])
      else:
        label = f"private, σ={r['sigma']:g}, T={r['max_iter']}"
        draw = f"{r['dpwss']['epsilon_per_selection']:.3g}"
        guarantee = f"{privacy['epsilon']:.3g} ({privacy['delta']:g})"
      lines.append(
          f"| {name} | {label} | {draw} | {guarantee} | {r['obj']:.2f} | "
          f"{r['accuracy']:.4f} | {r['iterations']:,.0f} |")
  return "\n".join(lines) + "\n"


__all__ = [
    "KEY_FIELDS", "LONG_RUN_ITERATIONS", "METRICS", "NEAR_UNIFORM_EPSILON",
    "PAPER_SETTINGS", "PRIVATE_ITERATIONS", "PRIVATE_SIGMA",
    "PRIVATE_TOTAL_EPSILONS",
    "Prepared", "Setting", "TABLE_GRID", "binary_labels",
    "check_datasets", "check_release_scaling", "key", "markdown_table",
    "parse_classes", "prepare", "release_rows", "resolve_scaling", "run",
    "run_selection_comparison", "run_table", "scale_rows",
    "selection_markdown",
]
