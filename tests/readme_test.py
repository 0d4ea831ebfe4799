"""The README's notebook examples run as written."""

import os
import re

from dpcore import accounting

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
  record = namespace["record"]  # DP-PCA then the SVM, one ledger
  assert tuple(record) == accounting.PRIVACY_FIELDS
  assert [e["label"] for e in record["entries"]] == [
      "dp_pca", "objective_perturbation", "objective_perturbation_noise_cap"]
  assert abs(record["epsilon_basic"] - 1.0) < 1e-9
  assert 0.5 < record["epsilon"] <= 1.0 + 1e-9
  assert not namespace["run"].model_is_private
  report = namespace["report"]
  assert report["epsilon_nominal"] == 1.0
  assert report["epsilon"] is None  # the paper's selection: no guarantee
  assert report["no_guarantee"]  # ... and the record says why
  private = namespace["private_report"]
  assert abs(private["epsilon"] - 2.0) < 1e-5
  # 600 draws = 2 per iteration × 300 iterations, one exponential entry.
  assert [(e["kind"], e["params"]["count"]) for e in private["entries"]] == [
      ("exponential", 600)]
  assert not namespace["private"].model_is_private
  # The trainer's run: the ledger holds the ε the noise was calibrated for
  # (plus the padding's truncation δ), and the model learnt the signal.
  assert namespace["ledger"].guarantee(1e-5).epsilon <= 1.0 + 1e-4
  assert namespace["plan"].steps == 200
  assert namespace["accuracy"] > 0.8
  assert "dp_pca" in capsys.readouterr().out
