"""The time-to-first-result benchmark (launch.bench.first_result)."""

import json
import os
import subprocess
import sys

import pytest

from tests.launch.cli import REPO

_SMALL = "--first_result_args=--seeds=1,--epsilon=8,--baseline=false"


def _run(tmp_path, *flags):
  out = tmp_path / "first.jsonl"
  done = subprocess.run(
      [sys.executable, "-m", "launch.bench.first_result",
       f"--first_result_out={out}", *flags],
      cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL,
      env={**os.environ, "JAX_PLATFORMS": "cpu"}, check=False)
  return done, out


def test_a_failing_main_job_is_an_error_not_a_figure(tmp_path):
  done, out = _run(tmp_path, "--first_result_pairs=1",
                   "--first_result_args=--epsilon=0")
  assert done.returncode != 0
  assert "launch.feddpdr" in done.stderr and "failed" in done.stderr
  assert not out.exists() or not out.read_text().strip()


@pytest.mark.slow
def test_one_pair_is_recorded(tmp_path):
  done, out = _run(tmp_path, "--first_result_pairs=1", _SMALL)
  assert done.returncode == 0, done.stderr
  records = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r["run"] for r in records] == ["first", "second"]
  for r in records:
    assert r["wall_seconds"] > 0 and r["cpu_seconds"] > 0
    assert r["privacy"]["epsilon"] is None
    assert "FedDPDR-DPML" in r["table"]
  # The second run found the first run's cache: it compiled nothing.
  assert records[1]["cpu_seconds"] < records[0]["cpu_seconds"]
