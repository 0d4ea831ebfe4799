"""dpcore.options: the one vocabulary, and that it imports without JAX.

The import tests run in a fresh interpreter (this module itself imports
the library, and with it JAX, to check that it uses the same sets).
"""

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


def test_check_one_of_gives_a_one_line_error_naming_the_flag():
  assert options.check_one_of("rbf", options.KERNELS, "--kernel") == "rbf"
  with pytest.raises(ValueError, match=r"^--kernel must be one of linear, "
                     r"poly, rbf, sigmoid; got 'cubic'\.$"):
    options.check_one_of("cubic", options.KERNELS, "--kernel")
  for bad in (None, 3, ["rbf"]):
    with pytest.raises(ValueError, match="kernel must be one of"):
      options.check_one_of(bad, options.KERNELS, "kernel")


def test_option_sets_are_tuples_of_distinct_snake_case_words():
  sets = {name: value for name, value in vars(options).items()
          if name.isupper() and isinstance(value, tuple)}
  assert len(sets) >= 20
  for name, value in sets.items():
    assert value and len(set(value)) == len(value), name
    assert all(isinstance(v, str) and v == v.strip().lower() and " " not in v
               for v in value), name
  assert set(options.__all__) >= set(sets)


def test_the_library_checks_against_the_same_sets():
  assert tuning.DISTRIBUTIONS is options.TUNING_DISTRIBUTIONS
  assert kernels.KERNELS is options.KERNELS
  assert dp_pca.TOPK is aggregation.TOPK is options.TOPK_METHODS
  assert dpwss.SELECTIONS is options.DPWSS_SELECTIONS
  assert fedsgd.TRUST_MODELS is options.FEDSGD_TRUST_MODELS
  assert model.PHIS is options.LVQ_PHIS
  assert train.MODELS is options.LVQ_MODELS
  assert random_features.LOSSES is options.RFF_LOSSES
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
