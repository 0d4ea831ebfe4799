r"""Scattering features + DP-SGD linear head on MNIST / Fashion-MNIST.

Flags in, one call of :func:`launch.experiments.features.run`, one JSON
record per (ε, seed) out (``--out``), the ledger's ε in ``privacy``::

  python -m launch.features --dataset=mnist --epsilons=1,3 --seeds=0,1,2 \
      --out=results/features_mnist.jsonl

The recipe flags default to the fixed public recipe of docs/features.md
(Tramèr & Boneh's linear ScatterNet: J = 2, L = 8, group norm G = 27,
expected batch 8192, 40 epochs, C = 0.1, momentum SGD lr 4).
"""

from __future__ import annotations

from absl import flags

from launch import common

_DATASET = flags.DEFINE_string("dataset", "mnist", "mnist or fashion_mnist")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Where the files are.")
_EPSILONS = flags.DEFINE_list("epsilons", ["1", "3"], "target ε values")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "seeds (one run each)")
_DELTA = flags.DEFINE_float("delta", 1e-5, "δ")
_J = flags.DEFINE_integer("J", 2, "scattering scales")
_L = flags.DEFINE_integer("L", 8, "scattering orientations")
_NORM = flags.DEFINE_enum("norm", "group", ["group", "data", "none"],
                          "normalisation of the scattering channels")
_GROUPS = flags.DEFINE_integer("num_groups", 27, "groups of --norm=group")
_NORM_SIGMA = flags.DEFINE_float(
    "norm_noise_multiplier", 8.0, "σ/Δ of --norm=data (T&B's σ_norm)")
_CLIP_MEAN = flags.DEFINE_float("clip_mean", 1.0,
                                "--norm=data: bound on ‖channel means‖")
_CLIP_SQUARE = flags.DEFINE_float(
    "clip_square", 1.0, "--norm=data: bound on ‖channel mean squares‖")
_BATCH = flags.DEFINE_integer("batch_size", 8192, "expected batch qN")
_EPOCHS = flags.DEFINE_float("epochs", 40.0, "epochs (T = E/q)")
_CLIP = flags.DEFINE_float("clip_norm", 0.1, "per-example clip C")
_LR = flags.DEFINE_float("learning_rate", 4.0, "SGD learning rate")
_MOMENTUM = flags.DEFINE_float("momentum", 0.9, "SGD momentum")
_CACHE = flags.DEFINE_string("cache_dir", None,
                             "where to keep the features (.npy)")
_OUT = flags.DEFINE_string("out", None, "JSON lines output")


def main(argv):
  del argv
  common.check_output_path(_OUT.value)
  from launch.experiments import features  # pylint: disable=g-import-not-at-top
  recipe = features.Recipe(
      J=_J.value, L=_L.value, norm=_NORM.value, num_groups=_GROUPS.value,
      norm_noise_multiplier=_NORM_SIGMA.value, clip_mean=_CLIP_MEAN.value,
      clip_square=_CLIP_SQUARE.value, batch_size=_BATCH.value,
      epochs=_EPOCHS.value, clip_norm=_CLIP.value,
      learning_rate=_LR.value, momentum=_MOMENTUM.value)
  for record in features.run(
      dataset=_DATASET.value, epsilons=common.parse_floats(_EPSILONS.value),
      seeds=common.parse_ints(_SEEDS.value), delta=_DELTA.value,
      recipe=recipe, data_dir=_DATA_DIR.value, cache_dir=_CACHE.value,
      progress=common.progress):
    common.emit_record(record, _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
