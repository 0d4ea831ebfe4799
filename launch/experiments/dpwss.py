"""Experiment logic of ``launch.dpwss`` (no flags; importable anywhere).

See ``launch/dpwss.py`` for the protocol, scaling and privacy notes.
"""

from __future__ import annotations

import zlib

import jax
import numpy as np

from dpcore import accounting, metrics
from launch import common
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

def _binary_labels(y, classes):
  y = np.asarray(y)
  values = np.unique(y)
  if classes is not None:
    pos, neg = classes
    keep = (y == pos) | (y == neg)
    return keep, np.where(y[keep] == pos, 1.0, -1.0)
  if len(values) != 2:
    raise ValueError(
        f"the dataset has {len(values)} classes; pick two with "
        f"--classes=POS,NEG (e.g. --classes=3,8).")
  return np.ones(y.shape, bool), np.where(y == values.max(), 1.0, -1.0)


def _scale(x, ds, scaling, fit_rows):
  if scaling == "none":
    return x
  if scaling == "minmax":
    low, high = fit_rows.min(axis=0), fit_rows.max(axis=0)
    span = np.where(high > low, high - low, 1.0)
    return 2.0 * (x - low) / span - 1.0
  if scaling == "box":
    return data.scale_to_box(x, ds.bounds).astype(np.float64)
  if scaling == "unit_rows":
    return data.unit_rows(x, ds.bounds).astype(np.float64)
  return x / np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))


def prepare(name, *, data_dir, classes, scaling, evaluate, release):
  """Loads a dataset as float64 ±1 train/eval arrays and the scaling used."""
  ds = data.load_dataset(name, data_dir=data_dir)
  if scaling in ("auto", "auto_minmax"):
    if ds.bounds is not None:
      scaling = "box"
    elif name.startswith("svmlight:"):
      scaling = "none"
    elif scaling == "auto_minmax":
      scaling = "minmax"
    else:
      raise ValueError(
          f"{name!r} has no public feature bounds, and min/max scaling reads "
          f"the data, outside any guarantee. Pass --scaling=auto_minmax to "
          f"min/max-scale such sets as LIBSVM's svm-scale did for the "
          f"paper (labelled 'minmax' in the record), or a data-independent "
          f"--scaling=unit_rows, unit_ball or none.")
  if release != "none":
    if scaling == "minmax":
      raise ValueError("--release=output_perturbation needs data-independent "
                       "scaling; minmax reads the data. Use --scaling="
                       "unit_rows, unit_ball or none.")
  keep, y_train = _binary_labels(ds.y_train, classes)
  x_train = np.asarray(ds.x_train, np.float64)[keep]
  if evaluate == "test":
    if ds.x_test is None:
      raise ValueError(f"{name} has no test split; use --eval=train.")
    keep_t, y_eval = _binary_labels(ds.y_test, classes)
    x_eval = np.asarray(ds.x_test, np.float64)[keep_t]
  else:
    x_eval, y_eval = x_train, y_train
  fit = x_train
  x_train = _scale(x_train, ds, scaling, fit)
  x_eval = _scale(x_eval, ds, scaling, fit)
  if release != "none" and scaling != "unit_ball":
    x_train = _scale(x_train, ds, "unit_ball", None)
    x_eval = _scale(x_eval, ds, "unit_ball", None)
  return x_train, y_train, x_eval, y_eval, scaling


# -- one setting --------------------------------------------------------------

def _report(y, scores) -> dict:
  rep = metrics.binary_report(np.asarray(y, np.int32), np.asarray(scores))
  return {k: float(rep[k]) for k in METRICS}


def _mean_metrics(per_repeat):
  return {k: float(np.mean([r[k] for r in per_repeat])) for k in METRICS}


def run_setting(*, dataset, data_dir=None, classes=None, scaling="auto",
                wss="dpwss", epsilon=1.0, sigma=0.5, c=1.0, kernel="rbf",
                gamma=None, coef0=0.0, degree=3, eps_stop=1e-3,
                shrinking=False, max_iter=None, release="none",
                release_epsilon=1.0, delta=dpwss.DEFAULT_DELTA, repeats=5,
                seed=0, dtype="float64", evaluate="train", baseline=None,
                prepared=None, total_epsilon=None,
                selection="paper") -> dict:
  """Trains one setting (all repeats) and returns its JSON record.

  ``baseline`` is an optional WSS2 record of the same data/settings for
  objError and iterationRatio (run here when missing); ``prepared`` the
  output of :func:`prepare` to reuse. With ``total_epsilon`` (and
  ``max_iter``) the per-selection ε is derived from that total target:
  a real budget for ``selection="private"`` (2·max_iter draws), a nominal
  one for ``"paper"`` (max_iter draws, none of them DP).
  """
  dpwss.check_selection(selection)
  if total_epsilon is not None and wss == "dpwss":
    if max_iter is None:
      raise ValueError("--total_epsilon needs --max_iter: the budget is "
                       "split over the selections of max_iter iterations.")
    epsilon = dpwss.epsilon_per_iteration(total_epsilon, max_iter=max_iter,
                                          delta=delta, selection=selection)
  if release != "none":
    output_perturbation.check_linear_kernel(kernel)
    release_epsilon = float(release_epsilon)
  if prepared is None:
    prepared = prepare(dataset, data_dir=data_dir, classes=classes,
                       scaling=scaling, evaluate=evaluate, release=release)
  x, y, x_eval, y_eval, scaling = prepared
  spec = kernels.KernelSpec(kernel, gamma=gamma, coef0=coef0,
                            degree=degree).resolve(x.shape[1])
  common_args = dict(kernel=spec, c=c, eps=eps_stop, shrinking=shrinking,
                     max_iter=max_iter, dtype=dtype)
  key = jax.random.fold_in(jax.random.key(seed),
                           zlib.crc32(dataset.encode()))
  train_key, release_key = jax.random.split(key)
  if wss == "wss2":
    model, compile_s, seconds = common.timed(
        lambda: smo_train.wss2_train(x, y, **common_args))
    models = [model]
  else:
    run, compile_s, seconds = common.timed(
        lambda: dpwss.dpwss_train(train_key, x, y, epsilon=epsilon,
                                  sigma=sigma, repeats=repeats,
                                  selection=selection, **common_args))
    models = list(run.models)
  per_repeat = []
  for m in models:
    rec = _report(y_eval, m.decision_function(x_eval))
    rec.update(obj=m.objective, iterations=m.iterations,
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
  ledger = None
  release_rec = None
  if release != "none":
    ledger = _ledger_with_release(release_epsilon)
    release_rec = _release(release_key, x, y, x_eval, y_eval, c=c,
                           epsilon=release_epsilon, repeats=repeats)
  if wss == "dpwss":
    record["privacy"] = dpwss.privacy_report(
        epsilon, max(iterations), selection=selection, delta=delta,
        ledger=ledger)
  elif ledger is not None:
    g = ledger.guarantee(delta)
    record["privacy"] = {
        "epsilon_per_selection": None, "iterations": max(iterations),
        "epsilon_nominal": None, "epsilon_basic": g.basic_epsilon,
        "epsilon": g.epsilon, "delta": g.delta}
  else:
    record["privacy"] = {
        "epsilon_per_selection": None, "iterations": max(iterations),
        "epsilon_nominal": None, "epsilon_basic": float("inf"),
        "epsilon": float("inf"), "delta": None}
  record["privacy"]["covers"] = (
      "everything the run publishes: the selection transcript (DPWSS) and "
      "any released_model; per run, the repeats are independent runs")
  record["model_is_private"] = release != "none"
  if release_rec is not None:
    record["released_model"] = release_rec
  record["privacy_note"] = _privacy_note(wss, selection)
  if wss == "dpwss":
    if baseline is None:
      baseline = run_setting(
          dataset=dataset, wss="wss2", c=c, kernel=kernel, gamma=gamma,
          coef0=coef0, degree=degree, eps_stop=eps_stop, shrinking=shrinking,
          max_iter=None, dtype=dtype, evaluate=evaluate, prepared=prepared)
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


def _ledger_with_release(epsilon):
  ledger = accounting.PrivacyLedger()
  ledger.record_pure(epsilon, label="output_perturbation")
  return ledger


def _release(key, x, y, x_eval, y_eval, *, c, epsilon, repeats) -> dict:
  """Output-perturbed linear models (one noise draw per repeat)."""
  releases = output_perturbation.private_linear_svms(
      jax.random.split(key, repeats), x, y, c=c, epsilon=epsilon)
  per = [_report(y_eval, rel.decision_function(x_eval)) for rel in releases]
  return {"epsilon": epsilon, "delta": 0.0,
          "privacy_scope": "the released (w, b) alone, fitted on the data "
                           "independently of the SMO run",
          "sensitivity": 2 * c,
          "noise_scale": 2 * c / epsilon,
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


def run_table(*, datasets, out, table_md=None, **settings) -> list[dict]:
  """The paper's Table-3 grid on each dataset; resumes from ``out``."""
  done = common.done_keys(out, KEY_FIELDS)
  records = []
  for name in datasets:
    prepared = _prepare_for_table(name, settings)
    for shrinking in (True, False):
      base_args = {k: v for k, v in settings.items()
                   if k not in ("data_dir",)}
      base_args.update(dataset=name, shrinking=shrinking, prepared=prepared)
      baseline = _cached(records, out, done, dict(base_args, wss="wss2"))
      for eps, sig in TABLE_GRID:
        _cached(records, out, done,
                dict(base_args, wss="dpwss", epsilon=eps, sigma=sig),
                baseline=baseline)
  if table_md:
    all_records = common.read_jsonl(out)
    with open(table_md, "w", encoding="utf-8") as f:
      f.write(markdown_table(all_records, datasets,
                             classes=settings.get("classes")))
  return records


def _cached(records, out, done, args, baseline=None):
  probe = run_setting_key(args)
  if probe in done:
    for r in reversed(common.read_jsonl(out)):
      if common.record_key(r, KEY_FIELDS) == probe:
        records.append(r)
        return r
  common.progress(f"{args['dataset']} {args['wss']} "
                  f"{args.get('selection', '')} eps={args.get('epsilon')} "
                  f"total={args.get('total_epsilon')} "
                  f"T={args.get('max_iter')} sigma={args.get('sigma')} "
                  f"shrinking={args['shrinking']}")
  rec = run_setting(baseline=baseline, **args)
  common.append_jsonl(out, rec)
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
    return privacy.get(metric)
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
                             sigma=PRIVATE_SIGMA, **settings) -> list[dict]:
  """WSS2, the paper's selection and the private one, on each dataset.

  Shrinking off everywhere (the private selection scores every row). The
  paper's runs use (nominal ε, σ) from ``paper_settings`` and stop on their
  own; the private runs spend each total ε of ``total_epsilons`` (at the
  run's δ) over exactly T iterations, T from ``iterations``. Resumes from
  ``out``; writes :func:`selection_markdown` to ``table_md``.
  """
  done = common.done_keys(out, KEY_FIELDS)
  records = []
  settings = {k: v for k, v in settings.items() if k != "shrinking"}
  for name in datasets:
    prepared = _prepare_for_table(name, settings)
    base_args = {k: v for k, v in settings.items()
                 if k not in ("data_dir", "max_iter")}
    base_args.update(dataset=name, shrinking=False, prepared=prepared)
    baseline = _cached(records, out, done, dict(base_args, wss="wss2"))
    for eps, sig in paper_settings:
      _cached(records, out, done,
              dict(base_args, wss="dpwss", selection="paper", epsilon=eps,
                   sigma=sig), baseline=baseline)
    for steps in iterations:
      for total in total_epsilons:
        _cached(records, out, done,
                dict(base_args, wss="dpwss", selection="private",
                     sigma=sigma, max_iter=int(steps),
                     total_epsilon=float(total)), baseline=baseline)
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
