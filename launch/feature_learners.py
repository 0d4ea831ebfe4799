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

from launch import common

_LEARNER = flags.DEFINE_enum("learner", None, ["fedsgd", "dplvq"],
                             "which private learner")
_DATASET = flags.DEFINE_string("dataset", "mnist", "mnist or fashion_mnist")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Where the files are.")
_CACHE = flags.DEFINE_string("cache_dir", None,
                             "where to keep the scattering features (.npy)")
_EPSILON = flags.DEFINE_float("epsilon", 1.0, "target ε")
_DELTA = flags.DEFINE_float("delta", 1e-5, "δ")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"],
                           "one federated run per seed; DP-LVQ: the first")
_J = flags.DEFINE_integer("J", 2, "scattering scales")
_L = flags.DEFINE_integer("L", 8, "scattering orientations")
_GROUPS = flags.DEFINE_integer("num_groups", 27, "groups of the group norm")
_TRUST = flags.DEFINE_string("trust", "server",
                             "server, local or participant")
_PARTICIPANTS = flags.DEFINE_integer("participants", 5, "P")
_ROWS = flags.DEFINE_integer("rows_per_participant", 10_000, "n")
_PARTITION_SEED = flags.DEFINE_integer("partition_seed", 0,
                                       "seed of the rows' split")
_BATCH = flags.DEFINE_integer("batch_size", 8192,
                              "expected rows of a step: q = B/(P·n)")
_EPOCHS = flags.DEFINE_float("epochs", 40.0, "epochs (T = E/q)")
_CLIP = flags.DEFINE_float("clip_norm", 0.1, "clip C")
_LR = flags.DEFINE_float("learning_rate", 4.0, "server SGD step size")
_MOMENTUM = flags.DEFINE_float("momentum", 0.9, "server SGD momentum")
_SIGMA = flags.DEFINE_float(
    "noise_multiplier", None,
    "σ given (0: the non-private reference); unset: calibrated for ε")
_CHUNK = flags.DEFINE_integer("participant_chunk", None,
                              "participants per vmapped block")
_INPUTS = flags.DEFINE_string("inputs", "features",
                              "DP-LVQ on features or pixels")
_PROJ = flags.DEFINE_string(
    "projection_dim", "784",
    "features' dimension after the fixed random projection; 'none' keeps "
    "all")
_PROJ_SEED = flags.DEFINE_integer("projection_seed", 0,
                                  "public seed of the projection")
_BOUND = flags.DEFINE_float("feature_bound", 3.0,
                            "public bound c: [-c, c] maps onto [-1, 1]")
_MODEL = flags.DEFINE_string("lvq_model", "gmlvq", "glvq or gmlvq")
_TRAINER = flags.DEFINE_string("lvq_trainer", "dpsgd",
                               "dpsgd (private) or sgd (reference)")
_LVQ_Q = flags.DEFINE_float("lvq_sampling_rate", 0.01, "DP-LVQ q")
_LVQ_CLIP = flags.DEFINE_float("lvq_clip", 0.5, "DP-LVQ clip C")
_LVQ_EPOCHS = flags.DEFINE_integer("lvq_epochs", 50, "DP-LVQ epochs")
_LVQ_LR = flags.DEFINE_float("lvq_learning_rate", 0.05, "DP-LVQ step size")
_LVQ_INIT = flags.DEFINE_string("lvq_init_mechanism", "laplace",
                                "laplace (the paper's) or gaussian")
_LVQ_RANK = flags.DEFINE_integer("lvq_rank", None, "rows of Ω (None: full)")
_LVQ_FOLDS = flags.DEFINE_integer("lvq_folds", 5, "CV folds")
_LVQ_REPEATS = flags.DEFINE_integer("lvq_repeats", 5, "CV repeats")
_LVQ_PARALLEL = flags.DEFINE_integer("lvq_parallel", 5,
                                     "CV runs vmapped together")
_LVQ_MEMORY = flags.DEFINE_string("lvq_memory_budget", None,
                                  "e.g. 8G (unset: no check)")
_OUT = flags.DEFINE_string("out", None, "JSON lines output")


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
  setting = feature_learners.Setting(
      learner=_LEARNER.value, dataset=_DATASET.value,
      data_dir=_DATA_DIR.value, cache_dir=_CACHE.value,
      epsilon=_EPSILON.value, delta=_DELTA.value,
      seeds=tuple(common.parse_ints(_SEEDS.value)), J=_J.value, L=_L.value,
      num_groups=_GROUPS.value, trust=_TRUST.value,
      participants=_PARTICIPANTS.value, rows_per_participant=_ROWS.value,
      partition_seed=_PARTITION_SEED.value, batch_size=_BATCH.value,
      epochs=_EPOCHS.value, clip_norm=_CLIP.value,
      learning_rate=_LR.value, momentum=_MOMENTUM.value,
      noise_multiplier=_SIGMA.value, participant_chunk=_CHUNK.value,
      inputs=_INPUTS.value,
      projection_dim=None if proj == "none" else int(proj),
      projection_seed=_PROJ_SEED.value, feature_bound=_BOUND.value,
      lvq_model=_MODEL.value, lvq_trainer=_TRAINER.value,
      lvq_sampling_rate=_LVQ_Q.value, lvq_clip=_LVQ_CLIP.value,
      lvq_epochs=_LVQ_EPOCHS.value, lvq_learning_rate=_LVQ_LR.value,
      lvq_init_mechanism=_LVQ_INIT.value, lvq_rank=_LVQ_RANK.value,
      lvq_folds=_LVQ_FOLDS.value, lvq_repeats=_LVQ_REPEATS.value,
      lvq_parallel=_LVQ_PARALLEL.value,
      lvq_memory_budget=None if _LVQ_MEMORY.value is None else
      common.parse_bytes(_LVQ_MEMORY.value, "--lvq_memory_budget")).check()
  command = "python -m launch.feature_learners " + " ".join(sys.argv[1:])
  for record in feature_learners.run(setting, progress=common.progress):
    common.emit_record({**record, "command": command}, _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
