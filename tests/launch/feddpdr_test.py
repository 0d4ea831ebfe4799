"""Tests of launch.feddpdr: offline default run, JSON record, resume."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dpcore import accounting
from federated import feddpdr as fed
from launch import common
from launch.data import loaders as data_lib
from launch.experiments import feddpdr as launch
from tests.launch.data.files import write_cifar_dir

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def test_command_line_run_prints_and_appends_json(tmp_path):
  out = tmp_path / "runs.jsonl"
  cmd = [sys.executable, "-m", "launch.feddpdr", "--dataset=digits",
         "--mechanism=feddpdr", "--k=5", "--participants=3",
         "--n_per_participant=100", "--epsilon=1.0", "--seeds=2",
         f"--out={out}", f"--jax_cache_dir={tmp_path / 'jax'}"]
  proc = subprocess.run(cmd, cwd=_REPO, capture_output=True, text=True,
                        timeout=1800, env={**os.environ,
                                          "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = proc.stdout.strip().splitlines()
  records = [json.loads(line) for line in lines]
  assert common.read_jsonl(str(out)) == records
  base, private = records  # the baseline runs first
  for record in records:
    for field in ("dataset", "mechanism", "epsilon", "delta", "k",
                  "participants", "sizes", "accuracy", "seconds",
                  "compile_seconds", "privacy", "grad_norm_max", "seed"):
      assert field in record
    assert tuple(record["privacy"]) == accounting.PRIVACY_FIELDS
    assert record["sizes"] == [100, 100, 100]
    assert 0.0 <= record["accuracy"] <= 1.0
    assert record["grad_norm_max"] <= 1e-8
  assert private["mechanism"] == "feddpdr" and private["epsilon"] == 1.0
  assert private["privacy"]["epsilon"] <= 1.0 + 1e-9
  assert private["privacy"]["epsilon_nominal"] == 1.0
  # A non-private run used no ε: it says so, and records none.
  assert base["mechanism"] == "nonpriv" and base["epsilon"] is None
  assert base["privacy"] == accounting.no_guarantee_record(
      accounting.NON_PRIVATE)
  assert "compiling" in proc.stderr and "accuracy" in proc.stderr


def test_sizes_must_fit_and_are_never_capped():
  assert launch.resolve_sizes(available=1000, participants=5, n_per=200,
                              sizes=None) == (200,) * 5
  with pytest.raises(ValueError, match=r"--participants=5 x "
                     r"--n_per_participant=10000.*1000 training rows"):
    launch.resolve_sizes(available=1000, participants=5, n_per=10_000,
                         sizes=None)
  assert launch.resolve_sizes(available=1000, participants=5, n_per=1,
                              sizes=["10", "20"]) == (10, 20)
  with pytest.raises(ValueError, match="at least one row"):
    launch.resolve_sizes(available=1000, participants=2, n_per=1,
                         sizes=["10", "0"])
  with pytest.raises(ValueError, match="--sizes is empty"):
    launch.resolve_sizes(available=1000, participants=2, n_per=1, sizes=[])
  with pytest.raises(ValueError, match="--sizes.*1000 training rows"):
    launch.resolve_sizes(available=1000, participants=2, n_per=1,
                         sizes=["900", "200"])


def test_sweep_grids_follow_the_paper():
  points = launch.sweep_points("fig3", d=784, available=60_000,
                               n_default=10_000, participants=5,
                               mechanisms=fed.MECHANISMS, epsilon=0.1)
  assert sorted({p[3] for p in points if p[1] != "nonpriv"}) == list(
      launch.PAPER_EPSILON)
  # Non-Priv takes no ε: one run (ε None), not one per ε.
  assert [p[3] for p in points if p[1] == "nonpriv"] == [None]
  assert len(points) == 6 * 3 + 1
  fig2 = launch.sweep_points("fig2", d=64, available=1000, n_default=200,
                             participants=5, mechanisms=("feddpdr", "dpml"),
                             epsilon=0.1)
  assert [p[2] for p in fig2 if p[1] == "feddpdr"] == [5, 10, 20, 50]
  assert [p[1] for p in fig2].count("dpml") == 1
  fig5 = launch.sweep_points("fig5", d=784, available=60_000,
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
  out = str(tmp_path / "sweep.jsonl")
  kwargs = dict(dataset="toy", data_dir=None, sweep_name="fig3",
                mechanisms=("feddpdr", "nonpriv"), seed=0, seeds=2, out=out,
                base=fed.Config(k=3), participants=3, n_per=40, plot=True)
  launch.sweep(**kwargs)
  assert len(calls) == 7  # 6 budgets of feddpdr, Non-Priv once
  launch.sweep(**kwargs)
  assert len(calls) == 7  # everything was found in the file
  assert os.path.exists(str(tmp_path / "sweep_toy_fig3.png"))


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
  (record,) = launch.budget_table(
      prepared, sizes=(30, 30), seed=0, seeds=1,
      base=fed.Config(mechanism="feddpdr", k=5, epsilon=1.0),
      epsilons=[1.0], baseline=False, out=str(out))
  assert common.read_jsonl(str(out)) == [json.loads(common.to_json(record))]
  assert record["dataset"] == "cifar10" and record["sizes"] == [30, 30]
  assert 0.0 <= record["accuracy"] <= 1.0
  assert record["privacy"]["epsilon"] <= 1.0 + 1e-9
  assert record["grad_norm_max"] <= 1e-8
