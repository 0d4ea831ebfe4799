"""Experiment logic of ``launch.compare`` (no flags; importable anywhere).

Accuracy against ε for every method the library has, each through its own
runner and its own ledger, on the data sets of its family
(:data:`DATASETS`): the FedDPDR family (digits, MNIST, Fashion-MNIST:
Non-Priv, FedDPDR-DPML, DPML and federated DP-SGD under server, local and
distributed noise, on the same participants), the DPWSS family (heart,
breast_cancer, digits 3 vs 8: :mod:`launch.experiments.kernel_compare`)
and Segment (DP-GLVQ, DP-GMLVQ, and central DP-SGD softmax with its
noise-free ceiling, on the same folds). :data:`METHODS` gives each method
its family, label, guarantee, runner and public recipe, fixed before any
result here was seen.

A sweep is one :class:`Setting`; :func:`run` writes one record per (data
set, method, ε) that ``out`` lacks: accuracy mean, sd (``ddof=1``) and per
seed, the privacy record of one run (the ε that holds, from the method's
ledger), the recipe, the settings and the seconds. A method without a
guarantee runs once (``epsilon`` null), a nominal one at every ε.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import time
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from dpcore import options
from launch import common, vocabulary

__all__ = [
    "DATASETS", "EPSILONS", "IMAGE_FEATURES", "KEY_FIELDS", "METHODS",
    "Method", "Run", "Setting", "load_candidates", "recipe", "run",
    "select",
]

DATASETS = {
    "digits": "feddpdr", "mnist": "feddpdr", "fashion_mnist": "feddpdr",
    "heart": "kernel", "breast_cancer": "kernel", "digits38": "kernel",
    "segment": "lvq",
}
"""Every data set and its family (the methods it takes)."""
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
KEY_FIELDS = ("dataset", "method", "epsilon", "delta", "seeds",
              "tuning_id", "features")
"""What identifies a record (and decides which runs resume)."""
LOADER_NAMES = {"digits38": "digits"}
GUARANTEE_TEXT = {"dp": "(ε, δ) from the ledger",
                  "nominal": "nominal ε only: no DP", "none": "no DP"}

# FedDPDR participants and the paper's settings per data set: digits is
# the main job (launch.feddpdr's defaults), MNIST and Fashion-MNIST the
# paper's (5 x 10,000 rows, k = 20, λ = 0.01).
FEDDPDR_SETUP = {
    "digits": {"participants": 2, "n_per_participant": 600, "k": 10,
               "lam": 1.0},
    "mnist": {"participants": 5, "n_per_participant": 10_000, "k": 20,
              "lam": 0.01},
    "fashion_mnist": {"participants": 5, "n_per_participant": 10_000,
                      "k": 20, "lam": 0.01},
}
# The central softmax recipe is the federated one (FedSGDRecipe's
# defaults): q = min(0.05, 256/N), 30 epochs, C = 1, plain SGD at 2.
SOFTMAX_RECIPE = {"sampling_rate": "min(0.05, 256/N)", "epochs": 30.0,
                  "clip_norm": 1.0, "learning_rate": 2.0,
                  "rows": "data min/max box [-1, 1], then unit norm",
                  "init": "zeros", "loss": "softmax cross-entropy"}
# DP-LVQ: launch.dplvq's defaults (the paper's Table 1 settings), the
# Segment protocol of docs/dplvq.md (5-fold CV, train on the other folds);
# one repeat of the CV per seed.
LVQ_RECIPE = {"q": 0.01, "clip": 0.5, "epochs": 50, "learning_rate": 0.05,
              "init_fraction": 0.2, "sigma_rule": "accountant",
              "init_mechanism": "laplace", "folds": 5,
              "bounds": "data_minmax"}
LVQ_FOLDS = 5

# The FedDPDR rows that aggregate second moments instead of the
# participants' bases: every participant's own noisy XᵢᵀXᵢ (local noise),
# or their secure sum with distributed noise (d ≤ 361: digits only).
FEDDPDR_AGGREGATION = {
    "feddpdr_moments": options.Aggregation.MOMENTS,
    "feddpdr_secure_moments": options.Aggregation.DISTRIBUTED_MOMENTS,
}

# --features=scattering: the image side and J of each image set (J = 1
# for 8 x 8, J = 2 for 28 x 28), L orientations, three channels a group.
IMAGE_FEATURES = {"digits": (8, 1), "mnist": (28, 2),
                  "fashion_mnist": (28, 2)}
SCATTERING_L = 8
CHANNELS_PER_GROUP = 3
FEATURES = ("scattering",)

# --tune: the method it selects a recipe for, the recipe fields a
# candidate may set (the rest keep FedSGDRecipe's), the share of each
# participant's training rows held out (rounded down) for the private
# score, and P(any padded batch of a trial overflows).
TUNED_METHOD = "fedsgd_server"
TUNABLE = ("sampling_rate", "epochs", "clip_norm", "learning_rate")
TUNE_VALIDATION_FRACTION = 0.2
TUNE_OVERFLOW = 1e-15


class Run(NamedTuple):
  """One record's (data set, method, ε); ε None for a non-private one."""
  dataset: str
  method: str
  epsilon: float | None


# -- the setting ---------------------------------------------------------------


def _check_list(flag: str, values, allowed) -> None:
  """``values`` non-empty, without repeats and (``allowed``) known."""
  if not values:
    raise ValueError(f"{flag} is empty; give one or more of "
                     f"{', '.join(allowed or ('ε > 0, e.g. 0.5', '1', '2'))}"
                     f".")
  bad = [v for v in values if allowed is not None and v not in allowed]
  if bad:
    raise ValueError(f"{flag}: unknown {', '.join(map(repr, bad))}; choose "
                     f"from {', '.join(allowed)}.")
  if len(set(values)) != len(values):
    raise ValueError(f"{flag}={','.join(map(str, values))} names one "
                     f"twice.")


def load_candidates(path: str) -> tuple[dict, ...]:
  """``--tune``'s candidate recipes (:func:`launch.common.read_candidates`
  over :data:`TUNABLE`), each value and, for the whole file, each step
  count checked before any data is read."""
  from dpcore import dpsgd, validation  # noqa: PLC0415
  from launch.experiments import fedsgd as fx  # noqa: PLC0415
  candidates = common.read_candidates(
      path, "--tune", TUNABLE,
      example='[{"learning_rate": 1}, {"learning_rate": 4}]')
  for i, cand in enumerate(candidates):
    for k, v in cand.items():
      name = f"--tune={path}: candidate {i}: {k}"
      if k == "sampling_rate":
        validation.check_in_range(v, name, 0.0, 1.0, high_inclusive=True)
      else:
        validation.check_positive(v, name)
    # Without a sampling_rate a candidate takes min(0.05, 256/N) ≤ rate(1):
    # its steps are at least E / rate(1) whatever the data set.
    r = fx.FedSGDRecipe(trust=options.Trust.SERVER, **cand)
    try:
      dpsgd.num_steps(epochs=r.epochs, sampling_rate=r.rate(1))
    except ValueError as err:
      at = ("" if "sampling_rate" in cand else
            " (at the recipe's largest sampling_rate)")
      raise ValueError(f"--tune={path}: candidate {i}{at}: {err}"
                       ) from None
  return tuple(candidates)


def resolve_data_dir(dataset: str, data_dir: str | None) -> str | None:
  """Where ``dataset``'s files are: ``data_dir`` if they are there, else
  the loaders' own lookup; raises the loader's message if neither has
  them (cheap: finds the files without reading them)."""
  from launch.data import loaders  # noqa: PLC0415
  name = LOADER_NAMES.get(dataset, dataset)
  try:
    loaders.check_dataset(name, data_dir=data_dir)
    return data_dir
  except FileNotFoundError:
    if data_dir is None:
      raise
    with contextlib.suppress(FileNotFoundError):
      loaders.check_dataset(name, data_dir=None)  # the loaders' lookup
      return None
    raise


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setting:
  """One sweep of ``launch.compare``: every flag, by its flag's name.

  Attributes:
    datasets: data sets of :data:`DATASETS`, in run order.
    methods: methods of :data:`METHODS` (None: every method of each set's
      family).
    epsilons: the target ε of the private methods (the table's columns).
    delta: δ of every private method.
    seeds: seeds per (data set, method, ε).
    features: None (the data set's own rows) or ``"scattering"`` (the
      image sets of :data:`IMAGE_FEATURES` through the scattering
      transform and group normalisation first; the other sets keep their
      rows, and their records say so).
    data_dir: where data files are looked for first.
    tune: a JSON file of candidate recipes for :data:`TUNED_METHOD`
      (:func:`load_candidates`), or None for its fixed recipe.
    expected_trials: E[K] of the tuning.
    distribution: the law of K (:class:`dpcore.options.TrialDistribution`).
    score_epsilon: ε of each trial's noisy validation accuracy.
  """
  datasets: tuple[str, ...] = tuple(DATASETS)
  methods: tuple[str, ...] | None = None
  epsilons: tuple[float, ...] = EPSILONS
  delta: float = 1e-5
  seeds: int = 3
  features: str | None = None
  data_dir: str | None = None
  tune: str | None = None
  expected_trials: float = 10.0
  distribution: str = options.TrialDistribution.GEOMETRIC
  score_epsilon: float = 0.5

  def check(self) -> Setting:
    """One-line ValueErrors naming the flag and the fix, before any data
    is read; also finds every data set's files (:attr:`data_dirs`).

    Returns:
      ``self``.
    """
    from dpcore import validation  # noqa: PLC0415
    _check_list("--datasets", self.datasets, DATASETS)
    if self.methods is not None:
      _check_list("--methods", self.methods, METHODS)
    _check_list("--epsilons", self.epsilons, None)
    for eps in self.epsilons:
      validation.check_epsilon(eps, "--epsilons")
    validation.check_delta(self.delta, "--delta")
    validation.check_positive_int(self.seeds, "--seeds")
    if not any(self.plan.values()):
      raise ValueError(
          f"--methods={','.join(self.methods)} runs nothing on "
          f"--datasets={','.join(self.datasets)}: " + "; ".join(
              f"{d} takes {', '.join(family_methods(DATASETS[d], d))}"
              for d in self.datasets))
    if self.features is not None:
      if self.features not in FEATURES:
        raise ValueError(f"--features={self.features!r}: choose "
                         f"{', '.join(FEATURES)}, or leave it out.")
      if not any(d in IMAGE_FEATURES for d, m in self.plan.items() if m):
        raise ValueError(f"--features={self.features} maps the image sets "
                         f"({', '.join(IMAGE_FEATURES)}), and this run has "
                         f"none; add one to --datasets.")
    if self.tune is not None:
      self._check_tuning()
    if self.data_dir is not None and not os.path.isdir(
        os.path.expanduser(self.data_dir)):
      raise ValueError(f"--data_dir={self.data_dir!r} is not a directory; "
                       f"give the directory holding the data files, or "
                       f"leave it out.")
    _ = self.data_dirs
    return self

  def _check_tuning(self) -> None:
    from dpcore import validation  # noqa: PLC0415
    if not self.tune:
      raise ValueError("--tune is empty; give a JSON file of candidate "
                       "recipes, or leave it out.")
    _ = self.candidates
    try:
      _ = self.count
    except ValueError as err:
      raise ValueError(f"--distribution={self.distribution!r}, "
                       f"--expected_trials={self.expected_trials!r}: {err}"
                       ) from None
    validation.check_epsilon(self.score_epsilon, "--score_epsilon")
    if not any(self.tunes(d, m) for d, ms in self.plan.items() for m in ms):
      raise ValueError(f"--tune selects a recipe for {TUNED_METHOD}, which "
                       f"this run does not include; add it to --methods, "
                       f"on digits, mnist or fashion_mnist.")

  @functools.cached_property
  def plan(self) -> dict[str, list[str]]:
    """{data set: its methods, in order}: the family's, filtered by
    ``methods``."""
    return {d: [m for m in family_methods(DATASETS[d], d)
                if self.methods is None or m in self.methods]
            for d in self.datasets}

  @functools.cached_property
  def data_dirs(self) -> dict[str, str | None]:
    """Each planned data set's files' directory (:func:`resolve_data_dir`)."""
    return {d: resolve_data_dir(d, self.data_dir)
            for d, m in self.plan.items() if m}

  @functools.cached_property
  def candidates(self) -> tuple[dict, ...] | None:
    return None if self.tune is None else load_candidates(self.tune)

  @functools.cached_property
  def count(self):
    """The law of K (:func:`dpcore.tuning.trial_count`)."""
    from dpcore import tuning  # noqa: PLC0415
    return tuning.trial_count(self.distribution, float(self.expected_trials))

  @property
  def tuning_id(self) -> str | None:
    """What identifies the tuning in a record (and for resuming)."""
    if self.tune is None:
      return None
    return json.dumps({"candidates": list(self.candidates),
                       "distribution": self.count.distribution,
                       "expected_trials": round(self.count.expected, 9),
                       "score_epsilon": self.score_epsilon}, sort_keys=True)

  def tunes(self, dataset: str, method: str) -> bool:
    return (self.tune is not None and method == TUNED_METHOD
            and DATASETS[dataset] == METHODS[TUNED_METHOD].family)

  def features_for(self, dataset: str) -> str | None:
    """The feature map ``dataset``'s rows go through (None: their own)."""
    return self.features if dataset in IMAGE_FEATURES else None

  def runs(self) -> list[Run]:
    """Every record's run, in order (a non-private method once)."""
    return [Run(d, m, e) for d, methods in self.plan.items()
            for m in methods
            for e in ((None,) if METHODS[m].guarantee == "none"
                      else map(float, self.epsilons))]

  def key(self, run: Run, **variant) -> dict:
    """The record's identity (:data:`KEY_FIELDS`); ``variant`` overrides
    ``tuning_id`` or ``features`` (a table's other rows)."""
    tuned = self.tunes(run.dataset, run.method)
    return {"dataset": run.dataset, "method": run.method,
            "epsilon": run.epsilon, "delta": self.delta, "seeds": self.seeds,
            "tuning_id": self.tuning_id if tuned else None,
            "features": self.features_for(run.dataset), **variant}


def family_methods(family: str, dataset: str | None = None) -> list[str]:
  """The methods of ``family`` (that run on ``dataset``, if given)."""
  return [m for m, spec in METHODS.items() if spec.family == family
          and (dataset is None or spec.datasets is None
               or dataset in spec.datasets)]


def select(records, key: dict) -> dict | None:
  """The last record of ``key`` (:meth:`Setting.key`), or None."""
  want = common.record_key(key, KEY_FIELDS)
  match = [r for r in records if common.record_key(r, KEY_FIELDS) == want]
  return match[-1] if match else None


# -- the data ------------------------------------------------------------------


class FedData(NamedTuple):
  """A FedDPDR-family set: unit rows (:class:`launch.experiments.feddpdr.
  Prepared`), the participants' sizes and the set's setup."""
  prepared: Any
  sizes: tuple
  setup: dict
  features: dict | None


class LVQData(NamedTuple):
  """Segment in the [−1, 1] box (data min/max, as docs/dplvq.md) and the
  key of dplvq.run's folds, so every method trains on them."""
  prepared: Any
  split_key: Any


def _scattering(prepared, dataset: str):
  """``prepared`` with its rows replaced by their scattering features.

  Each unit-norm row, as an image, goes through the order-2 scattering
  transform (J by the image side, L = 8), group normalisation (three
  channels a group) and back to norm 1: a map of each row alone, so it
  costs no privacy. (The transform is positively homogeneous and the
  normalisations remove the scale, so the unit rows stand for the images
  in [0, 1].)
  """
  from dpcore import clipping, memory  # noqa: PLC0415
  from mechanisms.features import normalization, scattering  # noqa: PLC0415
  side, J = IMAGE_FEATURES[dataset]  # noqa: N806
  groups = scattering.num_channels(J, SCATTERING_L) // CHANNELS_PER_GROUP
  start = time.perf_counter()

  def features(rows):
    images = np.asarray(rows, np.float32).reshape(len(rows), side, side)
    out = scattering.transform(images, J=J, L=SCATTERING_L,
                               memory_budget=memory.resolve_budget("auto"))
    out = normalization.group_norm(out, num_groups=groups)
    return np.asarray(clipping.unit_rows(scattering.flatten(out)))

  x_train, x_test = features(prepared.x_train), features(prepared.x_test)
  facts = {"features": "scattering", "J": J, "L": SCATTERING_L,
           "num_groups": groups, "dim": int(x_train.shape[1]),
           "seconds": time.perf_counter() - start}
  common.progress(f"{dataset}: scattering features {x_train.shape[1]} per "
                  f"image (J={J}, L={SCATTERING_L}, {groups} groups; "
                  f"{facts['seconds']:.1f} s)")
  return dataclasses.replace(prepared, x_train=x_train, x_test=x_test), facts


def _load_feddpdr(dataset: str, s: Setting) -> FedData:
  from launch.experiments import feddpdr as fx  # noqa: PLC0415
  setup = FEDDPDR_SETUP[dataset]
  prepared = fx.prepare_data(dataset, data_dir=s.data_dirs[dataset], seed=0)
  facts = None
  if s.features_for(dataset):
    prepared, facts = _scattering(prepared, dataset)
  sizes = fx.resolve_sizes(
      available=len(prepared.y_train), participants=setup["participants"],
      n_per=setup["n_per_participant"], sizes=None)
  return FedData(prepared, sizes, setup, facts)


def _load_kernel(dataset: str, s: Setting) -> dict:
  from launch.experiments import kernel_compare as kx  # noqa: PLC0415
  return kx.prepare(LOADER_NAMES.get(dataset, dataset),
                    data_dir=s.data_dirs[dataset])


def _load_lvq(dataset: str, s: Setting) -> LVQData:
  import jax  # noqa: PLC0415

  from launch.experiments import dplvq  # noqa: PLC0415
  return LVQData(dplvq.prepare(dataset, s.data_dirs[dataset],
                               LVQ_RECIPE["bounds"]),
                 # dplvq.run's split key for seed 0.
                 jax.random.fold_in(jax.random.key(0), 0))


LOADERS = {"feddpdr": _load_feddpdr, "kernel": _load_kernel,
           "lvq": _load_lvq}


# -- the runners: run(data, run, setting) -> outcome ---------------------------

FEDDPDR_SCOPE = ("per participant, one row replaced (Non-Priv, FedDPDR, "
                 "DPML) or added/removed (Fed DP-SGD); the partition and the "
                 "row bounds are public")
LVQ_SCOPE = ("one trained model on its own training folds, one row "
             "added/removed; the min/max scaling read the data and is NOT "
             "covered by epsilon")
TUNED_SCOPE = ("the whole tuning (K trials, each a training run on the "
               "participants' fit rows and a noisy score on their held-out "
               "rows), one row added/removed; the partition, the split and "
               "the row bounds are public")


def _seeds(run: Run, s: Setting) -> int:
  return 1 if METHODS[run.method].deterministic else s.seeds


def _fed_outcome(rec: dict, data: FedData, keep) -> dict:
  settings = {k: rec.get(k) for k in keep if k in rec}
  settings["partition_seed"] = 0
  if data.features is not None:
    settings["features"] = data.features
  return {"accuracies": rec["accuracy_per_seed"], "privacy": rec["privacy"],
          "settings": settings, "privacy_scope": FEDDPDR_SCOPE}


def _feddpdr(data: FedData, run: Run, s: Setting) -> dict:
  """Non-Priv, FedDPDR-DPML, DPML: launch.feddpdr's runner."""
  from federated import feddpdr  # noqa: PLC0415
  from launch.experiments import feddpdr as fx  # noqa: PLC0415
  config = feddpdr.Config(
      mechanism=METHODS[run.method].option, epsilon=run.epsilon or 1.0,
      delta=s.delta, k=data.setup["k"], lam=data.setup["lam"],
      aggregation=_aggregation(run.method))
  rec = fx.run_one(data.prepared, sizes=data.sizes, seed=0,
                   seeds=_seeds(run, s), config=config)
  return _fed_outcome(rec, data, (
      "participants", "sizes", "k", "lam", "test_rows", "num_classes",
      "epsilon_pca", "epsilon_per_classifier", "sigma_pca", "iterations_max",
      "accuracy_per_participant", "aggregation", "secure_aggregation"))


_FEDSGD_KEEP = ("participants", "sizes", "test_rows", "num_classes",
                "fedsgd")


def _fedsgd(data: FedData, run: Run, s: Setting) -> dict:
  """Fed DP-SGD under the method's trust model, σ calibrated for ε by
  :func:`launch.experiments.fedsgd.make_plan` (for distributed noise by
  the library's accounting of the discrete shares, 16-bit messages)."""
  from launch.experiments import fedsgd as fx  # noqa: PLC0415
  rec = fx.run(
      data.prepared, sizes=data.sizes, seed=0, seeds=s.seeds,
      epsilon=run.epsilon, delta=s.delta,
      recipe=fx.FedSGDRecipe(trust=METHODS[run.method].option).check())
  return _fed_outcome(rec, data, _FEDSGD_KEEP)


def _ledger(plan):
  """A ledger holding ``plan``'s release."""
  from dpcore import accounting  # noqa: PLC0415
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  return ledger


def _hold_out(parts):
  """Each participant's last :data:`TUNE_VALIDATION_FRACTION` of its rows
  (rounded down) held out: ``((x, y, mask, n) of the fit rows, one
  participant a row as ``parts``; (x, y, n) of the pooled validation
  rows)``. The rows are in the partition's random order."""
  sizes = np.asarray(parts.sizes, np.int64)
  n_val = np.floor(TUNE_VALIDATION_FRACTION * sizes).astype(np.int64)
  n_fit = sizes - n_val
  if np.any(n_val < 1) or np.any(n_fit < 1):
    raise ValueError(f"--tune: participants of {sizes.tolist()} rows are "
                     f"too small to hold out validation rows.")
  cols = np.arange(np.shape(parts.mask)[1])[None, :]
  fit = cols < n_fit[:, None]
  val = (cols >= n_fit[:, None]) & (cols < sizes[:, None])
  x_all, y_all = np.asarray(parts.x), np.asarray(parts.y)
  width = int(n_fit.max())  # the fit rows lead each participant's rows
  x_fit = np.where(fit[..., None], x_all, 0).astype(x_all.dtype)[:, :width]
  y_fit = np.where(fit, y_all, 0).astype(np.int32)[:, :width]
  mask_fit = fit.astype(np.asarray(parts.mask).dtype)[:, :width]
  return (x_fit, y_fit, mask_fit, n_fit), (x_all[val], y_all[val], n_val)


def _tuning_record(results, s: Setting, *, target: float, candidates,
                   fit_rows, validation_rows) -> dict:
  """The record's ``tuning``: what each seed's tuning released and what
  the whole tuning cost (seed 0's guarantee; every seed's is the same)."""
  guarantee = results[0].guarantee
  return {
      **results[0].record(),
      "winner": [r.winner for r in results],
      "score": [r.score for r in results],
      "winning_settings": [None if r.winner is None
                           else s.candidates[r.winner] for r in results],
      "epsilon_per_trial_target": target,
      "epsilon_per_trial": guarantee.trial_epsilon,
      "epsilon": guarantee.epsilon, "delta": guarantee.delta,
      "score_epsilon": s.score_epsilon, "candidates": candidates,
      "fit_rows": fit_rows.tolist(),
      "validation_rows": validation_rows.tolist(),
      "validation": (f"each participant's last "
                     f"{TUNE_VALIDATION_FRACTION:g} of its training rows "
                     f"(rounded down; its rows are in the partition's "
                     f"random order); test rows unused until the released "
                     f"model is scored"),
      "scope": "one independent tuning per seed; privacy is that of one "
               "seed's tuning (seed 0's ledger)",
      "released_when_no_trial": "the zero start (K = 0)",
      "source": s.tune,
  }


def _tuned_fedsgd(data: FedData, run: Run, s: Setting) -> dict:
  """Fed DP-SGD (server noise) with its recipe chosen privately.

  Every participant holds out the last :data:`TUNE_VALIDATION_FRACTION`
  of its rows (in random order: the partition's shuffle) as validation
  rows; training uses the rest (the fit rows), the test rows only score
  the released model. Per seed, an independent :func:`dpcore.tuning.select`:
  K ~ the law, each trial trains a candidate drawn at random at the
  per-trial target ε and scores it by :func:`dpcore.tuning.noisy_accuracy`
  on the pooled validation rows; the best trial's model is released. One
  trial is ``tuning.disjoint(training, score)`` (disjoint rows), maximised
  over the candidates (``tuning.any_of``).
  """
  import jax  # noqa: PLC0415

  from dpcore import accounting, tuning  # noqa: PLC0415
  from federated import fedsgd, partition  # noqa: PLC0415
  from launch.experiments import fedsgd as fx  # noqa: PLC0415
  from mechanisms.erm import softmax  # noqa: PLC0415
  p, epsilon = data.prepared, run.epsilon
  parts = partition.partition_auto(  # the partition of fedsgd.run
      jax.random.fold_in(jax.random.key(0), 0), p.x_train, p.y_train,
      sizes=data.sizes, buckets=False)
  (x_fit, y_fit, mask_fit, n_fit), (x_val, y_val, n_val) = _hold_out(parts)
  rows = len(y_val)
  num_classes = len(p.classes)
  runs = []
  for cand in s.candidates:
    fed = fx.FedSGDRecipe(trust=options.Trust.SERVER, **cand)
    # A padded batch that may overflow is a departure of probability P
    # per trial, which the tuning pays as (1 + e^ε)·E[K]·P of its δ: at
    # the tuning's larger ε the recipe's 1e-9 does not fit δ = 1e-5.
    runs.append((fed, fedsgd.make_plan(
        n_fit, trust=fed.trust, sampling_rate=fed.rate(int(n_fit.sum())),
        epochs=fed.epochs, clip_norm=fed.clip_norm, epsilon=epsilon,
        delta=s.delta, overflow_probability=TUNE_OVERFLOW)))
  trials = tuning.scored_trials([plan for _, plan in runs],
                                score_epsilon=s.score_epsilon)
  facts = [{"candidate": i, "recipe": dataclasses.asdict(fed),
            "sampling_rate": plan.sampling_rate, "steps": plan.steps,
            "noise_multiplier": plan.noise_multiplier,
            "epsilon_trial": t.epsilon(s.delta)}
           for i, ((fed, plan), t) in enumerate(zip(runs, trials,
                                                    strict=True))]

  def trial(k, index):
    fed, plan = runs[index]
    k_train, k_score = jax.random.split(k)
    # The plan's numbers enter as float32 arrays: one program for every ε.
    args = (k_train[None], jax.tree.map(
        lambda v: np.asarray(v, np.float32), plan), x_fit, y_fit, mask_fit)
    params = jax.tree.map(lambda a: a[0], fx.fedsgd_program(
        args, learning_rate=fed.learning_rate, dim=x_fit.shape[-1],
        num_classes=num_classes, chunk=None)(*args))
    correct = round(float(softmax.accuracy(params, x_val, y_val)) * rows)
    return float(tuning.noisy_accuracy(k_score, correct, rows,
                                       epsilon=s.score_epsilon)), params

  privacy = tuning.any_of(
      *trials, description="one trial: a candidate drawn uniformly at "
      "random, trained on the fit rows, scored on the held-out rows")
  ledger = accounting.PrivacyLedger()
  keys = jax.random.split(jax.random.fold_in(jax.random.key(0), 4), s.seeds)
  results = [tuning.select(keys[i], list(range(len(runs))), trial,
                           count=s.count, privacy=privacy, delta=s.delta,
                           ledger=ledger if i == 0 else None,
                           label="compare_tuning")
             for i in range(s.seeds)]
  # K = 0 (Poisson only) releases nothing: the zero start stands in.
  released = [softmax.initial_params(p.x_train.shape[1], num_classes)
              if r.output is None else r.output for r in results]
  tuned = _tuning_record(results, s, target=epsilon, candidates=facts,
                         fit_rows=n_fit, validation_rows=n_val)
  return {
      "accuracies": [float(softmax.accuracy(w, p.x_test, p.y_test))
                     for w in released],
      "privacy": ledger.report(
          s.delta, nominal_epsilon=epsilon,
          nominal_note="each trial's target ε (its DP-SGD noise was "
                       "calibrated for it); the guarantee covers the whole "
                       "tuning"),
      "settings": {"participants": len(data.sizes),
                   "sizes": list(map(int, data.sizes)),
                   "test_rows": len(p.y_test), "num_classes": num_classes,
                   "partition_seed": 0,
                   **({} if data.features is None
                      else {"features": data.features})},
      "privacy_scope": TUNED_SCOPE, "tuning": tuned}


def _kernel(data: dict, run: Run, s: Setting) -> dict:
  """A DPWSS-family method: launch.kernel_compare's runner."""
  from launch.experiments import kernel_compare as kx  # noqa: PLC0415
  rec = kx.run_one(dataset=LOADER_NAMES.get(run.dataset, run.dataset),
                   data=data, method=run.method,
                   epsilon=0.0 if run.epsilon is None else run.epsilon,
                   delta=s.delta, seeds=_seeds(run, s),
                   test_fraction=kx.TEST_FRACTION, split_seed=kx.SPLIT_SEED)
  keep = ("classes", "scaling", "scaling_reads_data", "test_fraction",
          "split_seed", "n_train", "n_test", "neighbouring",
          "model_is_private", "noise_multiplier", "steps", "iterations")
  return {"accuracies": rec["accuracy_per_seed"], "privacy": rec["privacy"],
          "settings": {k: rec[k] for k in keep if k in rec},
          "scaling_reads_data": rec["scaling_reads_data"],
          "privacy_scope": rec["privacy_scope"]}


def _lvq(data: LVQData, run: Run, s: Setting) -> dict:
  """DP-GLVQ, DP-GMLVQ: launch.dplvq's runner, one CV repeat per seed."""
  import jax  # noqa: PLC0415

  from launch.experiments import dplvq  # noqa: PLC0415
  r = LVQ_RECIPE
  setting = dplvq.Setting(
      dataset=run.dataset, data_dir=s.data_dirs[run.dataset],
      bounds=r["bounds"],
      model=METHODS[run.method].option, trainer=options.LVQTrainer.DPSGD,
      epsilon=run.epsilon, delta=s.delta, sampling_rate=r["q"],
      clip_norm=r["clip"], epochs=r["epochs"],
      learning_rate=r["learning_rate"], folds=r["folds"], repeats=s.seeds,
      train_on=vocabulary.TrainOn.OTHER_FOLDS).check()
  rec = dplvq.run(jax.random.key(0), data.prepared, setting)
  errors = np.asarray(rec["errors"]).reshape(s.seeds, r["folds"])
  details = {k: rec[k] for k in ("dpsgd", "n_train", "n_test", "steps",
                                 "max_batch", "overflow_steps", "scaling")}
  details["accuracy_per_run"] = (1.0 - errors.ravel()).tolist()
  return {"accuracies": (1.0 - errors.mean(axis=1)).tolist(),
          "privacy": rec["privacy"], "settings": details,
          "scaling_reads_data": True, "privacy_scope": LVQ_SCOPE}


@functools.cache
def _softmax_program(dim: int, num_classes: int, learning_rate: float):
  """The folds' training and scoring, vmapped over (key, train, test) rows.

  The plan is an argument (a pytree whose leaves are σ, C and ε), so one
  compiled program serves every ε of a data set.
  """
  import jax  # noqa: PLC0415
  import optax  # noqa: PLC0415

  from dpcore import trainer  # noqa: PLC0415
  from mechanisms.erm import softmax  # noqa: PLC0415
  optimizer = optax.sgd(learning_rate)

  def one(key, plan, xs, ys, tr, te):
    res = trainer.train(key, plan, softmax.loss,
                        softmax.initial_params(dim, num_classes),
                        (xs[tr], ys[tr]), optimizer)
    return softmax.accuracy(res.params, xs[te], ys[te]), res.overflow_steps

  return jax.jit(jax.vmap(one, in_axes=(0, None, None, None, 0, 0)))


def _softmax(data: LVQData, run: Run, s: Setting) -> dict:
  """Central DP-SGD softmax on Segment's folds (σ = 0: the ceiling)."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415

  from dpcore import accounting, clipping, trainer  # noqa: PLC0415
  from launch.experiments import lvq_eval  # noqa: PLC0415
  p, private = data.prepared, run.epsilon is not None
  x = np.asarray(clipping.unit_rows(p.x), np.float32)
  train_idx, test_idx = lvq_eval.cv_splits(
      data.split_key, x.shape[0], folds=LVQ_FOLDS, repeats=s.seeds,
      train_on_one_fold=False)
  n = train_idx.shape[1]
  q = min(0.05, 256.0 / n)  # an expected batch of at most 256 rows
  plan = trainer.make_plan(
      n, sampling_rate=q, epochs=SOFTMAX_RECIPE["epochs"],
      clip_norm=SOFTMAX_RECIPE["clip_norm"], epsilon=run.epsilon,
      delta=s.delta, noise_multiplier=None if private else 0.0)
  privacy = (_ledger(plan).report(s.delta) if private
             else accounting.no_guarantee_record(accounting.NON_PRIVATE))
  program = _softmax_program(x.shape[1], p.num_classes,
                             SOFTMAX_RECIPE["learning_rate"])
  root = jax.random.fold_in(jax.random.key(0), zlib.crc32(
      f"{run.dataset}/{run.method}/{run.epsilon}".encode()))
  keys = jax.random.split(root, train_idx.shape[0])
  acc, overflow = jax.block_until_ready(program(
      keys, plan, jnp.asarray(x), jnp.asarray(p.y, jnp.int32),
      jnp.asarray(train_idx), jnp.asarray(test_idx)))
  acc = np.asarray(acc, np.float64).reshape(s.seeds, LVQ_FOLDS)
  details = {"n_train": int(n), "n_test": int(test_idx.shape[1]),
             "sampling_rate": q, "steps": plan.steps,
             "noise_multiplier": plan.noise_multiplier,
             "max_batch": plan.max_batch,
             "overflow_steps": int(np.sum(overflow)), "scaling": p.scaling,
             "accuracy_per_run": acc.ravel().tolist()}
  return {"accuracies": acc.mean(axis=1).tolist(), "privacy": privacy,
          "settings": details, "scaling_reads_data": True,
          "privacy_scope": LVQ_SCOPE}


# -- the recipes and the method table ------------------------------------------


def _aggregation(method: str) -> str:
  """How the FedDPDR pipeline of ``method`` aggregates its PCA bases."""
  return FEDDPDR_AGGREGATION.get(method, options.Aggregation.SUBSPACE)


def _pipeline_recipe(dataset: str, method: str) -> dict:
  from federated import feddpdr  # noqa: PLC0415
  setup = FEDDPDR_SETUP[dataset]
  reduces = feddpdr.describe(METHODS[method].option).reduces
  return {**setup, "k": setup["k"] if reduces
          else None, "loss": "huber",
          "aggregation": str(_aggregation(method)),
          "model_aggregation": "weighted", "calibration": "analytic",
          "neighbouring": "replace", "pca_fraction": 0.5,
          "budget_per_classifier": False}


def _fedsgd_recipe(dataset: str, method: str) -> dict:
  from launch.experiments import fedsgd as fx  # noqa: PLC0415
  setup = FEDDPDR_SETUP[dataset]
  fed = fx.FedSGDRecipe(trust=METHODS[method].option)
  return {**dataclasses.asdict(fed), "sampling_rate": "min(0.05, 256/N)",
          "participants": setup["participants"],
          "n_per_participant": setup["n_per_participant"]}


def _kernel_recipe(dataset: str, method: str) -> dict:
  from launch.experiments import kernel_compare as kx  # noqa: PLC0415
  return dict(kx.RECIPE[method])


def recipe(dataset: str, method: str) -> dict:
  """The fixed public recipe of ``method`` on ``dataset`` (for records)."""
  return METHODS[method].recipe(dataset, method)


class Method(NamedTuple):
  """One method: its family of data sets, its label in tables and
  figures, its runner ``run(data, run, setting) -> outcome`` and its
  public recipe ``recipe(dataset, method) -> dict``; its guarantee
  (``"dp"``: the ledger's ε holds; ``"nominal"``: a paper's ε, none;
  ``"none"``: run once, ε null), whether one fit stands for every seed,
  the option its runner reads (a trust model, an LVQ model), and the
  data sets it runs on (None: every set of its family)."""
  family: str
  label: str
  run: Callable[..., dict]
  recipe: Callable[[str, str], dict]
  guarantee: str = "dp"
  deterministic: bool = False
  option: Any = None
  datasets: tuple[str, ...] | None = None


_Mech, _Trust, _Model = (options.FedDPDRMechanism, options.Trust,
                         options.LVQModel)
_LVQ_RECIPE = lambda dataset, method: dict(LVQ_RECIPE)  # noqa: E731
_SOFTMAX_RECIPE = lambda dataset, method: {  # noqa: E731
    **SOFTMAX_RECIPE, "folds": LVQ_FOLDS, "bounds": "data_minmax"}
METHODS = {
    "nonpriv": Method("feddpdr", "Non-Priv (FedDPDR pipeline, no noise)",
                      _feddpdr, _pipeline_recipe, "none", True,
                      _Mech.NONPRIV),
    "feddpdr": Method("feddpdr", "FedDPDR-DPML (paper)", _feddpdr,
                      _pipeline_recipe, option=_Mech.FEDDPDR),
    "dpml": Method("feddpdr", "DPML (paper's baseline)", _feddpdr,
                   _pipeline_recipe, option=_Mech.DPML),
    "feddpdr_moments": Method(
        "feddpdr", "FedDPDR-DPML, moments aggregation (local noise)",
        _feddpdr, _pipeline_recipe, option=_Mech.FEDDPDR,
        datasets=("digits",)),
    "feddpdr_secure_moments": Method(
        "feddpdr", "FedDPDR-DPML, secure moments (distributed noise)",
        _feddpdr, _pipeline_recipe, option=_Mech.FEDDPDR,
        datasets=("digits",)),
    "fedsgd_server": Method("feddpdr", "Fed DP-SGD, server noise", _fedsgd,
                            _fedsgd_recipe, option=_Trust.SERVER),
    "fedsgd_local": Method("feddpdr", "Fed DP-SGD, local noise", _fedsgd,
                           _fedsgd_recipe, option=_Trust.LOCAL),
    "fedsgd_distributed": Method(
        "feddpdr", "Fed DP-SGD, distributed noise (secure aggregation)",
        _fedsgd, _fedsgd_recipe,
        option=_Trust.DISTRIBUTED),
    "libsvm": Method("kernel", "LIBSVM RBF (non-private)", _kernel,
                     _kernel_recipe, "none", True),
    "wss2": Method("kernel", "WSS2 SMO, RBF (non-private)", _kernel,
                   _kernel_recipe, "none", True),
    "dpwss_paper": Method("kernel", "DPWSS (paper)", _kernel, _kernel_recipe,
                          "nominal"),
    "linear_output_perturbation": Method(
        "kernel", "linear SVM + output perturbation", _kernel,
        _kernel_recipe),
    "rff_dpsgd": Method("kernel", "RFF + DP-SGD", _kernel, _kernel_recipe),
    "rff_output_perturbation": Method(
        "kernel", "RFF + output perturbation", _kernel, _kernel_recipe),
    "dp_glvq": Method("lvq", "DP-GLVQ (paper)", _lvq, _LVQ_RECIPE,
                      option=_Model.GLVQ),
    "dp_gmlvq": Method("lvq", "DP-GMLVQ (paper)", _lvq, _LVQ_RECIPE,
                       option=_Model.GMLVQ),
    "dpsgd_softmax": Method("lvq", "DP-SGD softmax (central)", _softmax,
                            _SOFTMAX_RECIPE),
    "softmax_nonpriv": Method("lvq", "softmax, no noise (non-private)",
                              _softmax, _SOFTMAX_RECIPE, "none"),
}
"""Every method, in the tables' order within its family."""


# -- the sweep -----------------------------------------------------------------


def _summary(accuracies) -> dict:
  acc = np.asarray(accuracies, np.float64)
  return {"accuracy_mean": float(acc.mean()),
          "accuracy_sd": float(acc.std(ddof=1)) if acc.size > 1 else 0.0,
          "accuracy_per_seed": acc.tolist()}


def _record(data, run: Run, s: Setting) -> dict:
  m, start = METHODS[run.method], time.perf_counter()
  key = s.key(run)
  outcome = (_tuned_fedsgd if key["tuning_id"] else m.run)(data, run, s)
  return {"dataset": run.dataset, "method": run.method, "label": m.label,
          "family": m.family, "epsilon": run.epsilon, "delta": s.delta,
          "seeds": s.seeds, **_summary(outcome.pop("accuracies")),
          "guarantee": m.guarantee, "privacy": outcome.pop("privacy"),
          "recipe": recipe(run.dataset, run.method),
          "settings": outcome.pop("settings"),
          "seconds": time.perf_counter() - start,
          "tuning_id": key["tuning_id"], "features": key["features"],
          **outcome}


def run(s: Setting, *, out: str | None = None, emit=None,
        progress=common.progress) -> list[dict]:
  """Runs every record of the checked setting ``s`` that ``out`` lacks.

  A data set is loaded only when one of its runs is missing. Each new
  record is emitted (``emit``, default :func:`launch.common.emit_record`)
  as soon as it is done.

  Returns:
    The new records.
  """
  emit = emit or common.emit_record
  done = common.done_keys(out, KEY_FIELDS) if out else set()
  records = []
  for dataset in s.plan:
    mine = [r for r in s.runs() if r.dataset == dataset]
    todo = [r for r in mine
            if common.record_key(s.key(r), KEY_FIELDS) not in done]
    if len(todo) < len(mine):
      progress(f"{dataset}: skipping {len(mine) - len(todo)} finished "
               f"run(s) found in {out}")
    if not todo:
      continue
    family = DATASETS[dataset]
    progress(f"{dataset}: loading ({family} family)")
    data = LOADERS[family](dataset, s)
    for i, r in enumerate(todo, 1):
      at = "" if r.epsilon is None else f" ε={r.epsilon:g}"
      progress(f"{dataset} {i}/{len(todo)}: {METHODS[r.method].label}{at}")
      rec = _record(data, r, s)
      emit(rec, out)
      records.append(rec)
      if rec.get("tuning"):
        t = rec["tuning"]
        progress(f"{dataset}: {r.method}{at}: tuned, winners "
                 f"{t['winner']}, one trial ε {t['epsilon_per_trial']:.3g}, "
                 f"the tuning ε {t['epsilon']:.3g}")
      holds = rec["privacy"]["epsilon"]
      progress(f"{dataset}: {r.method}{at}: accuracy "
               f"{rec['accuracy_mean']:.3f} ± {rec['accuracy_sd']:.3f}, ε "
               f"that holds {'none' if holds is None else f'{holds:.3g}'} "
               f"({rec['seconds']:.0f} s)")
  return records
