"""docs/private_model.ipynb runs, and the outputs stored in it are current.

The notebook is read with ``json`` and every code cell is executed in
order in one namespace, its stdout captured (no Jupyter needed). The
stored outputs are then checked against the fresh ones, line by line: a
line that states an accuracy may differ by :data:`ACCURACY_TOLERANCE` in
each number; every other line (the ε that holds, σ, T, shapes) is
deterministic and must match exactly.

To refresh the stored outputs after a change to the notebook or the
library (and then read them before committing)::

  JAX_PLATFORMS=cpu python -m tests.notebook_test --write
"""

import contextlib
import io
import json
import os
import re
import sys

import pytest

NOTEBOOK = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "docs", "private_model.ipynb")
ACCURACY_TOLERANCE = 0.03
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def load(path: str = NOTEBOOK) -> dict:
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def execute(notebook: dict) -> list[str]:
  """Runs every code cell in order in one namespace; returns each code
  cell's captured stdout (an exception propagates, naming the cell)."""
  namespace = {"__name__": "__notebook__"}
  outputs = []
  for i, cell in enumerate(notebook["cells"]):
    if cell["cell_type"] != "code":
      continue
    source = "".join(cell["source"])
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
      try:
        exec(compile(source, f"<cell {i}>", "exec"), namespace)  # noqa: S102
      except Exception as err:
        raise AssertionError(f"code cell {i} raised "
                             f"{type(err).__name__}: {err}") from err
    outputs.append(buffer.getvalue())
  return outputs


def stored_outputs(notebook: dict) -> list[str]:
  """The stdout stored in each code cell (stream outputs, joined)."""
  out = []
  for cell in notebook["cells"]:
    if cell["cell_type"] != "code":
      continue
    out.append("".join(
        "".join(o["text"]) for o in cell.get("outputs", [])
        if o.get("output_type") == "stream" and o.get("name") == "stdout"))
  return out


def stale_lines(stored: list[str], fresh: list[str],
                tolerance: float = ACCURACY_TOLERANCE) -> list[str]:
  """What differs in a way that matters; empty when the outputs are current.

  Lines that mention an accuracy compare their numbers within
  ``tolerance``; every other line must be equal.
  """
  problems = []
  if len(stored) != len(fresh):
    return [f"{len(stored)} stored code outputs, {len(fresh)} now"]
  for cell, (old, new) in enumerate(zip(stored, fresh, strict=True)):
    old_lines, new_lines = old.splitlines(), new.splitlines()
    if len(old_lines) != len(new_lines):
      problems.append(f"code cell {cell}: {len(old_lines)} stored lines, "
                      f"{len(new_lines)} now")
      continue
    for a, b in zip(old_lines, new_lines, strict=True):
      if "accuracy" in a:
        xa, xb = _NUMBER.findall(a), _NUMBER.findall(b)
        same_text = _NUMBER.sub("#", a) == _NUMBER.sub("#", b)
        close = len(xa) == len(xb) and all(
            abs(float(u) - float(v)) <= tolerance
            for u, v in zip(xa, xb, strict=True))
        if not (same_text and close):
          problems.append(f"code cell {cell}: stored {a!r}, now {b!r}")
      elif a != b:
        problems.append(f"code cell {cell}: stored {a!r}, now {b!r}")
  return problems


def write(path: str = NOTEBOOK) -> None:
  """Executes the notebook and stores the fresh outputs in it."""
  notebook = load(path)
  fresh = iter(execute(notebook))
  count = 0
  for cell in notebook["cells"]:
    if cell["cell_type"] != "code":
      continue
    count += 1
    text = next(fresh)
    cell["execution_count"] = count
    cell["outputs"] = ([{"output_type": "stream", "name": "stdout",
                         "text": text.splitlines(keepends=True)}]
                       if text else [])
  with open(path, "w", encoding="utf-8") as f:
    json.dump(notebook, f, indent=1, ensure_ascii=False)
    f.write("\n")


@pytest.fixture(scope="module")
def notebook():
  return load()


def test_is_an_executed_nbformat_4_notebook(notebook):
  assert notebook["nbformat"] == 4
  code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
  assert len(code) >= 6
  assert all(c["execution_count"] for c in code)
  assert any("epsilon that holds" in s for s in stored_outputs(notebook))


@pytest.mark.slow
def test_runs_and_stored_outputs_are_current(notebook):
  fresh = execute(notebook)
  assert stale_lines(stored_outputs(notebook), fresh) == []


def test_walks_the_steps_a_user_needs(notebook):
  source = "".join("".join(c["source"]) for c in notebook["cells"])
  for needed in ("clipping.unit_rows", "calibrate_dpsgd_noise",
                 "trainer.make_plan", "ghost.layered", "trainer.train",
                 "plan.record(ledger", "ledger.report", "fedsgd.release"):
    assert needed in source, needed


def test_a_changed_epsilon_or_accuracy_is_caught():
  stored = ["sigma = 1.2345\nepsilon that holds: 1.876543 (target 2.0)\n",
            "private model, test accuracy: 0.900\n"]
  assert stale_lines(stored, list(stored)) == []
  # Within the tolerance: current.
  assert stale_lines(stored, [stored[0],
                              "private model, test accuracy: 0.910\n"]) == []
  # The ε moved in its last digit: stale.
  eps = stale_lines(stored, [stored[0].replace("1.876543", "1.876544"),
                             stored[1]])
  assert len(eps) == 1 and "1.876544" in eps[0]
  # The accuracy moved by more than the tolerance: stale.
  acc = stale_lines(stored, [stored[0],
                             "private model, test accuracy: 0.850\n"])
  assert len(acc) == 1
  # A line gone, or a cell gone: stale.
  assert stale_lines(stored, ["sigma = 1.2345\n", stored[1]])
  assert stale_lines(stored, stored[:1])


def test_a_cell_that_raises_fails_the_run():
  broken = {"cells": [
      {"cell_type": "code", "source": ["print('fine')\n"]},
      {"cell_type": "code", "source": ["1 / 0\n"]}]}
  with pytest.raises(AssertionError, match="code cell 1 raised"):
    execute(broken)


if __name__ == "__main__":
  if sys.argv[1:] != ["--write"]:
    sys.exit("usage: python -m tests.notebook_test --write")
  write()
  print(f"wrote the outputs of {NOTEBOOK}")
