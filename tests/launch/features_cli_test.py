"""launch.features's command line: bad flags refused before any data is
read; --recipe starts from a named candidate and flags given win."""

import json

import pytest

from tests.launch import cli

_BODY = r'''
import dataclasses
from launch import features as script
from launch.data import loaders
from launch.experiments import features

def fake_run(**kwargs):
  recipe = dataclasses.asdict(kwargs["recipe"])
  yield {"recipe": recipe, "validation": kwargs["validation"]}

loaders.load_dataset = forbid("load_dataset")
features.run = fake_run
for group, items in cases.items():
  for name, argv in items.items():
    results[name] = call("features", script.main, argv)
'''

BEFORE_LOAD = {
    "recipe": (["--recipe=best"], "--recipe='best' is not one of"),
    "tune_candidate": (["--tune", "--validation=100",
                        "--tune_candidates=base,huge"],
                       "--tune_candidates: ['huge']"),
    "tune_no_validation": (["--tune"], "--tune needs --validation"),
    "tune_trials_one": (["--tune", "--validation=100",
                         "--tune_expected_trials=1"], "mean above 1"),
    "tune_distribution": (["--tune", "--validation=100",
                           "--tune_distribution=uniform"],
                          "distribution must be one of"),
    "validation": (["--validation=-5"], "--validation=-5 must be ≥ 0"),
}

RECIPES = {
    "default": [],
    "named": ["--recipe=batch4096_lr8"],
    "named_and_flag": ["--recipe=batch4096_lr8", "--epochs=60",
                       "--validation=500"],
}


@pytest.fixture(scope="module")
def results():
  cases = {"before_load": {k: v[0] for k, v in BEFORE_LOAD.items()},
           "recipes": RECIPES}
  return cli.drive(_BODY, cases)


@pytest.mark.parametrize("name", sorted(BEFORE_LOAD))
def test_bad_flags_fail_in_one_line_before_loading(results, name):
  cli.assert_one_line_error(results[name], BEFORE_LOAD[name][1])


def _record(result):
  assert result["code"] == 0, result["stderr"][-2000:]
  return json.loads(result["stdout"].strip().splitlines()[-1])


def test_recipe_flags(results):
  default = _record(results["default"])
  assert default["recipe"]["batch_size"] == 8192
  assert default["recipe_name"] is None
  assert default["command"] == "python -m launch.features "
  named = _record(results["named"])["recipe"]
  assert (named["batch_size"], named["learning_rate"]) == (4096, 8.0)
  both = _record(results["named_and_flag"])
  assert (both["recipe"]["batch_size"], both["recipe"]["epochs"]) == (
      4096, 60.0)
  assert both["validation"] == 500
  assert both["command"].endswith("--epochs=60 --validation=500")
