r"""Accuracy of ``trust="distributed"`` beside ``trust="server"``.

Federated DP-SGD (:mod:`federated.fedsgd`) with the public recipe of the
main job's Fed DP-SGD row (docs/fedsgd.md: q = min(0.05, 256/N), 30
epochs, C = 1, plain SGD at learning rate 2 from zero weights, softmax
regression on rows scaled by the public bounds to unit norm; digits'
test rows are a seeded 30 % cut), on the main job's partition
(``partition_auto`` at ``fold_in(key(seed), 0)``), for each trust model of
``--trust``. σ is calibrated by each plan for ``--epsilon`` at
``--delta`` (``make_plan(epsilon=...)``: the Gaussian's RDP accountant
for ``server``, the distributed discrete Gaussian's for
``distributed``), and the record's privacy is the plan's ledger. Seeds
run one after another, not vmapped (the exact discrete Gaussian sampler
is much slower under ``vmap``); their keys are the main job's
(``split(fold_in(key(seed), 3), seeds)``).

One JSON line per trust model to ``--out``, with the command::

  python -m launch.bench.secagg_accuracy --dataset=digits \
      --participants=2 --rows=600 --epsilon=2
  python -m launch.bench.secagg_accuracy --dataset=mnist \
      --participants=5 --rows=10000 --epsilon=1
"""

from __future__ import annotations

import sys
import time

from absl import flags

from launch import common

_DATASET = flags.DEFINE_string("dataset", "digits", "Data set name.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Where the data files are.")
_PARTICIPANTS = flags.DEFINE_integer("participants", 2, "P.")
_ROWS = flags.DEFINE_integer("rows", 600, "Rows per participant.")
_EPSILON = flags.DEFINE_float("epsilon", 2.0, "Target ε.")
_DELTA = flags.DEFINE_float("delta", 1e-5, "δ.")
_TRUST = flags.DEFINE_list("trust", ["server", "distributed"],
                           "Trust models, one record each.")
_BITS = flags.DEFINE_integer("bits", 16, "b of the distributed mode.")
_SEEDS = flags.DEFINE_integer("seeds", 3, "Seeds (noise), run in turn.")
_SEED = flags.DEFINE_integer("seed", 0, "The partition's and keys' seed.")
_ONLY = flags.DEFINE_list(
    "seed_index", None, "Run only these of the --seeds keys (0-based; "
    "long runs one process per seed), default all.")
_CHUNK = flags.DEFINE_integer("participant_chunk", None,
                              "Participants per vmapped block.")
_OUT = flags.DEFINE_string("out", "results/secagg_accuracy.jsonl",
                           "JSON lines.")


EPOCHS, CLIP_NORM, LEARNING_RATE = 30.0, 1.0, 2.0
"""The main job's Fed DP-SGD recipe (besides q = min(0.05, 256/N))."""


def prepare(name: str, data_dir: str | None, seed: int):
  """Rows scaled by the public bounds to unit norm, labels as indices.

  As the main job prepares them: a data set without a test split (digits)
  gets a 30 % test cut from ``permutation(fold_in(key(seed), 2))``.
  """
  import jax
  import numpy as np

  from dpcore import clipping
  from launch.data import loaders

  ds = loaders.load_dataset(name, data_dir=data_dir)
  x = np.asarray(clipping.unit_rows(ds.x_train, ds.bounds))
  classes = np.unique(ds.y_train)
  y = np.searchsorted(classes, ds.y_train)
  if ds.x_test is None:
    order = np.asarray(jax.random.permutation(
        jax.random.fold_in(jax.random.key(seed), 2), len(y)))
    cut = int(round(0.3 * len(order)))
    return x[order[cut:]], y[order[cut:]], x[order[:cut]], y[order[:cut]], (
        len(classes))
  x_test = np.asarray(clipping.unit_rows(ds.x_test, ds.bounds))
  return x, y, x_test, np.searchsorted(classes, ds.y_test), len(classes)


def run(trust: str) -> dict:
  """One trust model's record (module docstring)."""
  import jax
  import numpy as np
  import optax

  from dpcore import accounting, dpsgd
  from federated import fedsgd, partition
  from mechanisms.erm import softmax

  x_train, y_train, x_test, y_test, k = prepare(_DATASET.value,
                                                _DATA_DIR.value, _SEED.value)
  sizes = (_ROWS.value,) * _PARTICIPANTS.value
  key = jax.random.key(_SEED.value)
  parts = partition.partition_auto(
      jax.random.fold_in(key, 0), x_train, y_train, sizes=sizes,
      buckets=False)
  total = int(np.sum(parts.sizes))
  q = min(0.05, 256.0 / total)
  steps = dpsgd.num_steps(epochs=EPOCHS, sampling_rate=q)
  d = x_train.shape[1]
  extra = ({"model_size": d * k + k, "bits": _BITS.value}
           if trust == "distributed" else {})
  t0 = time.perf_counter()
  plan = fedsgd.make_plan(parts.sizes, trust=trust, sampling_rate=q,
                          steps=steps, clip_norm=CLIP_NORM,
                          epsilon=_EPSILON.value, delta=_DELTA.value,
                          **extra)
  calibrate_s = time.perf_counter() - t0
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  train = jax.jit(lambda key: fedsgd.release(
      key, plan, softmax.loss, softmax.initial_params(d, k), parts.x,
      parts.y.astype(np.int32), parts.mask, optax.sgd(LEARNING_RATE),
      chunk=_CHUNK.value).params)
  keys = jax.random.split(jax.random.fold_in(key, 3), _SEEDS.value)
  accs, seconds = [], []
  which = (list(range(_SEEDS.value)) if _ONLY.value is None
           else common.parse_ints(_ONLY.value))
  for i in which:
    common.progress(f"{trust}: seed {i + 1}/{_SEEDS.value}, {steps} steps")
    t0 = time.perf_counter()
    params = common.block(train(keys[i]))
    seconds.append(time.perf_counter() - t0)
    accs.append(float(softmax.accuracy(params, x_test, y_test)))
    common.progress(f"{trust}: seed {i + 1} accuracy {accs[-1]:.4f} "
                    f"({seconds[-1]:.0f} s)")
  return {
      "command": "python -m launch.bench.secagg_accuracy "
                 + " ".join(sys.argv[1:]),
      "dataset": _DATASET.value, "trust": trust,
      "participants": _PARTICIPANTS.value, "rows": _ROWS.value,
      "epsilon": _EPSILON.value, "delta": _DELTA.value,
      "accuracy": float(np.mean(accs)), "accuracy_std": float(np.std(accs)),
      "accuracy_per_seed": accs, "seeds": _SEEDS.value,
      "seed_index": which, "seed": _SEED.value,
      "test_rows": int(len(y_test)),
      "seconds_per_seed": seconds, "calibration_seconds": calibrate_s,
      "recipe": {"sampling_rate": q, "steps": steps,
                 "epochs": EPOCHS, "clip_norm": CLIP_NORM,
                 "learning_rate": LEARNING_RATE},
      "settings": plan.settings(), "privacy": ledger.report(_DELTA.value),
      "platform": jax.default_backend(), "jax_version": jax.__version__,
  }


def main(argv):
  del argv
  for trust in _TRUST.value:
    if trust not in ("server", "local", "participant", "distributed"):
      raise ValueError(f"--trust takes server, local, participant or "
                       f"distributed, got {trust!r}.")
  if _ONLY.value is not None and not all(
      0 <= i < _SEEDS.value for i in common.parse_ints(_ONLY.value)):
    raise ValueError(f"--seed_index must be in [0, --seeds), got "
                     f"{_ONLY.value}.")
  for flag, value in (("--participants", _PARTICIPANTS.value),
                      ("--rows", _ROWS.value), ("--seeds", _SEEDS.value)):
    if value < 1:
      raise ValueError(f"{flag} must be ≥ 1, got {value}.")
  common.check_output_path(_OUT.value)
  for trust in _TRUST.value:
    common.emit_record(run(trust), _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
