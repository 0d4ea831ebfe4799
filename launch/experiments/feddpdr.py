"""Experiment harness of ``launch.feddpdr`` (no flags; importable anywhere).

:class:`Setting` is what one command asks for (the data, the participants,
the FedDPDR settings and budgets, the Fed DP-SGD rows beside them, a
sweep), checked by :meth:`Setting.check` before any data is read;
:func:`run` carries it out. The library (:mod:`federated.feddpdr`)
calibrates, trains and evaluates; this module times it, builds the JSON
records, runs the budget table of the main command and the paper's sweeps
(with resume), and turns on JAX's persistent compilation cache. Federated
DP-SGD's rows are :mod:`launch.experiments.fedsgd`'s. See
``launch/feddpdr.py`` for the command line.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import resource
import sys
import time

import jax
import numpy as np

from dpcore import accounting, clipping, linalg, memory, options, validation
from federated import feddpdr, partition, sharding
from launch import common, programs
from launch.data import loaders as data_lib

__all__ = [
    "BUDGET_FIELDS", "CPU_COMPILER_OPTIONS", "DEFAULT_CACHE_DIR",
    "KEY_FIELDS", "KNOWN_SHAPES", "LABELS", "PAPER_EPSILON", "PAPER_K",
    "PAPER_N", "PAPER_UNEVEN", "Prepared", "SCOPE", "SWEEPS", "Setting",
    "budget_table", "captured_variance", "compiler_options",
    "enable_compilation_cache", "format_table", "known_shape",
    "make_record", "memory_chunk", "peak_device_memory_bytes",
    "peak_host_memory_bytes", "prepare_data", "record_settings",
    "resolve_sizes", "run", "run_one", "summary_record", "sweep",
    "sweep_points", "timed_execute", "timed_training", "topk_record",
    "training_program",
]

PAPER_K = (5, 10, 20, 50, 100)
PAPER_EPSILON = (0.01, 0.05, 0.1, 0.5, 1.0, 2.0)
PAPER_N = (100, 500, 1000, 5000, 10_000)
PAPER_UNEVEN = ((50, 100, 500, 1000, 2000),
                (100, 500, 1000, 5000, 10_000),
                (100, 1000, 5000, 8000, 10_000))
KEY_FIELDS = ("sweep", "dataset", "mechanism", "epsilon", "delta", "k",
              "sizes", "lam", "loss", "aggregation", "model_aggregation",
              "calibration", "budget_per_classifier", "relation", "seed",
              "seeds")
# The settings a non-private run does not use: null in its record.
BUDGET_FIELDS = ("epsilon", "delta", "calibration", "budget_per_classifier",
                 "pca_fraction", "relation")
SWEEPS = ("fig2", "fig3", "fig4", "fig5", "table3", "all")
# Training rows (after the 70/30 split where there is no test split), data
# dimension and classes of the named sets, known without loading them, so
# that sizes and k are checked before the data is read. Others are checked
# right after loading, still before compiling.
KNOWN_SHAPES = {"digits": (1258, 64, 10), "breast_cancer": (398, 30, 2),
                "mnist": (60_000, 784, 10), "fashion_mnist": (60_000, 784, 10),
                "cifar10": (50_000, 1764, 10)}
LABELS = {**{name: m.label for name, m in feddpdr.DESCRIPTIONS.items()},
          "fedsgd": "Fed DP-SGD"}
DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "dpjax", "jax")
SCOPE = ("one run (one seed), per participant: one row of one participant "
         "replaced; each seed is its own run on the same participants; the "
         "partition, the sizes and the row bounds are public")
"""What a record's ``privacy`` covers (its ``privacy_scope``)."""
# On the CPU the training program is compiled at LLVM optimisation level 1.
# Its run time is in LAPACK's eigh and in matrix products, which the level
# does not touch: d = 784, 5 x 2,000 rows trained in 0.46-0.59 s at either
# level, with the same accuracy, while the compile fell from 8.6-8.9 s to
# 6.5-7.1 s, and the main command's first run by 2-3 s (docs/benchmarks.md).
CPU_COMPILER_OPTIONS = {"xla_backend_optimization_level": 1}


def enable_compilation_cache(path: str | None = DEFAULT_CACHE_DIR) -> None:
  """Turns on JAX's persistent compilation cache in ``path`` (None: off).

  Every program that took over 0.1 s to compile is kept, so a second run
  of the same settings loads its executables instead of compiling them.
  """
  if not path:
    return
  path = os.path.expanduser(path)
  os.makedirs(path, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@dataclasses.dataclass(frozen=True)
class Prepared:
  """A data set ready for FedDPDR: unit rows and class indices."""
  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  classes: tuple


def prepare_data(name: str, *, data_dir: str | None, seed: int) -> Prepared:
  """Loads, featurises (HOG for CIFAR-10) and normalises rows to norm 1."""
  ds = data_lib.load_dataset(name, data_dir=data_dir)
  x_train, x_test, bounds = ds.x_train, ds.x_test, ds.bounds
  if name == "cifar10":
    from mechanisms.features import hog  # only CIFAR needs it
    common.progress("computing HOG features (cell 4, 9 bins, block 2)")
    x_train = hog.hog_features(x_train, ds.image_shape)
    x_test = hog.hog_features(x_test, ds.image_shape)
    bounds = None  # HOG blocks are already normalised; rows get unit norm
  x_train = np.asarray(clipping.unit_rows(x_train, bounds))
  classes = tuple(np.unique(ds.y_train).tolist())
  y_train = np.searchsorted(classes, ds.y_train)
  if x_test is None:
    order = np.asarray(jax.random.permutation(
        jax.random.fold_in(jax.random.key(seed), 2), len(y_train)))
    cut = int(round(0.3 * len(order)))
    test, train = order[:cut], order[cut:]
    x_test, y_test = x_train[test], y_train[test]
    x_train, y_train = x_train[train], y_train[train]
  else:
    x_test = np.asarray(clipping.unit_rows(x_test, bounds))
    outside = sorted(set(np.unique(ds.y_test).tolist()) - set(classes))
    if outside:
      raise ValueError(f"test labels {outside} are not in the training "
                       f"classes {classes}.")
    y_test = np.searchsorted(classes, ds.y_test)
  return Prepared(name, x_train, y_train, x_test, y_test, classes)


def _fix(rows: int, participants: int) -> str:
  """How to make participants x n_per_participant fit in ``rows``."""
  if participants > rows:
    return f"lower participants to at most {rows}"
  return (f"lower n_per_participant to at most {rows // participants} or "
          f"participants")


def resolve_sizes(*, available: int | None, participants: int, n_per: int,
                  sizes) -> tuple[int, ...]:
  """Participant sizes, checked against the training rows.

  ``sizes`` wins over ``participants`` × ``n_per`` (rows per
  participant); either must fit in the ``available`` rows (None: not
  known yet, unchecked), or the message names the settings and the rows
  there are.
  """
  if sizes is not None:
    sizes = [int(s) for s in sizes]
    if not sizes:
      raise ValueError("sizes is empty; give rows per participant, e.g. "
                       "sizes=100,200, or leave it out.")
    if min(sizes) < 1:
      raise ValueError(f"sizes={','.join(map(str, sizes))}: every "
                       f"participant needs at least one row.")
    if available is None:
      return tuple(sizes)
    if sum(sizes) > available:
      raise ValueError(
          f"sizes={','.join(map(str, sizes))} asks for {sum(sizes)} rows "
          f"but the data set has {available} training rows; lower sizes.")
    return partition.check_sizes(sizes, available)
  if participants < 1 or n_per < 1:
    raise ValueError(
        f"participants={participants} and n_per_participant={n_per} must "
        f"both be >= 1.")
  if available is not None and participants * n_per > available:
    raise ValueError(
        f"participants={participants} x n_per_participant={n_per} = "
        f"{participants * n_per} rows exceeds the {available} training rows "
        f"of the data set; {_fix(available, participants)}.")
  return (n_per,) * participants


def known_shape(dataset: str):
  """(training rows, d, classes) of a named or synthetic set, else None."""
  if dataset.startswith("synthetic"):
    settings = data_lib.synthetic_settings(dataset)
    if settings is not None:
      return settings["rows"], settings["d"], settings["classes"]
  return KNOWN_SHAPES.get(dataset)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setting:
  """What one command of ``launch.feddpdr`` asks for.

  Attributes:
    dataset, data_dir: the data (:func:`prepare_data`).
    config: the FedDPDR settings of the table's mechanism (its
      ``epsilon`` is replaced by each of ``epsilons``).
    epsilons: the table's budgets (one with a sweep: the fixed ε of the
      grids over k, n and sizes).
    baseline: the table also runs the non-private pipeline.
    participants, n_per_participant, sizes: the participants' rows
      (``sizes`` wins; :func:`resolve_sizes`).
    seed, seeds: the partition's seed and the repeats (vmapped over keys).
    fedsgd: the Fed DP-SGD recipes run beside the table, one row per ε
      each (:mod:`launch.experiments.fedsgd`; empty: none).
    buckets, shard_participants, participant_chunk, memory_budget: how
      the participants are laid out and mapped (:func:`run_one`);
      ``memory_budget`` in bytes, ``"auto"`` (3/4 of the memory
      available) or None (no check).
    sweep, sweep_mechanisms, plot: a paper grid instead of the table
      (:func:`sweep`).
    out: the JSON-lines file ('' or None: none).
  """
  dataset: str = "digits"
  data_dir: str | None = None
  config: feddpdr.Config = feddpdr.Config(epsilon=0.5, k=10, lam=1.0)
  epsilons: tuple[float, ...] = (0.5, 2.0, 8.0)
  baseline: bool = True
  participants: int = 2
  n_per_participant: int = 600
  sizes: tuple[int, ...] | None = None
  seed: int = 0
  seeds: int = 3
  fedsgd: tuple = ()
  buckets: bool = True
  shard_participants: bool = False
  participant_chunk: int | None = None
  memory_budget: int | str | None = memory.AUTO
  sweep: str | None = None
  sweep_mechanisms: tuple[str, ...] = tuple(options.FedDPDRMechanism)
  plot: bool = True
  out: str | None = "runs/feddpdr.jsonl"

  def configs(self) -> list[feddpdr.Config]:
    """The runs of the table: the non-private baseline (with ``baseline``,
    or when the mechanism is non-private), then the mechanism at each ε."""
    base = self.config
    configs = []
    if self.baseline or not base.private:
      configs.append(dataclasses.replace(
          base, mechanism=options.FedDPDRMechanism.NONPRIV))
    if base.private:
      configs += [dataclasses.replace(base, epsilon=float(e))
                  for e in self.epsilons]
    return configs

  def check(self) -> Setting:
    """Every setting checked before any data is loaded.

    By the library's validators (messages name the fields), with what
    needs the data's shape where it is known without loading it
    (:data:`KNOWN_SHAPES`, synthetic sets); the rest is checked by
    :meth:`check_data` right after loading.

    Returns:
      ``self``, its Fed DP-SGD recipes checked.
    """
    if not self.epsilons:
      raise ValueError("epsilon is empty; give one or more ε > 0, e.g. "
                       "epsilon=0.5,2,8.")
    if self.sweep is not None:
      if self.sweep not in SWEEPS:
        raise ValueError(f"sweep must be one of {', '.join(SWEEPS)}; got "
                         f"{self.sweep!r}.")
      if len(self.epsilons) != 1:
        raise ValueError(
            f"epsilon={','.join(map(str, self.epsilons))}: a sweep takes "
            f"one ε (the fixed value of the grids over k, n and sizes), "
            f"e.g. epsilon=0.1.")
      if not self.sweep_mechanisms:
        raise ValueError(f"sweep_mechanisms is empty; name one or more of "
                         f"{', '.join(options.FedDPDRMechanism)}.")
      for mech in self.sweep_mechanisms:
        feddpdr.describe(mech, "sweep_mechanisms")
    if self.data_dir is not None and not os.path.isdir(
        os.path.expanduser(self.data_dir)):
      raise ValueError(f"data_dir={self.data_dir!r} is not a directory; "
                       f"give the directory holding the data files, or "
                       f"leave it out.")
    data_lib.check_dataset(self.dataset, data_dir=self.data_dir)
    try:
      shape = known_shape(self.dataset)
    except ValueError as err:
      raise ValueError(f"dataset: {err}") from None
    configs = (self.configs() if self.sweep is None else
               [dataclasses.replace(self.config, epsilon=self.epsilons[0])])
    # A sweep sets k and the sizes itself, within the data.
    known = shape if shape and self.sweep is None else (None, None, None)
    resolve_sizes(available=known[0], participants=self.participants,
                  n_per=self.n_per_participant, sizes=self.sizes)
    feddpdr.check_settings(configs, dim=known[1], seeds=self.seeds,
                           participant_chunk=self.participant_chunk)
    if self.memory_budget not in (None, memory.AUTO):
      validation.check_positive_int(self.memory_budget, "memory_budget")
    return dataclasses.replace(
        self, fedsgd=tuple(r.check() for r in self.fedsgd))

  def check_data(self, prepared: Prepared) -> tuple[int, ...]:
    """The checks that need the loaded data: the sizes against its rows,
    k against d, the classes, and the calibration of every run; returns
    the sizes."""
    sizes = resolve_sizes(available=len(prepared.y_train),
                          participants=self.participants,
                          n_per=self.n_per_participant, sizes=self.sizes)
    dim, num_classes = prepared.x_train.shape[1], len(prepared.classes)
    if num_classes < 2:
      raise ValueError(f"the data set has {num_classes} class(es); a "
                       f"classifier needs at least 2.")
    for config in self.configs():
      feddpdr.make_plan(sizes, dim=dim, num_classes=num_classes,
                        config=config)
    return sizes


def record_settings(config: feddpdr.Config) -> dict:
  settings = {f.name: getattr(config, f.name)
              for f in dataclasses.fields(config)}
  if not config.private:
    settings.update({f: None for f in BUDGET_FIELDS})
  if not config.description.reduces:
    settings["k"] = None  # no PCA
  return settings


def topk_record(config: feddpdr.Config, *, dim: int) -> dict:
  """The top-k solver of DP-PCA and its settings, for the record.

  ``{"solver": "eigh"}`` (exact), or for ``"subspace"`` the block and
  iteration count of :func:`dpcore.linalg.subspace_top_k`'s defaults,
  which DP-PCA (:func:`mechanisms.pca.dp_pca.top_k_by_subspace`) and the
  server's aggregate use.
  """
  if config.topk != "subspace":
    return {"solver": config.topk}
  defaults = inspect.signature(linalg.subspace_top_k).parameters
  return {"solver": config.topk, "block": min(dim, 2 * config.k + 8),
          "iterations": defaults["iterations"].default}


def peak_host_memory_bytes() -> int:
  """This process's peak resident memory so far (``ru_maxrss``), in bytes.

  A high-water mark: it covers everything the process did before, not
  only the last run.
  """
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def peak_device_memory_bytes() -> int | None:
  """The largest ``peak_bytes_in_use`` of the local devices, or None.

  None where the backend reports no memory statistics (the CPU).
  """
  peaks = []
  for device in jax.local_devices():
    try:
      stats = device.memory_stats()
    except (AttributeError, NotImplementedError, RuntimeError):
      stats = None
    if stats and "peak_bytes_in_use" in stats:
      peaks.append(int(stats["peak_bytes_in_use"]))
  return max(peaks) if peaks else None


def run_one(prepared: Prepared, *, sizes, seed: int, seeds: int,
            config: feddpdr.Config, timing_repeats: int = 1,
            extra: dict | None = None, shard: bool = False,
            participant_chunk: int | None = None,
            buckets: bool = True) -> dict:
  """One experiment: partition from ``seed``, train ``seeds`` repeats.

  With ``buckets`` (default), sizes so unequal that one padded array would
  be more than half padding (:func:`federated.partition.wants_buckets`)
  are laid out in buckets of similar padded length
  (:func:`federated.partition.partition_buckets`: the same rows per
  participant, the same keys, the same results up to rounding); buckets
  are not sharded, so ``shard`` then keeps one padded array.

  Times the jitted training (``first_call_seconds``: compile, or a load
  from the persistent cache, plus one run; ``seconds``: median of
  ``timing_repeats`` further runs). ``shard`` splits the participant axis
  over the local devices; ``participant_chunk`` maps that many
  participants at a time. The library's :func:`federated.feddpdr.execute`
  calibrates, trains, evaluates and sums up (:func:`timed_execute`); this
  adds the partition, the timing and the record. Prints a
  progress line after the partition and after training.

  Returns:
    The JSON record: settings (budget fields null for ``nonpriv``),
    results (:func:`summary_record`), timings, and
    ``participants_per_second`` (participants × seeds / ``seconds``: the
    training alone, after compilation, without partition or evaluation),
    ``devices``, ``processes`` (``jax.process_count()``), ``chunk``,
    ``topk`` (:func:`topk_record`), ``peak_host_memory_bytes`` (the
    process's peak RSS so far, :func:`peak_host_memory_bytes`) and
    ``peak_device_memory_bytes`` (null where the backend reports none),
    ``buckets`` (1 for one padded array) and ``padding_efficiency`` (real
    rows / padded rows); for ``feddpdr`` and ``nonpriv``,
    ``captured_variance`` (:func:`captured_variance`).
  """
  key = jax.random.key(seed)
  chunk = feddpdr.check_chunk(participant_chunk)
  mesh = sharding.participant_mesh(len(sizes)) if shard else None
  start = time.perf_counter()
  parts = partition.partition_auto(
      jax.random.fold_in(key, 0), prepared.x_train, prepared.y_train,
      sizes=sizes, buckets=buckets and mesh is None)
  bucketed = isinstance(parts, partition.Buckets)
  common.progress(
      f"partitioned {len(sizes)} participants "
      f"({time.perf_counter() - start:.1f} s"
      f"{f'; {len(parts.groups)} buckets' if bucketed else ''})")
  outcome, timing = timed_execute(
      jax.random.fold_in(key, 1), parts, prepared, config=config,
      seeds=seeds, timing_repeats=timing_repeats, mesh=mesh, chunk=chunk)
  result = summary_record(outcome.summary)
  if config.description.federated:
    result["captured_variance"] = captured_variance(
        parts, outcome.output.global_basis, k=config.k)
  return make_record(prepared, sizes=sizes, seed=seed, seeds=seeds,
                     config=config, result=result, timing=timing,
                     devices=1 if mesh is None else int(mesh.size),
                     chunk=outcome.chunk, extra=extra, bucketed=bucketed,
                     options=compiler_options(mesh))


def timed_execute(key: jax.Array, participants, prepared: Prepared, *,
                  config: feddpdr.Config, seeds: int, timing_repeats: int = 1,
                  mesh=None, chunk: int | None = None, sizes=None):
  """:func:`federated.feddpdr.execute` on ``prepared``'s test set, its
  training compiled by :func:`training_program` and timed by
  :func:`timed_training`.

  ``sizes``: every participant's rows where ``participants`` is only this
  process's block (a mesh over several processes).

  Returns:
    ``(outcome, timing)``: the library's :class:`federated.feddpdr.Outcome`
    and :func:`timed_training`'s timing dict.
  """
  timing = {}
  count = len(participants.sizes if sizes is None else sizes)

  def train_with(job: feddpdr.TrainingJob) -> feddpdr.TrainOutput:
    train = training_program(job.args, config=job.program,
                             num_classes=job.num_classes, mesh=job.mesh,
                             chunk=job.chunk)
    out, measured = timed_training(lambda: train(*job.args), timing_repeats,
                                   participants=count, seeds=seeds)
    timing.update(measured)
    return out

  # The chunk was planned (or given) against the setting's memory_budget
  # once for the whole table (plan_chunk); a second check against the
  # memory available now, after the data are loaded, would refuse it.
  outcome = feddpdr.execute(
      key, participants, prepared.x_test, prepared.y_test,
      num_classes=len(prepared.classes), config=config, seeds=seeds,
      mesh=mesh, participant_chunk=chunk, memory_budget=None, sizes=sizes,
      train_with=train_with)
  return outcome, timing


def compiler_options(mesh=None) -> dict:
  """XLA options of the training program: :data:`CPU_COMPILER_OPTIONS` on
  the CPU in one process without a mesh, none otherwise (the record's
  ``compiler_options``)."""
  if (mesh is None and jax.process_count() == 1
      and jax.default_backend() == "cpu"):
    return dict(CPU_COMPILER_OPTIONS)
  return {}


@functools.cache
def _compiled_train(program, num_classes: int, chunk, options: tuple):
  """One jit of ``feddpdr.train`` per program and compile options."""
  return jax.jit(
      lambda *arguments: feddpdr.train(*arguments, config=program,
                                       num_classes=num_classes, chunk=chunk),
      compiler_options=dict(options) or None)


def training_program(args, *, config: feddpdr.Config, num_classes: int,
                     mesh=None, chunk: int | None = None):
  """``feddpdr.train`` at these settings, as a function of ``args``.

  With JAX's persistent cache on (:func:`enable_compilation_cache`), one
  process and no mesh, the traced program is kept beside the cache
  (:mod:`launch.programs`), so a later run with the same settings, shapes
  and library source neither traces nor compiles. Compiled with
  :func:`compiler_options`. The results are those of ``feddpdr.train``.
  """
  program = feddpdr.program(config)
  options = compiler_options(mesh)
  if mesh is not None or jax.process_count() > 1:
    return lambda *arguments: feddpdr.train(
        *arguments, config=config, num_classes=num_classes, mesh=mesh,
        chunk=chunk)
  train = _compiled_train(program, num_classes, chunk,
                          tuple(sorted(options.items())))
  cache = jax.config.jax_compilation_cache_dir
  if not cache:
    return train
  stored = programs.load_or_export(
      # feddpdr.train itself: JAX refuses compiler options on a nested jit.
      lambda *arguments: tuple(feddpdr.train(
          *arguments, config=program, num_classes=num_classes,
          chunk=chunk)),
      args, name="feddpdr_train", cache_dir=cache,
      settings=(program, num_classes, chunk), compiler_options=options)
  return lambda *arguments: feddpdr.TrainOutput(*stored(*arguments))


def captured_variance(parts, global_basis, *, k: int) -> float:
  """How much of the noise-free pooled XᵀX the global basis captures.

  tr(UᵀXᵀXU) / (sum of the k largest eigenvalues of XᵀX), XᵀX of every
  participant's real rows together (no noise), averaged over the repeats'
  bases ``global_basis`` (S, d, k): 1 for the exact pooled top k, on
  average (k/d)·tr(XᵀX)/(that sum) for a random basis. A measure for the
  record, not a release.
  """
  groups = (parts.groups if isinstance(parts, partition.Buckets)
            else (parts,))
  d = np.shape(groups[0].x)[-1]
  pooled = np.zeros((d, d))
  for group in groups:
    rows = np.asarray(group.x, np.float64)[np.asarray(group.mask) > 0]
    pooled += rows.T @ rows
  best = float(np.sum(np.linalg.eigvalsh(pooled)[-k:]))
  bases = np.asarray(jax.device_get(global_basis), np.float64)
  got = np.einsum("sdk,de,sek->s", bases, pooled, bases)
  return float(np.mean(got) / best)


def timed_training(run, timing_repeats: int, *, participants: int,
                   seeds: int):
  """Calls ``run`` once (compile or cache load, plus one run), then
  ``timing_repeats`` more times; prints the rate.

  Returns:
    ``(outputs, timing)``, timing a dict of ``seconds`` (median of the
    repeats, or the first call without repeats), ``cpu_seconds``,
    ``first_call_seconds``, ``compile_seconds`` and
    ``participants_per_second`` (participants × seeds / ``seconds``).
  """
  start = time.perf_counter()
  out = jax.block_until_ready(run())
  first = time.perf_counter() - start
  times, cpu_times = [], []
  for _ in range(timing_repeats):
    start, cpu_start = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(run())
    times.append(time.perf_counter() - start)
    cpu_times.append(time.process_time() - cpu_start)
  seconds = float(np.median(times)) if times else first
  rate = participants * seeds / seconds
  common.progress(f"trained {participants} participants x {seeds} seed(s) "
                  f"in {seconds:.2f} s ({rate:,.0f} participants/s; first "
                  f"call {first:.1f} s)")
  return out, {
      "seconds": seconds,
      "cpu_seconds": float(np.median(cpu_times)) if cpu_times else None,
      "first_call_seconds": first,
      "compile_seconds": max(first - seconds, 0.0),
      "participants_per_second": rate,
  }


def summary_record(summary: feddpdr.Summary) -> dict:
  """The JSON-ready fields of a run's :class:`federated.feddpdr.Summary`:
  accuracy (mean over repeats), accuracy_std, accuracy_per_seed, privacy,
  epsilon_pca, epsilon_per_classifier, sigma_pca, grad_norm_max,
  iterations_max, seeds, accuracy_per_participant (local mechanisms
  only) and secure_aggregation (``aggregation="distributed_moments"``
  only: the grid, wrap-around bound, and the central and own guarantees,
  ``own_epsilon`` being each participant's should secure aggregation
  fail)."""
  record = {
      "accuracy": summary.accuracy,
      "accuracy_std": summary.accuracy_std,
      "accuracy_per_seed": list(summary.accuracy_per_seed),
      "privacy": summary.privacy,
      "epsilon_pca": summary.epsilon_pca,
      "epsilon_per_classifier": summary.epsilon_per_classifier,
      "sigma_pca": summary.sigma_pca,
      "grad_norm_max": summary.grad_norm_max,
      "iterations_max": summary.iterations_max,
      "seeds": summary.seeds,
  }
  if summary.accuracy_per_participant is not None:
    record["accuracy_per_participant"] = [
        list(row) for row in summary.accuracy_per_participant]
  if summary.secure_aggregation is not None:
    record["secure_aggregation"] = dict(summary.secure_aggregation)
  return record


def make_record(prepared: Prepared, *, sizes, seed: int, seeds: int,
                config: feddpdr.Config, result: dict, timing: dict,
                devices: int, chunk: int | None, extra: dict | None = None,
                bucketed: bool = False, options: dict | None = None) -> dict:
  """The JSON record of one run (:func:`run_one`; the multi-process
  harness, ``launch.experiments.distributed``, writes the same fields).

  ``bucketed``: the participants ran in buckets
  (:func:`federated.partition.partition_buckets`) rather than one padded
  array; the record's ``buckets`` and ``padding_efficiency`` say how many
  and how much of the computed rows were real.
  ``options``: the XLA compiler options of the training program
  (:func:`compiler_options`), recorded as ``compiler_options``.
  """
  result = dict(result)
  record = {
      "dataset": prepared.name,
      "mechanism": config.mechanism,
      "epsilon": config.epsilon if config.private else None,
      "delta": config.delta if config.private else None,
      "k": config.k if config.description.reduces else None,
      "participants": len(sizes),
      "sizes": list(sizes),
      "accuracy": result.pop("accuracy"),
      "privacy": result.pop("privacy"),
      "seconds": timing["seconds"],
      "cpu_seconds": timing["cpu_seconds"],
      "first_call_seconds": timing["first_call_seconds"],
      "compile_seconds": timing["compile_seconds"],
      **result,
      **record_settings(config),
      "seed": seed,
      "seeds": seeds,
      "test_rows": len(prepared.y_test),
      "num_classes": len(prepared.classes),
      "devices": devices,
      "processes": jax.process_count(),
      "chunk": chunk,
      **partition.layout_record(sizes, bucketed=bucketed),
      "topk": topk_record(config, dim=prepared.x_train.shape[1]),
      "compiler_options": dict(options or {}),
      "participants_per_second": timing["participants_per_second"],
      # This process's own peak (in a multi-process run, process 0's).
      "peak_host_memory_bytes": peak_host_memory_bytes(),
      "peak_device_memory_bytes": peak_device_memory_bytes(),
      "device": jax.devices()[0].platform,
      "privacy_scope": SCOPE,
  }
  record.update(extra or {})
  return record


def memory_chunk(setting: Setting, *, sizes, dim: int, num_classes: int,
                 processes: int = 1) -> int | None:
  """The participant chunk of the table's training, memory-checked.

  :func:`federated.feddpdr.plan_chunk` over the table's runs
  (:meth:`Setting.configs`): ``participant_chunk`` checked against
  ``memory_budget``, or else the largest chunk that fits every run (None:
  all at once). Prints the choice when it is not "all at once".

  Raises:
    ValueError: one line naming the estimate, the budget and the settings.
  """
  budget = memory.resolve_budget(setting.memory_budget)
  chosen, estimate = feddpdr.plan_chunk(
      setting.configs(), sizes=sizes, dim=dim, num_classes=num_classes,
      seeds=setting.seeds, budget=budget, chunk=setting.participant_chunk,
      processes=processes)
  if chosen is not None and setting.participant_chunk is None:
    count = -(-len(sizes) // max(1, processes))
    common.progress(
        f"participant chunk {chosen} of {count} (estimated "
        f"{estimate / 2**30:.1f} GiB of a {budget / 2**30:.1f} GiB memory "
        f"budget; participant_chunk or memory_budget to change)")
  return chosen


def _say(i: int, count: int, label: str, epsilon, first: bool) -> None:
  what = ("compiling (or loading from the JAX cache)" if first
          else "running (compiled program reused)")
  eps = "" if epsilon is None else f" eps={epsilon:g}"
  common.progress(f"{i + 1}/{count} {label}{eps}: {what} ...")


def budget_table(prepared: Prepared, setting: Setting, *, sizes,
                 participant_chunk: int | None = None) -> list[dict]:
  """The main command: accuracy against ε, and the non-private baseline.

  Runs the setting's mechanism at each ε (one compiled program for all
  of them: ε is traced) and, with ``baseline``, the non-private pipeline
  (:meth:`Setting.configs`); then each of its Fed DP-SGD recipes on the
  same participants at each ε (:func:`launch.experiments.fedsgd.run`,
  one more program per recipe); emits each record as it comes and prints
  a table on stderr. ``participant_chunk`` is the chunk chosen for
  DP-PCA's memory (:func:`memory_chunk`); federated DP-SGD holds B rows
  per participant, not d × d matrices, so it maps the setting's own
  ``participant_chunk`` at a time.
  """
  from launch.experiments import fedsgd  # pylint: disable=g-import-not-at-top
  s = setting
  # The baseline first: it compiles the one program that every ε then
  # reuses (federated.feddpdr.program: Non-Priv is the private program
  # with the noise off).
  configs = s.configs()
  records, seen = [], set()
  for i, config in enumerate(configs):
    program = (feddpdr.program(config), len(sizes))
    _say(i, len(configs), LABELS[config.mechanism],
         config.epsilon if config.private else None, program not in seen)
    seen.add(program)
    records.append(run_one(
        prepared, sizes=sizes, seed=s.seed, seeds=s.seeds, config=config,
        shard=s.shard_participants, participant_chunk=participant_chunk,
        buckets=s.buckets, extra={"sweep": "budget_table"}))
    common.emit_record(records[-1], s.out)
  for recipe in s.fedsgd if s.config.private else ():
    for i, eps in enumerate(s.epsilons):
      _say(i, len(s.epsilons), f"{LABELS['fedsgd']} ({recipe.trust} noise)",
           eps, i == 0)
      records.append(fedsgd.run(
          prepared, sizes=sizes, seed=s.seed, seeds=s.seeds,
          epsilon=float(eps), delta=s.config.delta, recipe=recipe,
          participant_chunk=s.participant_chunk,
          extra={"sweep": "budget_table"}))
      common.emit_record(records[-1], s.out)
  common.progress("done\n" + format_table(records))
  return records


def _eps(value) -> str:
  return "-" if value is None else f"{value:.3g}"


def format_table(records) -> str:
  """A short human-readable table: accuracy against the ε that holds."""
  r0 = records[0]
  head = (f"{r0['dataset']}: {r0['participants']} participants x "
          f"{r0['sizes'][0]} rows, k={r0['k']}, {r0['num_classes']} "
          f"classes, {r0['test_rows']} test rows, {r0['seeds']} seed(s)")
  trusts = {r["fedsgd"]["trust"] for r in records if "fedsgd" in r}

  def label(r):
    name = LABELS.get(r["mechanism"], r["mechanism"])
    if "fedsgd" in r and len(trusts) > 1:
      return f"{name} ({r['fedsgd']['trust']})"
    return name

  width = max(14, *(len(label(r)) + 2 for r in records))
  lines = [head,
           f"  {'mechanism':<{width}}{'epsilon (holds)':>16}{'delta':>9}"
           f"{'paper eps':>11}{'accuracy':>10}{'± std':>8}"]
  for r in records:
    p = r["privacy"]
    if p["epsilon"] is None:
      holds, delta, nominal = "none (no DP)", "-", "-"
    else:
      holds, delta = _eps(p["epsilon"]), f"{p['delta']:.0e}"
      nominal = (_eps(p["epsilon_nominal"])
                 if p["epsilon_nominal"] != p["epsilon"] else "same")
    lines.append(f"  {label(r):<{width}}{holds:>16}{delta:>9}{nominal:>11}"
                 f"{r['accuracy']:>10.3f}{r['accuracy_std']:>8.3f}")
  lines.append("  (epsilon (holds): the ledger's composed guarantee per "
               "participant; paper eps: eps1 + eps2 as the paper counts it)")
  shown = set()
  for r in records:
    recipe = r.get("fedsgd")
    if recipe and recipe["trust"] not in shown:
      shown.add(recipe["trust"])
      lines.append(f"  (Fed DP-SGD: one softmax model, {recipe['trust']} "
                   f"noise; assumes {recipe['assumption']})")
  return "\n".join(lines)


def run(setting: Setting, *, processes: int | None = None) -> list[dict]:
  """The command: a sweep, or the table (over several processes when
  ``processes`` is given, after :func:`federated.distributed.initialize`).

  Loads the data, checks what needs it (:meth:`Setting.check_data`),
  plans the participant chunk against the memory budget, and runs.
  Returns the records written.
  """
  s = setting
  if s.sweep is not None:
    return [sweep(s)]
  common.progress(f"loading {s.dataset}")
  prepared = prepare_data(s.dataset, data_dir=s.data_dir, seed=s.seed)
  sizes = s.check_data(prepared)
  chunk = memory_chunk(s, sizes=sizes, dim=prepared.x_train.shape[1],
                       num_classes=len(prepared.classes),
                       processes=processes or 1)
  if processes is not None:
    from launch.experiments import distributed  # pylint: disable=g-import-not-at-top
    return distributed.budget_table(prepared, s, sizes=sizes,
                                    participant_chunk=chunk)
  return budget_table(prepared, s, sizes=sizes, participant_chunk=chunk)


def sweep_points(name: str, *, dim: int, available: int, n_default: int,
                 participants: int, mechanisms, epsilon: float,
                 k: int = 20):
  """(sweep, mechanism, k, epsilon, sizes) tuples of one paper grid.

  ``nonpriv`` takes no ε: it is run once per grid point of the other axes
  (ε None; plotted flat across ε).
  """
  even = (n_default,) * participants

  def eps_of(mech, e):
    return None if mech == "nonpriv" else e

  points = []
  if name == "fig2":
    for mech in mechanisms:
      ks = [kk for kk in PAPER_K if kk <= dim] if mech != "dpml" else [k]
      points += [("fig2", mech, kk, eps_of(mech, epsilon), even)
                 for kk in ks]
  elif name == "fig3":
    points = [("fig3", m, k, e, even) for e in PAPER_EPSILON
              for m in mechanisms if m != "nonpriv"]
    if "nonpriv" in mechanisms:
      points.append(("fig3", "nonpriv", k, None, even))
  elif name == "fig4":
    points = [("fig4", m, k, eps_of(m, epsilon), (n,) * participants)
              for n in PAPER_N if n * participants <= available
              for m in mechanisms]
  elif name == "fig5":
    points = [("fig5", m, k, eps_of(m, epsilon), s) for s in PAPER_UNEVEN
              if sum(s) <= available for m in mechanisms]
  elif name == "table3":
    points = [("table3", m, k, eps_of(m, epsilon), even)
              for m in mechanisms]
  return [p for p in points if p[1] == "dpml" or p[2] <= dim]


def _probe(sweep_name, dataset, config, *, k, sizes, seed, seeds) -> dict:
  settings = record_settings(config)
  return {"sweep": sweep_name, "dataset": dataset,
          "mechanism": config.mechanism, "epsilon": settings["epsilon"],
          "delta": settings["delta"],
          "k": k if config.mechanism != "dpml" else None,
          "sizes": list(sizes), "lam": config.lam, "loss": config.loss,
          "aggregation": config.aggregation,
          "model_aggregation": config.model_aggregation,
          "calibration": settings["calibration"],
          "budget_per_classifier": settings["budget_per_classifier"],
          "relation": settings["relation"], "seed": seed,
          "seeds": seeds}


def sweep(setting: Setting) -> dict:
  """Runs the setting's paper grid, skipping runs already in ``out``;
  plots at the end.

  The grid (:func:`sweep_points`) varies k, ε, n or the sizes around the
  setting's; its mechanisms are ``sweep_mechanisms``. Resume: a run whose
  settings (:data:`KEY_FIELDS`) are in ``out`` is not run again; a last
  line cut off by a crash is set aside by
  :func:`launch.common.emit_record` and that run is done again.

  Returns:
    The last record written (an empty dict when every run was done).
  """
  s, base = setting, setting.config
  epsilon = float(s.epsilons[0])
  prepared = prepare_data(s.dataset, data_dir=s.data_dir, seed=s.seed)
  available = len(prepared.y_train)
  n_default = min(s.n_per_participant, available // s.participants)
  names = (["fig2", "fig3", "fig4", "fig5", "table3"]
           if s.sweep == "all" else [s.sweep])
  done = common.done_keys(s.out, KEY_FIELDS)
  last = {}
  for name in names:
    points = sweep_points(name, dim=prepared.x_train.shape[1],
                          available=available, n_default=n_default,
                          participants=s.participants,
                          mechanisms=s.sweep_mechanisms, epsilon=epsilon,
                          k=base.k)
    for i, (sname, mech, k, eps, sizes) in enumerate(points):
      config = dataclasses.replace(
          base, mechanism=mech, k=k, epsilon=epsilon if eps is None else eps)
      run_seeds = 1 if sname == "table3" else s.seeds
      probe = _probe(sname, s.dataset, config, k=k, sizes=sizes,
                     seed=s.seed, seeds=run_seeds)
      key = common.record_key(probe, KEY_FIELDS)
      if key in done:
        continue
      common.progress(f"{sname} {i + 1}/{len(points)}: {mech} k={k} "
                      f"eps={eps} sizes={sizes}")
      try:
        record = run_one(prepared, sizes=sizes, seed=s.seed,
                         seeds=run_seeds, config=config,
                         timing_repeats=3 if sname == "table3" else 1,
                         extra={"sweep": sname})
      except (ValueError, feddpdr.ConvergenceError,
              jax.errors.JaxRuntimeError) as err:
        record = {**probe, "accuracy": None, "error": str(err),
                  "privacy": (accounting.no_guarantee_record(
                      f"run failed: {err}"))}
      common.emit_record(record, s.out)
      done.add(key)
      last = record
  if s.plot:
    from launch import plot_feddpdr  # matplotlib only when plotting
    for path in plot_feddpdr.plot_file(s.out):
      common.progress(f"wrote {path}")
  return last
