"""The one shape of a mechanism: a frozen plan and a pure release.

Every mechanism of :mod:`mechanisms` and :mod:`federated` is called in two
steps with one naming rule:

* ``make_plan(*, epsilon, delta, …)`` (or ``make_<variant>_plan`` where a
  module holds several mechanisms) runs on the host, calibrates, and
  returns a frozen dataclass whose name ends in ``Plan``. It holds the
  public facts of the release: the guarantee (``epsilon``, ``delta``), the
  noise scale, the sensitivity it enforces, the neighbouring ``relation``
  (:class:`dpcore.options.Relation`) and the counts. ``plan.record(ledger)``
  is the one way the release enters a
  :class:`dpcore.accounting.PrivacyLedger`.
* ``plan.epsilon`` is the ε that holds: what the ledger reports, at the
  plan's δ, for everything the plan releases
  (:func:`dpcore.accounting.plan_epsilon`); None only where no guarantee
  can be stated (no δ known, no noise, a non-private plan).
  ``plan.target_epsilon`` is the budget the noise was calibrated for, the
  ``epsilon=`` that ``make_plan`` was given (None where σ was given
  directly); a calibrated plan's ``epsilon`` is at most its target.
* A plan is a pytree (``jax.tree_util.register_dataclass``): its numbers
  (σ, the clip, ε, δ, …) are leaves and its structure (counts, shapes,
  options) static aux data, so a jitted function that takes the plan as an
  argument compiles once for every ε of the same shape.
* ``release(key, plan, …)`` (or ``release_<variant>``) is pure and
  jittable: the key first, the plan second, then the data. It draws
  exactly the noise the plan's ``record`` accounts.

:func:`check_plan` is what ``tests/shape_test.py`` asks of every plan.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable

from dpcore import options

__all__ = ["PLAN_FIELDS", "check_plan", "check_release"]

PLAN_FIELDS = ("epsilon", "delta", "relation")
"""The fields every plan has, beside its own (scale, sensitivity, counts)."""


def check_plan(plan) -> None:
  """Raises TypeError unless ``plan`` has the shape of a mechanism's plan.

  A frozen dataclass named ``…Plan`` with the fields of
  :data:`PLAN_FIELDS` (``relation`` a :class:`dpcore.options.Relation`)
  and a ``record(ledger, …)`` method.
  """
  cls = type(plan)
  problems = []
  instance = dataclasses.is_dataclass(plan) and not isinstance(plan, type)
  if not instance:
    problems.append("is not a dataclass instance")
  elif not cls.__dataclass_params__.frozen:
    problems.append("is not frozen")
  if not cls.__name__.endswith("Plan"):
    problems.append("has a name that does not end in 'Plan'")
  names = {f.name for f in dataclasses.fields(plan)} if instance else set()
  missing = [f for f in PLAN_FIELDS if f not in names]
  if missing:
    problems.append(f"lacks the fields {missing}")
  elif not isinstance(plan.relation, options.Relation):
    problems.append(f"has relation={plan.relation!r}, not a Relation")
  record = getattr(plan, "record", None)
  if not callable(record):
    problems.append("has no record(ledger) method")
  else:
    params = list(inspect.signature(record).parameters)
    if not params or params[0] != "ledger":
      problems.append("has a record method whose first argument is not "
                      "'ledger'")
  if problems:
    raise TypeError(f"{cls.__qualname__} " + "; ".join(problems) + ".")


def check_release(fn: Callable) -> None:
  """Raises TypeError unless ``fn`` takes ``(key, plan, …)``."""
  params = list(inspect.signature(fn).parameters.values())
  names = [p.name for p in params[:2]]
  if names != ["key", "plan"] or any(
      p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
      for p in params[:2]):
    raise TypeError(f"{fn.__module__}.{fn.__qualname__} takes {names}, not "
                    f"(key, plan, …) first.")
