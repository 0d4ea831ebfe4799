"""Experiment harness of ``launch.feddpdr`` (no flags; importable anywhere).

The library (:mod:`federated.feddpdr`) calibrates, trains and evaluates;
this module times it, builds the JSON records, runs the budget table of the
main command and the paper's sweeps (with resume), and turns on JAX's
persistent compilation cache. See ``launch/feddpdr.py`` for the command
line.
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

from dpcore import accounting, clipping, linalg, options
from federated import feddpdr, partition, sharding
from launch import common, programs
from launch.data import loaders as data_lib

PAPER_K = (5, 10, 20, 50, 100)
PAPER_EPSILON = (0.01, 0.05, 0.1, 0.5, 1.0, 2.0)
PAPER_N = (100, 500, 1000, 5000, 10_000)
PAPER_UNEVEN = ((50, 100, 500, 1000, 2000),
                (100, 500, 1000, 5000, 10_000),
                (100, 1000, 5000, 8000, 10_000))
KEY_FIELDS = ("sweep", "dataset", "mechanism", "epsilon", "delta", "k",
              "sizes", "lam", "loss", "aggregation", "model_aggregation",
              "calibration", "budget_per_classifier", "neighbouring", "seed",
              "seeds")
# The settings a non-private run does not use: null in its record.
BUDGET_FIELDS = ("epsilon", "delta", "calibration", "budget_per_classifier",
                 "pca_fraction", "neighbouring")
LABELS = {**{name: m.label for name, m in feddpdr.DESCRIPTIONS.items()},
          "fedsgd": "Fed DP-SGD"}
DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "dpjax", "jax")
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
    from launch.data import hog  # only CIFAR needs it
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
  """How to make --participants x --n_per_participant fit in ``rows``."""
  if participants > rows:
    return f"lower --participants to at most {rows}"
  return (f"lower --n_per_participant to at most {rows // participants} "
          f"or --participants")


def check_counts(participants: int, n_per: int) -> None:
  """``--participants`` and ``--n_per_participant`` are both >= 1."""
  if participants < 1 or n_per < 1:
    raise ValueError(
        f"--participants={participants} and --n_per_participant={n_per} "
        f"must both be >= 1.")


def resolve_sizes(*, available: int, participants: int, n_per: int,
                  sizes) -> tuple[int, ...]:
  """Participant sizes from the flags, checked against the training rows.

  ``sizes`` (``--sizes``) wins over ``participants`` × ``n_per``
  (``--participants`` × ``--n_per_participant``); either must fit in the
  ``available`` rows, or the message names the flags and the rows there
  are.
  """
  if sizes is not None:
    sizes = [int(s) for s in sizes]
    if not sizes:
      raise ValueError("--sizes is empty; give rows per participant, e.g. "
                       "--sizes=100,200, or leave it out.")
    if min(sizes) < 1:
      raise ValueError(f"--sizes={','.join(map(str, sizes))}: every "
                       f"participant needs at least one row.")
    if sum(sizes) > available:
      raise ValueError(
          f"--sizes={','.join(map(str, sizes))} asks for {sum(sizes)} rows "
          f"but the data set has {available} training rows; lower --sizes.")
    return partition.check_sizes(sizes, available)
  check_counts(participants, n_per)
  if participants * n_per > available:
    raise ValueError(
        f"--participants={participants} x --n_per_participant={n_per} = "
        f"{participants * n_per} rows exceeds the {available} training rows "
        f"of the data set; {_fix(available, participants)}.")
  return (n_per,) * participants


def check_against_data(config: feddpdr.Config, *, d: int, num_classes: int,
                       sizes) -> None:
  """The library's checks that need the data's shape (the settings named
  as flags), and the calibration of these participants."""
  config.check(d=d, prefix="--")
  if num_classes < 2:
    raise ValueError(f"the data set has {num_classes} class(es); a "
                     f"classifier needs at least 2.")
  feddpdr.make_plan(sizes, d=d, num_classes=num_classes, config=config)


def record_settings(config: feddpdr.Config) -> dict:
  settings = {f.name: getattr(config, f.name)
              for f in dataclasses.fields(config)}
  if not config.private:
    settings.update({f: None for f in BUDGET_FIELDS})
  if not config.description.reduces:
    settings["k"] = None  # no PCA
  return settings


def topk_record(config: feddpdr.Config, *, d: int) -> dict:
  """The top-k solver of DP-PCA and its settings, for the record.

  ``{"solver": "eigh"}`` (exact), or for ``"subspace"`` the block and
  iteration count of :func:`dpcore.linalg.subspace_top_k`'s defaults,
  which DP-PCA (:func:`mechanisms.pca.dp_pca.top_k_by_subspace`) and the
  server's aggregate use.
  """
  if config.topk != "subspace":
    return {"solver": config.topk}
  defaults = inspect.signature(linalg.subspace_top_k).parameters
  return {"solver": config.topk, "block": min(d, 2 * config.k + 8),
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

  # The chunk was planned (or given) against the script's --memory_budget
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
  iterations_max, seeds, and accuracy_per_participant (local mechanisms
  only)."""
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
      "topk": topk_record(config, d=prepared.x_train.shape[1]),
      "compiler_options": dict(options or {}),
      "participants_per_second": timing["participants_per_second"],
      # This process's own peak (in a multi-process run, process 0's).
      "peak_host_memory_bytes": peak_host_memory_bytes(),
      "peak_device_memory_bytes": peak_device_memory_bytes(),
      "device": jax.devices()[0].platform,
  }
  record.update(extra or {})
  return record


@dataclasses.dataclass(frozen=True)
class FedSGDRecipe:
  """The public recipe of the federated DP-SGD rows (``--fedsgd_*``).

  Chosen before looking at any test result, from the DP-SGD literature's
  usual settings for softmax regression on unit-norm rows: q =
  min(0.05, 256/N) (an expected batch of at most 256 rows), 30 epochs,
  C = 1, plain SGD at learning rate 2 (the noisy mean gradient is an
  average over qN rows), zero initial weights. ``sampling_rate`` 0 means
  that rule.
  """
  trust: str = "server"
  sampling_rate: float = 0.0
  epochs: float = 30.0
  clip_norm: float = 1.0
  learning_rate: float = 2.0

  def rate(self, total_rows: int) -> float:
    if self.sampling_rate > 0:
      return self.sampling_rate
    return min(0.05, 256.0 / total_rows)

  def check(self) -> FedSGDRecipe:
    """One-line ValueErrors naming the flag, before any work."""
    options.parse(options.Trust, self.trust,
                         "--fedsgd_trust")
    if not 0.0 <= self.sampling_rate <= 1.0:
      raise ValueError(f"--fedsgd_sampling_rate must be in [0, 1] (0: "
                       f"min(0.05, 256/N)), got {self.sampling_rate}.")
    for flag, value in (("--fedsgd_epochs", self.epochs),
                        ("--fedsgd_clip", self.clip_norm),
                        ("--fedsgd_learning_rate", self.learning_rate)):
      if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{flag} must be a finite number > 0, got "
                         f"{value}.")
    return self


@functools.lru_cache(maxsize=8)
def _fedsgd_program(learning_rate: float, d: int, num_classes: int,
                    chunk: int | None):
  """The seed-vmapped federated DP-SGD run ``(keys, plan, x, y, mask) ->
  params`` (not jitted: :func:`fedsgd_program` does)."""
  import optax  # noqa: PLC0415

  from federated import fedsgd  # noqa: PLC0415

  def run(keys, plan, x, y, mask):
    def one(key):
      return fedsgd.release(key, plan, fedsgd.softmax_loss,
                            fedsgd.softmax_params(d, num_classes), x, y,
                            mask, optax.sgd(learning_rate),
                            chunk=chunk).params
    return jax.vmap(one)(keys)

  return run


def fedsgd_program(args, *, learning_rate: float, d: int, num_classes: int,
                   chunk: int | None):
  """The seed-vmapped federated DP-SGD run as a function of ``args``
  ``(keys, plan, x, y, mask)``: one jit for every ε of a run shape (σ, ε
  and δ are the plan's traced leaves), its trace kept beside JAX's
  persistent cache when that is on (:mod:`launch.programs`, as for the
  FedDPDR program), so a second run neither traces nor compiles it."""
  run = _fedsgd_program(learning_rate, d, num_classes, chunk)
  cache = jax.config.jax_compilation_cache_dir
  if not cache or jax.process_count() > 1:
    return jax.jit(run)
  _, plan, *_ = args
  shape = jax.eval_shape(run, *args)
  treedef = jax.tree.structure(shape)
  stored = programs.load_or_export(
      lambda *a: tuple(jax.tree.leaves(run(*a))), args, name="fedsgd_train",
      cache_dir=cache,
      settings=(dataclasses.replace(plan, noise_multiplier=0.0,
                                    epsilon=None, delta=None),
                learning_rate, d, num_classes, chunk),
      compiler_options=compiler_options())
  return lambda *a: jax.tree.unflatten(treedef, stored(*a))


def run_fedsgd(prepared: Prepared, *, sizes, seed: int, seeds: int,
               epsilon: float, delta: float, recipe: FedSGDRecipe,
               participant_chunk: int | None = None,
               extra: dict | None = None) -> dict:
  """Federated DP-SGD (:mod:`federated.fedsgd`) on FedDPDR's participants.

  The same partition as :func:`run_one` (the rows of ``seed``), one
  softmax model for all classes, σ calibrated (RDP) for ``epsilon`` at
  ``delta`` over the recipe's q and T; ``seeds`` repeats vmapped over
  keys. The record has :func:`make_record`'s core fields, the recipe under
  ``fedsgd`` and the ledger's privacy record (what holds, no nominal
  figure: the target ε is a setting).
  """
  from federated import fedsgd  # noqa: PLC0415
  key = jax.random.key(seed)
  parts = partition.partition_auto(
      jax.random.fold_in(key, 0), prepared.x_train, prepared.y_train,
      sizes=sizes, buckets=False)
  total = int(np.sum(parts.sizes))
  q = recipe.rate(total)
  steps = dpsgd_steps(q, recipe.epochs)
  sigma = calibrated_sigma(epsilon=epsilon, delta=delta, sampling_rate=q,
                           steps=steps)
  plan = fedsgd.make_plan(parts.sizes, trust=recipe.trust, sampling_rate=q,
                          steps=steps, clip_norm=recipe.clip_norm,
                          noise_multiplier=sigma, delta=delta)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  num_classes = len(prepared.classes)
  keys = jax.random.split(jax.random.fold_in(key, 3), seeds)
  # The plan's leaves (σ, δ) enter the program as float32 arrays (the
  # values a jit would trace them as), so its stored trace is keyed by
  # their shapes.
  traced = jax.tree.map(lambda v: np.asarray(v, np.float32), plan)
  args = (keys, traced, parts.x, parts.y.astype(np.int32), parts.mask)
  program = fedsgd_program(args, learning_rate=recipe.learning_rate,
                           d=prepared.x_train.shape[1],
                           num_classes=num_classes, chunk=participant_chunk)
  params, timing = timed_training(lambda: program(*args), 0,
                                  participants=len(sizes), seeds=seeds)
  accs = np.asarray(jax.vmap(lambda p: fedsgd.accuracy(
      p, prepared.x_test, prepared.y_test))(params))
  record = {
      "dataset": prepared.name, "mechanism": "fedsgd", "epsilon": epsilon,
      "delta": delta, "k": None, "participants": len(sizes),
      "sizes": list(map(int, sizes)), "accuracy": float(accs.mean()),
      "accuracy_std": float(accs.std()),
      "accuracy_per_seed": accs.tolist(),
      "privacy": ledger.report(delta),
      "seconds": timing["seconds"],
      "first_call_seconds": timing["first_call_seconds"],
      "fedsgd": {**dataclasses.asdict(recipe), **plan.settings()},
      "seed": seed, "seeds": seeds, "test_rows": len(prepared.y_test),
      "num_classes": num_classes, "chunk": participant_chunk,
      "participants_per_second": timing["participants_per_second"],
      "device": jax.devices()[0].platform,
  }
  record.update(extra or {})
  return record


def calibrated_sigma(*, epsilon: float, delta: float, sampling_rate: float,
                     steps: int) -> float:
  """:func:`dpcore.accounting.calibrate_dpsgd_noise`, kept beside JAX's cache.

  The calibration is a deterministic bisection over RDP curves (about
  0.6 s of a 2-core CPU per ε); with the persistent cache on, its result
  is stored in ``dpsgd_sigma.json`` there, keyed by the arguments and the
  dp_accounting version, so a second run reads it. Nothing rests on the
  file being right: the ledger computes the guarantee of the σ actually
  used, afresh, and that is what the record reports.
  """
  import importlib.metadata  # noqa: PLC0415
  import json  # noqa: PLC0415
  cache = jax.config.jax_compilation_cache_dir
  key = json.dumps([float(epsilon), float(delta), float(sampling_rate),
                    int(steps),
                    importlib.metadata.version("dp-accounting")])
  path = os.path.join(os.path.expanduser(cache), "dpsgd_sigma.json") if (
      cache) else None
  table = {}
  if path and os.path.exists(path):
    try:
      with open(path, encoding="utf-8") as f:
        table = json.load(f)
    except (OSError, ValueError):
      table = {}
  value = table.get(key) if isinstance(table, dict) else None
  if isinstance(value, float) and value > 0:
    return value
  sigma = accounting.calibrate_dpsgd_noise(
      epsilon=epsilon, delta=delta, sampling_rate=sampling_rate,
      steps=steps)
  if path:
    table = table if isinstance(table, dict) else {}
    table[key] = sigma
    try:
      partial = f"{path}.{os.getpid()}.tmp"
      with open(partial, "w", encoding="utf-8") as f:
        json.dump(table, f)
      os.replace(partial, path)
    except OSError:
      pass  # a read-only cache only costs the calibration next time
  return sigma


def dpsgd_steps(sampling_rate: float, epochs: float) -> int:
  """T of a recipe: :func:`dpcore.dpsgd.num_steps` (E/q rounded)."""
  from dpcore import dpsgd  # noqa: PLC0415
  return dpsgd.num_steps(epochs=epochs, sampling_rate=sampling_rate)


def memory_chunk(base: feddpdr.Config, *, sizes, d: int, num_classes: int,
                 seeds: int, baseline: bool, budget: int | None,
                 chunk: int | None, processes: int = 1) -> int | None:
  """The participant chunk of the main table's training, memory-checked.

  :func:`federated.feddpdr.plan_chunk` over the table's runs
  (:func:`table_configs`; messages name the flags): ``chunk``
  (``--participant_chunk``) checked against the budget, or else the
  largest chunk that fits every run (None: all at once). Prints the
  choice when it is not "all at once".

  Raises:
    ValueError: one line naming the estimate, the budget and the flags.
  """
  configs = table_configs(base, [base.epsilon], baseline=baseline)
  chosen, estimate = feddpdr.plan_chunk(
      configs, sizes=sizes, d=d, num_classes=num_classes, seeds=seeds,
      budget=budget, chunk=chunk, processes=processes, prefix="--")
  if chosen is not None and chunk is None:
    count = -(-len(sizes) // max(1, processes))
    common.progress(
        f"participant chunk {chosen} of {count} (estimated "
        f"{estimate / 2**30:.1f} GiB of a {budget / 2**30:.1f} GiB memory "
        f"budget; --participant_chunk or --memory_budget to change)")
  return chosen


def table_configs(base: feddpdr.Config, epsilons, *, baseline: bool
                  ) -> list[feddpdr.Config]:
  """The runs of the main command's table: the non-private baseline (with
  ``baseline``, or when ``base`` is non-private), then ``base`` at each ε."""
  configs = []
  if baseline or not base.private:
    configs.append(dataclasses.replace(base, mechanism="nonpriv"))
  if base.private:
    configs += [dataclasses.replace(base, epsilon=float(e))
                for e in epsilons]
  return configs


def budget_table(prepared: Prepared, *, sizes, seed: int, seeds: int,
                 base: feddpdr.Config, epsilons, baseline: bool,
                 out: str | None, shard: bool = False,
                 participant_chunk: int | None = None,
                 buckets: bool = True,
                 fedsgd: FedSGDRecipe | None = None,
                 fedsgd_chunk: int | None = None) -> list[dict]:
  """The main command: accuracy against ε, and the non-private baseline.

  Runs ``base.mechanism`` at each ε of ``epsilons`` (one compiled program
  for all of them: ε is traced) and, with ``baseline``, the non-private
  pipeline; with a ``fedsgd`` recipe, federated DP-SGD on the same
  participants at each ε (:func:`run_fedsgd`, one more program); emits
  each record as it comes and prints a table on stderr. Federated DP-SGD
  holds B rows per participant, not DP-PCA's d × d matrices, so it maps
  ``fedsgd_chunk`` participants at a time (the user's
  ``--participant_chunk``), not the chunk chosen for DP-PCA's memory.
  """
  # The baseline first: it compiles the one program that every ε then
  # reuses (federated.feddpdr.program: Non-Priv is the private program
  # with the noise off).
  configs = table_configs(base, epsilons, baseline=baseline)
  records, seen = [], set()
  for i, config in enumerate(configs):
    program = (feddpdr.program(config), len(sizes))
    what = ("compiling (or loading from the JAX cache)" if program not in seen
            else "running (compiled program reused)")
    seen.add(program)
    eps = f" eps={config.epsilon:g}" if config.private else ""
    common.progress(f"{i + 1}/{len(configs)} {LABELS[config.mechanism]}"
                    f"{eps}: {what} ...")
    record = run_one(prepared, sizes=sizes, seed=seed, seeds=seeds,
                     config=config, shard=shard,
                     participant_chunk=participant_chunk,
                     buckets=buckets, extra={"sweep": "budget_table"})
    common.emit_record(record, out)
    records.append(record)
  if fedsgd is not None and base.private:
    for i, eps in enumerate(epsilons):
      what = ("compiling (or loading from the JAX cache)" if i == 0 else
              "running (compiled program reused)")
      common.progress(f"{i + 1}/{len(epsilons)} {LABELS['fedsgd']} "
                      f"({fedsgd.trust} noise) eps={eps:g}: {what} ...")
      record = run_fedsgd(prepared, sizes=sizes, seed=seed, seeds=seeds,
                          epsilon=float(eps), delta=base.delta,
                          recipe=fedsgd, participant_chunk=fedsgd_chunk,
                          extra={"sweep": "budget_table"})
      common.emit_record(record, out)
      records.append(record)
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
  lines = [head,
           f"  {'mechanism':<14}{'epsilon (holds)':>16}{'delta':>9}"
           f"{'paper eps':>11}{'accuracy':>10}{'± std':>8}"]
  for r in records:
    p = r["privacy"]
    if p["epsilon"] is None:
      holds, delta, nominal = "none (no DP)", "-", "-"
    else:
      holds, delta = _eps(p["epsilon"]), f"{p['delta']:.0e}"
      nominal = (_eps(p["epsilon_nominal"])
                 if p["epsilon_nominal"] != p["epsilon"] else "same")
    lines.append(f"  {LABELS.get(r['mechanism'], r['mechanism']):<14}"
                 f"{holds:>16}{delta:>9}{nominal:>11}"
                 f"{r['accuracy']:>10.3f}{r['accuracy_std']:>8.3f}")
  lines.append("  (epsilon (holds): the ledger's composed guarantee per "
               "participant; paper eps: eps1 + eps2 as the paper counts it)")
  fed = [r for r in records if r["mechanism"] == "fedsgd"]
  if fed:
    recipe = fed[0]["fedsgd"]
    lines.append(f"  (Fed DP-SGD: one softmax model, {recipe['trust']} "
                 f"noise; assumes {recipe['assumption']})")
  return "\n".join(lines)


def sweep_points(name: str, *, d: int, available: int, n_default: int,
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
      ks = [kk for kk in PAPER_K if kk <= d] if mech != "dpml" else [k]
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
  return [p for p in points if p[1] == "dpml" or p[2] <= d]


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
          "neighbouring": settings["neighbouring"], "seed": seed,
          "seeds": seeds}


def sweep(*, dataset: str, data_dir, sweep_name: str, mechanisms, seed: int,
          seeds: int, out: str, base: feddpdr.Config, participants: int,
          n_per: int, plot: bool) -> dict:
  """Runs a paper grid, skipping runs already in ``out``; plots at the end.

  Resume: a run whose settings (:data:`KEY_FIELDS`) are in ``out`` is not
  run again; a last line cut off by a crash is set aside by
  :func:`launch.common.emit_record` and that run is done again.
  """
  prepared = prepare_data(dataset, data_dir=data_dir, seed=seed)
  available = len(prepared.y_train)
  d = prepared.x_train.shape[1]
  n_default = min(n_per, available // participants)
  names = (["fig2", "fig3", "fig4", "fig5", "table3"]
           if sweep_name == "all" else [sweep_name])
  done = common.done_keys(out, KEY_FIELDS)
  last = {}
  for name in names:
    points = sweep_points(name, d=d, available=available,
                          n_default=n_default, participants=participants,
                          mechanisms=mechanisms, epsilon=base.epsilon,
                          k=base.k)
    for i, (sname, mech, k, eps, sizes) in enumerate(points):
      config = dataclasses.replace(
          base, mechanism=mech, k=k,
          epsilon=base.epsilon if eps is None else eps)
      run_seeds = 1 if sname == "table3" else seeds
      probe = _probe(sname, dataset, config, k=k, sizes=sizes, seed=seed,
                     seeds=run_seeds)
      key = common.record_key(probe, KEY_FIELDS)
      if key in done:
        continue
      common.progress(f"{sname} {i + 1}/{len(points)}: {mech} k={k} "
                      f"eps={eps} sizes={sizes}")
      try:
        record = run_one(prepared, sizes=sizes, seed=seed, seeds=run_seeds,
                         config=config,
                         timing_repeats=3 if sname == "table3" else 1,
                         extra={"sweep": sname})
      except (ValueError, feddpdr.ConvergenceError,
              jax.errors.JaxRuntimeError) as err:
        record = {**probe, "accuracy": None, "error": str(err),
                  "privacy": (accounting.no_guarantee_record(
                      f"run failed: {err}"))}
      common.emit_record(record, out)
      done.add(key)
      last = record
  if plot:
    from launch import plot_feddpdr  # matplotlib only when plotting
    for path in plot_feddpdr.plot_file(out):
      common.progress(f"wrote {path}")
  return last
