"""launch.audit's --memory_budget: batches that fit, refusals before work.

Trials whose statistics alone exceed the budget are refused before any
spec runs; a chunk whose compiled program does not fit is drawn in
smaller vmapped batches of the same keys, which the record says.
"""

import pytest

from dpcore import audit_spec, auditing, memory, noise_audit
from launch import audit_run
from tests.launch import cli


def test_the_flags_values():
  assert audit_run.memory_budget("8G") == 8 * 2**30
  auto, available = audit_run.memory_budget("auto"), memory.available_bytes()
  if available is None:
    assert auto is None
  else:  # 3/4 of what is available (which moves a little meanwhile)
    assert isinstance(auto, int) and 0.5 * available < auto < available
  with pytest.raises(ValueError, match="--memory_budget='lots' is not a "
                     "size"):
    audit_run.memory_budget("lots")


def test_too_many_trials_are_refused_before_any_spec_runs(monkeypatch,
                                                          tmp_path):
  def forbid(*args, **kwargs):
    raise AssertionError("a spec ran")

  monkeypatch.setattr(audit_run, "specs", lambda until=None: [
      noise_audit.laplace_spec(), noise_audit.gaussian_spec()])
  monkeypatch.setattr(audit_spec, "run", forbid)
  out = tmp_path / "audit.jsonl"
  with pytest.raises(memory.MemoryBudgetError) as err:
    audit_run.run_audits(trials=10**7, memory_budget=2**29, out=str(out),
                         table="")
  assert str(err.value) == (
      "spec laplace: 10,000,000 trials per side need an estimated 610.4 MiB "
      "for their statistics alone, above the memory budget of 512.0 MiB; "
      "lower --trials or raise --memory_budget.")
  assert not out.exists()
  # Within the budget, nothing is refused.
  audit_run.check_host_memory(audit_run.specs(), trials=10**6,
                              memory_budget=2**29)  # the patched two


def test_a_tight_budget_draws_the_same_trials_in_batches():
  spec = noise_audit.gaussian_spec()
  kwargs = dict(seed=0, trials=20_000, chunk=10_000)
  roomy = audit_run.run_one(spec, memory_budget=2**40, **kwargs)
  assert roomy["batch"] is None and roomy["chunk"] == 10_000
  host = auditing.HOST_BYTES_PER_TRIAL * 20_000
  budget = host + (roomy["memory_estimate"] - host) // 3
  tight = audit_run.run_one(spec, memory_budget=budget, **kwargs)
  assert 1 <= tight["batch"] < 10_000
  assert tight["memory_estimate"] <= budget == tight["memory_budget"]
  for field in ("epsilon_lower", "threshold", "false_positive",
                "false_negative", "verdict"):
    assert tight[field] == roomy[field], field


_BODY = r'''
from launch import audit as script
from launch import audit_run
from dpcore import noise_audit
audit_run.specs = lambda until=None: [noise_audit.gaussian_spec()]  # no others
audit_run.run_one = forbid("audit_run.run_one")
for group, items in cases.items():
  for name, argv in items.items():
    results[name] = call("audit", script.main, argv)
'''

CASES = {
    "trials": (["--only=gaussian", "--trials=10000000000"],
               "spec gaussian: 10,000,000,000 trials per side need an "
               "estimated 596.05 GiB for their statistics alone"),
    "budget_text": (["--memory_budget=lots"],
                    "--memory_budget='lots' is not a size"),
    "budget_small": (["--only=gaussian", "--memory_budget=1M"],
                     "above the memory budget of 1.0 MiB; lower --trials "
                     "or raise --memory_budget"),
}


def test_the_script_refuses_in_one_line_before_any_work(tmp_path):
  out = ["--out=" + str(tmp_path / "a.jsonl"), "--table="]
  found = cli.drive(_BODY, {"all": {k: argv + out
                                    for k, (argv, _) in CASES.items()}})
  for name, (_, words) in CASES.items():
    cli.assert_one_line_error(found[name], words)
  assert not (tmp_path / "a.jsonl").exists()
