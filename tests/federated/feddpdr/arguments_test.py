"""Tests of the program's arguments (federated.feddpdr.arguments)."""

import dataclasses

import jax
import numpy as np
import pytest

from federated import distributed, feddpdr, partition
from tests.federated import layouts


@pytest.mark.parametrize("aggregation", ["subspace", "distributed_moments"])
def test_global_train_arguments_check_the_local_block(aggregation):
  # With distributed_moments the secure sum's parameters travel in the
  # traced arguments too, replicated: the same leaves either way.
  parts, _, _ = layouts.problem(4)
  cfg = dataclasses.replace(layouts.config("feddpdr"),
                            aggregation=aggregation)
  plan = feddpdr.make_plan(parts.sizes, dim=layouts.D,
                           num_classes=layouts.NUM_CLASSES, config=cfg)
  mesh = distributed.global_mesh(4)
  with jax.enable_x64(True):
    # One process holds all four participants; given only three, refused.
    short = partition.Participants(*(a[:3] for a in parts))
    with pytest.raises(ValueError, match="local participants have sizes"):
      feddpdr.global_train_arguments(jax.random.key(2), short, plan,
                                     seeds=1, mesh=mesh)
    args = feddpdr.global_train_arguments(jax.random.key(2), parts, plan,
                                          seeds=2, mesh=mesh)
    want = feddpdr.train_arguments(jax.random.key(2), parts, plan, seeds=2)
  keys, rows, traced = args
  assert isinstance(rows, feddpdr.Rows)
  assert isinstance(traced, feddpdr.Traced)
  assert (traced.secure_sum is None) == (aggregation == "subspace")
  assert jax.tree.structure(args) == jax.tree.structure(want)
  np.testing.assert_array_equal(jax.random.key_data(keys),
                                jax.random.key_data(want[0]))
  for got_arg, want_arg in zip(jax.tree.leaves(args[1:]),
                               jax.tree.leaves(want[1:]), strict=True):
    assert got_arg.dtype == want_arg.dtype
    np.testing.assert_array_equal(got_arg, want_arg)


def test_train_arguments_types_and_buckets():
  parts, _, _ = layouts.problem(4)
  cfg = layouts.config("feddpdr")
  plan = feddpdr.make_plan(parts.sizes, dim=layouts.D,
                           num_classes=layouts.NUM_CLASSES, config=cfg)
  with jax.enable_x64(True):
    keys, rows, traced = feddpdr.train_arguments(jax.random.key(2), parts,
                                                 plan, seeds=3)
    buckets = partition.bucket(parts)
    _, bucketed, same = feddpdr.train_arguments(jax.random.key(2), buckets,
                                                plan, seeds=3)
  assert keys.shape == (3,)
  assert [a.dtype for a in rows] == [np.float32, np.int32, np.float32]
  assert [a.dtype for a in traced[:4]] == [np.float32] + [np.float64] * 3
  assert traced.secure_sum is None  # no secure sum in this run
  assert isinstance(bucketed, feddpdr.Bucketed)
  assert len(bucketed.groups) == len(bucketed.index) == len(buckets.groups)
  for got, want in zip(same[:4], traced[:4], strict=True):
    np.testing.assert_array_equal(got, want)
  # A plan made for other sizes: its n and weights are not these rows'.
  other = feddpdr.make_plan(np.asarray(parts.sizes) + 1, dim=layouts.D,
                            num_classes=layouts.NUM_CLASSES, config=cfg)
  with jax.enable_x64(True), pytest.raises(ValueError, match="the plan"):
    feddpdr.train_arguments(jax.random.key(2), parts, other, seeds=3)


def test_check_data_refuses_a_mask_other_than_the_sizes_and_nan_padding():
  parts, x_test, y_test = layouts.problem(4)
  feddpdr.check_data(parts, x_test, y_test, num_classes=layouts.NUM_CLASSES)
  # Every padded slot marked real: the plan (made from the sizes) would
  # weight and fit other rows than those trained on.
  ones = parts._replace(mask=np.ones_like(parts.mask))
  with pytest.raises(ValueError, match="mask marks .* rows of a "
                                       "participant whose size is"):
    feddpdr.check_data(ones, x_test, y_test,
                       num_classes=layouts.NUM_CLASSES)
  with pytest.raises(ValueError, match="mask marks"):
    feddpdr.check_data(partition.bucket(ones), x_test, y_test,
                       num_classes=layouts.NUM_CLASSES)
  # NaN in the padding (0·NaN is NaN in XᵀX and the fits).
  nan = parts._replace(x=np.where(parts.mask[..., None] > 0, parts.x,
                                  np.nan).astype(np.float32))
  assert np.isnan(nan.x).any()
  with pytest.raises(ValueError, match="non-finite values"):
    feddpdr.check_data(nan, x_test, y_test, num_classes=layouts.NUM_CLASSES)


def test_execute_refuses_sizes_that_are_not_the_participants():
  parts, x_test, y_test = layouts.problem(4)
  sizes = np.asarray(parts.sizes).copy()
  sizes[0] += 1
  with pytest.raises(ValueError, match="are not the participants' sizes"):
    feddpdr.execute(jax.random.key(0), parts, x_test, y_test,
                    num_classes=layouts.NUM_CLASSES,
                    config=layouts.config("feddpdr"), sizes=sizes)
