"""The linear ScatterNet on a data set: load, features, records.

The method (recipe, normalisation, DP-SGD head, the tuning's calibration)
is :mod:`mechanisms.features.scatternet`; this adds the data (pixels
scaled to [0, 1] by their public range, a validation split), a cache of
the scattering features, the recipes compared (:data:`CANDIDATES`) and
the records. The ε reported is the ledger's: the normalisation's release
(``norm="data"``) and DP-SGD's, composed at δ.
"""

from __future__ import annotations

import dataclasses
import os
import time

import jax
import numpy as np

from dpcore import accounting, tuning
from launch.data import loaders
from mechanisms.erm import softmax
from mechanisms.features import scattering, scatternet
from mechanisms.features.scatternet import Recipe

__all__ = ["CANDIDATES", "TUNE_CANDIDATES", "features", "run", "run_tuned"]


CANDIDATES = {
    "base": Recipe(),
    "batch4096": Recipe(batch_size=4096),
    "batch2048": Recipe(batch_size=2048),
    "batch4096_lr8": Recipe(batch_size=4096, learning_rate=8.0),
    "batch4096_lr16": Recipe(batch_size=4096, learning_rate=16.0),
    "batch2048_lr8": Recipe(batch_size=2048, learning_rate=8.0),
    "batch4096_lr8_epochs80": Recipe(batch_size=4096, learning_rate=8.0,
                                     epochs=80.0),
    "data_norm": Recipe(norm="data"),
}
"""The recipes compared on a validation split (``--validation``) and
privately (``--tune``): the linear ScatterNet recipe (``base``), smaller
expected batches (more steps for the same epochs), larger learning
rates, twice the epochs, and the private data normalisation instead of
group norm (not a tuning candidate: a release of its own per trial).
docs/features.md says which was chosen, on which split."""

TUNE_CANDIDATES = ("base", "batch4096", "batch2048", "batch4096_lr8",
                   "batch4096_lr16", "batch2048_lr8")
"""The tuning's default candidates: every group-norm recipe of 40 epochs."""


def features(images: np.ndarray, *, J: int, L: int,  # noqa: N803
             cache: str | None = None, chunk: int = 1024) -> np.ndarray:
  """Scattering features (N, K, h, w) of (N, H, W) images in [0, 1].

  ``cache``: a .npy path read if present, else written (the transform is
  data-independent and deterministic; the cache is keyed by the caller).
  """
  if cache is not None and os.path.exists(cache):
    return np.load(cache, mmap_mode="r")
  out = scattering.transform(images, J=J, L=L, chunk=chunk)
  if cache is not None:
    os.makedirs(os.path.dirname(cache) or ".", exist_ok=True)
    np.save(cache, out)
  return out


def _load(dataset: str, recipe: Recipe, *, data_dir, cache_dir,
          validation: int, say):
  """(fit features, fit labels, eval features, eval labels, facts).

  With ``validation`` > 0 the last ``validation`` training rows are the
  evaluation rows and the test set is not read at all; else all the
  training rows are fitted and the test set is evaluated.
  """
  data = loaders.load_dataset(dataset, data_dir=data_dir)
  h, w, _ = data.image_shape
  low, high = data.bounds
  scale = lambda v: ((v - low) / (high - low)).reshape(len(v), h, w)  # noqa: E731
  cache = lambda part: (None if cache_dir is None else os.path.join(  # noqa: E731
      cache_dir, f"{dataset}_{part}_J{recipe.J}_L{recipe.L}.npy"))
  start = time.perf_counter()
  train = features(scale(data.x_train), J=recipe.J, L=recipe.L,
                   cache=cache("train"))
  y = np.asarray(data.y_train)
  if validation:
    if not 0 < validation < len(train) // 2:
      raise ValueError(f"validation={validation} must be between 1 and "
                       f"half the {len(train)} training rows.")
    fit, ev = train[:-validation], train[-validation:]
    y_fit, y_ev = y[:-validation], y[-validation:]
    split = (f"validation: the last {validation} training rows scored, "
             f"the first {len(fit)} fitted; test rows not read")
  else:
    fit, y_fit = train, y
    ev = features(scale(data.x_test), J=recipe.J, L=recipe.L,
                  cache=cache("test"))
    y_ev = np.asarray(data.y_test)
    split = "test"
  feature_s = time.perf_counter() - start
  say(f"features {fit.shape} + {ev.shape} in {feature_s:.1f} s")
  facts = {"split": split, "feature_seconds": feature_s,
           "num_classes": len(data.classes)}
  return np.asarray(fit), y_fit, np.asarray(ev), y_ev, facts


def run(*, dataset: str, epsilons, seeds, delta: float, recipe: Recipe,
        data_dir: str | None = None, cache_dir: str | None = None,
        validation: int = 0, progress=None):
  """Yields one record per (ε, seed).

  ``validation`` > 0: fit on all but the last ``validation`` training
  rows and score on those (for choosing a recipe without the test set);
  the record's ``accuracy`` is then the validation accuracy and its
  ``split`` says so.
  """
  say = progress or (lambda _: None)
  train, y_train, test, y_test, facts = _load(
      dataset, recipe, data_dir=data_dir, cache_dir=cache_dir,
      validation=validation, say=say)
  n = len(train)
  for epsilon in epsilons:
    for seed in seeds:
      key = jax.random.key(seed)
      norm_key, train_key = jax.random.split(key)
      start = time.perf_counter()
      x, xt, norm_plan = scatternet.normalise(norm_key, recipe, train, test,
                                              delta=delta)
      plan = scatternet.make_plan(n, recipe, epsilon=epsilon, delta=delta,
                                  normalisation=norm_plan)
      ledger = accounting.PrivacyLedger()
      if norm_plan is not None:
        norm_plan.record(ledger)
      plan.record(ledger)
      prepare_s = time.perf_counter() - start
      start = time.perf_counter()
      params = scatternet.release(train_key, plan, recipe, x, y_train,
                                facts["num_classes"])
      jax.block_until_ready(params)
      train_s = time.perf_counter() - start
      acc = float(softmax.accuracy(params, xt, y_test))
      say(f"{dataset} ε={epsilon} seed={seed}: {facts['split'][:10]} "
          f"accuracy {acc:.4f} ({train_s:.1f} s)")
      yield {
          "experiment": "features_dpsgd", "dataset": dataset,
          "features": "scattering", "target_epsilon": epsilon,
          "seed": seed, "accuracy": acc, "split": facts["split"],
          "recipe": dataclasses.asdict(recipe),
          "num_examples": n, "num_features": int(x.shape[1]),
          "sampling_rate": plan.sampling_rate, "steps": plan.steps,
          "noise_multiplier": plan.noise_multiplier,
          "calibration": "σ by bisection on the ledger's ε of the run "
                         "(normalisation included)",
          "norm_epsilon": None if norm_plan is None else norm_plan.epsilon,
          "feature_seconds": facts["feature_seconds"],
          "prepare_seconds": prepare_s, "train_seconds": train_s,
          "device": jax.devices()[0].platform,
          "load_average": os.getloadavg()[0],
          "privacy": ledger.report(delta),
      }


def run_tuned(*, dataset: str, epsilon: float, delta: float, candidates,
              count, validation: int, seed: int = 0,
              score_epsilon: float = scatternet.SCORE_EPSILON,
              data_dir: str | None = None, cache_dir: str | None = None,
              progress=None) -> dict:
  """The recipe chosen privately among ``candidates`` (:mod:`dpcore.tuning`).

  The last ``validation`` training rows are held out; K ~ ``count``
  trials each draw a candidate uniformly at random, train it by DP-SGD on
  the other training rows and score it by a noisy count of correct
  held-out rows; the best trial's model is released and scored on the
  test set. The ledger holds ONE entry, the whole tuning's (ε, δ)
  (Papernot & Steinke's bound, :func:`dpcore.tuning.tuned_guarantee`),
  with every trial's σ calibrated so that it is ``epsilon``. Only what
  the guarantee covers goes in the record: the winner, its noisy score,
  the law of K (not K, nor the other trials).
  """
  say = progress or (lambda _: None)
  candidates = list(candidates)
  train, y_train, test, y_test, facts = _load(
      dataset, candidates[0], data_dir=data_dir, cache_dir=cache_dir,
      validation=0, say=say)
  if any((c.J, c.L) != (candidates[0].J, candidates[0].L)
         for c in candidates):
    raise ValueError("the tuning's candidates must share J and L.")
  if not 0 < validation < len(train) // 2:
    raise ValueError(f"validation={validation} must be between 1 and half "
                     f"the {len(train)} training rows.")
  fit, held = train[:-validation], train[-validation:]
  y_fit, y_held = y_train[:-validation], y_train[-validation:]
  n = len(fit)
  start = time.perf_counter()
  plans, privacy, guarantee, trial_eps = scatternet.calibrate_tuning(
      n, candidates, epsilon=epsilon, delta=delta, count=count,
      score_epsilon=score_epsilon)
  say(f"tuning: {len(candidates)} candidates, K ~ {count.distribution} "
      f"E[K]={count.expected:.3g}, per-trial ε {trial_eps:.3f} "
      f"(σ {[round(p.noise_multiplier, 3) for p in plans]}), whole tuning "
      f"ε {guarantee.epsilon:.3f}")
  normalised = {}

  def rows(c):
    k = (c.norm, c.num_groups)
    if k not in normalised:
      normalised[k] = scatternet.normalise(
          None, c, fit, np.concatenate([held, test]), delta=delta)[:2]
    return normalised[k]

  def trial(key, index):
    c = candidates[index]
    k_train, k_score = jax.random.split(key)
    x, rest = rows(c)
    params = scatternet.release(k_train, plans[index], c, x, y_fit,
                              facts["num_classes"])
    correct = round(float(softmax.accuracy(params, rest[:validation],
                                          y_held)) * validation)
    noisy = tuning.noisy_accuracy(k_score, correct, validation,
                                  epsilon=score_epsilon)
    say(f"  a trial finished ({time.perf_counter() - start:.0f} s)")
    return float(noisy), params

  ledger = accounting.PrivacyLedger()
  result = tuning.select(jax.random.key(seed), list(range(len(candidates))),
                         trial, count=count, privacy=privacy, delta=delta,
                         ledger=ledger, label="features_tuning")
  seconds = time.perf_counter() - start
  accuracy = None
  if result.winner is not None:
    _, rest = rows(candidates[result.winner])
    accuracy = float(softmax.accuracy(result.output, rest[validation:],
                                     y_test))
  say(f"tuning: winner {result.winner}, test accuracy {accuracy}")
  return {
      "experiment": "features_dpsgd_tuned", "dataset": dataset,
      "features": "scattering", "target_epsilon": epsilon, "seed": seed,
      "accuracy": accuracy, "split": "test (the released model)",
      "tuning": {
          **result.record(),
          "winning_recipe": (None if result.winner is None else
                             dataclasses.asdict(
                                 candidates[result.winner])),
          "candidates": [dataclasses.asdict(c) for c in candidates],
          "epsilon_per_trial": trial_eps,
          "noise_multipliers": [p.noise_multiplier for p in plans],
          "steps": [p.steps for p in plans],
          "score_epsilon": score_epsilon, "fit_rows": n,
          "validation_rows": validation,
          "validation": f"the last {validation} training rows",
          "released_when_no_trial": None,
      },
      "feature_seconds": facts["feature_seconds"],
      "tuning_seconds": seconds, "device": jax.devices()[0].platform,
      "load_average": os.getloadavg()[0],
      "privacy": ledger.report(
          delta, nominal_epsilon=trial_eps,
          nominal_note="each trial's own ε (its DP-SGD σ was calibrated "
                       "for it); the guarantee covers the whole tuning"),
  }

