"""Experiment logic of ``launch.feddpdr`` (no flags; importable anywhere).

See ``launch/feddpdr.py`` for the command line and sweeps.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from federated import feddpdr, partition, sharding
from launch import common
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
    from launch import hog  # only CIFAR needs it
    common.progress("computing HOG features (cell 4, 9 bins, block 2)")
    x_train = hog.hog_features(x_train, ds.image_shape)
    x_test = hog.hog_features(x_test, ds.image_shape)
    bounds = None  # HOG blocks are already normalised; rows get unit norm
  x_train = data_lib.unit_rows(x_train, bounds)
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
    x_test = data_lib.unit_rows(x_test, bounds)
    outside = sorted(set(np.unique(ds.y_test).tolist()) - set(classes))
    if outside:
      raise ValueError(f"test labels {outside} are not in the training "
                       f"classes {classes}.")
    y_test = np.searchsorted(classes, ds.y_test)
  return Prepared(name, x_train, y_train, x_test, y_test, classes)


def resolve_sizes(*, available: int, participants: int, n_per: int,
                  sizes, n_per_explicit: bool) -> tuple[int, ...]:
  """Participant sizes from the flags (see the module docstring)."""
  if sizes:
    return partition.check_sizes([int(s) for s in sizes], available)
  if participants * n_per > available and not n_per_explicit:
    capped = available // participants
    common.progress(
        f"note: {participants} x {n_per} rows exceed the {available} "
        f"training rows; using n_per_participant={capped}")
    n_per = capped
  return partition.even_sizes(available, participants, n_per)


def run_one(prepared: Prepared, *, sizes, seed: int, seeds: int,
            config: feddpdr.Config, timing_repeats: int = 1,
            extra: dict | None = None, shard: bool = False,
            participant_chunk: int | None = None) -> dict:
  """One experiment: partition from ``seed``, train ``seeds`` repeats.

  ``shard`` splits the participant axis over the local devices
  (:func:`federated.sharding.participant_mesh`); the numbers are the same.
  ``participant_chunk`` maps that many participants at a time, which bounds
  peak memory for many participants (:func:`federated.feddpdr.run`).
  """
  key = jax.random.key(seed)
  mesh = sharding.participant_mesh(len(sizes)) if shard else None
  parts = partition.partition(jax.random.fold_in(key, 0), prepared.x_train,
                              prepared.y_train, sizes=sizes)
  result = feddpdr.run(jax.random.fold_in(key, 1), parts, prepared.x_test,
                       prepared.y_test, num_classes=len(prepared.classes),
                       config=config, seeds=seeds,
                       timing_repeats=timing_repeats, mesh=mesh,
                       participant_chunk=participant_chunk)
  record = {
      "dataset": prepared.name,
      "mechanism": config.mechanism,
      "epsilon": config.epsilon,
      "delta": config.delta,
      "k": config.k if config.mechanism != "dpml" else None,
      "participants": len(sizes),
      "sizes": list(sizes),
      "accuracy": result.pop("accuracy"),
      "seconds": result.pop("seconds"),
      "compile_seconds": result.pop("compile_seconds"),
      "privacy": result.pop("privacy"),
      "grad_norm_max": result.pop("grad_norm_max"),
      **result,
      **{f.name: getattr(config, f.name)
         for f in dataclasses.fields(config)},
      "seed": seed,
      "test_rows": len(prepared.y_test),
      "num_classes": len(prepared.classes),
      "device": jax.devices()[0].platform,
  }
  record["k"] = config.k if config.mechanism != "dpml" else None  # no PCA
  record.update(extra or {})
  return record


def experiment(*, dataset: str, data_dir, participants: int, n_per: int,
               n_per_explicit: bool, sizes, seed: int, seeds: int,
               config: feddpdr.Config, out: str | None,
               shard: bool = False,
               participant_chunk: int | None = None) -> dict:
  """One run from the flags' values: data, sizes, training, JSON record."""
  prepared = prepare_data(dataset, data_dir=data_dir, seed=seed)
  sizes = resolve_sizes(available=len(prepared.y_train),
                        participants=participants, n_per=n_per, sizes=sizes,
                        n_per_explicit=n_per_explicit)
  record = run_one(prepared, sizes=sizes, seed=seed, seeds=seeds,
                   config=config, shard=shard,
                   participant_chunk=participant_chunk)
  common.emit_record(record, out)
  return record


def sweep_points(name: str, *, d: int, available: int, n_default: int,
                 participants: int, mechanisms, epsilon: float,
                 k: int = 20):
  """(sweep, mechanism, k, epsilon, sizes) tuples of one paper grid."""
  even = (n_default,) * participants
  points = []
  if name == "fig2":
    for mech in mechanisms:
      ks = [kk for kk in PAPER_K if kk <= d] if mech != "dpml" else [k]
      points += [("fig2", mech, kk, epsilon, even) for kk in ks]
  elif name == "fig3":
    points = [("fig3", m, k, e, even) for e in PAPER_EPSILON
              for m in mechanisms]
  elif name == "fig4":
    points = [("fig4", m, k, epsilon, (n,) * participants)
              for n in PAPER_N if n * participants <= available
              for m in mechanisms]
  elif name == "fig5":
    points = [("fig5", m, k, epsilon, s) for s in PAPER_UNEVEN
              if sum(s) <= available for m in mechanisms]
  elif name == "table3":
    points = [("table3", m, k, epsilon, even) for m in mechanisms]
  return [p for p in points if p[1] == "dpml" or p[2] <= d]


def sweep(*, dataset: str, data_dir, sweep_name: str, mechanisms, seed: int,
          seeds: int, out: str, base: feddpdr.Config, participants: int,
          n_per: int, plot: bool) -> dict:
  """Runs a paper grid, skipping runs already in ``out``; plots at the end."""
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
      config = dataclasses.replace(base, mechanism=mech, k=k, epsilon=eps)
      run_seeds = 1 if sname == "table3" else seeds
      probe = {"sweep": sname, "dataset": dataset, "mechanism": mech,
               "epsilon": eps, "delta": config.delta,
               "k": k if mech != "dpml" else None, "sizes": list(sizes),
               "lam": config.lam, "loss": config.loss,
               "aggregation": config.aggregation,
               "model_aggregation": config.model_aggregation,
               "calibration": config.calibration,
               "budget_per_classifier": config.budget_per_classifier,
               "neighbouring": config.neighbouring, "seed": seed,
               "seeds": run_seeds}
      if common.record_key(probe, KEY_FIELDS) in done:
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
        record = {**probe, "accuracy": None, "error": str(err)}
      common.emit_record(record, out)
      last = record
  if plot:
    from launch import plot_feddpdr  # matplotlib only when plotting
    for path in plot_feddpdr.plot_file(out):
      common.progress(f"wrote {path}")
  return last
