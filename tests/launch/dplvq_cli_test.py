"""launch.dplvq's command line: one-line errors before any work, resume.

Every bad flag value ends the script with exit status 2 and one
``error: …`` line, before any data is read or any solver runs (the
harness, :mod:`tests.launch.cli`, says how that is proven).
"""

import json

import pytest

from tests.launch import cli

_BODY = r'''
import numpy as np
from launch import dplvq as script
from launch.data import loaders
from launch.experiments import lvq_eval

def fake_evaluate(split_key, train_key, x, y, config, protocol, *,
                  plan=None, progress=None, cache=None):
  shape = (protocol.repeats, protocol.folds)
  return lvq_eval.CVResult(np.full(shape, 0.25), None, 0, np.zeros(shape),
                           0.0, 0.0, 10, 10, protocol.parallel_runs, None)

real_load = loaders.load_dataset
for group, items in cases.items():
  lvq_eval.evaluate = (fake_evaluate if group == "fake_training"
                       else forbid("lvq_eval.evaluate"))
  loaders.load_dataset = (forbid("load_dataset") if group == "before_load"
                          else real_load)
  for name, argv in items.items():
    results[name] = call("dplvq", script.main, argv)
'''


# (flag(s), expected words in the one-line error). No data is read.
BEFORE_LOAD = {
    "dataset": (["--dataset=nosuch"], "unknown dataset 'nosuch'"),
    "data_dir": (["--dataset=segment", "--data_dir=/nonexistent/dir"],
                 "Dataset 'segment' not found"),
    "model": (["--model=lvq"], "--model"),
    "trainer": (["--trainer=adam"], "--trainer"),
    "epsilon": (["--epsilon=0"], "epsilon must be > 0"),
    "delta_one": (["--delta=1"],
                  "delta must lie strictly between 0 and 1, got 1.0"),
    "delta_zero": (["--delta=0"],
                   "delta must lie strictly between 0 and 1, got 0.0"),
    "sampling_rate": (["--sampling_rate=0"],
                      "sampling_rate must lie in (0.0, 1.0], got 0.0"),
    # The old spellings are aliases of the library's names.
    "q_zero": (["--q=0"], "sampling_rate must lie in (0.0, 1.0], got 0.0"),
    "q_big": (["--q=1.5"], "sampling_rate must lie in (0.0, 1.0], got 1.5"),
    "q_steps": (["--q=1e-6", "--epochs=1"],
                "T = E/q = 1,000,000 SGD steps per run"),
    "clip": (["--clip=0"], "clip_norm must be > 0, got 0.0"),
    "clip_norm": (["--clip_norm=-1"], "clip_norm must be > 0, got -1.0"),
    "epochs": (["--epochs=0"], "epochs must be ≥ 1, got 0"),
    "lr": (["--lr=-1"], "learning_rate must be > 0, got -1.0"),
    "learning_rate": (["--learning_rate=0"],
                      "learning_rate must be > 0, got 0.0"),
    "sigma_rule": (["--sigma_rule=magic"], "--sigma_rule"),
    "init_fraction": (["--init_fraction=1"],
                      "init_fraction must lie in (0.0, 1.0), got 1.0"),
    "init_mechanism": (["--init_mechanism=exp"], "--init_mechanism"),
    "folds_zero": (["--folds=0"], "folds=0: k-fold cross-validation"),
    "folds_one": (["--folds=1"], "folds=1: k-fold cross-validation"),
    "repeats": (["--repeats=0"], "repeats must be ≥ 1, got 0"),
    "train_on": (["--train_on=half"], "--train_on"),
    "bounds_text": (["--bounds=1,2,3"], "bounds='1,2,3': give LOW,HIGH"),
    "bounds_order": (["--bounds=5,1"], "bounds='5,1'"),
    "bounds_clip_most": (["--bounds=0,1"], "covers 6%: most values would "
                         "be clipped"),
    "bounds_auto_none": (["--dataset=breast_cancer"],
                         "no public feature bounds"),
    "rank": (["--rank=0"], "rank must be ≥ 1, got 0"),
    "normalise": (["--normalise=maybe"], "normalise"),
    "phi": (["--phi=tanh"], "phi"),
    "phi_kind": (["--phi_kind=tanh"], "--phi_kind"),
    "prototypes_per_class": (["--prototypes_per_class=0"],
                             "prototypes_per_class must be ≥ 1, got 0"),
    "bfgs_iterations": (["--bfgs_iterations=0"],
                        "bfgs_iterations must be ≥ 1, got 0"),
    "parallel": (["--parallel=0"], "parallel_runs must be ≥ 1, got 0"),
    "parallel_runs": (["--parallel_runs=0"],
                      "parallel_runs must be ≥ 1, got 0"),
    "ghost_clipping": (["--ghost_clipping=perhaps"], "ghost_clipping"),
    "seed": (["--seed=x"], "--seed"),
    "table": (["--table=sometimes"], "table"),
    "table_epsilons": (["--table", "--table_epsilons=1,-2"],
                       "--table_epsilons=1,-2: give comma-separated ε > 0"),
    "figure_epsilons": (["--table", "--figure_epsilons=a"],
                        "--figure_epsilons='a': expected a comma-separated "
                        "list of numbers, e.g. --figure_epsilons=0.75,"),
    "models": (["--table", "--models=foo"], "models must be one of"),
    "max_steps": (["--max_steps=0"], "max_steps must be ≥ 1, got 0"),
    "memory_budget": (["--memory_budget=lots"],
                      "--memory_budget='lots' is not a size"),
    "memory_budget_zero": (["--memory_budget=0"],
                           "--memory_budget='0' must be a positive size"),
    "unknown_flag": (["--epsilno=1"], "epsilno"),
}


# --tune cases ({tmp}: the fixture's folder, {good}: a valid file).
TUNE_CASES = {
    "tune_missing": (["--tune={tmp}/none.json"], "no such file"),
    "tune_empty": (["--tune={tmp}/empty.json"], "candidate list is empty"),
    "tune_notjson": (["--tune={tmp}/notjson.json"], "is not JSON"),
    "tune_badkey": (["--tune={tmp}/badkey.json"],
                    "unknown setting(s) ['momentum']"),
    "tune_badvalue": (["--tune={tmp}/badvalue.json"],
                      "candidate 0: learning_rate must be > 0, got -1"),
    "tune_notdict": (["--tune={tmp}/notdict.json"],
                     "candidate 0 is not a non-empty object"),
    "tune_trials_zero": (["--tune={good}", "--tune_expected_trials=0"],
                         "expected_trials must be"),
    "tune_trials_negative": (["--tune={good}", "--tune_expected_trials=-2"],
                             "expected_trials must be"),
    "tune_trials_one": (["--tune={good}", "--tune_expected_trials=1"],
                        "mean above 1"),
    "tune_distribution": (["--tune={good}", "--tune_distribution=uniform"],
                          "distribution must be one of"),
    "tune_eta_missing": (["--tune={good}",
                          "--tune_distribution=negative_binomial"],
                         "needs eta"),
    "tune_eta_bad": (["--tune={good}", "--tune_distribution=negative_binomial",
                      "--tune_eta=-2"], "eta > -1"),
    "tune_score_epsilon": (["--tune={good}", "--tune_score_epsilon=0"],
                           "tune_score_epsilon must be > 0"),
    "tune_validation": (["--tune={good}", "--tune_validation_fraction=0.9"],
                        "tune_validation_fraction=0.9"),
    "tune_with_table": (["--tune={good}", "--table"], "--table"),
    "tune_with_sgd": (["--tune={good}", "--trainer=sgd"],
                      "tune needs trainer=dpsgd"),
    "tune_flag_alone": (["--tune_expected_trials=5"],
                        "--tune_expected_trials only apply with --tune"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("cli")
  empty = tmp / "empty.svm"
  empty.write_text("")
  blocked = tmp / "file"
  blocked.write_text("")
  out = str(tmp / "r.jsonl")
  resume_out = tmp / "resume.jsonl"
  resume_out.write_text('{"dataset": "cut-off wri')
  single = ["--trainer=sgd", "--epochs=1", "--sampling_rate=0.5", "--folds=2",
            "--repeats=1", f"--out={resume_out}"]
  table_out = str(tmp / "table.jsonl")
  table = ["--table", "--models=glvq", "--table_epsilons=1",
           "--figure_epsilons=2", "--epochs=1", "--q=0.5", "--folds=2",
           "--repeats=1", f"--out={table_out}"]
  good = tmp / "cands.json"
  good.write_text('[{"lr": 0.05}, {"lr": 0.2, "epochs": 2}]')
  files = {"empty": "[]", "notjson": "{lr", "badkey": '[{"momentum": 1}]',
           "badvalue": '[{"lr": -1}]', "notdict": '[0.1]'}
  for name, text in files.items():
    (tmp / f"{name}.json").write_text(text)
  tune_cases = {k: [a.format(tmp=tmp, good=good) for a in argv]
                for k, (argv, _) in TUNE_CASES.items()}
  cases = {
      "before_load": {k: argv + [f"--out={out}"]
                      for k, (argv, _) in (
                          *BEFORE_LOAD.items(),
                          *((k, (v, None)) for k, v in tune_cases.items()))},
      "before_load_out": {
          "out_dir": [f"--out={tmp}"],
          "out_under_file": [f"--out={blocked}/r.jsonl"],
      },
      "after_load": {
          "folds_above_rows": ["--folds=2000", f"--out={out}"],
          "empty_svmlight": [f"--dataset=svmlight:{empty}", "--bounds=0,1",
                             f"--out={out}"],
      },
      "fake_training": {
          "resume_first": single, "resume_again": list(single),
          "table_first": table, "table_again": list(table),
      },
  }
  found = cli.drive(_BODY, cases)
  found["_paths"] = {"resume_out": str(resume_out), "table_out": table_out}
  return found


@pytest.mark.parametrize("name", sorted(BEFORE_LOAD))
def test_bad_flag_fails_before_any_work(results, name):
  cli.assert_one_line_error(results[name], BEFORE_LOAD[name][1])


@pytest.mark.parametrize("name", sorted(TUNE_CASES))
def test_bad_tune_input_fails_before_any_work(results, name):
  cli.assert_one_line_error(results[name], TUNE_CASES[name][1])


@pytest.mark.parametrize("name,words", [
    ("out_dir", "is a directory"),
    ("out_under_file", "cannot be written"),
])
def test_bad_out_fails_before_any_work(results, name, words):
  cli.assert_one_line_error(results[name], words)


@pytest.mark.parametrize("name,words", [
    ("folds_above_rows", "folds=2000: 'digits' has only 1797 rows"),
    ("empty_svmlight", "empty.svm: the svmlight file is empty"),
])
def test_data_errors_fail_before_training(results, name, words):
  cli.assert_one_line_error(results[name], words)


def test_resume_sets_aside_a_cut_line_and_skips_finished_runs(results):
  record = cli.assert_resumed(results["resume_first"],
                              results["resume_again"],
                              results["_paths"]["resume_out"])
  from dpcore import accounting  # pylint: disable=g-import-not-at-top
  assert tuple(record["privacy"]) == accounting.PRIVACY_FIELDS
  assert record["privacy"]["no_guarantee"] == accounting.NON_PRIVATE
  assert record["dpsgd"] is None


def test_table_skips_finished_runs(results):
  first, again = results["table_first"], results["table_again"]
  assert first["code"] == 0, first["stderr"][-2000:]
  assert "setting 4/4" in first["stderr"]
  assert again["code"] == 0, again["stderr"][-2000:]
  assert "skipping 4 finished runs" in again["stderr"]
  path = results["_paths"]["table_out"]
  records = [json.loads(ln) for ln in open(path, encoding="utf-8")]
  assert len(records) == 4
  from dpcore import accounting  # pylint: disable=g-import-not-at-top
  for r in records:
    assert tuple(r["privacy"]) == accounting.PRIVACY_FIELDS
  private = [r for r in records if r["trainer"] == "dpsgd"]
  assert {r["privacy"]["epsilon_nominal"] for r in private} == {1.0, 2.0}
  assert all(r["dpsgd"]["steps"] == 2 for r in private)


def test_help_exits_zero():
  proc = cli.run_module("launch.dplvq", "--help")
  assert "--max_steps" in proc.stdout
  assert proc.returncode == 0


def test_stray_positional_argument_is_one_line_exit_2():
  proc = cli.run_module("launch.dplvq", "stray")
  assert "unexpected positional argument" in proc.stderr
  assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
