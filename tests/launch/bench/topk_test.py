"""launch.bench.topk: a tiny run of both paths, and its refusals."""

import subprocess
import sys

import pytest

from dpcore import accounting
from launch.bench import topk as bench_topk


@pytest.mark.slow
def test_a_tiny_benchmark_times_both_paths_and_measures_utility():
  record = bench_topk.benchmark(d=64, participants=2, k=3, rows=200,
                                epsilon=1.0, delta=1e-5, block=None,
                                iterations=60, repeats=1, seed=0)
  assert record["block"] == 14
  assert record["eigh_seconds_per_1000"] > 0
  assert record["subspace_seconds_per_1000"] > 0
  # 200 digits rows at ε = 1: 60 iterations with a block of 14 find the
  # same subspace as eigh (20 leave a distance of about 1e-2 here).
  assert record["subspace_distance_max"] < 1e-4
  assert record["captured_variance_ratio_min"] == pytest.approx(1.0,
                                                                abs=1e-3)
  assert len(record["loadavg_before"]) == 3
  assert tuple(record["privacy"]) == accounting.PRIVACY_FIELDS
  assert record["privacy"]["epsilon"] is None
  assert record["privacy"]["epsilon_nominal"] == 1.0
  # The ε the noise was calibrated for is a setting, not a bare "epsilon".
  assert "epsilon" not in record and record["settings"]["epsilon"] == 1.0


def test_a_wrong_iteration_count_shows_in_the_utility():
  # The same run with no iterations: the Ritz pairs of a random block.
  record = bench_topk.benchmark(d=64, participants=2, k=3, rows=200,
                                epsilon=1.0, delta=1e-5, block=None,
                                iterations=0, repeats=1, seed=0)
  assert record["subspace_distance_max"] > 0.5
  assert record["captured_variance_ratio_min"] < 0.9


def test_the_command_line_refuses_an_unknown_dimension(tmp_path):
  out = tmp_path / "bench.jsonl"
  done = subprocess.run(
      [sys.executable, "-m", "launch.bench.topk", "--topk_dims=65",
       f"--topk_out={out}"], capture_output=True, text=True, check=False)
  assert done.returncode == 2
  assert "--topk_dims takes 64 or 784" in done.stderr
  assert out.read_text() == ""
