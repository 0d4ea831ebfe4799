"""The settings of a FedDPDR-DPML run, and their checks.

:class:`Config` is :class:`Static` (what shapes the compiled program:
mechanism, k, λ, loss, aggregations, top-k, tol, max_iter) plus the budget
(ε, δ, calibration, split, neighbouring), which reaches the program only
through the traced per-participant numbers σ, n, p and θ of the plan
(:class:`federated.feddpdr.Traced`). :func:`program` is the
:class:`Static` that selects the compiled program: ``nonpriv`` runs the
``feddpdr`` one with the noise off, so a sweep over ε or δ and the
non-private baseline share one executable.

Every check here is host-side and runs before any program is compiled.
"""

from __future__ import annotations

import dataclasses

from dpcore import calibration as dp_calibration
from dpcore import options, validation
from federated.feddpdr.registry import (
  Mechanism,
  describe,
)
from mechanisms.erm import objective_perturbation as op

__all__ = ["Config", "Static", "check_chunk", "check_settings", "program"]


@dataclasses.dataclass(frozen=True)
class Static:
  """The settings that shape the compiled program (``jit`` static)."""
  mechanism: str = "feddpdr"
  k: int = 20
  lam: float = 0.01
  loss: str = "huber"
  huber_h: float = op.HUBER_H
  aggregation: str = "subspace"
  model_aggregation: str = "weighted"
  topk: str = "eigh"
  tol: float = 1e-8
  max_iter: int = 500

  @property
  def description(self) -> Mechanism:
    """The mechanism's :class:`Mechanism` (ValueError if unknown)."""
    return describe(self.mechanism)

  @property
  def private(self) -> bool:
    return self.description.private


@dataclasses.dataclass(frozen=True)
class Config(Static):
  """Settings of one FedDPDR-DPML experiment (see the module docstring).

  The fields of :class:`Static`, which shape the compiled program, and the
  budget (ε, δ, calibration, split, neighbouring), which only changes the
  host-side calibration (:func:`make_plan`) and reaches the program as
  traced arrays.
  """
  epsilon: float = 0.1
  delta: float = 1e-4
  calibration: str = "analytic"
  budget_per_classifier: bool = False
  pca_fraction: float = 0.5
  neighbouring: str = options.Relation.REPLACE_ONE.value

  @property
  def static(self) -> Static:
    """The program-shaping fields, as a plain :class:`Static`."""
    return Static(**{f.name: getattr(self, f.name)
                     for f in dataclasses.fields(Static)})

  def check(self, *, d: int | None = None, prefix: str = "") -> Config:
    """Validates every field, and k against the data dimension d.

    Args:
      d: the data dimension; None leaves the check of k against it for
        later (e.g. before the data is loaded).
      prefix: what the messages put before each setting's name: ``"--"``
        when the settings came from command-line flags of the same names.

    Returns:
      ``self``.

    Raises:
      ValueError: one line naming the setting and the fix.
    """
    def name(field):
      return prefix + field
    mech = describe(self.mechanism, name("mechanism"))
    for value, kind, field in (
        (self.aggregation, options.Aggregation, "aggregation"),
        (self.model_aggregation, options.ModelAggregation,
         "model_aggregation"),
        (self.loss, options.ERMLoss, "loss"),
        (self.calibration, options.PcaCalibration, "calibration"),
        (self.topk, options.TopK, "topk")):
      options.parse(kind, value, name(field))
    options.parse_relation(self.neighbouring, name("neighbouring"))
    dp_calibration.check_calibrated_epsilon(self.epsilon, name("epsilon"))
    validation.check_delta(self.delta, name("delta"))
    validation.check_positive(self.lam, name("lam"))
    validation.check_positive(self.huber_h, name("huber_h"))
    validation.check_positive(self.tol, name("tol"))
    validation.check_count(self.max_iter, name("max_iter"))
    validation.check_in_range(self.pca_fraction, name("pca_fraction"), 0.0,
                              1.0)
    k = validation.check_positive_int(self.k, name("k"))
    if mech.reduces and d is not None and k > d:
      raise ValueError(
          f"{name('k')}={k} exceeds the data dimension d={d}; choose "
          f"{name('k')} <= {d}.")
    eps_pca = self.epsilon * self.pca_fraction
    if (self.calibration == "classic" and mech.private and mech.reduces
        and eps_pca >= 1):
      raise ValueError(
          f"{name('calibration')}=classic is proven only for ε₁ < 1, and "
          f"{name('epsilon')}={self.epsilon:g} gives ε₁ = {eps_pca:g}; use "
          f"{name('calibration')}=analytic or a smaller {name('epsilon')}.")
    return self


def check_settings(configs, *, d: int | None = None, seeds: int = 1,
                   participant_chunk: int | None = None,
                   prefix: str = "") -> None:
  """Every setting of runs of ``configs``, checked before any work.

  Args:
    configs: the runs' :class:`Config` s (:meth:`Config.check` each).
    d: the data dimension, or None where not known yet.
    seeds: repeats per run.
    participant_chunk: participants mapped at once, or None.
    prefix: what the messages put before the settings' names (``"--"``
      when they came from command-line flags of the same names).

  Raises:
    ValueError: one line naming the setting and the fix.
  """
  for config in configs:
    if not isinstance(config, Config):
      raise TypeError(f"config must be a feddpdr.Config, got {config!r}.")
    config.check(d=d, prefix=prefix)
  validation.check_positive_int(seeds, prefix + "seeds")
  check_chunk(participant_chunk, prefix + "participant_chunk")


def check_chunk(participant_chunk: int | None,
                name: str = "participant_chunk") -> int | None:
  """``participant_chunk`` checked (None, or a positive integer); the
  message calls it ``name`` (e.g. ``"--participant_chunk"``)."""
  if participant_chunk is None:
    return None
  return validation.check_positive_int(participant_chunk, name)


def _static(config: Config | Static) -> Static:
  return config.static if isinstance(config, Config) else config


def program(config: Config | Static) -> Static:
  """The :class:`Static` that selects the compiled program.

  A mechanism runs the program its :class:`Mechanism` names: ``nonpriv``
  runs the ``feddpdr`` program with the noise switched off by its traced
  arguments (:func:`make_plan`), so the baseline and every private budget
  share one executable; every other mechanism is its own.
  """
  static = _static(config)
  return dataclasses.replace(static, mechanism=static.description.program)
