"""Experiment logic of ``launch.dplvq`` (no flags; importable anywhere).

:class:`Settings` holds what the command line sets; :func:`run_setting` runs
one (model, trainer, ε) setting through repeated k-fold CV and returns its
record; :func:`table` runs the Table 1 / Fig. 1 grid with resume;
:func:`run_tuning` selects a setting from a candidate list privately
(``dpcore.tuning``). See ``launch/dplvq.py`` for the command line.

The defaults of :class:`Settings` (q = 0.01, C = 0.5, 50 epochs, learning
rate 0.05, ε₁/ε = 0.2) are the paper's recipe, fixed before any data were
seen; nothing here picks them by looking at results on the data. Choosing
among several recipes on the data is a release, and goes through
:func:`run_tuning`, whose guarantee covers it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zlib

import jax
import numpy as np

from dpcore import accounting, clipping, dpsgd, tuning, validation
from dpcore.options import LVQModel
from launch import common
from launch.data import loaders as data
from launch.experiments import lvq_eval
from mechanisms.lvq import train as lvq_train

KEY_FIELDS = ("dataset", "model", "trainer", "epsilon", "delta", "q", "clip",
              "epochs", "learning_rate", "sigma_rule", "folds", "repeats",
              "seed", "scaling", "rank", "normalise", "phi", "init_variant",
              "tune")
DEFAULT_LR = {"glvq": 0.05, "gmlvq": 0.05}
DEFAULT_MAX_STEPS = 200_000
# --bounds=LOW,HIGH is refused when it covers less than this share of a
# set's public range (most values would be clipped to the box's faces).
MIN_BOUNDS_COVERAGE = 0.5


@dataclasses.dataclass(frozen=True)
class Settings:
  """Everything shared by the settings of one run or table (flag values).

  ``lr`` None means :data:`DEFAULT_LR`; ``train_on`` ``"auto"`` means one
  fold for MNIST (the paper) and the other folds elsewhere.
  """
  delta: float = 1e-5
  q: float = 0.01
  clip: float = 0.5
  epochs: int = 50
  lr: float | None = None
  sigma_rule: str = "accountant"
  init_fraction: float = 0.2
  init_mechanism: str = "laplace"
  folds: int = 5
  repeats: int = 5
  train_on: str = "auto"
  rank: int | None = None
  normalise: bool = False
  phi: str = "identity"
  prototypes_per_class: int = 1
  bfgs_iterations: int = 100
  parallel: int = 5
  ghost_clipping: bool = True
  seed: int = 0
  memory_budget: int | None = None

  def learning_rate(self, model: str) -> float:
    return self.lr or DEFAULT_LR[model]

  def init_variant(self):
    # None for the paper's Laplace init, so records written before the
    # Gaussian option existed keep matching (resume keys).
    return None if self.init_mechanism == "laplace" else self.init_mechanism


@dataclasses.dataclass(frozen=True)
class Prepared:
  """Pooled data in [−1, 1]^d, class indices, and how it was scaled."""
  dataset: str
  x: np.ndarray
  y: np.ndarray
  num_classes: int
  scaling: str


def _flag(flag, value, ok, fix):
  if not ok:
    raise ValueError(f"{flag}={value!r}: {fix}")


# The flags of launch.dplvq whose names differ from the library's.
FLAG_NAMES = {"sampling_rate": "q", "clip_norm": "clip",
              "learning_rate": "lr", "phi_kind": "phi"}


def check_settings(s: Settings, *, max_steps: int = DEFAULT_MAX_STEPS
                   ) -> int:
  """Refuses bad shared settings before any data is read; returns T.

  The model's and the plan's settings are checked by the library
  (:meth:`lvq_train.TrainConfig.validate`,
  :func:`lvq_train.check_plan_settings`), the protocol's here; every
  message names the flag and the value. T = round(E/q) is the number of
  (DP-)SGD steps of one run; above ``max_steps`` the setting is refused
  (``--max_steps`` allows it).
  """
  lvq_train.check_plan_settings(
      epsilon=None, delta=s.delta, sampling_rate=s.q, epochs=s.epochs,
      clip_norm=s.clip, init_fraction=s.init_fraction,
      sigma_rule=s.sigma_rule, init_mechanism=s.init_mechanism,
      prefix="--", names=FLAG_NAMES)
  lvq_train.TrainConfig(
      model="glvq", trainer="sgd", rank=s.rank, normalise=s.normalise,
      phi_kind=s.phi, epochs=s.epochs, sampling_rate=s.q,
      learning_rate=DEFAULT_LR["glvq"] if s.lr is None else s.lr,
      prototypes_per_class=s.prototypes_per_class,
      bfgs_iterations=s.bfgs_iterations,
      ghost_clipping=s.ghost_clipping).validate(prefix="--",
                                                names=FLAG_NAMES)
  _flag("--folds", s.folds, isinstance(s.folds, int) and s.folds >= 2,
        "k-fold cross-validation needs at least 2 folds (e.g. --folds=5).")
  _flag("--repeats", s.repeats, isinstance(s.repeats, int) and s.repeats >= 1,
        "give at least 1 repeat.")
  _flag("--train_on", s.train_on,
        s.train_on in ("auto", "one_fold", "other_folds"),
        "choose auto, one_fold or other_folds.")
  _flag("--parallel", s.parallel,
        isinstance(s.parallel, int) and s.parallel >= 1, "give at least 1.")
  _flag("--memory_budget", s.memory_budget, s.memory_budget is None or (
      isinstance(s.memory_budget, int) and s.memory_budget >= 1),
        "give a size such as 8G, or auto.")
  _flag("--max_steps", max_steps,
        isinstance(max_steps, int) and max_steps >= 1, "give at least 1.")
  steps = lvq_eval.sgd_steps(s.epochs, s.q)
  if steps > max_steps:
    raise ValueError(
        f"--q={s.q:g} with --epochs={s.epochs} means T = E/q = {steps:,} "
        f"SGD steps per run ({s.folds * s.repeats} runs), above "
        f"--max_steps={max_steps:,}; raise --q or lower --epochs, or pass "
        f"--max_steps={steps} to run it anyway.")
  return steps


def check_run(*, model: str, trainer: str, epsilon) -> None:
  """Refuses a bad (model, trainer, ε) of a single run (by the library's
  checks, naming the flags)."""
  lvq_train.TrainConfig(model=model, trainer=trainer).validate(prefix="--")
  if trainer == "dpsgd":
    validation.check_epsilon(epsilon, "--epsilon")


def parse_models(text: str) -> list[str]:
  """``"glvq,gmlvq"`` → the list, refusing unknown names."""
  models = [m.strip() for m in text.split(",") if m.strip()]
  bad = [m for m in models if m not in list(LVQModel)]
  if bad or not models:
    raise ValueError(f"--models={text!r}: unknown model(s) {bad}; give a "
                     f"comma-separated subset of {', '.join(LVQModel)}.")
  return models


def parse_epsilons(flag: str, text: str) -> list[float]:
  """``"0.75,1.5"`` → floats > 0, or a message naming ``flag``."""
  try:
    values = common.parse_floats(text)
  except ValueError:
    raise ValueError(f"{flag}={text!r}: expected comma-separated numbers "
                     f"(e.g. 0.75,1.5,2.5).") from None
  bad = [v for v in values if not (np.isfinite(v) and v > 0)]
  if bad:
    raise ValueError(f"{flag}={text!r}: every ε must be > 0, got {bad}.")
  return values


def parse_bounds(bounds: str):
  """``--bounds``: ``"auto"``, ``"data_minmax"`` or ``(low, high)``."""
  if bounds in ("auto", "data_minmax"):
    return bounds
  try:
    parsed = common.parse_floats(bounds)
  except ValueError:
    parsed = []
  if len(parsed) != 2 or not (np.all(np.isfinite(parsed))
                              and parsed[0] < parsed[1]):
    raise ValueError(f"--bounds={bounds!r}: give LOW,HIGH with LOW < HIGH "
                     f"(e.g. --bounds=0,255), 'auto' or 'data_minmax'.")
  return tuple(parsed)


def check_bounds(name: str, bounds: str) -> None:
  """Refuses ``--bounds`` that would clip most of a set's public range.

  Needs no data: compares ``LOW,HIGH`` with the set's public bounds, when
  it has some; refuses ``auto`` on a set without public bounds.
  """
  box = parse_bounds(bounds)
  public = data.public_bounds(name)
  if box == "auto":
    if public is None:
      _no_public_bounds(name)
    return
  if box == "data_minmax" or public is None:
    return
  low, high = public
  covered = max(0.0, min(high, box[1]) - max(low, box[0])) / (high - low)
  if covered < MIN_BOUNDS_COVERAGE:
    raise ValueError(
        f"--bounds={bounds}: {name!r} has public bounds [{low:g}, "
        f"{high:g}], of which [{box[0]:g}, {box[1]:g}] covers "
        f"{100 * covered:.0f}%: most values would be clipped to the faces "
        f"of the box. Use --bounds=auto (the public bounds) or bounds "
        f"that cover the data's range.")


def _no_public_bounds(name):
  raise ValueError(
      f"{name!r} has no public feature bounds, and reading them off the "
      f"data would be a query on the private data that no guarantee "
      f"covers. Pass --bounds=LOW,HIGH if public bounds are known, or "
      f"--bounds=data_minmax to reproduce the paper's min/max scaling, "
      f"labelled in the records as not covered by the guarantee.")


def prepare(name: str, data_dir: str | None = None,
            bounds: str = "auto") -> Prepared:
  """Loads and pools a data set and maps it to [−1, 1]^d.

  ``bounds`` is one of:

  * ``"auto"``: the data set's public bounds (pixels: (0, 255); HAR:
    (−1, 1)). A data set without them (Segment, WDBC) is refused: name the
    bounds.
  * ``"LOW,HIGH"``: public bounds given by the user.
  * ``"data_minmax"``: the pooled data's per-feature min and max. They are
    statistics of the private data, so the reported guarantee does not
    cover this step; records say ``"privacy_covers_scaling": false``. It
    reproduces the papers' setting and has to be asked for by name.

  Raises:
    ValueError: malformed ``bounds``, or ``"auto"`` for a data set without
      public bounds.
  """
  parsed = parse_bounds(bounds)
  ds = data.load_dataset(name, data_dir=data_dir)
  x, y = ds.x_train, ds.y_train
  if ds.x_test is not None:
    x = np.concatenate([x, ds.x_test])
    y = np.concatenate([y, ds.y_test])
  if parsed == "data_minmax":
    # Not private: the min/max are statistics of the data (see docstring).
    low, high = x.min(axis=0), x.max(axis=0)
    high = np.where(high > low, high, low + 1.0)
    box, scaling = (low, high), "data_minmax"
  elif parsed != "auto":
    box, scaling = parsed, "public_bounds_flag"
    if ds.bounds is None:
      # A warning for the operator only; nothing is released from it.
      outside = float(np.mean((x < box[0]) | (x > box[1])))
      if outside > MIN_BOUNDS_COVERAGE:
        common.progress(
            f"warning: --bounds={bounds}: {100 * outside:.0f}% of "
            f"{name!r}'s values lie outside [{box[0]:g}, {box[1]:g}] and "
            f"will be clipped to the box's faces.")
  elif ds.bounds is not None:
    box, scaling = ds.bounds, "public_bounds"
  else:
    _no_public_bounds(name)
  x = np.asarray(clipping.scale_to_box(x, box))
  y = np.searchsorted(np.asarray(ds.classes), y)
  return Prepared(name, x, y.astype(np.int32), len(ds.classes), scaling)


def run_setting(key: jax.Array, prepared: Prepared, settings: Settings, *,
                model: str, trainer: str, epsilon: float | None,
                progress=common.progress) -> dict:
  """One (model, trainer, ε) setting through repeated k-fold CV → record."""
  s = settings
  train_on = s.train_on
  if train_on == "auto":
    train_on = "one_fold" if prepared.dataset == "mnist" else "other_folds"
  # Same splits for every setting (fold_in 0); a training key per setting,
  # derived from its name, so no two settings share noise.
  tag = zlib.crc32(f"{model}/{trainer}/{epsilon}".encode())
  setting = lvq_eval.TrainingSetting(
      num_classes=prepared.num_classes, model=model, trainer=trainer,
      epsilon=epsilon, delta=s.delta, sampling_rate=s.q, clip_norm=s.clip,
      epochs=s.epochs, learning_rate=s.learning_rate(model),
      sigma_rule=s.sigma_rule, init_fraction=s.init_fraction, rank=s.rank,
      normalise=s.normalise, phi_kind=s.phi,
      prototypes_per_class=s.prototypes_per_class,
      bfgs_iterations=s.bfgs_iterations, ghost_clipping=s.ghost_clipping,
      init_mechanism=s.init_mechanism)
  protocol = lvq_eval.Protocol(
      folds=s.folds, repeats=s.repeats,
      train_on_one_fold=train_on == "one_fold", parallel_runs=s.parallel,
      memory_budget=s.memory_budget)
  record = lvq_eval.evaluate_setting(
      jax.random.fold_in(key, 0),
      jax.random.fold_in(jax.random.fold_in(key, 1), tag), prepared.x,
      prepared.y, setting, protocol, progress=progress)
  return {"dataset": prepared.dataset, **record, "sigma_rule": s.sigma_rule,
          "parallel": s.parallel,
          "scaling": prepared.scaling,
          "privacy_covers_scaling": prepared.scaling != "data_minmax",
          "seed": s.seed, "platform": jax.default_backend(),
          "init_variant": s.init_variant()}


def _probe(prepared: Prepared, s: Settings, model, trainer, eps, tune=None
           ) -> dict:
  """The resume key fields of a setting, before it is run."""
  return {"dataset": prepared.dataset, "model": model, "trainer": trainer,
          "epsilon": eps, "delta": s.delta, "q": s.q, "clip": s.clip,
          "epochs": s.epochs, "learning_rate": s.learning_rate(model),
          "sigma_rule": s.sigma_rule, "folds": s.folds,
          "repeats": s.repeats, "seed": s.seed, "scaling": prepared.scaling,
          "rank": s.rank, "normalise": s.normalise, "phi": s.phi,
          "init_variant": s.init_variant(), "tune": tune}


def is_done(done: set, prepared: Prepared, s: Settings, model, trainer,
            eps, *, tune: dict | None = None) -> bool:
  """Whether ``done`` (:func:`launch.common.done_keys`) holds this run.

  ``tune``: :meth:`TuneOptions.describe` of a tuning (None otherwise).
  """
  probe = _probe(prepared, s, model, trainer,
                 eps if trainer == "dpsgd" else None, tune)
  return common.record_key(probe, KEY_FIELDS) in done


def table(prepared: Prepared, settings: Settings, *, out: str, models,
          table_eps, figure_eps) -> dict:
  """Table 1 + Fig. 1: runs what ``out`` lacks, then writes both.

  Finished runs found in ``out`` are skipped (said once); each new record
  is printed, then appended (:func:`launch.common.emit_record`). Settings
  run cheap first (SGD, then DP-SGD by ε), full-batch L-BFGS
  (costly for GMLVQ) last; each record is appended to ``out`` as soon as
  it is done, so an interrupted table resumes where it stopped. Writes
  ``<out stem>_table.md`` and ``<out stem>_fig1.png``.
  """
  s = settings
  key = jax.random.key(s.seed)
  eps_all = sorted(set(table_eps) | set(figure_eps))
  grid = [(m, "sgd", None) for m in models]
  grid += [(m, "dpsgd", e) for e in eps_all for m in models]
  grid += [(m, "bfgs", None) for m in models]
  done = common.done_keys(out, KEY_FIELDS)
  todo = [g for g in grid if not is_done(done, prepared, s, *g)]
  if len(todo) < len(grid):
    common.progress(f"skipping {len(grid) - len(todo)} finished runs "
                    f"(found in {out})")
  last = None
  for i, (model, trainer, eps) in enumerate(todo, 1):
    common.progress(f"setting {i}/{len(todo)}: {model} {trainer} ε={eps}")
    last = run_setting(key, prepared, s, model=model, trainer=trainer,
                       epsilon=eps)
    common.emit_record(last, out)
    common.progress(f"done: {model} {trainer} ε={eps}: error "
                    f"{last['error_mean']:.4f} ({last['error_std']:.4f}) in "
                    f"{last['seconds']:.0f}s")
  mine = [r for r in common.read_jsonl(out)
          if r.get("tune") is None and all(r.get(f) == v for f, v in (
              ("dataset", prepared.dataset), ("delta", s.delta),
              ("q", s.q), ("clip", s.clip), ("epochs", s.epochs),
              ("folds", s.folds), ("repeats", s.repeats),
              ("seed", s.seed), ("sigma_rule", s.sigma_rule),
              ("init_variant", s.init_variant())))]
  stem = os.path.splitext(out)[0]
  text = write_table(mine, stem + "_table.md", table_eps)
  write_figure(mine, stem + "_fig1.png", prepared.dataset)
  common.progress("table:\n" + text)
  return {"dataset": prepared.dataset, "table": stem + "_table.md",
          "figure": stem + "_fig1.png", "records": len(mine), "last": last}
def _fmt(records, model, trainer, eps=None):
  for r in records:
    if r["model"] == model and r["trainer"] == trainer and (
        eps is None or r["epsilon"] == eps):
      return f"{r['error_mean']:.4f} ({r['error_std']:.4f})"
  return "–"


def write_table(records, path, table_eps):
  """Markdown Table 1: rows GLVQ/GMLVQ, columns DP ε..., SGD, BFGS."""
  head = ([f"DP ε = {e:g}" for e in table_eps]
          + ["non priv. SGD", "non priv. BFGS"])
  lines = ["| model | " + " | ".join(head) + " |",
           "|---" * (len(head) + 1) + "|"]
  for model in ("glvq", "gmlvq"):
    cells = [_fmt(records, model, "dpsgd", e) for e in table_eps]
    cells += [_fmt(records, model, "sgd"), _fmt(records, model, "bfgs")]
    lines.append(f"| {model.upper()} | " + " | ".join(cells) + " |")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return "\n".join(lines)


def write_figure(records, path, dataset):
  """Fig. 1: test error against ε (GLVQ dashed, GMLVQ solid)."""
  import matplotlib
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt
  from matplotlib import ticker

  fig, ax = plt.subplots(figsize=(5, 3.5))
  for model, style in (("glvq", "--"), ("gmlvq", "-")):
    pts = sorted((r["epsilon"], r["error_mean"], r["error_std"])
                 for r in records
                 if r["model"] == model and r["trainer"] == "dpsgd")
    if pts:
      e, m, s = map(np.asarray, zip(*pts, strict=True))
      line = ax.errorbar(e, m, yerr=s, fmt="o" + style, ms=3,
                         label=f"DP-{model.upper()}")
      base = [r for r in records
              if r["model"] == model and r["trainer"] == "sgd"]
      if base:
        ax.axhline(base[0]["error_mean"], ls=":", lw=1,
                   color=line[0].get_color(),
                   label=f"{model.upper()} SGD (non-private)")
  ax.set_xscale("log")
  ticks = sorted({r["epsilon"] for r in records if r["trainer"] == "dpsgd"})
  if ticks:
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
  ax.set_xlabel("target total ε (δ = 1e-5)")
  ax.set_ylabel("test error")
  ax.set_title(dataset)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)




# -- private selection among candidate recipes (--tune) ------------------------

TUNE_KEYS = {"lr": "lr", "learning_rate": "lr", "clip": "clip",
             "epochs": "epochs", "q": "q", "init_fraction": "init_fraction"}
"""Settings a candidate may set (JSON key → :class:`Settings` field)."""


@dataclasses.dataclass(frozen=True)
class TuneOptions:
  """A validated ``--tune`` request.

  Attributes:
    path: the candidate file.
    candidates: each candidate's :class:`Settings` overrides.
    count: the law of the number of trials K.
    score_epsilon: ε of each trial's noisy validation count.
    validation_fraction: share of each run's training rows held out.
  """
  path: str
  candidates: tuple[dict, ...]
  count: tuning.TrialCount
  score_epsilon: float
  validation_fraction: float

  def describe(self) -> dict:
    """The resume key and record entry of the request."""
    return {"candidates": [dict(c) for c in self.candidates],
            "distribution": self.count.distribution,
            "expected_trials": self.count.expected, "eta": self.count.eta,
            "score_epsilon": self.score_epsilon,
            "validation_fraction": self.validation_fraction}


def load_candidates(path: str) -> list[dict]:
  """The candidate list of ``--tune=path``: a JSON list of setting dicts.

  The file holds ``[{"lr": 0.05, "epochs": 20}, …]`` or
  ``{"candidates": [...]}``; keys are those of :data:`TUNE_KEYS`.
  """
  flag = f"--tune={path}"
  try:
    with open(path, encoding="utf-8") as f:
      loaded = json.load(f)
  except FileNotFoundError:
    raise ValueError(f"{flag}: no such file; give a JSON file with a list "
                     f"of candidate settings.") from None
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
    raise ValueError(f"{flag}: not a readable JSON file ({err}).") from None
  if isinstance(loaded, dict) and set(loaded) == {"candidates"}:
    loaded = loaded["candidates"]
  if not isinstance(loaded, list) or not loaded:
    raise ValueError(f"{flag}: the candidate list is empty or not a list; "
                     f"give e.g. [{{\"lr\": 0.05}}, {{\"lr\": 0.2}}].")
  for i, c in enumerate(loaded):
    if not isinstance(c, dict) or not c:
      raise ValueError(f"{flag}: candidate {i} is not a non-empty object "
                       f"of settings ({sorted(TUNE_KEYS)}).")
    bad = sorted(set(c) - set(TUNE_KEYS))
    if bad:
      raise ValueError(f"{flag}: candidate {i} has unknown setting(s) "
                       f"{bad}; a candidate may set {sorted(TUNE_KEYS)}.")
  return loaded


def candidate_settings(settings: Settings, candidate: dict) -> Settings:
  """``settings`` with one candidate's overrides."""
  return dataclasses.replace(
      settings, **{TUNE_KEYS[k]: v for k, v in candidate.items()})


def check_tuning(path: str, settings: Settings, *, distribution: str,
                 expected_trials, eta, score_epsilon, validation_fraction,
                 max_steps: int = DEFAULT_MAX_STEPS) -> TuneOptions:
  """Refuses a bad ``--tune`` request before any data is read."""
  candidates = load_candidates(path)
  for i, c in enumerate(candidates):
    try:
      check_settings(candidate_settings(settings, c), max_steps=max_steps)
    except ValueError as err:
      raise ValueError(f"--tune={path}: candidate {i}: {err}") from None
  try:
    count = tuning.trial_count(distribution, expected_trials, eta=eta)
  except ValueError as err:
    raise ValueError(
        f"--tune_distribution={distribution} --tune_expected_trials="
        f"{expected_trials} --tune_eta={eta}: {err}") from None
  validation.check_epsilon(score_epsilon, "--tune_score_epsilon")
  _flag("--tune_validation_fraction", validation_fraction,
        isinstance(validation_fraction, (int, float))
        and 0 < validation_fraction <= 0.5,
        "hold out a share in (0, 0.5] of each run's training rows "
        "(e.g. 0.2).")
  return TuneOptions(path, tuple(candidates), count, float(score_epsilon),
                     float(validation_fraction))


def run_tuning(key: jax.Array, prepared: Prepared, settings: Settings,
               options: TuneOptions, *, model: str, epsilon: float,
               progress=common.progress) -> dict:
  """Private selection of a recipe (``dpcore.tuning``) on every CV run.

  Each CV run's training rows are cut in two by
  :func:`lvq_eval.carve_validation` (the last ``validation_fraction`` of
  the run's randomly permuted training rows are held out). A trial draws
  a candidate uniformly at random, trains DP-G(M)LVQ on the rest with the
  candidate's settings, every trial calibrated to the per-trial target
  ``epsilon`` (private init + DP-SGD), and scores the model by
  :func:`dpcore.tuning.noisy_accuracy` on the held-out rows. K ~
  ``options.count`` trials run; each run releases its best-scoring model,
  whose test error is reported. All runs share K and the candidates drawn
  (both public, drawn from the key alone); training and score noise are
  the run's own.

  Privacy: one trial reads the training rows (DP-SGD and the private init,
  as recorded by ``lvq_train.DPLVQPlan.record``) and the held-out rows (the
  Laplace count) — disjoint rows, so its RDP is the larger of the two
  curves (:func:`dpcore.tuning.disjoint`), and, whatever candidate it
  draws, at most the largest over the candidates
  (:func:`dpcore.tuning.any_of`). The tuning's (ε, δ) is
  :func:`dpcore.tuning.tuned_guarantee` of that trial, recorded as ONE
  ledger entry. The neighbouring relation is add/remove of one row of a
  run's training rows or of its held-out rows, the split being fixed by
  the split key (the same scope as the fixed recipe's records: one
  released model, the CV protocol itself not a release).
  """
  s = settings
  train_on = s.train_on
  if train_on == "auto":
    train_on = "one_fold" if prepared.dataset == "mnist" else "other_folds"
  one_fold = train_on == "one_fold"
  n, dim = prepared.x.shape
  n_train, n_val = lvq_eval.carved_sizes(
      n, folds=s.folds, train_on_one_fold=one_fold,
      validation_fraction=options.validation_fraction)
  score = tuning.score_privacy(options.score_epsilon)
  configs, trials, plans, dp_plans = [], [], [], []
  for i, cand in enumerate(options.candidates):
    c = candidate_settings(s, cand)
    steps = lvq_eval.sgd_steps(c.epochs, c.q)
    max_batch = dpsgd.max_batch_size(n_train, sampling_rate=c.q,
                                     steps=steps)
    plan = lvq_train.make_plan(
        n_train, epsilon=epsilon, delta=s.delta, sampling_rate=c.q,
        epochs=c.epochs, clip_norm=c.clip, dim=dim, max_batch=max_batch,
        init_fraction=c.init_fraction, sigma_rule=c.sigma_rule,
        init_mechanism=c.init_mechanism)
    ledger = accounting.PrivacyLedger()
    plan.record(ledger)
    train = tuning.trial_privacy(ledger,
                                 description=f"candidate {i} training")
    trials.append(tuning.disjoint(train, score,
                                  description=f"candidate {i}"))
    plans.append({"candidate": i, "noise_multiplier": plan.noise_multiplier,
                  "steps": steps, "max_batch": max_batch,
                  "epsilon_trial": trials[-1].epsilon(s.delta),
                  "learning_rate": c.learning_rate(model)})
    dp_plans.append(plan)
    configs.append(lvq_train.TrainConfig(
        model=model, trainer="dpsgd", num_classes=prepared.num_classes,
        prototypes_per_class=c.prototypes_per_class, rank=c.rank,
        normalise=c.normalise, phi_kind=c.phi, epochs=c.epochs,
        sampling_rate=c.q, learning_rate=c.learning_rate(model),
        max_batch=max_batch, bfgs_iterations=c.bfgs_iterations,
        ghost_clipping=c.ghost_clipping))
  trial = tuning.any_of(*trials, description="one trial: a candidate drawn "
                        "uniformly at random, trained, and scored")
  guarantee = tuning.tuned_guarantee(trial, options.count, delta=s.delta)
  progress(f"tuning: {len(configs)} candidates, K ~ "
           f"{options.count.distribution} (E[K] = "
           f"{options.count.expected:g}); one trial ε = "
           f"{guarantee.trial_epsilon:.3f}, the whole tuning ε = "
           f"{guarantee.epsilon:.3f} at δ = {s.delta:g}")
  tune_key = jax.random.fold_in(key, 2)
  split_key = jax.random.fold_in(key, 0)
  picks = tuning.schedule(tune_key, options.count, len(configs))
  runs = s.folds * s.repeats
  best = np.full(runs, -np.inf)
  winners = np.full(runs, -1)
  errors = np.full(runs, np.nan)
  cache: dict = {}
  for i, c in enumerate(picks):
    k_train, k_score = jax.random.split(tuning.trial_key(tune_key, i))
    res = lvq_eval.evaluate_trial(
        split_key, k_train, prepared.x, prepared.y, configs[int(c)],
        plan=dp_plans[int(c)], folds=s.folds, repeats=s.repeats,
        train_on_one_fold=one_fold,
        validation_fraction=options.validation_fraction,
        parallel_runs=s.parallel, memory_budget=s.memory_budget,
        cache=cache)
    scores = np.asarray(tuning.noisy_accuracy(
        k_score, res.correct, n_val, epsilon=options.score_epsilon))
    better = scores > best
    best = np.where(better, scores, best)
    winners = np.where(better, int(c), winners)
    errors = np.where(better, res.errors, errors)
  # K, the candidates drawn and the trials' scores stay inside: the
  # guarantee bounds the winners' outputs with K hidden.
  progress("tuning: done (the number of trials and their scores are not "
           "shown: the guarantee holds with them hidden)")
  ran = picks.size > 0
  winner_list = [int(w) for w in winners] if ran else [None] * runs
  ledger = accounting.PrivacyLedger()
  tuning.record(ledger, guarantee, winner=winner_list if ran else None,
                label="dplvq_tuning")
  privacy = ledger.report(
      s.delta, nominal_epsilon=epsilon,
      nominal_note="each trial's target ε (private init + DP-SGD) its "
                   "noise was calibrated for; the guarantee covers the "
                   "whole tuning")
  errs = errors if ran else None
  return {
      "dataset": prepared.dataset, "model": model, "trainer": "dpsgd",
      "epsilon": epsilon, "delta": s.delta, "q": s.q, "clip": s.clip,
      "epochs": s.epochs, "learning_rate": s.learning_rate(model),
      "sigma_rule": s.sigma_rule, "folds": s.folds, "repeats": s.repeats,
      "seed": s.seed, "scaling": prepared.scaling,
      "privacy_covers_scaling": prepared.scaling != "data_minmax",
      "rank": s.rank, "normalise": s.normalise, "phi": s.phi,
      "init_variant": s.init_variant(), "tune": options.describe(),
      "error_mean": float(np.mean(errs)) if ran else None,
      "error_std": float(np.std(errs, ddof=1)) if ran and runs > 1 else (
          0.0 if ran else None),
      "errors": errs.tolist() if ran else None,
      "privacy": privacy, "dpsgd": None,
      "tuning": {
          **tuning.TuningResult(None, None, None, None,
                                guarantee).record(),
          "winner": winner_list,
          "winning_settings": [options.candidates[w] if w is not None
                               else None for w in winner_list],
          "n_train": n_train, "n_val": n_val,
          "train_on": train_on, "candidates": plans,
          "scope": "one tuned model per CV run (the tuning on that run's "
                   "training and held-out rows); the CV protocol is not a "
                   "release",
          "released_when_no_trial": "nothing (K = 0)",
      },
      "platform": jax.default_backend(),
  }
