r"""DP-GLVQ / DP-GMLVQ (Brinkrolf, Berger & Hammer, ESANN 2018).

One run: repeated k-fold CV of one (model, trainer, ε) setting::

  python -m launch.dplvq --dataset=digits --model=gmlvq --trainer=dpsgd \
      --epsilon=2.5 --repeats=1

Table mode: Table 1 (ε ∈ {0.75, 1.5, 2.5} plus the non-private SGD and
L-BFGS baselines, GLVQ and GMLVQ) and Fig. 1 (error against ε), written as
JSON lines (``--out``), a Markdown table and a PNG beside it::

  python -m launch.dplvq --dataset=mnist --table --repeats=5 \
      --out=results/dplvq_mnist.jsonl

Features are mapped to [−1, 1] by
``launch.data.loaders.scale_to_box`` with public
bounds (pixels: (0, 255); HAR: (−1, 1), as its documentation states). A
tabular set without public bounds (Segment, WDBC) is refused by
``--bounds=auto``: pass public bounds with
``--bounds=LOW,HIGH``, or ask for the paper's setting with
``--bounds=data_minmax``. That uses the pooled data's per-feature min and
max, and the record says ``"scaling": "data_minmax"``. This step reads the
private data and is NOT covered by the reported guarantee. The paper does
the same without saying so.
Every run prints its record as the last stdout line and appends it to
``--out``; an interrupted table resumes where it stopped. The logic lives in
``launch/dplvq_experiment.py`` (no flags), for notebooks and tests.
"""

from __future__ import annotations

import os

import jax
from absl import app, flags

from launch import common
from launch.experiments import dplvq as experiment

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
    "bounds", "auto", "Feature bounds: 'auto' (the dataset's public bounds; "
    "refused where it has none), 'LOW,HIGH' (public bounds), or "
    "'data_minmax' (the data's min/max: the paper's setting, labelled as not "
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


def _settings() -> experiment.Settings:
  return experiment.Settings(
      delta=_DELTA.value, q=_Q.value, clip=_CLIP.value, epochs=_EPOCHS.value,
      lr=_LR.value, sigma_rule=_SIGMA_RULE.value,
      init_fraction=_INIT_FRACTION.value, init_mechanism=_INIT.value,
      folds=_FOLDS.value, repeats=_REPEATS.value, train_on=_TRAIN_ON.value,
      rank=_RANK.value, normalise=_NORMALISE.value, phi=_PHI.value,
      prototypes_per_class=_PPC.value, bfgs_iterations=_BFGS_ITERS.value,
      parallel=_PARALLEL.value, ghost_clipping=_GHOST.value,
      seed=_SEED.value)


def main(argv):
  del argv
  dataset = _DATASET.value
  out = _OUT.value or os.path.join("results", f"dplvq_{dataset}.jsonl")
  prepared = experiment.prepare(dataset, _DATA_DIR.value, _BOUNDS.value)
  settings = _settings()
  if not _TABLE.value:
    record = experiment.run_setting(
        jax.random.key(settings.seed), prepared, settings,
        model=_MODEL.value, trainer=_TRAINER.value, epsilon=_EPSILON.value)
    common.emit_record(record, out)
    return
  summary = experiment.table(
      prepared, settings, out=out,
      models=[m for m in _MODELS.value.split(",") if m],
      table_eps=common.parse_floats(_TABLE_EPS.value),
      figure_eps=common.parse_floats(_FIG_EPS.value))
  print(common.to_json(summary), flush=True)


if __name__ == "__main__":
  app.run(main)
