"""federated.feddpdr_audit: one FedDPDR-DPML participant's releases stay
below the pipeline's claim; its fit on an unclipped row is caught."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import audit_spec
from federated import feddpdr, feddpdr_audit
from tests import audit_checks

BROKEN = {"feddpdr_participant_clip_skipped": 2_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in feddpdr_audit.specs()}


def test_spec_and_a_small_audit(specs):
  assert list(specs) == ["feddpdr_participant", *BROKEN]
  spec = specs["feddpdr_participant"]
  assert spec.relation == "replace_one" and spec.x64 and not spec.broken
  # The neighbours differ in the one row's label (replace-one).
  assert np.asarray(spec.data_0).tolist() == [[1]]
  assert np.asarray(spec.data_1).tolist() == [[0]]
  settings = spec.settings
  assert settings["epsilon_pca"] + settings["epsilon_fit"] == (
      pytest.approx(settings["epsilon"]))
  result = audit_spec.run(jax.random.key(11), spec, trials=5_000)
  assert result.epsilon_lower <= spec.reported_epsilon
  assert result.epsilon_lower > 0.2 * spec.reported_epsilon


def test_broken_variant_reports_the_unbroken_claim(specs):
  spec = specs["feddpdr_participant_clip_skipped"]
  unbroken = specs["feddpdr_participant"]
  assert spec.broken and spec.position is None and spec.x64
  assert spec.reported_epsilon == unbroken.reported_epsilon
  assert spec.nominal_epsilon == unbroken.nominal_epsilon
  assert {**spec.settings, "row_norm": 1.0, "variant": "library"} == (
      unbroken.settings)
  assert spec.settings["row_norm"] == 10.0
  with pytest.raises(ValueError, match="broken must be None or one of"):
    feddpdr_audit.feddpdr_spec(broken="noise_dropped")


def test_unclipped_participant_is_train_on_rows_of_norm_at_most_one():
  # On a normalised row (every clip a no-op) the broken participant is
  # train's: the same keys, basis and fit.
  config = feddpdr.Config(mechanism="dpdr_dpml", epsilon=2.0, delta=1e-4,
                          k=2, lam=1.0)
  plan = feddpdr.make_plan([2], dim=2, num_classes=2, config=config)
  x = jnp.asarray([[[0.6, 0.8], [0.0, -1.0]]], jnp.float32)
  labels = jnp.asarray([[1, 0]], jnp.int32)
  mask = jnp.ones((1, 2), jnp.float32)
  key = jax.random.key(5)
  with jax.enable_x64(True):
    traced = feddpdr.Traced(
        jnp.asarray(plan.sigma, jnp.float32),
        *(jnp.asarray(a, jnp.float64)
          for a in (plan.sizes, plan.p, plan.theta)))
    out = feddpdr.train(key[None], feddpdr.Rows(x, labels, mask), traced,
                        config=config, num_classes=2)
    basis, beta = jax.jit(lambda k: feddpdr_audit.unclipped_participant(
        k, x, labels, mask, traced, config=config))(key)
  np.testing.assert_allclose(basis, out.bases[0, 0], atol=1e-6)
  np.testing.assert_allclose(beta, out.betas[0, 0, 0], atol=1e-6)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  audit_checks.assert_caught(specs[name], BROKEN[name])
