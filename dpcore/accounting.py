"""Host-side privacy accounting over ``dp_accounting``.

A :class:`PrivacyLedger` records every private access a run makes and
reports the composed guarantee of all of them:

* ``basic``: sequential composition, Σεᵢ and Σδᵢ of each step's own
  stand-alone guarantee (always valid);
* ``rdp``: Rényi-DP composition (dp_accounting's RDP accountant) of the
  steps' exact descriptions, at a stated δ;
* ``pld``: privacy-loss-distribution composition, where every step is one
  the PLD accountant supports.

Steps known only by their (ε, δ) pair (``record_approx``) have no exact
description; when they are mixed with exact ones, the exact ones are
composed by RDP/PLD at what is left of δ and the (ε, δ) steps are added on
by basic composition (method ``"rdp+basic"`` / ``"pld+basic"``).

The reported ``epsilon`` is the smallest of the valid ones at the reported
``delta``. Nothing here is jitted: events in, (ε, δ) out.

Every step is recorded under the neighbouring relation its guarantee is
stated for (``relation=``, a :class:`dpcore.options.Relation`; the
mechanisms' ``record`` functions pass theirs). A ledger holds steps of ONE
relation: recording a step under another is refused (a ``ValueError``),
because composing an add/remove guarantee with a replace-one guarantee
gives neither. No conversion is made: record the step by a mechanism
calibrated for the ledger's relation, or keep separate ledgers. The
relation is reported with the guarantee (``"relation"``).

>>> ledger = PrivacyLedger()
>>> ledger.record_exponential(1.0, count=400, label="selections",
...                           relation="replace_one")
>>> g = ledger.guarantee(delta=1e-5)
>>> round(g.basic_epsilon), round(g.epsilon, 1), g.relation.value
(400, 96.1, 'replace_one')
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math

import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp

from dpcore import calibration, options, validation

__all__ = [
    "BudgetExceededError",
    "Guarantee",
    "LedgerEntry",
    "NON_PRIVATE",
    "PRIVACY_FIELDS",
    "PrivacyLedger",
    "calibrate_dpsgd_noise",
    "common_relation",
    "dpsgd_epsilon",
    "dpsgd_event",
    "dpsgd_steps",
    "gaussian_epsilon",
    "no_guarantee_record",
    "composed_epsilon",
    "plan_epsilon",
    "privacy_record",
    "zcdp_epsilon",
    "zcdp_event",
]

# A relation argument: a dpcore.options.Relation or its spelling.
_Rel = options.Relation | str


class BudgetExceededError(RuntimeError):
  """Raised when recording a step would spend more than the declared budget."""


@dataclasses.dataclass(frozen=True)
class LedgerEntry:
  """One recorded private step (possibly repeated ``count`` times).

  Attributes:
    label: what the step was (e.g. ``"dp_pca"``).
    kind: ``pure``, ``laplace``, ``gaussian``, ``approx``,
      ``subsampled_gaussian`` or ``exponential``.
    epsilon: stand-alone ε of the whole entry (all repetitions), for basic
      composition.
    delta: stand-alone δ of the whole entry.
    dp_event: exact description for RDP/PLD accounting, or ``None`` where
      only the (ε, δ) pair is known.
    params: the parameters the entry was recorded with.
    relation: the neighbouring relation the entry's guarantee is stated
      under (:class:`dpcore.options.Relation`); ``None`` for truncation
      events, whose probability bound holds on every data set.
    rdp_curve: ``(orders, rdp)`` for a step known by its Rényi curve only
      (:meth:`PrivacyLedger.record_rdp_curve`), else None.
  """
  label: str
  kind: str
  epsilon: float
  delta: float
  dp_event: dp_accounting.DpEvent | None
  params: dict
  relation: options.Relation | None = None
  rdp_curve: tuple[tuple[float, ...], tuple[float, ...]] | None = None


@dataclasses.dataclass(frozen=True)
class Guarantee:
  """A composed guarantee: ``(epsilon, delta)`` and how it was obtained.

  Attributes:
    epsilon: the smallest valid ε at ``delta``.
    delta: the δ that ``epsilon`` holds at.
    method: ``"basic"``, ``"rdp"``, ``"pld"`` (``"+basic"`` appended when
      steps known only by (ε, δ) were added on), or ``"none"`` (empty).
    basic_epsilon: Σεᵢ of the steps' stand-alone guarantees.
    basic_delta: Σδᵢ of the same.
    rdp_epsilon: ε by RDP composition at ``delta`` (None if unsupported).
    pld_epsilon: ε by PLD composition at ``delta`` (None if unsupported).
    truncation_probability: P, the total probability of the recorded
      truncation events (see :meth:`PrivacyLedger.record_truncation`);
      ``delta`` already includes their (1 + e^ε)·P.
    relation: the neighbouring relation the guarantee holds under
      (``None`` for an empty ledger).
  """
  epsilon: float
  delta: float
  method: str
  basic_epsilon: float
  basic_delta: float
  rdp_epsilon: float | None
  pld_epsilon: float | None
  truncation_probability: float = 0.0
  relation: options.Relation | None = None

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)


class _DroppedOrders(logging.Filter):
  """Drops dp_accounting's note that an RDP order did not converge.

  For some (q, σ) the RDP accountant's series for a fractional order does
  not converge; dp_accounting then leaves that order out of the minimum
  over orders and logs a warning through absl, dozens of lines per call.
  Every order that remains gives a valid bound, so the ε reported is still
  an upper bound (at worst a little looser than with every order): nothing
  for the user to act on. The note is dropped while the library's own
  accountant calls run (:func:`_quiet_accountant`), and counted.
  """

  def __init__(self):
    super().__init__()
    self.dropped = 0

  def filter(self, record: logging.LogRecord) -> bool:
    if str(record.msg).startswith("_compute_log_a_frac failed to converge"):
      self.dropped += 1
      return False
    return True


@contextlib.contextmanager
def _quiet_accountant():
  """Runs dp_accounting calls without its non-convergence warnings."""
  dropped = _DroppedOrders()
  loggers = [logging.getLogger("absl"), logging.getLogger()]
  for logger in loggers:
    logger.addFilter(dropped)
  try:
    yield dropped
  finally:
    for logger in loggers:
      logger.removeFilter(dropped)


def _accountant_epsilon(accountant, events, delta) -> float | None:
  """ε at ``delta`` of ``events`` composed, or None if unsupported."""
  event = dp_accounting.ComposedDpEvent(list(events))
  if not accountant.supports(event):
    return None
  with _quiet_accountant():
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))


_ACCOUNTANTS = {"rdp": dp_rdp.RdpAccountant, "pld": dp_pld.PLDAccountant}


@functools.lru_cache(maxsize=512)
def _cached_epsilon(kind: str, events: tuple, delta) -> float | None:
  return _accountant_epsilon(_ACCOUNTANTS[kind](), events, delta)


def _epsilon_of(kind: str, events, delta) -> float | None:
  """ε at δ of ``events`` by a fresh accountant of ``kind``, remembered.

  A pure function of the events (frozen, compared by value) and δ, so a
  ledger that records the same steps again (the positions of one audit,
  a plan's ``epsilon`` and its run's record) is not recomposed: a PLD
  composition takes seconds.
  """
  events = tuple(events)
  try:
    hash(events)
  except TypeError:  # an event holding a list: composed afresh
    return _accountant_epsilon(_ACCOUNTANTS[kind](), events, delta)
  return _cached_epsilon(kind, events, delta)


def _rdp_epsilon(events, delta) -> float | None:
  return _epsilon_of("rdp", events, delta)


def _curve_epsilon(curves, delta) -> float:
  """ε at δ of RDP curves composed: summed where the orders agree, else
  each at an equal share of δ (basic composition)."""
  orders = {c[0] for c in curves}
  if len(orders) == 1:
    total = [math.fsum(r) for r in zip(*(c[1] for c in curves),
                                                strict=True)]
    eps, _ = dp_rdp.rdp_privacy_accountant.compute_epsilon(
        list(curves[0][0]), total, delta)
    return float(eps)
  return math.fsum(_curve_epsilon([c], delta / len(curves)) for c in curves)


def _pld_epsilon(events, delta) -> float | None:
  return _epsilon_of("pld", events, delta)


def zcdp_event(rho: float, count: int = 1) -> dp_accounting.DpEvent:
  """``count`` releases of ρ-zCDP each, as a dp_accounting event."""
  return dp_accounting.SelfComposedDpEvent(dp_accounting.ZCDpEvent(rho),
                                           count)


def zcdp_epsilon(*, rho: float, delta: float, count: int = 1) -> float:
  """ε at δ of ``count`` compositions of ρ-zCDP (the RDP accountant).

  The one zCDP → (ε, δ) conversion: the ledger's discrete Gaussian entries
  and :func:`dpcore.discrete_calibration.discrete_gaussian_sigma` both
  read ε here.
  """
  return _rdp_epsilon([zcdp_event(rho, count)], delta)


class PrivacyLedger:
  """Records private steps and reports their composed (ε, δ).

  Args:
    budget_epsilon: optional ε budget; a step that would take the composed
      ε above it (at ``budget_delta``) is refused with
      :class:`BudgetExceededError` and not recorded.
    budget_delta: δ at which the budget is judged (required with a budget
      unless every step is pure).
    use_pld: also try PLD composition (slower, tighter for Gaussian steps).
    relation: optional neighbouring relation every step must be recorded
      under; by default the first step's relation fixes it.
  """

  def __init__(self, *, budget_epsilon: float | None = None,
               budget_delta: float | None = None, use_pld: bool = True,
               relation: options.Relation | str | None = None):
    if budget_epsilon is not None:
      budget_epsilon = validation.check_epsilon(budget_epsilon,
                                                "budget_epsilon")
    if budget_delta is not None:
      budget_delta = validation.check_delta(budget_delta, "budget_delta")
    self.budget_epsilon = budget_epsilon
    self.budget_delta = budget_delta
    self.use_pld = use_pld
    self._relation = (None if relation is None else
                      options.parse_relation(relation, "relation"))
    self._entries: list[LedgerEntry] = []

  @property
  def entries(self) -> tuple[LedgerEntry, ...]:
    return tuple(self._entries)

  @property
  def relation(self) -> options.Relation | None:
    """The neighbouring relation of every step (None: nothing fixed yet)."""
    return self._relation

  # -- recording -------------------------------------------------------------

  def _check_relation(self, label: str, relation) -> options.Relation:
    """``relation`` parsed, refused if it is not the ledger's relation."""
    relation = options.parse_relation(relation, "relation")
    if self._relation is not None and relation != self._relation:
      raise ValueError(
          f"recording {label!r} under relation={relation.value} in a ledger "
          f"of {self._relation.value} steps: guarantees of different "
          f"neighbouring relations do not compose; record it by a mechanism "
          f"calibrated for {self._relation.value}, or use another ledger.")
    return relation

  def _record(self, entry: LedgerEntry) -> None:
    if self.budget_epsilon is not None:
      if self.budget_delta is None and entry.delta > 0:
        raise ValueError(
            f"recording {entry.label!r} (a step with delta > 0) against an "
            f"epsilon budget needs budget_delta; pass e.g. "
            f"PrivacyLedger(budget_epsilon=..., budget_delta=1e-5).")
      trial = self._entries + [entry]
      g = _compose(trial, self.budget_delta, self.use_pld)
      if self.budget_delta is None and g.delta > 0:
        # A pure budget: a truncation event (δ = 0 on its own) makes the
        # composed δ positive.
        raise BudgetExceededError(
            f"recording {entry.label!r} would make δ={g.delta:.3g} in "
            f"total against a pure budget ε={self.budget_epsilon:.6g} "
            f"(no budget_delta); pass budget_delta to allow it.")
      if g.epsilon > self.budget_epsilon * (1 + 1e-9) or (
          self.budget_delta is not None and g.delta > self.budget_delta):
        raise BudgetExceededError(
            f"recording {entry.label!r} would spend ε={g.epsilon:.6g}, "
            f"δ={g.delta:.3g} in total, above the budget "
            f"ε={self.budget_epsilon:.6g}, δ={self.budget_delta}; lower "
            f"this step's ε or raise the budget.")
    self._entries.append(entry)
    if entry.relation is not None:
      self._relation = entry.relation

  def record_pure(self, epsilon: float, *, label: str, relation: _Rel,
                  count: int = 1) -> None:
    """A pure ε-DP step (e.g. objective perturbation), ``count`` times.

    For RDP it is described as (ε²/2)-zCDP (Bun & Steinke 2016, Prop. 1.4).
    ``relation`` (every ``record_*`` method takes it): the neighbouring
    relation the step's guarantee is stated under, a
    :class:`dpcore.options.Relation` or its spelling.
    """
    relation = self._check_relation(label, relation)
    epsilon = validation.check_epsilon(epsilon)
    count = validation.check_positive_int(count, "count")
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.ZCDpEvent(epsilon**2 / 2.0), count)
    self._record(LedgerEntry(label, "pure", count * epsilon, 0.0, event,
                             {"epsilon": epsilon, "count": count}, relation))

  def record_laplace(self, *, scale: float, sensitivity: float, label: str,
                     relation: _Rel, count: int = 1) -> None:
    """Laplace(scale) noise on a query of L1 sensitivity Δ: ε = Δ/scale."""
    relation = self._check_relation(label, relation)
    scale = validation.check_positive(scale, "scale")
    sensitivity = validation.check_positive(sensitivity, "sensitivity")
    count = validation.check_positive_int(count, "count")
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.LaplaceDpEvent(scale / sensitivity), count)
    self._record(LedgerEntry(
        label, "laplace", count * sensitivity / scale, 0.0, event,
        {"scale": scale, "sensitivity": sensitivity, "count": count},
        relation))

  def record_gaussian(self, *, sigma: float, sensitivity: float,
                      delta: float, label: str, relation: _Rel,
                      count: int = 1) -> None:
    """Gaussian noise σ on a query of L2 sensitivity Δ, ``count`` times.

    The stand-alone ε (for basic composition) is the exact one of the
    ``count``-fold composition at ``delta`` (a Gaussian composed k times is
    a Gaussian of σ/√k).
    """
    relation = self._check_relation(label, relation)
    sigma = validation.check_positive(sigma, "sigma")
    sensitivity = validation.check_positive(sensitivity, "sensitivity")
    delta = validation.check_delta(delta)
    count = validation.check_positive_int(count, "count")
    effective = sigma / (sensitivity * math.sqrt(count))
    eps = gaussian_epsilon(noise_multiplier=effective, delta=delta)
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(sigma / sensitivity), count)
    self._record(LedgerEntry(
        label, "gaussian", eps, delta, event,
        {"sigma": sigma, "sensitivity": sensitivity, "count": count},
        relation))

  def record_discrete_gaussian(self, *, sigma: float, sensitivity: float,
                               delta: float, label: str, relation: _Rel,
                               count: int = 1) -> None:
    """Discrete Gaussian noise σ on an integer query, ``count`` times.

    In grid units: σ and the L2 sensitivity Δ of the integer-valued
    (rounded) query, e.g. from :func:`dpcore.lattice.gaussian_mechanism`.
    Each release is ρ = Δ²/2σ²-zCDP (Canonne, Kamath & Steinke 2020,
    Theorems 14–15), recorded as a ``ZCDpEvent``; the stand-alone ε for
    basic composition is the RDP accountant's conversion of count·ρ at
    ``delta``.
    """
    relation = self._check_relation(label, relation)
    sigma = validation.check_positive(sigma, "sigma")
    sensitivity = validation.check_positive(sensitivity, "sensitivity")
    delta = validation.check_delta(delta)
    count = validation.check_positive_int(count, "count")
    rho = sensitivity**2 / (2.0 * sigma**2)
    event = zcdp_event(rho, count)
    eps = zcdp_epsilon(rho=rho, delta=delta, count=count)
    self._record(LedgerEntry(
        label, "discrete_gaussian", eps, delta, event,
        {"sigma": sigma, "sensitivity": sensitivity, "rho": rho,
         "count": count}, relation))

  def record_discrete_laplace(self, *, scale: float, sensitivity: float,
                              label: str, relation: _Rel, count: int = 1
                              ) -> None:
    """Discrete Laplace noise (scale t) on an integer query, ``count`` times.

    In grid units: pure ε = Δ₁/t per release for L1 sensitivity Δ₁
    (Canonne, Kamath & Steinke 2020), described for RDP as ε²/2-zCDP like
    :meth:`record_pure`.
    """
    relation = self._check_relation(label, relation)
    scale = validation.check_positive(scale, "scale")
    sensitivity = validation.check_positive(sensitivity, "sensitivity")
    count = validation.check_positive_int(count, "count")
    epsilon = sensitivity / scale
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.ZCDpEvent(epsilon**2 / 2.0), count)
    self._record(LedgerEntry(
        label, "discrete_laplace", count * epsilon, 0.0, event,
        {"scale": scale, "sensitivity": sensitivity, "count": count},
        relation))

  def record_approx(self, epsilon: float, delta: float, *, label: str,
                    relation: _Rel, params: dict | None = None) -> None:
    """A step known only by its (ε, δ) guarantee (basic composition only).

    ``params``: JSON-ready facts about the step kept with the entry (e.g.
    a tuning's winner and trial count); ``epsilon``/``delta`` are set from
    the arguments.
    """
    relation = self._check_relation(label, relation)
    epsilon = validation.check_epsilon(epsilon)
    delta = validation.check_delta(delta)
    self._record(LedgerEntry(label, "approx", epsilon, delta, None,
                             {**(params or {}), "epsilon": epsilon,
                              "delta": delta}, relation))

  def record_rdp_curve(self, *, orders, rdp, delta: float, label: str,
                       relation: _Rel, params: dict | None = None) -> None:
    """A step known by an upper bound on its Rényi-DP curve.

    For mechanisms dp_accounting has no event for (e.g. the distributed
    discrete Gaussian, :mod:`dpcore.ddg_accounting`): ``rdp[i]`` bounds
    the step's Rényi divergence of order ``orders[i]`` under ``relation``
    (both directions). The ledger converts the curve to (ε, δ) at whatever
    δ it composes at (dp_accounting's RDP conversion); several curves on
    the same orders are summed first (RDP composition), and the curves are
    added to the other steps by basic composition, each group at half of
    the δ left. The stand-alone ε is the curve's at ``delta``.

    Args:
      orders: increasing Rényi orders > 1.
      rdp: the bound at each order (≥ 0; ``inf`` allowed).
      delta: δ of the stand-alone (ε, δ) (basic composition).
      label, relation: as for every step.
      params: JSON-ready facts kept with the entry.
    """
    relation = self._check_relation(label, relation)
    delta = validation.check_delta(delta)
    orders = tuple(float(a) for a in orders)
    rdp = tuple(float(r) for r in rdp)
    if (not orders or len(orders) != len(rdp) or orders[0] <= 1.0
        or any(b <= a for a, b in zip(orders, orders[1:], strict=False))
        or any(not (r >= 0.0) for r in rdp)):
      raise ValueError("orders must increase from above 1 and rdp hold one "
                       "bound ≥ 0 per order.")
    eps = _curve_epsilon([(orders, rdp)], delta)
    self._record(LedgerEntry(
        label, "rdp_curve", eps, delta, None,
        {**(params or {}), "epsilon": eps, "delta": delta}, relation,
        rdp_curve=(orders, rdp)))

  def record_subsampled_gaussian(self, *, noise_multiplier: float,
                                 sampling_rate: float, steps: int,
                                 delta: float, label: str, relation: _Rel
                                 ) -> None:
    """DP-SGD: ``steps`` Poisson-subsampled Gaussian steps.

    The stand-alone ε for basic composition is the RDP accountant's at
    ``delta``. Poisson subsampling's amplification is accounted here
    under add/remove (the accountant's event); any other ``relation`` is
    refused, since the ε computed would be add/remove's.
    """
    relation = self._check_relation(label, relation)
    if relation != options.Relation.ADD_REMOVE:
      raise ValueError(
          f"recording {label!r}: subsampled Gaussian steps are accounted "
          f"under add/remove only (the ε under {relation.value} is larger); "
          f"use relation='add_remove'.")
    eps = dpsgd_epsilon(noise_multiplier=noise_multiplier,
                        sampling_rate=sampling_rate, steps=steps,
                        delta=delta)  # validates every argument
    noise_multiplier, sampling_rate = float(noise_multiplier), float(
        sampling_rate)
    steps, delta = int(steps), float(delta)
    event = dpsgd_event(noise_multiplier, sampling_rate, steps)
    self._record(LedgerEntry(
        label, "subsampled_gaussian", eps, delta, event,
        {"noise_multiplier": noise_multiplier,
         "sampling_rate": sampling_rate, "steps": steps}, relation))

  def record_exponential(self, epsilon: float, *, label: str, relation: _Rel,
                         count: int = 1) -> None:
    """``count`` ε-DP exponential-mechanism selections.

    Each is also ε²/8-zCDP (bounded-range argument, Cesar & Rogers 2021),
    which the RDP accountant composes.
    """
    relation = self._check_relation(label, relation)
    epsilon = validation.check_epsilon(epsilon)
    count = validation.check_positive_int(count, "count")
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.ZCDpEvent(epsilon**2 / 8.0), count)
    self._record(LedgerEntry(label, "exponential", count * epsilon, 0.0,
                             event, {"epsilon": epsilon, "count": count},
                             relation))

  def record_truncation(self, probability: float, *, label: str) -> None:
    """A departure from the recorded mechanisms with probability ≤ P.

    For steps that run an accounted mechanism except on an event whose
    probability is at most P on *every* data set, e.g. a Poisson batch
    padded to a fixed size, whose rows beyond it are dropped. The real run
    and the ideal one can then be coupled to differ with probability ≤ P,
    so an (ε, δ′) guarantee of the ideal run gives (ε, δ′ + (1 + e^ε)·P)
    for the real one; :meth:`guarantee` reports that δ. The bound holds
    on every data set, so the entry has no relation of its own.
    """
    probability = validation.check_in_range(
        probability, "probability", 0.0, 1.0, low_inclusive=True,
        high_inclusive=True)
    self._record(LedgerEntry(label, "truncation", 0.0, 0.0, None,
                             {"probability": probability}))

  # -- reporting -------------------------------------------------------------

  def guarantee(self, delta: float | None = None) -> Guarantee:
    """The composed guarantee of everything recorded.

    Args:
      delta: δ at which RDP/PLD report ε. Defaults to the budget's δ, else
        to the sum of the steps' own δ (the δ basic composition spends).
    """
    if delta is None:
      delta = self.budget_delta
    if delta is not None:
      delta = validation.check_delta(delta)
    return _compose(self._entries, delta, self.use_pld)

  def report(self, delta: float | None = None, *,
             nominal_epsilon: float | None = None,
             nominal_note: str | None = None) -> dict:
    """The privacy record of a run: :func:`privacy_record` of this ledger."""
    return privacy_record(self.guarantee(delta), self._entries,
                          nominal_epsilon=nominal_epsilon,
                          nominal_note=nominal_note)


PRIVACY_FIELDS = (
    "epsilon", "delta", "relation", "method", "epsilon_basic", "delta_basic",
    "epsilon_rdp", "epsilon_pld", "truncation_probability",
    "epsilon_nominal", "nominal_note", "no_guarantee", "entries")
"""The fields of every privacy record, in order (see :func:`privacy_record`).

* ``epsilon``, ``delta``: the guarantee that holds for everything the run
  released (the ledger's tightest composition), or ``None`` when no
  guarantee is claimed (``no_guarantee`` says why);
* ``relation``: the neighbouring relation of every recorded step
  (:data:`dpcore.options.RELATIONS`; ``None`` when nothing was recorded);
* ``method``: how ``epsilon`` was obtained (``basic``, ``rdp``, ``pld``,
  ``…+basic``, ``none`` for an empty ledger, ``no_guarantee``);
* ``epsilon_basic``/``delta_basic``: Σεᵢ, Σδᵢ of the steps' own guarantees;
  ``epsilon_rdp``/``epsilon_pld``: the RDP/PLD compositions (``None`` where
  unsupported); ``truncation_probability``: see
  :meth:`PrivacyLedger.record_truncation`;
* ``epsilon_nominal``: a paper's figure for the same run, printed beside the
  guarantee and never instead of it; ``nominal_note`` says what it counts;
* ``no_guarantee``: ``None``, or the reason no ε is claimed;
* ``entries``: every recorded step: ``label``, ``kind``, ``epsilon`` and
  ``delta`` (its own, over all its repetitions), ``relation`` and
  ``params`` (what it was recorded with, e.g. σ, the per-step ε,
  ``count``).
"""


def _entry_dict(e: LedgerEntry) -> dict:
  """One entry: its own (ε, δ) for all its repetitions, and its params."""
  return {"label": e.label, "kind": e.kind, "epsilon": e.epsilon,
          "delta": e.delta, "relation": _spelling(e.relation),
          "params": dict(e.params)}


def _spelling(relation) -> str | None:
  return None if relation is None else relation.value


def common_relation(items, *, what: str = "entries"
                    ) -> options.Relation | None:
  """The one relation of ``items`` (anything with a ``relation``: ledger
  entries, guarantees, tuning trials); None if none has one.

  Raises:
    ValueError: items of different relations (a ledger refuses them when
      they are recorded; items gathered by hand are checked here). The
      message names them as ``what``.
  """
  relations = {e.relation for e in items if e.relation is not None}
  if len(relations) > 1:
    raise ValueError(
        f"{what} of different neighbouring relations "
        f"({', '.join(sorted(r.value for r in relations))}) do not compose; "
        f"keep each relation in its own ledger.")
  return relations.pop() if relations else None


def privacy_record(guarantee: Guarantee, entries=(), *,
                   nominal_epsilon: float | None = None,
                   nominal_note: str | None = None) -> dict:
  """The one JSON-ready privacy record (fields :data:`PRIVACY_FIELDS`)."""
  g = guarantee
  entries = tuple(entries)
  relation = common_relation((*entries, g))
  return {
      "epsilon": g.epsilon, "delta": g.delta,
      "relation": _spelling(relation),
      "method": g.method,
      "epsilon_basic": g.basic_epsilon, "delta_basic": g.basic_delta,
      "epsilon_rdp": g.rdp_epsilon, "epsilon_pld": g.pld_epsilon,
      "truncation_probability": g.truncation_probability,
      "epsilon_nominal": nominal_epsilon, "nominal_note": nominal_note,
      "no_guarantee": None,
      "entries": [_entry_dict(e) for e in entries],
  }


def no_guarantee_record(reason: str, *, nominal_epsilon: float | None = None,
                        nominal_note: str | None = None,
                        entries=()) -> dict:
  """A privacy record that claims nothing (ε and δ ``None``), and says why.

  For non-private baselines (``reason`` says nothing private was claimed)
  and for mechanisms whose guarantee is not proven (a paper's figure, if
  any, goes in ``nominal_epsilon``).
  """
  if not reason:
    raise ValueError("a record without a guarantee must say why (reason).")
  entries = tuple(entries)
  return {
      "epsilon": None, "delta": None,
      "relation": _spelling(common_relation(entries)),
      "method": "no_guarantee",
      "epsilon_basic": None, "delta_basic": None, "epsilon_rdp": None,
      "epsilon_pld": None, "truncation_probability": None,
      "epsilon_nominal": nominal_epsilon, "nominal_note": nominal_note,
      "no_guarantee": reason,
      "entries": [_entry_dict(e) for e in entries],
  }


NON_PRIVATE = "non-private run: nothing was released under a DP guarantee"
"""The ``no_guarantee`` reason of a non-private baseline's record."""


def plan_epsilon(plan, *, delta: float | None = None) -> float:
  """The ε a fresh ledger reports once ``plan.record(ledger)`` has run.

  What a mechanism's ``make_plan`` stores as the plan's ``epsilon`` (the
  guarantee of everything the plan releases; the budget it was calibrated
  for is ``target_epsilon``, :mod:`dpcore.shape`), so that the plan and
  a run's record (``ledger.report``) state one number.

  Args:
    plan: anything with ``record(ledger)`` (and ``delta`` when ``delta``
      is not given).
    delta: the δ the ε is stated at; default the plan's own. A δ of 0
      (a pure plan) or None states the ε of basic composition at the
      entries' own δ, as ``ledger.guarantee()`` does.

  Returns:
    ``PrivacyLedger().guarantee(delta).epsilon`` after the record (the
    ledger's default accountants: RDP and PLD, the smallest valid ε).
  """
  if delta is None:
    delta = getattr(plan, "delta", None)
  ledger = PrivacyLedger()
  plan.record(ledger)
  return _within(ledger.guarantee(delta or None), delta or None)


def composed_epsilon(plans, delta: float) -> float:
  """The ε at ``delta`` of a fresh ledger once every plan has recorded.

  Several releases of one run (e.g. a data normalisation, then DP-SGD),
  composed as a run's ledger composes them; :func:`plan_epsilon` is the
  one-plan case.
  """
  ledger = PrivacyLedger()
  for plan in plans:
    plan.record(ledger)
  return _within(ledger.guarantee(delta), delta)


def _within(g: Guarantee, delta: float | None) -> float:
  """``g.epsilon``, refused when it holds only at a δ above ``delta``.

  That happens when the plan's truncation events (a padded batch that
  overflows, a sampler's departure) are too likely for ``delta``: the ε
  would be stated at a δ it does not hold at.
  """
  if delta is not None and g.delta > delta * (1 + 1e-9):
    raise ValueError(
        f"the plan holds only at δ = {g.delta:.3g} > δ = {delta:g}: its "
        f"truncation events have probability {g.truncation_probability:.3g}"
        f", too likely for this δ; raise max_batch (or lower "
        f"overflow_probability), or raise δ.")
  return g.epsilon


def _truncation_delta(epsilon: float, probability: float) -> float:
  """(1 + e^ε)·P, the δ a truncation event of probability P adds."""
  if probability == 0.0:
    return 0.0
  if epsilon + math.log(probability) > 0.0:
    return 1.0
  return min(1.0, probability * (1.0 + math.exp(epsilon)))


def _compose(entries, delta, use_pld) -> Guarantee:
  """Composes ``entries`` at ``delta`` (None: the basic δ).

  Truncation events (probability P in all) are handled as in
  :meth:`PrivacyLedger.record_truncation`: with a target δ, the ideal
  mechanisms are composed at δ′ = δ − (1 + e^ε½)·P, where ε½ is their ε
  at δ/2; when δ′ ≥ δ/2 their ε at δ′ is at most ε½, so the total
  δ′ + (1 + e^ε)·P stays within δ. Otherwise (P too large for δ) the
  guarantee at δ/2 is reported with its larger total δ.
  """
  relation = common_relation(entries)
  return dataclasses.replace(_compose_all(entries, delta, use_pld),
                             relation=relation)


def _compose_all(entries, delta, use_pld) -> Guarantee:
  """:func:`_compose` without the relation."""
  slack = math.fsum(e.params["probability"] for e in entries
                    if e.kind == "truncation")
  ideal = [e for e in entries if e.kind != "truncation"]
  if slack == 0.0:
    return _compose_ideal(ideal, delta, use_pld)
  if delta is None:
    g = _compose_ideal(ideal, None, use_pld)
    return dataclasses.replace(
        g, delta=min(1.0, g.delta + _truncation_delta(g.epsilon, slack)),
        truncation_probability=slack)
  half = _compose_ideal(ideal, delta / 2.0, use_pld)
  inner = delta - _truncation_delta(half.epsilon, slack)
  if inner >= delta / 2.0:
    g = _compose_ideal(ideal, inner, use_pld)
    # δ itself when the ideal steps fit δ′ (ε ≤ ε½, see above); more when
    # they do not (steps known only by their own (ε, δ), composed
    # basically at that δ), never less than what the events add.
    total = max(delta, min(1.0, g.delta + _truncation_delta(g.epsilon,
                                                            slack)))
  else:
    g = half
    total = min(1.0, g.delta + _truncation_delta(g.epsilon, slack))
  return dataclasses.replace(g, delta=total, truncation_probability=slack)


def _compose_ideal(entries, delta, use_pld) -> Guarantee:
  """Composes ``entries`` (no truncation events) at ``delta``."""
  if not entries:
    return Guarantee(0.0, 0.0, "none", 0.0, 0.0, None, None)
  basic_eps = math.fsum(e.epsilon for e in entries)
  basic_delta = math.fsum(e.delta for e in entries)
  if delta is None:
    delta = basic_delta
  candidates = []
  if basic_delta <= delta * (1 + 1e-12):
    candidates.append((basic_eps, basic_delta, "basic"))
  # Steps without an exact description are added on by basic composition;
  # the others are composed exactly at the δ that remains. RDP curves
  # (record_rdp_curve) are composed among themselves and added on at half
  # of that δ when there are events too.
  events = [e.dp_event for e in entries if e.dp_event is not None]
  curves = [e.rdp_curve for e in entries if e.rdp_curve is not None]
  loose = [e for e in entries
           if e.dp_event is None and e.rdp_curve is None]
  loose_eps = math.fsum(e.epsilon for e in loose)
  rest_delta = delta - math.fsum(e.delta for e in loose)
  suffix = "+basic" if loose or (curves and events) else ""
  rdp_eps = pld_eps = None
  if curves and rest_delta > 0:
    share = rest_delta / 2.0 if events else rest_delta
    loose_eps += _curve_epsilon(curves, share)
    rest_delta -= share
    if not events:
      rdp_eps = loose_eps
      candidates.append((rdp_eps, delta, "rdp" + suffix))
  if events and rest_delta > 0:
    rdp_eps = _rdp_epsilon(events, rest_delta)
    if rdp_eps is not None:
      rdp_eps += loose_eps
      candidates.append((rdp_eps, delta, "rdp" + suffix))
    if use_pld:
      pld_eps = _pld_epsilon(events, rest_delta)
      if pld_eps is not None:
        pld_eps += loose_eps
        candidates.append((pld_eps, delta, "pld" + suffix))
  if not candidates:
    # Only basic composition applies, at its own δ.
    candidates.append((basic_eps, basic_delta, "basic"))
  eps, d, method = min(candidates, key=lambda c: c[0])
  return Guarantee(eps, d, method, basic_eps, basic_delta, rdp_eps, pld_eps)


def dpsgd_event(noise_multiplier: float, sampling_rate: float, steps: int
                ) -> dp_accounting.DpEvent:
  """``steps`` Poisson-sampled Gaussian steps, as a dp_accounting event."""
  return dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(
          sampling_rate, dp_accounting.GaussianDpEvent(noise_multiplier)),
      steps)


def gaussian_epsilon(*, noise_multiplier: float, delta: float) -> float:
  """Exact ε of one Gaussian mechanism with σ/Δ = noise_multiplier at δ."""
  noise_multiplier = validation.check_positive(noise_multiplier,
                                               "noise_multiplier")
  delta = validation.check_delta(delta)

  def delta_at(eps):
    return calibration.gaussian_delta(sigma=noise_multiplier, epsilon=eps)

  if delta_at(0.0) <= delta:
    return 0.0
  lo, hi = 0.0, 1.0
  while delta_at(hi) > delta:
    hi *= 2.0
  return calibration.bisect(lambda eps: delta_at(eps) > delta, lo, hi,
                            rtol=1e-12, steps=200)[1]


def dpsgd_steps(*, sampling_rate: float, steps: int | None = None,
                epochs: float | None = None) -> int:
  """The step count T of DP-SGD: ``steps``, or ``epochs`` through ONE rule.

  Exactly one of ``steps`` and ``epochs`` must be given; epochs become
  steps by :func:`dpcore.dpsgd.num_steps` (T = max(1, round(E / q))), the
  rule the trainer runs, so the steps accounted are the steps run. T must
  fit the programs' int32 step counter (:func:`validation.check_count`).
  """
  if (steps is None) == (epochs is None):
    raise ValueError(
        "give exactly one of steps= and epochs= (epochs become steps by "
        f"dpsgd.num_steps); got steps={steps!r}, epochs={epochs!r}.")
  if steps is not None:
    return validation.check_count(steps, "steps")
  # Imported here: dpsgd pulls in JAX, which host-side accounting needs not.
  from dpcore import dpsgd  # pylint: disable=g-import-not-at-top
  return dpsgd.num_steps(epochs=epochs, sampling_rate=sampling_rate)


def dpsgd_epsilon(*, noise_multiplier: float, sampling_rate: float,
                  delta: float, steps: int | None = None,
                  epochs: float | None = None) -> float:
  """ε (RDP accountant) of DP-SGD with the given σ, q, T at δ.

  Args:
    noise_multiplier: σ > 0 (noise std / clip norm).
    sampling_rate: Poisson sampling rate q.
    delta: δ.
    steps: T; or
    epochs: E, turned into T by :func:`dpsgd_steps` (exactly one of the
      two).
  """
  noise_multiplier = validation.check_positive(noise_multiplier,
                                               "noise_multiplier")
  sampling_rate = validation.check_in_range(
      sampling_rate, "sampling_rate", 0.0, 1.0, high_inclusive=True)
  steps = dpsgd_steps(sampling_rate=sampling_rate, steps=steps,
                      epochs=epochs)
  delta = validation.check_delta(delta)
  return _rdp_epsilon([dpsgd_event(noise_multiplier, sampling_rate, steps)],
                      delta)


def calibrate_dpsgd_noise(*, epsilon: float, delta: float,
                          sampling_rate: float, steps: int | None = None,
                          epochs: float | None = None) -> float:
  """Smallest noise multiplier σ for which DP-SGD is (ε, δ)-DP (RDP).

  Args:
    epsilon: target ε of the whole run.
    delta: target δ.
    sampling_rate: Poisson sampling rate q.
    steps: number of steps T; or
    epochs: E, turned into T by :func:`dpsgd_steps` (exactly one of the
      two).
  """
  epsilon = calibration.check_calibrated_epsilon(epsilon)
  delta = validation.check_delta(delta)
  sampling_rate = validation.check_in_range(
      sampling_rate, "sampling_rate", 0.0, 1.0, high_inclusive=True)
  steps = dpsgd_steps(sampling_rate=sampling_rate, steps=steps,
                      epochs=epochs)
  return _calibrated_sigma(epsilon, delta, sampling_rate, steps)


@functools.lru_cache(maxsize=256)
def _calibrated_sigma(epsilon, delta, sampling_rate, steps) -> float:
  """The bisection of :func:`calibrate_dpsgd_noise`, remembered (a pure
  function of its checked arguments; one takes about a second)."""
  with _quiet_accountant():
    return float(dp_accounting.calibrate_dp_mechanism(
        dp_rdp.RdpAccountant,
        lambda s: dpsgd_event(s, sampling_rate, steps),
        epsilon, delta,
        bracket_interval=dp_accounting.LowerEndpointAndGuess(1e-3, 1.0),
        tol=1e-6))
