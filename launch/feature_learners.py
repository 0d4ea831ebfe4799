r"""Federated DP-SGD and DP-G(M)LVQ on scattering features.

One JSON record per run (``--out``), the ledger's ε in ``privacy`` and the
command in ``command``::

  python -m launch.feature_learners --learner=fedsgd --trust=server \
      --participants=5 --rows_per_participant=10000 --epsilon=1 \
      --out=results/features_federated_mnist.jsonl
  python -m launch.feature_learners --learner=dplvq --inputs=features \
      --epsilon=1 --out=results/features_dplvq_mnist.jsonl

The fixed public recipes the flags default to, the feature map and the
results: docs/features_learners.md.
"""

from __future__ import annotations

import sys

from absl import flags

from dpcore import options
from launch import common, vocabulary

_LEARNER = flags.DEFINE_enum("learner", None, list(vocabulary.Learner),
                             "which private learner")
flags.DEFINE_string("dataset", "mnist", "mnist or fashion_mnist")
flags.DEFINE_string("data_dir", None, "Where the files are.")
flags.DEFINE_string("cache_dir", None,
                    "where to keep the scattering features (.npy)")
flags.DEFINE_float("epsilon", 1.0, "target ε")
flags.DEFINE_float("delta", 1e-5, "δ")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"],
                           "one federated run per seed; DP-LVQ: the first")
flags.DEFINE_integer("J", 2, "scattering scales")
flags.DEFINE_integer("L", 8, "scattering orientations")
flags.DEFINE_integer("num_groups", 27, "groups of the group norm")
flags.DEFINE_enum("trust", "server", list(options.Trust),
                  "server, local or participant")
flags.DEFINE_integer("participants", 5, "P")
flags.DEFINE_integer("rows_per_participant", 10_000, "n")
flags.DEFINE_integer("partition_seed", 0, "seed of the rows' split")
flags.DEFINE_integer("batch_size", 8192, "expected rows of a step: q = B/(P·n)")
flags.DEFINE_float("epochs", 40.0, "epochs (T = E/q)")
flags.DEFINE_float("clip_norm", 0.1, "clip C")
flags.DEFINE_float("learning_rate", 4.0, "server SGD step size")
flags.DEFINE_float("momentum", 0.9, "server SGD momentum")
flags.DEFINE_float(
    "noise_multiplier", None,
    "σ given (0: the non-private reference); unset: calibrated for ε")
flags.DEFINE_integer("participant_chunk", None,
                     "participants per vmapped block")
flags.DEFINE_enum("inputs", "features", list(vocabulary.Inputs),
                  "DP-LVQ on features or pixels")
_PROJ = flags.DEFINE_string(
    "projection_dim", "784",
    "features' dimension after the fixed random projection; 'none' keeps "
    "all")
flags.DEFINE_integer("projection_seed", 0, "public seed of the projection")
flags.DEFINE_float("feature_bound", 3.0,
                   "public bound c: [-c, c] maps onto [-1, 1]")
flags.DEFINE_enum("lvq_model", "gmlvq", list(options.LVQModel), "the model")
flags.DEFINE_enum("lvq_trainer", "dpsgd", list(options.LVQTrainer),
                  "dpsgd (private) or sgd (reference)")
flags.DEFINE_float("lvq_sampling_rate", 0.01, "DP-LVQ q")
flags.DEFINE_float("lvq_clip_norm", 0.5, "DP-LVQ clip C")
flags.DEFINE_integer("lvq_epochs", 50, "DP-LVQ epochs")
flags.DEFINE_float("lvq_learning_rate", 0.05, "DP-LVQ step size")
flags.DEFINE_enum("lvq_init_mechanism", "laplace", list(options.InitMechanism),
                  "laplace (the paper's) or gaussian")
flags.DEFINE_integer("lvq_rank", None, "rows of Ω (None: full)")
flags.DEFINE_integer("lvq_folds", 5, "CV folds")
flags.DEFINE_integer("lvq_repeats", 5, "CV repeats")
flags.DEFINE_integer("lvq_parallel_runs", 5, "CV runs vmapped together")
_LVQ_MEMORY = flags.DEFINE_string("lvq_memory_budget", None,
                                  "e.g. 8G (unset: no check)")
_OUT = flags.DEFINE_string("out", None, "JSON lines output")

# The spellings used before the fields took DP-LVQ's names.
flags.DEFINE_alias("lvq_clip", "lvq_clip_norm")
flags.DEFINE_alias("lvq_parallel", "lvq_parallel_runs")


def main(argv):
  del argv
  common.check_output_path(_OUT.value)
  from launch.experiments import feature_learners  # pylint: disable=g-import-not-at-top
  if _LEARNER.value is None:
    raise ValueError("--learner is required: fedsgd or dplvq.")
  proj = _PROJ.value.strip().lower()
  if proj != "none" and not proj.isdigit():
    raise ValueError(f"--projection_dim={_PROJ.value!r}: give a positive "
                     f"integer, or none to keep every feature.")
  setting = common.setting_from_flags(
      feature_learners.Setting,
      seeds=tuple(common.parse_ints(_SEEDS.value)),
      projection_dim=None if proj == "none" else int(proj),
      lvq_memory_budget=None if _LVQ_MEMORY.value is None else
      common.parse_bytes(_LVQ_MEMORY.value, "--lvq_memory_budget")).check()
  command = "python -m launch.feature_learners " + " ".join(sys.argv[1:])
  for record in feature_learners.run(setting, progress=common.progress):
    common.emit_record({**record, "command": command}, _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
