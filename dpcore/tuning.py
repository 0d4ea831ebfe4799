"""Private hyperparameter selection: a random number of private trials.

Choosing a recipe by looking at results on the data is itself a release.
:func:`select` makes that choice private: it draws a number of trials K
from a public distribution, runs K trials (each a DP mechanism that picks a
candidate setting uniformly at random, trains, and scores the result
privately), and releases only the best trial (its candidate, output and
noisy score). The guarantee of the whole tuning follows from one trial's
by the theorems below, and goes into the run's
:class:`dpcore.accounting.PrivacyLedger` as ONE entry.

The bounds (Q is one trial, A the tuned algorithm; RDP is Rényi DP, ε(λ)
the trial's RDP at order λ; the output space is ordered by score):

* **Truncated negative binomial K ~ D(η, γ)**, η > −1, 0 < γ < 1, with
  P[K = k] = (1 − γ)^k / (γ^(−η) − 1) · Π_{l<k} (l + η)/(l + 1) for
  k ≥ 1 (η = 0: the logarithmic law (1 − γ)^k / (k log(1/γ)); η = 1: the
  geometric law γ(1 − γ)^(k−1)). Papernot & Steinke (ICLR 2022,
  "Hyperparameter Tuning with Renyi Differential Privacy"), Theorem 2: if
  Q is (λ, ε)- and (λ̂, ε̂)-RDP with λ > 1 and λ̂ ≥ 1, A is (λ, ε′)-RDP
  with ε′ = ε + (1 + η)(1 − 1/λ̂)ε̂ + (1 + η)log(1/γ)/λ̂ + log(E[K])/(λ − 1),
  where E[K] = η(1 − γ)/(γ(1 − γ^η)) (η ≠ 0) or (1/γ − 1)/log(1/γ)
  (η = 0). :func:`tuned_rdp` takes the least ε′ over every λ̂ of the
  order grid (and λ̂ = 1, where the ε̂ term vanishes), then uses that RDP
  is non-decreasing in λ (a bound at λ′ ≥ λ holds at λ).
* **Pure trials, same law** (their Corollary 3, the λ, λ̂ → ∞ limit of
  Theorem 2): Q ε-DP gives A (2 + η)ε-DP. With η = 1 this is Liu & Talwar
  (STOC 2019, "Private Selection from Private Candidates"), Theorem 3.1:
  random stopping with any stopping probability γ keeps an ε-DP Q 3ε-DP
  (:func:`liu_talwar_epsilon`).
* **Poisson K ~ Poisson(μ)** (K = 0 allowed: A then outputs nothing).
  Papernot & Steinke, Theorem 6: if Q is (λ, ε)-RDP and (ε̂, δ̂)-DP with
  e^ε̂ ≤ 1 + 1/(λ − 1), A is (λ, ε′)-RDP with
  ε′ = ε + μ·δ̂ + log(μ)/(λ − 1). :func:`tuned_rdp` takes
  ε̂ = log(1 + 1/(λ − 1)) and δ̂ from the trial's own RDP curve (the
  conversion of :func:`dp_accounting.rdp.rdp_privacy_accountant
  .compute_delta`).
* Trials known only by (ε, δ) are refused: Liu & Talwar also bound them
  (their Theorem 3.4), but that statement could not be checked against
  the paper here, so the library offers no bound it has not verified.

RDP becomes (ε, δ) by the conversion the ledger's RDP accountant uses
(``dp_accounting``'s ``compute_epsilon``: Canonne, Kamath & Steinke 2020,
Prop. 12). Where a trial also has a pure ε (TNB only) the smaller of the
RDP and the pure-DP figures is reported.

Each trial may run a different candidate: a trial that draws its candidate
uniformly at random is a mixture of the candidates' mechanisms, and Rényi
divergence is jointly quasi-convex, so the trial's RDP is at most the
pointwise maximum of the candidates' curves (:func:`any_of`).

What stays the user's responsibility: the candidate list (and the
distribution of K) must be fixed without looking at the private data.

>>> count = trial_count("geometric", 10.0)
>>> trial = pure_trial(1.0, relation="add_remove")
>>> round(tuned_guarantee(trial, count, delta=1e-6).epsilon, 6)
3.0
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
from dp_accounting import rdp as dp_rdp
from dp_accounting.rdp import rdp_privacy_accountant as rdp_math

from dpcore import accounting, calibration, noise, options, validation

"""Laws of the number of trials K (``negative_binomial`` needs η)."""

DEFAULT_ORDERS = tuple(float(a) for a in dp_rdp.RdpAccountant().orders)
"""Rényi orders of the trial curves: the ledger's RDP accountant's grid."""

_PURE_KINDS = ("pure", "laplace", "exponential", "discrete_laplace")
_MAX_TRIALS = 10_000_000


# -- the number of trials ------------------------------------------------------


def _is_finite(value) -> bool:
  return (isinstance(value, numbers.Real) and not isinstance(value, bool)
          and math.isfinite(float(value)))


def negative_binomial_mean(eta: float, gamma: float) -> float:
  """E[K] of the truncated negative binomial D(η, γ) (Papernot–Steinke)."""
  if eta == 0.0:
    return (1.0 / gamma - 1.0) / math.log(1.0 / gamma)
  # 1 − γ^η written with expm1 so that γ near 1 keeps its digits.
  return eta * (1.0 - gamma) / (gamma * -math.expm1(eta * math.log(gamma)))


def _solve_gamma(eta: float, mean: float) -> float:
  """The γ of D(η, γ) whose mean is ``mean`` (bisection on log γ)."""
  if eta == 1.0:
    return 1.0 / mean
  # On log γ, in [−700, 0]: the mean falls as γ grows.
  _, hi = calibration.bisect(
      lambda log_gamma: negative_binomial_mean(eta, math.exp(log_gamma))
      > mean, -700.0, 0.0, steps=200)
  return math.exp(hi)


@dataclasses.dataclass(frozen=True)
class TrialCount:
  """The public law of the number of trials K.

  Attributes:
    distribution: a :class:`dpcore.options.TrialDistribution` (or its spelling).
    expected: E[K] (μ for ``poisson``), exactly that of the law below.
    eta: η of the truncated negative binomial (None for ``poisson``).
    gamma: γ of the truncated negative binomial (None for ``poisson``).
  """
  distribution: str
  expected: float
  eta: float | None = None
  gamma: float | None = None

  def __post_init__(self):
    # The bound reads ``expected``, the sampler (η, γ): one law for both,
    # however the count was built (trial_count builds it so).
    kind = options.parse(options.TrialDistribution, self.distribution,
                         "distribution")
    if kind == "poisson":
      if self.eta is not None or self.gamma is not None:
        raise ValueError("a Poisson TrialCount has no eta or gamma; use "
                         "tuning.trial_count('poisson', mean).")
      if not (_is_finite(self.expected) and self.expected >= 1.0):
        raise ValueError(f"expected={self.expected!r}: a Poisson number of "
                         f"trials needs a finite mean ≥ 1.")
      return
    fixed = {"geometric": 1.0, "logarithmic": 0.0}.get(kind)
    eta, gamma = self.eta, self.gamma
    if not (_is_finite(eta) and eta > -1.0 and _is_finite(gamma)
            and 0.0 < gamma < 1.0) or (fixed is not None and eta != fixed):
      raise ValueError(
          f"TrialCount({kind!r}, eta={eta!r}, gamma={gamma!r}): needs "
          f"eta > -1 (1 for geometric, 0 for logarithmic) and 0 < gamma < "
          f"1; use tuning.trial_count(distribution, expected_trials).")
    mean = negative_binomial_mean(eta, gamma)
    if not (_is_finite(self.expected)
            and math.isclose(self.expected, mean, rel_tol=1e-12)):
      raise ValueError(
          f"expected={self.expected!r} is not the mean {mean!r} of "
          f"D(eta={eta}, gamma={gamma}): the bound would count other "
          f"trials than the sampler draws; use tuning.trial_count.")

  def log_pmf(self, k: int) -> float:
    """log P[K = k]."""
    if self.distribution == "poisson":
      mu = self.expected
      return -mu + k * math.log(mu) - math.lgamma(k + 1)
    if k < 1:
      return -math.inf
    eta, gamma = self.eta, self.gamma
    if eta == 0.0:
      first = math.log((1.0 - gamma) / math.log(1.0 / gamma))
    else:
      first = math.log(eta / math.expm1(-eta * math.log(gamma))) + math.log1p(
          -gamma)
    return (first + (k - 1) * math.log1p(-gamma)
            + math.lgamma(k + eta) - math.lgamma(1 + eta)
            - math.lgamma(k + 1))

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)


def trial_count(distribution: str, expected_trials: float, *,
                eta: float | None = None) -> TrialCount:
  """The law of K with mean ``expected_trials``, validated.

  Args:
    distribution: ``"poisson"`` (K may be 0), ``"geometric"`` (η = 1),
      ``"logarithmic"`` (η = 0) or ``"negative_binomial"`` (give ``eta``).
    expected_trials: E[K]; ≥ 1 for ``poisson`` and > 1 otherwise (the
      truncated laws have γ < 1, so E[K] > 1).
    eta: η > −1 of ``negative_binomial`` (not given for the others).
  """
  distribution = options.parse(options.TrialDistribution, distribution,
                               "distribution")
  fixed = {"geometric": 1.0, "logarithmic": 0.0}
  if distribution == "negative_binomial":
    if eta is None:
      raise ValueError("distribution='negative_binomial' needs eta > -1 "
                       "(eta=1 is 'geometric', eta=0 'logarithmic').")
    if not (validation.is_concrete(eta) and math.isfinite(float(eta))
            and float(eta) > -1.0):
      raise ValueError(f"eta={eta!r}: the truncated negative binomial "
                       f"needs a finite eta > -1 (e.g. eta=0.5).")
    eta = float(eta)
  elif eta is not None:
    raise ValueError(f"eta={eta!r} is only for distribution="
                     f"'negative_binomial' ({distribution!r} fixes it).")
  expected = validation.check_positive(expected_trials, "expected_trials")
  if expected > _MAX_TRIALS:
    raise ValueError(f"expected_trials={expected_trials!r}: at most "
                     f"{_MAX_TRIALS:,} expected trials are supported.")
  if distribution == "poisson":
    if expected < 1.0:
      raise ValueError(f"expected_trials={expected_trials!r}: a Poisson "
                       f"number of trials needs a mean of at least 1.")
    return TrialCount("poisson", expected)
  if expected <= 1.0:
    raise ValueError(f"expected_trials={expected_trials!r}: a truncated "
                     f"law (K ≥ 1) has a mean above 1; give e.g. 10, or "
                     f"run the one setting without tuning.")
  eta = fixed.get(distribution, eta)
  gamma = _solve_gamma(eta, expected)
  if not 0.0 < gamma < 1.0:
    raise ValueError(f"expected_trials={expected_trials!r} is too close to "
                     f"1 for eta={eta}: gamma would be {gamma}.")
  # The mean actually used is that of the γ found (the bound and the
  # sampler use the same law).
  return TrialCount(distribution, negative_binomial_mean(eta, gamma), eta,
                    gamma)


def _uniform(key: jax.Array) -> float:
  """A uniform in (0, 1) with 53 random bits, from ``key`` (host side)."""
  hi, lo = (int(w) for w in jax.random.bits(key, (2,), dtype=jnp.uint32))
  return ((hi >> 5) * 67108864 + (lo >> 6) + 0.5) / 9007199254740992.0


def sample_trial_count(key: jax.Array, count: TrialCount) -> int:
  """K ~ ``count``, by inversion of its CDF at a 53-bit uniform from key."""
  if not isinstance(count, TrialCount):
    raise ValueError(f"count must be a TrialCount (tuning.trial_count), "
                     f"got {type(count).__name__}.")
  u = _uniform(key)
  k = 0 if count.distribution == "poisson" else 1
  cdf = 0.0
  mode = count.expected
  while True:
    p = math.exp(count.log_pmf(k))
    cdf += p
    if cdf >= u or (k > mode and p < 1e-300):
      return k
    k += 1


def schedule(key: jax.Array, count: TrialCount, num_candidates: int
             ) -> np.ndarray:
  """The public part of a tuning: K, and which candidate each trial runs.

  K is drawn from ``fold_in(key, 0)``; the candidates uniformly at random,
  with replacement, from ``fold_in(key, 1)``. Trial i's own key is
  :func:`trial_key` (key, i). Nothing here reads data.
  """
  num_candidates = validation.check_positive_int(num_candidates,
                                                 "num_candidates")
  k = sample_trial_count(jax.random.fold_in(key, 0), count)
  if k == 0:
    return np.zeros((0,), np.int64)
  picks = jax.random.randint(jax.random.fold_in(key, 1), (k,), 0,
                             num_candidates)
  return np.asarray(picks, np.int64)


def trial_key(key: jax.Array, index: int) -> jax.Array:
  """The key of trial ``index`` of the tuning keyed by ``key``."""
  return jax.random.fold_in(jax.random.fold_in(key, 2), index)


# -- one trial's privacy -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrialPrivacy:
  """What one trial guarantees: its RDP curve, and a pure ε if it has one.

  Attributes:
    orders: Rényi orders λ (all > 1).
    rdp: ε(λ) of one trial at each order.
    pure_epsilon: ε if the trial is ε-DP (all its parts pure), else None.
    truncation_probability: P, the probability (on every data set) that
      the trial departs from its accounted mechanism (see
      :meth:`dpcore.accounting.PrivacyLedger.record_truncation`).
    description: what the trial is, for the record.
    relation: the neighbouring relation the curve holds under
      (:class:`dpcore.options.Relation`); None where it holds under
      either (:func:`score_privacy`'s count).
  """
  orders: tuple[float, ...]
  rdp: tuple[float, ...]
  pure_epsilon: float | None = None
  truncation_probability: float = 0.0
  description: str = ""
  relation: options.Relation | None = None

  def as_dict(self) -> dict:
    return {"pure_epsilon": self.pure_epsilon,
            "truncation_probability": self.truncation_probability,
            "description": self.description,
            "relation": None if self.relation is None else
                        self.relation.value}

  def epsilon(self, delta: float) -> float:
    """The trial's own ε at δ (RDP conversion, or its pure ε if smaller)."""
    eps, _ = rdp_math.compute_epsilon(self.orders, self.rdp, delta)
    if self.pure_epsilon is not None:
      eps = min(eps, self.pure_epsilon)
    return float(eps)


def _check_orders(orders) -> tuple[float, ...]:
  orders = tuple(float(a) for a in orders)
  if not orders or any(not (a > 1.0 and math.isfinite(a)) for a in orders):
    raise ValueError(f"orders must be finite Rényi orders > 1, got "
                     f"{orders!r}.")
  return orders


def _curve(events, orders) -> tuple[float, ...]:
  event = dp_accounting.ComposedDpEvent(list(events))
  accountant = dp_rdp.RdpAccountant(orders=list(orders))
  if not accountant.supports(event):
    raise ValueError("the per-trial mechanism has a step the RDP "
                     "accountant cannot describe; a trial must have an RDP "
                     "guarantee to be tuned.")
  accountant.compose(event)
  return tuple(float(r) for r in accountant.rdp)


def trial_privacy(ledger: accounting.PrivacyLedger, *,
                  orders: Sequence[float] = DEFAULT_ORDERS,
                  description: str = "") -> TrialPrivacy:
  """The privacy of one trial, read off a ledger holding exactly its steps.

  Record one trial's releases (its training run and its private score)
  in a fresh ledger, by the mechanisms' own ``record`` functions, and pass
  it here. Truncation entries are kept as the trial's departure
  probability.

  Raises:
    ValueError: an empty ledger (a trial without a guarantee), or a step
      known only by its (ε, δ) (no RDP description).
  """
  if not isinstance(ledger, accounting.PrivacyLedger):
    raise ValueError(f"ledger must be a dpcore.accounting.PrivacyLedger "
                     f"holding one trial's steps, got "
                     f"{type(ledger).__name__}.")
  orders = _check_orders(orders)
  entries = [e for e in ledger.entries if e.kind != "truncation"]
  if not entries:
    raise ValueError("the per-trial ledger records no private step: a "
                     "trial without a guarantee cannot be tuned privately.")
  loose = [e.label for e in entries if e.dp_event is None]
  if loose:
    raise ValueError(f"per-trial step(s) {loose} are known only by (ε, δ) "
                     f"and have no RDP description; record them by their "
                     f"mechanism (e.g. record_gaussian); a trial known "
                     f"only by (ε, δ) cannot be tuned here.")
  pure = None
  if all(e.kind in _PURE_KINDS and e.delta == 0.0 for e in entries):
    pure = math.fsum(e.epsilon for e in entries)
  slack = math.fsum(e.params["probability"] for e in ledger.entries
                    if e.kind == "truncation")
  return TrialPrivacy(orders, _curve([e.dp_event for e in entries], orders),
                      pure, min(1.0, slack),
                      description or "+".join(e.label for e in entries),
                      ledger.relation)


def pure_trial(epsilon: float, *, relation,
               orders: Sequence[float] = DEFAULT_ORDERS,
               description: str = "") -> TrialPrivacy:
  """An ε-DP trial (RDP: Laplace-like, min(ε, λε²/2) via ε²/2-zCDP).

  ``relation``: the neighbouring relation the ε holds under (required:
  an ε proven for add/remove is up to 2ε under replace-one, so the trial
  does not take the ledger's relation on trust).
  """
  epsilon = validation.check_epsilon(epsilon)
  orders = _check_orders(orders)
  relation = options.parse_relation(relation, "relation")
  event = dp_accounting.ZCDpEvent(epsilon**2 / 2.0)
  rdp = tuple(min(epsilon, r) for r in _curve([event], orders))
  return TrialPrivacy(orders, rdp, epsilon, 0.0,
                      description or f"pure {epsilon:g}-DP trial", relation)


def score_privacy(epsilon: float, *,
                  orders: Sequence[float] = DEFAULT_ORDERS) -> TrialPrivacy:
  """The privacy of :func:`noisy_accuracy` at ``epsilon`` (one release).

  The count changes by at most 1 under either relation, so the curve
  holds under both (``relation`` None).
  """
  epsilon = validation.check_epsilon(epsilon)
  ledger = accounting.PrivacyLedger(use_pld=False)
  ledger.record_laplace(scale=1.0 / epsilon, sensitivity=1.0,
                        label="noisy_validation_count",
                        relation=options.Relation.ADD_REMOVE)
  return dataclasses.replace(trial_privacy(ledger, orders=orders),
                             relation=None)


def _same_orders(trials) -> tuple[float, ...]:
  if not trials or not all(isinstance(t, TrialPrivacy) for t in trials):
    raise ValueError("give at least one TrialPrivacy.")
  orders = trials[0].orders
  if any(t.orders != orders for t in trials):
    raise ValueError("the trial curves must be on the same Rényi orders.")
  return orders


def any_of(*trials: TrialPrivacy, description: str = "") -> TrialPrivacy:
  """A trial that runs ONE of ``trials`` (a candidate chosen at random).

  A mixture of mechanisms has Rényi divergence at most the largest of
  theirs (joint quasi-convexity), so the curve is the pointwise maximum;
  the departure probability is the largest of theirs.
  """
  orders = _same_orders(trials)
  rdp = tuple(max(v) for v in zip(*(t.rdp for t in trials), strict=True))
  pures = [t.pure_epsilon for t in trials]
  pure = None if any(p is None for p in pures) else max(pures)
  return TrialPrivacy(orders, rdp, pure,
                      max(t.truncation_probability for t in trials),
                      description or "any of: " + "; ".join(
                          t.description for t in trials),
                      accounting.common_relation(trials, what="trials"))


def disjoint(*parts: TrialPrivacy, description: str = "") -> TrialPrivacy:
  """A trial whose parts read DISJOINT rows (e.g. train rows, held-out rows).

  Under add/remove of one row, the row is in one part only, and the other
  parts see the same rows (a part that uses another's output, such as a
  score of a trained model, is post-processing of that output given its
  own rows). The trial is therefore as private as its least private part
  at every order: the curve is the pointwise maximum. Every part runs, so
  the departure probabilities add up.
  """
  orders = _same_orders(parts)
  rdp = tuple(max(v) for v in zip(*(t.rdp for t in parts), strict=True))
  pures = [t.pure_epsilon for t in parts]
  pure = None if any(p is None for p in pures) else max(pures)
  slack = min(1.0, math.fsum(t.truncation_probability for t in parts))
  return TrialPrivacy(orders, rdp, pure, slack,
                      description or "disjoint rows: " + " | ".join(
                          t.description for t in parts),
                      accounting.common_relation(parts, what="trials"))


def scored_trials(plans: Sequence, *, score_epsilon: float,
                  orders: Sequence[float] = DEFAULT_ORDERS
                  ) -> list[TrialPrivacy]:
  """Each candidate's trial: trained by its plan, scored on other rows.

  Trial i trains candidate i on the fit rows by ``plans[i]`` (anything
  whose ``record(ledger)`` puts its releases in a ledger: the plans of
  the library's trainers) and scores the model by :func:`noisy_accuracy`
  at ``score_epsilon`` on held-out rows disjoint from the fit rows:
  :func:`disjoint` of the two curves. A trial that draws its candidate
  at random is :func:`any_of` the list.

  Raises:
    ValueError: no plans, or a plan whose record is not an RDP guarantee
      (:func:`trial_privacy`).
  """
  if isinstance(plans, (str, bytes)) or not isinstance(
      plans, Sequence) or len(plans) == 0:
    raise ValueError("plans must be a non-empty list of the candidates' "
                     "plans.")
  score = score_privacy(score_epsilon, orders=orders)
  trials = []
  for i, plan in enumerate(plans):
    ledger = accounting.PrivacyLedger()
    plan.record(ledger)
    trials.append(disjoint(
        trial_privacy(ledger, orders=orders,
                      description=f"candidate {i} training"),
        score, description=f"candidate {i}"))
  return trials


def calibrate(build: Callable[[float], tuple[Any, TrialPrivacy]], *,
              epsilon: float, delta: float, count: TrialCount,
              tolerance: float = 0.005
              ) -> tuple[Any, TrialPrivacy, TuningGuarantee, float]:
  """The per-trial target whose whole tuning is (``epsilon``, δ)-DP.

  ``build(ε′)`` calibrates every candidate for the per-trial target ε′
  and returns ``(plans, trial)``: whatever the caller trains from, and
  one trial's privacy (e.g. ``any_of(*scored_trials(plans, ...))``). The
  tuning's ε (:func:`tuned_guarantee` with K ~ ``count``) grows with ε′;
  the largest ε′ in [0.02·ε, ε] whose tuning meets ``epsilon`` is found
  by bisection on a log scale, to a relative ``tolerance``. Every ε′
  tried is public (a function of the settings alone), so the search
  reads no data.

  Returns:
    ``(plans, trial, guarantee, ε′)`` of the ε′ found; ``guarantee`` is
    the whole tuning's and its ε is at most ``epsilon``.

  Raises:
    ValueError: bad arguments, or a tuning that exceeds ``epsilon`` even
      at ε′ = 0.02·ε.
  """
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  tolerance = validation.check_positive(tolerance, "tolerance")
  if not callable(build):
    raise ValueError("build must be a function ε′ -> (plans, trial "
                     "privacy).")

  def attempt(trial_epsilon):
    plans, trial = build(trial_epsilon)
    return plans, trial, tuned_guarantee(trial, count, delta=delta)

  lo, hi = 0.02 * epsilon, epsilon  # the tuning meets ε at lo, not at hi
  best = attempt(lo)
  if best[2].epsilon > epsilon:
    raise ValueError(f"epsilon={epsilon:g} is too small for this tuning "
                     f"(even a per-trial epsilon of {lo:g} exceeds it); "
                     f"raise epsilon or lower the expected number of "
                     f"trials.")
  tried = {lo: best}

  def within(trial_epsilon):
    tried[trial_epsilon] = attempt(trial_epsilon)
    return tried[trial_epsilon][2].epsilon <= epsilon

  lo, _ = calibration.bisect(within, lo, hi, rtol=tolerance, geometric=True)
  return (*tried[lo], lo)


# -- the tuned algorithm's privacy --------------------------------------------


def _monotone(orders, values) -> np.ndarray:
  """RDP is non-decreasing in λ: ε(λ) ≤ min over λ′ ≥ λ of the bound."""
  order = np.argsort(orders)
  out = np.asarray(values, np.float64)[order]
  out = np.minimum.accumulate(out[::-1])[::-1]
  result = np.empty_like(out)
  result[order] = out
  return result


def tuned_rdp(trial: TrialPrivacy, count: TrialCount) -> np.ndarray:
  """The tuned algorithm's RDP at ``trial.orders`` (module docstring)."""
  orders = np.asarray(trial.orders, np.float64)
  eps = np.asarray(trial.rdp, np.float64)
  if count.distribution == "poisson":
    mu = count.expected
    out = []
    for lam, e in zip(orders, eps, strict=True):
      eps_hat = math.log1p(1.0 / (lam - 1.0))
      delta_hat, _ = rdp_math.compute_delta(orders, eps, eps_hat)
      out.append(e + mu * delta_hat + math.log(mu) / (lam - 1.0))
    return _monotone(orders, out)
  eta, gamma = count.eta, count.gamma
  log_inv_gamma = -math.log(gamma)
  # λ̂ = 1 (the ε̂ term vanishes) and every order of the grid.
  inner = min([log_inv_gamma] + list(
      (1.0 - 1.0 / orders) * eps + log_inv_gamma / orders))
  out = eps + (1.0 + eta) * inner + math.log(count.expected) / (orders - 1.0)
  return _monotone(orders, out)


@dataclasses.dataclass(frozen=True)
class TuningGuarantee:
  """The (ε, δ) of a whole tuning, and how it was obtained.

  Attributes:
    epsilon: the reported ε (smallest valid).
    delta: its δ (includes (1 + e^ε)·E[K]·P for trials that may depart
      from their accounting with probability P).
    method: ``"rdp"`` (Papernot–Steinke Thm 2 or 6, then the RDP
      conversion) or ``"pure"`` ((2 + η)ε; Liu–Talwar 3ε when η = 1).
    epsilon_rdp: ε by the RDP route.
    epsilon_pure: ε by the pure route (None where it does not apply).
    order: the Rényi order of ``epsilon_rdp``.
    trial_epsilon: one trial's own ε at ``delta`` (for comparison).
    count: the law of K.
    trial: the per-trial guarantee.
  """
  epsilon: float
  delta: float
  method: str
  epsilon_rdp: float
  epsilon_pure: float | None
  order: float
  trial_epsilon: float
  count: TrialCount
  trial: TrialPrivacy

  def as_dict(self) -> dict:
    return {"epsilon": self.epsilon, "delta": self.delta,
            "method": self.method, "epsilon_rdp": self.epsilon_rdp,
            "epsilon_pure": self.epsilon_pure, "order": self.order,
            "trial_epsilon": self.trial_epsilon,
            "count": self.count.as_dict(), "trial": self.trial.as_dict()}


def _tuned_at(trial, count, curve, delta):
  eps_rdp, order = rdp_math.compute_epsilon(trial.orders, curve, delta)
  eps_pure = None
  if trial.pure_epsilon is not None and count.distribution != "poisson":
    eps_pure = (2.0 + count.eta) * trial.pure_epsilon
  eps = float(eps_rdp) if eps_pure is None else min(float(eps_rdp), eps_pure)
  method = "pure" if eps_pure is not None and eps_pure <= eps_rdp else "rdp"
  return eps, method, float(eps_rdp), eps_pure, float(order)


def _departure_delta(epsilon: float, probability: float) -> float:
  """(1 + e^ε)·P: the δ that a departure of probability P adds."""
  if epsilon + math.log(probability) > 0.0:
    return 1.0
  return min(1.0, probability * (1.0 + math.exp(epsilon)))


def tuned_guarantee(trial: TrialPrivacy, count: TrialCount, *,
                    delta: float) -> TuningGuarantee:
  """The (ε, δ) of tuning with K ~ ``count`` trials, each as ``trial``.

  Trials that depart from their accounting with probability P (e.g. a
  padded Poisson batch) make the tuning depart with probability at most
  E[K]·P (a union bound over the trials run); as in the ledger, the ideal
  tuning is then read at δ′ = δ − (1 + e^ε½)·E[K]·P, with ε½ its ε at δ/2.

  Raises:
    ValueError: bad arguments, or a departure probability too large for δ.
  """
  if not isinstance(trial, TrialPrivacy):
    raise ValueError(f"trial must be a TrialPrivacy (tuning.trial_privacy, "
                     f"pure_trial, ...), got {type(trial).__name__}: a "
                     f"per-trial mechanism needs a guarantee.")
  if not isinstance(count, TrialCount):
    raise ValueError(f"count must be a TrialCount (tuning.trial_count), "
                     f"got {type(count).__name__}.")
  delta = validation.check_delta(delta)
  curve = tuned_rdp(trial, count)
  slack = count.expected * trial.truncation_probability
  inner = delta
  if slack > 0.0:
    half, *_ = _tuned_at(trial, count, curve, delta / 2.0)
    inner = delta - _departure_delta(half, slack)
    if inner < delta / 2.0:
      raise ValueError(
          f"the trials' departure probability ("
          f"{trial.truncation_probability:.3g} each, {slack:.3g} over E[K] "
          f"trials) is too large for "
          f"delta={delta:g}; raise delta or lower the departure.")
  eps, method, eps_rdp, eps_pure, order = _tuned_at(trial, count, curve,
                                                    inner)
  return TuningGuarantee(eps, delta, method, eps_rdp, eps_pure, order,
                         trial.epsilon(delta), count, trial)


def liu_talwar_epsilon(epsilon: float) -> float:
  """Liu & Talwar, Thm 3.1: random stopping keeps ε-DP trials 3ε-DP."""
  return 3.0 * validation.check_epsilon(epsilon)


# -- the private score ---------------------------------------------------------


def noisy_accuracy(key: jax.Array, correct, n: int, *, epsilon: float
                   ) -> jax.Array:
  """(correct + Laplace(1/ε)) / n: a private accuracy on held-out rows.

  Privacy: the count of correctly classified held-out rows changes by at
  most 1 when one held-out row is added or removed (or replaced), so the
  Laplace noise of scale 1/ε makes each released count ε-DP with respect
  to the held-out rows (:func:`score_privacy` is its RDP curve). ``n``,
  the number of held-out rows, is treated as public, as the trainer's plan
  treats N: it only rescales the count.

  Args:
    key: PRNG key (one per release).
    correct: the count(s) of correct predictions; any shape, each entry
      a separate release of ε.
    n: number of held-out rows (> 0).
    epsilon: ε of each release.
  """
  key = validation.check_key(key)
  epsilon = validation.check_epsilon(epsilon)
  n = validation.check_positive_int(n, "n")
  correct = jnp.asarray(correct, jnp.float32)
  noisy = correct + noise.laplace_noise(key, correct.shape,
                                        scale=1.0 / epsilon)
  return noisy / n


# -- the selection -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TuningResult:
  """What :func:`select` released, and what it cost.

  Only what the guarantee covers: the best trial's candidate, output and
  score, and the public law of K. The number of trials K, the candidates
  they drew and the other trials' scores stay inside :func:`select`: the
  random-stopping theorems bound the best trial's output with K hidden,
  and conditioned on K it is a best-of-K selection whose loss grows with
  K (an audit that reads K beside the score finds more than the bound).

  Attributes:
    winner: index of the best trial's candidate (None when K = 0).
    candidate: that candidate (None when K = 0).
    output: the best trial's output (None when K = 0).
    score: its private score (None when K = 0).
    guarantee: the tuning's :class:`TuningGuarantee` (holds the law of K).
  """
  winner: int | None
  candidate: Any
  output: Any
  score: float | None
  guarantee: TuningGuarantee

  def record(self) -> dict:
    """The JSON-ready record: winner, score, the law of K, the guarantee."""
    g = self.guarantee
    return {"winner": self.winner, "score": self.score,
            "expected_trials": g.count.expected,
            "distribution": g.count.distribution, "eta": g.count.eta,
            "gamma": g.count.gamma, "guarantee": g.as_dict()}


def entry_label(guarantee: TuningGuarantee, *, winner,
                label: str = "tuning") -> str:
  """The ledger label of a tuning: its public law of K and the winner."""
  c = guarantee.count
  return (f"{label} ({c.distribution}, E[K]={c.expected:g}; winner "
          f"{winner})")


def record(ledger: accounting.PrivacyLedger, guarantee: TuningGuarantee, *,
           winner, label: str = "tuning") -> None:
  """Records a whole tuning in ``ledger`` as ONE (ε, δ) entry.

  The ledger takes no RDP curve from outside, so the tuning is recorded by
  :meth:`~dpcore.accounting.PrivacyLedger.record_approx` at its (ε, δ):
  it composes with the run's other steps by basic composition (the
  ledger's ``…+basic``). Give the tuning the share of the run's δ it was
  computed at. The entry's relation is the trials' (a trial that holds
  under either relation takes the ledger's).

  Raises:
    ValueError: not a guarantee, or neither the trials nor the ledger
      state a neighbouring relation.
  """
  if not isinstance(guarantee, TuningGuarantee):
    raise ValueError("guarantee must be a tuning.TuningGuarantee "
                     "(tuning.tuned_guarantee).")
  relation = guarantee.trial.relation or ledger.relation
  if relation is None:
    raise ValueError(
        "the tuning's trials hold under either neighbouring relation and "
        "the ledger has none yet; pass PrivacyLedger(relation=...) to say "
        "which one the run's guarantee is stated under.")
  c = guarantee.count
  ledger.record_approx(
      guarantee.epsilon, guarantee.delta,
      label=entry_label(guarantee, winner=winner, label=label),
      params={"winner": winner, "expected_trials": c.expected,
              "distribution": c.distribution}, relation=relation)


def select(key: jax.Array, candidates: Sequence, trial: Callable, *,
           count: TrialCount, privacy: TrialPrivacy, delta: float,
           ledger: accounting.PrivacyLedger | None = None,
           label: str = "tuning") -> TuningResult:
  """Private selection: K ~ ``count`` trials, the best one released.

  Draws K and the trials' candidates (uniformly at random, with
  replacement) by :func:`schedule`; trial i runs ``trial(trial_key(key,
  i), candidates[c_i])``, which returns ``(score, output)``, the score a
  private part of the trial's output (e.g. :func:`noisy_accuracy`). The
  first trial with the highest score is released, and nothing else: K,
  the schedule and the other scores are not returned (see
  :class:`TuningResult`). K = 0 (Poisson only) releases nothing
  (``winner`` None), as the theorem's ⊥.

  Privacy: ``privacy`` must cover one trial whatever candidate it draws
  (e.g. :func:`any_of` of the candidates' curves, each its training run
  and its score); the tuning is then (ε, δ)-DP with ε of
  :func:`tuned_guarantee` at ``delta`` (Papernot–Steinke Thm 2 / 6, or
  (2 + η)ε for pure trials), under the trial's own neighbouring relation.
  The guarantee is computed, and bad input refused, before any trial
  runs; with ``ledger`` it is recorded there as ONE entry (:func:`record`).

  Args:
    key: PRNG key; the only randomness besides the trials' own.
    candidates: the settings to choose from (non-empty; fixed without
      looking at the private data).
    trial: ``(key, candidate) -> (score, output)``.
    count: the law of K (:func:`trial_count`).
    privacy: one trial's guarantee.
    delta: δ of the reported guarantee.
    ledger: optional ledger to record the tuning in.
    label: the ledger entry's label.
  """
  key = validation.check_key(key)
  if isinstance(candidates, (str, bytes)) or not isinstance(
      candidates, Sequence) or len(candidates) == 0:
    raise ValueError("candidates must be a non-empty list of settings "
                     "(fixed before looking at the data).")
  if not callable(trial):
    raise ValueError("trial must be a function (key, candidate) -> "
                     "(score, output).")
  if ledger is not None and not isinstance(ledger,
                                           accounting.PrivacyLedger):
    raise ValueError("ledger must be a dpcore.accounting.PrivacyLedger.")
  guarantee = tuned_guarantee(privacy, count, delta=delta)
  picks = schedule(key, count, len(candidates))
  best, best_score, best_output = None, None, None
  for i, c in enumerate(picks):
    score, output = trial(trial_key(key, i), candidates[int(c)])
    score = float(score)
    if best_score is None or score > best_score:
      best, best_score, best_output = int(c), score, output
  result = TuningResult(best, None if best is None else candidates[best],
                        best_output, best_score, guarantee)
  if ledger is not None:
    record(ledger, guarantee, winner=best, label=label)
  return result


__all__ = ["DEFAULT_ORDERS", "TrialCount", "TrialPrivacy",
           "TuningGuarantee", "TuningResult", "any_of", "calibrate",
           "disjoint",
           "entry_label", "liu_talwar_epsilon",
           "negative_binomial_mean", "noisy_accuracy", "pure_trial",
           "record", "sample_trial_count", "schedule", "score_privacy",
           "scored_trials",
           "select", "trial_count", "trial_key", "trial_privacy",
           "tuned_guarantee", "tuned_rdp"]
