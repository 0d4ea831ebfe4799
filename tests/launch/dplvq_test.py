"""launch.dplvq: the record, the table mode, and the scaling label.

The command line runs in a subprocess (``python -m launch.dplvq``): launch
scripts define flags at import, and two of them imported into one process
would clash on shared flag names. Its logic, ``launch.experiments.dplvq``,
has no flags and is also tested in process.
"""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from dpcore import accounting
from launch import common
from launch.experiments import dplvq as experiment

ROOT = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir)
FIELDS = ("dataset", "model", "trainer", "epsilon", "delta", "sampling_rate",
          "clip_norm", "epochs", "error_mean", "error_std", "seconds",
          "compile_seconds", "privacy", "seed", "learning_rate",
          "sigma_rule", "scaling")
TINY = ["--epochs=1", "--sampling_rate=0.1", "--folds=2", "--repeats=1",
        "--parallel_runs=2"]


def _run(*args):
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  proc = subprocess.run(
      [sys.executable, "-m", "launch.dplvq", *args], cwd=ROOT, env=env,
      capture_output=True, text=True, timeout=1800, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def test_single_run_record(tmp_path):
  out = str(tmp_path / "r.jsonl")
  proc = _run("--dataset=digits", "--model=gmlvq", "--trainer=dpsgd",
              "--epsilon=2", "--sigma_rule=paper", f"--out={out}", *TINY)
  rec = json.loads(proc.stdout.strip().splitlines()[-1])
  assert common.read_jsonl(out) == [rec]
  for field in FIELDS:
    assert field in rec
  # The record's settings are the Setting's fields, its resume key too.
  assert {f: rec[f] for f in experiment.KEY_FIELDS[:-1]} == (
      experiment.Setting(dataset="digits", model="gmlvq", epsilon=2.0,
                         sigma_rule="paper", epochs=1, sampling_rate=0.1,
                         folds=2, repeats=1).check().key())
  assert rec["scaling"] == "public_bounds" and rec["privacy_covers_scaling"]
  assert len(rec["errors"]) == 2 and 0.0 <= rec["error_mean"] <= 1.0
  p, plan = rec["privacy"], rec["dpsgd"]
  assert tuple(p) == accounting.PRIVACY_FIELDS  # the one schema
  assert p["epsilon_nominal"] == 2.0
  assert plan["epsilon_init"] == pytest.approx(0.4)
  assert plan["steps"] == 10 and plan["sigma_rule"] == "paper"
  # The reported ε of the DP-SGD part is the accountant's for the σ used,
  # not the nominal ε₂: at q = 0.1, T = 10 the paper's rule σ =
  # 2q√(T log(1/δ))/ε₂ under-noises (ε ≈ 1.92 > ε₂ = 1.6).
  assert plan["epsilon_sgd"] == pytest.approx(accounting.dpsgd_epsilon(
      noise_multiplier=plan["noise_multiplier"], sampling_rate=0.1,
      steps=10, delta=1e-5), rel=1e-9)
  assert plan["epsilon_sgd"] > 1.6
  assert p["epsilon"] <= p["epsilon_basic"] + 1e-9
  assert p["epsilon_basic"] == pytest.approx(0.4 + plan["epsilon_sgd"])


@pytest.mark.slow
def test_table_mode_writes_table_figure_and_resumes(tmp_path):
  out = str(tmp_path / "t.jsonl")
  args = ("--dataset=breast_cancer", "--table", "--models=glvq",
          "--table_epsilons=1", "--figure_epsilons=4", "--bfgs_iterations=3",
          "--bounds=data_minmax", f"--out={out}", *TINY)
  proc = _run(*args)
  records = common.read_jsonl(out)
  assert sorted((r["trainer"], r["epsilon"] or 0) for r in records) == [
      ("bfgs", 0), ("dpsgd", 1.0), ("dpsgd", 4.0), ("sgd", 0)]
  # No public bounds for WDBC: the min/max scaling, asked for by name, is
  # labelled as such.
  assert all(r["scaling"] == "data_minmax" for r in records)
  assert not any(r["privacy_covers_scaling"] for r in records)
  table = open(str(tmp_path / "t_table.md"), encoding="utf-8").read()
  assert "| GLVQ |" in table and "DP ε = 1" in table
  assert os.path.getsize(str(tmp_path / "t_fig1.png")) > 1000
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary["records"] == 4
  # Re-running skips every finished setting.
  _run(*args)
  assert len(common.read_jsonl(out)) == 4


@pytest.mark.slow
def test_experiment_module_in_process():
  prepared = experiment.prepare("digits")
  assert prepared.scaling == "public_bounds" and prepared.num_classes == 10
  assert np.abs(prepared.x).max() <= 1.0
  setting = experiment.Setting(epochs=1, sampling_rate=0.1, folds=2,
                               repeats=1, parallel_runs=2,
                               epsilon=2.0).check()
  run = lambda: experiment.run(  # noqa: E731
      jax.random.key(3), prepared, setting, progress=None)
  rec = run()
  assert rec["dataset"] == "digits" and rec["privacy_covers_scaling"]
  assert rec["learning_rate"] == 0.05 and rec["train_on"] == "other_folds"
  # The padded Poisson batches are in the ledger: P > 0, δ still 1e-5.
  p = rec["privacy"]
  assert 0.0 < p["truncation_probability"] <= 1e-9
  assert p["delta"] == 1e-5
  assert run()["errors"] == rec["errors"]  # same key, same run
  with pytest.raises(ValueError, match="bounds"):
    experiment.prepare("digits", bounds="1,2,3")
  # Non-private trainers claim nothing, in the same schema.
  sgd = experiment.run(
      jax.random.key(3), prepared,
      dataclasses.replace(setting, trainer="sgd").check(), progress=None)
  assert sgd["epsilon"] is None
  assert sgd["privacy"] == accounting.no_guarantee_record(
      accounting.NON_PRIVATE)
  assert sgd["dpsgd"] is None


def test_data_read_scaling_must_be_asked_for():
  # WDBC has no public bounds: 'auto' refuses rather than read the data.
  with pytest.raises(ValueError, match="no public feature bounds"):
    experiment.prepare("breast_cancer")
  minmax = experiment.prepare("breast_cancer", bounds="data_minmax")
  assert minmax.scaling == "data_minmax"
  np.testing.assert_allclose(minmax.x.min(axis=0), -1.0)
  np.testing.assert_allclose(minmax.x.max(axis=0), 1.0, rtol=2e-7)  # 1 ulp
  given = experiment.prepare("breast_cancer", bounds="0,5000")
  assert given.scaling == "public_bounds_flag"
  assert np.abs(given.x).max() <= 1.0


@pytest.mark.slow
def test_tuned_run_record(tmp_path):
  cands = tmp_path / "cands.json"
  # The old key spellings (lr, clip) are still read.
  cands.write_text(json.dumps([{"learning_rate": 0.02},
                               {"lr": 0.2, "clip": 1.0}]))
  out = str(tmp_path / "t.jsonl")
  proc = _run("--dataset=digits", "--model=glvq", "--epsilon=1.5",
              f"--tune={cands}", "--tune_expected_trials=2",
              "--tune_distribution=geometric", f"--out={out}", *TINY)
  rec = json.loads(proc.stdout.strip().splitlines()[-1])
  p, t = rec["privacy"], rec["tuning"]
  assert tuple(p) == accounting.PRIVACY_FIELDS
  (entry,) = p["entries"]  # ONE entry for the whole tuning
  assert entry["kind"] == "approx" and "dplvq_tuning" in entry["label"]
  assert p["epsilon"] == pytest.approx(t["guarantee"]["epsilon"])
  # The tuning costs more than one trial, which costs about its target.
  assert p["epsilon"] > t["guarantee"]["trial_epsilon"]
  assert t["guarantee"]["trial_epsilon"] <= 1.5 + 1e-6
  assert p["epsilon_nominal"] == 1.5
  assert not {"trials", "schedule"} & set(t)  # K stays inside
  assert " trials ran" not in entry["label"]
  assert t["expected_trials"] == pytest.approx(2.0)
  assert t["distribution"] == "geometric"
  assert all(w in (0, 1) for w in t["winner"]) and len(t["winner"]) == 2
  assert t["n_val"] >= 1 and t["n_train"] + t["n_val"] == 898
  assert 0.0 <= rec["error_mean"] <= 1.0
  # Run again: found in --out and skipped.
  again = _run("--dataset=digits", "--model=glvq", "--epsilon=1.5",
               f"--tune={cands}", "--tune_expected_trials=2",
               "--tune_distribution=geometric", f"--out={out}", *TINY)
  assert "skipping 1 finished run" in again.stderr


def test_tuning_options_are_checked_before_data():
  s = experiment.Setting()
  with pytest.raises(ValueError, match="no such file"):
    experiment.check_tuning("/nonexistent.json", s, distribution="geometric",
                            expected_trials=5.0, eta=None, score_epsilon=0.5,
                            validation_fraction=0.2)


@pytest.mark.parametrize("change, message", [
    (dict(folds=1), "^folds=1: k-fold cross-validation"),
    (dict(sampling_rate=0.0), "^sampling_rate must lie in"),
    (dict(clip_norm=0.0), "^clip_norm must be > 0"),
    (dict(learning_rate=-1.0), "^learning_rate must be > 0"),
    (dict(phi_kind="tanh"), "^phi_kind must be one of"),
    (dict(train_on="half"), "^train_on must be one of"),
    (dict(parallel_runs=0), "^parallel_runs must be"),
    (dict(sampling_rate=1e-6, epochs=1), "max_steps=200,000"),
    (dict(bounds="0,1"), "covers 6%"),
    (dict(dataset="breast_cancer"), "no public feature bounds"),
])
def test_the_setting_names_the_field_it_refuses(change, message):
  with pytest.raises(ValueError, match=message):
    experiment.Setting(**change).check()


def test_check_resolves_the_setting(monkeypatch):
  # (MNIST's files need not be here: the check of the name is a stand-in.)
  monkeypatch.setattr(experiment.data, "check_dataset", lambda *a, **k: None)
  mnist = experiment.Setting(dataset="mnist", trainer="sgd").check()
  assert mnist.train_on == "one_fold" and mnist.epsilon is None
  assert experiment.Setting().check().train_on == "other_folds"
  assert "data_dir" not in mnist.key() and "model" in mnist.key()
