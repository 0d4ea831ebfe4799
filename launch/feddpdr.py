r"""FedDPDR-DPML (Wang et al. 2024): accuracy against ε, or a paper sweep.

The main command (scikit-learn's digits, bundled, no download), then the
paper's settings::

  python -m launch.feddpdr
  python -m launch.feddpdr --dataset=mnist --epsilon=0.1 --k=20 --lam=0.01 \
      --participants=5 --n_per_participant=10000 --seeds=1

A sweep of the paper's Figs. 2–5 and Table 3 (``--sweep``: ``fig2`` …
``fig5``, ``table3`` or ``all``)::

  python -m launch.feddpdr --dataset=mnist --sweep=fig3 --seeds=5 \
      --out=runs/feddpdr_mnist.jsonl

Many participants (``--participant_chunk`` bounds the memory)::

  python -m launch.feddpdr --dataset=synthetic:rows=1600000,d=64 \
      --participants=200000 --n_per_participant=8 --k=5 --epsilon=2 \
      --seeds=1 --baseline=false --participant_chunk=20000

What runs, the flags, the data and the records: docs/feddpdr.md (federated
DP-SGD beside it: docs/fedsgd.md).
"""

from __future__ import annotations

import os

from absl import flags

from dpcore import options  # the option sets, without JAX
from launch import common
from launch.experiments import coordinator  # no JAX at import

MECHANISMS = list(options.FedDPDRMechanism)
SWEEPS = ("fig2", "fig3", "fig4", "fig5", "table3", "all")
# Settings of the paper's experiments, used by --sweep for flags not given.
PAPER = {"epsilon": ["0.1"], "k": 20, "lam": 0.01, "participants": 5,
         "n_per_participant": 10_000}

_DATASET = flags.DEFINE_string(
    "dataset", "digits",
    "mnist, fashion_mnist, cifar10, digits, ..., or synthetic[:rows=R,d=D,"
    "classes=K,rank=r,noise=s,test=T,seed=S] (generated, any size)")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "where the data files are")
_MECHANISM = flags.DEFINE_enum("mechanism", "feddpdr", MECHANISMS,
                               "the private mechanism of the table")
_EPSILON = flags.DEFINE_list(
    "epsilon", ["0.5", "2", "8"],
    "total ε per participant, one value or a list (ε₁ = ε₂ = ε/2 for the "
    "PCA methods); one value with --sweep (default there: the paper's 0.1)")
_BASELINE = flags.DEFINE_bool("baseline", True,
                              "also run the non-private pipeline")
_DELTA = flags.DEFINE_float("delta", 1e-4, "δ")
_K = flags.DEFINE_integer("k", 10, "target dimension (paper: 20)")
_PARTICIPANTS = flags.DEFINE_integer("participants", 2, "N (paper: 5)")
_N_PER = flags.DEFINE_integer("n_per_participant", 600,
                              "rows per participant (paper: 10000)")
_SIZES = flags.DEFINE_list("sizes", None,
                           "uneven rows per participant, e.g. 100,500,1000")
_LAM = flags.DEFINE_float("lam", 1.0, "regularisation λ (paper: 0.01)")
_LOSS = flags.DEFINE_enum("loss", "huber", list(options.ERMLoss), "loss")
_AGGREGATION = flags.DEFINE_enum(
    "aggregation", "subspace", list(options.Aggregation),
    "basis aggregation: subspace (sign/rotation invariant), paper "
    "((1/N) Σ wᵢ Uᵢ as printed), moments (top k of the sum of the "
    "participants' noisy XᵢᵀXᵢ; the same privacy; for many small "
    "participants, docs/many_participants.md) or distributed_moments (the "
    "same sum under secure aggregation with discrete Gaussian shares, "
    "d ≤ 361; docs/secure_aggregation.md)")
_MODEL_AGGREGATION = flags.DEFINE_enum(
    "model_aggregation", "weighted", list(options.ModelAggregation),
    "model aggregation: Σ wᵢβᵢ or the paper's (1/N) Σ wᵢβᵢ")
_CALIBRATION = flags.DEFINE_enum(
    "calibration", "analytic", list(options.PcaCalibration),
    "DP-PCA noise: analytic Gaussian or the paper's classic formula "
    "(refused for ε₁ ≥ 1)")
_BUDGET_PER_CLASSIFIER = flags.DEFINE_bool(
    "budget_per_classifier", False,
    "give each one-vs-rest classifier ε₂ (total K·ε₂, reported) instead of "
    "ε₂/K")
_RELATION = flags.DEFINE_enum(
    "relation", options.Relation.REPLACE_ONE.value,
    options.RELATION_SPELLINGS,
    "what DP-PCA σ is calibrated for: replace_one (√2, default; 'replace' "
    "is its old spelling) or add_remove (1, the paper); the run is always "
    "accounted under replace_one")
_TOPK = flags.DEFINE_enum(
    "topk", "eigh", list(options.TopK),
    "DP-PCA's top-k of the noisy matrix: eigh (exact) or subspace (block "
    "subspace iteration, dpcore.linalg.subspace_top_k's defaults)")
_BUCKETS = flags.DEFINE_bool(
    "buckets", True,
    "when --sizes are so unequal that padding to the longest would waste "
    "more than half the rows, run the participants in buckets of similar "
    "padded length (same results; the record's 'buckets' and "
    "'padding_efficiency' say how); one process, no --shard_participants")
_FEDSGD = flags.DEFINE_bool(
    "fedsgd", None,
    "run federated DP-SGD (one softmax model, federated.fedsgd) on the same "
    "participants at each ε, beside the table's mechanism. Default: only "
    "in the main job, i.e. when neither --mechanism nor --dataset is given")
_FEDSGD_TRUST = flags.DEFINE_list(
    "fedsgd_trust", ["server"],
    "federated DP-SGD's trust models, one row each: server (secure "
    "aggregation), local (untrusted server), participant (participant-"
    "level DP), distributed (discrete Gaussian shares under simulated "
    "secure aggregation; seconds per seed on digits, docs/fedsgd.md)")
_FEDSGD_RATE = flags.DEFINE_float(
    "fedsgd_sampling_rate", 0.0,
    "federated DP-SGD's Poisson rate q (per row; per participant for "
    "--fedsgd_trust=participant); 0: min(0.05, 256/N)")
_FEDSGD_EPOCHS = flags.DEFINE_float("fedsgd_epochs", 30.0,
                                    "federated DP-SGD's epochs (T = E/q)")
_FEDSGD_CLIP = flags.DEFINE_float("fedsgd_clip_norm", 1.0,
                                  "federated DP-SGD's clip norm C")
_FEDSGD_LR = flags.DEFINE_float("fedsgd_learning_rate", 2.0,
                                "federated DP-SGD's SGD learning rate")
_TOL = flags.DEFINE_float("tol", 1e-8, "gradient-norm tolerance of the fits")
_MAX_ITER = flags.DEFINE_integer("max_iter", 500, "L-BFGS iteration cap")
_SEED = flags.DEFINE_integer("seed", 0, "seed of the partition and noise")
_SEEDS = flags.DEFINE_integer("seeds", 3, "repeats (vmapped over keys)")
_SWEEP = flags.DEFINE_enum("sweep", None, SWEEPS,
                           "run a grid of the paper instead of the table")
_SWEEP_MECHANISMS = flags.DEFINE_list(
    "sweep_mechanisms", list(MECHANISMS), "mechanisms in a sweep")
_OUT = flags.DEFINE_string("out", "runs/feddpdr.jsonl",
                           "JSON-lines output file ('' for none)")
_PLOT = flags.DEFINE_bool("plot", True, "write PNG plots after a sweep")
_SHARD = flags.DEFINE_bool(
    "shard_participants", False,
    "split the participant axis over the local devices (the record's "
    "'devices' says how many were used)")
_CHUNK = flags.DEFINE_integer(
    "participant_chunk", None,
    "map this many participants at a time (default: all at once when the "
    "memory estimate fits --memory_budget, else the largest chunk that "
    "does, printed). Bounds peak memory for many participants: DP-PCA "
    "holds d x d matrices per participant mapped together")
_MEMORY_BUDGET = flags.DEFINE_string(
    "memory_budget", "auto",
    "the training's memory budget, e.g. 8G or 512M; auto: 3/4 of the "
    "memory the system reports available. A run whose estimate exceeds "
    "it even one participant at a time is refused before training")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False,
    "join a multi-process run (jax.distributed; docs/distributed.md): the "
    "participants are split over every process's devices and process 0 "
    "writes the records. Alone, JAX reads the process settings from the "
    "cluster (Slurm, Open MPI, TPU); --coordinator_address, "
    "--num_processes and --process_id give them (and imply --distributed)")
_COORDINATOR_ADDRESS = flags.DEFINE_string(
    "coordinator_address", None,
    "host:port of process 0's coordinator, the same in every process, "
    "e.g. 127.0.0.1:12355 on one machine")
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None, "number of processes in a multi-process run")
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", None,
    "this process's index in a multi-process run, 0 ... --num_processes - 1")
_COORDINATOR_TIMEOUT = flags.DEFINE_float(
    "coordinator_timeout", coordinator.DEFAULT_TIMEOUT_S,
    "seconds a process of a multi-process run waits for every process to "
    "join at the coordinator (default 300, JAX's own); it says at once what "
    "it waits for, reports every 30 s, and at the limit ends with one "
    "error line naming the processes that did not join")
_JAX_CACHE_DIR = flags.DEFINE_string(
    "jax_cache_dir", os.path.join("~", ".cache", "dpjax", "jax"),
    "JAX's persistent compilation cache ('' to turn it off)")

# The spellings used before the flags took the library's names.
flags.DEFINE_alias("neighbouring", "relation")
flags.DEFINE_alias("fedsgd_clip", "fedsgd_clip_norm")


def _value(flag, paper_key=None):
  """A flag's value; with --sweep, the paper's value unless given."""
  if _SWEEP.value and paper_key and not flag.present:
    return PAPER[paper_key]
  return flag.value


def _numbers(flag, kind, paper_key=None) -> tuple | None:
  """A list flag's values as numbers (their ranges are the library's)."""
  raw = _value(flag, paper_key)
  if raw is None:
    return None
  if kind is float:
    return tuple(common.parse_floats(raw, f"--{flag.name}",
                                     example="0.5,2,8"))
  return tuple(common.parse_ints(raw, f"--{flag.name}", example="100,500"))


def _processes():
  """The multi-process settings (None: one process), their combination
  checked; their values are the library's to check."""
  given = {"coordinator_address": _COORDINATOR_ADDRESS.value,
           "num_processes": _NUM_PROCESSES.value,
           "process_id": _PROCESS_ID.value}
  missing = [f"--{name}" for name, value in given.items() if value is None]
  if 0 < len(missing) < 3:
    raise ValueError(
        f"{', '.join(missing)} not given: give --coordinator_address, "
        f"--num_processes and --process_id together, or none of them with "
        f"--distributed to let JAX read them from the cluster.")
  timeout = _COORDINATOR_TIMEOUT.value
  if not (timeout > 0 and timeout != float("inf")):
    raise ValueError(f"--coordinator_timeout={timeout!r}: give the seconds "
                     f"to wait for every process to join, a finite number "
                     f"> 0 (default {coordinator.DEFAULT_TIMEOUT_S:g}).")
  if not (_DISTRIBUTED.value or not missing):
    return None
  if _SWEEP.value:
    raise ValueError("--sweep runs in one process; leave out --distributed "
                     "and the process flags.")
  if _SHARD.value:
    raise ValueError("--shard_participants is for one process; a "
                     "multi-process run already splits the participants "
                     "over every process's devices.")
  if not missing:
    from federated import distributed  # pylint: disable=g-import-not-at-top
    distributed.check_settings(**given)
  return given


_FEDSGD_FLAGS = ("fedsgd_trust", "fedsgd_sampling_rate", "fedsgd_epochs",
                 "fedsgd_clip_norm", "fedsgd_learning_rate")


def _fedsgd(experiment, processes) -> tuple:
  """The Fed DP-SGD recipes asked for, one per --fedsgd_trust, checked.

  Asked for by --fedsgd, or a --fedsgd_* flag, or in the main job (one
  process, neither --mechanism nor --dataset nor --sweep given);
  --fedsgd=false leaves them out.
  """
  recipes = tuple(experiment.FedSGDRecipe(
      trust=trust, sampling_rate=_FEDSGD_RATE.value,
      epochs=_FEDSGD_EPOCHS.value, clip_norm=_FEDSGD_CLIP.value,
      learning_rate=_FEDSGD_LR.value).check()
      for trust in _FEDSGD_TRUST.value)
  asked = _FEDSGD.value
  if asked is None:
    main_job = not (_MECHANISM.present or _DATASET.present or _SWEEP.value
                    or processes is not None)
    asked = main_job or any(flags.FLAGS[f].present for f in _FEDSGD_FLAGS)
  if asked and (processes is not None or _SWEEP.value):
    raise ValueError("federated DP-SGD (--fedsgd, --fedsgd_*) runs beside "
                     "the table of one process; leave it out of a sweep "
                     "or a multi-process run.")
  return recipes if asked else ()


def main(argv):
  del argv
  common.check_output_path(_OUT.value, "--out")
  cache = _JAX_CACHE_DIR.value
  if cache and os.path.isfile(os.path.expanduser(cache)):
    raise ValueError(f"--jax_cache_dir={cache!r} is a file; give a "
                     f"directory, or '' to turn the cache off.")
  processes = _processes()
  # Heavy imports only now: --help and flag parsing stay fast.
  with common.heavy_imports():
    from federated import feddpdr  # pylint: disable=g-import-not-at-top
    from launch.experiments import feddpdr as ex  # pylint: disable=g-import-not-at-top
    from launch.experiments import fedsgd  # pylint: disable=g-import-not-at-top

  epsilons = _numbers(_EPSILON, float, "epsilon")
  budget = _MEMORY_BUDGET.value
  setting = ex.Setting(
      dataset=_DATASET.value, data_dir=_DATA_DIR.value,
      config=feddpdr.Config(
          mechanism=_MECHANISM.value,
          epsilon=epsilons[0] if epsilons else 1.0, delta=_DELTA.value,
          k=_value(_K, "k"), lam=_value(_LAM, "lam"), loss=_LOSS.value,
          aggregation=_AGGREGATION.value,
          model_aggregation=_MODEL_AGGREGATION.value,
          calibration=_CALIBRATION.value,
          budget_per_classifier=_BUDGET_PER_CLASSIFIER.value,
          relation=options.parse_relation(_RELATION.value), tol=_TOL.value,
          max_iter=_MAX_ITER.value, topk=_TOPK.value),
      epsilons=epsilons, baseline=_BASELINE.value,
      participants=_value(_PARTICIPANTS, "participants"),
      n_per_participant=_value(_N_PER, "n_per_participant"),
      sizes=_numbers(_SIZES, int), seed=_SEED.value, seeds=_SEEDS.value,
      fedsgd=_fedsgd(fedsgd, processes), buckets=_BUCKETS.value,
      shard_participants=_SHARD.value, participant_chunk=_CHUNK.value,
      memory_budget=(budget if budget == "auto"
                     else common.parse_bytes(budget, "--memory_budget")),
      sweep=_SWEEP.value, sweep_mechanisms=tuple(_SWEEP_MECHANISMS.value),
      plot=_PLOT.value, out=_OUT.value).check()
  if processes is not None:  # before any JAX computation; settings checked
    # The wait is limited and reported (federated.distributed.initialize
    # has no timeout): one error line naming the missing processes.
    coordinator.join(processes["coordinator_address"],
                     processes["num_processes"], processes["process_id"],
                     timeout_s=_COORDINATOR_TIMEOUT.value)
  ex.enable_compilation_cache(cache)
  ex.run(setting, processes=None if processes is None else (
      processes["num_processes"] or 1))


if __name__ == "__main__":
  common.run_cli(main)
