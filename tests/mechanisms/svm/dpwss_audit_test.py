"""mechanisms.svm.dpwss_audit: the paper's selection audits far above its
nominal ε (no claim); the private selection stays below its claim."""

import jax
import numpy as np
import pytest

from dpcore import audit_spec
from mechanisms.svm import dpwss_audit


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in dpwss_audit.specs()}


def test_dpwss_audit_specs(specs):
  for name, spec in specs.items():
    assert spec.relation == "replace_one"
    if "paper" in name:
      assert spec.reported_epsilon is None and spec.nominal_epsilon
    else:
      assert spec.reported_epsilon > 0 and spec.nominal_epsilon is None
  assert len(specs) == 6


def test_canaries_differ_in_one_label_only():
  for position in ("first", "last"):
    x, y_0, y_1, canary = dpwss_audit.canary_data(position)
    assert np.flatnonzero(y_0 != y_1).tolist() == [canary]
    assert x.shape == (8, 2)
  with pytest.raises(ValueError, match="position must be"):
    dpwss_audit.canary_data("middle")


def _audit(specs, name, trials):
  spec = specs[name]
  return spec, audit_spec.run(jax.random.key(0), spec, trials=trials)


def test_paper_transcript_audits_far_above_its_nominal_epsilon(specs):
  # The canary (a copy of a positive row, at index 0) is selected in every
  # run under D and never under D′: no false positive, no false negative,
  # and the bound is limited only by the trials (log(1000/3) ≈ 5.8).
  spec, result = _audit(specs, "dpwss_paper_transcript_j", 2000)
  assert result.false_positive == 0.0 and result.false_negative == 0.0
  assert result.epsilon_lower > 5.0 > spec.nominal_epsilon


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dpwss_paper_one_selection_j",
                                  "dpwss_paper_one_selection_i",
                                  "dpwss_paper_transcript_i",
                                  "dpwss_private_transcript_j",
                                  "dpwss_private_transcript_i"])
def test_dpwss_audits(specs, name):
  spec, result = _audit(specs, name, 20_000)
  if spec.reported_epsilon is None:
    assert result.epsilon_lower > 5.0  # nominal 0.05 or 1
  else:
    assert result.epsilon_lower < spec.reported_epsilon
