"""launch.dpwss's command line: one-line errors before any work, resume.

Every bad flag value ends the script with exit status 2 and one
``error: …`` line, before any data is read or any solver runs (the
harness, :mod:`tests.launch.cli`, says how that is proven).
"""

import pytest

from tests.launch import cli

_BODY = r'''
from launch import dpwss as script
from launch.data import loaders
from mechanisms.svm import dpwss as mech, smo_train

real = {"load": loaders.load_dataset, "wss2": smo_train.wss2_train,
        "dpwss": mech.release}
for group, items in cases.items():
  smo_train.wss2_train = forbid("wss2_train")
  mech.release = forbid("dpwss.release")
  loaders.load_dataset = (real["load"] if group in (
                              "after_load", "real", "stop_at_training")
                          else forbid("load_dataset"))
  if group == "real":
    smo_train.wss2_train, mech.release = real["wss2"], real["dpwss"]
  if group == "stop_at_training":  # exit (keeping stderr) instead
    def stop(*args, **kwargs):
      print(f"STOPPED memory_budget={kwargs.get('memory_budget')}",
            file=sys.stderr)
      raise SystemExit(3)
    mech.release = stop
  for name, argv in items.items():
    results[name] = call("dpwss", script.main, argv)
'''


def _svmlight(path, rows):
  with open(path, "w", encoding="utf-8") as f:
    for i in range(rows):
      f.write(f"{1 if i % 2 else -1} 1:{(i % 7) / 7:.3f} "
              f"2:{((3 * i) % 5) / 5:.3f}\n")
  return f"svmlight:{path}"


# (flag(s), expected words in the one-line error). No data is read.
BEFORE_LOAD = {
    "delta_one": (["--delta=1"],
                  "delta must lie strictly between 0 and 1, got 1.0"),
    "delta_zero": (["--delta=0"],
                   "delta must lie strictly between 0 and 1, got 0.0"),
    "release_epsilon": (["--release=output_perturbation", "--kernel=linear",
                         "--release_epsilon=0"],
                        "release_epsilon must be > 0"),
    "release_rbf": (["--release=output_perturbation"], "linear kernel"),
    "release_minmax": (["--release=output_perturbation", "--kernel=linear",
                        "--scaling=minmax"], "data-independent scaling"),
    "selection_epsilon": (["--selection_epsilon=-1"],
                          "selection_epsilon must be > 0"),
    "sigma": (["--sigma=1"], "sigma must lie in (0.0, 1.0), got 1.0"),
    "epsilon_needs_max_iter": (
        ["--epsilon=5"],
        "a total epsilon is split over the draws of max_iter iterations; "
        "pass max_iter=T, or give selection_epsilon"),
    "epsilon": (["--epsilon=0", "--max_iter=10"], "epsilon must be > 0"),
    "both_epsilons": (["--epsilon=5", "--selection_epsilon=1",
                       "--max_iter=10"], "give exactly one of "
                      "selection_epsilon (ε of each draw) and epsilon"),
    # The old spellings are aliases of the new flags.
    "total_epsilon_alias": (["--total_epsilon=0", "--max_iter=10"],
                            "epsilon must be > 0"),
    "eps_stop_alias": (["--eps_stop=0"], "eps must be > 0, got 0.0"),
    "private_needs_max_iter": (
        ["--selection=private"],
        "selection='private' runs exactly max_iter iterations"),
    "c": (["--c=0"], "c must be > 0, got 0.0"),
    "gamma": (["--gamma=-2"], "gamma must be > 0, got -2.0"),
    "degree": (["--degree=0"], "degree must be ≥ 1, got 0"),
    "eps": (["--eps=0"], "eps must be > 0, got 0.0"),
    "max_iter": (["--max_iter=0"], "max_iter must be ≥ 1, got 0"),
    "repeats": (["--repeats=0"], "repeats must be ≥ 1, got 0"),
    "classes_one": (["--dataset=digits", "--classes=3"],
                    "the SVM is binary, so give exactly two"),
    "classes_same": (["--dataset=digits", "--classes=3,3"], "exactly two"),
    "classes_text": (["--classes=a,b"], "class ids must be integers"),
    "unknown_dataset": (["--dataset=nosuch"], "unknown dataset 'nosuch'"),
    "table_list_with_bad_name": (["--table", "--dataset=heart,nosuch"],
                                 "unknown dataset 'nosuch'"),
    "list_without_table": (["--dataset=heart,digits"], "needs --table"),
    "both_modes": (["--table", "--selection_table"], "two modes"),
    "no_public_bounds": (["--dataset=breast_cancer"],
                         "no public feature bounds"),
    "epsilons": (["--selection_table", "--epsilons=1,x"],
                 "--epsilons='1,x': expected a comma-separated list"),
    "total_epsilons_alias": (["--selection_table", "--total_epsilons=1,0"],
                             "epsilons must be > 0"),
    "iterations": (["--selection_table", "--iterations=0"],
                   "iterations must be ≥ 1, got 0"),
    "enum_kernel": (["--kernel=cubic"], "--kernel"),
    "enum_scaling": (["--scaling=zscore"], "--scaling"),
    "enum_wss": (["--wss=wss3"], "--wss"),
    "enum_selection": (["--selection=random"], "--selection"),
    "enum_release": (["--release=all"], "--release"),
    "enum_dtype": (["--dtype=float16"], "--dtype"),
    "enum_eval": (["--eval=valid"], "--eval"),
    "not_a_number": (["--sigma=abc"], "--sigma"),
    "not_a_bool": (["--shrinking=maybe"], "shrinking"),
    "seed_not_int": (["--seed=1.5"], "--seed"),
    "unknown_flag": (["--epsilno=1"], "epsilno"),
    "memory_budget_text": (["--memory_budget=lots"],
                           "--memory_budget='lots' is not a size"),
}


def _heart_budget(repeats_at_once: float) -> int:
  """A budget in bytes for heart's default DPWSS setting (270 x 13, 5
  repeats) that holds ``repeats_at_once`` repeats."""
  from mechanisms.svm import dpwss  # pylint: disable=g-import-not-at-top
  one = dpwss.plan_repeats(270, 13, repeats=1, max_iter=27_000).estimate
  two = dpwss.plan_repeats(270, 13, repeats=2, max_iter=27_000).estimate
  return int(one + (repeats_at_once - 1) * (two - one))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("cli")
  empty = tmp / "empty.svm"
  empty.write_text("")
  corrupt = tmp / "corrupt.svm.gz"
  corrupt.write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(200)))
  blocked = tmp / "file"
  blocked.write_text("")
  out = str(tmp / "r.jsonl")
  cases = {
      "before_load": {k: argv + [f"--out={out}"]
                      for k, (argv, _) in BEFORE_LOAD.items()},
      "before_load_out": {
          "out_dir": [f"--out={tmp}"],
          "out_under_file": [f"--out={blocked}/r.jsonl"],
          "table_md_under_file": [f"--table_md={blocked}/t.md", "--table",
                                  f"--out={out}"],
          "missing_file": [f"--dataset=svmlight:{tmp}/nosuch.svm",
                           f"--out={out}"],
      },
      "after_load": {
          "classes_absent": ["--dataset=digits", "--classes=3,42",
                             f"--out={out}"],
          "multiclass": ["--dataset=digits", f"--out={out}"],
          "empty_svmlight": [f"--dataset=svmlight:{empty}", f"--out={out}"],
          "corrupt_gzip": [f"--dataset=svmlight:{corrupt}", f"--out={out}"],
          "no_test_split": ["--eval=test", f"--out={out}"],
          "memory_refused": ["--memory_budget=100K", f"--out={out}"],
      },
      "stop_at_training": {
          "memory_chunk": [f"--memory_budget={_heart_budget(2.5)}",
                           f"--out={out}"],
          "endless": ENDLESS + ["--memory_budget=8G", f"--out={out}"],
      },
  }
  # Resume: a cut-off last line is set aside, the run is appended, and a
  # second identical call skips it.
  small = _svmlight(tmp / "small.svm", 40)
  resume_out = tmp / "resume.jsonl"
  resume_out.write_text('{"dataset": "cut-off wri')
  run = [f"--dataset={small}", "--wss=wss2", "--repeats=1",
         f"--out={resume_out}"]
  cases["real"] = {"resume_first": run, "resume_again": list(run)}
  found = cli.drive(_BODY, cases)
  found["_paths"] = {"resume_out": str(resume_out), "out": out}
  return found


@pytest.mark.parametrize("name", sorted(BEFORE_LOAD))
def test_bad_flag_fails_before_any_work(results, name):
  cli.assert_one_line_error(results[name], BEFORE_LOAD[name][1])


@pytest.mark.parametrize("name,words", [
    ("out_dir", "is a directory"),
    ("out_under_file", "cannot be written"),
    ("table_md_under_file", "--table_md="),
    ("missing_file", "nosuch.svm"),
])
def test_bad_paths_fail_before_any_work(results, name, words):
  cli.assert_one_line_error(results[name], words)


@pytest.mark.parametrize("name,words", [
    ("classes_absent", "class(es) [42] do not occur in 'digits'"),
    ("multiclass", "has 10 classes"),
    ("empty_svmlight", "empty.svm: the svmlight file is empty"),
    ("corrupt_gzip", "corrupt.svm.gz: corrupt or truncated gzip"),
    ("no_test_split", "eval=test: 'heart' has no test split"),
])
def test_data_errors_fail_before_training(results, name, words):
  cli.assert_one_line_error(results[name], words)


def test_memory_budget_refuses_in_one_line_before_training(results):
  cli.assert_one_line_error(
      results["memory_refused"],
      "KiB even one at a time, above the memory budget of 100.0 KiB; "
      "change memory_budget")


def test_memory_budget_chooses_a_repeats_chunk_before_training(results):
  # The chunk is printed before the training (stopped here) starts, and
  # the budget is handed to the training.
  result = results["memory_chunk"]
  assert result["code"] == 3, result["stderr"]
  assert "repeat chunk 2 of 5 (estimated" in result["stderr"]
  assert result["stderr"].index("repeat chunk") < result["stderr"].index(
      f"STOPPED memory_budget={_heart_budget(2.5)}")


# Issue #32: 2·10⁸ draws at ε 3.5e-5 each printed "compiling and
# training", then nothing for minutes.
ENDLESS = ["--selection=private", "--epsilon=1", "--max_iter=100000000",
           "--repeats=1"]


def test_a_useless_endless_setting_is_announced_before_any_work(results):
  result = results["endless"]
  assert result["code"] == 3, result["stderr"]  # stopped at the training
  err = result["stderr"]
  assert ("warning: the per-draw ε is 3.5e-05 (ε 1 split over 200,000,000 "
          "draws)") in err
  assert "exactly 100,000,000 iterations × 1 repeat(s)" in err
  assert err.index("warning: ") < err.index("heart: loading")


def test_an_ordinary_setting_has_no_warning():
  from launch.experiments import dpwss as experiment  # noqa: PLC0415
  assert experiment.Setting(
      selection="private", selection_epsilon=None, epsilon=10.0,
      max_iter=2000, repeats=5).warning() is None
  assert experiment.Setting(selection="paper").warning() is None
  long = experiment.Setting(selection="paper", selection_epsilon=1.0,
                            max_iter=10**7, repeats=1).warning()
  assert "up to 10,000,000 iterations" in long and "per-draw ε of 1" in long


def test_resume_sets_aside_a_cut_line_and_skips_finished_runs(results):
  record = cli.assert_resumed(results["resume_first"],
                              results["resume_again"],
                              results["_paths"]["resume_out"])
  # The record's privacy is the one schema.
  from dpcore import accounting  # pylint: disable=g-import-not-at-top
  assert tuple(record["privacy"]) == accounting.PRIVACY_FIELDS
  assert record["privacy"]["no_guarantee"] == accounting.NON_PRIVATE


def test_help_exits_zero():
  proc = cli.run_module("launch.dpwss", "--help")
  assert "--release_epsilon" in proc.stdout
  assert proc.returncode == 0, (
      "absl's --help exits 1; launch.common.run_cli must map it to 0")


def test_stray_positional_argument_is_one_line_exit_2():
  proc = cli.run_module("launch.dpwss", "stray")
  assert "unexpected positional argument" in proc.stderr
  assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
