"""dpcore.trainer_audit: the trainer's claim survives a small audit at
every canary position; a clipped sum that does not clip is caught."""

import jax
import jax.numpy as jnp
import pytest

from dpcore import ghost, trainer, trainer_audit
from dpcore.audit_spec import POSITIONS
from tests import audit_checks, law

SMALL = {f"trainer_ghost@{p}": 20_000 for p in POSITIONS}
BROKEN = {"trainer_clip_skipped": 5_000}


@pytest.fixture(scope="module")
def specs():
  return {s.name: s for s in trainer_audit.specs()}


def test_names_positions_and_claims(specs):
  assert list(specs) == [*SMALL, *BROKEN]
  for p in POSITIONS:
    assert specs[f"trainer_ghost@{p}"].position == p
  broken = specs["trainer_clip_skipped"]
  assert broken.broken and broken.position is None
  assert broken.reported_epsilon == (
      specs["trainer_ghost@first"].reported_epsilon)
  with pytest.raises(ValueError, match="broken must be"):
    trainer_audit.trainer_spec(broken="mask_dropped")


def test_canary_loss_gradient_is_minus_the_row():
  # The set-up every trainer-based audit relies on: a row's gradient is
  # −x whatever w, so a zero row adds nothing and the canary is clipped.
  loss = ghost.layered(trainer_audit.canary_loss)
  x = jnp.asarray([[3.0, -4.0], [0.0, 0.0]], jnp.float32)
  for w in (jnp.zeros((2, 1)), jnp.ones((2, 1))):
    params = {"w": {"w": w}}
    total = loss.clipped_sum(params, x, jnp.ones((2,)), 1.0)
    got = jax.tree.leaves(total)[0][:, 0]
    assert jnp.allclose(got, -x[0] / 5.0, atol=1e-6)  # clipped to norm 1


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_audit_stays_below_the_claim(specs, name):
  audit_checks.assert_below_claim(specs[name], SMALL[name])


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_is_caught(specs, name):
  audit_checks.assert_caught(specs[name], BROKEN[name])


def test_release_uses_each_row_at_rate_q():
  # Law test (tests/law.py) of the audited run, read back at σ = 0 on
  # one-hot rows (norm C: the clip never binds): w·qN/lr counts the steps
  # that used each row.
  cfg = trainer_audit.SETTINGS
  n, q, steps = cfg["examples"], cfg["sampling_rate"], cfg["steps"]
  plan = trainer.make_plan(n, sampling_rate=q, steps=steps,
                           clip_norm=cfg["clip_norm"], noise_multiplier=0.0,
                           sampler="gaps")
  x = jnp.eye(n, dtype=jnp.float32)
  keys = jax.random.split(jax.random.key(4), 4000)
  w = jax.jit(jax.vmap(lambda k: trainer_audit.release(
      k, plan, x, learning_rate=2.0)))(keys)
  used = law.counts(w * q * n / 2.0, 1.0)
  law.assert_law(used, q, steps=steps)
  with pytest.raises(AssertionError):  # the read-back tells q from 0.8q
    law.assert_law(used, 0.8 * q, steps=steps)
