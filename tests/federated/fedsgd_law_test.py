"""federated.fedsgd: the units each trust model really uses follow Poisson(q).

Issue #33. The participant-level mode once weighted participant p by slot
p of a compacted Poisson batch (``PoissonBatch.mask``, now ``slot_mask``):
participant 0 was in a step with probability 1 − (1 − q)^P and the last
almost never, while the sampler's own law tests passed, because nothing
ran the mechanism and looked at whom it used. These tests do, for every
trust model (``dpcore.options.Trust``: ``"server"``, ``"local"``,
``"participant"``, ``"distributed"``).

Read-back: one step of :func:`federated.fedsgd.release` with σ = 0, a clip
(1000) no gradient reaches, zero weights, SGD with learning rate 1, and
the linear loss ℓ(w; x) = −w·x. Participant p's padded row r holds the
one-hot x = e_{p·n + r} (its own coordinate, padding rows included), so

* row-level models (server, local, distributed): the released weight is
  Σ_{rows used} e_row / (qN); coordinate × qN is 1 iff the row was used
  (distributed: up to its rounding to the integer grid, well below ½);
* participant-level: an included participant's clipped mean gradient is
  −Σ_{its rows} e_row / n_p, so the sum of its coordinates × qP is 1 iff
  the participant was included.

Each table of (runs, units) is checked by ``tests/law.py``: every unit's
inclusion rate, the batch-size law Binomial(units, q), pair independence,
and that 0.8q and 1.25q are rejected. Padding rows must never be used.
:func:`test_old_slot_mask_bug_is_caught` puts the bug back (fedsgd's call
of ``dpsgd.poisson_inclusion`` answered by the old compacted slot mask)
and asserts the law check rejects it, so the suite keeps its power.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpcore import dpsgd, ghost, options
from federated import fedsgd
from tests import law

Q, RUNS = 0.2, 4000
CLIP = 1000.0  # every row's (and participant's) gradient has norm ≤ 1
# Row-level: 16 real rows over 5 participants, padded to 4 rows each.
ROW_SIZES = [4, 3, 4, 2, 3]
# Participant-level: 16 participants of 1 to 3 rows.
PARTICIPANT_SIZES = [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 2]


@ghost.layered
def _indicator_loss(layers, example):
  # ℓ(w; (x, y)) = −w·x: its gradient is −x at every w.
  x, _ = example
  return -layers.dense("w", x)[0]


def _participants(sizes):
  """x (P, n, P·n) one-hot per padded row, y, and the row mask."""
  count, rows = len(sizes), max(sizes)
  x = jnp.eye(count * rows, dtype=jnp.float32).reshape(count, rows, -1)
  y = jnp.zeros((count, rows), jnp.int32)
  mask = (np.arange(rows)[None, :] < np.asarray(sizes)[:, None])
  return x, y, jnp.asarray(mask, jnp.float32)


def _plan(trust, sizes, *, q=Q):
  extra, clip = {}, CLIP
  if trust == "distributed":
    # The integer grid's step scales with C: C = 1 (= every row's norm,
    # so the clip still does not bind) keeps the rounding ≪ ½.
    extra, clip = {"model_size": len(sizes) * max(sizes)}, 1.0
  return fedsgd.make_plan(sizes, trust=trust, sampling_rate=q,
                          clip_norm=clip, noise_multiplier=0.0, steps=1,
                          delta=1e-5, **extra)


def _weights(plan, sizes, *, runs=RUNS, seed=0, chunk=None):
  """(runs, P·n) released weights, times the plan's divisor."""
  x, y, mask = _participants(sizes)
  params = {"w": {"w": jnp.zeros((x.shape[-1], 1), jnp.float32)}}

  def run(key):
    out = fedsgd.release(key, plan, _indicator_loss, params, x, y, mask,
                         optax.sgd(1.0), chunk=chunk)
    return out.params["w"]["w"][:, 0], out.overflow_steps

  keys = jax.random.split(jax.random.key(seed), runs)
  w, overflow = jax.jit(jax.vmap(run))(keys)
  assert int(overflow.sum()) == 0
  return np.asarray(w) * plan.divisor


def _rows_used(plan, *, tolerance=0.05, **kw):
  """(runs, N) 0/1: which real rows each run used (padding checked 0)."""
  used = law.counts(_weights(plan, ROW_SIZES, **kw), 1.0,
                    tolerance=tolerance)
  real = np.asarray(_participants(ROW_SIZES)[2]).reshape(-1) > 0
  assert not used[:, ~real].any(), "a padding row entered the sum"
  return used[:, real]


def _participants_used(plan, **kw):
  """(runs, P) 0/1: which participants each run included."""
  w = _weights(plan, PARTICIPANT_SIZES, **kw)
  per = w.reshape(w.shape[0], len(PARTICIPANT_SIZES), -1).sum(axis=-1)
  return law.counts(per, 1.0)


def test_every_trust_model_is_covered():
  assert set(options.Trust) == {"server", "local", "participant",
                                      "distributed"}


@pytest.mark.parametrize("trust", ["server", "local"])
def test_row_level_models_use_each_row_at_rate_q(trust):
  plan = _plan(trust, ROW_SIZES)
  assert plan.divisor == pytest.approx(Q * sum(ROW_SIZES))
  law.assert_law(_rows_used(plan), Q)


@pytest.mark.slow  # its program takes about 13 s to compile on 2 cores
def test_distributed_uses_each_row_at_rate_q():
  # The decoded sum is the row count up to the grid's rounding (< 0.01
  # here); a tolerance of ¼ still tells 0 from 1.
  plan = _plan("distributed", ROW_SIZES)
  law.assert_law(_rows_used(plan, tolerance=0.25, runs=2000), Q)


@pytest.mark.parametrize("chunk", [None, 5])
def test_participant_level_includes_each_participant_at_rate_q(chunk):
  plan = _plan("participant", PARTICIPANT_SIZES)
  assert plan.divisor == pytest.approx(Q * len(PARTICIPANT_SIZES))
  law.assert_law(_participants_used(plan, chunk=chunk), Q)


def test_participant_level_uses_all_rows_of_an_included_participant():
  # Each included participant's rows enter with weight 1/n_p each, never a
  # part of them: its coordinates × qP are all 1/n_p or all 0.
  plan = _plan("participant", PARTICIPANT_SIZES)
  w = _weights(plan, PARTICIPANT_SIZES, runs=200)
  x, _, mask = _participants(PARTICIPANT_SIZES)
  mask = np.asarray(mask)
  per = w.reshape(200, *mask.shape)
  included = per.sum(axis=-1, keepdims=True) > 0.5
  sizes = np.asarray(PARTICIPANT_SIZES, np.float64)[None, :, None]
  expected = np.where(included, mask[None] / sizes, 0.0)
  np.testing.assert_allclose(per, expected, atol=1e-5)


def _old_slot_mask(key, num_units, *, sampling_rate):
  # What fedsgd used before 94ee352: the slot mask of a compacted batch,
  # 1 in the first `size` slots, read as if slot p were participant p.
  return dpsgd.poisson_batch(key, num_units, sampling_rate=sampling_rate,
                             max_batch=num_units).slot_mask


def test_old_slot_mask_bug_is_caught(monkeypatch):
  monkeypatch.setattr(dpsgd, "poisson_inclusion", _old_slot_mask)
  plan = _plan("participant", PARTICIPANT_SIZES)
  table = _participants_used(plan)
  found = law.failures(table, Q)
  assert any("inclusion rate" in f for f in found), found
  # The bug's signature: the first participant far above q, the last below.
  rates = table.mean(axis=0)
  assert rates[0] > 0.9 and rates[-1] < 0.01, rates
