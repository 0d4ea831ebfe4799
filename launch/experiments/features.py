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

__all__ = ["Recipe", "features", "run", "summary", "train_head"]


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
  from dpcore import accounting, trainer  # pylint: disable=g-import-not-at-top
  q = recipe.batch_size / n
  kwargs = dict(sampling_rate=q, clip_norm=recipe.clip_norm,
                epochs=recipe.epochs, delta=delta)
  if norm_plan is None:
    return trainer.make_plan(n, epsilon=epsilon, **kwargs)

  def total(sigma):
    ledger = accounting.PrivacyLedger()
    norm_plan.record(ledger)
    trainer.make_plan(n, noise_multiplier=sigma, **kwargs).record(ledger)
    return ledger.guarantee(delta).epsilon

  lo, hi = 0.3, 50.0  # total(lo) > ε ≥ total(hi)
  if total(hi) > epsilon:
    raise ValueError(f"ε={epsilon} is below what the normalisation alone "
                     f"costs; raise norm_noise_multiplier.")
  for _ in range(30):
    mid = (lo * hi)**0.5
    lo, hi = (mid, hi) if total(mid) > epsilon else (lo, mid)
    if hi / lo < 1.002:
      break
  return trainer.make_plan(n, noise_multiplier=hi, **kwargs)


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


def run(*, dataset: str, epsilons, seeds, delta: float, recipe: Recipe,
        data_dir: str | None = None, cache_dir: str | None = None,
        progress=None):
  """Yields one record per (ε, seed)."""
  import jax  # pylint: disable=g-import-not-at-top

  from dpcore import accounting  # pylint: disable=g-import-not-at-top
  from federated import fedsgd  # pylint: disable=g-import-not-at-top
  from launch.data import loaders  # pylint: disable=g-import-not-at-top

  say = progress or (lambda _: None)
  data = loaders.load_dataset(dataset, data_dir=data_dir)
  h, w, _ = data.image_shape
  low, high = data.bounds
  scale = lambda v: ((v - low) / (high - low)).reshape(len(v), h, w)  # noqa: E731
  cache = lambda part: (None if cache_dir is None else os.path.join(  # noqa: E731
      cache_dir, f"{dataset}_{part}_J{recipe.J}_L{recipe.L}.npy"))
  start = time.perf_counter()
  train = features(scale(data.x_train), J=recipe.J, L=recipe.L,
                   cache=cache("train"))
  test = features(scale(data.x_test), J=recipe.J, L=recipe.L,
                  cache=cache("test"))
  feature_s = time.perf_counter() - start
  say(f"features {train.shape} + {test.shape} in {feature_s:.1f} s")
  n = len(train)
  for epsilon in epsilons:
    for seed in seeds:
      key = jax.random.key(seed)
      norm_key, train_key = jax.random.split(key)
      x, xt, norm_plan = _normalise(norm_key, recipe, train, test, delta)
      plan = _dpsgd_plan(n, recipe, epsilon, delta, norm_plan)
      ledger = accounting.PrivacyLedger()
      if norm_plan is not None:
        norm_plan.record(ledger)
      plan.record(ledger)
      start = time.perf_counter()
      params = train_head(train_key, plan, recipe, x, data.y_train,
                          len(data.classes))
      acc = float(fedsgd.accuracy(params, xt, data.y_test))
      train_s = time.perf_counter() - start
      say(f"{dataset} ε={epsilon} seed={seed}: accuracy {acc:.4f} "
          f"({train_s:.1f} s)")
      yield {
          "experiment": "features_dpsgd", "dataset": dataset,
          "features": "scattering", "target_epsilon": epsilon,
          "seed": seed, "accuracy": acc,
          "recipe": dataclasses.asdict(recipe),
          "num_examples": n, "num_features": int(x.shape[1]),
          "sampling_rate": plan.sampling_rate, "steps": plan.steps,
          "noise_multiplier": plan.noise_multiplier,
          "norm_epsilon": None if norm_plan is None else norm_plan.epsilon,
          "feature_seconds": feature_s, "train_seconds": train_s,
          "load_average": os.getloadavg()[0],
          "privacy": ledger.report(delta),
      }


def summary(records) -> dict:
  """Mean and std of accuracy per (dataset, ε)."""
  groups = {}
  for r in records:
    groups.setdefault((r["dataset"], r["target_epsilon"]), []).append(
        r["accuracy"])
  return {k: (float(np.mean(v)), float(np.std(v)), len(v))
          for k, v in groups.items()}

