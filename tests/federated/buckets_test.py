"""Participants of very unequal sizes in buckets (federated.partition.Buckets).

Bucket assignment (no bucket more than half padding), the bucketed layout
holding the same rows as the padded one, FedDPDR giving the same bases and
models bucketed or not (every participant keyed by its original index),
and the record fields through the launch harness's run path.
"""

import jax
import numpy as np
import pytest

from federated import feddpdr, partition
from launch.experiments import feddpdr as ex
from tests.federated import layouts

# Σ = 444 < ½·6·150 = 450: one padded array would be mostly padding.
SIZES = (150, 24, 40, 130, 30, 70)
# Two buckets (32: participants 0, 2, 3; 120: participant 1), interleaved.
SMALL = (20, 120, 25, 30)


def _problem(sizes=SIZES):
  """Padded participants from layouts' generator (well separated spectra:
  three classes of shares 0.55, 0.3, 0.15) and a test set."""
  rng = np.random.default_rng(0)
  centres = np.linalg.qr(rng.normal(size=(layouts.D, layouts.K)))[0].T
  total = sum(sizes) + 200
  labels = rng.choice(layouts.NUM_CLASSES, size=total, p=[0.55, 0.3, 0.15])
  x = centres[labels] + 0.1 * rng.normal(size=(total, layouts.D))
  x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
  n = sum(sizes)
  cuts = np.cumsum(sizes)[:-1]
  parts = partition.pad(np.split(x[:n], cuts), np.split(labels[:n], cuts))
  return parts, x[n:], labels[n:]


@pytest.mark.parametrize("seed", range(5))
def test_no_bucket_wastes_more_than_half(seed):
  rng = np.random.default_rng(seed)
  sizes = np.concatenate([rng.integers(1, 9, 40), rng.integers(1, 2000, 7),
                          [1, 2, 4, 64, 65, 1000]])
  lengths = partition.bucket_lengths(sizes)
  assert np.all(lengths >= sizes)
  # Every participant fills more than half of its rows (n = 1: all).
  assert np.all(2 * sizes > lengths)
  assert lengths.max() == sizes.max()
  buckets = partition.bucket_index(sizes)
  order = np.concatenate([which for _, which in buckets])
  np.testing.assert_array_equal(np.sort(order), np.arange(sizes.size))
  for length, which in buckets:
    assert np.all(lengths[which] == length)
    assert 2 * sizes[which].sum() > length * which.size
  record = partition.layout_record(sizes, bucketed=True)
  assert record["buckets"] == len(buckets) > 1
  assert record["padding_efficiency"] > 0.5
  padded = partition.layout_record(sizes, bucketed=False)
  assert padded == {"buckets": 1, "padding_efficiency": pytest.approx(
      sizes.sum() / (sizes.size * sizes.max()))}


def test_exact_powers_of_two_are_not_rounded_up():
  np.testing.assert_array_equal(
      partition.bucket_lengths([1, 2, 3, 4, 8, 9, 16, 17, 40]),
      [1, 2, 4, 4, 8, 16, 16, 32, 40])


def test_wants_buckets_at_half_padding():
  assert not partition.wants_buckets([10, 10, 10])
  assert not partition.wants_buckets([10, 5])  # exactly ¾ real
  assert not partition.wants_buckets([10, 1, 9])  # 20 of 30 real
  assert partition.wants_buckets([10, 1, 1, 1])  # 13 of 40 real
  assert partition.wants_buckets(SIZES)


def test_buckets_hold_the_padded_rows():
  x = np.arange(2000, dtype=np.float32).reshape(1000, 2)
  y = np.arange(1000)
  sizes = (3, 200, 7, 1, 64, 500, 2)
  key = jax.random.key(4)
  parts = partition.partition(key, x, y, sizes=sizes)
  direct = partition.partition_buckets(key, x, y, sizes=sizes)
  split = partition.bucket(parts)
  for layout in (direct, split):
    np.testing.assert_array_equal(layout.sizes, sizes)
    for group, which in zip(layout.groups, layout.index, strict=True):
      length = group.x.shape[1]
      np.testing.assert_array_equal(group.x, parts.x[which, :length])
      np.testing.assert_array_equal(group.y, parts.y[which, :length])
      np.testing.assert_array_equal(group.mask, parts.mask[which, :length])
      np.testing.assert_array_equal(group.sizes, np.asarray(sizes)[which])
  assert partition.padded_rows(direct) < partition.padded_rows(parts) / 2
  auto = partition.partition_auto(key, x, y, sizes=sizes)
  assert isinstance(auto, partition.Buckets)
  assert isinstance(partition.partition_auto(key, x, y, sizes=sizes,
                                             buckets=False),
                    partition.Participants)
  assert isinstance(partition.partition_auto(key, x, y, sizes=(5, 4)),
                    partition.Participants)


def _train(layout, config, chunk=None):
  plan = feddpdr.make_plan(layout.sizes, dim=layouts.D,
                         num_classes=layouts.NUM_CLASSES, config=config)
  with jax.enable_x64(True):
    args = feddpdr.train_arguments(jax.random.key(2), layout, plan,
                                   seeds=2)
    return jax.device_get(feddpdr.train(
        *args, config=config, num_classes=layouts.NUM_CLASSES, chunk=chunk))


def _assert_same(got, want, mechanism):
  # Bucketing only changes how many zero rows each float32 XᵀX and each
  # masked loss sums over: layouts' tolerances apply (tests/federated/
  # layouts.py), and a participant keyed by the wrong index moves its
  # basis and model far beyond them.
  assert np.max(got.grad_norm) <= 1e-8 and np.max(want.grad_norm) <= 1e-8
  np.testing.assert_allclose(got.bases, want.bases, atol=layouts.BASIS_TOL,
                             err_msg=f"{mechanism}: bases")
  np.testing.assert_allclose(got.betas, want.betas, atol=layouts.MODEL_TOL,
                             err_msg=f"{mechanism}: models")
  np.testing.assert_allclose(got.global_basis, want.global_basis,
                             atol=layouts.BASIS_TOL,
                             err_msg=f"{mechanism}: global basis")
  np.testing.assert_allclose(got.global_betas, want.global_betas,
                             atol=layouts.MODEL_TOL,
                             err_msg=f"{mechanism}: global model")


@pytest.mark.slow  # heavy for the default suite (CI time)
def test_bucketed_feddpdr_equals_the_padded_run():
  parts, _, _ = _problem(SMALL)
  buckets = partition.bucket(parts)
  assert [w.tolist() for w in buckets.index] == [[0, 2, 3], [1]]
  config = feddpdr.Config(epsilon=100.0, k=layouts.K)
  want = _train(parts, config)
  got = _train(buckets, config)
  _assert_same(got, want, "feddpdr")
  # The two repeats differ (their own noise), so a key taken from the
  # wrong repeat or participant would show.
  assert np.max(np.abs(want.bases[0] - want.bases[1])) > 10 * (
      layouts.BASIS_TOL)


@pytest.mark.slow  # four buckets: each compiles its own fits (~1 min)
@pytest.mark.parametrize("mechanism,aggregation,chunk", [
    ("feddpdr", "subspace", None), ("dpdr_dpml", "subspace", None),
    ("feddpdr", "moments", None), ("feddpdr", "subspace", 8)])
def test_bucketed_variants_equal_the_padded_run(mechanism, aggregation,
                                                chunk):
  parts, _, _ = _problem()
  assert len(partition.bucket(parts).groups) == 4
  config = feddpdr.Config(mechanism=mechanism, epsilon=100.0, k=layouts.K,
                          aggregation=aggregation)
  _assert_same(_train(partition.bucket(parts), config, chunk),
               _train(parts, config), mechanism)


def test_buckets_refuse_a_mesh():
  parts, _, _ = _problem()
  config = feddpdr.Config(epsilon=100.0, k=layouts.K)
  plan = feddpdr.make_plan(parts.sizes, dim=layouts.D,
                         num_classes=layouts.NUM_CLASSES, config=config)
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("participants",))
  with pytest.raises(ValueError, match="mesh"):
    feddpdr.train_arguments(jax.random.key(2), partition.bucket(parts),
                            plan, seeds=1, mesh=mesh)


@pytest.mark.slow  # two runs of the harness, one bucketed (~1 min)
def test_record_fields_through_the_run_path():
  parts, x_test, y_test = _problem()
  rows = np.concatenate([parts.x[i, :s] for i, s in enumerate(SIZES)])
  labels = np.concatenate([parts.y[i, :s] for i, s in enumerate(SIZES)])
  prepared = ex.Prepared("blobs", rows, labels, x_test, y_test,
                         tuple(range(layouts.NUM_CLASSES)))
  config = feddpdr.Config(epsilon=100.0, k=layouts.K)
  records = {b: ex.run_one(prepared, sizes=SIZES, seed=0, seeds=1,
                           config=config, buckets=b) for b in (True, False)}
  on, off = records[True], records[False]
  assert on["buckets"] == 4 and off["buckets"] == 1
  assert off["padding_efficiency"] == pytest.approx(444 / 900)
  # Padded rows by bucket: 2·32 + 64 + 128 + 2·150 = 556.
  assert on["padding_efficiency"] == pytest.approx(444 / 556)
  # The same models up to rounding: at most a test row on the boundary.
  assert on["accuracy"] == pytest.approx(off["accuracy"],
                                         abs=1.5 / len(y_test))
  assert on["privacy"] == off["privacy"]
  assert on["participants"] == len(SIZES) and on["sizes"] == list(SIZES)
