"""Tests of launch.feddpdr: offline default run, JSON record, resume."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from dpcore import accounting, clipping, memory, options
from federated import feddpdr as fed
from launch import common, programs
from launch.data import loaders as data_lib
from launch.experiments import feddpdr as launch
from tests.launch.data.files import write_cifar_dir

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _command(tmp_path, *flags_):
  return subprocess.run(
      [sys.executable, "-m", "launch.feddpdr", *flags_,
       f"--out={tmp_path / 'runs.jsonl'}",
       f"--jax_cache_dir={tmp_path / 'jax'}"],
      cwd=_REPO, capture_output=True, text=True, timeout=1800,
      env={**os.environ, "JAX_PLATFORMS": "cpu"})


def test_command_line_run_prints_and_appends_json(tmp_path):
  # The old spellings --neighbouring and --fedsgd_clip are aliases; a
  # --fedsgd_* flag asks for the Fed DP-SGD rows.
  proc = _command(tmp_path, "--dataset=digits", "--mechanism=feddpdr",
                  "--k=5", "--participants=3", "--n_per_participant=100",
                  "--epsilon=1.0", "--seeds=2", "--neighbouring=replace",
                  "--fedsgd_clip=1.0")
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = proc.stdout.strip().splitlines()
  records = [json.loads(line) for line in lines]
  assert common.read_jsonl(str(tmp_path / "runs.jsonl")) == records
  base, private, fed_sgd = records  # the baseline first, DP-SGD last
  assert fed_sgd["mechanism"] == "fedsgd" and fed_sgd["epsilon"] == 1.0
  assert fed_sgd["sizes"] == [100, 100, 100]
  assert tuple(fed_sgd["privacy"]) == accounting.PRIVACY_FIELDS
  # σ is calibrated for ε = 1; what holds (the padding's δ included) is
  # reported, within a hair of it, with no nominal figure.
  assert 0.5 < fed_sgd["privacy"]["epsilon"] <= 1.0 + 1e-3
  assert fed_sgd["privacy"]["epsilon_nominal"] is None
  assert fed_sgd["fedsgd"]["trust"] == "server"
  assert "secure aggregation" in fed_sgd["fedsgd"]["assumption"]
  assert fed_sgd["privacy_scope"].startswith("one run (one seed): one row")
  assert fed_sgd["fedsgd"]["assumption"] in fed_sgd["privacy_scope"]
  assert 0.0 <= fed_sgd["accuracy"] <= 1.0
  for record in (base, private):
    for field in ("dataset", "mechanism", "epsilon", "delta", "k",
                  "participants", "sizes", "accuracy", "seconds",
                  "compile_seconds", "privacy", "grad_norm_max", "seed"):
      assert field in record
    assert tuple(record["privacy"]) == accounting.PRIVACY_FIELDS
    assert record["sizes"] == [100, 100, 100]
    assert record["compiler_options"] == launch.CPU_COMPILER_OPTIONS
    assert 0.0 <= record["accuracy"] <= 1.0
    assert record["grad_norm_max"] <= 1e-8
    assert record["privacy_scope"] == launch.SCOPE
  assert private["mechanism"] == "feddpdr" and private["epsilon"] == 1.0
  assert private["relation"] == "replace_one"
  assert private["privacy"]["epsilon"] <= 1.0 + 1e-9
  assert private["privacy"]["epsilon_nominal"] == 1.0
  # A non-private run used no ε: it says so, and records none.
  assert base["mechanism"] == "nonpriv" and base["epsilon"] is None
  assert base["privacy"] == accounting.no_guarantee_record(
      accounting.NON_PRIVATE)
  assert "compiling" in proc.stderr and "accuracy" in proc.stderr
  assert "Fed DP-SGD" in proc.stderr


@pytest.mark.slow
def test_a_command_runs_only_what_it_asks_for(tmp_path):
  # A named mechanism on a named data set runs that mechanism (and the
  # baseline), not federated DP-SGD beside it.
  proc = _command(tmp_path, "--dataset=digits", "--mechanism=feddpdr",
                  "--k=3", "--participants=2", "--n_per_participant=50",
                  "--epsilon=2", "--seeds=1", "--baseline=false")
  assert proc.returncode == 0, proc.stderr[-2000:]
  (record,) = [json.loads(ln) for ln in proc.stdout.strip().splitlines()]
  assert record["mechanism"] == "feddpdr"
  assert "Fed DP-SGD" not in proc.stderr


def test_sizes_must_fit_and_are_never_capped():
  assert launch.resolve_sizes(available=1000, participants=5, n_per=200,
                              sizes=None) == (200,) * 5
  with pytest.raises(ValueError, match=r"participants=5 x "
                     r"n_per_participant=10000.*1000 training rows"):
    launch.resolve_sizes(available=1000, participants=5, n_per=10_000,
                         sizes=None)
  assert launch.resolve_sizes(available=1000, participants=5, n_per=1,
                              sizes=["10", "20"]) == (10, 20)
  with pytest.raises(ValueError, match="at least one row"):
    launch.resolve_sizes(available=1000, participants=2, n_per=1,
                         sizes=["10", "0"])
  with pytest.raises(ValueError, match="sizes is empty"):
    launch.resolve_sizes(available=1000, participants=2, n_per=1, sizes=[])
  with pytest.raises(ValueError, match="sizes.*1000 training rows"):
    launch.resolve_sizes(available=1000, participants=2, n_per=1,
                         sizes=["900", "200"])


def test_sweep_grids_follow_the_paper():
  points = launch.sweep_points("fig3", dim=784, available=60_000,
                               n_default=10_000, participants=5,
                               mechanisms=list(options.FedDPDRMechanism),
                               epsilon=0.1)
  assert sorted({p[3] for p in points if p[1] != "nonpriv"}) == list(
      launch.PAPER_EPSILON)
  # Non-Priv takes no ε: one run (ε None), not one per ε.
  assert [p[3] for p in points if p[1] == "nonpriv"] == [None]
  assert len(points) == 6 * 3 + 1
  fig2 = launch.sweep_points("fig2", dim=64, available=1000, n_default=200,
                             participants=5, mechanisms=("feddpdr", "dpml"),
                             epsilon=0.1)
  assert [p[2] for p in fig2 if p[1] == "feddpdr"] == [5, 10, 20, 50]
  assert [p[1] for p in fig2].count("dpml") == 1
  fig5 = launch.sweep_points("fig5", dim=784, available=60_000,
                             n_default=10_000, participants=5,
                             mechanisms=("feddpdr",), epsilon=0.1)
  assert [p[4] for p in fig5] == list(launch.PAPER_UNEVEN)


def test_sweep_resumes_without_redoing(tmp_path, monkeypatch):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 6)).astype(np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  y = (x[:, 0] > 0).astype(np.int64)
  prepared = launch.Prepared("toy", x[:150], y[:150], x[150:], y[150:],
                             (0, 1))
  monkeypatch.setattr(launch, "prepare_data", lambda *a, **k: prepared)
  calls = []

  def fake_run_one(prep, *, sizes, seed, seeds, config, timing_repeats=1,
                   extra=None):
    calls.append((config.mechanism, config.epsilon))
    return {**launch.record_settings(config), "dataset": prep.name,
            "sizes": list(sizes), "seed": seed, "seeds": seeds,
            "accuracy": 0.5, "seconds": 0.0, "accuracy_per_seed": [0.5],
            **(extra or {})}

  monkeypatch.setattr(launch, "run_one", fake_run_one)
  setting = launch.Setting(
      dataset="toy", sweep="fig3", sweep_mechanisms=("feddpdr", "nonpriv"),
      seeds=2, out=str(tmp_path / "sweep.jsonl"), config=fed.Config(k=3),
      epsilons=(0.1,), participants=3, n_per_participant=40)
  launch.sweep(setting)
  assert len(calls) == 7  # 6 budgets of feddpdr, Non-Priv once
  launch.sweep(setting)
  assert len(calls) == 7  # everything was found in the file
  assert os.path.exists(str(tmp_path / "sweep_toy_fig3.png"))


@pytest.mark.slow  # HOG and the whole pipeline compiled (~20 s)
def test_cifar10_runs_end_to_end_on_hog_features(tmp_path):
  # CIFAR-10 cannot be had offline here: a directory in its format, read by
  # the loader, featurised by our HOG, normalised and trained on.
  sk_hog = pytest.importorskip("skimage.feature").hog
  write_cifar_dir(tmp_path, np.random.default_rng(5), per_batch=12)
  prepared = launch.prepare_data("cifar10", data_dir=str(tmp_path), seed=0)
  assert prepared.x_train.shape == (60, 1764)  # 7·7 blocks × 2·2 × 9 bins
  assert prepared.x_test.shape == (12, 1764)
  raw = data_lib.load_dataset("cifar10", data_dir=str(tmp_path))
  for row in (0, 41):
    image = raw.x_train[row].reshape(32, 32, 3).astype(np.uint8)
    ref = sk_hog(image, orientations=9, pixels_per_cell=(4, 4),
                 cells_per_block=(2, 2), block_norm="L2-Hys",
                 channel_axis=-1)
    np.testing.assert_allclose(prepared.x_train[row],
                               ref / np.linalg.norm(ref), atol=1e-5)
  np.testing.assert_array_equal(prepared.y_train, raw.y_train)
  out = tmp_path / "runs.jsonl"
  (record,) = launch.budget_table(prepared, launch.Setting(
      config=fed.Config(mechanism="feddpdr", k=5, epsilon=1.0),
      epsilons=(1.0,), baseline=False, seeds=1, out=str(out)),
      sizes=(30, 30))
  assert common.read_jsonl(str(out)) == [json.loads(common.to_json(record))]
  assert record["dataset"] == "cifar10" and record["sizes"] == [30, 30]
  assert 0.0 <= record["accuracy"] <= 1.0
  assert record["privacy"]["epsilon"] <= 1.0 + 1e-9
  assert record["grad_norm_max"] <= 1e-8


def _synthetic_prepared(seed=0) -> launch.Prepared:
  ds = data_lib.synthetic(jax.random.key(seed), rows=300, d=12, test=100,
                          classes=3, rank=3)
  return launch.Prepared("toy", np.asarray(clipping.unit_rows(ds.x_train)),
                         ds.y_train, np.asarray(clipping.unit_rows(ds.x_test)),
                         ds.y_test, ds.classes)


def test_synthetic_set_is_keyed_low_rank_and_named_by_its_settings():
  a = data_lib.synthetic(jax.random.key(3), rows=2000, d=40, test=50,
                         classes=4, rank=5)
  again = data_lib.synthetic(jax.random.key(3), rows=2000, d=40, test=50,
                             classes=4, rank=5)
  other = data_lib.synthetic(jax.random.key(4), rows=2000, d=40, test=50,
                             classes=4, rank=5)
  assert a.x_train.shape == (2000, 40) and a.x_test.shape == (50, 40)
  assert a.classes == (0, 1, 2, 3) and a.bounds is None
  np.testing.assert_array_equal(a.x_train, again.x_train)
  assert not np.array_equal(a.x_train, other.x_train)
  # The signal lives in rank = 5 directions, 1.25 per direction (centres
  # 1, spread 0.25), against a floor of total 1: about 6.25 / 7.25 of the
  # energy. With noise=10 (floor 100) the top 5 hold about 0.18.
  def top_share(x):
    values = np.linalg.eigvalsh(x.T @ x)
    return values[-5:].sum() / values.sum()
  assert top_share(a.x_train) > 0.8
  noisy = data_lib.synthetic(jax.random.key(3), rows=2000, d=40, test=50,
                             classes=4, rank=5, noise=10.0)
  assert top_share(noisy.x_train) < 0.3
  settings = data_lib.synthetic_settings("synthetic:rows=100,d=8,seed=2")
  assert settings["rows"] == 100 and settings["d"] == 8
  assert settings["seed"] == 2 and settings["classes"] == 10
  assert data_lib.synthetic_settings("mnist") is None
  named = data_lib.load_dataset("synthetic:rows=30,d=6,test=5,rank=2")
  assert named.x_train.shape == (30, 6) and named.x_test.shape == (5, 6)
  for bad, message in (("synthetic:rows=0", "rows must be >= 1"),
                       ("synthetic:colour=3", "is not one of"),
                       ("synthetic:d=4,rank=5", "rank=5 exceeds d=4"),
                       ("synthetic:d=x", "is not a number")):
    with pytest.raises(ValueError, match=message):
      data_lib.check_dataset(bad)


@pytest.mark.slow
def test_run_one_records_the_rate_layout_solver_and_memory(capsys):
  prepared = _synthetic_prepared()
  record = launch.run_one(prepared, sizes=(20,) * 5, seed=0, seeds=2,
                          config=fed.Config(k=3, epsilon=4.0, lam=0.1),
                          participant_chunk=2)
  assert record["participants_per_second"] == pytest.approx(
      5 * 2 / record["seconds"])
  assert record["devices"] == 1 and record["processes"] == 1
  assert record["chunk"] == 2
  assert record["topk"] == {"solver": "eigh"}
  # ru_maxrss in bytes: a JAX process holds well over 50 MB, under 1 TB.
  assert 5e7 < record["peak_host_memory_bytes"] < 1e12
  assert record["peak_device_memory_bytes"] is None  # the CPU reports none
  err = capsys.readouterr().err
  assert "partitioned 5 participants" in err
  assert "participants/s" in err


def test_topk_record_names_the_subspace_settings():
  config = fed.Config(k=20)
  eigh = dataclasses.replace(config, topk="eigh")
  assert launch.topk_record(eigh, dim=784) == {"solver": "eigh"}
  sub = dataclasses.replace(config, topk="subspace")
  assert launch.topk_record(sub, dim=784) == {
      "solver": "subspace", "block": 48, "iterations": 16}
  assert launch.topk_record(dataclasses.replace(sub, k=5), dim=16)[
      "block"] == 16


@pytest.mark.parametrize("flags_, message", [
    (["--dataset=synthetic:rows=100,d=8", "--participants=50",
      "--n_per_participant=4"], "exceeds the 100 training rows"),
    (["--dataset=synthetic:rows=2000,d=8", "--k=9"],
     "exceeds the data dimension d=8"),
    (["--dataset=synthetic:colour=1"], "is not one of"),
    (["--topk=power"], "--topk"),
])
def test_command_line_checks_synthetic_sizes_before_any_work(
    tmp_path, flags_, message):
  out = tmp_path / "runs.jsonl"
  proc = subprocess.run(
      [sys.executable, "-m", "launch.feddpdr", *flags_, f"--out={out}",
       f"--jax_cache_dir={tmp_path / 'jax'}"], cwd=_REPO,
      capture_output=True, text=True, check=False,
      env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert re.search(message, proc.stderr), proc.stderr[-2000:]


@pytest.mark.slow
def test_training_program_equals_the_library_train(tmp_path):
  # The harness compiles feddpdr.train with its CPU compiler options,
  # directly or (cache on) through the stored program; the results must be
  # the library's.
  from federated import partition  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  x = rng.normal(size=(90, 6)).astype(np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  y = rng.integers(0, 3, size=90)
  parts = partition.partition(jax.random.key(0), x, y, sizes=(40, 50))
  config = fed.Config(epsilon=2.0, k=3, lam=1.0)
  plan = fed.make_plan(parts.sizes, dim=6, num_classes=3, config=config)
  assert launch.compiler_options() == launch.CPU_COMPILER_OPTIONS
  options = tuple(sorted(launch.CPU_COMPILER_OPTIONS.items()))
  before = jax.config.jax_compilation_cache_dir
  try:
    with jax.enable_x64(True):
      args = fed.train_arguments(jax.random.key(1), parts, plan, seeds=2)
      # Cache off: the jit of feddpdr.train with the options (the same
      # program and options as the stored one below, so not run again).
      jax.config.update("jax_compilation_cache_dir", None)
      assert launch.training_program(
          args, config=config, num_classes=3) is launch._compiled_train(
              fed.program(config), 3, None, options)
      jax.config.update("jax_compilation_cache_dir", str(tmp_path))
      train = launch.training_program(args, config=config, num_classes=3)
      got = jax.device_get(train(*args))
      want = jax.device_get(fed.train(*args, config=config, num_classes=3))
  finally:
    jax.config.update("jax_compilation_cache_dir", before)
  assert len(os.listdir(tmp_path / "programs")) == 1
  assert options in {loaded[1] for loaded in programs._LOADED}
  assert bool(np.all(got.converged))
  for name, a, b in zip(want._fields, got, want, strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.slow
def test_a_fit_that_cannot_converge_ends_in_one_line(tmp_path):
  # --max_iter=1 cannot reach the exact minimiser the guarantee needs: the
  # run says so in one line (with the fix) and exits 2, no traceback.
  out = tmp_path / "runs.jsonl"
  proc = subprocess.run(
      [sys.executable, "-m", "launch.feddpdr", "--dataset=digits", "--k=3",
       "--participants=2", "--n_per_participant=50", "--epsilon=1",
       "--seeds=1", "--baseline=false", "--max_iter=1",
       f"--out={out}", f"--jax_cache_dir={tmp_path / 'jax'}"],
      cwd=_REPO, capture_output=True, text=True, timeout=600,
      env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 2, proc.stderr[-2000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and "Raise max_iter" in last
  assert "Traceback" not in proc.stderr


def test_the_memory_budget_picks_a_chunk_or_refuses(capsys):
  # No training: the choice is made from the estimate alone.
  kw = dict(sizes=[60] * 1000, dim=784, num_classes=10)

  def chunk(budget, participant_chunk=None):
    setting = launch.Setting(
        config=fed.Config(mechanism="feddpdr", k=20, epsilon=1.0),
        memory_budget=budget, participant_chunk=participant_chunk)
    return launch.memory_chunk(setting, **kw)
  assert chunk(None) is None
  assert chunk(2**40) is None
  chosen = chunk(8 * 2**30)
  assert 1 <= chosen < 1000
  assert f"participant chunk {chosen} of 1000" in capsys.readouterr().err
  with pytest.raises(ValueError, match="memory_budget"):
    chunk(2**20)
  with pytest.raises(ValueError, match="participant_chunk=1000"):
    chunk(8 * 2**30, 1000)
  assert chunk(8 * 2**30, 10) == 10


def test_a_run_that_cannot_fit_is_refused_in_one_line(tmp_path):
  out = tmp_path / "runs.jsonl"
  proc = subprocess.run(
      [sys.executable, "-m", "launch.feddpdr", "--memory_budget=1M",
       f"--out={out}", f"--jax_cache_dir={tmp_path / 'jax'}"],
      cwd=_REPO, capture_output=True, text=True, timeout=600,
      env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 2, proc.stderr[-2000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and "memory_budget" in last
  assert "MiB" in last and "compiling" not in proc.stderr
  assert not out.exists() or out.read_text() == ""


@pytest.mark.slow
def test_the_harness_keeps_its_planned_chunk_when_memory_shrinks(
    monkeypatch):
  # The script plans the chunk once, against --memory_budget, before any
  # run; the library's own default (3/4 of the memory available now) must
  # not check it again after the data are loaded (that refused a chunk the
  # script had just chosen on a 1,000-participant MNIST run).
  prepared = _synthetic_prepared()
  monkeypatch.setattr(memory, "available_bytes", lambda: 1_000)
  record = launch.run_one(prepared, sizes=(20,) * 3, seed=0, seeds=1,
                          config=fed.Config(k=3, epsilon=4.0, lam=0.1),
                          participant_chunk=2)
  assert record["chunk"] == 2 and 0.0 <= record["accuracy"] <= 1.0


def test_table_columns_stay_aligned_with_long_labels():
  def record(mechanism, trust=None, eps=1.0):
    r = {"dataset": "digits", "participants": 2, "sizes": [600, 600],
         "k": 10, "num_classes": 10, "test_rows": 539, "seeds": 3,
         "mechanism": mechanism, "accuracy": 0.5, "accuracy_std": 0.01,
         "privacy": {"epsilon": eps, "delta": 1e-4,
                     "epsilon_nominal": eps}}
    if trust:
      r["fedsgd"] = {"trust": trust, "assumption": "a"}
    return r
  lines = launch.format_table(
      [record("feddpdr"), record("fedsgd", "server"),
       record("fedsgd", "distributed")]).splitlines()
  rows = lines[1:5]  # the header and the three rows
  # Every row's accuracy column ends at the header's.
  assert len({len(line) for line in rows}) == 1, rows
  assert "(distributed)" in rows[3]

