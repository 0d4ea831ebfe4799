"""Experiment logic of ``launch.dplvq`` (no flags; importable anywhere).

:class:`Settings` holds what the command line sets; :func:`run_setting` runs
one (model, trainer, ε) setting through repeated k-fold CV and returns its
record; :func:`table` runs the Table 1 / Fig. 1 grid with resume. See
``launch/dplvq.py`` for the command line.
"""

from __future__ import annotations

import dataclasses
import os
import zlib

import jax
import numpy as np

from launch import common
from launch.data import loaders as data
from launch.experiments import lvq_eval

KEY_FIELDS = ("dataset", "model", "trainer", "epsilon", "delta", "q", "clip",
              "epochs", "learning_rate", "sigma_rule", "folds", "repeats",
              "seed", "scaling", "rank", "normalise", "phi", "init_variant")
DEFAULT_LR = {"glvq": 0.05, "gmlvq": 0.05}


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
  ds = data.load_dataset(name, data_dir=data_dir)
  x, y = ds.x_train, ds.y_train
  if ds.x_test is not None:
    x = np.concatenate([x, ds.x_test])
    y = np.concatenate([y, ds.y_test])
  if bounds == "data_minmax":
    # Not private: the min/max are statistics of the data (see docstring).
    low, high = x.min(axis=0), x.max(axis=0)
    high = np.where(high > low, high, low + 1.0)
    box, scaling = (low, high), "data_minmax"
  elif bounds != "auto":
    parsed = common.parse_floats(bounds)
    if len(parsed) != 2 or not parsed[0] < parsed[1]:
      raise ValueError(f"bounds must be 'LOW,HIGH' with LOW < HIGH, 'auto' "
                       f"or 'data_minmax', got {bounds!r}.")
    box, scaling = tuple(parsed), "public_bounds_flag"
  elif ds.bounds is not None:
    box, scaling = ds.bounds, "public_bounds"
  else:
    raise ValueError(
        f"{name!r} has no public feature bounds, and reading them off the "
        f"data would be a query on the private data that no guarantee "
        f"covers. Pass bounds='LOW,HIGH' (--bounds=LOW,HIGH) if public "
        f"bounds are known, or bounds='data_minmax' (--bounds=data_minmax) "
        f"to reproduce the paper's min/max scaling, labelled in the records "
        f"as not covered by the guarantee.")
  x = data.scale_to_box(x, box)
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
  record = lvq_eval.evaluate_setting(
      jax.random.fold_in(key, 0),
      jax.random.fold_in(jax.random.fold_in(key, 1), tag), prepared.x,
      prepared.y, num_classes=prepared.num_classes, model=model,
      trainer=trainer, epsilon=epsilon, delta=s.delta, sampling_rate=s.q,
      clip_norm=s.clip, epochs=s.epochs,
      learning_rate=s.learning_rate(model), sigma_rule=s.sigma_rule,
      init_fraction=s.init_fraction, folds=s.folds, repeats=s.repeats,
      train_on_one_fold=train_on == "one_fold", parallel_runs=s.parallel,
      rank=s.rank, normalise=s.normalise, phi_kind=s.phi,
      prototypes_per_class=s.prototypes_per_class,
      bfgs_iterations=s.bfgs_iterations, ghost_clipping=s.ghost_clipping,
      init_mechanism=s.init_mechanism, progress=progress)
  return {"dataset": prepared.dataset, **record, "sigma_rule": s.sigma_rule,
          "scaling": prepared.scaling,
          "privacy_covers_scaling": prepared.scaling != "data_minmax",
          "seed": s.seed, "platform": jax.default_backend(),
          "init_variant": s.init_variant()}


def _probe(prepared: Prepared, s: Settings, model, trainer, eps) -> dict:
  """The resume key fields of a setting, before it is run."""
  return {"dataset": prepared.dataset, "model": model, "trainer": trainer,
          "epsilon": eps, "delta": s.delta, "q": s.q, "clip": s.clip,
          "epochs": s.epochs, "learning_rate": s.learning_rate(model),
          "sigma_rule": s.sigma_rule, "folds": s.folds,
          "repeats": s.repeats, "seed": s.seed, "scaling": prepared.scaling,
          "rank": s.rank, "normalise": s.normalise, "phi": s.phi,
          "init_variant": s.init_variant()}


def table(prepared: Prepared, settings: Settings, *, out: str, models,
          table_eps, figure_eps) -> dict:
  """Table 1 + Fig. 1: runs what ``out`` lacks, then writes both.

  Settings run cheap first (SGD, then DP-SGD by ε), full-batch L-BFGS
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
  last = None
  for model, trainer, eps in grid:
    probe = _probe(prepared, s, model, trainer, eps)
    if common.record_key(probe, KEY_FIELDS) in done:
      common.progress(f"skip (done): {model} {trainer} ε={eps}")
      continue
    common.progress(f"start: {model} {trainer} ε={eps}")
    last = run_setting(key, prepared, s, model=model, trainer=trainer,
                       epsilon=eps)
    common.append_jsonl(out, last)
    common.progress(f"done: {model} {trainer} ε={eps}: error "
                    f"{last['error_mean']:.4f} ({last['error_std']:.4f}) in "
                    f"{last['seconds']:.0f}s")
  mine = [r for r in common.read_jsonl(out)
          if all(r.get(f) == v for f, v in (
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


