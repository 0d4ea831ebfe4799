"""Audit specs of private hyperparameter selection (:mod:`dpcore.tuning`).

The toy: each trial picks one of a few candidates (public offsets added to
the score) uniformly at random and releases a canary count plus Laplace
noise of scale 1/ε (an ε-DP trial); the tuning runs K ~ Geometric(γ)
trials (E[K] = 1/γ) and releases the best score. The neighbours are the
count without and with the canary (0 and 1, add/remove of one row).

The released maximum of K noisy scores is where tuning leaks more than one
trial: its lower tail P[max ≤ t] = E[F(t)^K] moves by more than e^ε when
the canary shifts every score. The unbroken spec reports the tuning's ε
from :func:`dpcore.tuning.tuned_guarantee`; two deliberately wrong ones
must be caught:

* ``tuning_per_trial_epsilon``: the one trial's ε reported for the whole
  tuning (the cost of tuning forgotten);
* ``tuning_fixed_k``: K fixed at E[K] instead of drawn, but accounted as
  if it were random (the randomness of K is what the theorem needs);
* ``tuning_k_released``: K released beside the best score (as a record
  or a progress line would): the statistic reads both, the event
  {score ≤ t and K ≥ 5} fixed in advance. Given K the output is a
  best-of-K selection, whose loss grows with K.

K is drawn inside jit as 1 + ⌊E/log(1/(1 − γ))⌋ with E ~ Exp(1), and
capped at ``max_trials`` (P[K > 256] = 0.9²⁵⁶ ≈ 2·10⁻¹² at E[K] = 10), so
100 000 tuned runs per side vmap in a few seconds.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from dpcore import accounting, noise, tuning
from dpcore.audit_spec import AuditSpec

OFFSETS = (0.0, 0.5, -0.5)
"""The candidates: public shifts of the score."""

K_LEAK = 5
"""``tuning_k_released`` reads runs of at least this many trials."""


def _trial_privacy(epsilon: float) -> tuning.TrialPrivacy:
  ledger = accounting.PrivacyLedger(use_pld=False)
  ledger.record_laplace(scale=1.0 / epsilon, sensitivity=1.0,
                        label="canary_count", relation="add_remove")
  return tuning.trial_privacy(ledger)


def tuned_laplace_spec(*, epsilon: float = 1.0, expected_trials: float = 10.0,
                       delta: float = 1e-5, max_trials: int = 256,
                       broken: str | None = None) -> AuditSpec:
  """Tuning of a Laplace count over :data:`OFFSETS`, geometric K.

  ``broken``: ``None``; ``"per_trial_epsilon"`` (reports one trial's ε);
  ``"fixed_k"`` (runs K = E[K] trials every time, reports the random-K
  bound); ``"k_released"`` (releases K beside the score).
  """
  if broken not in (None, "per_trial_epsilon", "fixed_k", "k_released"):
    raise ValueError(f"broken={broken!r}: choose None, 'per_trial_epsilon', "
                     f"'fixed_k' or 'k_released'.")
  count = tuning.trial_count("geometric", expected_trials)
  trial = _trial_privacy(epsilon)
  guarantee = tuning.tuned_guarantee(trial, count, delta=delta)
  reported = (trial.epsilon(delta) if broken == "per_trial_epsilon"
              else guarantee.epsilon)
  rate = -math.log1p(-count.gamma)  # P[K > k] = e^{-rate·k}
  fixed = int(round(count.expected))
  offsets = jnp.asarray(OFFSETS, jnp.float32)
  scale = 1.0 / epsilon

  def mechanism(key, canary):
    k_count, k_pick, k_noise = jax.random.split(key, 3)
    if broken == "fixed_k":
      k = jnp.int32(fixed)
    else:
      e = noise.exponential_noise(k_count, ())
      k = 1 + jnp.floor(e / rate).astype(jnp.int32)
    picks = jax.random.randint(k_pick, (max_trials,), 0, len(OFFSETS))
    scores = canary + offsets[picks] + noise.laplace_noise(
        k_noise, (max_trials,), scale=scale)
    ran = jnp.arange(max_trials) < k
    best = jnp.max(jnp.where(ran, scores, -jnp.inf))
    return (best, k) if broken == "k_released" else best

  def statistic(out):
    if broken != "k_released":
      return out  # the released best score: all a tuning releases
    best, k = out
    # Reads K too: low scores among runs of at least K_LEAK trials, every
    # other run pushed beyond any threshold.
    return jnp.where(k >= K_LEAK, best, 1e6)

  name = "tuning_laplace" if broken is None else f"tuning_{broken}"
  return AuditSpec(
      name=name, relation="add_remove",
      settings={"epsilon_trial": epsilon, "expected_trials": count.expected,
                "released": "score and K" if broken == "k_released"
                else "score",
                "distribution": "geometric", "offsets": list(OFFSETS),
                "max_trials": max_trials,
                "trials_run": "E[K] every time" if broken == "fixed_k"
                else "geometric",
                "method": guarantee.method},
      mechanism=mechanism, data_0=jnp.float32(0.0), data_1=jnp.float32(1.0),
      statistic=statistic, delta=delta, reported_epsilon=reported,
      nominal_epsilon=None, default_trials=100_000, broken=broken is not None)


def specs() -> list[AuditSpec]:
  """The tuning audits: the unbroken one and the three broken variants."""
  return [tuned_laplace_spec(),
          tuned_laplace_spec(broken="per_trial_epsilon"),
          tuned_laplace_spec(broken="fixed_k"),
          tuned_laplace_spec(broken="k_released")]


__all__ = ["K_LEAK", "OFFSETS", "specs", "tuned_laplace_spec"]
