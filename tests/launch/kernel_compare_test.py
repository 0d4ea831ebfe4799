"""launch.kernel_compare: one-line errors before any work, a tiny real run.

Bad flags must end the script with exit status 2 and one ``error: …``
line before any data is read or any learner runs (the harness is
:mod:`tests.launch.cli`: one subprocess imports the script once, makes
the loader and the learners raise if called, and runs every case). One
real run on a 60-row svmlight file writes its JSON lines, each with the
one privacy schema, and a second identical call skips it.
"""

import json

import numpy as np
import pytest

from launch.experiments import kernel_compare as experiment
from tests.launch import cli

_BODY = r'''
from launch import kernel_compare as script
from launch.data import loaders
from launch.experiments import kernel_compare as experiment

real = {"load": loaders.load_dataset, "run": experiment.run_method}
for group, items in cases.items():
  experiment.run_method = forbid("run_method")
  loaders.load_dataset = (real["load"] if group == "real"
                          else forbid("load_dataset"))
  if group == "real":
    experiment.run_method = real["run"]
  for name, argv in items.items():
    results[name] = call("kernel_compare", script.main, argv)
'''

BEFORE_LOAD = {
    "epsilon_zero": (["--epsilons=0"], "epsilons must be > 0"),
    "epsilon_text": (["--epsilons=1,x"], "--epsilons='1,x'"),
    "method": (["--methods=libsvm,svm_magic"], "choose from libsvm"),
    "seeds": (["--seeds=0"], "seeds must be ≥ 1, got 0"),
    "delta": (["--delta=1"],
              "delta must lie strictly between 0 and 1, got 1.0"),
    "test_fraction": (["--test_fraction=1.5"], "test_fraction=1.5"),
    "no_dataset": (["--datasets="], "no data set given"),
    "dataset": (["--datasets=nosuch"], "unknown dataset 'nosuch'"),
    "no_public_bounds": (["--datasets=breast_cancer", "--scaling=auto"],
                         "no public feature bounds"),
    "classes": (["--classes=3"], "exactly two"),
    "enum_scaling": (["--scaling=zscore"], "--scaling"),
}


def _svmlight(path, rows):
  rng = np.random.default_rng(0)
  with open(path, "w", encoding="utf-8") as f:
    for i in range(rows):
      label = 1 if i % 2 else -1
      a, b = rng.normal(size=2) * 0.3 + 0.4 * label
      f.write(f"{label} 1:{a:.4f} 2:{b:.4f}\n")
  return f"svmlight:{path}"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("kernel_compare")
  out = str(tmp / "r.jsonl")
  cases = {
      "before_load": {k: argv + [f"--out={out}"]
                      for k, (argv, _) in BEFORE_LOAD.items()},
      "before_load_out": {"out_dir": [f"--out={tmp}"]},
  }
  small = _svmlight(tmp / "small.svm", 60)
  run_out = tmp / "run.jsonl"
  run = [f"--datasets={small}", "--methods=libsvm,rff_dpsgd,"
         "rff_output_perturbation", "--epsilons=4", "--seeds=2",
         "--scaling=none", f"--out={run_out}",
         f"--table_md={tmp / 'table.md'}"]
  cases["real"] = {"first": run, "again": list(run)}
  found = cli.drive(_BODY, cases)
  found["_paths"] = {"run_out": str(run_out),
                     "table": str(tmp / "table.md")}
  return found


@pytest.mark.parametrize("name", sorted(BEFORE_LOAD))
def test_bad_flag_fails_before_any_work(results, name):
  cli.assert_one_line_error(results[name], BEFORE_LOAD[name][1])


def test_out_directory_fails_before_any_work(results):
  cli.assert_one_line_error(results["out_dir"], "is a directory")


def test_tiny_run_writes_records_and_resumes(results):
  from dpcore import accounting  # pylint: disable=g-import-not-at-top
  first, again = results["first"], results["again"]
  assert first["code"] == 0, first["stderr"][-2000:]
  with open(results["_paths"]["run_out"], encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  assert [r["method"] for r in records] == [
      "libsvm", "rff_dpsgd", "rff_output_perturbation"]
  printed = [json.loads(line) for line in first["stdout"].splitlines()
             if line.startswith("{")]
  assert printed == records
  for r in records:
    assert tuple(r["privacy"]) == accounting.PRIVACY_FIELDS
    assert r["n_train"] == 42 and r["n_test"] == 18
    assert 0.0 <= r["accuracy_mean"] <= 1.0
  libsvm, dpsgd, outp = records
  assert libsvm["privacy"]["no_guarantee"] == accounting.NON_PRIVATE
  assert libsvm["model_is_private"] is False
  assert dpsgd["neighbouring"] == "add_remove"
  assert 0 < dpsgd["privacy"]["epsilon"] <= 4.0 * (1 + 1e-6)
  assert len(dpsgd["accuracy_per_seed"]) == 2
  assert outp["neighbouring"] == "replace_one"
  assert outp["privacy"]["epsilon"] == pytest.approx(4.0)
  assert not dpsgd["scaling_reads_data"]
  # The second call finds every run and skips it.
  assert again["code"] == 0, again["stderr"][-2000:]
  assert again["stderr"].count("skipping 1 finished run") == 3
  with open(results["_paths"]["table"], encoding="utf-8") as f:
    table = f.read()
  assert "RFF + DP-SGD" in table and "ε = 4" in table


def test_split_is_fixed_and_disjoint():
  from launch.experiments import (  # pylint: disable=g-import-not-at-top
      kernel_compare,
  )
  train, test = kernel_compare.split_indices(100)
  again_train, again_test = kernel_compare.split_indices(100)
  np.testing.assert_array_equal(train, again_train)
  np.testing.assert_array_equal(test, again_test)
  assert len(test) == 30 and len(train) == 70
  assert not set(train.tolist()) & set(test.tolist())
  other, _ = kernel_compare.split_indices(100, split_seed=1)
  assert not np.array_equal(np.sort(train), np.sort(other))


def test_help_exits_zero():
  proc = cli.run_module("launch.kernel_compare", "--help")
  assert "--epsilons" in proc.stdout
  assert proc.returncode == 0


def test_records_on_heart_say_the_recipe_choice_is_not_covered(monkeypatch):
  # The private recipes were chosen on heart's training rows without a
  # privacy mechanism: there, and only there, the record says so.
  monkeypatch.setattr(experiment, "run_method", lambda *a, **k: {
      "accuracy": [0.5], "privacy": None})
  data = {"scaling": "none", "classes": None, "y_train": np.zeros(4),
          "y_test": np.zeros(2)}

  def scope(dataset, method):
    return experiment.run_one(
        dataset=dataset, data=data, method=method, epsilon=1.0,
        delta=1e-5, seeds=1, test_fraction=0.3, split_seed=0
    )["privacy_scope"]

  for method in experiment.RECIPE_CHOSEN_ON["heart"]:
    assert "recipe was chosen on these training rows" in scope("heart",
                                                                method)
    assert "recipe" not in scope("breast_cancer", method)
  assert "recipe" not in scope("heart", "libsvm")
  assert set(experiment.RECIPE_CHOSEN_ON["heart"]) <= set(
      experiment.PRIVATE_METHODS)
