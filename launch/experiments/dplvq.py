"""Experiment logic of ``launch.dplvq`` (no flags; importable anywhere).

:class:`Setting` is one run: the data, the model and trainer, the recipe
and the cross-validation protocol, by the library's names;
:meth:`Setting.check` refuses a bad one before any data is read, and its
fields are the record's settings and (less the operational ones,
:data:`OPERATIONAL`) the resume key. :func:`run` evaluates one setting
through repeated k-fold CV; :func:`table` runs the Table 1 / Fig. 1 grid
with resume; :func:`run_tuning` selects a recipe from a candidate list
privately (``dpcore.tuning``). See ``launch/dplvq.py`` for the command
line.

The defaults of :class:`Setting` (q = 0.01, C = 0.5, 50 epochs, learning
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

from dpcore import (
  accounting,
  clipping,
  dpsgd,
  memory,
  options,
  tuning,
  validation,
)
from launch import common, vocabulary
from launch.data import loaders as data
from launch.experiments import lvq_eval
from mechanisms.lvq import train as lvq_train

__all__ = [
    "KEY_FIELDS", "MIN_BOUNDS_COVERAGE", "OPERATIONAL", "Prepared",
    "Setting", "TUNE_KEYS", "TuneOptions", "check_bounds", "check_tuning",
    "is_done", "load_candidates", "parse_bounds", "prepare", "run",
    "run_tuning", "table", "write_figure", "write_table",
]

# --bounds=LOW,HIGH is refused when it covers less than this share of a
# set's public range (most values would be clipped to the box's faces).
MIN_BOUNDS_COVERAGE = 0.5


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setting:
  """One run of ``launch.dplvq``: what is trained, and how it is scored.

  Attributes:
    dataset, data_dir: the data (:mod:`launch.data.loaders`).
    bounds: ``"auto"`` (the set's public bounds), ``"LOW,HIGH"`` or
      ``"data_minmax"`` (:func:`prepare`).
    model: ``"glvq"`` or ``"gmlvq"``.
    trainer: ``"dpsgd"`` (private), ``"sgd"`` or ``"bfgs"``.
    epsilon: the total target ε of ``"dpsgd"`` (init + DP-SGD); None for
      the non-private trainers (:meth:`check` sets it so).
    delta: δ.
    sampling_rate, clip_norm, epochs, learning_rate: q, C, E (T = E/q
      steps) and the SGD step size.
    sigma_rule, init_fraction, init_mechanism: as
      :func:`mechanisms.lvq.train.make_plan`.
    folds, repeats: the repeated k-fold CV.
    train_on: ``"one_fold"`` (the paper's MNIST protocol),
      ``"other_folds"``, or ``"auto"`` (the first for MNIST, resolved by
      :meth:`check`).
    rank, normalise, phi_kind, prototypes_per_class, bfgs_iterations,
      ghost_clipping: as :class:`mechanisms.lvq.train.TrainConfig`.
    seed: the seed of the splits and the noise.
    parallel_runs, memory_budget: runs vmapped together and the bytes
      they may use (None: no check; ``"auto"``: 3/4 of the memory
      available; :class:`launch.experiments.lvq_eval.Protocol`).
    max_steps: a setting with more (DP-)SGD steps per run is refused.
  """
  dataset: str = "digits"
  data_dir: str | None = None
  bounds: str = "auto"
  model: options.LVQModel = options.LVQModel.GLVQ
  trainer: options.LVQTrainer = options.LVQTrainer.DPSGD
  epsilon: float | None = 1.5
  delta: float = 1e-5
  sampling_rate: float = 0.01
  clip_norm: float = 0.5
  epochs: int = 50
  learning_rate: float = 0.05
  sigma_rule: options.SigmaRule = options.SigmaRule.ACCOUNTANT
  init_fraction: float = 0.2
  init_mechanism: options.InitMechanism = options.InitMechanism.LAPLACE
  folds: int = 5
  repeats: int = 5
  train_on: vocabulary.TrainOn = vocabulary.TrainOn.AUTO
  rank: int | None = None
  normalise: bool = False
  phi_kind: options.Phi = options.Phi.IDENTITY
  prototypes_per_class: int = 1
  bfgs_iterations: int = 100
  ghost_clipping: bool = True
  seed: int = 0
  parallel_runs: int = 5
  memory_budget: int | str | None = None
  max_steps: int = 200_000

  @property
  def private(self) -> bool:
    return self.trainer == options.LVQTrainer.DPSGD

  @property
  def steps(self) -> int:
    """T = E/q, the (DP-)SGD steps of one run."""
    return dpsgd.num_steps(epochs=self.epochs,
                           sampling_rate=self.sampling_rate)

  def check(self, *, files: bool = True) -> Setting:
    """Refuses a bad setting before any data is read.

    ``files=False`` skips looking for the dataset's files (for a caller
    that brings its own rows).

    The model's and the plan's fields are checked by the library
    (:meth:`lvq_train.TrainConfig.validate`,
    :func:`lvq_train.check_plan_settings`), the rest here; every message
    names the field.

    Returns:
      The setting resolved: ``train_on`` chosen for ``"auto"``, the
      option fields as :mod:`dpcore.options` members, ``epsilon`` None
      for a non-private trainer.
    """
    model = options.parse(options.LVQModel, self.model, "model")
    trainer = options.parse(options.LVQTrainer, self.trainer, "trainer")
    train_on = options.parse(vocabulary.TrainOn, self.train_on, "train_on")
    private = trainer == options.LVQTrainer.DPSGD
    lvq_train.check_plan_settings(
        epsilon=self.epsilon if private else None, delta=self.delta,
        sampling_rate=self.sampling_rate, epochs=self.epochs,
        clip_norm=self.clip_norm, init_fraction=self.init_fraction,
        sigma_rule=self.sigma_rule, init_mechanism=self.init_mechanism)
    self.train_config(num_classes=2, max_batch=1).validate()
    if not (isinstance(self.folds, int) and self.folds >= 2):
      raise ValueError(f"folds={self.folds!r}: k-fold cross-validation "
                       f"needs at least 2 folds (e.g. folds=5).")
    for field in ("repeats", "parallel_runs", "max_steps"):
      validation.check_positive_int(getattr(self, field), field)
    if self.memory_budget not in (None, memory.AUTO):
      validation.check_positive_int(self.memory_budget, "memory_budget")
    if files:
      data.check_dataset(self.dataset, data_dir=self.data_dir)
    check_bounds(self.dataset, self.bounds)
    if self.steps > self.max_steps:
      raise ValueError(
          f"sampling_rate={self.sampling_rate:g} with epochs={self.epochs} "
          f"means T = E/q = {self.steps:,} SGD steps per run "
          f"({self.folds * self.repeats} runs), above max_steps="
          f"{self.max_steps:,}; raise sampling_rate or lower epochs, or "
          f"pass max_steps={self.steps} to run it anyway.")
    if train_on == vocabulary.TrainOn.AUTO:
      train_on = (vocabulary.TrainOn.ONE_FOLD if self.dataset == "mnist"
                  else vocabulary.TrainOn.OTHER_FOLDS)
    return dataclasses.replace(
        self, model=model, trainer=trainer, train_on=train_on,
        epsilon=self.epsilon if private else None,
        sigma_rule=options.SigmaRule(self.sigma_rule),
        init_mechanism=options.InitMechanism(self.init_mechanism),
        phi_kind=options.Phi(self.phi_kind))

  def key(self) -> dict:
    """The resume key: every field that changes the results."""
    return {k: v for k, v in dataclasses.asdict(self).items()
            if k not in OPERATIONAL}

  def protocol(self, validation_fraction: float | None = None
               ) -> lvq_eval.Protocol:
    return lvq_eval.Protocol(
        folds=self.folds, repeats=self.repeats,
        train_on_one_fold=self.train_on == vocabulary.TrainOn.ONE_FOLD,
        parallel_runs=self.parallel_runs, memory_budget=self.memory_budget,
        validation_fraction=validation_fraction)

  def train_config(self, *, num_classes: int, max_batch: int
                   ) -> lvq_train.TrainConfig:
    return lvq_train.TrainConfig(
        model=self.model, trainer=self.trainer, num_classes=num_classes,
        prototypes_per_class=self.prototypes_per_class, rank=self.rank,
        normalise=self.normalise, phi_kind=self.phi_kind,
        epochs=self.epochs, sampling_rate=self.sampling_rate,
        learning_rate=self.learning_rate, max_batch=max_batch,
        bfgs_iterations=self.bfgs_iterations,
        ghost_clipping=self.ghost_clipping)

  def plan(self, num_examples: int, *, dim: int, max_batch: int
           ) -> lvq_train.DPLVQPlan:
    """The private model's plan for one run's training rows."""
    return lvq_train.make_plan(
        num_examples, epsilon=self.epsilon, delta=self.delta,
        sampling_rate=self.sampling_rate, epochs=self.epochs,
        clip_norm=self.clip_norm, dim=dim, max_batch=max_batch,
        init_fraction=self.init_fraction, sigma_rule=self.sigma_rule,
        init_mechanism=self.init_mechanism)


OPERATIONAL = ("data_dir", "parallel_runs", "memory_budget", "max_steps")
"""The :class:`Setting` fields that do not change the results: not part of
the resume key (a run found with other values of these is done)."""

KEY_FIELDS = tuple(f.name for f in dataclasses.fields(Setting)
                   if f.name not in OPERATIONAL) + ("tune",)
"""The fields of a record that identify its run (resume)."""


@dataclasses.dataclass(frozen=True)
class Prepared:
  """Pooled data in [−1, 1]^d, class indices, and how it was scaled."""
  dataset: str
  x: np.ndarray
  y: np.ndarray
  num_classes: int
  scaling: str


def parse_bounds(bounds: str):
  """``bounds``: ``"auto"``, ``"data_minmax"`` or ``(low, high)``."""
  if bounds in ("auto", "data_minmax"):
    return bounds
  try:
    parsed = common.parse_floats(bounds)
  except ValueError:
    parsed = []
  if len(parsed) != 2 or not (np.all(np.isfinite(parsed))
                              and parsed[0] < parsed[1]):
    raise ValueError(f"bounds={bounds!r}: give LOW,HIGH with LOW < HIGH "
                     f"(e.g. bounds=0,255), 'auto' or 'data_minmax'.")
  return tuple(parsed)


def check_bounds(name: str, bounds: str) -> None:
  """Refuses ``bounds`` that would clip most of a set's public range.

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
        f"bounds={bounds}: {name!r} has public bounds [{low:g}, "
        f"{high:g}], of which [{box[0]:g}, {box[1]:g}] covers "
        f"{100 * covered:.0f}%: most values would be clipped to the faces "
        f"of the box. Use bounds=auto (the public bounds) or bounds that "
        f"cover the data's range.")


def _no_public_bounds(name):
  raise ValueError(
      f"{name!r} has no public feature bounds, and reading them off the "
      f"data would be a query on the private data that no guarantee "
      f"covers. Pass bounds=LOW,HIGH if public bounds are known, or "
      f"bounds=data_minmax to reproduce the paper's min/max scaling, "
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
    ValueError: malformed ``bounds``, ``"auto"`` for a data set without
      public bounds, or fewer rows than the protocol needs.
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
            f"warning: bounds={bounds}: {100 * outside:.0f}% of "
            f"{name!r}'s values lie outside [{box[0]:g}, {box[1]:g}] and "
            f"will be clipped to the box's faces.")
  elif ds.bounds is not None:
    box, scaling = ds.bounds, "public_bounds"
  else:
    _no_public_bounds(name)
  x = np.asarray(clipping.scale_to_box(x, box))
  y = np.searchsorted(np.asarray(ds.classes), y)
  return Prepared(name, x, y.astype(np.int32), len(ds.classes), scaling)


def _sizes(prepared: Prepared, s: Setting, validation_fraction=None):
  """(training rows of one run, their padded Poisson batch B)."""
  n = prepared.x.shape[0]
  if s.folds > n:
    raise ValueError(f"folds={s.folds}: {prepared.dataset!r} has only {n} "
                     f"rows; give at most {n} folds (e.g. folds=5).")
  one_fold = s.train_on == vocabulary.TrainOn.ONE_FOLD
  if validation_fraction is None:
    n_train = lvq_eval.train_size(n, folds=s.folds, train_on_one_fold=one_fold)
  else:
    n_train, _ = lvq_eval.carved_sizes(
        n, folds=s.folds, train_on_one_fold=one_fold,
        validation_fraction=validation_fraction)
  return n_train, dpsgd.max_batch_size(
      n_train, sampling_rate=s.sampling_rate, steps=s.steps)


def _scaling(prepared: Prepared) -> dict:
  return {"scaling": prepared.scaling,
          "privacy_covers_scaling": prepared.scaling != "data_minmax"}


def run(key: jax.Array, prepared: Prepared, setting: Setting, *,
        progress=common.progress, cache: dict | None = None) -> dict:
  """One setting through repeated k-fold CV → its record.

  For ``"dpsgd"``, ``setting.epsilon`` is the total target: ε₁ =
  ``init_fraction``·ε goes to the private initialisation and σ is chosen
  for ε₂ = ε − ε₁ by ``sigma_rule`` (:meth:`Setting.plan`). The record's
  ``"privacy"`` is the plan's report of one trained model (fields
  :data:`dpcore.accounting.PRIVACY_FIELDS`; the target as
  ``epsilon_nominal``), the plan's figures (σ, ε₁, the DP-SGD part's own
  ε, steps) are under ``"dpsgd"``. Non-private trainers report
  ``accounting.no_guarantee_record(accounting.NON_PRIVATE)`` and
  ``"dpsgd": None``.

  Args:
    key: the seed's key: the splits come from ``fold_in(key, 0)`` (the
      same for every setting), the training from a key derived from the
      setting's (model, trainer, ε), so no two settings share noise.
    prepared: the data (:func:`prepare`).
    setting: a checked :class:`Setting`.
    progress: a callback for progress lines (None: quiet).
    cache: compiled runs to reuse (:func:`lvq_eval.evaluate`).
  """
  s = setting
  n_train, max_batch = _sizes(prepared, s)
  plan = details = None
  privacy = accounting.no_guarantee_record(accounting.NON_PRIVATE)
  if s.private:
    plan = s.plan(n_train, dim=prepared.x.shape[1], max_batch=max_batch)
    privacy = plan.report()
    details = {
        "noise_multiplier": plan.noise_multiplier,
        "epsilon_init": plan.epsilon_init,
        "epsilon_sgd": next(e["epsilon"] for e in privacy["entries"]
                            if e["label"] == "dpsgd"),
        "target_epsilon_sgd": plan.target_epsilon_sgd,
        "sigma_rule": plan.sigma_rule, "steps": plan.steps,
        "relation": plan.relation,
        "init_noise_multiplier": plan.init_noise_multiplier,
        "scope": "one trained model, on its own training set (the "
                 "evaluation protocol is not a release)"}
  tag = zlib.crc32(f"{s.model}/{s.trainer}/{s.epsilon}".encode())
  res = lvq_eval.evaluate(
      jax.random.fold_in(key, 0),
      jax.random.fold_in(jax.random.fold_in(key, 1), tag), prepared.x,
      prepared.y, s.train_config(num_classes=prepared.num_classes,
                                 max_batch=max_batch),
      s.protocol(), plan=plan, progress=progress, cache=cache)
  return {
      **dataclasses.asdict(s), "tune": None, **_scaling(prepared),
      "error_mean": float(res.errors.mean()),
      "error_std": (float(res.errors.std(ddof=1)) if res.errors.size > 1
                    else 0.0),
      "errors": res.errors.ravel().tolist(),
      "seconds": res.seconds, "compile_seconds": res.compile_seconds,
      "privacy": privacy, "dpsgd": details, "n_train": res.n_train,
      "n_test": res.n_test, "steps": s.steps, "max_batch": max_batch,
      "overflow_steps": res.overflow_steps,
      "final_cost_mean": float(res.final_costs.mean()),
      "parallel_runs_used": res.parallel_runs,
      "memory_estimate": res.memory_estimate,
      "platform": jax.default_backend(),
  }


def is_done(done: set, setting: Setting, *,
            tune: dict | None = None) -> bool:
  """Whether ``done`` (:func:`launch.common.done_keys` over
  :data:`KEY_FIELDS`) holds this run; ``tune``: the tuning's
  :meth:`TuneOptions.describe` (None otherwise)."""
  return common.record_key({**setting.key(), "tune": tune},
                           KEY_FIELDS) in done


def table(prepared: Prepared, setting: Setting, *, out: str, models,
          table_epsilons, figure_epsilons,
          progress=common.progress) -> dict:
  """Table 1 + Fig. 1: runs what ``out`` lacks, then writes both.

  The grid is ``setting`` for each model of ``models``: SGD, DP-SGD at
  every ε of the table and the figure, then full-batch L-BFGS (costly
  for GMLVQ) last. Finished runs found in ``out`` are skipped (said
  once); each new record is printed and appended as soon as it is done
  (:func:`launch.common.emit_record`), so an interrupted table resumes
  where it stopped. Every ε of a model shares one compiled program.
  Writes ``<out stem>_table.md`` and ``<out stem>_fig1.png``.
  """
  key = jax.random.key(setting.seed)
  eps_all = sorted(set(table_epsilons) | set(figure_epsilons))
  grid = [(m, "sgd", None) for m in models]
  grid += [(m, "dpsgd", e) for e in eps_all for m in models]
  grid += [(m, "bfgs", None) for m in models]
  grid = [dataclasses.replace(setting, model=m, trainer=t, epsilon=e).check()
          for m, t, e in grid]
  done = common.done_keys(out, KEY_FIELDS)
  todo = [g for g in grid if not is_done(done, g)]
  if len(todo) < len(grid):
    progress(f"skipping {len(grid) - len(todo)} finished runs (found in "
             f"{out})")
  last, cache = None, {}
  for i, s in enumerate(todo, 1):
    progress(f"setting {i}/{len(todo)}: {s.model} {s.trainer} "
             f"ε={s.epsilon}")
    last = run(key, prepared, s, progress=progress, cache=cache)
    common.emit_record(last, out)
    progress(f"done: {s.model} {s.trainer} ε={s.epsilon}: error "
             f"{last['error_mean']:.4f} ({last['error_std']:.4f}) in "
             f"{last['seconds']:.0f}s")
  shared = {k: v for k, v in setting.key().items()
            if k not in ("model", "trainer", "epsilon")}
  shared = json.loads(common.to_json(shared))
  mine = [r for r in common.read_jsonl(out) if r.get("tune") is None
          and all(r.get(k) == v for k, v in shared.items())]
  stem = os.path.splitext(out)[0]
  text = write_table(mine, stem + "_table.md", table_epsilons)
  write_figure(mine, stem + "_fig1.png", prepared.dataset)
  progress("table:\n" + text)
  return {"dataset": prepared.dataset, "table": stem + "_table.md",
          "figure": stem + "_fig1.png", "records": len(mine), "last": last}


def _fmt(records, model, trainer, eps=None):
  for r in records:
    if r["model"] == model and r["trainer"] == trainer and (
        eps is None or r["epsilon"] == eps):
      return f"{r['error_mean']:.4f} ({r['error_std']:.4f})"
  return "–"


def write_table(records, path, table_epsilons):
  """Markdown Table 1: rows GLVQ/GMLVQ, columns DP ε..., SGD, BFGS."""
  head = ([f"DP ε = {e:g}" for e in table_epsilons]
          + ["non priv. SGD", "non priv. BFGS"])
  lines = ["| model | " + " | ".join(head) + " |",
           "|---" * (len(head) + 1) + "|"]
  for model in options.LVQModel:
    cells = [_fmt(records, model, "dpsgd", e) for e in table_epsilons]
    cells += [_fmt(records, model, "sgd"), _fmt(records, model, "bfgs")]
    lines.append(f"| {model.upper()} | " + " | ".join(cells) + " |")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return "\n".join(lines)


def write_figure(records, path, dataset):
  """Fig. 1: test error against ε (GLVQ dashed, GMLVQ solid)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top

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


# -- private selection among candidate recipes (tune) -------------------------

TUNE_KEYS = {"sampling_rate": "sampling_rate", "clip_norm": "clip_norm",
             "learning_rate": "learning_rate", "epochs": "epochs",
             "init_fraction": "init_fraction",
             # The old spellings, kept for candidate files written before.
             "q": "sampling_rate", "clip": "clip_norm", "lr": "learning_rate"}
"""Settings a candidate may set (JSON key → :class:`Setting` field)."""


@dataclasses.dataclass(frozen=True)
class TuneOptions:
  """A validated tuning request.

  Attributes:
    path: the candidate file.
    candidates: each candidate's :class:`Setting` overrides.
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

  def setting(self, setting: Setting, i: int) -> Setting:
    """``setting`` with candidate ``i``'s overrides."""
    return dataclasses.replace(setting, **{
        TUNE_KEYS[k]: v for k, v in self.candidates[i].items()})


def load_candidates(path: str) -> list[dict]:
  """The candidate list of ``tune=path``
  (:func:`launch.common.read_candidates`): setting dicts over the keys of
  :data:`TUNE_KEYS`, e.g. ``[{"learning_rate": 0.05, "epochs": 20}, …]``.
  """
  return common.read_candidates(
      path, "tune", TUNE_KEYS,
      example='[{"learning_rate": 0.05}, {"learning_rate": 0.2}]')


def check_tuning(path: str, setting: Setting, *, distribution: str,
                 expected_trials, eta, score_epsilon,
                 validation_fraction) -> TuneOptions:
  """Refuses a bad tuning request before any data is read."""
  if not setting.private:
    raise ValueError(f"tune needs trainer=dpsgd (got {setting.trainer!r}): "
                     f"a non-private trial has no guarantee to tune with.")
  candidates = load_candidates(path)
  try:
    count = tuning.trial_count(distribution, expected_trials, eta=eta)
  except ValueError as err:
    raise ValueError(f"tune: {err}") from None
  validation.check_epsilon(score_epsilon, "tune_score_epsilon")
  if not (isinstance(validation_fraction, (int, float))
          and 0 < validation_fraction <= 0.5):
    raise ValueError(f"tune_validation_fraction={validation_fraction!r}: "
                     f"hold out a share in (0, 0.5] of each run's training "
                     f"rows (e.g. 0.2).")
  options_ = TuneOptions(path, tuple(candidates), count,
                         float(score_epsilon), float(validation_fraction))
  for i in range(len(candidates)):
    try:
      options_.setting(setting, i).check()
    except ValueError as err:
      raise ValueError(f"tune={path}: candidate {i}: {err}") from None
  return options_


def _candidates(prepared: Prepared, s: Setting, tune: TuneOptions):
  """Every candidate's (setting, plan, train config), its facts for the
  record, and its trial's privacy (:func:`dpcore.tuning.scored_trials`)."""
  runs, batches = [], []
  for i in range(len(tune.candidates)):
    c = tune.setting(s, i).check()
    n_train, max_batch = _sizes(prepared, c, tune.validation_fraction)
    runs.append((c, c.plan(n_train, dim=prepared.x.shape[1],
                           max_batch=max_batch),
                 c.train_config(num_classes=prepared.num_classes,
                                max_batch=max_batch)))
    batches.append(max_batch)
  trials = tuning.scored_trials([plan for _, plan, _ in runs],
                                score_epsilon=tune.score_epsilon)
  facts = [{"candidate": i, "noise_multiplier": plan.noise_multiplier,
            "steps": c.steps, "max_batch": batch,
            "epsilon_trial": t.epsilon(s.delta),
            "learning_rate": c.learning_rate}
           for i, ((c, plan, _), batch, t) in enumerate(
               zip(runs, batches, trials, strict=True))]
  return runs, facts, trials


def _best_trials(prepared: Prepared, s: Setting, tune: TuneOptions, runs,
                 picks, *, tune_key, split_key, n_val):
  """Runs the trials ``picks`` on every CV run: each run's best-scoring
  trial's candidate and test error (K, the picks and the scores stay
  inside)."""
  count = s.folds * s.repeats
  best = np.full(count, -np.inf)
  winners = np.full(count, -1)
  errors = np.full(count, np.nan)
  cache: dict = {}
  for i, pick in enumerate(picks):
    c, plan, config = runs[int(pick)]
    k_train, k_score = jax.random.split(tuning.trial_key(tune_key, i))
    res = lvq_eval.evaluate(split_key, k_train, prepared.x, prepared.y,
                            config, c.protocol(tune.validation_fraction),
                            plan=plan, cache=cache)
    scores = np.asarray(tuning.noisy_accuracy(
        k_score, res.correct, n_val, epsilon=tune.score_epsilon))
    better = scores > best
    best = np.where(better, scores, best)
    winners = np.where(better, int(pick), winners)
    errors = np.where(better, res.errors.ravel(), errors)
  return winners, errors


def run_tuning(key: jax.Array, prepared: Prepared, setting: Setting,
               tune: TuneOptions, *, progress=common.progress) -> dict:
  """Private selection of a recipe (``dpcore.tuning``) on every CV run.

  Each CV run's training rows are cut in two by
  :func:`lvq_eval.carve_validation` (the last ``validation_fraction`` of
  the run's randomly permuted training rows are held out). A trial draws
  a candidate uniformly at random, trains DP-G(M)LVQ on the rest with the
  candidate's settings, every trial calibrated to the per-trial target
  ``setting.epsilon`` (private init + DP-SGD), and scores the model by
  :func:`dpcore.tuning.noisy_accuracy` on the held-out rows. K ~
  ``tune.count`` trials run; each run releases its best-scoring model,
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
  s = setting
  runs, facts, trials = _candidates(prepared, s, tune)
  trial = tuning.any_of(*trials, description="one trial: a candidate drawn "
                        "uniformly at random, trained, and scored")
  guarantee = tuning.tuned_guarantee(trial, tune.count, delta=s.delta)
  progress(f"tuning: {len(runs)} candidates, K ~ "
           f"{tune.count.distribution} (E[K] = {tune.count.expected:g}); "
           f"one trial ε = {guarantee.trial_epsilon:.3f}, the whole tuning "
           f"ε = {guarantee.epsilon:.3f} at δ = {s.delta:g}")
  tune_key = jax.random.fold_in(key, 2)
  split_key = jax.random.fold_in(key, 0)
  picks = tuning.schedule(tune_key, tune.count, len(runs))
  count = s.folds * s.repeats
  n_train, n_val = lvq_eval.carved_sizes(
      prepared.x.shape[0], folds=s.folds,
      train_on_one_fold=s.train_on == vocabulary.TrainOn.ONE_FOLD,
      validation_fraction=tune.validation_fraction)
  winners, errors = _best_trials(prepared, s, tune, runs, picks,
                                 tune_key=tune_key, split_key=split_key,
                                 n_val=n_val)
  # K, the candidates drawn and the trials' scores stay inside: the
  # guarantee bounds the winners' outputs with K hidden.
  progress("tuning: done (the number of trials and their scores are not "
           "shown: the guarantee holds with them hidden)")
  ran = picks.size > 0
  winner_list = [int(w) for w in winners] if ran else [None] * count
  ledger = accounting.PrivacyLedger()
  tuning.record(ledger, guarantee, winner=winner_list if ran else None,
                label="dplvq_tuning")
  privacy = ledger.report(
      s.delta, nominal_epsilon=s.epsilon,
      nominal_note="each trial's target ε (private init + DP-SGD) its "
                   "noise was calibrated for; the guarantee covers the "
                   "whole tuning")
  return {
      **dataclasses.asdict(s), "tune": tune.describe(), **_scaling(prepared),
      "error_mean": float(np.mean(errors)) if ran else None,
      "error_std": float(np.std(errors, ddof=1)) if ran and count > 1 else (
          0.0 if ran else None),
      "errors": errors.tolist() if ran else None,
      "privacy": privacy, "dpsgd": None,
      "tuning": {
          **tuning.TuningResult(None, None, None, None,
                                guarantee).record(),
          "winner": winner_list,
          "winning_settings": [tune.candidates[w] if w is not None
                               else None for w in winner_list],
          "n_train": n_train, "n_val": n_val, "train_on": s.train_on,
          "candidates": facts,
          "scope": "one tuned model per CV run (the tuning on that run's "
                   "training and held-out rows); the CV protocol is not a "
                   "release",
          "released_when_no_trial": "nothing (K = 0)",
      },
      "platform": jax.default_backend(),
  }
