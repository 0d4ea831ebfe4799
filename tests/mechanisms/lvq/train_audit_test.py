"""mechanisms.lvq.train_audit: DP-G(M)LVQ's steps keep their claim in a
small audit with each clipped sum, at every canary position; a clipped
sum that does not clip is caught."""

import jax.numpy as jnp
import numpy as np
import pytest

from dpcore.audit_spec import POSITIONS
from mechanisms.lvq import clip as lvq_clip
from mechanisms.lvq import train_audit
from tests import audit_checks

UNBROKEN = [f"{base}@{p}" for base in train_audit.MODES for p in POSITIONS]
BROKEN = [f"{base}_clip_skipped" for base in train_audit.MODES]
# One position and one twin in the default suite; the rest with -m slow.
DEFAULT = {"dplvq_gmlvq@middle", "dplvq_glvq_vmap_clip_skipped"}


def _marked(names):
  return [n if n in DEFAULT else pytest.param(n, marks=pytest.mark.slow)
          for n in names]


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in train_audit.specs()}


def test_names_positions_and_claims(specs):
  assert list(specs) == [*UNBROKEN, *BROKEN]
  claim = specs["dplvq_glvq@first"].reported_epsilon
  for name, spec in specs.items():
    assert spec.reported_epsilon == claim
    assert spec.broken == (name in BROKEN)
    assert spec.position == (None if spec.broken else name.split("@")[1])
  with pytest.raises(ValueError, match="broken must be"):
    train_audit.train_spec("dplvq_glvq", broken="mask_dropped")


@pytest.mark.parametrize("model", ["glvq", "gmlvq"])
def test_the_canary_is_clipped_and_a_far_row_stands_in_for_no_row(model):
  # The set-up the statistic relies on (module docstring).
  params = train_audit.public_params(model)
  _, x_1, y = train_audit.neighbours("first")
  clip = train_audit.SETTINGS["clip_norm"]
  grads = lvq_clip.per_example_gradients(params, jnp.asarray(x_1),
                                         jnp.asarray(y), jnp.asarray([0, 1]))
  norms = np.sqrt(sum(np.sum(np.asarray(g).reshape(len(y), -1) ** 2, axis=1)
                      for g in grads.values()))
  assert norms[0] > 2.5 * clip            # the canary: always clipped
  assert np.all(norms[1:] < 1e-4 * clip)  # a far row: next to nothing
  # The canary pulls its prototype along +e₁ and pushes the other along −e₁.
  step = -np.asarray(grads["prototypes"][0])
  assert step[0, 0] > 0.09 and step[1, 0] < -0.09


@pytest.mark.parametrize("name", _marked(UNBROKEN))
def test_small_audit_stays_below_the_claim(specs, name):
  audit_checks.assert_below_claim(specs[name], 20_000)


@pytest.mark.parametrize("name", _marked(BROKEN))
def test_broken_variant_is_caught(specs, name):
  audit_checks.assert_caught(specs[name], 5_000)
