"""Every mechanism has the one shape: make_plan → frozen Plan, release.

The walk reads every module of ``mechanisms`` and ``federated``. A module
that touches a privacy ledger is a mechanism module and must follow the
rule of :mod:`dpcore.shape`: plan makers ``make_plan`` /
``make_<variant>_plan`` returning a frozen dataclass named ``…Plan`` with
``epsilon``, ``delta``, ``relation`` and ``record(ledger, …)``; releases
``release`` / ``release_<variant>`` taking ``(key, plan, …)``; and no
module-level function that writes to a ledger itself.
"""

import dataclasses
import importlib
import inspect
import pkgutil
import re
import typing

import pytest

from dpcore import shape

PACKAGES = ("mechanisms", "federated")
MAKER = re.compile(r"^make(_\w+)?_plan$")
RELEASE = re.compile(r"^release(_\w+)?$")


def _modules():
  for package in PACKAGES:
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
      if not info.ispkg:
        yield importlib.import_module(info.name)


def _public_functions(module):
  return {name: fn for name, fn in vars(module).items()
          if inspect.isfunction(fn) and fn.__module__ == module.__name__
          and not name.startswith("_")}


def _is_mechanism_module(module) -> bool:
  # An audit module (``*_audit``) builds specs of a mechanism; it is not one.
  return (not module.__name__.endswith("_audit")
          and bool(re.search(r"\bledger\b", inspect.getsource(module))))


MECHANISM_MODULES = sorted(m.__name__ for m in _modules()
                           if _is_mechanism_module(m))


def test_the_walk_finds_the_known_mechanisms():
  # Each family holds at least these; a new mechanism module joins the
  # walk by speaking of a ledger.
  expected = {"mechanisms.pca.dp_pca", "mechanisms.erm.objective_perturbation",
              "mechanisms.erm.output_perturbation", "mechanisms.svm.dpwss",
              "mechanisms.svm.random_features", "mechanisms.lvq.init",
              "mechanisms.lvq.train", "federated.feddpdr.plan",
              "federated.fedsgd"}
  assert expected <= set(MECHANISM_MODULES)


def _plan_class(maker):
  hints = typing.get_type_hints(maker)
  cls = hints.get("return")
  assert isinstance(cls, type), (
      f"{maker.__module__}.{maker.__name__} must annotate its return type "
      f"with its plan class")
  return cls


@pytest.mark.parametrize("name", MECHANISM_MODULES)
def test_mechanism_module_has_the_shape(name):
  module = importlib.import_module(name)
  functions = _public_functions(module)
  makers = {n: f for n, f in functions.items() if MAKER.match(n)}
  releases = {n: f for n, f in functions.items() if RELEASE.match(n)}
  assert makers, f"{name} has no make_plan / make_<variant>_plan"
  assert releases, f"{name} has no release / release_<variant>"
  for fn in releases.values():
    shape.check_release(fn)
  for maker in makers.values():
    cls = _plan_class(maker)
    assert cls.__name__.endswith("Plan")
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    fields = {f.name for f in dataclasses.fields(cls)}
    assert set(shape.PLAN_FIELDS) <= fields, (cls, fields)
    record = inspect.signature(cls.record)
    assert list(record.parameters)[:2] == ["self", "ledger"]
  writers = [n for n, f in functions.items()
             if "ledger" in inspect.signature(f).parameters]
  assert not writers, (
      f"{name}: {writers} take a ledger; the plan's record method is the "
      f"one way into the ledger")


def test_check_plan_rejects_a_wrong_shape():
  @dataclasses.dataclass
  class LoosePlan:  # not frozen, no relation, no record
    epsilon: float
    delta: float

  with pytest.raises(TypeError, match="not frozen"):
    shape.check_plan(LoosePlan(1.0, 1e-5))

  def bad(plan, key):
    return plan, key

  with pytest.raises(TypeError, match="key, plan"):
    shape.check_release(bad)


def test_the_contributing_example_has_the_shape():
  import pathlib

  import jax
  import jax.numpy as jnp
  import numpy as np

  from dpcore import accounting

  text = (pathlib.Path(__file__).resolve().parents[1] /
          "CONTRIBUTING.md").read_text(encoding="utf-8")
  block = re.search(r"^## The one shape of a mechanism.*?^```python\n(.*?)^```",
                    text, flags=re.DOTALL | re.MULTILINE).group(1)
  namespace = {}
  exec(compile(block, "CONTRIBUTING.md", "exec"), namespace)
  plan = namespace["make_plan"](epsilon=1.0, delta=1e-5)
  shape.check_plan(plan)
  shape.check_release(namespace["release"])
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  assert ledger.guarantee(delta=1e-5).epsilon == pytest.approx(1.0, rel=1e-6)
  draws = jax.vmap(lambda k: namespace["release"](k, plan, jnp.ones(100)))(
      jax.random.split(jax.random.key(0), 4000))
  assert abs(float(np.mean(draws)) - 100) < 4 * plan.sigma / np.sqrt(4000)
  assert float(np.std(draws)) == pytest.approx(plan.sigma, rel=0.05)
  # The plan is a pytree: one compiled release serves every ε.
  assert plan.epsilon == pytest.approx(accounting.plan_epsilon(plan))
  compiled = jax.jit(namespace["release"])
  for epsilon in (0.5, 2.0):
    compiled(jax.random.key(1), namespace["make_plan"](
        epsilon=epsilon, delta=1e-5), jnp.ones(100))
  assert compiled._cache_size() == 1
