"""launch.compare: one-line errors before any work, a tiny real run, resume.

Bad flags must end the script with exit status 2 and one ``error: …``
line before any data is read or any method runs (the harness is
:mod:`tests.launch.cli`: one subprocess imports the script once, makes the
loader and the sweep raise if called, and runs every case). One real run
on digits and heart (one ε, two seeds, a few methods) writes its JSON
lines, the Markdown tables and a PNG per data set; a second identical call
skips every run. A tiny tuned run (--tune, digits, Fed DP-SGD server
noise) records its tuning and the ε of the whole tuning; bad --tune input
is refused in one line before any work.
"""

import dataclasses
import json
import os

import pytest

from tests.launch import cli

_BODY = r'''
from launch import compare as script
from launch.data import loaders
from launch.experiments import compare as experiment

real = {"load": loaders.load_dataset, "run": experiment.run}
for group, items in cases.items():
  if group == "real":
    loaders.load_dataset, experiment.run = real["load"], real["run"]
  else:
    loaders.load_dataset = forbid("load_dataset")
    experiment.run = forbid("run")
  for name, argv in items.items():
    results[name] = call("compare", script.main, argv)
'''

BEFORE_WORK = {
    "dataset": (["--datasets=digits,nosuch"], "unknown 'nosuch'"),
    "dataset_twice": (["--datasets=heart,heart"], "names one twice"),
    "method": (["--methods=feddpdr,svm_magic"], "unknown 'svm_magic'"),
    "method_runs_nothing": (["--datasets=heart", "--methods=feddpdr"],
                            "runs nothing on --datasets=heart"),
    "epsilon_zero": (["--epsilons=1,0"], "--epsilons must be > 0"),
    "epsilon_text": (["--epsilons=1,x"], "--epsilons='1,x': expected a "
                     "comma-separated list of numbers, e.g. "
                     "--epsilons=0.5,1,2,4,8."),
    "epsilon_inf": (["--epsilons=inf"],
                    "--epsilons must be a finite positive number"),
    "epsilon_empty": (["--epsilons="], "--epsilons is empty"),
    "seeds": (["--seeds=0"], "--seeds must be ≥ 1, got 0"),
    "delta": (["--delta=1"],
              "--delta must lie strictly between 0 and 1, got 1.0"),
    "data_dir": (["--data_dir=/nonexistent/dir"], "is not a directory"),
    "positional": (["extra"], "unexpected positional"),
    "features_unknown": (["--features=pixels2"], "value should be one of"),
    "features_no_image_set": (["--datasets=heart", "--features=scattering"],
                              "this run has none"),
}

# --tune cases: (argv given the candidate files, expected message).
BAD_TUNE = {
    "tune_missing": (lambda f: [f"--tune={f['missing']}"],
                     "no such file"),
    "tune_not_json": (lambda f: [f"--tune={f['text']}"], "is not JSON"),
    "tune_empty": (lambda f: [f"--tune={f['empty']}"],
                   "the candidate list is empty or not a list"),
    "tune_unknown_field": (lambda f: [f"--tune={f['unknown']}"],
                           "unknown setting(s) ['lr']"),
    "tune_bad_value": (lambda f: [f"--tune={f['negative']}"],
                       "candidate 0: learning_rate must be > 0, got -1"),
    "tune_expected_zero": (lambda f: [f"--tune={f['good']}",
                                      "--tune_expected_trials=0"],
                           "--expected_trials=0"),
    # The old spellings are aliases of the library's names.
    "tune_distribution": (lambda f: [f"--tune={f['good']}",
                                     "--tune_distribution=uniform"],
                          "--distribution='uniform'"),
    # Issue #32: 2e10 steps at the recipe's rate, refused for the whole
    # file before any data or trial (an OverflowError after 12 s before).
    "tune_steps_above_int32": (
        lambda f: [f"--tune={f['huge']}"],
        "candidate 1 (at the recipe's largest sampling_rate): steps = "
        "20,000,000,000"),
    "tune_not_in_plan": (lambda f: [f"--tune={f['good']}",
                                    "--datasets=heart"],
                         "which this run does not include"),
}
TUNE_CANDIDATES = [{"learning_rate": 2.0}, {"learning_rate": 0.5},
                   {"learning_rate": 2.0, "epochs": 10.0}]

SMALL = ["--datasets=digits,heart", "--epsilons=2", "--seeds=2",
         "--methods=nonpriv,feddpdr,fedsgd_server,libsvm,dpwss_paper,"
         "rff_dpsgd"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("compare")
  out = str(tmp / "bad.jsonl")
  cases = {
      "before_work": {k: argv + [f"--out={out}", f"--plots={tmp}",
                                 "--table_md="]
                      for k, (argv, _) in BEFORE_WORK.items()},
      "before_work_paths": {
          "out_dir": ["--datasets=heart", f"--out={tmp}"],
          "plots_file": ["--datasets=heart", f"--out={out}",
                         f"--plots={tmp / 'file.txt'}"]},
  }
  (tmp / "file.txt").write_text("not a directory\n")
  files = {"missing": str(tmp / "nosuch.json"), "text": str(tmp / "file.txt")}
  for name, content in (("empty", []), ("unknown", [{"lr": 1.0}]),
                        ("negative", [{"learning_rate": -1}]),
                        ("huge", [{"learning_rate": 1.0}, {"epochs": 1e9}]),
                        ("good", TUNE_CANDIDATES)):
    files[name] = str(tmp / f"{name}.json")
    (tmp / f"{name}.json").write_text(json.dumps(content))
  cases["before_work_tune"] = {
      k: make(files) + [f"--out={out}", f"--plots={tmp}", "--table_md="]
      for k, (make, _) in BAD_TUNE.items()}
  run_out = tmp / "run.jsonl"
  run = SMALL + [f"--out={run_out}", f"--table_md={tmp / 'table.md'}",
                 f"--plots={tmp / 'plots'}"]
  tuned_out = tmp / "tuned.jsonl"
  tuned = ["--datasets=digits", "--methods=fedsgd_server", "--epsilons=2",
           "--seeds=2", f"--tune={files['good']}",
           "--tune_expected_trials=2", f"--out={tuned_out}",
           f"--table_md={tmp / 'tuned.md'}", "--plots="]
  features_out = tmp / "features.jsonl"
  features = ["--datasets=digits", "--methods=fedsgd_server", "--epsilons=2",
              "--seeds=2", "--features=scattering", f"--out={features_out}",
              f"--table_md={tmp / 'features.md'}", "--plots="]
  cases["real"] = {"first": run, "again": list(run), "tuned": tuned,
                   "features": features}
  found = cli.drive(_BODY, cases)
  found["_paths"] = {"run_out": str(run_out), "table": str(tmp / "table.md"),
                     "plots": str(tmp / "plots"), "bad_out": out,
                     "tuned_out": str(tuned_out),
                     "tuned_table": str(tmp / "tuned.md"),
                     "features_out": str(features_out),
                     "features_table": str(tmp / "features.md")}
  return found


@pytest.mark.parametrize("name", sorted(BEFORE_WORK))
def test_bad_flag_fails_before_any_work(results, name):
  cli.assert_one_line_error(results[name], BEFORE_WORK[name][1])


@pytest.mark.parametrize("name", sorted(BAD_TUNE))
def test_bad_tune_fails_before_any_work(results, name):
  cli.assert_one_line_error(results[name], BAD_TUNE[name][1])


def test_tuned_run_records_the_whole_tuning(results):
  tuned = results["tuned"]
  assert tuned["code"] == 0, tuned["stderr"][-3000:]
  with open(results["_paths"]["tuned_out"], encoding="utf-8") as f:
    (rec,) = [json.loads(line) for line in f]
  assert (rec["dataset"], rec["method"], rec["epsilon"]) == (
      "digits", "fedsgd_server", 2.0)
  assert rec["tuning_id"] and rec["guarantee"] == "dp"
  t = rec["tuning"]
  assert t["distribution"] == "geometric" and t["expected_trials"] == 2.0
  assert len(t["winner"]) == 2  # one tuning per seed
  # K and the schedule are not released (the guarantee holds with them
  # hidden), nor is any trial's score but the winner's.
  assert not {"trials", "schedule"} & set(t) and len(t["score"]) == 2
  assert '"trials"' not in json.dumps(rec["privacy"]["entries"])
  assert all(w in range(len(TUNE_CANDIDATES)) for w in t["winner"])
  assert t["winning_settings"] == [TUNE_CANDIDATES[w] for w in t["winner"]]
  assert t["score_epsilon"] == 0.5 and t["epsilon_per_trial_target"] == 2.0
  # Validation rows come out of each participant's 600 training rows.
  assert t["fit_rows"] == [480, 480] and t["validation_rows"] == [120, 120]
  # The record's ε covers the whole tuning: above one trial's.
  assert rec["privacy"]["epsilon"] == pytest.approx(t["epsilon"])
  assert t["epsilon"] > t["epsilon_per_trial"] >= 2.0 * (1 - 1e-6)
  assert t["epsilon"] > rec["epsilon"]
  assert len(rec["accuracy_per_seed"]) == 2
  with open(results["_paths"]["tuned_table"], encoding="utf-8") as f:
    table = f.read()
  assert ("| Fed DP-SGD, server noise (tuned, K ~ geometric E[K]=2) | "
          "(ε, δ) of the whole tuning |") in table
  assert f"({t['epsilon']:.3g})" in table


def test_features_run_records_the_feature_map(results):
  run = results["features"]
  assert run["code"] == 0, run["stderr"][-3000:]
  with open(results["_paths"]["features_out"], encoding="utf-8") as f:
    (rec,) = [json.loads(line) for line in f]
  assert (rec["method"], rec["features"]) == ("fedsgd_server", "scattering")
  # digits' 8 x 8 images: J = 1, L = 8, 9 channels of 4 x 4 in 3 groups.
  facts = rec["settings"]["features"]
  assert (facts["J"], facts["L"], facts["num_groups"], facts["dim"]) == (
      1, 8, 3, 144)
  assert 0 < rec["privacy"]["epsilon"] <= 2.0 * (1 + 1e-6)
  with open(results["_paths"]["features_table"], encoding="utf-8") as f:
    table = f.read()
  assert "| Fed DP-SGD, server noise, scattering features |" in table
  assert "| Fed DP-SGD, server noise |" not in table  # no raw record here
  assert "J = 1, L = 8" in table


def test_bad_paths_fail_before_any_work(results):
  cli.assert_one_line_error(results["out_dir"], "is a directory")
  cli.assert_one_line_error(results["plots_file"], "is a file")
  bad_out = results["_paths"]["bad_out"]
  assert not os.path.exists(bad_out) or os.path.getsize(bad_out) == 0


def test_tiny_run_writes_records_table_and_figures(results):
  from dpcore import accounting  # pylint: disable=g-import-not-at-top
  first = results["first"]
  assert first["code"] == 0, first["stderr"][-3000:]
  with open(results["_paths"]["run_out"], encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  printed = [json.loads(line) for line in first["stdout"].splitlines()
             if line.startswith("{")]
  assert printed == records
  assert [(r["dataset"], r["method"], r["epsilon"]) for r in records] == [
      ("digits", "nonpriv", None), ("digits", "feddpdr", 2.0),
      ("digits", "fedsgd_server", 2.0), ("heart", "libsvm", None),
      ("heart", "dpwss_paper", 2.0), ("heart", "rff_dpsgd", 2.0)]
  by = {r["method"]: r for r in records}
  for r in records:
    assert tuple(r["privacy"]) == accounting.PRIVACY_FIELDS
    assert r["seeds"] == 2 and r["delta"] == 1e-5
    assert 0.0 <= r["accuracy_mean"] <= 1.0 and r["accuracy_sd"] >= 0.0
    assert r["recipe"] and r["seconds"] > 0
  # Private methods: the ε that holds, from the ledger, at most the target.
  for method in ("feddpdr", "fedsgd_server", "rff_dpsgd"):
    rec = by[method]
    assert rec["guarantee"] == "dp"
    assert len(rec["accuracy_per_seed"]) == 2
    assert 0 < rec["privacy"]["epsilon"] <= 2.0 * (1 + 1e-6)
  # No guarantee: the non-private ceilings and the paper's nominal ε.
  for method in ("nonpriv", "libsvm"):
    assert by[method]["guarantee"] == "none"
    assert by[method]["privacy"]["epsilon"] is None
    assert by[method]["privacy"]["no_guarantee"] == accounting.NON_PRIVATE
  dpwss = by["dpwss_paper"]
  assert dpwss["guarantee"] == "nominal"
  assert dpwss["privacy"]["epsilon"] is None
  assert dpwss["privacy"]["epsilon_nominal"] is not None
  assert by["feddpdr"]["settings"]["sizes"] == [600, 600]
  assert by["fedsgd_server"]["recipe"]["trust"] == "server"
  with open(results["_paths"]["table"], encoding="utf-8") as f:
    table = f.read()
  assert "### digits" in table and "### heart" in table
  assert "ε = 2" in table and "FedDPDR-DPML (paper)" in table
  assert "nominal ε only: no DP" in table
  holds = by["rff_dpsgd"]["privacy"]["epsilon"]
  assert f"({holds:.3g})" in table
  for name in ("digits", "heart"):
    path = os.path.join(results["_paths"]["plots"], f"compare_{name}.png")
    with open(path, "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_second_call_skips_finished_runs(results):
  again = results["again"]
  assert again["code"] == 0, again["stderr"][-2000:]
  assert "digits: skipping 3 finished run(s)" in again["stderr"]
  assert "heart: skipping 3 finished run(s)" in again["stderr"]
  assert "loading" not in again["stderr"]
  assert not [ln for ln in again["stdout"].splitlines()
              if ln.startswith("{")]
  with open(results["_paths"]["run_out"], encoding="utf-8") as f:
    assert len(f.read().splitlines()) == 6


def test_setting_plan_runs_and_keys():
  from launch.experiments import compare  # pylint: disable=g-import-not-at-top
  s = compare.Setting(datasets=("mnist", "segment"),
                      methods=("feddpdr", "dp_glvq", "softmax_nonpriv"),
                      epsilons=(1.0, 2.0))
  assert s.plan == {"mnist": ["feddpdr"],
                    "segment": ["dp_glvq", "softmax_nonpriv"]}
  assert s.runs() == [
      ("mnist", "feddpdr", 1.0), ("mnist", "feddpdr", 2.0),
      ("segment", "dp_glvq", 1.0), ("segment", "dp_glvq", 2.0),
      ("segment", "softmax_nonpriv", None)]
  assert compare.Setting(datasets=("digits38",)).plan["digits38"] == [
      m for m, spec in compare.METHODS.items() if spec.family == "kernel"]
  # The key of a record: the raw rows of an image set have features None
  # (as the records written before --features), its features "scattering";
  # a set without images keeps None either way.
  key = s.key(compare.Run("mnist", "feddpdr", 1.0))
  assert tuple(key) == compare.KEY_FIELDS and key["features"] is None
  feats = dataclasses.replace(s, features="scattering")
  assert feats.key(compare.Run("mnist", "feddpdr", 1.0))["features"] == (
      "scattering")
  assert feats.key(compare.Run("segment", "dp_glvq", 1.0))["features"] is None
  assert compare.recipe("mnist", "feddpdr")["k"] == 20
  assert compare.recipe("mnist", "dpml")["k"] is None
  assert compare.recipe("digits", "feddpdr")["participants"] == 2
  assert compare.recipe("segment", "dpsgd_softmax")["learning_rate"] == 2.0
  assert compare.recipe("digits", "fedsgd_local")["trust"] == "local"
  assert compare.recipe("digits", "fedsgd_distributed")["trust"] == (
      "distributed")


def test_second_moment_rows_run_on_digits_only():
  from launch.experiments import compare  # pylint: disable=g-import-not-at-top
  s = compare.Setting(datasets=("digits", "mnist"))
  assert {"feddpdr_moments", "feddpdr_secure_moments"} <= set(
      s.plan["digits"])
  assert not {"feddpdr_moments", "feddpdr_secure_moments"} & set(
      s.plan["mnist"])
  assert compare.recipe("digits", "feddpdr_secure_moments")[
      "aggregation"] == "distributed_moments"
  assert compare.recipe("digits", "feddpdr_moments")[
      "aggregation"] == "moments"
  assert compare.recipe("digits", "feddpdr")["aggregation"] == "subspace"
  with pytest.raises(ValueError, match="runs nothing on --datasets=mnist"):
    compare.Setting(datasets=("mnist",),
                    methods=("feddpdr_secure_moments",)).check()


def test_table_marks_guarantees_and_missing_cells():
  from launch import plot_compare  # pylint: disable=g-import-not-at-top
  from launch.experiments import compare  # pylint: disable=g-import-not-at-top
  def rec(method, eps, acc, holds=None, **extra):
    return {"dataset": "segment", "method": method, "epsilon": eps,
            "delta": 1e-5, "seeds": 3, "accuracy_mean": acc,
            "accuracy_sd": 0.01,
            "guarantee": compare.METHODS[method].guarantee,
            "privacy": {"epsilon": holds}, **extra}
  records = [rec("dp_glvq", 1.0, 0.7, 0.861, scaling_reads_data=True),
             rec("dp_glvq", 1.0, 0.75, 0.861),  # a later record wins
             rec("softmax_nonpriv", None, 0.88)]
  text = plot_compare.markdown_tables(records, compare.Setting(
      datasets=("segment",),
      methods=("dp_glvq", "dp_gmlvq", "softmax_nonpriv"),
      epsilons=(1.0, 2.0)))
  assert "| DP-GLVQ (paper) | (ε, δ) from the ledger | 75.0 ± 1.0 (0.861) " \
         "| – |" in text
  assert "| softmax, no noise (non-private) | no DP | 88.0 ± 1.0 | " \
         "88.0 ± 1.0 |" in text
  assert "DP-GMLVQ" not in text  # no record: no row
  assert "Scaling read the data" not in text  # only the later record counts


@pytest.mark.slow
def test_every_method_on_the_small_sets(tmp_path):
  """All methods of digits, heart and digits38 (and segment when WEKA's
  files are found), one ε, two seeds."""
  from launch.data import loaders  # pylint: disable=g-import-not-at-top
  datasets = ["digits", "heart", "digits38"]
  try:
    loaders.check_dataset("segment")
    datasets.append("segment")
  except FileNotFoundError:
    pass
  out = tmp_path / "all.jsonl"
  proc = cli.run_module(
      "launch.compare", f"--datasets={','.join(datasets)}", "--epsilons=4",
      "--seeds=2", f"--out={out}", f"--table_md={tmp_path / 't.md'}",
      f"--plots={tmp_path}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(out, encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  from launch.experiments import compare  # pylint: disable=g-import-not-at-top
  want = sum(len(compare.Setting(datasets=(d,)).plan[d]) for d in datasets)
  assert len(records) == want
  for r in records:
    if r["guarantee"] == "dp":
      assert 0 < r["privacy"]["epsilon"] <= 4.0 * (1 + 1e-6)


@pytest.mark.slow  # one compilation shared by several plans
def test_dpsgd_softmax_compiles_once_for_every_epsilon():
  import jax
  import numpy as np

  from launch.experiments import compare, dplvq
  rng = np.random.default_rng(0)
  x = rng.uniform(-1.0, 1.0, size=(60, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.int32)
  data = compare.LVQData(
      dplvq.Prepared("toy", x, y, num_classes=2, scaling="box"),
      jax.random.key(0))
  s = compare.Setting(datasets=("segment",), seeds=1)
  program = compare._softmax_program(3, 2, compare.SOFTMAX_RECIPE[
      "learning_rate"])
  before = program._cache_size()
  sigmas = []
  for epsilon in (1.0, 4.0):
    rec = compare._softmax(data, compare.Run("toy", "dpsgd_softmax",
                                             epsilon), s)
    sigmas.append(rec["settings"]["noise_multiplier"])
    assert all(0.0 <= a <= 1.0 for a in rec["settings"]["accuracy_per_run"])
  assert sigmas[0] > sigmas[1] > 0  # two plans, one compiled program
  assert program._cache_size() == before + 1
