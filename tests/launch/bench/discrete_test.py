"""launch.bench.discrete: every case draws what it names, and a refusal."""

import subprocess
import sys
from fractions import Fraction

import jax
import numpy as np
import pytest

from dpcore import discrete
from launch.bench import discrete as bench_discrete
from tests.launch.cli import REPO


@pytest.mark.slow
def test_each_case_draws_the_sampler_it_names():
  key = jax.random.key(3)
  named = {c.name: c for c in bench_discrete.cases(40)}
  assert len(named) == 11

  def draw(name):
    case = named[name]
    return jax.jit(case.draw)(key, *case.args)

  np.testing.assert_array_equal(
      draw("discrete_gaussian σ = 26"),
      discrete.discrete_gaussian(key, (40,), sigma=26))
  assert draw("bernoulli_exp n/d = 3/2").dtype == np.bool_
  # A traced sampler draws its rational σ's values, alone and per key.
  rational = discrete.discrete_gaussian(key, (40,), sigma=1049)
  np.testing.assert_array_equal(
      draw("discrete_gaussian σ = 1049, traced sampler"), rational)
  batched = draw("discrete_gaussian σ = 4913/16, traced sampler, 4 keys "
                 "vmapped")
  assert batched.shape == (4, 10)
  np.testing.assert_array_equal(batched[2], discrete.discrete_gaussian(
      jax.random.split(key, 4)[2], (10,), sigma=Fraction(4913, 16)))


def test_draws_per_second_times_every_case(monkeypatch):
  # Two cheap cases stand in for the seven (each compiles a while loop).
  cheap = bench_discrete.cases(20)[:2]
  monkeypatch.setattr(bench_discrete, "cases", lambda num: cheap)
  rows = bench_discrete.draws_per_second(jax.random.key(0), num=20)
  assert [r["case"] for r in rows] == [c.name for c in cheap]
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
