"""Shared harness of the launch scripts' bad-input suites (``*_cli_test``).

A launch script defines its absl flags at import, so it cannot share the
pytest process with another script. Each suite therefore runs one
subprocess that imports its script once, replaces the heavy work (the data
loader, the solvers) with stand-ins that raise if called, and runs ``main``
through ``common.run_cli`` for every case. The subprocess's program is
:data:`DRIVER_HEAD` (``forbid`` and ``call``) followed by the suite's own
lines, which set the stand-ins per group of cases and fill ``results``;
:func:`drive` runs it and returns ``{case name: result}``, each result
``{"code", "stderr", "stdout"}``.
"""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

HEAVY_WORK = "HEAVY WORK"
"""What a forbidden call's error says; no bad-input case may show it."""

DRIVER_HEAD = r'''
import contextlib, io, json, sys
from absl import flags
from launch import common

def forbid(what):
  def fail(*args, **kwargs):
    raise RuntimeError(f"HEAVY WORK: {what} was called")
  return fail

def call(prog, main, argv):
  flags.FLAGS.unparse_flags()
  err, out = io.StringIO(), io.StringIO()
  code = 0
  with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
    try:
      sys.argv = [prog] + argv
      common.run_cli(main)
    except SystemExit as e:
      code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except Exception as e:  # a traceback on the console in real life
      code, err = -1, io.StringIO(f"{type(e).__name__}: {e}")
  return {"code": code, "stderr": err.getvalue(), "stdout": out.getvalue()}

cases = json.loads(sys.argv[1])
results = {}
'''

_DRIVER_TAIL = '\nprint("RESULTS" + json.dumps(results))\n'


def drive(body: str, cases: dict) -> dict:
  """Runs ``DRIVER_HEAD + body`` on ``cases`` ({group: {name: argv}})."""
  proc = subprocess.run(
      [sys.executable, "-c", DRIVER_HEAD + body + _DRIVER_TAIL,
       json.dumps(cases)], cwd=REPO, capture_output=True, text=True,
      timeout=1800, check=False, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS")]
  assert lines, proc.stderr[-3000:]
  return json.loads(lines[-1][len("RESULTS"):])


def assert_one_line_error(result: dict, words: str) -> None:
  """Exit 2, one ``error: …`` line holding ``words``, no work, no trace."""
  assert result["code"] == 2, result
  lines = result["stderr"].strip().splitlines()
  errors = [ln for ln in lines if ln.startswith("error: ")]
  assert len(errors) == 1, result["stderr"]
  assert "Traceback" not in result["stderr"]
  assert HEAVY_WORK not in result["stderr"]
  assert words in errors[0], errors[0]


def run_module(module: str, *args: str) -> subprocess.CompletedProcess:
  """``python -m module args…`` from the repository root."""
  return subprocess.run(
      [sys.executable, "-m", module, *args], cwd=REPO, capture_output=True,
      text=True, timeout=600, check=False)


def assert_resumed(first: dict, again: dict, path: str) -> dict:
  """A run over ``path`` whose cut-off last line was set aside, run again.

  ``first`` must have appended its one record (printed last on stdout) and
  moved the fragment to ``path.partial``; ``again`` must have skipped the
  finished run. Returns the record.
  """
  assert first["code"] == 0, first["stderr"][-2000:]
  with open(path, encoding="utf-8") as f:
    lines = f.read().splitlines()
  assert len(lines) == 1  # the fragment went to PATH.partial
  record = json.loads(lines[0])
  assert json.loads(first["stdout"].strip().splitlines()[-1]) == record
  with open(path + ".partial", encoding="utf-8") as f:
    assert "cut-off wri" in f.read()
  assert again["code"] == 0, again["stderr"][-2000:]
  assert "skipping 1 finished run" in again["stderr"]
  with open(path, encoding="utf-8") as f:
    assert len(f.read().splitlines()) == 1
  return record
