"""Scattering features + a DP-SGD linear softmax head (flag-free logic).

The recipe of Tramèr & Boneh's linear ScatterNet (ICLR 2021): pixels
scaled to [0, 1] by their public range, the order-2 scattering transform
(J = 2, L = 8: 81 × 7 × 7 for 28 × 28 images;
:mod:`mechanisms.features.scattering`), one normalisation
(:mod:`mechanisms.features.normalization`: ``"group"`` per example, free;
``"data"`` private per-channel statistics, one Gaussian entry in the
ledger; ``"none"``), then softmax regression on the 3,969 features trained
by central DP-SGD (:mod:`dpcore.trainer`, Poisson sampling, the layered
loss :func:`federated.fedsgd.softmax_loss`: per-example norms without
per-example gradients), momentum SGD.

The ε reported is the ledger's: the DP-SGD plan's record and, for
``"data"``, the normalisation's, composed in one
:class:`dpcore.accounting.PrivacyLedger` at δ. For ``"data"`` the DP-SGD
noise is calibrated (bisection over σ) so that the composition meets the
target ε.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time

import numpy as np

__all__ = ["CANDIDATES", "TUNE_CANDIDATES", "TUNE_SCORE_EPSILON", "Recipe",
           "calibrate_tuning", "features",
           "run", "run_tuned", "summary", "train_head"]


@dataclasses.dataclass(frozen=True)
class Recipe:
  """The public recipe, fixed before any test data is read."""
  J: int = 2  # noqa: N815
  L: int = 8  # noqa: N815
  norm: str = "group"
  num_groups: int = 27
  norm_noise_multiplier: float = 8.0
  clip_mean: float = 1.0
  clip_square: float = 1.0
  batch_size: int = 8192
  epochs: float = 40.0
  clip_norm: float = 0.1
  learning_rate: float = 4.0
  momentum: float = 0.9


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
  from mechanisms.features import scattering  # pylint: disable=g-import-not-at-top
  if cache is not None and os.path.exists(cache):
    return np.load(cache, mmap_mode="r")
  out = scattering.transform(images, J=J, L=L, chunk=chunk)
  if cache is not None:
    os.makedirs(os.path.dirname(cache) or ".", exist_ok=True)
    np.save(cache, out)
  return out


def _normalise(key, recipe: Recipe, train, test, delta):
  """(train rows, test rows, norm plan or None), flattened."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from mechanisms.features import normalization  # pylint: disable=g-import-not-at-top
  plan = None
  if recipe.norm == "group":
    fn = functools.partial(normalization.group_norm,
                           num_groups=recipe.num_groups)
    train, test = fn(jnp.asarray(train)), fn(jnp.asarray(test))
  elif recipe.norm == "data":
    plan = normalization.make_plan(
        epsilon=None, noise_multiplier=recipe.norm_noise_multiplier,
        delta=delta, num_examples=len(train), channels=train.shape[1],
        clip_mean=recipe.clip_mean, clip_square=recipe.clip_square)
    stats = normalization.release(key, plan, train)
    train = normalization.standardize(train, stats)
    test = normalization.standardize(test, stats)
  elif recipe.norm != "none":
    raise ValueError(f"norm must be 'group', 'data' or 'none', got "
                     f"{recipe.norm!r}.")
  flat = lambda v: np.asarray(v, np.float32).reshape(len(v), -1)  # noqa: E731
  return flat(train), flat(test), plan


def _dpsgd_plan(n, recipe: Recipe, epsilon, delta, norm_plan):
  """The recipe's DP-SGD plan, σ calibrated on the ledger's total ε
  (:func:`dpcore.trainer.make_ledger_plan`)."""
  from dpcore import trainer  # pylint: disable=g-import-not-at-top
  return trainer.make_ledger_plan(
      n, epsilon=epsilon, delta=delta,
      sampling_rate=recipe.batch_size / n, clip_norm=recipe.clip_norm,
      epochs=recipe.epochs, before=() if norm_plan is None else (norm_plan,))


def train_head(key, plan, recipe: Recipe, x, y, num_classes):
  """Runs DP-SGD of the softmax head; returns the parameters."""
  import jax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top

  from dpcore import trainer  # pylint: disable=g-import-not-at-top
  from federated import fedsgd  # pylint: disable=g-import-not-at-top
  params = fedsgd.softmax_params(x.shape[1], num_classes)
  opt = optax.sgd(recipe.learning_rate, momentum=recipe.momentum)
  fn = jax.jit(lambda k, xx, yy: trainer.train(
      k, plan, fedsgd.softmax_loss, params, (xx, yy), opt).params)
  return fn(key, x, y)


def _load(dataset: str, recipe: Recipe, *, data_dir, cache_dir,
          validation: int, say):
  """(fit features, fit labels, eval features, eval labels, facts).

  With ``validation`` > 0 the last ``validation`` training rows are the
  evaluation rows and the test set is not read at all; else all the
  training rows are fitted and the test set is evaluated.
  """
  from launch.data import loaders  # pylint: disable=g-import-not-at-top
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
  import jax  # pylint: disable=g-import-not-at-top

  from dpcore import accounting  # pylint: disable=g-import-not-at-top
  from federated import fedsgd  # pylint: disable=g-import-not-at-top

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
      x, xt, norm_plan = _normalise(norm_key, recipe, train, test, delta)
      plan = _dpsgd_plan(n, recipe, epsilon, delta, norm_plan)
      ledger = accounting.PrivacyLedger()
      if norm_plan is not None:
        norm_plan.record(ledger)
      plan.record(ledger)
      prepare_s = time.perf_counter() - start
      start = time.perf_counter()
      params = train_head(train_key, plan, recipe, x, y_train,
                          facts["num_classes"])
      jax.block_until_ready(params)
      train_s = time.perf_counter() - start
      acc = float(fedsgd.accuracy(params, xt, y_test))
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


TUNE_SCORE_EPSILON = 0.5
"""ε of each trial's noisy validation count (Laplace; 0.5 moves a count of
10,000 rows by about 3 in 10⁴)."""


def calibrate_tuning(n: int, candidates, *, epsilon: float, delta: float,
                     count, score_epsilon: float = TUNE_SCORE_EPSILON):
  """Per-trial DP-SGD plans whose whole tuning is (``epsilon``, δ)-DP.

  Every candidate's σ is calibrated (RDP, the curve the tuning theorem
  takes) for one per-trial target ε′, found by
  :func:`dpcore.tuning.calibrate`; one trial draws a candidate at random,
  trains it on the fit rows and scores it on the held-out rows
  (:func:`dpcore.tuning.scored_trials`).

  Returns:
    ``(plans, trial privacy, guarantee, ε′)``.
  """
  from dpcore import trainer, tuning  # pylint: disable=g-import-not-at-top
  for c in candidates:
    if c.norm == "data":
      raise ValueError("a tuning candidate cannot use norm='data' (a "
                       "release per trial); use 'group' or 'none'.")

  def build(trial_epsilon):
    plans = [trainer.make_plan(
        n, sampling_rate=c.batch_size / n, clip_norm=c.clip_norm,
        epochs=c.epochs, epsilon=trial_epsilon, delta=delta)
             for c in candidates]
    return plans, tuning.any_of(
        *tuning.scored_trials(plans, score_epsilon=score_epsilon),
        description="one trial: a candidate drawn uniformly at random, "
        "trained by DP-SGD on the fit rows, scored on the held-out rows")

  return tuning.calibrate(build, epsilon=epsilon, delta=delta, count=count)


def run_tuned(*, dataset: str, epsilon: float, delta: float, candidates,
              count, validation: int, seed: int = 0,
              score_epsilon: float = TUNE_SCORE_EPSILON,
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
  import jax  # pylint: disable=g-import-not-at-top

  from dpcore import accounting, tuning  # pylint: disable=g-import-not-at-top
  from federated import fedsgd  # pylint: disable=g-import-not-at-top

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
  plans, privacy, guarantee, trial_eps = calibrate_tuning(
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
      normalised[k] = _normalise(None, c, fit, np.concatenate([held, test]),
                                 delta)[:2]
    return normalised[k]

  def trial(key, index):
    c = candidates[index]
    k_train, k_score = jax.random.split(key)
    x, rest = rows(c)
    params = train_head(k_train, plans[index], c, x, y_fit,
                        facts["num_classes"])
    correct = round(float(fedsgd.accuracy(params, rest[:validation],
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
    accuracy = float(fedsgd.accuracy(result.output, rest[validation:],
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


def summary(records) -> dict:
  """Mean and std of accuracy per (dataset, ε)."""
  groups = {}
  for r in records:
    groups.setdefault((r["dataset"], r["target_epsilon"]), []).append(
        r["accuracy"])
  return {k: (float(np.mean(v)), float(np.std(v)), len(v))
          for k, v in groups.items()}

