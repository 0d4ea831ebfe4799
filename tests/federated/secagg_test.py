"""federated.secagg: masks cancel, proper subsets look uniform, dropouts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from federated import secagg

P, D, BITS = 3, 4, 4
MESSAGES = jnp.array([[1, 2, 3, 4], [5, 0, 7, 15], [9, 9, 0, 1]],
                     jnp.uint32)


def _masked(setup, step=0, messages=MESSAGES, bits=BITS):
  return jax.vmap(lambda p, x: secagg.mask_message(
      setup, step, p, x, count=len(messages), bits=bits))(
          jnp.arange(len(messages)), messages)


def _pair_only(setup, p, x):
  """The pairwise layer alone (self-masks would hide its mistakes)."""
  masks = secagg.pair_masks(setup, 0, p, count=P, padded=D, bits=BITS)
  return (x + jnp.sum(masks, axis=0, dtype=jnp.uint32)) & 15


def _shared_key(setup, p, x):
  """Broken: every pair uses the same key, so a middle participant's
  +mask and −mask cancel in its own message."""
  m = jax.random.bits(setup, (D,), jnp.uint32) & 15
  n_up, n_down = P - 1 - p, p
  return (x + (n_up - n_down) * m) & 15


def _subset_pvalue(mask_fn, subset, trials=4000):
  keys = jax.random.split(jax.random.key(0), trials)
  ys = jax.vmap(lambda k: jax.vmap(lambda p, x: mask_fn(k, p, x))(
      jnp.arange(P), MESSAGES))(keys)  # (trials, P, D)
  # The joint law of the subset's first coordinates, as one cell index.
  cells = jnp.zeros((trials,), jnp.int32)
  for p in subset:
    cells = cells * 16 + ys[:, p, 0].astype(jnp.int32)
  counts = np.bincount(np.asarray(cells), minlength=16 ** len(subset))
  return stats.chisquare(counts).pvalue


@pytest.mark.parametrize("subset", [(0,), (1,), (2,), (0, 1), (0, 2),
                                    (1, 2)])
def test_every_proper_subset_is_uniform(subset):
  assert _subset_pvalue(_pair_only, subset) > 1e-3


def test_a_shared_key_leaks_a_message():
  assert _subset_pvalue(_shared_key, (1,)) < 1e-6


def test_masks_cancel_and_the_sum_is_exact():
  for seed in range(5):
    masked = _masked(jax.random.key(seed))
    alive = jnp.ones(P, bool)
    fix = secagg.unmasking(jax.random.key(seed), 0, alive, count=P,
                           padded=D, bits=BITS)
    total, ok = secagg.server_sum(masked, alive, fix, bits=BITS,
                                  threshold=P)
    assert bool(ok)
    np.testing.assert_array_equal(total, jnp.sum(MESSAGES, 0) % 16)


def test_unsigned_masks_do_not_cancel():
  def unsigned(setup, p, x):
    masks = secagg.pair_masks(setup, 0, p, count=P, padded=D, bits=BITS)
    plus = jnp.where(jnp.arange(P)[:, None] < p, (0 - masks) & 15, masks)
    return (x + jnp.sum(plus, axis=0, dtype=jnp.uint32)) & 15
  key = jax.random.key(1)
  ys = jax.vmap(lambda p, x: unsigned(key, p, x))(jnp.arange(P), MESSAGES)
  assert not np.array_equal(jnp.sum(ys, 0) % 16, jnp.sum(MESSAGES, 0) % 16)


@pytest.mark.parametrize("alive", [(1, 0, 1), (0, 1, 1), (1, 1, 0)])
def test_dropouts_are_unmasked_and_left_out(alive):
  key = jax.random.key(7)
  masked = _masked(key, step=3)
  alive = jnp.array(alive, bool)
  fix = secagg.unmasking(key, 3, alive, count=P, padded=D, bits=BITS)
  # The dropped participant's row never arrives: garbage in it is ignored.
  masked = jnp.where(alive[:, None], masked, jnp.uint32(13))
  total, ok = secagg.server_sum(masked, alive, fix, bits=BITS, threshold=2)
  assert bool(ok)
  want = jnp.sum(jnp.where(alive[:, None], MESSAGES, 0), 0) % 16
  np.testing.assert_array_equal(total, want)


def test_too_few_survivors_abort():
  key = jax.random.key(0)
  alive = jnp.array([1, 0, 0], bool)
  fix = secagg.unmasking(key, 0, alive, count=P, padded=D, bits=BITS)
  total, ok = secagg.server_sum(_masked(key), alive, fix, bits=BITS,
                                threshold=2)
  assert not bool(ok) and int(jnp.max(total)) == 0


def test_masks_are_fresh_per_step():
  a = _masked(jax.random.key(0), step=0)
  b = _masked(jax.random.key(0), step=1)
  assert not jnp.array_equal(a, b)


def test_wide_messages_sum_exactly_at_sixteen_bits():
  msgs = jax.random.bits(jax.random.key(3), (5, 64), jnp.uint32) & 0xFFFF
  masked = _masked(jax.random.key(4), messages=msgs, bits=16)
  alive = jnp.ones(5, bool)
  fix = secagg.unmasking(jax.random.key(4), 0, alive, count=5, padded=64,
                         bits=16)
  total, _ = secagg.server_sum(masked, alive, fix, bits=16, threshold=5)
  np.testing.assert_array_equal(total, jnp.sum(msgs, 0) & 0xFFFF)
