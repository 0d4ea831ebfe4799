"""dpcore.shape: what check_plan and check_release accept and refuse.

Each problem check_plan names is produced by a plan that differs from a
good one in that one respect, so a check that stopped looking would fail
here. (tests/shape_test.py walks the library's own mechanisms.)
"""

import dataclasses

import pytest

from dpcore import accounting, options, shape


@dataclasses.dataclass(frozen=True)
class GoodPlan:
  epsilon: float
  delta: float
  relation: options.Relation

  def record(self, ledger, *, label="good"):
    ledger.record_pure(self.epsilon, label=label, relation=self.relation)


def _good():
  return GoodPlan(1.0, 0.0, options.Relation.ADD_REMOVE)


def test_a_plan_of_the_one_shape_passes():
  plan = _good()
  shape.check_plan(plan)
  assert shape.PLAN_FIELDS == ("epsilon", "delta", "relation")
  assert accounting.plan_epsilon(plan) == 1.0  # its record, a ledger's ε


@dataclasses.dataclass
class LoosePlan:  # not frozen
  epsilon: float
  delta: float
  relation: options.Relation

  def record(self, ledger):
    del ledger


@dataclasses.dataclass(frozen=True)
class NoRelationPlan:
  epsilon: float
  delta: float

  def record(self, ledger):
    del ledger


@dataclasses.dataclass(frozen=True)
class SpelledPlan:  # a string, not a Relation
  epsilon: float
  delta: float
  relation: str

  def record(self, ledger):
    del ledger


@dataclasses.dataclass(frozen=True)
class SilentPlan:  # no record method
  epsilon: float
  delta: float
  relation: options.Relation


@dataclasses.dataclass(frozen=True)
class BackwardsPlan:
  epsilon: float
  delta: float
  relation: options.Relation

  def record(self, label, ledger):
    del label, ledger


@dataclasses.dataclass(frozen=True)
class Settings:  # the name does not end in Plan
  epsilon: float
  delta: float
  relation: options.Relation

  def record(self, ledger):
    del ledger


class NotADataclassPlan:
  epsilon, delta, relation = 1.0, 0.0, options.Relation.ADD_REMOVE

  def record(self, ledger):
    del ledger


ADD = options.Relation.ADD_REMOVE


@pytest.mark.parametrize("plan, problem", [
    (LoosePlan(1.0, 0.0, ADD), "is not frozen"),
    (NoRelationPlan(1.0, 0.0), r"lacks the fields \['relation'\]"),
    (SpelledPlan(1.0, 0.0, "add_remove"), "not a Relation"),
    (SilentPlan(1.0, 0.0, ADD), "no record"),
    (BackwardsPlan(1.0, 0.0, ADD), "first argument is not 'ledger'"),
    (Settings(1.0, 0.0, ADD), "does not end in 'Plan'"),
    (NotADataclassPlan(), "not a dataclass instance"),
    (GoodPlan, "not a dataclass instance"),  # the class, not a plan
])
def test_each_problem_is_named(plan, problem):
  with pytest.raises(TypeError, match=problem):
    shape.check_plan(plan)


def release(key, plan, data):
  return key, plan, data


def test_check_release_wants_key_then_plan():
  shape.check_release(release)

  def plan_first(plan, key, data):
    return plan, key, data

  def keyword_only(key, *, plan):
    return key, plan

  def one_argument(key):
    return key

  for fn in (plan_first, keyword_only, one_argument):
    with pytest.raises(TypeError, match=r"\(key, plan, …\)"):
      shape.check_release(fn)
