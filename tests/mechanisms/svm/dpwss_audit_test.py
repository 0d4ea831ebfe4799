"""mechanisms.svm.dpwss_audit: the paper's selection audits far above its
nominal ε (no claim); the private selection stays below its claim with
each canary first, in the middle and last, and with its support masked
it is caught."""

import dataclasses

import jax
import numpy as np
import pytest

from dpcore import audit_spec
from mechanisms.svm import dpwss_audit
from mechanisms.svm.dpwss_audit import transcript_mechanism

BROKEN = {"dpwss_private_transcript_i_support_masked": 200_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in dpwss_audit.specs()}


def test_dpwss_audit_specs(specs):
  for name, spec in specs.items():
    assert spec.relation == "replace_one"
    assert spec.broken == (name in BROKEN)
    if "paper" in name:
      assert spec.reported_epsilon is None and spec.nominal_epsilon
    else:
      assert spec.reported_epsilon > 0 and spec.nominal_epsilon is None
  assert list(specs) == [
      "dpwss_paper_one_selection_j", "dpwss_paper_one_selection_i",
      "dpwss_paper_transcript_j", "dpwss_paper_transcript_i",
      *(f"dpwss_private_transcript_{probe}@{position}"
        for probe in "ji" for position in audit_spec.POSITIONS), *BROKEN]
  # The paper's canaries: j's first, i's last; the private selection's at
  # every position.
  assert [specs[f"dpwss_paper_transcript_{p}"].settings["canary"]
          for p in "ji"] == [0, 7]
  assert [specs[f"dpwss_private_transcript_i@{p}"].settings["canary"]
          for p in audit_spec.POSITIONS] == [0, 4, 7]


def test_broken_variant_reports_the_unbroken_claim(specs):
  spec = specs["dpwss_private_transcript_i_support_masked"]
  unbroken = specs["dpwss_private_transcript_i@last"]
  assert spec.broken and spec.position is None
  assert spec.reported_epsilon == unbroken.reported_epsilon
  # The same run, canary and statistic; only the rule differs.
  assert {**spec.settings, "variant": "library"} == unbroken.settings
  assert spec.settings["variant"] == "support_masked"
  with pytest.raises(ValueError, match="broken must be None or one of"):
    dpwss_audit.transcript_mechanism(selection="private", epsilon=1.0,
                                     sigma=0.5, max_iter=1,
                                     broken="noise_dropped")
  with pytest.raises(ValueError, match="no claim to break"):
    dpwss_audit.transcript_mechanism(selection="paper", epsilon=1.0,
                                     sigma=0.5, max_iter=1,
                                     broken="support_masked")


@pytest.mark.parametrize("probe", ["i", "j"])
@pytest.mark.parametrize("position,row", [("first", 0), ("middle", 4),
                                          ("last", 7)])
def test_canaries_differ_in_one_label_only(probe, position, row):
  x, y_0, y_1, canary = dpwss_audit.canary_data(probe, position)
  assert canary == row and x.shape == (8, 2)
  assert np.flatnonzero(y_0 != y_1).tolist() == [canary]
  # The other rows stay in their order around the canary.
  rest = np.delete(x, canary, axis=0)
  np.testing.assert_array_equal(rest, np.delete(
      dpwss_audit.canary_data(probe, "first")[0], 0, axis=0))


def test_canary_data_refuses_an_unknown_probe_or_position():
  with pytest.raises(ValueError, match="probe must be"):
    dpwss_audit.canary_data("k", "first")
  with pytest.raises(ValueError, match="position must be"):
    dpwss_audit.canary_data("i", "end")


def _audit(specs, name, trials):
  spec = specs[name]
  return spec, audit_spec.run(jax.random.key(0), spec, trials=trials)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  # Under D′ the canary is masked out of the first i (no false positive);
  # the bound is limited by the trials, log(¼·100,000/3.7) ≈ 8.8.
  spec = specs[name]
  result = audit_spec.run(jax.random.key(12), spec, trials=BROKEN[name])
  assert result.false_positive == 0.0
  assert result.epsilon_lower > spec.reported_epsilon


def test_paper_transcript_audits_far_above_its_nominal_epsilon(specs):
  # The canary (a copy of a positive row, at index 0) is selected in every
  # run under D and never under D′: no false positive, no false negative,
  # and the bound is limited only by the trials (log(1000/3) ≈ 5.8).
  spec, result = _audit(specs, "dpwss_paper_transcript_j", 2000)
  assert result.false_positive == 0.0 and result.false_negative == 0.0
  assert result.epsilon_lower > 5.0 > spec.nominal_epsilon


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "dpwss_paper_one_selection_j", "dpwss_paper_one_selection_i",
    "dpwss_paper_transcript_i",
    *(f"dpwss_private_transcript_{probe}@{position}"
      for probe in "ji" for position in audit_spec.POSITIONS)])
def test_dpwss_audits(specs, name):
  spec, result = _audit(specs, name, 20_000)
  if spec.reported_epsilon is None:
    assert result.epsilon_lower > 5.0  # nominal 0.05 or 1
  else:
    assert result.epsilon_lower < spec.reported_epsilon
  if spec.reported_epsilon is not None and "_i@" in name:
    # The first i is one draw, ε-DP at the per-selection ε alone: the
    # audit sees it (0.30-0.40 at 20,000 trials) and stays below it.
    assert 0.2 < result.epsilon_lower < spec.settings["epsilon_per_selection"]


@pytest.mark.slow
def test_a_draw_at_three_times_its_epsilon_is_caught_by_the_one_draw_bound(
    specs):
  # The private transcript with every draw at 3ε, claimed at ε: the first
  # i's audit rises above the per-selection ε (the whole run's claim,
  # 8.08, is too loose to show it).
  spec = specs["dpwss_private_transcript_i@first"]
  three = dataclasses.replace(spec, mechanism=transcript_mechanism(
      selection="private", epsilon=3.0, sigma=0.5, max_iter=5))
  result = audit_spec.run(jax.random.key(0), three, trials=20_000)
  assert result.epsilon_lower > spec.settings["epsilon_per_selection"]
