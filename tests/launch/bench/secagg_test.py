"""launch.bench.secagg: a tiny run of every path, and refusals before any
work."""

import json
import subprocess
import sys

import pytest

from dpcore import accounting
from tests.launch.cli import REPO


def _run(module, *args):
  return subprocess.run([sys.executable, "-m", module, *args],
                        capture_output=True, text=True, check=False,
                        cwd=REPO)


@pytest.mark.slow  # a subprocess that compiles every path (~16 s)
def test_a_tiny_benchmark_times_every_path(tmp_path):
  out = tmp_path / "bench.jsonl"
  done = _run("launch.bench.secagg", "--participants=2", "--rows=20",
              "--bits=16", "--steps_per_call=2", "--repeats=1", "--dim=8",
              "--classes=3", "--batch=8", f"--out={out}")
  assert done.returncode == 0, done.stderr
  records = [json.loads(line) for line in out.read_text().splitlines()]
  paths = ("server", "distributed", "encode_no_noise", "noise_only",
           "masks_only", "decode_only")
  assert [r["path"] for r in records] == list(paths)
  for r in records:
    assert r["seconds_per_step"] > 0 and r["participants"] == 2
    assert r["model_parameters"] == 8 * 3 + 3 and r["padded_dim"] == 32
    assert r["bits_per_participant_step"] == 16 * 32
    assert r["float32_bits_per_participant_step"] == 32 * 27
    assert tuple(r["privacy"]) == accounting.PRIVACY_FIELDS
    assert r["privacy"]["epsilon"] is None
    assert len(r["load_average_1_5_15"]) == 3
  assert records[0]["ratio_to_server"] == 1.0


@pytest.mark.parametrize("module,args,match", [
    ("launch.bench.secagg", ["--participants=5,1000", "--rows=10"],
     "--rows needs one value"),
])
def test_bad_flags_are_refused_before_any_work(tmp_path, module, args,
                                               match):
  out = tmp_path / "out.jsonl"
  done = _run(module, *args, f"--out={out}")
  assert done.returncode != 0 and match in done.stderr
  assert not out.exists() or out.read_text() == ""
