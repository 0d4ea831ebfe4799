"""mechanisms.svm.wss: the working-set rules' small parts, on tiny inputs.

The rules' laws (selection frequencies, the private scores' range) are
tested in ``dpwss_test.py`` and against LIBSVM in ``smo_test.py``; here
the pieces each rule is built of, with hand-computed answers.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import options
from mechanisms.svm import wss


@pytest.mark.parametrize("values,index,top", [
    ([1.0, 3.0, 2.0, 3.0], 3, 3.0),  # ties go to the last index (LIBSVM)
    ([5.0, 1.0], 0, 5.0),
    ([1.0, np.nan, 2.0, np.nan], 3, np.nan),  # NaN is the maximum
])
def test_last_max_takes_the_last_maximum(values, index, top):
  got_index, got_top = wss.last_max(jnp.asarray(values))
  assert int(got_index) == index
  np.testing.assert_equal(float(got_top), top)
  assert int(wss.last_argmax(jnp.asarray(values))) == index


def test_violation_sets_follow_libsvms_definition():
  # I_up = {α < C, y = +1} ∪ {α > 0, y = −1}; I_low the mirror image.
  alpha = jnp.asarray([0.0, 1.0, 0.5, 0.0, 1.0, 0.5])
  y = jnp.asarray([1.0, 1.0, 1.0, -1.0, -1.0, -1.0])
  active = jnp.asarray([True, True, True, True, True, False])
  up, low = wss.violation_sets(alpha, y, 1.0, active)
  assert up.tolist() == [True, False, True, False, True, False]
  assert low.tolist() == [False, True, True, True, False, False]


def test_wss2_picks_the_largest_violator_and_the_best_second_order_gain():
  # α = 0, G = −1: I_up = {y = +1}, I_low = {y = −1}. i is the last row of
  # largest −y G (rows 0 and 1 tie: 1); j maximises b²/ā over I_low with
  # b = m + y_t G_t = 2 and ā = K_ii + K_tt − 2K_it: 4/0.2 for row 2
  # against 4/1.6 for row 3, the row most like i wins.
  y = jnp.asarray([1.0, 1.0, -1.0, -1.0])
  grad = -jnp.ones(4)
  row_1 = jnp.asarray([0.5, 1.0, 0.9, 0.2])
  sel = wss.WSS2().select(
      alpha=jnp.zeros(4), grad=grad, y=y, qd=jnp.ones(4), c=1.0, eps=1e-3,
      tau=1e-12, active=jnp.ones(4, bool), row_fn=lambda i: row_1,
      memory=wss.empty_memory(0), key=None, params=None)
  assert (int(sel.i), int(sel.j), int(sel.status)) == (1, 2, wss.RUNNING)


def test_wss2_reports_a_stationary_point():
  y = jnp.asarray([1.0, -1.0])
  sel = wss.WSS2().select(
      alpha=jnp.zeros(2), grad=jnp.zeros(2), y=y, qd=jnp.ones(2), c=1.0,
      eps=1e-3, tau=1e-12, active=jnp.ones(2, bool),
      row_fn=lambda i: jnp.ones(2), memory=wss.empty_memory(0), key=None,
      params=None)
  assert int(sel.status) == wss.STATIONARY


def test_pair_flags_are_the_option_set():
  assert wss.DPWSS(buffer_rows=4, pair_flags="scan").pair_flags is (
      options.PairFlags.SCAN)
  with pytest.raises(ValueError, match="pair_flags must be one of auto"):
    wss.DPWSS(buffer_rows=4, pair_flags="dense")


def test_bit_flags_are_kept_only_where_asked_or_small():
  assert wss.bitset_bytes(33) == 33 * 2 * 4  # ⌈33/32⌉ words a row
  auto = wss.DPWSS(buffer_rows=8).empty_memory(40)
  scan = wss.DPWSS(buffer_rows=8, pair_flags="scan").empty_memory(40)
  assert auto.bits.shape == (40, 2) and scan.bits.shape == (0, 0)
  assert auto.pairs.shape == (wss.PAIR_CHUNK, 2)  # padded to a chunk


def test_remember_then_seen_with_both_lookups():
  for flags in ("bits", "scan"):
    rule = wss.DPWSS(buffer_rows=8, pair_flags=flags)
    memory = rule.empty_memory(5)
    memory = rule.remember(memory, jnp.int32(2), jnp.int32(4),
                           jnp.asarray(True))
    memory = rule.remember(memory, jnp.int32(2), jnp.int32(1),
                           jnp.asarray(False))  # not found: not recorded
    seen = wss.seen_with(memory, 2, 5, ordered=True)
    assert seen.tolist() == [False, False, False, False, True], flags
    assert not wss.seen_with(memory, 4, 5, ordered=True).any(), flags
