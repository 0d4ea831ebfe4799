"""Audit specs of private hyperparameter selection (:mod:`dpcore.tuning`).

The toy: each trial picks one of a few candidates (public offsets added to
the score) uniformly at random and releases a canary count plus Laplace
noise of scale 1/ε (an ε-DP trial); the tuning runs K trials and releases
the best score. K follows each law the library accounts (:data:`LAWS`):
geometric (``tuning_laplace``, E[K] = 10), Poisson (``tuning_poisson``,
K may be 0: nothing is released then), the truncated negative binomial
with η = ½ (``tuning_negative_binomial``) and the logarithmic law
(``tuning_logarithmic``, η = 0, E[K] = 5). The neighbours are the count
without and with the canary (0 and 1, add/remove of one row); the data
is one count, so there are no positions.

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

and for the other laws, the mistake the audit catches there:
``tuning_poisson_per_trial_epsilon`` (Poisson's bound is loose enough
that a fixed K stays below it), ``tuning_negative_binomial_fixed_k`` and
``tuning_logarithmic_fixed_k``.

Geometric K is drawn inside jit as 1 + ⌊E/log(1/(1 − γ))⌋ with
E ~ Exp(1) and capped at 256 (P[K > 256] = 0.9²⁵⁶ ≈ 2·10⁻¹² at E[K] =
10); the other laws by inversion (:func:`_trial_count_sampler`), capped
at 512. 100 000 tuned runs per side vmap in a few seconds.
"""

from __future__ import annotations

import itertools
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


LAWS = {"geometric": (10.0, None), "poisson": (10.0, None),
        "negative_binomial": (10.0, 0.5), "logarithmic": (5.0, None)}
"""Each law of K audited (every :class:`dpcore.options.TrialDistribution`),
with its E[K] and η. The caps on K (256 for the geometric law, 512 for
the others) leave out less than 2·10⁻¹² of each law."""


def _trial_count_sampler(count: tuning.TrialCount, max_trials: int):
  """``key -> K`` inside jit, K ~ ``count`` capped at ``max_trials``.

  Geometric K is 1 + ⌊E/log(1/(1 − γ))⌋ with E ~ Exp(1); the other laws
  are inverted from their survival function P[K > k] (host-side, from
  ``count.log_pmf``) at a float32 uniform, which matches each P[K > k]
  to within the uniform's 2⁻²³ steps, far below what 10⁵ runs resolve.
  """
  if count.distribution == "geometric":
    rate = -math.log1p(-count.gamma)  # P[K > k] = e^{-rate·k}

    def draw(key):
      return 1 + jnp.floor(noise.exponential_noise(key, ()) / rate).astype(
          jnp.int32)
    return draw
  cdf = itertools.accumulate(math.exp(count.log_pmf(k))
                             for k in range(max_trials))
  survival = jnp.asarray([max(0.0, 1.0 - c) for c in cdf], jnp.float32)

  def draw(key):  # K = #{k : P[K > k] > u}
    u = jax.random.uniform(key, (), jnp.float32)
    return jnp.sum(survival > u, dtype=jnp.int32)
  return draw


def tuned_laplace_spec(*, epsilon: float = 1.0,
                       distribution: str = "geometric",
                       expected_trials: float | None = None,
                       delta: float = 1e-5, max_trials: int | None = None,
                       broken: str | None = None) -> AuditSpec:
  """Tuning of a Laplace count over :data:`OFFSETS`, K ~ ``distribution``
  (E[K] and η from :data:`LAWS` unless ``expected_trials`` is given).

  ``broken``: ``None``; ``"per_trial_epsilon"`` (reports one trial's ε);
  ``"fixed_k"`` (runs K = E[K] trials every time, reports the random-K
  bound); ``"k_released"`` (releases K beside the score).
  """
  if broken not in (None, "per_trial_epsilon", "fixed_k", "k_released"):
    raise ValueError(f"broken={broken!r}: choose None, 'per_trial_epsilon', "
                     f"'fixed_k' or 'k_released'.")
  if distribution not in LAWS:
    raise ValueError(f"distribution={distribution!r}: choose one of "
                     f"{sorted(LAWS)}.")
  mean, eta = LAWS[distribution]
  count = tuning.trial_count(
      distribution, mean if expected_trials is None else expected_trials,
      **({} if eta is None else {"eta": eta}))
  max_trials = max_trials or (256 if distribution == "geometric" else 512)
  trial = _trial_privacy(epsilon)
  guarantee = tuning.tuned_guarantee(trial, count, delta=delta)
  reported = (trial.epsilon(delta) if broken == "per_trial_epsilon"
              else guarantee.epsilon)
  draw_k = _trial_count_sampler(count, max_trials)
  fixed = int(round(count.expected))
  offsets = jnp.asarray(OFFSETS, jnp.float32)
  scale = 1.0 / epsilon

  def mechanism(key, canary):
    k_count, k_pick, k_noise = jax.random.split(key, 3)
    k = jnp.int32(fixed) if broken == "fixed_k" else draw_k(k_count)
    picks = jax.random.randint(k_pick, (max_trials,), 0, len(OFFSETS))
    scores = canary + offsets[picks] + noise.laplace_noise(
        k_noise, (max_trials,), scale=scale)
    ran = jnp.arange(max_trials) < k
    best = jnp.max(jnp.where(ran, scores, -jnp.inf))
    return (best, k) if broken == "k_released" else best

  def statistic(out):
    if broken != "k_released":
      # The released best score, all a tuning releases; K = 0 (Poisson)
      # releases nothing, the max of no score, read as a finite −10⁶.
      return jnp.where(jnp.isfinite(out), out, -1e6)
    best, k = out
    # Reads K too: low scores among runs of at least K_LEAK trials, every
    # other run pushed beyond any threshold.
    return jnp.where(k >= K_LEAK, best, 1e6)

  if distribution == "geometric":  # the first law audited keeps its names
    name = "tuning_laplace" if broken is None else f"tuning_{broken}"
  else:
    name = "_".join(["tuning", distribution] + ([broken] if broken else []))
  return AuditSpec(
      name=name, relation="add_remove",
      settings={"epsilon_trial": epsilon, "expected_trials": count.expected,
                "released": "score and K" if broken == "k_released"
                else "score",
                "distribution": distribution, "eta": count.eta,
                "offsets": list(OFFSETS), "max_trials": max_trials,
                "trials_run": "E[K] every time" if broken == "fixed_k"
                else distribution,
                "method": guarantee.method},
      mechanism=mechanism, data_0=jnp.float32(0.0), data_1=jnp.float32(1.0),
      statistic=statistic, delta=delta, reported_epsilon=reported,
      nominal_epsilon=None, default_trials=100_000, broken=broken is not None)


OTHER_LAWS_BROKEN = {"poisson": "per_trial_epsilon",
                     "negative_binomial": "fixed_k",
                     "logarithmic": "fixed_k"}
"""The broken variant audited for each law but the geometric."""


def specs() -> list[AuditSpec]:
  """The tuning audits: one per law of K, the geometric law's three broken
  variants, then one broken variant of each other law."""
  return [*(tuned_laplace_spec(distribution=law) for law in LAWS),
          tuned_laplace_spec(broken="per_trial_epsilon"),
          tuned_laplace_spec(broken="fixed_k"),
          tuned_laplace_spec(broken="k_released"),
          *(tuned_laplace_spec(distribution=law, broken=broken)
            for law, broken in OTHER_LAWS_BROKEN.items())]


__all__ = ["K_LEAK", "LAWS", "OFFSETS", "OTHER_LAWS_BROKEN", "specs",
           "tuned_laplace_spec"]
