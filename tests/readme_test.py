"""The README's notebook examples run as written."""

import os
import re

README = os.path.join(os.path.dirname(os.path.dirname(__file__)),
                      "README.md")


def _notebook_blocks():
  text = open(README, encoding="utf-8").read()
  section = text.split("\n## In a notebook\n", 1)[1].split("\n## ", 1)[0]
  return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def test_notebook_section_runs_in_order(capsys):
  blocks = _notebook_blocks()
  assert len(blocks) == 3
  namespace = {"__name__": "readme"}
  for block in blocks:
    exec(compile(block, README, "exec"), namespace)  # noqa: S102
  # What the prose around the blocks says about their results.
  assert namespace["fit"].converged
  assert not namespace["run"].model_is_private
  report = namespace["report"]
  assert report["epsilon_nominal"] == 1.0
  assert report["epsilon"] is None  # the paper's selection: no guarantee
  private = namespace["private_report"]
  assert abs(private["epsilon"] - 2.0) < 1e-5
  assert private["selections"] == 600
  assert not namespace["private"].model_is_private
  assert namespace["ledger"].guarantee(1e-5).epsilon <= 1.0 + 1e-4
  assert "dp_pca" in capsys.readouterr().out
