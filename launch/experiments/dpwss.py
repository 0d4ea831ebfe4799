"""Experiment logic of ``launch.dpwss`` (no flags; importable anywhere).

See ``launch/dpwss.py`` for the protocol, scaling and privacy notes.
"""

from __future__ import annotations

import math
import zlib

import jax
import numpy as np

from dpcore import (
    accounting,
    clipping,
    memory,
    metrics,
    options,
    validation,
)
from launch import common, vocabulary
from launch.data import loaders as data
from mechanisms.erm import output_perturbation
from mechanisms.svm import dpwss, kernels, smo_train

TABLE_GRID = ((1.0, 0.1), (1.0, 0.3), (1.0, 0.5), (1.0, 0.7), (0.5, 0.7),
              (0.1, 0.7))
METRICS = ("auc", "accuracy", "precision", "recall", "f1", "mcc")
KEY_FIELDS = ("dataset", "wss", "selection", "epsilon", "sigma", "shrinking",
              "kernel", "c", "gamma_arg", "eps_stop", "repeats", "seed",
              "release", "release_epsilon", "scaling", "eval", "dtype",
              "classes", "max_iter", "total_epsilon_target")
# The private-selection comparison (``run_selection_comparison``): the
# paper's selection at these (nominal ε, σ), and the private variant at
# these total ε (at δ = 1e-5) and iteration counts T.
PAPER_SETTINGS = ((1.0, 0.5), (0.1, 0.7))
PRIVATE_TOTAL_EPSILONS = (1.0, 10.0, 100.0)
PRIVATE_ITERATIONS = (500, 2000)
PRIVATE_SIGMA = 0.5


# -- data -------------------------------------------------------------------



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
    raise ValueError(f"--classes={text!r}: class ids must be integers, "
                     f"e.g. --classes=3,8.") from None
  if len(values) != 2 or values[0] == values[1]:
    raise ValueError(
        f"--classes={text!r}: the SVM is binary, so give exactly two "
        f"different class ids POS,NEG (e.g. --classes=3,8).")
  return values


def _binary_labels(y, classes, name):
  y = np.asarray(y)
  values = np.unique(y)
  if classes is not None:
    pos, neg = classes
    missing = [c for c in (pos, neg) if c not in values]
    if missing:
      raise ValueError(
          f"--classes={pos},{neg}: class(es) {missing} do not occur in "
          f"{name!r}, whose labels are {values.tolist()}; pick two of "
          f"those.")
    keep = (y == pos) | (y == neg)
    return keep, np.where(y[keep] == pos, 1.0, -1.0)
  if len(values) != 2:
    raise ValueError(
        f"{name!r} has {len(values)} classes {values.tolist()[:20]}; the "
        f"SVM is binary: pick two with --classes=POS,NEG (e.g. "
        f"--classes={values[0]},{values[-1]}).")
  return np.ones(y.shape, bool), np.where(y == values.max(), 1.0, -1.0)


def scale_rows(x, bounds, scaling, fit_rows):
  """``x`` scaled by rule ``scaling`` (float64 throughout)."""
  if scaling == "none":
    return x
  if scaling == "minmax":
    # Reads the data: outside any guarantee (see launch/dpwss.py).
    low, high = fit_rows.min(axis=0), fit_rows.max(axis=0)
    span = np.where(high > low, high - low, 1.0)
    return 2.0 * (x - low) / span - 1.0
  with jax.enable_x64(True):
    if scaling == "box":
      return np.asarray(clipping.scale_to_box(x, bounds), np.float64)
    if scaling == "unit_rows":
      return np.asarray(clipping.unit_rows(x, bounds), np.float64)
    return np.asarray(clipping.clip_rows(x, max_norm=1.0), np.float64)


def resolve_scaling(name, scaling, bounds):
  """The concrete rule ``auto``/``auto_minmax`` stands for on ``name``.

  Raises:
    ValueError: ``auto`` for a set without public bounds, or ``box`` for
      one (minmax reads the data and has to be asked for by name).
  """
  options.parse(vocabulary.Scaling, scaling, "--scaling")
  if scaling in ("auto", "auto_minmax"):
    if bounds is not None:
      return "box"
    if name.startswith("svmlight:"):
      return "none"
    if scaling == "auto_minmax":
      return "minmax"
    raise ValueError(
        f"{name!r} has no public feature bounds, and min/max scaling reads "
        f"the data, outside any guarantee. Pass --scaling=auto_minmax to "
        f"min/max-scale such sets as LIBSVM's svm-scale did for the "
        f"paper (labelled 'minmax' in the record), or a data-independent "
        f"--scaling=unit_rows, unit_ball or none.")
  if scaling == "box" and bounds is None:
    raise ValueError(f"--scaling=box: {name!r} has no public feature "
                     f"bounds to map; use unit_rows, unit_ball, none or "
                     f"(reading the data) minmax.")
  return scaling


def prepare(name, *, data_dir, classes, scaling, evaluate, release):
  """Loads a dataset as float64 ±1 train/eval arrays and the scaling used.

  The file's own precision is kept (float64 from svmlight/ARFF files), so
  a float64 solver follows LIBSVM's path on the same file. With a private
  ``release`` the rows are also bounded to the unit ball
  (:func:`release_rows`).
  """
  ds = data.load_dataset(name, data_dir=data_dir)
  scaling = resolve_scaling(name, scaling, ds.bounds)
  if release != "none":
    check_release_scaling(scaling)
  keep, y_train = _binary_labels(ds.y_train, classes, name)
  x_train = np.asarray(ds.x_train, np.float64)[keep]
  if evaluate == "test":
    if ds.x_test is None:
      raise ValueError(f"--eval=test: {name!r} has no test split; use "
                       f"--eval=train.")
    keep_t, y_eval = _binary_labels(ds.y_test, classes, name)
    x_eval = np.asarray(ds.x_test, np.float64)[keep_t]
  else:
    x_eval, y_eval = x_train, y_train
  fit = x_train
  x_train = scale_rows(x_train, ds.bounds, scaling, fit)
  x_eval = scale_rows(x_eval, ds.bounds, scaling, fit)
  if release != "none":
    x_train, x_eval = release_rows(x_train), release_rows(x_eval)
  return x_train, y_train, x_eval, y_eval, scaling


# -- one setting --------------------------------------------------------------

def _report(y, scores) -> dict:
  """The metrics at full precision (float64 scores, Python floats)."""
  with jax.enable_x64(True):
    rep = metrics.binary_report(np.asarray(y, np.int32),
                                np.asarray(scores, np.float64))
    return {k: float(rep[k]) for k in METRICS}


def _mean_metrics(per_repeat):
  return {k: float(np.mean([r[k] for r in per_repeat])) for k in METRICS}


# launch.dpwss's flags whose names differ from the library's.
FLAG_NAMES = {"selection_epsilon": "epsilon", "epsilon": "total_epsilon",
              "eps": "eps_stop"}


def check_setting(*, wss="dpwss", selection="paper", epsilon=1.0, sigma=0.5,
                  c=1.0, kernel="rbf", gamma=None, coef0=0.0, degree=3,
                  eps_stop=1e-3, max_iter=None, release="none",
                  release_epsilon=1.0, delta=dpwss.DEFAULT_DELTA, repeats=5,
                  total_epsilon=None, scaling="auto", evaluate="train",
                  dtype="float64", **unused) -> None:
  """Refuses a bad setting before any data is read or code compiled.

  Every message names the flag, the value and the fix.

  Raises:
    ValueError: the first bad value found.
  """
  del unused
  options.parse(vocabulary.WorkingSet, wss, "--wss")
  if wss == "dpwss":
    dpwss.check_settings(
        sigma=sigma, delta=delta, selection=selection, max_iter=max_iter,
        selection_epsilon=epsilon if total_epsilon is None else None,
        epsilon=total_epsilon, prefix="--", names=FLAG_NAMES)
  else:
    dpwss.check_selection(selection, "--selection")
    validation.check_delta(delta, "--delta")
  smo_train.check_solver_settings(c=c, eps=eps_stop, max_iter=max_iter,
                                  dtype=dtype, prefix="--",
                                  names=FLAG_NAMES)
  kernels.check_settings(kernel, gamma=gamma, coef0=coef0, degree=degree,
                         prefix="--")
  validation.check_positive_int(repeats, "--repeats")
  options.parse(vocabulary.Release, release, "--release")
  if release != "none":
    validation.check_epsilon(release_epsilon, "--release_epsilon")
    output_perturbation.check_linear_kernel(kernel)
    check_release_scaling(scaling)
  options.parse(vocabulary.Scaling, scaling, "--scaling")
  options.parse(vocabulary.EvalSplit, evaluate, "--eval")


def run_setting(*, dataset, data_dir=None, classes=None, scaling="auto",
                wss="dpwss", epsilon=1.0, sigma=0.5, c=1.0, kernel="rbf",
                gamma=None, coef0=0.0, degree=3, eps_stop=1e-3,
                shrinking=False, max_iter=None, release="none",
                release_epsilon=1.0, delta=dpwss.DEFAULT_DELTA, repeats=5,
                seed=0, dtype="float64", evaluate="train", baseline=None,
                prepared=None, total_epsilon=None,
                selection="paper", progress=None,
                memory_budget=None) -> dict:
  """Trains one setting (all repeats) and returns its JSON record.

  ``baseline`` is an optional WSS2 record of the same data/settings for
  objError and iterationRatio (run here when missing); ``prepared`` the
  output of :func:`prepare` to reuse. With ``total_epsilon`` (and
  ``max_iter``) the per-selection ε is derived from that total target:
  a real budget for ``selection="private"`` (2·max_iter draws), a nominal
  one for ``"paper"`` (max_iter draws, none of them DP).

  The record's ``"privacy"`` has exactly the fields of
  :data:`dpcore.accounting.PRIVACY_FIELDS`; DPWSS-specific figures are in
  ``"dpwss"`` (:meth:`mechanisms.svm.dpwss.DPWSSPlan.selection_report`
  plus what the privacy covers).

  ``memory_budget`` (bytes; None: unchecked) sizes the training before it
  starts (:func:`repeats_chunk`): the repeats run in chunks that fit, or
  the setting is refused in one line naming the estimate and the budget.
  """
  check_setting(wss=wss, selection=selection, epsilon=epsilon, sigma=sigma,
                c=c, kernel=kernel, gamma=gamma, coef0=coef0, degree=degree,
                eps_stop=eps_stop, max_iter=max_iter, release=release,
                release_epsilon=release_epsilon, delta=delta,
                repeats=repeats, total_epsilon=total_epsilon,
                scaling=scaling if prepared is None else prepared[4],
                evaluate=evaluate, dtype=dtype)
  plan = None
  if wss == "dpwss":
    plan_args = dict(sigma=sigma, delta=delta, selection=selection,
                     max_iter=max_iter)
    if total_epsilon is not None:  # split over the draws of max_iter
      plan = dpwss.make_plan(epsilon=total_epsilon, **plan_args)
      epsilon = plan.selection_epsilon
    else:
      plan = dpwss.make_plan(selection_epsilon=epsilon, **plan_args)
  if release != "none":
    release_epsilon = float(release_epsilon)
  if prepared is None:
    prepared = prepare(dataset, data_dir=data_dir, classes=classes,
                       scaling=scaling, evaluate=evaluate, release=release)
  x, y, x_eval, y_eval, scaling = prepared
  spec = kernels.KernelSpec(kernel, gamma=gamma, coef0=coef0,
                            degree=degree).resolve(x.shape[1])
  common_args = dict(kernel=spec, c=c, eps=eps_stop, shrinking=shrinking,
                     max_iter=max_iter, dtype=dtype,
                     memory_budget=memory_budget)
  if wss == "dpwss":
    repeats_chunk(x.shape, repeats=repeats, max_iter=max_iter, dtype=dtype,
                  memory_budget=memory_budget, progress=progress)
  key = jax.random.fold_in(jax.random.key(seed),
                           zlib.crc32(dataset.encode()))
  train_key, release_key = jax.random.split(key)
  if progress is not None:
    progress(f"{dataset}: {wss}"
             + (f" ({selection}, ε={epsilon:.4g}, σ={sigma:g}, "
                f"{repeats} repeats)" if wss == "dpwss" else "")
             + f", shrinking={bool(shrinking)}: compiling and training "
             f"on {x.shape[0]} rows")
  if wss == "wss2":
    model, compile_s, seconds = common.timed(
        lambda: smo_train.wss2_train(x, y, **common_args))
    models = [model]
  else:
    release_args = {k: v for k, v in common_args.items() if k != "max_iter"}
    # The solver's loop reports nothing until it ends: a line every
    # common.HEARTBEAT_S seconds says it is still running (host side; the
    # program and its results are untouched).
    cap = (max_iter if max_iter is not None
           else dpwss.pair_buffer_iterations(x.shape[0]))
    with common.heartbeat(f"{dataset}: dpwss (≤ {cap:,} iterations × "
                          f"{repeats} repeat(s))", progress=progress):
      run, compile_s, seconds = common.timed(
          lambda: dpwss.release(train_key, plan, x, y, repeats=repeats,
                                **release_args))
    models = list(run.models)
  per_repeat = []
  for m in models:
    rec = _report(y_eval, m.decision_function(x_eval))
    rec.update(obj=float(m.objective), bias=float(m.bias),
               iterations=int(m.iterations),
               exit_reason=m.exit_reason, n_sv=int(m.support.size))
    per_repeat.append(rec)
  iterations = [r["iterations"] for r in per_repeat]
  record = {
      "dataset": dataset, "classes": classes, "scaling": scaling,
      "eval": evaluate, "n_train": int(x.shape[0]),
      "n_eval": int(x_eval.shape[0]), "wss": wss,
      "selection": selection if wss == "dpwss" else None,
      "epsilon": epsilon if wss == "dpwss" else None,
      "sigma": sigma if wss == "dpwss" else None,
      "kernel": kernel, "c": c, "gamma": spec.gamma, "gamma_arg": gamma,
      "coef0": coef0,
      "degree": degree, "eps_stop": eps_stop, "shrinking": bool(shrinking),
      "max_iter": max_iter, "dtype": dtype, "repeats": len(models),
      "seed": seed, "release": release,
      "release_epsilon": release_epsilon if release != "none" else None,
      "total_epsilon_target": total_epsilon,
      **_mean_metrics(per_repeat),
      "obj": float(np.mean([r["obj"] for r in per_repeat])),
      "iterations": float(np.mean(iterations)),
      "exit_reason": sorted({r["exit_reason"] for r in per_repeat}),
      "per_repeat": per_repeat,
      "seconds": seconds, "compile_seconds": compile_s,
  }
  # Privacy of everything released, in one ledger.
  ledger = accounting.PrivacyLedger()
  release_rec = None
  if release != "none":
    release_plan = output_perturbation.make_plan(epsilon=release_epsilon,
                                                 c=c)
    release_plan.record(ledger)
    release_rec = _release(release_key, release_plan, x, y, x_eval, y_eval,
                           repeats=repeats)
  if wss == "dpwss":
    record["privacy"] = plan.report(ledger)
    record["dpwss"] = run.selection_report()
  elif release != "none":
    record["privacy"] = ledger.report(delta)
    record["dpwss"] = None
  else:
    record["privacy"] = accounting.no_guarantee_record(
        accounting.NON_PRIVATE)
    record["dpwss"] = None
  record["privacy_scope"] = (
      "everything the run publishes: the selection transcript (DPWSS) and "
      "any released_model; each repeat counts as its own run (one "
      "selection transcript and one release each)")
  record["model_is_private"] = release != "none"
  if release_rec is not None:
    record["released_model"] = release_rec
  record["privacy_note"] = _privacy_note(wss, selection)
  if wss == "dpwss":
    if baseline is None:
      baseline = run_setting(
          dataset=dataset, wss="wss2", c=c, kernel=kernel, gamma=gamma,
          coef0=coef0, degree=degree, eps_stop=eps_stop, shrinking=shrinking,
          max_iter=None, dtype=dtype, evaluate=evaluate, prepared=prepared,
          delta=delta, progress=progress, memory_budget=memory_budget)
    record["wss2_obj"] = baseline["obj"]
    record["wss2_iterations"] = baseline["iterations"]
    record["obj_error"] = abs(record["obj"] - baseline["obj"])
    record["iteration_ratio"] = record["iterations"] / max(
        baseline["iterations"], 1)
  return record


def _privacy_note(wss, selection) -> str:
  model = ("The trained SMO model is not differentially private; only a "
           "released_model from output perturbation is (model_is_private), "
           "with its own epsilon.")
  if wss != "dpwss":
    return model
  if selection == "paper":
    return ("The paper's DPWSS selection carries no DP guarantee "
            "(privacy.epsilon is null; the paper's figure is "
            "privacy.epsilon_nominal). " + model)
  return ("Private selection: privacy.epsilon covers the transcript of "
          "2T selected indices (replace-one neighbours). " + model)


# -- the private release and its scaling rules --------------------------------


def check_release_scaling(scaling) -> None:
  """A private release needs data-independent scaling (not ``minmax``)."""
  if scaling in ("minmax", "auto_minmax"):
    raise ValueError(
        f"--release=output_perturbation needs data-independent scaling; "
        f"--scaling={scaling} reads the data (min/max). Use --scaling="
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


# -- table mode ---------------------------------------------------------------

def _prepare_for_table(name: str, settings: dict):
  """The data set of one table row, prepared with the table's settings."""
  return prepare(name, data_dir=settings.get("data_dir"),
                 classes=settings.get("classes"),
                 scaling=settings.get("scaling", "auto"),
                 evaluate=settings.get("evaluate", "train"),
                 release="none")


def check_datasets(datasets, settings: dict) -> None:
  """Resolves every name of a ``--dataset=a,b`` list before any run.

  Raises:
    ValueError: an empty list or an unknown name.
    FileNotFoundError: a set's files are missing.
  """
  if not datasets:
    raise ValueError("--dataset: give at least one name (e.g. heart).")
  for name in datasets:
    data.check_dataset(name, data_dir=settings.get("data_dir"))


def _prepare_all(datasets, settings: dict, progress) -> dict:
  """Every data set of a table, loaded and checked before the first run."""
  check_datasets(datasets, settings)
  prepared = {}
  for name in datasets:
    progress(f"{name}: loading and checking")
    prepared[name] = _prepare_for_table(name, settings)
  return prepared


def _skipping(grid_args, done, name, progress) -> None:
  finished = sum(run_setting_key(a) in done for a in grid_args)
  if finished:
    progress(f"{name}: skipping {finished} finished runs (found in --out)")


# A private draw weighs its l indices by exp(ε·s/2) with scores s in
# [0, 1] (wss.PrivateWSS), so two weights differ by at most e^(ε/2): below
# this ε per draw (0.05 %) the selections are uniform for practical
# purposes and the run learns next to nothing from its budget.
NEAR_UNIFORM_EPSILON = 1e-3
# Iterations (over all repeats) from which a run is announced as long: the
# solver's loop runs on the device with no report until it ends.
LONG_RUN_ITERATIONS = 10_000_000


def setting_warning(*, wss="dpwss", selection="paper", epsilon=1.0,
                    total_epsilon=None, sigma=0.5, max_iter=None,
                    delta=dpwss.DEFAULT_DELTA, repeats=5, **unused
                    ) -> str | None:
  """A one-line warning, before any work, for a DPWSS setting that is
  useless (near-uniform private selections) or effectively endless (a
  long loop with no report until it ends); None for an ordinary one.

  Names the per-draw ε and the iterations the run is expected to take
  (``"private"`` runs exactly ``max_iter`` per repeat; ``"paper"`` at
  most ``max_iter``).
  """
  del unused
  if wss != "dpwss" or max_iter is None:
    return None
  if total_epsilon is not None:
    epsilon = dpwss.epsilon_per_iteration(
        total_epsilon, max_iter=max_iter, delta=delta, selection=selection)
  draws = max_iter * dpwss.selections_per_iteration(selection)
  iterations = max_iter * repeats
  exact = "exactly" if selection == "private" else "up to"
  problems = []
  if selection == "private" and epsilon < NEAR_UNIFORM_EPSILON:
    problems.append(
        f"the per-draw ε is {epsilon:.3g} (ε {total_epsilon:g} split over "
        f"{draws:,} draws), so every selection is uniform to within "
        f"e^(ε/2) - 1 = {math.expm1(epsilon / 2):.2g}"
        if total_epsilon is not None else
        f"the per-draw ε is {epsilon:.3g}, so every selection is uniform "
        f"to within e^(ε/2) - 1 = {math.expm1(epsilon / 2):.2g}")
  if iterations >= LONG_RUN_ITERATIONS or problems:
    problems.append(
        f"the run takes {exact} {max_iter:,} iterations × {repeats} "
        f"repeat(s) = {iterations:,}, reported only by a line every "
        f"{common.HEARTBEAT_S:g} s")
  if not problems:
    return None
  if len(problems) == 1:  # a long run only: say its ε too
    problems[0] += f" at a per-draw ε of {epsilon:.3g}"
  return ("warning: " + "; ".join(problems) + "; lower --max_iter or "
          "raise the ε if this is not what you meant.")


def repeats_chunk(shape, *, repeats, max_iter, dtype, memory_budget,
                  progress=None) -> int | None:
  """The repeats chunk of a DPWSS setting, from shapes (no work done).

  :func:`mechanisms.svm.dpwss.plan_repeats` with the command's flags in
  its messages; reports the chunk through ``progress`` when the repeats
  do not all fit at once.

  Raises:
    dpcore.memory.MemoryBudgetError: one line naming the estimate, the
      budget and the flags to change.
  """
  num, dim = shape
  if max_iter is None:
    max_iter = dpwss.pair_buffer_iterations(num)
  layout = dpwss.plan_repeats(num, dim, repeats=repeats, max_iter=max_iter,
                              dtype=dtype, memory_budget=memory_budget,
                              fix="--memory_budget")
  if layout.chunk is not None and progress is not None:
    progress(f"repeat chunk {layout.chunk} of {repeats} (estimated "
             f"{memory.size_text(layout.estimate)} of a "
             f"{memory.size_text(memory_budget)} memory budget; "
             f"--memory_budget or --repeats to change)")
  return layout.chunk


def run_table(*, datasets, out, table_md=None, progress=common.progress,
              **settings) -> list[dict]:
  """The paper's Table-3 grid on each dataset; resumes from ``out``.

  Every data set is loaded and checked before the first run; each record
  is printed, then appended to ``out`` (:func:`launch.common.emit_record`).
  """
  check_setting(**settings)
  prepared_all = _prepare_all(datasets, settings, progress)
  done = common.done_keys(out, KEY_FIELDS)
  records = []
  for d, name in enumerate(datasets, 1):
    progress(f"dataset {d}/{len(datasets)}: {name}")
    prepared = prepared_all[name]
    base_args = {k: v for k, v in settings.items() if k != "data_dir"}
    base_args.update(dataset=name, prepared=prepared)
    grid = [dict(base_args, shrinking=sh, wss="wss2") for sh in (True, False)]
    grid += [dict(base_args, shrinking=sh, wss="dpwss", epsilon=e, sigma=g)
             for sh in (True, False) for e, g in TABLE_GRID]
    _skipping(grid, done, name, progress)
    for shrinking in (True, False):
      args = dict(base_args, shrinking=shrinking)
      baseline = _cached(records, out, done, dict(args, wss="wss2"),
                         progress=progress)
      for eps, sig in TABLE_GRID:
        _cached(records, out, done,
                dict(args, wss="dpwss", epsilon=eps, sigma=sig),
                baseline=baseline, progress=progress)
  if table_md:
    all_records = common.read_jsonl(out)
    with open(table_md, "w", encoding="utf-8") as f:
      f.write(markdown_table(all_records, datasets,
                             classes=settings.get("classes")))
  return records


def _cached(records, out, done, args, baseline=None,
            progress=common.progress):
  probe = run_setting_key(args)
  if probe in done:
    for r in reversed(common.read_jsonl(out)):
      if common.record_key(r, KEY_FIELDS) == probe:
        records.append(r)
        return r
  rec = run_setting(baseline=baseline, progress=progress, **args)
  common.emit_record(rec, out)
  progress(f"{args['dataset']}: done in {rec['seconds']:.1f}s "
           f"(+{rec['compile_seconds']:.1f}s compiling), "
           f"{rec['iterations']:,.0f} iterations, accuracy "
           f"{rec['accuracy']:.4f}")
  records.append(rec)
  return rec


def run_setting_key(args) -> tuple:
  """The resume key a record of these arguments will have."""
  wss = args.get("wss", "dpwss")
  release = args.get("release", "none")
  epsilon = args.get("epsilon")
  if wss == "dpwss" and args.get("total_epsilon") is not None:
    epsilon = dpwss.epsilon_per_iteration(
        args["total_epsilon"], max_iter=args["max_iter"],
        delta=args.get("delta", dpwss.DEFAULT_DELTA),
        selection=args.get("selection", "paper"))
  probe = {
      "dataset": args["dataset"], "wss": wss,
      "selection": (args.get("selection", "paper") if wss == "dpwss"
                    else None),
      "epsilon": epsilon if wss == "dpwss" else None,
      "sigma": args.get("sigma") if wss == "dpwss" else None,
      "shrinking": bool(args.get("shrinking")),
      "kernel": args.get("kernel", "rbf"), "c": args.get("c", 1.0),
      "gamma_arg": args.get("gamma"), "eps_stop": args.get("eps_stop", 1e-3),
      "repeats": 1 if wss == "wss2" else args.get("repeats", 5),
      "seed": args.get("seed", 0), "release": release,
      "release_epsilon": (args.get("release_epsilon")
                          if release != "none" else None),
      "scaling": args["prepared"][4], "eval": args.get("evaluate", "train"),
      "dtype": args.get("dtype", "float64"),
      "classes": (list(args["classes"]) if args.get("classes") else None),
      "max_iter": args.get("max_iter"),
      "total_epsilon_target": args.get("total_epsilon"),
  }
  return common.record_key(probe, KEY_FIELDS)


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
              and r.get("selection") != "private"
              and r.get("classes") == want
              and r["shrinking"] == shrinking and r.get("epsilon") == eps
              and r.get("sigma") == sig):
            return r
        return None
      cols = [pick("wss2")] + [pick("dpwss", e, s) for e, s in TABLE_GRID]
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
    if record["wss"] != "dpwss":
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


# -- private selection against the paper's -----------------------------------

def run_selection_comparison(*, datasets, out, table_md=None,
                             paper_settings=PAPER_SETTINGS,
                             total_epsilons=PRIVATE_TOTAL_EPSILONS,
                             iterations=PRIVATE_ITERATIONS,
                             sigma=PRIVATE_SIGMA, progress=common.progress,
                             **settings) -> list[dict]:
  """WSS2, the paper's selection and the private one, on each dataset.

  Shrinking off everywhere (the private selection scores every row). The
  paper's runs use (nominal ε, σ) from ``paper_settings`` and stop on their
  own; the private runs spend each total ε of ``total_epsilons`` (at the
  run's δ) over exactly T iterations, T from ``iterations``. Resumes from
  ``out``; writes :func:`selection_markdown` to ``table_md``.
  """
  settings = {k: v for k, v in settings.items()
              if k not in ("shrinking", "max_iter", "selection",
                           "total_epsilon")}
  check_setting(**settings, sigma=sigma)
  for total in total_epsilons:
    validation.check_epsilon(total, "--total_epsilons")
  for steps in iterations:
    validation.check_positive_int(steps, "--iterations")
  prepared_all = _prepare_all(datasets, settings, progress)
  done = common.done_keys(out, KEY_FIELDS)
  records = []
  for d, name in enumerate(datasets, 1):
    progress(f"dataset {d}/{len(datasets)}: {name}")
    base_args = {k: v for k, v in settings.items() if k != "data_dir"}
    base_args.update(dataset=name, shrinking=False,
                     prepared=prepared_all[name])
    grid = [dict(base_args, wss="wss2")]
    grid += [dict(base_args, wss="dpwss", selection="paper", epsilon=eps,
                  sigma=sig) for eps, sig in paper_settings]
    grid += [dict(base_args, wss="dpwss", selection="private", sigma=sigma,
                  max_iter=int(steps), total_epsilon=float(total))
             for steps in iterations for total in total_epsilons]
    _skipping(grid, done, name, progress)
    baseline = _cached(records, out, done, grid[0], progress=progress)
    for args in grid[1:]:
      _cached(records, out, done, args, baseline=baseline,
              progress=progress)
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
      sel = r.get("selection") if r["wss"] == "dpwss" else None
      latest[(r["wss"], sel, r.get("epsilon"), r.get("sigma"),
              r.get("max_iter"), r.get("total_epsilon_target"))] = r
    for r in latest.values():
      privacy = r["privacy"]
      if r["wss"] == "wss2":
        label, draw, guarantee = "WSS2 (LIBSVM)", "–", "none (no noise)"
      elif r["selection"] == "paper":
        label = f"paper, σ={r['sigma']:g}"
        draw = f"{r['epsilon']:g} (nominal)"
        guarantee = "none (paper claims {:g})".format(
            privacy["epsilon_nominal"])
      else:
        label = f"private, σ={r['sigma']:g}, T={r['max_iter']}"
        draw = f"{r['epsilon']:.3g}"
        guarantee = f"{privacy['epsilon']:.3g} ({privacy['delta']:g})"
      lines.append(
          f"| {name} | {label} | {draw} | {guarantee} | {r['obj']:.2f} | "
          f"{r['accuracy']:.4f} | {r['iterations']:,.0f} |")
  return "\n".join(lines) + "\n"
