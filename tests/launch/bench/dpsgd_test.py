"""launch.bench.dpsgd: a tiny run of every path, and a refusal."""

import json
import subprocess
import sys

import pytest

from dpcore import accounting
from tests.launch.cli import REPO


@pytest.mark.slow  # a subprocess that compiles every path (~16 s)
def test_a_tiny_benchmark_times_every_path(tmp_path):
  out = tmp_path / "bench.jsonl"
  done = subprocess.run(
      [sys.executable, "-m", "launch.bench.dpsgd",
       "--dataset=synthetic:rows=600,d=16,test=10", "--models=softmax,mlp",
       "--hidden=8", "--batch=32", "--steps_per_call=3", "--repeats=1",
       "--vmap_steps=2", f"--out={out}"],
      capture_output=True, text=True, check=False, cwd=REPO)
  assert done.returncode == 0, done.stderr
  records = [json.loads(line) for line in out.read_text().splitlines()]
  paths = ("plain", "dp_ghost", "dp_vmap", "sampling_only", "noise_only")
  assert [(r["model"], r["path"]) for r in records] == [
      (m, p) for m in ("softmax", "mlp") for p in paths]
  for r in records:
    assert r["seconds_per_step"] > 0
    assert r["epoch_seconds"] == r["seconds_per_step"] * 19  # ⌈600/32⌉
    assert tuple(r["privacy"]) == accounting.PRIVACY_FIELDS
    assert r["privacy"]["epsilon"] is None
  assert records[0]["ratio_to_plain"] == 1.0
  assert records[0]["parameters"] == 16 * 10 + 10
  assert records[5]["parameters"] == 16 * 8 + 8 + 8 * 10 + 10
  assert {r["steps_per_call"] for r in records if r["path"] == "dp_vmap"
          } == {2}


def test_an_unknown_model_is_refused_before_any_work(tmp_path):
  out = tmp_path / "bench.jsonl"
  done = subprocess.run(
      [sys.executable, "-m", "launch.bench.dpsgd", "--models=cnn",
       f"--out={out}"], capture_output=True, text=True, check=False,
      cwd=REPO)
  assert done.returncode != 0
  assert "--models takes softmax and/or mlp" in done.stderr
  assert len(done.stderr.strip().splitlines()) == 1
  assert not out.exists() or out.read_text() == ""
