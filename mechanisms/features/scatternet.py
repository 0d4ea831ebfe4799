"""The linear ScatterNet: scattering features under a DP-SGD softmax head.

Tramèr & Boneh's private linear model (ICLR 2021). Images in [0, 1] by
their public range go through the order-2 scattering transform
(:mod:`mechanisms.features.scattering`, data-independent), one
normalisation of its channels (:class:`dpcore.options.FeatureNorm`:
``"group"`` per example, free; ``"data"`` private per-channel statistics,
:mod:`mechanisms.features.normalization`, one Gaussian release of its own;
``"none"``), then softmax regression (:mod:`mechanisms.erm.softmax`)
trained by central DP-SGD (:mod:`dpcore.trainer`: Poisson sampling,
per-example norms from the layered loss, momentum SGD).

The one shape (:mod:`dpcore.shape`), in three steps a caller composes:
:func:`normalise` (which returns the normalisation's plan, or None),
:func:`make_plan` (DP-SGD's σ calibrated so that the ledger of the
normalisation and DP-SGD together meets the target ε) and :func:`release`.
Both plans go in one ledger; :func:`calibrate_tuning` gives the per-trial
plans of a private choice among recipes (:mod:`dpcore.tuning`)::

  x, x_test, norm_plan = scatternet.normalise(k1, recipe, f, f_test,
                                              delta=1e-5)
  plan = scatternet.make_plan(len(x), recipe, epsilon=3.0, delta=1e-5,
                              normalisation=norm_plan)
  params = scatternet.release(k2, plan, recipe, x, y, num_classes=10)
  ledger = accounting.PrivacyLedger()
  for p in (norm_plan, plan):
    if p is not None:
      p.record(ledger)

Privacy:
  Neighbouring data sets differ by adding or removing one example, as in
  DP-SGD. The scattering transform and ``"group"`` normalisation read one
  image at a time and cost nothing; ``"data"`` is a Gaussian release of
  clipped channel statistics, composed with DP-SGD in the ledger.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpcore import options, trainer, tuning
from mechanisms.erm import softmax
from mechanisms.features import normalization

__all__ = ["Recipe", "SCORE_EPSILON", "calibrate_tuning", "make_plan",
           "normalise", "release"]

SCORE_EPSILON = 0.5
"""ε of each tuning trial's noisy validation count (Laplace; 0.5 moves a
count of 10,000 rows by about 3 in 10⁴)."""


@dataclasses.dataclass(frozen=True)
class Recipe:
  """The public recipe, fixed before any data is read (Tramèr & Boneh's
  linear ScatterNet by default: J = 2, L = 8, group norm G = 27, an
  expected batch of 8,192, 40 epochs, C = 0.1, learning rate 4, momentum
  0.9)."""
  J: int = 2  # noqa: N815
  L: int = 8  # noqa: N815
  norm: str = options.FeatureNorm.GROUP.value
  num_groups: int = 27
  norm_noise_multiplier: float = 8.0
  clip_mean: float = 1.0
  clip_square: float = 1.0
  batch_size: int = 8192
  epochs: float = 40.0
  clip_norm: float = 0.1
  learning_rate: float = 4.0
  momentum: float = 0.9


def normalise(key: jax.Array | None, recipe: Recipe, train_rows, test_rows,
              *, delta: float):
  """The recipe's normalisation of scattering features (N, K, h, w).

  Args:
    key: the noise key of ``"data"`` normalisation (unused, and may be
      None, for the others, which draw nothing).
    recipe: the recipe; its ``norm`` a :class:`dpcore.options.FeatureNorm`.
    train_rows: the training features; ``"data"`` releases their channel
      statistics.
    test_rows: features normalised alike (group norm per example; the
      released statistics for ``"data"``).
    delta: δ of the normalisation's release.

  Returns:
    ``(train, test, plan)``: the rows flattened to (N, K·h·w) float32, and
    the normalisation's plan (``"data"``) or None.

  Raises:
    ValueError: an unknown ``norm``, or ``"data"`` without a key.
  """
  norm = options.parse(options.FeatureNorm, recipe.norm, "norm")
  plan = None
  if norm is options.FeatureNorm.GROUP:
    fn = functools.partial(normalization.group_norm,
                           num_groups=recipe.num_groups)
    train_rows, test_rows = (fn(jnp.asarray(train_rows)),
                             fn(jnp.asarray(test_rows)))
  elif norm is options.FeatureNorm.DATA:
    if key is None:
      raise ValueError("norm='data' releases noisy statistics: give it a "
                       "key.")
    plan = normalization.make_plan(
        epsilon=None, noise_multiplier=recipe.norm_noise_multiplier,
        delta=delta, num_examples=len(train_rows),
        channels=train_rows.shape[1], clip_mean=recipe.clip_mean,
        clip_square=recipe.clip_square)
    stats = normalization.release(key, plan, train_rows)
    train_rows = normalization.standardize(train_rows, stats)
    test_rows = normalization.standardize(test_rows, stats)

  def flat(v):
    return np.asarray(v, np.float32).reshape(len(v), -1)
  return flat(train_rows), flat(test_rows), plan


def make_plan(num_examples: int, recipe: Recipe, *, epsilon: float,
              delta: float, normalisation=None) -> trainer.DPSGDPlan:
  """DP-SGD's plan for ``recipe``, σ calibrated on the ledger's total ε.

  The sampling rate is ``batch_size / num_examples``; σ is the smallest
  for which a ledger holding ``normalisation`` (a plan recorded first, or
  None) and this plan reports at most ``epsilon`` at ``delta``
  (:func:`dpcore.trainer.make_ledger_plan`).

  Raises:
    ValueError: the normalisation alone spends ``epsilon``, or a setting
      DP-SGD refuses.
  """
  return trainer.make_ledger_plan(
      num_examples, epsilon=epsilon, delta=delta,
      sampling_rate=recipe.batch_size / num_examples,
      clip_norm=recipe.clip_norm, epochs=recipe.epochs,
      before=() if normalisation is None else (normalisation,))


def release(key: jax.Array, plan: trainer.DPSGDPlan, recipe: Recipe, x, y,
            num_classes: int) -> dict:
  """The softmax head's parameters after DP-SGD on (``x``, ``y``).

  ``plan`` is this recipe's (:func:`make_plan`, or a trial's of
  :func:`calibrate_tuning`); the optimiser is momentum SGD at the recipe's
  learning rate, from zero parameters. One compiled program serves every
  ε of the same shapes and recipe.
  """
  return _fit(key, plan, x, y, num_classes=num_classes,
              learning_rate=recipe.learning_rate, momentum=recipe.momentum)


@functools.partial(jax.jit, static_argnames=("num_classes", "learning_rate",
                                             "momentum"))
def _fit(key, plan, x, y, *, num_classes, learning_rate, momentum):
  """One program per shape and recipe: the plan is an argument (a pytree
  whose leaves are C, σ and the budget), so every ε reuses it."""
  params = softmax.initial_params(x.shape[1], num_classes)
  opt = optax.sgd(learning_rate, momentum=momentum)
  return trainer.train(key, plan, softmax.loss, params, (x, y), opt).params


def calibrate_tuning(num_examples: int, candidates, *, epsilon: float,
                     delta: float, count,
                     score_epsilon: float = SCORE_EPSILON):
  """Per-trial DP-SGD plans whose whole tuning is (``epsilon``, δ)-DP.

  One trial draws a candidate recipe uniformly at random, trains it on
  the fit rows and scores it by a Laplace-noised count of correct held-out
  rows (:func:`dpcore.tuning.scored_trials`); ``count`` is the law of the
  number of trials (:func:`dpcore.tuning.trial_count`). Every candidate's
  σ is calibrated (RDP, the curve the tuning theorem takes) for one
  per-trial target ε′, found by :func:`dpcore.tuning.calibrate`.

  Returns:
    ``(plans, trial privacy, guarantee, ε′)``.

  Raises:
    ValueError: a candidate with ``norm="data"`` (a release of its own in
      every trial, which this tuning does not account).
  """
  for c in candidates:
    if options.parse(options.FeatureNorm, c.norm,
                     "norm") is options.FeatureNorm.DATA:
      raise ValueError("a tuning candidate cannot use norm='data' (a "
                       "release per trial); use 'group' or 'none'.")

  def build(trial_epsilon):
    plans = [trainer.make_plan(
        num_examples, sampling_rate=c.batch_size / num_examples,
        clip_norm=c.clip_norm, epochs=c.epochs, epsilon=trial_epsilon,
        delta=delta) for c in candidates]
    return plans, tuning.any_of(
        *tuning.scored_trials(plans, score_epsilon=score_epsilon),
        description="one trial: a candidate drawn uniformly at random, "
        "trained by DP-SGD on the fit rows, scored on the held-out rows")

  return tuning.calibrate(build, epsilon=epsilon, delta=delta, count=count)
