"""Experiment logic of ``launch.compare`` (no flags; importable anywhere).

Accuracy against ε for every method the library has, on every data set it
compares them on, each method through its own runner and its own ledger:

* ``digits``, ``mnist``, ``fashion_mnist`` (the FedDPDR family): Non-Priv,
  FedDPDR-DPML and DPML (:func:`launch.experiments.feddpdr.run_one`), and
  federated DP-SGD with server noise and with local noise
  (:func:`launch.experiments.feddpdr.run_fedsgd`), on the same
  participants.
* ``heart``, ``breast_cancer``, ``digits38`` (digits 3 vs 8; the DPWSS
  family): every method of :mod:`launch.experiments.kernel_compare`.
* ``segment`` (the DP-LVQ family): DP-GLVQ and DP-GMLVQ
  (:func:`launch.experiments.dplvq.run_setting`) and a central DP-SGD
  softmax regression (:mod:`dpcore.trainer` on the layered fast path), with
  the same softmax trained without noise as the ceiling, on the same
  cross-validation folds.

Every method has one public recipe (:data:`RECIPES`): the defaults of the
runner it comes from, fixed before any result here was seen. One record per
(data set, method, ε): accuracy mean, sd (over seeds, ``ddof=1``) and the
per-seed list, the privacy record of one run (the ε that holds, from the
method's ledger), the recipe, the settings and the seconds. A method
without a guarantee (a non-private ceiling, or the DPWSS paper's selection,
whose ε is nominal) is run at the ε columns it needs: once for a
non-private one (``epsilon`` null), at every ε for a nominal one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import zlib
from typing import Any

import numpy as np

from launch import common

FAMILIES = {
    "digits": "feddpdr", "mnist": "feddpdr", "fashion_mnist": "feddpdr",
    "heart": "kernel", "breast_cancer": "kernel", "digits38": "kernel",
    "segment": "lvq",
}
DATASETS = tuple(FAMILIES)
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DELTA = 1e-5
SEEDS = 3
FEDDPDR_METHODS = ("nonpriv", "feddpdr", "dpml", "fedsgd_server",
                   "fedsgd_local")
KERNEL_METHODS = ("libsvm", "wss2", "dpwss_paper",
                  "linear_output_perturbation", "rff_dpsgd",
                  "rff_output_perturbation")
LVQ_METHODS = ("dp_glvq", "dp_gmlvq", "dpsgd_softmax", "softmax_nonpriv")
METHODS_BY_FAMILY = {"feddpdr": FEDDPDR_METHODS, "kernel": KERNEL_METHODS,
                     "lvq": LVQ_METHODS}
METHODS = FEDDPDR_METHODS + KERNEL_METHODS + LVQ_METHODS
# Methods that claim no guarantee: run once (ε null), drawn flat.
NON_PRIVATE = ("nonpriv", "libsvm", "wss2", "softmax_nonpriv")
# Methods whose ε is a paper's nominal figure, with no guarantee.
NOMINAL = ("dpwss_paper",)
# Deterministic given the data: one run stands for every seed.
DETERMINISTIC = ("nonpriv", "libsvm", "wss2")
KEY_FIELDS = ("dataset", "method", "epsilon", "delta", "seeds",
              "tuning_id")
# Methods --tune can select a recipe for, and the recipe fields a
# candidate may set (the rest keep the method's recipe).
TUNABLE = {"fedsgd_server": ("sampling_rate", "epochs", "clip_norm",
                             "learning_rate")}
# Each participant holds out this share of its training rows (rounded
# down) as validation rows of the tuning's private score.
TUNE_VALIDATION_FRACTION = 0.2
# P(any padded batch of a tuning trial overflows): see _tuned_fedsgd.
TUNE_OVERFLOW = 1e-15

LABELS = {
    "nonpriv": "Non-Priv (FedDPDR pipeline, no noise)",
    "feddpdr": "FedDPDR-DPML (paper)",
    "dpml": "DPML (paper's baseline)",
    "fedsgd_server": "Fed DP-SGD, server noise",
    "fedsgd_local": "Fed DP-SGD, local noise",
    "libsvm": "LIBSVM RBF (non-private)",
    "wss2": "WSS2 SMO, RBF (non-private)",
    "dpwss_paper": "DPWSS (paper)",
    "linear_output_perturbation": "linear SVM + output perturbation",
    "rff_dpsgd": "RFF + DP-SGD",
    "rff_output_perturbation": "RFF + output perturbation",
    "dp_glvq": "DP-GLVQ (paper)",
    "dp_gmlvq": "DP-GMLVQ (paper)",
    "dpsgd_softmax": "DP-SGD softmax (central)",
    "softmax_nonpriv": "softmax, no noise (non-private)",
}

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


def recipe(dataset: str, method: str) -> dict:
  """The fixed public recipe of ``method`` on ``dataset`` (for records)."""
  family = FAMILIES[dataset]
  if family == "feddpdr":
    setup = dict(FEDDPDR_SETUP[dataset])
    if method.startswith("fedsgd"):
      from launch.experiments import feddpdr as fx  # noqa: PLC0415
      fed = fx.FedSGDRecipe(trust=method.split("_")[1])
      return {**dataclasses.asdict(fed), "sampling_rate":
              "min(0.05, 256/N)", **{k: setup[k] for k in (
                  "participants", "n_per_participant")}}
    out = {**setup, "loss": "huber", "aggregation": "subspace",
           "model_aggregation": "weighted", "calibration": "analytic",
           "neighbouring": "replace", "pca_fraction": 0.5,
           "budget_per_classifier": False}
    if method == "dpml":
      out["k"] = None
    return out
  if family == "kernel":
    from launch.experiments import kernel_compare  # noqa: PLC0415
    return dict(kernel_compare.RECIPE[method])
  if method in ("dp_glvq", "dp_gmlvq"):
    return dict(LVQ_RECIPE)
  return {**SOFTMAX_RECIPE, "folds": LVQ_FOLDS, "bounds": "data_minmax"}


def plan_methods(datasets, methods) -> dict:
  """{data set: its methods, in order}: the family's, filtered by
  ``methods`` (None: all)."""
  return {d: [m for m in METHODS_BY_FAMILY[FAMILIES[d]]
              if methods is None or m in methods] for d in datasets}


def check_settings(*, datasets, methods, epsilons, delta, seeds) -> dict:
  """Refuses bad settings before any data is read; returns the plan.

  Every message names the flag and the fix.
  """
  # The library's validators (imported here: this module stays JAX-free
  # on import, for the script's --help).
  from dpcore import validation  # noqa: PLC0415

  if not datasets:
    raise ValueError(f"--datasets is empty; name one or more of "
                     f"{', '.join(DATASETS)}.")
  unknown = [d for d in datasets if d not in FAMILIES]
  if unknown:
    raise ValueError(f"--datasets: unknown {', '.join(map(repr, unknown))}; "
                     f"choose from {', '.join(DATASETS)}.")
  if len(set(datasets)) != len(datasets):
    raise ValueError(f"--datasets={','.join(datasets)} names a set twice.")
  if methods is not None:
    if not methods:
      raise ValueError(f"--methods is empty; name one or more of "
                       f"{', '.join(METHODS)}, or leave it out for all.")
    bad = [m for m in methods if m not in METHODS]
    if bad:
      raise ValueError(f"--methods: unknown {', '.join(map(repr, bad))}; "
                       f"choose from {', '.join(METHODS)}.")
  if not epsilons:
    raise ValueError("--epsilons is empty; give one or more ε > 0, e.g. "
                     "--epsilons=0.5,1,2,4,8.")
  for eps in epsilons:
    validation.check_epsilon(eps, "--epsilons")
  if len(set(epsilons)) != len(epsilons):
    raise ValueError(f"--epsilons={','.join(f'{e:g}' for e in epsilons)} "
                     f"names an ε twice.")
  validation.check_delta(delta, "--delta")
  validation.check_positive_int(seeds, "--seeds")
  plan = plan_methods(datasets, methods)
  if not any(plan.values()):
    raise ValueError(
        f"--methods={','.join(methods)} runs nothing on "
        f"--datasets={','.join(datasets)}: "
        + "; ".join(f"{d} takes {', '.join(METHODS_BY_FAMILY[FAMILIES[d]])}"
                    for d in datasets))
  return plan


def loader_name(dataset: str) -> str:
  return "digits" if dataset == "digits38" else dataset


def resolve_data_dir(dataset: str, data_dir: str | None) -> str | None:
  """Where ``dataset``'s files are: ``data_dir`` if they are there, else
  the loaders' own lookup; raises the loader's message if neither has
  them (cheap: finds the files without reading them)."""
  from launch.data import loaders  # noqa: PLC0415
  name = loader_name(dataset)
  if data_dir is not None:
    try:
      loaders.check_dataset(name, data_dir=data_dir)
      return data_dir
    except FileNotFoundError as err:
      first = err
    try:
      loaders.check_dataset(name, data_dir=None)
      return None
    except FileNotFoundError:
      raise first from None
  loaders.check_dataset(name, data_dir=None)
  return None


def grid(plan: dict, epsilons) -> list[tuple]:
  """(data set, method, ε or None) of every record, in run order."""
  out = []
  for dataset, methods in plan.items():
    for method in methods:
      if method in NON_PRIVATE:
        out.append((dataset, method, None))
      else:
        out += [(dataset, method, float(e)) for e in epsilons]
  return out


def probe(dataset, method, epsilon, *, delta, seeds,
          tuning_id=None) -> dict:
  return {"dataset": dataset, "method": method, "epsilon": epsilon,
          "delta": delta, "seeds": seeds, "tuning_id": tuning_id}


# -- private hyperparameter selection (--tune) ---------------------------------


@dataclasses.dataclass(frozen=True)
class TuneOptions:
  """A checked --tune: the method, its candidates and the law of K."""
  method: str
  candidates: tuple
  count: Any  # dpcore.tuning.TrialCount
  score_epsilon: float
  source: str

  @property
  def tuning_id(self) -> str:
    """What identifies the tuning in a record (and for resuming)."""
    return json.dumps({"candidates": list(self.candidates),
                       "distribution": self.count.distribution,
                       "expected_trials": round(self.count.expected, 9),
                       "score_epsilon": self.score_epsilon},
                      sort_keys=True)

  def label(self) -> str:
    return (f"tuned, K ~ {self.count.distribution} "
            f"E[K]={self.count.expected:g}")

  def tunes(self, dataset: str, method: str) -> bool:
    return method == self.method and FAMILIES[dataset] == "feddpdr"


def _number(value) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))


def check_tuning(path: str, *, expected_trials: float, distribution: str,
                 score_epsilon: float, plan: dict,
                 method: str = "fedsgd_server") -> TuneOptions:
  """Reads and checks --tune's candidates and the law of K, before any work.

  Every message names the flag and the fix.
  """
  from dpcore import tuning  # noqa: PLC0415
  fields = TUNABLE[method]
  try:
    with open(os.path.expanduser(path), encoding="utf-8") as f:
      text = f.read()
  except OSError as err:
    raise ValueError(f"--tune={path!r}: cannot read it "
                     f"({err.strerror or err}); give a JSON file holding "
                     f"a list of candidate recipes.") from None
  try:
    candidates = json.loads(text)
  except ValueError as err:
    raise ValueError(f"--tune={path!r} is not JSON ({err}); give a list "
                     f"of candidate recipes, e.g. "
                     f'[{{"learning_rate": 1}}, {{"learning_rate": 4}}].'
                     ) from None
  if not isinstance(candidates, list) or not candidates:
    raise ValueError(f"--tune={path!r} must hold a non-empty JSON list of "
                     f"candidate recipes (objects over "
                     f"{', '.join(fields)}).")
  for i, cand in enumerate(candidates):
    if not isinstance(cand, dict):
      raise ValueError(f"--tune={path!r}: candidate {i} is not an object; "
                       f"give e.g. {{\"learning_rate\": 1}}.")
    unknown = [k for k in cand if k not in fields]
    if unknown:
      raise ValueError(f"--tune={path!r}: candidate {i} has unknown "
                       f"field(s) {', '.join(map(repr, unknown))}; "
                       f"{method} takes {', '.join(fields)}.")
    for k, v in cand.items():
      high = 1.0 if k == "sampling_rate" else math.inf
      if not (_number(v) and 0 < v <= high):
        rule = "in (0, 1]" if k == "sampling_rate" else "finite and > 0"
        raise ValueError(f"--tune={path!r}: candidate {i} has {k}={v!r}; "
                         f"it must be a number {rule}.")
  _check_candidate_counts(path, candidates)
  if not (_number(expected_trials) and expected_trials > 0):
    raise ValueError(f"--tune_expected_trials={expected_trials!r}: give "
                     f"an expected number of trials > 1, e.g. 10.")
  try:
    count = tuning.trial_count(distribution, float(expected_trials))
  except ValueError as err:
    raise ValueError(f"--tune_distribution={distribution!r}, "
                     f"--tune_expected_trials={expected_trials!r}: {err}"
                     ) from None
  if not (_number(score_epsilon) and score_epsilon > 0):
    raise ValueError(f"--tune_score_epsilon={score_epsilon!r}: give the "
                     f"ε of each trial's private score, a number > 0 "
                     f"(e.g. 0.5).")
  if not any(method in m and FAMILIES[d] == "feddpdr"
             for d, m in plan.items()):
    raise ValueError(f"--tune selects a recipe for {method}, which this "
                     f"run does not include; add it to --methods, on "
                     f"digits, mnist or fashion_mnist.")
  return TuneOptions(method, tuple(candidates), count, float(score_epsilon),
                     path)


def _check_candidate_counts(path: str, candidates: list) -> None:
  """Every candidate's step count fits the int32 step counter, checked
  for the whole file before any data is read or any trial run.

  A candidate without a sampling_rate takes the recipe's
  min(0.05, 256/N), which is at most ``rate(1)`` whatever N: its steps
  are at least E / rate(1), so a candidate refused here is refused for
  every data set (the plans of all candidates, with the data's exact
  rate, are then built before the first trial as well).
  """
  from dpcore import dpsgd  # noqa: PLC0415
  from launch.experiments import feddpdr as fx  # noqa: PLC0415
  for i, cand in enumerate(candidates):
    recipe = fx.FedSGDRecipe(trust="server", **cand)
    try:
      dpsgd.num_steps(epochs=recipe.epochs, sampling_rate=recipe.rate(1))
    except ValueError as err:
      at = ("" if "sampling_rate" in cand else
            " (at the recipe's largest sampling_rate)")
      raise ValueError(f"--tune={path!r}: candidate {i}{at}: {err}"
                       ) from None


def guarantee_kind(method: str) -> str:
  """``"dp"`` (the ledger's ε holds), ``"nominal"`` or ``"none"``."""
  if method in NON_PRIVATE:
    return "none"
  if method in NOMINAL:
    return "nominal"
  return "dp"


def summary(accuracies) -> dict:
  acc = np.asarray(accuracies, np.float64)
  return {"accuracy_mean": float(acc.mean()),
          "accuracy_sd": float(acc.std(ddof=1)) if acc.size > 1 else 0.0,
          "accuracy_per_seed": acc.tolist()}


def _record(dataset, method, epsilon, *, delta, seeds, accuracies, privacy,
            settings, seconds, **extra) -> dict:
  return {
      "dataset": dataset, "method": method, "label": LABELS[method],
      "family": FAMILIES[dataset], "epsilon": epsilon, "delta": delta,
      "seeds": seeds, **summary(accuracies),
      "guarantee": guarantee_kind(method), "privacy": privacy,
      "recipe": recipe(dataset, method), "settings": settings,
      "seconds": seconds, "tuning_id": None, **extra}


# -- the FedDPDR family --------------------------------------------------------


class FedDPDRFamily:
  """One data set's participants; runs Non-Priv, FedDPDR, DPML, Fed DP-SGD."""

  def __init__(self, dataset: str, data_dir: str | None):
    from launch.experiments import feddpdr as fx  # noqa: PLC0415
    self.fx = fx
    self.dataset = dataset
    self.setup = FEDDPDR_SETUP[dataset]
    self.prepared = fx.prepare_data(dataset, data_dir=data_dir, seed=0)
    self.sizes = fx.resolve_sizes(
        available=len(self.prepared.y_train),
        participants=self.setup["participants"],
        n_per=self.setup["n_per_participant"], sizes=None)

  def run(self, method: str, epsilon, *, delta: float, seeds: int,
          tune: TuneOptions | None = None) -> dict:
    from federated import feddpdr  # noqa: PLC0415
    fx, start = self.fx, time.perf_counter()
    if tune is not None and tune.tunes(self.dataset, method):
      accuracies, privacy, settings, tuned = self._tuned_fedsgd(
          epsilon, delta=delta, seeds=seeds, tune=tune)
      rec = _record(self.dataset, method, epsilon, delta=delta, seeds=seeds,
                    accuracies=accuracies, privacy=privacy,
                    settings=settings, seconds=time.perf_counter() - start,
                    privacy_scope=(
                        "the whole tuning (K trials, each a training run "
                        "on the participants' fit rows and a noisy score "
                        "on their held-out rows), one row added/removed; "
                        "the partition, the split and the row bounds are "
                        "public"))
      rec["tuning_id"] = tune.tuning_id
      rec["tuning"] = tuned
      return rec
    if method.startswith("fedsgd"):
      rec = fx.run_fedsgd(
          self.prepared, sizes=self.sizes, seed=0, seeds=seeds,
          epsilon=epsilon, delta=delta,
          recipe=fx.FedSGDRecipe(trust=method.split("_")[1]).check())
      keep = ("participants", "sizes", "test_rows", "num_classes", "fedsgd")
    else:
      config = feddpdr.Config(
          mechanism=method, epsilon=epsilon or 1.0, delta=delta,
          k=self.setup["k"], lam=self.setup["lam"])
      fx.check_against_data(config, d=self.prepared.x_train.shape[1],
                            num_classes=len(self.prepared.classes),
                            sizes=self.sizes)
      rec = fx.run_one(self.prepared, sizes=self.sizes, seed=0,
                       seeds=1 if method in DETERMINISTIC else seeds,
                       config=config)
      keep = ("participants", "sizes", "k", "lam", "test_rows",
              "num_classes", "epsilon_pca", "epsilon_per_classifier",
              "sigma_pca", "iterations_max", "accuracy_per_participant")
    settings = {k: rec.get(k) for k in keep if k in rec}
    settings["partition_seed"] = 0
    return _record(self.dataset, method, epsilon, delta=delta, seeds=seeds,
                   accuracies=rec["accuracy_per_seed"],
                   privacy=rec["privacy"], settings=settings,
                   seconds=time.perf_counter() - start,
                   privacy_scope=(
                       "per participant, one row replaced (Non-Priv, "
                       "FedDPDR, DPML) or added/removed (Fed DP-SGD); "
                       "the partition and the row bounds are public"))


  def _tuned_fedsgd(self, epsilon, *, delta, seeds, tune):
    """Fed DP-SGD (server noise) with its recipe chosen privately.

    Every participant holds out the last TUNE_VALIDATION_FRACTION of its
    rows (its rows are in random order: the partition's shuffle) as
    validation rows; training uses the rest (the fit rows), the test rows
    only score the released model. Per seed, an independent tuning
    (:func:`dpcore.tuning.select`): K ~ the law, each trial trains a
    candidate drawn at random at the per-trial target ``epsilon`` and
    scores it by :func:`dpcore.tuning.noisy_accuracy` on the pooled
    validation rows; the best trial's model is released.
    """
    import jax  # noqa: PLC0415

    from dpcore import accounting, tuning  # noqa: PLC0415
    from federated import fedsgd, partition  # noqa: PLC0415
    fx, p = self.fx, self.prepared
    key = jax.random.key(0)
    parts = partition.partition_auto(
        jax.random.fold_in(key, 0), p.x_train, p.y_train, sizes=self.sizes,
        buckets=False)
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
    x_val, y_val = x_all[val], y_all[val]
    validation_rows = int(val.sum())
    d, num_classes = p.x_train.shape[1], len(p.classes)
    score = tuning.score_privacy(tune.score_epsilon)
    runs, trials, facts = [], [], []
    for i, cand in enumerate(tune.candidates):
      recipe = fx.FedSGDRecipe(trust="server", **cand)
      q = recipe.rate(int(n_fit.sum()))
      steps = fx.dpsgd_steps(q, recipe.epochs)
      sigma = fx.calibrated_sigma(epsilon=epsilon, delta=delta,
                                  sampling_rate=q, steps=steps)
      # A padded batch that may overflow is a departure of probability P
      # per trial, which the tuning pays as (1 + e^ε)·E[K]·P of its δ: at
      # the tuning's larger ε the recipe's 1e-9 does not fit δ = 1e-5.
      plan = fedsgd.make_plan(n_fit, trust="server", sampling_rate=q,
                              steps=steps, clip_norm=recipe.clip_norm,
                              noise_multiplier=sigma, delta=delta,
                              overflow_probability=TUNE_OVERFLOW)
      ledger = accounting.PrivacyLedger()
      plan.record(ledger)
      train = tuning.trial_privacy(ledger,
                                   description=f"candidate {i} training")
      trials.append(tuning.disjoint(train, score,
                                    description=f"candidate {i}"))
      traced = jax.tree.map(lambda v: np.asarray(v, np.float32), plan)
      runs.append((recipe, traced))
      facts.append({"candidate": i, "recipe": dataclasses.asdict(recipe),
                    "sampling_rate": q, "steps": steps,
                    "noise_multiplier": sigma,
                    "epsilon_trial": trials[-1].epsilon(delta)})
    trial_privacy = tuning.any_of(
        *trials, description="one trial: a candidate drawn uniformly at "
        "random, trained on the fit rows, scored on the held-out rows")

    def trial(k, index):
      recipe, traced = runs[index]
      k_train, k_score = jax.random.split(k)
      args = (k_train[None], traced, x_fit, y_fit, mask_fit)
      program = fx.fedsgd_program(args, learning_rate=recipe.learning_rate,
                                  d=d, num_classes=num_classes, chunk=None)
      params = jax.tree.map(lambda a: a[0], program(*args))
      acc = float(fedsgd.accuracy(params, x_val, y_val))
      correct = round(acc * validation_rows)
      noisy = tuning.noisy_accuracy(k_score, correct, validation_rows,
                                    epsilon=tune.score_epsilon)
      return float(noisy), params

    ledger = accounting.PrivacyLedger()
    tune_keys = jax.random.split(jax.random.fold_in(key, 4), seeds)
    results = []
    for s in range(seeds):
      results.append(tuning.select(
          tune_keys[s], list(range(len(runs))), trial, count=tune.count,
          privacy=trial_privacy, delta=delta,
          ledger=ledger if s == 0 else None, label="compare_tuning"))
    accuracies = []
    for res in results:
      # K = 0 (Poisson only) releases nothing: the zero start stands in.
      params = (res.output if res.output is not None
                else fedsgd.softmax_params(d, num_classes))
      accuracies.append(float(fedsgd.accuracy(params, p.x_test, p.y_test)))
    guarantee = results[0].guarantee
    privacy = ledger.report(
        delta, nominal_epsilon=epsilon,
        nominal_note="each trial's target ε (its DP-SGD noise was "
                     "calibrated for it); the guarantee covers the whole "
                     "tuning")
    c = tune.count
    tuned = {
        "winner": [r.winner for r in results],
        "winning_settings": [None if r.winner is None
                             else tune.candidates[r.winner]
                             for r in results],
        "expected_trials": c.expected, "distribution": c.distribution,
        "eta": c.eta, "gamma": c.gamma,
        "scores": [r.score for r in results],
        "epsilon_per_trial_target": epsilon,
        "epsilon_per_trial": guarantee.trial_epsilon,
        "epsilon": guarantee.epsilon, "delta": guarantee.delta,
        "score_epsilon": tune.score_epsilon,
        "guarantee": guarantee.as_dict(), "candidates": facts,
        "fit_rows": n_fit.tolist(), "validation_rows": n_val.tolist(),
        "validation": (f"each participant's last "
                       f"{TUNE_VALIDATION_FRACTION:g} of its training rows "
                       f"(rounded down; its rows are in the partition's "
                       f"random order); test rows unused until the "
                       f"released model is scored"),
        "scope": "one independent tuning per seed; privacy is that of "
                 "one seed's tuning (seed 0's ledger)",
        "released_when_no_trial": "the zero start (K = 0)",
        "source": tune.source,
    }
    settings = {"participants": len(self.sizes),
                "sizes": list(map(int, self.sizes)),
                "test_rows": len(p.y_test), "num_classes": num_classes,
                "partition_seed": 0}
    return accuracies, privacy, settings, tuned


# -- the DPWSS family ----------------------------------------------------------


class KernelFamily:
  """One of the DPWSS sets, split and scaled as kernel_compare does."""

  def __init__(self, dataset: str, data_dir: str | None):
    from launch.experiments import kernel_compare as kx  # noqa: PLC0415
    self.kx = kx
    self.dataset = dataset
    self.data = kx.prepare(loader_name(dataset), data_dir=data_dir)

  def run(self, method: str, epsilon, *, delta: float, seeds: int) -> dict:
    kx, start = self.kx, time.perf_counter()
    rec = kx.run_one(dataset=loader_name(self.dataset), data=self.data,
                     method=method,
                     epsilon=epsilon if epsilon is not None else 0.0,
                     delta=delta,
                     seeds=1 if method in DETERMINISTIC else seeds,
                     test_fraction=kx.TEST_FRACTION,
                     split_seed=kx.SPLIT_SEED)
    settings = {k: rec[k] for k in (
        "classes", "scaling", "scaling_reads_data", "test_fraction",
        "split_seed", "n_train", "n_test", "neighbouring",
        "model_is_private") if k in rec}
    for k in ("noise_multiplier", "steps", "iterations"):
      if k in rec:
        settings[k] = rec[k]
    return _record(self.dataset, method, epsilon, delta=delta, seeds=seeds,
                   accuracies=rec["accuracy_per_seed"],
                   privacy=rec["privacy"], settings=settings,
                   seconds=time.perf_counter() - start,
                   scaling_reads_data=rec["scaling_reads_data"],
                   privacy_scope=rec["privacy_scope"])


# -- Segment: DP-LVQ and a DP-SGD softmax --------------------------------------


def softmax_rate(n: int) -> float:
  """The central recipe's q: an expected batch of at most 256 rows."""
  return min(0.05, 256.0 / n)


class LVQFamily:
  """Segment in the [−1, 1] box (data min/max, as docs/dplvq.md), 5-fold
  CV repeated once per seed; the softmax trains on the same folds."""

  def __init__(self, dataset: str, data_dir: str | None):
    import jax  # noqa: PLC0415

    from launch.experiments import dplvq, lvq_eval  # noqa: PLC0415
    self.dataset = dataset
    self.dplvq, self.lvq_eval = dplvq, lvq_eval
    self.prepared = dplvq.prepare(dataset, data_dir,
                                  LVQ_RECIPE["bounds"])
    # dplvq.run_setting's split key for seed 0: the same folds here.
    self.split_key = jax.random.fold_in(jax.random.key(0), 0)

  def run(self, method: str, epsilon, *, delta: float, seeds: int) -> dict:
    start = time.perf_counter()
    if method in ("dp_glvq", "dp_gmlvq"):
      out = self._lvq(method, epsilon, delta=delta, seeds=seeds)
    else:
      out = self._softmax(method, epsilon, delta=delta, seeds=seeds)
    accuracies, privacy, settings = out
    return _record(self.dataset, method, epsilon, delta=delta, seeds=seeds,
                   accuracies=accuracies, privacy=privacy,
                   settings=settings, seconds=time.perf_counter() - start,
                   scaling_reads_data=True,
                   privacy_scope=(
                       "one trained model on its own training folds, one "
                       "row added/removed; the min/max scaling read the "
                       "data and is NOT covered by epsilon"))

  def _lvq(self, method, epsilon, *, delta, seeds):
    import jax  # noqa: PLC0415
    r = LVQ_RECIPE
    settings = self.dplvq.Settings(
        delta=delta, q=r["q"], clip=r["clip"], epochs=r["epochs"],
        lr=r["learning_rate"], folds=r["folds"], repeats=seeds,
        train_on="other_folds")
    self.dplvq.check_settings(settings)
    rec = self.dplvq.run_setting(
        jax.random.key(0), self.prepared, settings,
        model=method.removeprefix("dp_"), trainer="dpsgd", epsilon=epsilon)
    errors = np.asarray(rec["errors"]).reshape(seeds, r["folds"])
    per_seed = (1.0 - errors.mean(axis=1)).tolist()
    details = {k: rec[k] for k in ("dpsgd", "n_train", "n_test", "steps",
                                   "max_batch", "overflow_steps", "scaling")}
    details["accuracy_per_run"] = (1.0 - errors.ravel()).tolist()
    return per_seed, rec["privacy"], details

  def _softmax(self, method, epsilon, *, delta, seeds):
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    import optax  # noqa: PLC0415

    from dpcore import accounting, clipping, trainer  # noqa: PLC0415
    from federated import fedsgd  # noqa: PLC0415

    p = self.prepared
    x = np.asarray(clipping.unit_rows(p.x), np.float32)
    train_idx, test_idx = self.lvq_eval.cv_splits(
        self.split_key, x.shape[0], folds=LVQ_FOLDS, repeats=seeds,
        train_on_one_fold=False)
    n = train_idx.shape[1]
    q = softmax_rate(n)
    steps = trainer.make_plan(n, sampling_rate=q, clip_norm=1.0,
                              noise_multiplier=0.0,
                              epochs=SOFTMAX_RECIPE["epochs"]).steps
    private = method == "dpsgd_softmax"
    sigma = (accounting.calibrate_dpsgd_noise(
        epsilon=epsilon, delta=delta, sampling_rate=q, steps=steps)
        if private else 0.0)
    plan = trainer.make_plan(n, sampling_rate=q, steps=steps,
                             clip_norm=SOFTMAX_RECIPE["clip_norm"],
                             noise_multiplier=sigma, delta=delta)
    if private:
      ledger = accounting.PrivacyLedger()
      plan.record(ledger)
      privacy = ledger.report(delta)
    else:
      privacy = accounting.no_guarantee_record(accounting.NON_PRIVATE)
    d, k = x.shape[1], p.num_classes
    optimizer = optax.sgd(SOFTMAX_RECIPE["learning_rate"])
    xs, ys = jnp.asarray(x), jnp.asarray(p.y, jnp.int32)

    def one(key, tr, te):
      res = trainer.train(key, plan, fedsgd.softmax_loss,
                          fedsgd.softmax_params(d, k), (xs[tr], ys[tr]),
                          optimizer)
      return fedsgd.accuracy(res.params, xs[te], ys[te]), res.overflow_steps

    root = jax.random.fold_in(
        jax.random.key(0),
        zlib.crc32(f"{self.dataset}/{method}/{epsilon}".encode()))
    keys = jax.random.split(root, train_idx.shape[0])
    acc, overflow = jax.block_until_ready(jax.jit(jax.vmap(one))(
        keys, jnp.asarray(train_idx), jnp.asarray(test_idx)))
    acc = np.asarray(acc, np.float64).reshape(seeds, LVQ_FOLDS)
    details = {"n_train": int(n), "n_test": int(test_idx.shape[1]),
               "sampling_rate": q, "steps": plan.steps,
               "noise_multiplier": sigma, "max_batch": plan.max_batch,
               "overflow_steps": int(np.sum(overflow)),
               "scaling": p.scaling,
               "accuracy_per_run": acc.ravel().tolist()}
    return acc.mean(axis=1).tolist(), privacy, details


FAMILY_CLASSES = {"feddpdr": FedDPDRFamily, "kernel": KernelFamily,
                  "lvq": LVQFamily}


# -- the sweep -----------------------------------------------------------------


def run_all(*, plan: dict, epsilons, delta: float = DELTA,
            seeds: int = SEEDS, data_dirs: dict | None = None,
            out: str | None = None, emit=None,
            progress=common.progress,
            tune: TuneOptions | None = None) -> list[dict]:
  """Runs every (data set, method, ε) of ``plan`` that ``out`` lacks.

  ``data_dirs`` maps a data set to its files' directory
  (:func:`resolve_data_dir`). With ``tune``, its method's records are
  tuned (:meth:`FedDPDRFamily._tuned_fedsgd`) and keyed by the tuning.
  A set is loaded only when one of its runs is missing. Each new record
  is emitted (``emit``, default :func:`launch.common.emit_record`) as soon
  as it is done.
  """
  emit = emit or common.emit_record
  data_dirs = data_dirs or {}
  done = common.done_keys(out, KEY_FIELDS) if out else set()
  records = []
  points = grid(plan, epsilons)
  for dataset in plan:
    mine = [p for p in points if p[0] == dataset]
    def tid(p):
      return (tune.tuning_id if tune is not None and tune.tunes(p[0], p[1])
              else None)
    todo = [p for p in mine if common.record_key(
        probe(*p, delta=delta, seeds=seeds, tuning_id=tid(p)),
        KEY_FIELDS) not in done]
    if len(todo) < len(mine):
      progress(f"{dataset}: skipping {len(mine) - len(todo)} finished "
               f"run(s) found in {out}")
    if not todo:
      continue
    progress(f"{dataset}: loading ({FAMILIES[dataset]} family)")
    family = FAMILY_CLASSES[FAMILIES[dataset]](dataset,
                                               data_dirs.get(dataset))
    for i, (_, method, eps) in enumerate(todo, 1):
      at = "" if eps is None else f" ε={eps:g}"
      progress(f"{dataset} {i}/{len(todo)}: {LABELS[method]}{at}")
      extra = {"tune": tune} if tid((dataset, method, eps)) else {}
      rec = family.run(method, eps, delta=delta, seeds=seeds, **extra)
      emit(rec, out)
      records.append(rec)
      holds = rec["privacy"]["epsilon"]
      if rec.get("tuning"):
        t = rec["tuning"]
        progress(f"{dataset}: {method}{at}: tuned, "
                 f"winners {t['winner']}, one trial ε "
                 f"{t['epsilon_per_trial']:.3g}, the tuning ε "
                 f"{t['epsilon']:.3g}")
      progress(f"{dataset}: {method}{at}: accuracy "
               f"{rec['accuracy_mean']:.3f} ± {rec['accuracy_sd']:.3f}, ε "
               f"that holds {'none' if holds is None else f'{holds:.3g}'} "
               f"({rec['seconds']:.0f} s)")
  return records


def select(records, *, dataset, method, epsilon, delta, seeds,
           tuning_id=None):
  """The last record of (data set, method, ε) at these settings, or None
  (``tuning_id`` None: an untuned record)."""
  match = [r for r in records if r.get("dataset") == dataset
           and r.get("method") == method and r.get("epsilon") == epsilon
           and r.get("delta") == delta and r.get("seeds") == seeds
           and r.get("tuning_id") == tuning_id]
  return match[-1] if match else None


def _holds(record) -> str:
  kind = record["guarantee"]
  if kind == "none":
    return "no DP"
  if kind == "nominal":
    return "nominal"
  return f"{record['privacy']['epsilon']:.3g}"


GUARANTEE_TEXT = {
    "dp": "(ε, δ) from the ledger",
    "nominal": "nominal ε only: no DP",
    "none": "no DP",
}


def _rows(dataset, method, tune):
  """(label, guarantee text, tuning_id) of the rows a method can have."""
  kind = guarantee_kind(method)
  rows = [(LABELS[method], GUARANTEE_TEXT[kind], None)]
  if tune is not None and tune.tunes(dataset, method):
    rows.append((f"{LABELS[method]} ({tune.label()})",
                 "(ε, δ) of the whole tuning", tune.tuning_id))
  return rows


def markdown_tables(records, *, plan: dict, epsilons, delta: float,
                    seeds: int, tune: TuneOptions | None = None) -> str:
  """One table per data set: rows = methods, columns = ε, cells
  "mean ± sd (ε that holds)" in %, with the guarantee of each row.

  With ``tune``, its method also has a tuned row: the column's ε is then
  each trial's target, and the bracket the ε of the whole tuning."""
  parts = []
  head = (["method", "guarantee"] + [f"ε = {e:g}" for e in epsilons])
  for dataset, methods in plan.items():
    lines = [f"### {dataset}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    reads, tuned = False, []
    for method in methods:
      kind = guarantee_kind(method)
      for label, text, tuning_id in _rows(dataset, method, tune):
        cells, seen = [], False
        for eps in epsilons:
          want = None if method in NON_PRIVATE else float(eps)
          r = select(records, dataset=dataset, method=method, epsilon=want,
                     delta=delta, seeds=seeds, tuning_id=tuning_id)
          if r is None:
            cells.append("–")
            continue
          seen = True
          reads = reads or bool(r.get("scaling_reads_data"))
          cell = (f"{100 * r['accuracy_mean']:.1f} ± "
                  f"{100 * r['accuracy_sd']:.1f}")
          if kind == "dp":
            cell += f" ({_holds(r)})"
          if tuning_id is not None:
            tuned.append(r)
          cells.append(cell)
        if seen:
          lines.append(f"| {label} | {text} | " + " | ".join(cells) + " |")
    lines += ["", f"Test accuracy (%), mean ± sd over {seeds} seed(s); in "
              f"brackets the ε that holds for one run (the method's "
              f"ledger, δ = {delta:g}). A non-private row is run once "
              f"(one fit where it is deterministic) and repeated across "
              f"the columns; the DPWSS paper's ε is its nominal "
              f"per-selection figure and carries no guarantee."]
    if tuned:
      t = tuned[0]["tuning"]
      lines.append(
          f"A tuned row includes private hyperparameter selection over "
          f"{len(t['candidates'])} candidate recipes (K ~ "
          f"{t['distribution']}, E[K] = {t['expected_trials']:g}, one "
          f"independent tuning per seed; each trial's score is a "
          f"Laplace-noised validation accuracy at ε = "
          f"{t['score_epsilon']:g} on rows held out of the training "
          f"rows): its column is each trial's target ε, its bracket the ε "
          f"that holds for the whole tuning (the released model included). "
          f"The number of trials run is not released (the guarantee holds "
          f"with it hidden).")
    if reads:
      lines.append("Scaling read the data (min/max): no ε covers that "
                   "step.")
    parts.append("\n".join(lines))
  return "\n\n".join(parts) + "\n"


def write_figures(records, *, plan: dict, epsilons, delta: float,
                  seeds: int, directory: str,
                  tune: TuneOptions | None = None) -> list[str]:
  """One PNG per data set: accuracy against the ε that holds.

  Private methods are drawn at the ε from their privacy record (filled
  markers, solid lines); a nominal method at its nominal ε (open markers,
  dashed, "nominal, no DP"); a non-private one as a dotted horizontal line
  ("no DP"). A tuned method is drawn at the ε of its whole tuning.
  """
  import matplotlib  # noqa: PLC0415
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # noqa: PLC0415
  from matplotlib import ticker  # noqa: PLC0415

  os.makedirs(directory, exist_ok=True)
  paths = []
  for dataset, methods in plan.items():
    fig, ax = plt.subplots(figsize=(9.0, 4.2))
    drawn, reads = False, False
    series = [(m, label, tid) for m in methods
              for label, _, tid in _rows(dataset, m, tune)]
    for i, (method, name, tuning_id) in enumerate(series):
      kind, color = guarantee_kind(method), f"C{i % 10}"
      if kind == "none":
        r = select(records, dataset=dataset, method=method, epsilon=None,
                   delta=delta, seeds=seeds)
        if r is not None:
          ax.axhline(r["accuracy_mean"], ls=":", lw=1.2,
                     label=f"{LABELS[method]} (no DP)", color=color)
          drawn = True
        continue
      pts = []
      for eps in epsilons:
        r = select(records, dataset=dataset, method=method,
                   epsilon=float(eps), delta=delta, seeds=seeds,
                   tuning_id=tuning_id)
        if r is None:
          continue
        reads = reads or bool(r.get("scaling_reads_data"))
        x = (r["privacy"]["epsilon"] if kind == "dp" else r["epsilon"])
        pts.append((x, r["accuracy_mean"], r["accuracy_sd"]))
      if not pts:
        continue
      pts.sort()
      e, m, s = map(np.asarray, zip(*pts, strict=True))
      label = name + (" (nominal ε, no DP)" if kind == "nominal"
                      else " (ε that holds)")
      ax.errorbar(e, m, yerr=s, ms=4, capsize=2, label=label,
                  fmt="o--" if kind == "nominal" else "o-",
                  mfc="none" if kind == "nominal" else None, color=color)
      drawn = True
    if not drawn:
      plt.close(fig)
      continue
    ax.set_xscale("log")
    ax.set_xticks([float(e) for e in epsilons])
    ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel(f"ε (δ = {delta:g}): the ε that holds, from each "
                  f"method's ledger")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"{dataset}: accuracy against ε, mean ± sd over "
                 f"{seeds} seed(s)" + (
                     "\nthe min/max scaling read the data: no ε covers it"
                     if reads else ""), fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = os.path.join(directory, f"compare_{dataset}.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    paths.append(path)
  return paths
