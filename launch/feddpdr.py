r"""FedDPDR-DPML experiments (Wang et al. 2024): one run or a paper sweep.

One run (defaults: scikit-learn's digits, no download needed)::

  python -m launch.feddpdr
  python -m launch.feddpdr --dataset=mnist --mechanism=feddpdr --epsilon=0.1

prints one JSON object as its last stdout line and appends it to ``--out``.
Sweeps reproduce the paper's Figs. 2–5 and Table 3::

  python -m launch.feddpdr --dataset=mnist --sweep=fig3 --seeds=5 \
      --out=results/feddpdr_mnist.jsonl

``--sweep`` takes ``fig2`` (k), ``fig3`` (ε), ``fig4`` (n), ``fig5``
(uneven sizes), ``table3`` (running time) or ``all``; finished runs found in
``--out`` are skipped (resume), and PNG plots are written beside ``--out``
(see ``launch/plot_feddpdr.py``).

Data: rows are divided by the public pixel bound and normalised to unit L2
norm (``launch.data.loaders.unit_rows``); CIFAR-10 goes through HOG first
(``launch.data.hog``: 4 px cells, 9 bins, 2×2-cell blocks, 4 px stride), then
unit rows. A data set without a test split (digits) is split 70/30 with a
key derived from ``--seed``. Participants get disjoint random training rows
(``--sizes``, or ``--participants`` × ``--n_per_participant``; if the
default n_per_participant does not fit the data it is lowered to what fits,
with a note on stderr; an explicit value that does not fit is refused).
The partition comes from ``--seed``; the ``--seeds`` repeats share it and
differ in the noise (vmapped over keys). Evaluation of each mechanism: see
``federated/feddpdr.py``.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from federated import feddpdr
from launch.experiments.feddpdr import experiment, sweep

_DATASET = flags.DEFINE_string("dataset", "digits",
                               "mnist, fashion_mnist, cifar10, digits, ...")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "where the data files are")
_MECHANISM = flags.DEFINE_enum("mechanism", "feddpdr", feddpdr.MECHANISMS,
                               "which mechanism (one run)")
_EPSILON = flags.DEFINE_float("epsilon", 0.1,
                              "total ε (ε₁ = ε₂ = ε/2 for the PCA methods)")
_DELTA = flags.DEFINE_float("delta", 1e-4, "δ")
_K = flags.DEFINE_integer("k", 20, "target dimension")
_PARTICIPANTS = flags.DEFINE_integer("participants", 5, "N")
_N_PER = flags.DEFINE_integer("n_per_participant", 10_000,
                              "rows per participant")
_SIZES = flags.DEFINE_list("sizes", None,
                           "uneven rows per participant, e.g. 100,500,1000")
_LAM = flags.DEFINE_float("lam", 0.01, "regularisation λ")
_LOSS = flags.DEFINE_enum("loss", "huber", ["huber", "logistic"], "loss")
_AGGREGATION = flags.DEFINE_enum(
    "aggregation", "subspace", list(feddpdr.AGGREGATIONS),
    "basis aggregation: subspace (sign/rotation invariant) or paper "
    "((1/N) Σ wᵢ Uᵢ as printed)")
_MODEL_AGGREGATION = flags.DEFINE_enum(
    "model_aggregation", "weighted", list(feddpdr.MODEL_AGGREGATIONS),
    "model aggregation: Σ wᵢβᵢ or the paper's (1/N) Σ wᵢβᵢ")
_CALIBRATION = flags.DEFINE_enum(
    "calibration", "analytic", ["analytic", "classic"],
    "DP-PCA noise: analytic Gaussian or the paper's classic formula "
    "(refused for ε₁ ≥ 1)")
_BUDGET_PER_CLASSIFIER = flags.DEFINE_bool(
    "budget_per_classifier", False,
    "give each one-vs-rest classifier ε₂ (total K·ε₂, reported) instead of "
    "ε₂/K")
_NEIGHBOURING = flags.DEFINE_enum(
    "neighbouring", "replace", list(feddpdr.NEIGHBOURING),
    "what DP-PCA σ is calibrated for: replace (√2, default) or add_remove "
    "(1, the paper); the run is always accounted under replace")
_TOL = flags.DEFINE_float("tol", 1e-8, "gradient-norm tolerance of the fits")
_MAX_ITER = flags.DEFINE_integer("max_iter", 500, "L-BFGS iteration cap")
_SEED = flags.DEFINE_integer("seed", 0, "seed of the partition and noise")
_SEEDS = flags.DEFINE_integer("seeds", 1, "repeats (vmapped over keys)")
_SWEEP = flags.DEFINE_enum(
    "sweep", None, ["fig2", "fig3", "fig4", "fig5", "table3", "all"],
    "run a grid of the paper instead of one run")
_SWEEP_MECHANISMS = flags.DEFINE_list(
    "sweep_mechanisms", list(feddpdr.MECHANISMS), "mechanisms in a sweep")
_OUT = flags.DEFINE_string("out", "results/feddpdr.jsonl",
                           "JSON-lines output file")
_PLOT = flags.DEFINE_bool("plot", True, "write PNG plots after a sweep")
_SHARD = flags.DEFINE_bool(
    "shard_participants", False,
    "split the participant axis over the local devices (single runs; the "
    "record's 'devices' says how many were used)")
_CHUNK = flags.DEFINE_integer(
    "participant_chunk", None,
    "map this many participants at a time (single runs; default: all at "
    "once). Bounds peak memory for many participants: DP-PCA holds d x d "
    "matrices per participant mapped together", lower_bound=1)


def main(argv):
  del argv
  base = feddpdr.Config(
      mechanism=_MECHANISM.value, epsilon=_EPSILON.value, delta=_DELTA.value,
      k=_K.value, lam=_LAM.value, loss=_LOSS.value,
      aggregation=_AGGREGATION.value,
      model_aggregation=_MODEL_AGGREGATION.value,
      calibration=_CALIBRATION.value,
      budget_per_classifier=_BUDGET_PER_CLASSIFIER.value,
      neighbouring=_NEIGHBOURING.value, tol=_TOL.value,
      max_iter=_MAX_ITER.value)
  if _SWEEP.value:
    for mech in _SWEEP_MECHANISMS.value:
      if mech not in feddpdr.MECHANISMS:
        raise app.UsageError(f"--sweep_mechanisms: unknown {mech!r}")
    sweep(dataset=_DATASET.value, data_dir=_DATA_DIR.value,
          sweep_name=_SWEEP.value, mechanisms=_SWEEP_MECHANISMS.value,
          seed=_SEED.value, seeds=_SEEDS.value, out=_OUT.value, base=base,
          participants=_PARTICIPANTS.value, n_per=_N_PER.value,
          plot=_PLOT.value)
    return
  experiment(dataset=_DATASET.value, data_dir=_DATA_DIR.value,
             participants=_PARTICIPANTS.value, n_per=_N_PER.value,
             n_per_explicit=_N_PER.present, sizes=_SIZES.value,
             seed=_SEED.value, seeds=_SEEDS.value, config=base,
             out=_OUT.value, shard=_SHARD.value,
             participant_chunk=_CHUNK.value)


if __name__ == "__main__":
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  sys.exit(app.run(main))
