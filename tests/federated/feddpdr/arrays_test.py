"""Tests of federated.feddpdr.arrays: the program's pytrees."""

import jax
import jax.numpy as jnp
import numpy as np

from federated import feddpdr
from federated.feddpdr.arrays import Layout


def test_rows_and_traced_are_pytrees_of_their_arrays():
  rows = feddpdr.Rows(jnp.zeros((2, 3, 4)), jnp.zeros((2, 3), jnp.int32),
                      jnp.ones((2, 3)))
  traced = feddpdr.Traced(*(jnp.full(2, v)
                            for v in (0.5, 3.0, 2.0, 1.0, 7.0)))
  assert len(jax.tree.leaves(rows)) == 3
  assert len(jax.tree.leaves(traced)) == 5
  doubled = jax.tree.map(lambda a: 2 * a, traced)
  assert isinstance(doubled, feddpdr.Traced)
  np.testing.assert_array_equal(doubled.sizes, [6.0, 6.0])


def test_layout_puts_buckets_back_in_the_original_order():
  x = [jnp.zeros((2, 1, 3)), jnp.zeros((1, 2, 3))]
  bucketed = feddpdr.Bucketed(
      tuple(feddpdr.Rows(a, a[..., 0].astype(jnp.int32), a[..., 0])
            for a in x),
      (jnp.array([2, 0]), jnp.array([1])))
  layout = Layout.of(bucketed, 3)
  assert (layout.count, layout.dim) == (3, 3)
  got = layout.in_order([jnp.array([20.0, 0.0]), jnp.array([10.0])])
  np.testing.assert_array_equal(got, [0.0, 10.0, 20.0])
  one = Layout.of(bucketed.groups[0], 2)
  assert one.in_order([jnp.array([1.0, 2.0])]).tolist() == [1.0, 2.0]
