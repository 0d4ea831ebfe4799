"""The description of one privacy audit (:class:`AuditSpec`) and its run.

Every mechanism's audit specs are built from it, beside the mechanism: a
module ``<mechanism>_audit.py`` whose ``specs()`` returns them (the
unbroken specs and their deliberately broken variants). The audit runner
(:mod:`launch.audit`) collects every such module of ``dpcore``,
``mechanisms`` and ``federated`` and runs each spec with :func:`run`.
:func:`claimed_epsilon` reads the ε a spec audits and checks that the
library claims it under the spec's neighbouring relation; :func:`verdict`
compares an audit's lower bound with that claim, :func:`group_verdicts`
takes the worst over a spec's canary positions and :func:`failed` says
which verdicts fail the audit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from dpcore import auditing, options


@dataclasses.dataclass(frozen=True)
class AuditSpec:
  """One audit: a mechanism, two neighbours, a statistic and the claim.

  Attributes:
    name: short identifier, e.g. ``"gaussian"``.
    relation: the neighbouring relation of ``data_0`` and ``data_1``, a
      :class:`dpcore.options.Relation` (a spelling is parsed).
    settings: JSON-ready settings shown in the table.
    mechanism: ``(key, data) -> output`` (jittable in ``data``).
    data_0: one data set.
    data_1: its neighbour.
    statistic: ``output -> scalar``, higher meaning "looks like data_1".
    delta: the δ of the audit.
    reported_epsilon: the library's ε at ``delta`` (None: no claim).
    nominal_epsilon: a paper's figure where it differs from the library's.
    default_trials: trials per side when none are asked for.
    broken: a deliberately broken variant the audit must catch.
    x64: run the audit with 64-bit floats enabled (for mechanisms whose
      solvers need float64, such as objective perturbation).
    position: where the canary sits among the units (``"first"``,
      ``"middle"``, ``"last"``: :data:`POSITIONS`), None where there is one
      unit; a spec audited at several positions is named
      ``base@position``, and its verdict is the worst of them
      (:func:`group_verdicts`).
  """
  name: str
  relation: options.Relation
  settings: dict
  mechanism: Callable
  data_0: Any
  data_1: Any
  statistic: Callable
  delta: float
  reported_epsilon: float | None
  nominal_epsilon: float | None = None
  default_trials: int = 100_000
  broken: bool = False
  x64: bool = False
  position: str | None = None

  def __post_init__(self):
    object.__setattr__(self, "relation",
                       options.parse_relation(self.relation, "relation"))


POSITIONS = ("first", "middle", "last")
"""Where a canary is placed among the rows or participants: a bug that
treats slot i as unit i (a compacted mask read per unit, padding that
repeats row 0) shows at some positions and not at others."""


def canary_index(count: int, position: str) -> int:
  """The index of the canary among ``count`` units at ``position``."""
  if position not in POSITIONS:
    raise ValueError(f"position must be one of {POSITIONS}, got "
                     f"{position!r}.")
  return {"first": 0, "middle": count // 2, "last": count - 1}[position]


def check_variant(broken: str | None, variants) -> None:
  """Refuses a ``broken`` that is neither None nor one of ``variants``.

  Raises:
    ValueError: ``"broken must be None or one of (…), got 'x'."``
  """
  if broken not in (None, *variants):
    raise ValueError(f"broken must be None or one of {tuple(variants)}, "
                     f"got {broken!r}.")


def spec_name(base: str, position: str | None) -> str:
  """``base@position`` (``base`` where there is no position)."""
  return base if position is None else f"{base}@{position}"


def identity(base: str, *, position: str | None, broken: str | None,
             trials: tuple[int, int]) -> dict:
  """The naming fields of one :class:`AuditSpec` of ``base``.

  The unbroken spec is ``base@position`` (:func:`spec_name`) at
  ``position``, with ``trials[0]`` default trials; a broken variant is
  ``base_<broken>``, with no position (its module puts the canary where
  the bug shows) and ``trials[1]`` (a broken variant is caught by far).
  ``tests/launch/audit_test.py`` pairs each claim with its broken
  variants by these names.

  Returns:
    ``name``, ``position``, ``broken`` and ``default_trials``, to pass
    to :class:`AuditSpec` as keywords.
  """
  if broken is None:
    return {"name": spec_name(base, position), "position": position,
            "broken": False, "default_trials": trials[0]}
  return {"name": f"{base}_{broken}", "position": None, "broken": True,
          "default_trials": trials[1]}


def group(name: str) -> str:
  """The spec a positioned audit belongs to: its name before ``@``."""
  return name.split("@", 1)[0]


def verdict(spec: AuditSpec, epsilon_lower: float) -> str:
  """``ok``, ``VIOLATION``, ``caught``, ``NOT CAUGHT`` or ``no claim``."""
  if spec.reported_epsilon is None:
    return "no claim"
  above = epsilon_lower > spec.reported_epsilon
  if spec.broken:
    return "caught" if above else "NOT CAUGHT"
  return "VIOLATION" if above else "ok"


_SEVERITY = ("VIOLATION", "NOT CAUGHT", "no claim", "ok", "caught")


def group_verdicts(records: list[dict]) -> dict[str, str]:
  """Each spec's verdict over its canary positions: the worst of them.

  ``records`` hold each audit's ``"name"`` and ``"verdict"``. An unbroken
  spec holds only if it holds at every position (one VIOLATION is a
  violation); a broken variant is caught if some position catches it (a
  bug need not show everywhere).
  """
  out: dict[str, list[str]] = {}
  for r in records:
    out.setdefault(group(r["name"]), []).append(r["verdict"])
  worst = {}
  for name, verdicts in out.items():
    if "caught" in verdicts or "NOT CAUGHT" in verdicts:
      worst[name] = "caught" if "caught" in verdicts else "NOT CAUGHT"
    else:
      worst[name] = min(verdicts, key=_SEVERITY.index)
  return worst


def failed(record: dict) -> bool:
  """Whether a record's ``"verdict"`` fails the audit (a VIOLATION or a
  broken variant NOT CAUGHT; ``python -m launch.audit`` then exits
  non-zero)."""
  return record["verdict"] in ("VIOLATION", "NOT CAUGHT")


def claimed_epsilon(claim, relation, delta: float | None = None) -> float:
  """The ε the library claims, refused if claimed under another relation.

  Args:
    claim: a :class:`dpcore.accounting.PrivacyLedger` holding the audited
      mechanism's entries (its ε is read at ``delta``), or a privacy
      record (its ``"epsilon"``).
    relation: the relation the audit's neighbours are built for.
    delta: the δ to read a ledger's ε at (None: the ledger's default).

  Returns:
    The claimed ε.

  Raises:
    ValueError: the claim is stated under another relation (the audit
      would test a guarantee the library does not make).
  """
  relation = options.parse_relation(relation, "relation")
  if isinstance(claim, dict):
    claimed, epsilon = claim["relation"], claim["epsilon"]
  else:
    claimed, epsilon = claim.relation, claim.guarantee(delta).epsilon
  if claimed != relation:
    raise ValueError(
        f"the audit's neighbours are {relation.value} but the library "
        f"claims its ε under {claimed}; build the neighbours for the "
        f"relation the mechanism records.")
  return epsilon


def run(key: jax.Array, spec: AuditSpec, *, trials: int | None = None,
        chunk: int = 100_000, memory_budget: int | None = None
        ) -> auditing.AuditResult:
  """Audits ``spec`` (its default trials unless given), in x64 if it asks.

  Args:
    key: the audit's PRNG key (the runner derives one per spec name).
    spec: the spec to audit.
    trials: runs per side (None: ``spec.default_trials``).
    chunk: trials per chunk of keys (:func:`dpcore.auditing.audit`).
    memory_budget: bytes (None: no check); bounds the trials vmapped at
      once (:func:`dpcore.auditing.audit`).

  Returns:
    The :class:`dpcore.auditing.AuditResult`.
  """
  trials = spec.default_trials if trials is None else trials
  with jax.enable_x64(spec.x64):
    data_0 = jax.tree.map(jnp.asarray, spec.data_0)
    data_1 = jax.tree.map(jnp.asarray, spec.data_1)
    return auditing.audit(key, spec.mechanism, data_0, data_1,
                          statistic=spec.statistic, delta=spec.delta,
                          trials=trials, chunk=chunk,
                          memory_budget=memory_budget)


__all__ = ["POSITIONS", "AuditSpec", "canary_index", "check_variant",
           "claimed_epsilon", "failed", "group", "group_verdicts", "identity",
           "run", "spec_name", "verdict"]
