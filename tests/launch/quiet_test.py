"""Scripts print nothing a user did not ask for: no accelerator probe line.

JAX logs, at INFO, each accelerator plugin it looked for and did not find
("Unable to initialize backend 'tpu' … libtpu.so"); absl's INFO verbosity
would print it on every CPU run. ``common.run_cli`` turns that logger down,
so every script that uses JAX must start through it.
"""

import glob
import os
import subprocess
import sys

import pytest

from tests.launch.cli import REPO

# Scripts outside the project's environment, or without JAX.
_EXEMPT = {"bench/peers.py", "plot_feddpdr.py"}


def test_every_jax_script_starts_through_run_cli():
  launch = os.path.join(REPO, "launch")
  scripts = sorted(glob.glob(os.path.join(launch, "*.py"))
                   + glob.glob(os.path.join(launch, "bench", "*.py")))
  checked = 0
  for path in scripts:
    text = open(path, encoding="utf-8").read()
    name = os.path.relpath(path, launch).replace(os.sep, "/")
    if "__main__" not in text or name in _EXEMPT:
      continue
    checked += 1
    assert "common.run_cli(main)" in text, path
    assert "app.run(" not in text, path
  assert checked >= 10


@pytest.mark.slow
def test_a_benchmark_prints_no_probe_line(tmp_path):
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  done = subprocess.run(
      [sys.executable, "-m", "launch.bench.lvq", "--repeats=1",
       "--slow_repeats=1", "--batch=4", "--dim=8",
       f"--out={tmp_path / 'b.jsonl'}"],
      capture_output=True, text=True, check=False, cwd=REPO, env=env)
  assert done.returncode == 0, done.stderr
  assert "libtpu" not in done.stderr and "Unable to initialize" not in (
      done.stderr)
  assert (tmp_path / "b.jsonl").read_text().count("\n") == 10
