"""launch.dpwss: record fields, privacy block, table mode, resuming."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from sklearn import datasets

from dpcore import accounting
from launch import common
from launch.data import loaders as launch_data
from launch.experiments import dpwss as launch_dpwss

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

HEART = os.path.join(launch_data.BUNDLED_DIR, "heart_scale")
FIELDS = ("dataset", "wss", "selection_epsilon", "epsilon", "sigma",
          "kernel", "c", "gamma", "eps", "shrinking", "resolved", "obj",
          "iterations", "auc", "accuracy", "precision", "recall", "f1",
          "mcc", "per_repeat", "exit_reason", "seconds", "compile_seconds",
          "privacy", "model_is_private")


def run(**fields):
  """launch.experiments.dpwss.run of the Setting of these fields."""
  return launch_dpwss.run(launch_dpwss.Setting(**fields))


@pytest.fixture(scope="module")
def small_svmlight(tmp_path_factory):
  """The first 90 rows of heart_scale as an svmlight file."""
  x, y = datasets.load_svmlight_file(HEART,
                                     n_features=13)
  path = tmp_path_factory.mktemp("svm") / "small"
  datasets.dump_svmlight_file(x[:90], y[:90], str(path), zero_based=False)
  return f"svmlight:{path}"


def test_dpwss_record(small_svmlight):
  setting = launch_dpwss.Setting(dataset=small_svmlight, wss="dpwss",
                                 selection_epsilon=1.0, sigma=0.3, repeats=3)
  rec = launch_dpwss.run(setting)
  for field in FIELDS:
    assert field in rec, field
  # The record's first fields are the setting, and its resume key.
  assert {k: rec[k] for k in launch_dpwss.KEY_FIELDS} == (
      dataclasses.asdict(setting))
  assert common.record_key(rec, launch_dpwss.KEY_FIELDS) == (
      launch_dpwss.key(setting))
  assert len(rec["per_repeat"]) == 3
  assert rec["model_is_private"] is False
  privacy = rec["privacy"]
  # The paper's selection: no guarantee, the paper's figure nominal; the
  # record's privacy is the one schema, DPWSS's own figures beside it.
  assert tuple(privacy) == accounting.PRIVACY_FIELDS
  assert rec["selection"] == "paper"
  assert privacy["epsilon"] is None and privacy["delta"] is None
  assert privacy["epsilon_nominal"] == 1.0
  extra = rec["dpwss"]
  assert extra["iterations"] == max(r["iterations"]
                                    for r in rec["per_repeat"])
  assert extra["epsilon_nominal_basic"] == pytest.approx(
      extra["iterations"])
  assert "no DP guarantee" in rec["privacy_note"]
  # The scope names what the guarantee leaves out: the SMO model's own
  # figures, published per repeat.
  assert "Not covered" in rec["privacy_scope"]
  assert "per_repeat" in rec["privacy_scope"]
  assert json.loads(common.to_json(rec))["privacy"]["epsilon"] is None
  assert rec["gamma"] is None  # as given; resolved: 1/d
  assert rec["resolved"] == {"scaling": "none", "gamma": pytest.approx(1 / 13)}
  assert rec["obj_error"] == pytest.approx(abs(rec["obj"] - rec["wss2_obj"]))
  assert 0.5 < rec["accuracy"] <= 1.0
  json.loads(common.to_json(rec))


def test_release_is_private_and_accounted(small_svmlight):
  rec = run(dataset=small_svmlight, wss="wss2", kernel="linear",
            release="output_perturbation", release_epsilon=2.0, repeats=2)
  # WSS2 has no selection: those fields are None.
  assert (rec["selection"], rec["selection_epsilon"], rec["sigma"]) == (
      None, None, None)
  assert rec["model_is_private"] is True
  assert tuple(rec["privacy"]) == accounting.PRIVACY_FIELDS
  assert rec["privacy"]["epsilon"] == pytest.approx(2.0)
  # The release records itself (its OutputPerturbationPlan's record).
  assert [e["label"] for e in rec["privacy"]["entries"]] == [
      "output_perturbation"]
  # 2C(1 + ρ)/ε at C = 1, ρ = 1 %, ε = 2.
  assert rec["released_model"]["noise_scale"] == pytest.approx(1.01)
  assert len(rec["released_model"]["per_repeat"]) == 2


def test_release_refused_for_rbf(small_svmlight):
  with pytest.raises(ValueError, match="linear kernel"):
    run(dataset=small_svmlight, kernel="rbf", release="output_perturbation")


@pytest.mark.slow
def test_table_mode_writes_grid_and_resumes(small_svmlight, tmp_path,
                                            monkeypatch):
  monkeypatch.setattr(launch_dpwss, "TABLE_GRID", ((1.0, 0.1), (0.1, 0.7)))
  out = str(tmp_path / "t.jsonl")
  md = str(tmp_path / "t.md")
  base = launch_dpwss.Setting(repeats=2)
  launch_dpwss.run_table(base, [small_svmlight], out=out, table_md=md)
  records = common.read_jsonl(out)
  assert len(records) == 2 * (1 + 2)  # shrinking on/off × (WSS2 + grid)
  table = open(md, encoding="utf-8").read()
  assert "| WSS2 | DPWSS ε=1 σ=0.1 | DPWSS ε=0.1 σ=0.7 |" in table
  assert table.count("| iterations |") == 2
  # A second call finds every run done and appends nothing.
  launch_dpwss.run_table(base, [small_svmlight], out=out)
  assert len(common.read_jsonl(out)) == len(records)


def test_main_prints_the_record_last(small_svmlight, tmp_path):
  # A subprocess: every launch script defines absl flags such as --dataset,
  # which may be defined only once per process.
  out = str(tmp_path / "m.jsonl")
  proc = subprocess.run(
      [sys.executable, "-m", "launch.dpwss", f"--dataset={small_svmlight}",
       "--wss=wss2", "--repeats=1", f"--out={out}"],
      cwd=_REPO, capture_output=True, text=True, timeout=1800,
      env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 0, proc.stderr[-2000:]
  last = proc.stdout.strip().splitlines()[-1]
  rec = json.loads(last)
  assert rec["wss"] == "wss2" and rec["privacy"]["epsilon"] is None
  assert rec["privacy"]["no_guarantee"] == accounting.NON_PRIVATE
  assert common.read_jsonl(out)[-1]["obj"] == rec["obj"]
  assert np.isfinite(rec["obj"])


def test_total_epsilon_target_sets_the_per_selection_epsilon(small_svmlight):
  rec = run(dataset=small_svmlight, wss="dpwss", sigma=0.5, repeats=1,
            selection_epsilon=None, epsilon=3.0, max_iter=60)
  # The paper's selection: a nominal split (no guarantee to compare to).
  assert rec["epsilon"] == 3.0 and rec["selection_epsilon"] is None
  assert rec["dpwss"]["epsilon_per_selection"] < 1.0
  assert rec["privacy"]["epsilon"] is None
  assert rec["dpwss"]["epsilon_nominal_composed"] <= 3.0 * (1 + 1e-6)
  with pytest.raises(ValueError, match="pass max_iter=T"):
    run(dataset=small_svmlight, selection_epsilon=None, epsilon=3.0)


def test_data_read_scaling_must_be_asked_for():
  # WDBC has no public bounds: 'auto' refuses; 'auto_minmax' min/max-scales
  # it (LIBSVM's svm-scale) and the record says so; heart keeps its box.
  prepare = lambda name, scaling: launch_dpwss.prepare(  # noqa: E731
      launch_dpwss.Setting(dataset=name, scaling=scaling))
  with pytest.raises(ValueError, match="no public feature bounds"):
    prepare("breast_cancer", "auto")
  x, _, _, _, scaling = prepare("breast_cancer", "auto_minmax")
  assert scaling == "minmax"
  np.testing.assert_allclose(x.min(axis=0), -1.0)
  np.testing.assert_allclose(x.max(axis=0), 1.0)
  assert prepare("heart", "auto")[4] == prepare("heart", "auto_minmax")[4]
  assert prepare("heart", "auto")[4] == "box"


def test_private_selection_record(small_svmlight):
  rec = run(dataset=small_svmlight, wss="dpwss", selection="private",
            sigma=0.5, repeats=2, selection_epsilon=None, epsilon=3.0,
            max_iter=40)
  privacy = rec["privacy"]
  assert rec["selection"] == "private" and rec["iterations"] == 40
  assert rec["exit_reason"] == ["max_iter"]
  assert rec["dpwss"]["selections"] == 80
  assert tuple(privacy) == accounting.PRIVACY_FIELDS
  assert privacy["epsilon"] == pytest.approx(3.0, rel=1e-6)
  assert privacy["delta"] == 1e-5 and privacy["epsilon_nominal"] is None
  assert rec["model_is_private"] is False
  assert "NOT private" in rec["dpwss"]["scope"]


def test_selection_comparison_writes_and_resumes(small_svmlight, tmp_path):
  out = str(tmp_path / "s.jsonl")
  md = str(tmp_path / "s.md")
  args = dict(out=out, table_md=md, paper_settings=((1.0, 0.5),),
              epsilons=(1.0, 10.0), iterations=(30,))
  base = launch_dpwss.Setting(repeats=1)
  launch_dpwss.run_selection_comparison(base, [small_svmlight], **args)
  records = common.read_jsonl(out)
  assert [r.get("selection") for r in records] == [
      None, "paper", "private", "private"]
  table = open(md, encoding="utf-8").read()
  assert "none (paper claims 1)" in table
  assert table.count("private, σ=0.5, T=30") == 2
  # All done: no new runs.
  launch_dpwss.run_selection_comparison(base, [small_svmlight], **args)
  assert len(common.read_jsonl(out)) == len(records)


def _libsvm_fit(path, gamma):
  """LIBSVM (libsvm-official) on the file itself: (#iter, ρ, obj)."""
  import re  # pylint: disable=g-import-not-at-top

  from libsvm import svm as libsvm_svm  # pylint: disable=g-import-not-at-top
  from libsvm import svmutil  # pylint: disable=g-import-not-at-top

  y, x = svmutil.svm_read_problem(path)
  lines = []
  hook = libsvm_svm.PRINT_STRING_FUN(lambda s: lines.append(s.decode()))
  param = libsvm_svm.svm_parameter(
      f"-s 0 -t 2 -c 1 -g {gamma!r} -e 0.001 -h 0")
  param.print_func = hook  # svm_train installs param.print_func
  try:
    model = svmutil.svm_train(libsvm_svm.svm_problem(y, x), param)
  finally:
    libsvm_svm.libsvm.svm_set_print_string_function(
        libsvm_svm.ctypes_print_null)
  text = "".join(lines)
  iters = int(re.search(r"#iter = (\d+)", text).group(1))
  obj = float(re.search(r"obj = ([-+.\de]+)", text).group(1))
  return iters, float(model.rho[0]), obj


def test_cli_loader_keeps_libsvm_parity(tmp_path):
  # WDBC min/max-scaled to [-1, 1] and written at full precision: LIBSVM
  # reads doubles. Through the launch loader (svmlight: → float64) the
  # solver must take LIBSVM's exact path; the same rows rounded to float32
  # (what the loader used to store) take another (114 iterations, not 117,
  # when this test was written), so the test can fail.
  bunch = datasets.load_breast_cancer()
  x = bunch.data
  low, high = x.min(axis=0), x.max(axis=0)
  x = 2 * (x - low) / (high - low) - 1
  path = str(tmp_path / "wdbc_scaled")
  datasets.dump_svmlight_file(x, np.where(bunch.target == 1, 1, -1), path,
                             zero_based=False)
  ref_iter, ref_rho, ref_obj = _libsvm_fit(path, 1 / 30)
  name = f"svmlight:{path}"
  setting = launch_dpwss.Setting(dataset=name, wss="wss2", shrinking=False,
                                 repeats=1, dtype="float64")
  rec = launch_dpwss.run(setting)
  assert rec["resolved"]["scaling"] == "none" and rec["n_train"] == 569
  assert rec["iterations"] == ref_iter
  # ρ = −b; LIBSVM's own tolerance-free path: agreement to float64
  # round-off of the same arithmetic (1e-9 relative is ample).
  assert -rec["per_repeat"][0]["bias"] == pytest.approx(ref_rho, rel=1e-9)
  assert rec["obj"] == pytest.approx(ref_obj, rel=1e-6)  # printed to 6 dp
  prepared = launch_dpwss.prepare(setting)
  rounded = prepared.x.astype(np.float32).astype(np.float64)
  off = launch_dpwss.run(setting, prepared=prepared._replace(
      x=rounded, x_eval=rounded))
  assert off["iterations"] != ref_iter
