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
``dpcore.clipping.scale_to_box`` with public
bounds (pixels: (0, 255); HAR: (−1, 1), as its documentation states). A
tabular set without public bounds (Segment, WDBC) is refused by
``--bounds=auto``: pass public bounds with
``--bounds=LOW,HIGH``, or ask for the paper's setting with
``--bounds=data_minmax``. That uses the pooled data's per-feature min and
max, and the record says ``"scaling": "data_minmax"``. This step reads the
private data and is NOT covered by the reported guarantee. The paper does
the same without saying so.
``--bounds=LOW,HIGH`` covering less than half of a set's public range is
refused (most values would be clipped).

Private selection of a recipe (``dpcore.tuning``, docs/tuning.md): give
a JSON list of candidate settings (keys ``lr``, ``clip``, ``epochs``,
``q``, ``init_fraction``; the flags give the rest)::

  python -m launch.dplvq --dataset=digits --model=glvq --epsilon=1.5 \
      --tune=candidates.json --tune_expected_trials=10 \
      --tune_distribution=geometric --folds=2 --repeats=1

Each trial draws a candidate uniformly at random, trains on a run's
training rows less ``--tune_validation_fraction`` of them held out, and is
scored by a Laplace-noised count of held-out rows it classifies correctly
(``--tune_score_epsilon``); K ~ ``--tune_distribution`` trials run
(E[K] = ``--tune_expected_trials``) and the best model is released. With
``--tune``, ``--epsilon`` is each trial's target; the record's
``privacy.epsilon`` covers the whole tuning, and ``tuning`` says which
candidate won and how many trials ran. Without ``--tune`` the recipe is
the flags' values, whose defaults are the paper's fixed recipe, chosen
before any data were seen.

Memory: before a setting trains, its ``--parallel`` vmapped runs are
compiled and XLA's count of the program's buffers, plus the data and the
runs' row indices, is compared with ``--memory_budget`` (default 3/4 of
the memory available); where it does not fit, fewer runs are vmapped
together (each run keeps its key and rows, and the progress line says how
many); where even one run does not fit, the setting is refused in one
line naming the estimate and the budget.

Every flag is checked before any data is read or code compiled (a mistake
ends with one ``error:`` line and exit status 2), including the number of
SGD steps T = E/q of one run, refused above ``--max_steps``. Every run
prints its record as the last stdout line and appends it to ``--out``;
finished runs found there are skipped (``skipping N finished runs``), so an
interrupted table resumes where it stopped. Records put the guarantee under
``privacy`` (``dpcore.accounting.PRIVACY_FIELDS``) and the DP-SGD plan (σ,
ε₁, steps) under ``dpsgd``. The logic lives in
``launch/experiments/dplvq.py`` (no flags), for notebooks and tests.
"""

from __future__ import annotations

import os

from absl import flags

from dpcore import options
from launch import common, vocabulary

_DATASET = flags.DEFINE_string("dataset", "digits", "mnist, segment, har, "
                               "digits, ... (launch.data.load_dataset).")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Where the files are.")
_MODEL = flags.DEFINE_enum("model", "glvq", list(options.LVQModel), "Model.")
_TRAINER = flags.DEFINE_enum("trainer", "dpsgd", list(options.LVQTrainer),
                             "DP-SGD, or the non-private SGD / L-BFGS.")
_EPSILON = flags.DEFINE_float("epsilon", 1.5, "Total ε (init + DP-SGD).")
_DELTA = flags.DEFINE_float("delta", 1e-5, "δ.")
_Q = flags.DEFINE_float("q", 0.01, "Poisson sampling rate q.")
_CLIP = flags.DEFINE_float("clip", 0.5, "Per-example L2 clip C.")
_EPOCHS = flags.DEFINE_integer("epochs", 50, "Epochs E (T = E/q steps).")
_LR = flags.DEFINE_float("lr", None, "SGD learning rate (default: 0.05 for "
                         "both models).")
_SIGMA_RULE = flags.DEFINE_enum(
    "sigma_rule", "accountant", list(options.SigmaRule),
    "σ from the RDP accountant for ε₂, or the paper's 2q√(T log(1/δ))/ε₂ "
    "(the ε it actually gives is reported).")
_INIT_FRACTION = flags.DEFINE_float("init_fraction", 0.2, "ε₁ / ε.")
_INIT = flags.DEFINE_enum(
    "init_mechanism", "laplace", list(options.InitMechanism),
    "Private init: the paper's Laplace on counts and sums, or one Gaussian "
    "mechanism on both (L2 sensitivity √(1+d); δ split in halves).")
_FOLDS = flags.DEFINE_integer("folds", 5, "Folds of the CV.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Repeats of the k-fold CV.")
_TRAIN_ON = flags.DEFINE_enum(
    "train_on", "auto", list(vocabulary.TrainOn),
    "auto: one fold for mnist (paper), the other folds otherwise.")
_BOUNDS = flags.DEFINE_string(
    "bounds", "auto", "Feature bounds: 'auto' (the dataset's public bounds; "
    "refused where it has none), 'LOW,HIGH' (public bounds), or "
    "'data_minmax' (the data's min/max: the paper's setting, labelled as not "
    "covered by the guarantee).")
_RANK = flags.DEFINE_integer("rank", None, "Rank of Ω (default: full).")
_NORMALISE = flags.DEFINE_bool("normalise", False,
                               "Project Ω to trace(ΩᵀΩ)=1 after each step.")
_PHI = flags.DEFINE_enum("phi", "identity", list(options.Phi), "Φ.")
_PPC = flags.DEFINE_integer("prototypes_per_class", 1, "Prototypes/class.")
_BFGS_ITERS = flags.DEFINE_integer("bfgs_iterations", 100, "L-BFGS steps.")
_PARALLEL = flags.DEFINE_integer("parallel", 5, "Runs vmapped together "
                                  "(fewer where --memory_budget needs it).")
_MEMORY_BUDGET = flags.DEFINE_string(
    "memory_budget", "auto",
    "Memory the runs may use, e.g. 8G or 512M; auto: 3/4 of the memory the "
    "system reports available. Fewer than --parallel runs are vmapped "
    "together where their estimate exceeds it (the same runs); a setting "
    "that does not fit even one run at a time is refused before training.")
_GHOST = flags.DEFINE_bool("ghost_clipping", True,
                           "Closed-form per-example norms (else vmap(grad)).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the splits and the noise.")
_OUT = flags.DEFINE_string("out", None, "JSON-lines file (default: "
                           "runs/dplvq_<dataset>.jsonl, untracked).")
_TABLE = flags.DEFINE_bool("table", False, "Table 1 + Fig. 1 mode.")
_TABLE_EPS = flags.DEFINE_string("table_epsilons", "0.75,1.5,2.5",
                                 "ε of Table 1.")
_FIG_EPS = flags.DEFINE_string("figure_epsilons", "0.25,0.5,1,5",
                               "Extra ε for Fig. 1 (besides the table's).")
_MODELS = flags.DEFINE_string("models", "glvq,gmlvq", "Table-mode models.")
_TUNE = flags.DEFINE_string(
    "tune", None, "JSON file: a list of candidate settings (lr, clip, "
    "epochs, q, init_fraction) to select from privately (docs/tuning.md).")
_TUNE_TRIALS = flags.DEFINE_float(
    "tune_expected_trials", 10.0, "E[K], the expected number of trials.")
_TUNE_DIST = flags.DEFINE_string(
    "tune_distribution", "geometric", "Law of K: geometric, logarithmic, "
    "negative_binomial (with --tune_eta) or poisson.")
_TUNE_ETA = flags.DEFINE_float("tune_eta", None,
                               "η > -1 of --tune_distribution="
                               "negative_binomial.")
_TUNE_SCORE_EPS = flags.DEFINE_float(
    "tune_score_epsilon", 0.5, "ε of each trial's noisy validation count.")
_TUNE_VAL = flags.DEFINE_float(
    "tune_validation_fraction", 0.2, "Share of each run's training rows "
    "held out to score the trials.")
_MAX_STEPS = flags.DEFINE_integer(
    "max_steps", 200_000, "Refuse settings whose SGD steps per run, "
    "T = epochs/q, exceed this (raise it to run such a setting anyway).")


def _settings(experiment):
  return experiment.Settings(
      delta=_DELTA.value, q=_Q.value, clip=_CLIP.value, epochs=_EPOCHS.value,
      lr=_LR.value, sigma_rule=_SIGMA_RULE.value,
      init_fraction=_INIT_FRACTION.value, init_mechanism=_INIT.value,
      folds=_FOLDS.value, repeats=_REPEATS.value, train_on=_TRAIN_ON.value,
      rank=_RANK.value, normalise=_NORMALISE.value, phi=_PHI.value,
      prototypes_per_class=_PPC.value, bfgs_iterations=_BFGS_ITERS.value,
      parallel=_PARALLEL.value, ghost_clipping=_GHOST.value,
      seed=_SEED.value, memory_budget=_memory_budget())


def _memory_budget():
  """``--memory_budget`` in bytes (``auto``: 3/4 of the memory available,
  None where the system does not say)."""
  from dpcore import memory  # pylint: disable=g-import-not-at-top
  text = _MEMORY_BUDGET.value
  if text.strip().lower() == "auto":
    return memory.default_budget()
  return common.parse_bytes(text, "--memory_budget")


_TUNE_FLAGS = ("tune_expected_trials", "tune_distribution", "tune_eta",
               "tune_score_epsilon", "tune_validation_fraction")


def _check_tune(experiment, settings):
  """The validated --tune request (None without --tune)."""
  if _TUNE.value is None:
    given = [f"--{n}" for n in _TUNE_FLAGS if flags.FLAGS[n].present]
    if given:
      raise ValueError(f"{', '.join(given)} only apply with --tune=FILE "
                       f"(a JSON list of candidate settings).")
    return None
  if _TABLE.value:
    raise ValueError("--tune cannot be combined with --table: tune one "
                     "(model, ε) setting at a time.")
  if _TRAINER.value != "dpsgd":
    raise ValueError(f"--tune needs --trainer=dpsgd (got "
                     f"{_TRAINER.value!r}): a non-private trial has no "
                     f"guarantee to tune with.")
  return experiment.check_tuning(
      _TUNE.value, settings, distribution=_TUNE_DIST.value,
      expected_trials=_TUNE_TRIALS.value, eta=_TUNE_ETA.value,
      score_epsilon=_TUNE_SCORE_EPS.value,
      validation_fraction=_TUNE_VAL.value, max_steps=_MAX_STEPS.value)


def main(argv):
  del argv
  # Heavy imports here, so --help and flag errors stay fast.
  with common.heavy_imports():
    import jax  # pylint: disable=g-import-not-at-top

    from launch.data import loaders  # pylint: disable=g-import-not-at-top
    from launch.experiments import (  # pylint: disable=g-import-not-at-top
        dplvq as experiment,
    )

  dataset = _DATASET.value
  out = _OUT.value or os.path.join("runs", f"dplvq_{dataset}.jsonl")
  common.check_output_path(out, "--out")
  settings = _settings(experiment)
  steps = experiment.check_settings(settings, max_steps=_MAX_STEPS.value)
  if _TABLE.value:
    models = experiment.parse_models(_MODELS.value)
    table_eps = experiment.parse_epsilons("--table_epsilons",
                                          _TABLE_EPS.value)
    figure_eps = experiment.parse_epsilons("--figure_epsilons",
                                           _FIG_EPS.value)
  else:
    experiment.check_run(model=_MODEL.value, trainer=_TRAINER.value,
                         epsilon=_EPSILON.value)
  tune = _check_tune(experiment, settings)
  loaders.check_dataset(dataset, data_dir=_DATA_DIR.value)
  experiment.check_bounds(dataset, _BOUNDS.value)
  common.progress(f"{dataset}: loading; {steps:,} SGD steps per run, "
                  f"{settings.folds * settings.repeats} runs per setting")
  prepared = experiment.prepare(dataset, _DATA_DIR.value, _BOUNDS.value)
  n = prepared.x.shape[0]
  if settings.folds > n:
    raise ValueError(f"--folds={settings.folds}: {dataset!r} has only {n} "
                     f"rows; give at most {n} folds (e.g. --folds=5).")
  if tune is not None:
    if experiment.is_done(common.done_keys(out, experiment.KEY_FIELDS),
                          prepared, settings, _MODEL.value, "dpsgd",
                          _EPSILON.value, tune=tune.describe()):
      common.progress(f"skipping 1 finished run: this tuning is already in "
                      f"{out} (remove its line, or give another --out, to "
                      f"run it again)")
      return
    record = experiment.run_tuning(
        jax.random.key(settings.seed), prepared, settings, tune,
        model=_MODEL.value, epsilon=_EPSILON.value)
    common.emit_record(record, out)
    return
  if not _TABLE.value:
    eps = _EPSILON.value if _TRAINER.value == "dpsgd" else None
    if experiment.is_done(common.done_keys(out, experiment.KEY_FIELDS),
                          prepared, settings, _MODEL.value, _TRAINER.value,
                          eps):
      common.progress(f"skipping 1 finished run: this setting is already "
                      f"in {out} (remove its line, or give another --out, "
                      f"to run it again)")
      return
    record = experiment.run_setting(
        jax.random.key(settings.seed), prepared, settings,
        model=_MODEL.value, trainer=_TRAINER.value, epsilon=eps)
    common.emit_record(record, out)
    return
  summary = experiment.table(
      prepared, settings, out=out, models=models, table_eps=table_eps,
      figure_eps=figure_eps)
  print(common.to_json(summary), flush=True)


if __name__ == "__main__":
  common.run_cli(main)
