"""dpcore.options: the one vocabulary, and that it imports without JAX.

The import tests run in a fresh interpreter (this module itself imports
the library, and with it JAX, to check that it uses the same sets).
"""

import enum
import json
import subprocess
import sys

import pytest

from dpcore import options, trainer, tuning
from dpcore.options import Relation
from federated import aggregation, fedsgd
from mechanisms.erm import objective_perturbation, output_perturbation
from mechanisms.lvq import init, model, train
from mechanisms.pca import dp_pca
from mechanisms.svm import dpwss, kernels, random_features


def test_relations_are_strings_spelled_once():
  assert options.RELATIONS == ("add_remove", "replace_one")
  assert Relation.ADD_REMOVE == "add_remove"
  assert Relation("replace_one") is Relation.REPLACE_ONE
  # Formatted and serialised as the spelling, not as "Relation.X".
  assert f"{Relation.REPLACE_ONE}" == "replace_one"
  assert json.dumps({"r": Relation.ADD_REMOVE}) == '{"r": "add_remove"}'


@pytest.mark.parametrize("value, expected", [
    ("add_remove", Relation.ADD_REMOVE),
    ("replace_one", Relation.REPLACE_ONE),
    (Relation.REPLACE_ONE, Relation.REPLACE_ONE),
    ("replace", Relation.REPLACE_ONE),  # the old spelling, mapped
])
def test_parse_relation_accepts_the_spellings(value, expected):
  assert options.parse_relation(value) is expected


@pytest.mark.parametrize("value", [
    "Replace_One", "add-remove", "replace one", "add", "remove", "",
    None, 1, ("add_remove",)])
def test_parse_relation_refuses_anything_else_naming_the_spellings(value):
  with pytest.raises(ValueError) as info:
    options.parse_relation(value, "neighbouring")
  message = str(info.value)
  assert message.startswith("neighbouring must be one of add_remove, "
                            "replace_one")
  assert repr(value) in message and "\n" not in message


def test_only_parse_relation_maps_the_old_spelling():
  assert options.LEGACY_RELATIONS == {"replace": Relation.REPLACE_ONE}
  assert "replace" not in options.RELATIONS
  with pytest.raises(ValueError):
    Relation("replace")
  assert options.RELATION_SPELLINGS == ("add_remove", "replace_one",
                                        "replace")


def test_parse_gives_the_member_or_a_one_line_error_naming_the_flag():
  assert options.parse(options.Kernel, "rbf", "--kernel") is (
      options.Kernel.RBF)
  assert options.parse(options.Kernel, options.Kernel.POLY, "kernel") is (
      options.Kernel.POLY)
  with pytest.raises(ValueError, match=r"^--kernel must be one of linear, "
                     r"poly, rbf, sigmoid; got 'cubic'\.$"):
    options.parse(options.Kernel, "cubic", "--kernel")
  for bad in (None, 3, ["rbf"], "RBF"):
    with pytest.raises(ValueError, match="kernel must be one of"):
      options.parse(options.Kernel, bad, "kernel")


def _option_sets(module):
  return {name: value for name, value in vars(module).items()
          if isinstance(value, type) and issubclass(value, enum.StrEnum)
          and value.__module__ == module.__name__}


def test_option_sets_are_str_enums_of_distinct_snake_case_words():
  sets = _option_sets(options)
  assert len(sets) >= 19
  for name, kind in sets.items():
    values = [m.value for m in kind]
    assert values and len(set(values)) == len(values), name
    assert all(v == v.strip().lower() and " " not in v for v in values), name
    # A member is its spelling: in f-strings, JSON and comparisons.
    member = next(iter(kind))
    assert member == member.value and f"{member}" == member.value
  assert set(options.__all__) >= set(sets)


def test_the_library_keeps_no_aliases_of_the_option_sets():
  # One vocabulary: no module keeps its own tuple of an option set's
  # spellings (the old aliases ``kernels.KERNELS``, ``fedsgd.TRUST_MODELS``…).
  spellings = {frozenset(m.value for m in kind)
               for kind in _option_sets(options).values()}
  for module in (tuning, trainer, aggregation, fedsgd, objective_perturbation,
                 output_perturbation, init, model, train, dp_pca, dpwss,
                 kernels, random_features):
    for name, value in vars(module).items():
      if name.isupper() and isinstance(value, tuple) and value and all(
          isinstance(v, str) for v in value):
        assert frozenset(value) not in spellings, (module.__name__, name)


def test_the_library_checks_against_the_same_sets():
  with pytest.raises(ValueError, match="^kernel must be one of linear"):
    kernels.check_settings("cubic", gamma=1.0)
  with pytest.raises(ValueError, match="^trust must be one of server, local, "
                     "participant, distributed; got 'peer'"):
    fedsgd.make_plan([10, 10], trust="peer", sampling_rate=0.5, steps=1,
                     clip_norm=1.0, noise_multiplier=1.0)
  with pytest.raises(ValueError, match="^distribution must be one of "
                     "poisson, geometric"):
    tuning.trial_count("uniform", expected_trials=3.0)
  # Every mechanism states its relation in the one vocabulary.
  assert {trainer.RELATION, fedsgd.RELATION, init.RELATION,
          train.RELATION} == {Relation.ADD_REMOVE}
  assert {objective_perturbation.RELATION, output_perturbation.RELATION,
          dpwss.RELATION} == {Relation.REPLACE_ONE}


def test_importing_options_does_not_import_jax_or_numpy():
  code = ("import dpcore.options, sys; "
          "assert 'jax' not in sys.modules, 'jax'; "
          "assert 'numpy' not in sys.modules, 'numpy'; "
          "import dpcore; assert 'jax' not in sys.modules, 'dpcore'")
  subprocess.run([sys.executable, "-c", code], check=True)


def test_the_package_exports_every_submodule_lazily():
  code = (
      "import dpcore, pkgutil, sys\n"
      "names = [m.name for m in pkgutil.iter_modules(dpcore.__path__)]\n"
      "missing = sorted(set(names) - set(dpcore.__all__))\n"
      "assert not missing, missing\n"
      "assert 'jax' not in sys.modules\n"
      "assert dpcore.PrivacyLedger is dpcore.accounting.PrivacyLedger\n"
      "for name in dpcore.__all__:\n"
      "  getattr(dpcore, name)\n"
      "assert 'jax' in sys.modules\n"
      "try:\n"
      "  dpcore.no_such_name\n"
      "except AttributeError:\n"
      "  pass\n"
      "else:\n"
      "  raise SystemExit('no AttributeError')\n")
  subprocess.run([sys.executable, "-c", code], check=True)
