"""The description of one privacy audit (:class:`AuditSpec`).

Its own module so that the spec collections (:mod:`.audits`,
:mod:`.dpwss_audits`, :mod:`.rff_audits`, :mod:`.tuning_audits`) import
it without importing one another.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class AuditSpec:
  """One audit: a mechanism, two neighbours, a statistic and the claim.

  Attributes:
    name: short identifier, e.g. ``"gaussian"``.
    relation: ``"add_remove"`` or ``"replace_one"``.
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
  """
  name: str
  relation: str
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
