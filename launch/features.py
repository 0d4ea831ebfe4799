r"""Scattering features + DP-SGD linear head on MNIST / Fashion-MNIST.

One JSON record per (ε, seed) (``--out``), the ledger's ε in ``privacy``::

  python -m launch.features --dataset=mnist --epsilons=1,3 --seeds=0,1,2 \
      --out=results/features_mnist.jsonl

A recipe chosen privately (``--tune``) on the last ``--validation``
training rows, once per seed::

  python -m launch.features --dataset=mnist --tune --epsilons=3 --seeds=0 \
      --validation=10000 --out=results/features_tuned_mnist.jsonl

The fixed public recipe the flags default to, ``--recipe``, σ's
calibration, ``--validation``, ``--tune`` and the results:
docs/features.md.
"""

from __future__ import annotations

import sys

from absl import flags

from launch import common

_DATASET = flags.DEFINE_string("dataset", "mnist", "mnist or fashion_mnist")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Where the files are.")
_EPSILONS = flags.DEFINE_list("epsilons", ["1", "3"], "target ε values")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "seeds (one run each)")
_DELTA = flags.DEFINE_float("delta", 1e-5, "δ")
flags.DEFINE_integer("J", 2, "scattering scales")
flags.DEFINE_integer("L", 8, "scattering orientations")
flags.DEFINE_enum("norm", "group", ["group", "data", "none"],
                  "normalisation of the scattering channels")
flags.DEFINE_integer("num_groups", 27, "groups of --norm=group")
flags.DEFINE_float(
    "norm_noise_multiplier", 8.0, "σ/Δ of --norm=data (T&B's σ_norm)")
flags.DEFINE_float("clip_mean", 1.0, "--norm=data: bound on ‖channel means‖")
flags.DEFINE_float(
    "clip_square", 1.0, "--norm=data: bound on ‖channel mean squares‖")
flags.DEFINE_integer("batch_size", 8192, "expected batch qN")
flags.DEFINE_float("epochs", 40.0, "epochs (T = E/q)")
flags.DEFINE_float("clip_norm", 0.1, "per-example clip C")
flags.DEFINE_float("learning_rate", 4.0, "SGD learning rate")
flags.DEFINE_float("momentum", 0.9, "SGD momentum")
_CACHE = flags.DEFINE_string("cache_dir", None,
                             "where to keep the features (.npy)")
_OUT = flags.DEFINE_string("out", None, "JSON lines output")
_RECIPE = flags.DEFINE_string(
    "recipe", None, "a named recipe of launch.experiments.features."
    "CANDIDATES (e.g. base, batch4096_lr8, data_norm) to start from; "
    "explicit flags override it")
_VALIDATION = flags.DEFINE_integer(
    "validation", 0, "hold out the last V training rows and score on them "
    "(the test set is not read); with --tune: the tuning's held-out rows")
_TUNE = flags.DEFINE_bool("tune", False,
                          "choose the recipe privately (dpcore.tuning)")
_TUNE_CANDIDATES = flags.DEFINE_list(
    "tune_candidates", None, "named recipes the tuning draws from "
    "(default: TUNE_CANDIDATES, every group-norm recipe of 40 epochs)")
_TUNE_DISTRIBUTION = flags.DEFINE_string(
    "tune_distribution", "logarithmic", "law of the number of trials K")
_TUNE_TRIALS = flags.DEFINE_float("tune_expected_trials", 3.0, "E[K]")
_TUNE_SCORE_EPS = flags.DEFINE_float(
    "tune_score_epsilon", 0.5, "ε of each trial's noisy validation count")

_RECIPE_FLAGS = ("J", "L", "norm", "num_groups", "norm_noise_multiplier",
                 "clip_mean", "clip_square", "batch_size", "epochs",
                 "clip_norm", "learning_rate", "momentum")
"""Flags named as the Recipe's fields."""


def _recipe(features):
  """The recipe: --recipe's candidate (or the default), flags given win."""
  import dataclasses  # pylint: disable=g-import-not-at-top

  from mechanisms.features import scatternet  # pylint: disable=g-import-not-at-top
  base = scatternet.Recipe()
  if _RECIPE.value is not None:
    if _RECIPE.value not in features.CANDIDATES:
      raise ValueError(f"--recipe={_RECIPE.value!r} is not one of "
                       f"{sorted(features.CANDIDATES)}.")
    base = features.CANDIDATES[_RECIPE.value]
  given = {name: flags.FLAGS[name].value for name in _RECIPE_FLAGS
           if flags.FLAGS[name].present}
  return dataclasses.replace(base, **given)


def main(argv):
  del argv
  common.check_output_path(_OUT.value)
  from launch.experiments import features  # pylint: disable=g-import-not-at-top
  command = "python -m launch.features " + " ".join(sys.argv[1:])
  epsilons = common.parse_floats(_EPSILONS.value)
  seeds = common.parse_ints(_SEEDS.value)
  if _VALIDATION.value < 0:
    raise ValueError(f"--validation={_VALIDATION.value} must be ≥ 0 (0: "
                     f"score on the test set).")
  if _TUNE.value:
    from dpcore import tuning  # pylint: disable=g-import-not-at-top
    names = list(_TUNE_CANDIDATES.value or features.TUNE_CANDIDATES)
    unknown = [c for c in names if c not in features.CANDIDATES]
    if unknown:
      raise ValueError(f"--tune_candidates: {unknown} not among "
                       f"{sorted(features.CANDIDATES)}.")
    if not _VALIDATION.value:
      raise ValueError("--tune needs --validation=V held-out training rows "
                       "(e.g. 10000) to score its trials on.")
    count = tuning.trial_count(_TUNE_DISTRIBUTION.value, _TUNE_TRIALS.value)
    for epsilon in epsilons:
      for seed in seeds:
        record = features.run_tuned(
            dataset=_DATASET.value, epsilon=epsilon, delta=_DELTA.value,
            candidates=[features.CANDIDATES[c] for c in names],
            count=count, validation=_VALIDATION.value, seed=seed,
            score_epsilon=_TUNE_SCORE_EPS.value, data_dir=_DATA_DIR.value,
            cache_dir=_CACHE.value, progress=common.progress)
        record["tuning"]["candidate_names"] = names
        common.emit_record({**record, "command": command}, _OUT.value)
    return
  recipe = _recipe(features)
  for record in features.run(
      dataset=_DATASET.value, epsilons=epsilons, seeds=seeds,
      delta=_DELTA.value, recipe=recipe, data_dir=_DATA_DIR.value,
      cache_dir=_CACHE.value, validation=_VALIDATION.value,
      progress=common.progress):
    common.emit_record({**record, "recipe_name": _RECIPE.value,
                        "command": command}, _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
