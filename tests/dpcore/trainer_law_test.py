"""dpcore.trainer: the rows DP-SGD really uses follow Poisson(q).

The sampler's own law is tested in ``dpsgd_test.py``; here the trainer is
run as a mechanism and the rows it used are read back from the released
weights (issue #33: a law test at every call site, after a caller once
read a sampler's output wrongly while the sampler's tests passed).

Read-back: σ = 0, a clip (1000) far above every gradient's norm (1),
zero initial weights, SGD with learning rate 1, and the linear loss
ℓ(w; x) = −w·x on one-hot rows x_i = e_i. Step t's gradient sum is
−Σ_{i ∈ batch_t} e_i whatever w is, so after T steps
w = Σ_t Σ_{i ∈ batch_t} e_i / (qN): coordinate i times qN counts the steps
that used row i (for one step: 1 iff row i was in the batch). Each test
checks every row's inclusion rate, the batch-size law and pair
independence against q (``tests/law.py``) and that the same read-back
rejects 0.8q and 1.25q.
"""

import jax
import jax.numpy as jnp
import optax
import pytest

from dpcore import ghost, trainer
from tests import law

N, Q, RUNS = 16, 0.2, 4000
CLIP = 1000.0  # each row's gradient has norm 1: the clip never binds


@ghost.layered
def _indicator_loss(layers, x):
  # ℓ(w; x) = −w·x: row i (x = e_i) has gradient −e_i at every w.
  return -layers.dense("w", x)[0]


def _plain_indicator_loss(params, x):
  # The same loss as an ordinary function: the vmap(grad) path.
  return -x @ params["w"]["w"][:, 0]


LOSSES = {"layered": _indicator_loss, "vmap_grad": _plain_indicator_loss}


def _params():
  return {"w": {"w": jnp.zeros((N, 1), jnp.float32)}}


def _plan(sampler, *, steps=1, q=Q):
  return trainer.make_plan(N, sampling_rate=q, clip_norm=CLIP,
                           noise_multiplier=0.0, steps=steps,
                           sampler=sampler)


def _used(plan, loss, *, runs=RUNS, seed=0):
  """(runs, N) counts of the steps that used each row, read back."""
  x = jnp.eye(N, dtype=jnp.float32)

  def run(key):
    out = trainer.train(key, plan, loss, _params(), x, optax.sgd(1.0))
    return out.params["w"]["w"][:, 0], out.overflow_steps

  keys = jax.random.split(jax.random.key(seed), runs)
  w, overflow = jax.jit(jax.vmap(run))(keys)
  assert int(overflow.sum()) == 0  # B is never exceeded at these sizes
  return law.counts(w, 1.0 / plan.expected_batch_size)


@pytest.mark.parametrize("loss", sorted(LOSSES))
@pytest.mark.parametrize("sampler", ["bernoulli", "gaps"])
def test_one_step_uses_each_row_at_rate_q(sampler, loss):
  plan = _plan(sampler)
  assert plan.sampler == sampler
  law.assert_law(_used(plan, LOSSES[loss]), Q)


@pytest.mark.parametrize("sampler", ["bernoulli", "gaps"])
def test_steps_draw_independent_batches(sampler):
  # Over T steps each row's count is Binomial(T, q): a key reused across
  # steps (the same batch every step) would give counts of 0 or T.
  steps = 10
  plan = _plan(sampler, steps=steps)
  law.assert_law(_used(plan, _indicator_loss, runs=1000), Q, steps=steps)


def test_nonprivate_plan_uses_the_same_law():
  # The non-private reference (C = ∞, the gradient of the masked sum)
  # draws its batches through the same sampler.
  plan = trainer.nonprivate_plan(N, sampling_rate=Q, steps=1,
                                 sampler="bernoulli")
  law.assert_law(_used(plan, _plain_indicator_loss), Q)


@pytest.mark.parametrize("sampler", ["bernoulli", "gaps"])
def test_clipped_batch_sum_uses_each_row_at_rate_q(sampler):
  # The public piece federated trainers call: step t's batch (here t = 3)
  # and its clipped sum, −Σ_{i ∈ batch} e_i.
  plan = _plan(sampler, steps=5)
  x = jnp.eye(N, dtype=jnp.float32)

  def total(key):
    out, over = trainer.clipped_batch_sum(key, plan, 3, _indicator_loss,
                                          _params(), x)
    return out["w"]["w"][:, 0], over

  keys = jax.random.split(jax.random.key(1), RUNS)
  sums, over = jax.jit(jax.vmap(total))(keys)
  assert not bool(over.any())
  law.assert_law(law.counts(sums, -1.0), Q)
