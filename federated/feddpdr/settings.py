"""The settings of a FedDPDR-DPML run, and their checks.

:class:`Config` is :class:`Static` (what shapes the compiled program:
mechanism, k, λ, loss, aggregations, top-k, tol, max_iter) plus the budget
(ε, δ, calibration, split, the relation σ is calibrated for), which
reaches the program only
through the traced per-participant numbers σ, sizes, p and θ of the plan
(:class:`federated.feddpdr.Traced`). :func:`program` is the
:class:`Static` that selects the compiled program: ``nonpriv`` runs the
``feddpdr`` one with the noise off, so a sweep over ε or δ and the
non-private baseline share one executable.

Every check here is host-side and runs before any program is compiled.
"""

from __future__ import annotations

import dataclasses

from dpcore import calibration as dp_calibration
from dpcore import ddg, options, validation
from federated.feddpdr import secure_moments
from federated.feddpdr.registry import (
  Mechanism,
  describe,
)
from mechanisms.erm import objective_perturbation as op

__all__ = [
    "Config", "Program", "Static", "check_chunk", "check_settings",
    "program", "secure_sum_of",
]


@dataclasses.dataclass(frozen=True)
class Static:
  """The settings that shape the compiled program (``jit`` static)."""
  mechanism: options.FedDPDRMechanism = options.FedDPDRMechanism.FEDDPDR
  k: int = 20
  lam: float = 0.01
  loss: options.ERMLoss = options.ERMLoss.HUBER
  huber_h: float = op.HUBER_H
  aggregation: options.Aggregation = options.Aggregation.SUBSPACE
  model_aggregation: options.ModelAggregation = (
      options.ModelAggregation.WEIGHTED)
  topk: options.TopK = options.TopK.EIGH
  tol: float = 1e-8
  max_iter: int = 500

  @property
  def description(self) -> Mechanism:
    """The mechanism's :class:`Mechanism` (ValueError if unknown)."""
    return describe(self.mechanism)

  @property
  def private(self) -> bool:
    return self.description.private

  @property
  def secure(self) -> bool:
    """The server's basis comes from the secure sum of the participants'
    second moments (``aggregation="distributed_moments"`` on a mechanism
    that aggregates a PCA basis at the server)."""
    mech = self.description
    return (mech.reduces and mech.federated
            and options.Aggregation(self.aggregation)
            is options.Aggregation.DISTRIBUTED_MOMENTS)


@dataclasses.dataclass(frozen=True)
class Program(Static):
  """A :class:`Static` with the static facts of a secure sum
  (``aggregation="distributed_moments"``): its threshold P_min
  (``min_survivors``, None: every participant) and the simulated dropouts
  (the last ``dropouts`` participants' messages never reach the server).
  The sum's grid and shares follow ε and reach the program traced
  (:class:`federated.feddpdr.Traced`'s ``secure_sum``). :func:`program`
  makes one for a secure :class:`Config`."""
  min_survivors: int | None = None
  dropouts: int = 0


def secure_sum_of(traced) -> ddg.DDGParams:
  """The secure sum's parameters among the traced arguments
  (:class:`federated.feddpdr.Traced`), or a one-line ValueError."""
  params = getattr(traced, "secure_sum", None)
  if params is None:
    raise ValueError(
        "aggregation=distributed_moments needs its plan's secure-sum "
        "parameters: train through feddpdr.release/execute, or build the "
        "arguments with feddpdr.train_arguments(key, participants, plan).")
  return params


@dataclasses.dataclass(frozen=True)
class Config(Static):
  """Settings of one FedDPDR-DPML experiment (see the module docstring).

  The fields of :class:`Static`, which shape the compiled program, and the
  budget (ε, δ, calibration, split, relation), which only changes the
  host-side calibration (:func:`make_plan`) and reaches the program as
  traced arrays.

  ``relation`` is the neighbouring relation DP-PCA's σ is calibrated for
  (``dp_pca.make_plan``'s ``relation``): ``"replace_one"`` (sensitivity
  √2, default; the old spelling ``"replace"`` is accepted) or
  ``"add_remove"`` (1, the paper's). Every run is *accounted* under
  replace-one (:data:`federated.feddpdr.RELATION`, the plan's
  ``relation``), which objective perturbation is proven under.

  ``aggregation="distributed_moments"`` alone reads the secure sum's
  settings (refused at other values with any other aggregation):
  ``min_survivors``, P_min ≤ P, the fewest participants whose messages
  the protocol proceeds with, the shares the curve is accounted at (None:
  P, no dropouts); ``bits``, b per coordinate of every message; and
  ``dropouts``, a simulation: the last ``dropouts`` participants' messages
  never reach the server (a run leaving fewer than P_min is refused by
  :func:`federated.feddpdr.make_plan`). Those participants still receive
  the basis, fit their classifiers and enter the average
  (:mod:`federated.feddpdr.secure_moments`, :mod:`federated.feddpdr`).
  """
  epsilon: float = 0.1
  delta: float = 1e-4
  calibration: options.PcaCalibration = options.PcaCalibration.ANALYTIC
  budget_per_classifier: bool = False
  pca_fraction: float = 0.5
  relation: options.Relation = options.Relation.REPLACE_ONE
  min_survivors: int | None = None
  bits: int = secure_moments.BITS
  dropouts: int = 0

  @property
  def static(self) -> Static:
    """The program-shaping fields, as a plain :class:`Static`."""
    return Static(**{f.name: getattr(self, f.name)
                     for f in dataclasses.fields(Static)})

  def check(self, *, dim: int | None = None) -> Config:
    """Validates every field, and k against the data dimension.

    Args:
      dim: the data dimension d; None leaves the check of k against it
        for later (e.g. before the data is loaded).

    Returns:
      ``self``.

    Raises:
      ValueError: one line naming the field and the fix.
    """
    mech = describe(self.mechanism)
    for field, kind in (("aggregation", options.Aggregation),
                        ("model_aggregation", options.ModelAggregation),
                        ("loss", options.ERMLoss),
                        ("calibration", options.PcaCalibration),
                        ("topk", options.TopK)):
      options.parse(kind, getattr(self, field), field)
    options.parse_relation(self.relation, "relation")
    dp_calibration.check_calibrated_epsilon(self.epsilon, "epsilon")
    validation.check_delta(self.delta, "delta")
    validation.check_positive(self.lam, "lam")
    validation.check_positive(self.huber_h, "huber_h")
    validation.check_positive(self.tol, "tol")
    validation.check_count(self.max_iter, "max_iter")
    validation.check_in_range(self.pca_fraction, "pca_fraction", 0.0, 1.0)
    k = validation.check_positive_int(self.k, "k")
    if mech.reduces and dim is not None and k > dim:
      raise ValueError(f"k={k} exceeds the data dimension d={dim}; choose "
                       f"k <= {dim}.")
    self._check_secure_sum_settings()
    if self.secure:
      self._check_secure(dim)
    eps_pca = self.epsilon * self.pca_fraction
    if (self.calibration == options.PcaCalibration.CLASSIC and mech.private
        and mech.reduces and eps_pca >= 1):
      raise ValueError(
          f"calibration=classic is proven only for ε₁ < 1, and "
          f"epsilon={self.epsilon:g} gives ε₁ = {eps_pca:g}; use "
          f"calibration=analytic or a smaller epsilon.")
    return self

  def _check_secure_sum_settings(self) -> None:
    """The secure sum's settings left at their defaults with any other
    aggregation, which would ignore them."""
    if (options.Aggregation(self.aggregation)
        is options.Aggregation.DISTRIBUTED_MOMENTS):
      return
    for field, default in _SECURE_SUM_DEFAULTS.items():
      value = getattr(self, field)
      if value != default:
        raise ValueError(
            f"{field}={value!r} is a setting of "
            f"aggregation=distributed_moments' secure sum; with "
            f"aggregation={options.Aggregation(self.aggregation)} leave it "
            f"at {default!r}.")

  def _check_secure(self, dim: int | None) -> None:
    """distributed_moments: d within the secure sum's range, its bits,
    P_min and dropouts, and the budget settings that only DP-PCA's
    Gaussian reads left alone."""
    if dim is not None:
      secure_moments.check_dim(dim)
    if (isinstance(self.bits, bool) or not isinstance(self.bits, int)
        or not 8 <= self.bits <= ddg.MAX_BITS):
      raise ValueError(f"bits must be an int in [8, {ddg.MAX_BITS}] (bits "
                       f"per coordinate of every message), got "
                       f"{self.bits!r}.")
    if self.min_survivors is not None:
      validation.check_positive_int(self.min_survivors, "min_survivors")
    if (isinstance(self.dropouts, bool) or not isinstance(self.dropouts, int)
        or self.dropouts < 0):
      raise ValueError(f"dropouts must be a whole number >= 0 (the last "
                       f"participants whose messages never arrive), got "
                       f"{self.dropouts!r}.")
    if options.parse_relation(self.relation) != options.Relation.REPLACE_ONE:
      raise ValueError(
          "aggregation=distributed_moments is calibrated under replace_one "
          "(sensitivity 2Δ), the relation the run is accounted under; leave "
          "relation at replace_one.")
    if self.private and (options.PcaCalibration(self.calibration)
                         is not options.PcaCalibration.ANALYTIC):
      raise ValueError(
          "calibration=classic is DP-PCA's Gaussian formula; "
          "aggregation=distributed_moments is calibrated by its own "
          "accounting: leave calibration at analytic.")


_SECURE_SUM_DEFAULTS = {"min_survivors": None, "bits": secure_moments.BITS,
                        "dropouts": 0}
"""The secure sum's settings and their defaults (:class:`Config`)."""


def check_settings(configs, *, dim: int | None = None, seeds: int = 1,
                   participant_chunk: int | None = None) -> None:
  """Every setting of runs of ``configs``, checked before any work.

  Args:
    configs: the runs' :class:`Config` s (:meth:`Config.check` each).
    dim: the data dimension, or None where not known yet.
    seeds: repeats per run.
    participant_chunk: participants mapped at once, or None.

  Raises:
    ValueError: one line naming the setting and the fix.
  """
  for config in configs:
    if not isinstance(config, Config):
      raise TypeError(f"config must be a feddpdr.Config, got {config!r}.")
    config.check(dim=dim)
  validation.check_positive_int(seeds, "seeds")
  check_chunk(participant_chunk)


def check_chunk(participant_chunk: int | None) -> int | None:
  """``participant_chunk`` checked: None, or a positive integer."""
  if participant_chunk is None:
    return None
  return validation.check_positive_int(participant_chunk,
                                       "participant_chunk")


def _static(config: Config | Static) -> Static:
  return config.static if isinstance(config, Config) else config


def program(config: Config | Static) -> Static:
  """The :class:`Static` that selects the compiled program.

  A mechanism runs the program its :class:`Mechanism` names: ``nonpriv``
  runs the ``feddpdr`` program with the noise switched off by its traced
  arguments (:func:`make_plan`), so the baseline and every private budget
  share one executable; every other mechanism is its own. Its options
  are the members of their :mod:`dpcore.options` sets, so one program
  has one spelling however its settings were spelt.

  A secure :class:`Config` (``aggregation="distributed_moments"`` on a
  mechanism that aggregates at the server) gives a :class:`Program`
  carrying its ``min_survivors`` and ``dropouts``; a :class:`Program`
  given keeps its own; a :class:`Static` has none (every participant
  arrives).
  """
  static = _static(config)
  if isinstance(config, Config) and static.secure:
    static = Program(**{f.name: getattr(static, f.name)
                        for f in dataclasses.fields(Static)},
                     min_survivors=config.min_survivors,
                     dropouts=config.dropouts)
  return dataclasses.replace(
      static,
      mechanism=options.FedDPDRMechanism(static.description.program),
      loss=options.ERMLoss(static.loss),
      aggregation=options.Aggregation(static.aggregation),
      model_aggregation=options.ModelAggregation(static.model_aggregation),
      topk=options.TopK(static.topk))
