r"""DP-GLVQ / DP-GMLVQ (Brinkrolf, Berger & Hammer, ESANN 2018).

One run: repeated k-fold CV of one (model, trainer, ε) setting::

  python -m launch.dplvq --dataset=digits --model=gmlvq --trainer=dpsgd \
      --epsilon=2.5 --repeats=1

Table mode: Table 1 (ε ∈ {0.75, 1.5, 2.5} plus the non-private SGD and
L-BFGS baselines, GLVQ and GMLVQ) and Fig. 1 (error against ε), written as
JSON lines (``--out``), a Markdown table and a PNG beside it::

  python -m launch.dplvq --dataset=mnist --table --repeats=5 \
      --out=results/dplvq_mnist.jsonl

Features are mapped to [−1, 1] by ``launch.data.scale_to_box`` with public
bounds (pixels: (0, 255)). Tabular sets (Segment, HAR) have no public bounds:
pass them with ``--bounds=LOW,HIGH``; otherwise (``--bounds=auto``) the
pooled data's per-feature min and max are used and the record says
``"scaling": "data_minmax"`` — that step reads the private data and is NOT
covered by the reported guarantee (the paper does the same without saying).
Every run prints its record as the last stdout line and appends it to
``--out``; an interrupted table resumes where it stopped.
"""

from __future__ import annotations

import os
import zlib

import jax
import numpy as np
from absl import app, flags

from launch import common, data
from mechanisms import lvq_eval

_DATASET = flags.DEFINE_string("dataset", "digits", "mnist, segment, har, "
                               "digits, ... (launch.data.load_dataset).")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Where the files are.")
_MODEL = flags.DEFINE_enum("model", "glvq", ["glvq", "gmlvq"], "Model.")
_TRAINER = flags.DEFINE_enum("trainer", "dpsgd", ["dpsgd", "sgd", "bfgs"],
                             "DP-SGD, or the non-private SGD / L-BFGS.")
_EPSILON = flags.DEFINE_float("epsilon", 1.5, "Total ε (init + DP-SGD).")
_DELTA = flags.DEFINE_float("delta", 1e-5, "δ.")
_Q = flags.DEFINE_float("q", 0.01, "Poisson sampling rate q.")
_CLIP = flags.DEFINE_float("clip", 0.5, "Per-example L2 clip C.")
_EPOCHS = flags.DEFINE_integer("epochs", 50, "Epochs E (T = E/q steps).")
_LR = flags.DEFINE_float("lr", None, "SGD learning rate (default: 0.05 for "
                         "both models).")
_SIGMA_RULE = flags.DEFINE_enum(
    "sigma_rule", "accountant", ["accountant", "paper"],
    "σ from the RDP accountant for ε₂, or the paper's 2q√(T log(1/δ))/ε₂ "
    "(the ε it actually gives is reported).")
_INIT_FRACTION = flags.DEFINE_float("init_fraction", 0.2, "ε₁ / ε.")
_INIT = flags.DEFINE_enum(
    "init_mechanism", "laplace", ["laplace", "gaussian"],
    "Private init: the paper's Laplace on counts and sums, or one Gaussian "
    "mechanism on both (L2 sensitivity √(1+d); δ split in halves).")
_FOLDS = flags.DEFINE_integer("folds", 5, "Folds of the CV.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Repeats of the k-fold CV.")
_TRAIN_ON = flags.DEFINE_enum(
    "train_on", "auto", ["auto", "one_fold", "other_folds"],
    "auto: one fold for mnist (paper), the other folds otherwise.")
_BOUNDS = flags.DEFINE_string(
    "bounds", "auto", "Public feature bounds 'LOW,HIGH'; 'auto' uses the "
    "dataset's public bounds, or else the data's min/max (labelled as not "
    "covered by the guarantee).")
_RANK = flags.DEFINE_integer("rank", None, "Rank of Ω (default: full).")
_NORMALISE = flags.DEFINE_bool("normalise", False,
                               "Project Ω to trace(ΩᵀΩ)=1 after each step.")
_PHI = flags.DEFINE_enum("phi", "identity", ["identity", "sigmoid"], "Φ.")
_PPC = flags.DEFINE_integer("prototypes_per_class", 1, "Prototypes/class.")
_BFGS_ITERS = flags.DEFINE_integer("bfgs_iterations", 100, "L-BFGS steps.")
_PARALLEL = flags.DEFINE_integer("parallel", 5, "Runs vmapped together.")
_GHOST = flags.DEFINE_bool("ghost_clipping", True,
                           "Closed-form per-example norms (else vmap(grad)).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the splits and the noise.")
_OUT = flags.DEFINE_string("out", None, "JSON-lines file (default: "
                           "results/dplvq_<dataset>.jsonl).")
_TABLE = flags.DEFINE_bool("table", False, "Table 1 + Fig. 1 mode.")
_TABLE_EPS = flags.DEFINE_string("table_epsilons", "0.75,1.5,2.5",
                                 "ε of Table 1.")
_FIG_EPS = flags.DEFINE_string("figure_epsilons", "0.25,0.5,1,5",
                               "Extra ε for Fig. 1 (besides the table's).")
_MODELS = flags.DEFINE_string("models", "glvq,gmlvq", "Table-mode models.")

_KEY_FIELDS = ("dataset", "model", "trainer", "epsilon", "delta", "q", "clip",
               "epochs", "learning_rate", "sigma_rule", "folds", "repeats",
               "seed", "scaling", "rank", "normalise", "phi",
               "init_variant")
_DEFAULT_LR = {"glvq": 0.05, "gmlvq": 0.05}


def prepare(name, data_dir, bounds_flag):
  """Pooled data in [−1, 1]^d, class indices, and how it was scaled."""
  ds = data.load_dataset(name, data_dir=data_dir)
  x, y = ds.x_train, ds.y_train
  if ds.x_test is not None:
    x = np.concatenate([x, ds.x_test])
    y = np.concatenate([y, ds.y_test])
  if bounds_flag != "auto":
    low, high = common.parse_floats(bounds_flag)
    bounds, scaling = (low, high), "public_bounds_flag"
  elif ds.bounds is not None:
    bounds, scaling = ds.bounds, "public_bounds"
  else:
    # Not private: the min/max are statistics of the data (see docstring).
    low, high = x.min(axis=0), x.max(axis=0)
    high = np.where(high > low, high, low + 1.0)
    bounds, scaling = (low, high), "data_minmax"
  x = data.scale_to_box(x, bounds)
  y = np.searchsorted(np.asarray(ds.classes), y)
  return x, y.astype(np.int32), len(ds.classes), scaling


def _init_variant():
  # None for the paper's Laplace init, so records written before the
  # Gaussian option existed keep matching (resume keys).
  return None if _INIT.value == "laplace" else _INIT.value


def run_one(key, x, y, num_classes, *, dataset, scaling, model, trainer,
            epsilon, lr):
  """One setting (flags fill the rest) → record dict."""
  train_on = _TRAIN_ON.value
  if train_on == "auto":
    train_on = "one_fold" if dataset == "mnist" else "other_folds"
  # Same splits for every setting (fold_in 0); a training key per setting,
  # derived from its name, so no two settings share noise.
  tag = zlib.crc32(f"{model}/{trainer}/{epsilon}".encode())
  record = lvq_eval.evaluate_setting(
      jax.random.fold_in(key, 0),
      jax.random.fold_in(jax.random.fold_in(key, 1), tag), x, y,
      num_classes=num_classes, model=model, trainer=trainer,
      epsilon=epsilon, delta=_DELTA.value, sampling_rate=_Q.value,
      clip_norm=_CLIP.value, epochs=_EPOCHS.value,
      learning_rate=lr or _DEFAULT_LR[model], sigma_rule=_SIGMA_RULE.value,
      init_fraction=_INIT_FRACTION.value, folds=_FOLDS.value,
      repeats=_REPEATS.value, train_on_one_fold=train_on == "one_fold",
      parallel_runs=_PARALLEL.value, rank=_RANK.value,
      normalise=_NORMALISE.value, phi_kind=_PHI.value,
      prototypes_per_class=_PPC.value, bfgs_iterations=_BFGS_ITERS.value,
      ghost_clipping=_GHOST.value, init_mechanism=_INIT.value,
      progress=common.progress)
  return {"dataset": dataset, **record, "sigma_rule": _SIGMA_RULE.value,
          "scaling": scaling,
          "privacy_covers_scaling": scaling != "data_minmax",
          "seed": _SEED.value, "platform": jax.default_backend(),
          "init_variant": _init_variant()}


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


def main(argv):
  del argv
  dataset = _DATASET.value
  out = _OUT.value or os.path.join("results", f"dplvq_{dataset}.jsonl")
  x, y, k, scaling = prepare(dataset, _DATA_DIR.value, _BOUNDS.value)
  key = jax.random.key(_SEED.value)
  if not _TABLE.value:
    record = run_one(key, x, y, k, dataset=dataset, scaling=scaling,
                     model=_MODEL.value, trainer=_TRAINER.value,
                     epsilon=_EPSILON.value, lr=_LR.value)
    common.emit_record(record, out)
    return
  table_eps = common.parse_floats(_TABLE_EPS.value)
  eps_all = sorted(set(table_eps) | set(common.parse_floats(_FIG_EPS.value)))
  models = [m for m in _MODELS.value.split(",") if m]
  # Cheap settings first; full-batch L-BFGS (costly for GMLVQ) last.
  settings = [(m, "sgd", None) for m in models]
  settings += [(m, "dpsgd", e) for e in eps_all for m in models]
  settings += [(m, "bfgs", None) for m in models]
  done = common.done_keys(out, _KEY_FIELDS)
  last = None
  for model, trainer, eps in settings:
    lr = _LR.value or _DEFAULT_LR[model]
    probe = {"dataset": dataset, "model": model, "trainer": trainer,
             "epsilon": eps, "delta": _DELTA.value, "q": _Q.value,
             "clip": _CLIP.value, "epochs": _EPOCHS.value,
             "learning_rate": lr, "sigma_rule": _SIGMA_RULE.value,
             "folds": _FOLDS.value, "repeats": _REPEATS.value,
             "seed": _SEED.value, "scaling": scaling, "rank": _RANK.value,
             "normalise": _NORMALISE.value, "phi": _PHI.value,
             "init_variant": _init_variant()}
    if common.record_key(probe, _KEY_FIELDS) in done:
      common.progress(f"skip (done): {model} {trainer} ε={eps}")
      continue
    common.progress(f"start: {model} {trainer} ε={eps}")
    last = run_one(key, x, y, k, dataset=dataset, scaling=scaling,
                   model=model, trainer=trainer, epsilon=eps, lr=lr)
    common.append_jsonl(out, last)
    common.progress(f"done: {model} {trainer} ε={eps}: error "
                    f"{last['error_mean']:.4f} ({last['error_std']:.4f}) in "
                    f"{last['seconds']:.0f}s")
  mine = [r for r in common.read_jsonl(out)
          if all(r.get(f) == v for f, v in (
              ("dataset", dataset), ("delta", _DELTA.value), ("q", _Q.value),
              ("clip", _CLIP.value), ("epochs", _EPOCHS.value),
              ("folds", _FOLDS.value), ("repeats", _REPEATS.value),
              ("seed", _SEED.value), ("sigma_rule", _SIGMA_RULE.value),
              ("init_variant", _init_variant())))]
  stem = os.path.splitext(out)[0]
  table = write_table(mine, stem + "_table.md", table_eps)
  write_figure(mine, stem + "_fig1.png", dataset)
  common.progress("table:\n" + table)
  summary = {"dataset": dataset, "table": stem + "_table.md",
             "figure": stem + "_fig1.png", "records": len(mine),
             "last": last}
  print(common.to_json(summary), flush=True)


if __name__ == "__main__":
  app.run(main)
