"""launch.feddpdr's command line: one-line errors before any work, resume.

Every bad value of every flag must end the script with exit status 2 and a
single ``error: …`` line naming the flag, before the data is loaded or a
program compiled. One subprocess imports the script once (launch scripts
define absl flags at import, so they cannot share the pytest process with
another script), makes the loader and the training raise if called, and
runs ``main`` through ``common.run_cli`` for each case
(:mod:`tests.launch.cli`).
"""

import socket

import numpy as np
import pytest

from federated import feddpdr as fed
from launch import common
from launch.experiments import coordinator
from launch.experiments import feddpdr as experiment
from tests.launch import cli

_BODY = r'''
from federated import feddpdr
from launch import feddpdr as script
from launch.data import loaders
from launch.experiments import feddpdr as experiment

real = {"load": loaders.load_dataset, "prepare": experiment.prepare_data}
feddpdr.train = forbid("feddpdr.train")
for group, items in cases.items():
  loading = group == "after_load"
  loaders.load_dataset = real["load"] if loading else forbid("load_dataset")
  experiment.prepare_data = (real["prepare"] if loading
                             else forbid("prepare_data"))
  for name, argv in items.items():
    results[name] = call("feddpdr", script.main, argv)
'''


# name: (arguments, word the one-line error must contain). Checked before
# the data is loaded (digits' shape is known without loading it).
BEFORE_LOAD = {
    "epsilon_zero": (["--epsilon=0"], "epsilon must be > 0"),
    "epsilon_negative": (["--epsilon=0.5,-1"], "epsilon must be > 0"),
    "epsilon_text": (["--epsilon=abc"], "--epsilon='abc': expected a "
                     "comma-separated list of numbers, e.g. "
                     "--epsilon=0.5,2,8."),
    "epsilon_empty": (["--epsilon="], "epsilon is empty"),
    "epsilon_inf": (["--epsilon=inf"], "epsilon"),
    # The library's check (dpcore.calibration.check_calibrated_epsilon).
    "epsilon_huge": (["--epsilon=1e300"], "epsilon=1e+300"),
    "epsilon_two_in_sweep": (["--sweep=fig3", "--epsilon=0.1,1"],
                             "a sweep takes one ε"),
    "delta_zero": (["--delta=0"], "delta"),
    "delta_one": (["--delta=1.5"], "delta"),
    "k_zero": (["--k=0"], "k must be"),
    "k_above_d": (["--k=1000"], "k=1000"),
    "participants_zero": (["--participants=0"], "participants=0"),
    "participants_too_many": (["--participants=5000"], "1258"),
    "n_per_zero": (["--n_per_participant=0"], "n_per_participant=0"),
    "n_per_too_many": (["--n_per_participant=700"], "n_per_participant"),
    "sizes_empty": (["--sizes="], "sizes is empty"),
    "sizes_zero": (["--sizes=10,0"], "sizes=10,0"),
    "sizes_text": (["--sizes=10,a"], "--sizes"),
    "sizes_too_many": (["--sizes=1000,1000"], "sizes=1000,1000"),
    "lam_zero": (["--lam=0"], "lam"),
    "tol_negative": (["--tol=-1"], "tol"),
    "fedsgd_trust": (["--fedsgd_trust=cloud"], "fedsgd trust"),
    "memory_budget_text": (["--memory_budget=lots"], "--memory_budget"),
    "memory_budget_zero": (["--memory_budget=0"], "--memory_budget"),
    "fedsgd_rate": (["--fedsgd_sampling_rate=1.5"], "fedsgd sampling_rate"),
    "fedsgd_epochs": (["--fedsgd_epochs=0"], "fedsgd epochs"),
    "fedsgd_clip": (["--fedsgd_clip=nan"], "fedsgd clip_norm"),
    "fedsgd_clip_norm": (["--fedsgd_clip_norm=0"], "fedsgd clip_norm"),
    "fedsgd_lr": (["--fedsgd_learning_rate=-1"], "fedsgd learning_rate"),
    # Checked even where the Fed DP-SGD rows would not run.
    "fedsgd_unused": (["--fedsgd=false", "--fedsgd_epochs=-1"],
                      "fedsgd epochs"),
    "max_iter_zero": (["--max_iter=0"], "max_iter"),
    "seeds_zero": (["--seeds=0"], "seeds"),
    "seed_text": (["--seed=abc"], "seed"),
    "chunk_zero": (["--participant_chunk=0"], "participant_chunk"),
    "mechanism": (["--mechanism=fedavg"], "mechanism"),
    "loss": (["--loss=hinge"], "loss"),
    "aggregation": (["--aggregation=mean"], "aggregation"),
    "model_aggregation": (["--model_aggregation=mean"], "model_aggregation"),
    "calibration_enum": (["--calibration=exact"], "calibration"),
    "calibration_classic_large_eps": (["--calibration=classic"],
                                      "calibration=classic"),
    "relation": (["--relation=swap"], "relation"),
    "neighbouring": (["--neighbouring=swap"], "swap"),
    "budget_per_classifier": (["--budget_per_classifier=maybe"],
                              "budget_per_classifier"),
    "baseline": (["--baseline=maybe"], "baseline"),
    "sweep": (["--sweep=fig9"], "sweep"),
    "sweep_mechanisms": (["--sweep=fig3", "--sweep_mechanisms=fedavg"],
                         "sweep_mechanisms"),
    "plot": (["--plot=maybe"], "plot"),
    "shard": (["--shard_participants=maybe"], "shard_participants"),
    "data_dir": (["--data_dir=/nonexistent/feddpdr"], "data_dir"),
    "dataset": (["--dataset=nosuch"], "nosuch"),
    # Checked by federated.distributed.check_settings, before joining.
    "coordinator_address": (["--coordinator_address=nohost",
                             "--num_processes=2", "--process_id=0"],
                            "coordinator_address"),
    "process_id": (["--coordinator_address=127.0.0.1:1", "--num_processes=2",
                    "--process_id=2"], "process_id=2"),
    "process_flags_partial": (["--num_processes=2"], "--coordinator_address"),
    "coordinator_timeout": (["--coordinator_timeout=0"],
                            "--coordinator_timeout=0.0"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("cli")
  a_file = tmp / "file"
  a_file.write_text("x")
  out = [f"--out={tmp / 'out.jsonl'}", f"--jax_cache_dir={tmp / 'jax'}"]
  before = {name: argv + out for name, (argv, _) in BEFORE_LOAD.items()}
  before["out_directory"] = [f"--out={tmp}"]
  before["out_under_a_file"] = [f"--out={a_file}/x.jsonl"]
  before["positional"] = ["stray"] + out
  before["jax_cache_dir_file"] = [f"--jax_cache_dir={a_file}",
                                  f"--out={tmp / 'out.jsonl'}"]
  # A set whose shape is known only once loaded: checked after loading,
  # before compiling (training is forbidden throughout).
  rng = np.random.default_rng(0)
  lines = [f"{int(rng.integers(1, 4))} " + " ".join(
      f"{j + 1}:{rng.uniform(0, 1):.3f}" for j in range(6))
      for _ in range(20)]
  svm = tmp / "tiny.svm"
  svm.write_text("\n".join(lines) + "\n")
  after = {
      "after_load_rows": [f"--dataset=svmlight:{svm}", "--participants=2",
                          "--n_per_participant=50"] + out,
      "after_load_k": [f"--dataset=svmlight:{svm}", "--k=7",
                       "--participants=2", "--n_per_participant=5"] + out,
  }
  return cli.drive(_BODY, {"before_load": before, "after_load": after}), tmp


@pytest.mark.parametrize("name", sorted(BEFORE_LOAD) + [
    "out_directory", "out_under_a_file", "jax_cache_dir_file",
    "after_load_rows", "after_load_k"])
def test_bad_value_is_one_line_exit_2_before_work(results, name):
  got = results[0][name]
  expected = {"out_directory": "--out", "out_under_a_file": "--out",
              "jax_cache_dir_file": "--jax_cache_dir",
              "after_load_rows": "n_per_participant",
              "after_load_k": "k=7"}.get(name) or BEFORE_LOAD[name][1]
  lines = got["stderr"].strip().splitlines()
  if name.startswith("after_load"):  # "[hh:mm:ss] loading …" came first
    lines = [ln for ln in lines if not ln.startswith("[")]
  assert got["code"] == 2, got
  assert len(lines) == 1 and lines[0].startswith("error: "), got
  assert expected in lines[0], got
  assert cli.HEAVY_WORK not in got["stderr"]


def test_stray_positional_argument_is_one_line_exit_2(results):
  got = results[0]["positional"]
  assert got["code"] == 2, got
  assert got["stderr"].strip().startswith("error: ") and "stray" in got[
      "stderr"]
  assert len(got["stderr"].strip().splitlines()) == 1


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


# Issue #32: one process of two started alone waited five minutes in
# silence. Now it says at once what it waits for and, at
# --coordinator_timeout, ends with one error line naming the missing peer.
@pytest.mark.parametrize("process_id, missing", [
    (0, "process 1 did not join"),
    (1, "the coordinator 127.0.0.1:{port} never answered: process 0 did "
        "not start")])
@pytest.mark.slow
def test_a_process_alone_says_what_it_waits_for_and_ends_in_one_line(
    tmp_path, process_id, missing):
  port = _free_port()
  proc = cli.run_module(
      "launch.feddpdr", f"--coordinator_address=127.0.0.1:{port}",
      "--num_processes=2", f"--process_id={process_id}", "--seeds=1",
      "--epsilon=1", "--baseline=false", f"--out={tmp_path / 'o.jsonl'}",
      f"--jax_cache_dir={tmp_path / 'jax'}", "--coordinator_timeout=2")
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert f"process {process_id} of 2: waiting for the 2 processes to join " \
         f"at the coordinator 127.0.0.1:{port} (timeout 2 s; " \
         f"--coordinator_timeout)" in proc.stderr
  errors = [ln for ln in lines if ln.startswith("error: ")]
  assert len(errors) == 1 and lines[-1] == errors[0], proc.stderr[-2000:]
  assert missing.format(port=port) in errors[0]
  assert "Traceback" not in proc.stderr and "Check failure" not in (
      proc.stderr)


def test_join_passes_a_deadline_past_its_own():
  got = {}
  coordinator.join("127.0.0.1:1", 2, 1, timeout_s=2.5,
                   initialize=lambda **kw: got.update(kw))
  assert got == {"coordinator_address": "127.0.0.1:1", "num_processes": 2,
                 "process_id": 1, "initialization_timeout": 63}
  assert "not all of processes 1, 2 joined" in coordinator.missing_message(
      "h:1", 3, 0, timeout_s=5)
  assert "process 2 did not join" in coordinator.missing_message(
      "h:1", 3, 1, timeout_s=5, answers=True)


def test_help_is_fast_and_exits_0():
  proc = cli.run_module("launch.feddpdr", "--help")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "--epsilon" in proc.stdout and "--n_per_participant" in proc.stdout


def test_sweep_resume_loses_nothing_after_a_cut_off_line(tmp_path,
                                                          monkeypatch):
  # A sweep killed while writing its fourth record: the cut line goes to
  # .partial, the three complete records stay, and only the missing runs
  # are done again.
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 6)).astype(np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  y = (x[:, 0] > 0).astype(np.int64)
  prepared = experiment.Prepared("toy", x[:150], y[:150], x[150:], y[150:],
                                 (0, 1))
  monkeypatch.setattr(experiment, "prepare_data", lambda *a, **k: prepared)
  calls = []

  def fake_run_one(prep, *, sizes, seed, seeds, config, timing_repeats=1,
                   extra=None):
    calls.append((config.mechanism, config.epsilon))
    return {**experiment.record_settings(config), "dataset": prep.name,
            "sizes": list(sizes), "seed": seed, "seeds": seeds,
            "accuracy": 0.5, "accuracy_per_seed": [0.5], **(extra or {})}

  monkeypatch.setattr(experiment, "run_one", fake_run_one)
  out = str(tmp_path / "sweep.jsonl")
  setting = experiment.Setting(
      dataset="toy", sweep="fig3", sweep_mechanisms=("feddpdr", "nonpriv"),
      seeds=1, out=out, config=fed.Config(k=3), epsilons=(0.1,),
      participants=3, n_per_participant=40, plot=False)
  experiment.sweep(setting)
  full = common.read_jsonl(out)
  assert len(full) == 7
  with open(out, "w", encoding="utf-8") as f:
    f.writelines(common.to_json(r) + "\n" for r in full[:3])
    f.write(common.to_json(full[3])[:25])  # the interrupted write
  calls.clear()
  experiment.sweep(setting)
  assert len(calls) == 4  # the cut run and the three never started
  again = common.read_jsonl(out)
  assert again[:3] == full[:3]
  key = lambda r: common.record_key(r, experiment.KEY_FIELDS)  # noqa: E731
  assert sorted(map(key, again)) == sorted(map(key, full))
  with open(out + ".partial", encoding="utf-8") as f:
    assert f.read() == common.to_json(full[3])[:25] + "\n"
