"""federated.feddpdr_audit: one FedDPDR-DPML participant's releases stay
below the pipeline's claim."""

import jax
import numpy as np
import pytest

from dpcore import audit_spec
from federated import feddpdr_audit


def test_spec_and_a_small_audit():
  (spec,) = feddpdr_audit.specs()
  assert spec.name == "feddpdr_participant"
  assert spec.relation == "replace_one" and spec.x64
  # The neighbours differ in the one row's label (replace-one).
  assert np.asarray(spec.data_0).tolist() == [[1]]
  assert np.asarray(spec.data_1).tolist() == [[0]]
  settings = spec.settings
  assert settings["epsilon_pca"] + settings["epsilon_fit"] == (
      pytest.approx(settings["epsilon"]))
  result = audit_spec.run(jax.random.key(11), spec, trials=5_000)
  assert result.epsilon_lower <= spec.reported_epsilon
  assert result.epsilon_lower > 0.2 * spec.reported_epsilon
