"""Audits of private hyperparameter selection (``dpcore.tuning``).

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
  if it were random (the randomness of K is what the theorem needs).

K is drawn inside jit as 1 + ⌊E/log(1/(1 − γ))⌋ with E ~ Exp(1), and
capped at ``max_trials`` (P[K > 256] = 0.9²⁵⁶ ≈ 2·10⁻¹² at E[K] = 10), so
100 000 tuned runs per side vmap in a few seconds.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from dpcore import accounting, noise, tuning
from launch.experiments.audit_spec import AuditSpec

OFFSETS = (0.0, 0.5, -0.5)
"""The candidates: public shifts of the score."""


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
  bound).
  """
  if broken not in (None, "per_trial_epsilon", "fixed_k"):
    raise ValueError(f"broken={broken!r}: choose None, 'per_trial_epsilon' "
                     f"or 'fixed_k'.")
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
    return jnp.max(jnp.where(ran, scores, -jnp.inf))

  name = "tuning_laplace" if broken is None else f"tuning_{broken}"
  return AuditSpec(
      name=name, relation="add_remove",
      settings={"epsilon_trial": epsilon, "expected_trials": count.expected,
                "distribution": "geometric", "offsets": list(OFFSETS),
                "max_trials": max_trials,
                "trials_run": "E[K] every time" if broken == "fixed_k"
                else "geometric",
                "method": guarantee.method},
      mechanism=mechanism, data_0=jnp.float32(0.0), data_1=jnp.float32(1.0),
      statistic=lambda out: out, delta=delta, reported_epsilon=reported,
      nominal_epsilon=None, default_trials=100_000, broken=broken is not None)


def specs() -> list[AuditSpec]:
  """The tuning audits: the unbroken one and the two broken variants."""
  return [tuned_laplace_spec(),
          tuned_laplace_spec(broken="per_trial_epsilon"),
          tuned_laplace_spec(broken="fixed_k")]


__all__ = ["OFFSETS", "specs", "tuned_laplace_spec"]
