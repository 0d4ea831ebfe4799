r"""DP-GLVQ / DP-GMLVQ (Brinkrolf, Berger & Hammer, ESANN 2018).

One run: repeated k-fold CV of one (model, trainer, ε) setting::

  python -m launch.dplvq --dataset=digits --model=gmlvq --trainer=dpsgd \
      --epsilon=2.5 --repeats=1

The paper's Table 1 and Fig. 1 (``--table``)::

  python -m launch.dplvq --dataset=mnist --table --repeats=5 \
      --out=results/dplvq_mnist.jsonl

Private selection of a recipe from a JSON list of candidates (``--tune``)::

  python -m launch.dplvq --dataset=digits --model=glvq --epsilon=1.5 \
      --tune=candidates.json --tune_expected_trials=10 \
      --tune_distribution=geometric --folds=2 --repeats=1

The protocol, the feature bounds (``--bounds``), the flags and the
records: docs/dplvq.md; ``--tune``: docs/tuning.md.
"""

from __future__ import annotations

import os

from absl import flags

from dpcore import options
from launch import common, vocabulary

_DATASET = flags.DEFINE_string("dataset", "digits", "mnist, segment, har, "
                               "digits, ... (launch.data.load_dataset).")
flags.DEFINE_string("data_dir", None, "Where the files are.")
flags.DEFINE_string(
    "bounds", "auto", "Feature bounds: 'auto' (the dataset's public bounds; "
    "refused where it has none), 'LOW,HIGH' (public bounds), or "
    "'data_minmax' (the data's min/max: the paper's setting, labelled as not "
    "covered by the guarantee).")
flags.DEFINE_enum("model", "glvq", list(options.LVQModel), "Model.")
flags.DEFINE_enum("trainer", "dpsgd", list(options.LVQTrainer),
                  "DP-SGD, or the non-private SGD / L-BFGS.")
flags.DEFINE_float("epsilon", 1.5, "Total ε (init + DP-SGD).")
flags.DEFINE_float("delta", 1e-5, "δ.")
flags.DEFINE_float("sampling_rate", 0.01, "Poisson sampling rate q.")
flags.DEFINE_float("clip_norm", 0.5, "Per-example L2 clip C.")
flags.DEFINE_integer("epochs", 50, "Epochs E (T = E/q steps).")
flags.DEFINE_float("learning_rate", 0.05, "SGD learning rate.")
flags.DEFINE_enum(
    "sigma_rule", "accountant", list(options.SigmaRule),
    "σ from the RDP accountant for ε₂, or the paper's 2q√(T log(1/δ))/ε₂ "
    "(the ε it actually gives is reported).")
flags.DEFINE_float("init_fraction", 0.2, "ε₁ / ε.")
flags.DEFINE_enum(
    "init_mechanism", "laplace", list(options.InitMechanism),
    "Private init: the paper's Laplace on counts and sums, or one Gaussian "
    "mechanism on both (L2 sensitivity √(1+d); δ split in halves).")
flags.DEFINE_integer("folds", 5, "Folds of the CV.")
flags.DEFINE_integer("repeats", 5, "Repeats of the k-fold CV.")
flags.DEFINE_enum(
    "train_on", "auto", list(vocabulary.TrainOn),
    "auto: one fold for mnist (paper), the other folds otherwise.")
flags.DEFINE_integer("rank", None, "Rank of Ω (default: full).")
flags.DEFINE_bool("normalise", False,
                  "Project Ω to trace(ΩᵀΩ)=1 after each step.")
flags.DEFINE_enum("phi_kind", "identity", list(options.Phi), "Φ.")
flags.DEFINE_integer("prototypes_per_class", 1, "Prototypes/class.")
flags.DEFINE_integer("bfgs_iterations", 100, "L-BFGS steps.")
flags.DEFINE_bool("ghost_clipping", True,
                  "Closed-form per-example norms (else vmap(grad)).")
flags.DEFINE_integer("seed", 0, "Seed of the splits and the noise.")
flags.DEFINE_integer(
    "parallel_runs", 5, "Runs vmapped together (fewer where "
    "--memory_budget needs it).")
_MEMORY_BUDGET = flags.DEFINE_string(
    "memory_budget", "auto",
    "Memory the runs may use, e.g. 8G or 512M; auto: 3/4 of the memory the "
    "system reports available. Fewer than --parallel_runs runs are vmapped "
    "together where their estimate exceeds it (the same runs); a setting "
    "that does not fit even one run at a time is refused before training.")
flags.DEFINE_integer(
    "max_steps", 200_000, "Refuse settings whose SGD steps per run, "
    "T = epochs/q, exceed this (raise it to run such a setting anyway).")
_OUT = flags.DEFINE_string("out", None, "JSON-lines file (default: "
                           "runs/dplvq_<dataset>.jsonl, untracked).")
_TABLE = flags.DEFINE_bool("table", False, "Table 1 + Fig. 1 mode.")
_TABLE_EPSILONS = flags.DEFINE_list("table_epsilons", ["0.75", "1.5", "2.5"],
                                    "ε of Table 1.")
_FIGURE_EPSILONS = flags.DEFINE_list(
    "figure_epsilons", ["0.25", "0.5", "1", "5"],
    "Extra ε for Fig. 1 (besides the table's).")
_MODELS = flags.DEFINE_list("models", list(options.LVQModel),
                            "Table-mode models.")
_TUNE = flags.DEFINE_string(
    "tune", None, "JSON file: a list of candidate settings (learning_rate, "
    "clip_norm, epochs, sampling_rate, init_fraction) to select from "
    "privately (docs/tuning.md).")
_TUNE_TRIALS = flags.DEFINE_float(
    "tune_expected_trials", 10.0, "E[K], the expected number of trials.")
_TUNE_DISTRIBUTION = flags.DEFINE_string(
    "tune_distribution", "geometric", "Law of K: geometric, logarithmic, "
    "negative_binomial (with --tune_eta) or poisson.")
_TUNE_ETA = flags.DEFINE_float("tune_eta", None,
                               "η > -1 of --tune_distribution="
                               "negative_binomial.")
_TUNE_SCORE_EPSILON = flags.DEFINE_float(
    "tune_score_epsilon", 0.5, "ε of each trial's noisy validation count.")
_TUNE_VALIDATION = flags.DEFINE_float(
    "tune_validation_fraction", 0.2, "Share of each run's training rows "
    "held out to score the trials.")

# The spellings used before the flags took the library's names.
for _old, _new in (("q", "sampling_rate"), ("clip", "clip_norm"),
                   ("lr", "learning_rate"), ("phi", "phi_kind"),
                   ("parallel", "parallel_runs")):
  flags.DEFINE_alias(_old, _new)

_TUNE_FLAGS = ("tune_expected_trials", "tune_distribution", "tune_eta",
               "tune_score_epsilon", "tune_validation_fraction")


def _epsilons(flag) -> list[float]:
  values = common.parse_floats(flag.value, f"--{flag.name}",
                               example="0.75,1.5,2.5")
  if not values or not all(0.0 < v < float("inf") for v in values):
    raise ValueError(f"--{flag.name}={','.join(flag.value)}: give "
                     f"comma-separated ε > 0 (e.g. 0.75,1.5,2.5).")
  return values


def _tune(experiment, setting):
  """The checked --tune request (None without --tune)."""
  if _TUNE.value is None:
    given = [f"--{n}" for n in _TUNE_FLAGS if flags.FLAGS[n].present]
    if given:
      raise ValueError(f"{', '.join(given)} only apply with --tune=FILE "
                       f"(a JSON list of candidate settings).")
    return None
  if _TABLE.value:
    raise ValueError("--tune cannot be combined with --table: tune one "
                     "(model, ε) setting at a time.")
  return experiment.check_tuning(
      _TUNE.value, setting, distribution=_TUNE_DISTRIBUTION.value,
      expected_trials=_TUNE_TRIALS.value, eta=_TUNE_ETA.value,
      score_epsilon=_TUNE_SCORE_EPSILON.value,
      validation_fraction=_TUNE_VALIDATION.value)


def main(argv):
  del argv
  # Heavy imports here, so --help and flag errors stay fast.
  with common.heavy_imports():
    import jax  # pylint: disable=g-import-not-at-top

    from launch.experiments import (  # pylint: disable=g-import-not-at-top
        dplvq as experiment,
    )

  out = _OUT.value or os.path.join("runs", f"dplvq_{_DATASET.value}.jsonl")
  common.check_output_path(out, "--out")
  budget = _MEMORY_BUDGET.value.strip().lower()
  setting = common.setting_from_flags(
      experiment.Setting,
      memory_budget=(budget if budget == "auto" else common.parse_bytes(
          budget, "--memory_budget"))).check()
  if _TABLE.value:
    models = [options.parse(options.LVQModel, m, "models")
              for m in _MODELS.value]
    table_epsilons = _epsilons(_TABLE_EPSILONS)
    figure_epsilons = _epsilons(_FIGURE_EPSILONS)
  tune = _tune(experiment, setting)
  common.progress(f"{setting.dataset}: loading; {setting.steps:,} SGD steps "
                  f"per run, {setting.folds * setting.repeats} runs per "
                  f"setting")
  prepared = experiment.prepare(setting.dataset, setting.data_dir,
                                setting.bounds)
  key = jax.random.key(setting.seed)
  if _TABLE.value:
    summary = experiment.table(
        prepared, setting, out=out, models=models,
        table_epsilons=table_epsilons, figure_epsilons=figure_epsilons)
    print(common.to_json(summary), flush=True)
    return
  done = common.done_keys(out, experiment.KEY_FIELDS)
  if experiment.is_done(done, setting,
                        tune=None if tune is None else tune.describe()):
    common.progress(f"skipping 1 finished run: this setting is already in "
                    f"{out} (remove its line, or give another --out, to run "
                    f"it again)")
    return
  if tune is None:
    record = experiment.run(key, prepared, setting)
  else:
    record = experiment.run_tuning(key, prepared, setting, tune)
  common.emit_record(record, out)


if __name__ == "__main__":
  common.run_cli(main)
