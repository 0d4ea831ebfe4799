"""launch.bench.discrete: every case draws what it names, and a refusal."""

import subprocess
import sys

import jax
import numpy as np
import pytest

from dpcore import discrete
from launch.bench import discrete as bench_discrete
from tests.launch.cli import REPO


@pytest.mark.slow
def test_each_case_draws_the_sampler_it_names():
  key = jax.random.key(3)
  named = dict(bench_discrete.cases(40))
  assert len(named) == 7
  np.testing.assert_array_equal(
      named["discrete_gaussian σ = 26"](key),
      discrete.discrete_gaussian(key, (40,), sigma=26))
  assert named["bernoulli_exp n/d = 3/2"](key).dtype == np.bool_


def test_draws_per_second_times_every_case(monkeypatch):
  # Two cheap cases stand in for the seven (each compiles a while loop).
  cheap = bench_discrete.cases(20)[:2]
  monkeypatch.setattr(bench_discrete, "cases", lambda num: cheap)
  rows = bench_discrete.draws_per_second(jax.random.key(0), num=20)
  assert [r["case"] for r in rows] == [c for c, _ in cheap]
  for row in rows:
    assert row["draws"] == 20 and row["seconds"] > 0
    assert row["draws_per_second"] == pytest.approx(20 / row["seconds"])
  with pytest.raises(ValueError, match="num"):
    bench_discrete.draws_per_second(jax.random.key(0), num=0)


def test_the_command_line_refuses_no_draws(tmp_path):
  out = tmp_path / "bench.jsonl"
  done = subprocess.run(
      [sys.executable, "-m", "launch.bench.discrete", "--discrete_draws=0",
       f"--discrete_out={out}"], capture_output=True, text=True,
      check=False, cwd=REPO)
  assert done.returncode == 2
  assert done.stderr.strip().splitlines() == [
      "error: --discrete_draws must be ≥ 1, got 0."]
  assert not out.exists()
