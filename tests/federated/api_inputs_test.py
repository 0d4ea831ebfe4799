"""Bad-input suite for federated's public functions (issue #15).

Each case is a call a user could make by mistake; it must fail with the
exception type given and a message naming the argument, before any
tracing or compilation.
"""

import jax
import numpy as np
import pytest

from federated import aggregation, feddpdr, fedsgd, partition

KEY = jax.random.key(0)


def _unit_rows(n=20, d=4, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)).astype(np.float32)
  return x / (2.0 * np.linalg.norm(x, axis=1, keepdims=True))


X = _unit_rows()
Y = np.arange(20) % 3
PARTICIPANTS = partition.pad([X[:10], X[10:]], [Y[:10], Y[10:]])
CONFIG = feddpdr.Config(k=2, epsilon=1.0, delta=1e-5)

def _case(name, call, error, match, *marks):
  return pytest.param(call, error, match, id=name, marks=marks)


def _check(call, error, match):
  with pytest.raises(error, match=match):
    call()


def _run(key=KEY, participants=PARTICIPANTS, x_test=X, y_test=Y, **kwargs):
  kwargs = {"num_classes": 3, "config": CONFIG, **kwargs}
  return feddpdr.run(key, participants, x_test, y_test, **kwargs)


def _prepare(sizes=(10, 10), dim=4, num_classes=3, config=CONFIG):
  return feddpdr.make_plan(list(sizes), dim=dim, num_classes=num_classes,
                         config=config)


PARTITION_CASES = [
    _case("sizes_zero", lambda: partition.partition(KEY, X, Y, sizes=[5, 0]),
          ValueError, "participant 1 has size 0"),
    _case("sizes_float",
          lambda: partition.partition(KEY, X, Y, sizes=[5, 2.5]),
          ValueError, "participant 1 has size 2.5"),
    _case("sizes_empty", lambda: partition.partition(KEY, X, Y, sizes=[]),
          ValueError, "sizes is empty"),
    _case("sizes_too_many",
          lambda: partition.partition(KEY, X, Y, sizes=[15, 15]),
          ValueError, "sizes sum to 30"),
    _case("labels_length",
          lambda: partition.partition(KEY, X, Y[:3], sizes=[5, 5]),
          ValueError, "y has shape"),
    _case("x_vector", lambda: partition.partition(KEY, X[0], Y, sizes=[2]),
          ValueError, "x must be a 2-D"),
    _case("x_nan", lambda: partition.partition(
        KEY, np.where(X > 0.4, np.nan, X), Y, sizes=[5]), ValueError,
          "NaN"),
    _case("pad_lists_lengths",
          lambda: partition.pad([X[:3]], [Y[:3], Y[:3]]), ValueError,
          "xs and ys"),
    _case("pad_empty_participant",
          lambda: partition.pad([X[:3], X[:0]], [Y[:3], Y[:0]]),
          ValueError, "participant 1 has no rows"),
    _case("even_sizes_zero", lambda: partition.even_sizes(10, 0, 2),
          ValueError, "participants"),
    _case("even_sizes_too_many", lambda: partition.even_sizes(10, 3, 4),
          ValueError, "exceeds the 10 rows"),
    _case("int_key", lambda: partition.partition(0, X, Y, sizes=[5, 5]),
          TypeError, "key must be"),
    _case("pad_labels_length",
          lambda: partition.pad([X[:3]], [Y[:2]]), ValueError, "ys\\[0\\]"),
    _case("pad_features_differ",
          lambda: partition.pad([X[:3], X[:3, :2]], [Y[:3], Y[:3]]),
          ValueError, "xs\\[1\\]"),
]


@pytest.mark.parametrize("call, error, match", PARTITION_CASES)
def test_partition(call, error, match):
  _check(call, error, match)


AGGREGATION_CASES = [
    _case("subspace_topk_unknown", lambda: aggregation.subspace_aggregate(
        np.ones((3, 4, 2)), np.ones(3), topk="svd"), ValueError, "topk"),
    _case("size_weights_negative",
          lambda: aggregation.size_weights([1, -1]), ValueError, "sizes"),
    _case("size_weights_empty", lambda: aggregation.size_weights([]),
          ValueError, "sizes"),
    _case("subspace_weights_length", lambda: aggregation.subspace_aggregate(
        np.ones((3, 4, 2)), np.ones(2)), ValueError, "weights"),
    _case("model_weights_length", lambda: aggregation.model_aggregate(
        np.ones((3, 4)), np.ones(2)), ValueError, "weights"),
    _case("subspace_weights_negative", lambda: aggregation.subspace_aggregate(
        np.ones((3, 4, 2)), np.array([0.5, -0.1, 0.6])), ValueError,
        "≥ 0"),
    _case("subspace_weights_nan", lambda: aggregation.subspace_aggregate(
        np.ones((3, 4, 2)), np.array([0.5, np.nan, 0.5])), ValueError,
        "finite"),
    _case("subspace_weights_zero", lambda: aggregation.subspace_aggregate(
        np.ones((3, 4, 2)), np.zeros(3)), ValueError, "not all 0"),
    _case("model_weights_negative", lambda: aggregation.model_aggregate(
        np.ones((3, 4)), np.array([1.0, -1.0, 1.0])), ValueError, "≥ 0"),
]


@pytest.mark.parametrize("call, error, match", AGGREGATION_CASES)
def test_aggregation(call, error, match):
  _check(call, error, match)


def _fedsgd_plan(sizes=(10, 10), **kwargs):
  kwargs = {"trust": "server", "sampling_rate": 0.5, "clip_norm": 1.0,
            "noise_multiplier": 1.0, "steps": 2, **kwargs}
  return fedsgd.make_plan(np.asarray(sizes), **kwargs)


# Issue #32: counts the programs run as int32 are refused in make_plan.
FEDSGD_CASES = [
    _case("steps_above_int32", lambda: _fedsgd_plan(steps=2**31),
          ValueError, "steps = 2,147,483,648 does not fit the int32"),
    _case("epochs_give_steps_above_int32",
          lambda: _fedsgd_plan(steps=None, sampling_rate=0.05, epochs=1e9),
          ValueError, r"steps = 20,000,000,000 \(epochs 1e\+09"),
    _case("participants_times_rows_above_int32",
          lambda: _fedsgd_plan(sizes=[2**16] * 2**15 + [1]), ValueError,
          r"participants × rows = 2,147,549,184 \(participants 32,769 × "
          r"rows of the largest participant 65,536\)"),
    _case("feddpdr_participants_times_rows_above_int32",
          lambda: _prepare(sizes=[2**16] * 2**15 + [1]), ValueError,
          r"participants × rows = 2,147,549,184"),
    _case("feddpdr_max_iter_above_int32",
          lambda: _prepare(config=feddpdr.Config(k=2, max_iter=2**31)),
          ValueError, "max_iter = 2,147,483,648 does not fit the int32"),
]


@pytest.mark.parametrize("call, error, match", FEDSGD_CASES)
def test_fedsgd(call, error, match):
  _check(call, error, match)


FEDDPDR_CASES = [
    _case("prepare_empty_participant", lambda: _prepare(sizes=(5, 0)),
          ValueError, "participant 1 has no rows"),
    _case("prepare_no_participants", lambda: _prepare(sizes=()),
          ValueError, "sizes must be a non-empty"),
    _case("prepare_k_above_d", lambda: _prepare(dim=1), ValueError,
          "exceeds the data dimension"),
    _case("prepare_one_class", lambda: _prepare(num_classes=1), ValueError,
          "num_classes"),
    _case("config_mechanism",
          lambda: _prepare(config=feddpdr.Config(mechanism="x")),
          ValueError, "mechanism"),
    _case("config_epsilon_zero",
          lambda: _prepare(config=feddpdr.Config(k=2, epsilon=0.0)),
          ValueError, "epsilon"),
    _case("config_delta_one",
          lambda: _prepare(config=feddpdr.Config(k=2, delta=1.0)),
          ValueError, "delta"),
    _case("config_pca_fraction_one",
          lambda: _prepare(config=feddpdr.Config(k=2, pca_fraction=1.0)),
          ValueError, "pca_fraction"),
    _case("config_aggregation",
          lambda: _prepare(config=feddpdr.Config(k=2, aggregation="mean")),
          ValueError, "aggregation"),
    _case("config_distributed_moments_d_above_361",
          lambda: _prepare(dim=400, config=feddpdr.Config(
              k=2, aggregation="distributed_moments")), ValueError,
          r"d <= 361; use aggregation=moments"),
    _case("config_distributed_moments_add_remove",
          lambda: _prepare(config=feddpdr.Config(
              k=2, aggregation="distributed_moments",
              relation="add_remove")), ValueError,
          "calibrated under replace_one"),
    _case("config_distributed_moments_min_survivors_over_count",
          lambda: _prepare(config=feddpdr.Config(
              k=2, aggregation="distributed_moments", min_survivors=3)),
          ValueError, "min_survivors=3 exceeds the 2 participants"),
    _case("config_distributed_moments_dropouts_abort",
          lambda: _prepare(config=feddpdr.Config(
              k=2, aggregation="distributed_moments", dropouts=1)),
          ValueError, "dropouts=1 leaves 1 of the 2 participants"),
    _case("config_distributed_moments_bits",
          lambda: _prepare(config=feddpdr.Config(
              k=2, aggregation="distributed_moments", bits=30)),
          ValueError, r"bits must be an int in \[8, 24\]"),
    _case("config_bits_without_distributed_moments",
          lambda: _prepare(config=feddpdr.Config(k=2, bits=16)),
          ValueError, "bits=16 is a setting of "
          "aggregation=distributed_moments"),
    _case("config_max_iter_zero",
          lambda: _prepare(config=feddpdr.Config(k=2, max_iter=0)),
          ValueError, "max_iter"),
    _case("run_seeds_zero", lambda: _run(seeds=0), ValueError, "seeds"),
    _case("run_chunk_zero", lambda: _run(participant_chunk=0), ValueError,
          "participant_chunk"),
    _case("run_labels_outside",
          lambda: _run(participants=partition.pad(
              [X[:10], X[10:]], [Y[:10] + 3, Y[10:]])), ValueError,
          "outside the class set"),
    _case("run_rows_over_norm_one",
          lambda: _run(participants=partition.pad(
              [4 * X[:10], X[10:]], [Y[:10], Y[10:]])), ValueError,
          "norm"),
    _case("run_test_labels_length", lambda: _run(y_test=Y[:5]), ValueError,
          "y_test has 5 labels"),
    _case("run_test_nan", lambda: _run(x_test=np.where(X > 0.4, np.nan, X)),
          ValueError, "x_test contains"),
    _case("run_int_key", lambda: _run(key=0), TypeError, "key must be"),
    _case("run_config_not_config", lambda: _run(config={"k": 2}), TypeError,
          "config must be"),
    _case("prepare_sizes_fractional", lambda: _prepare(sizes=(5.5, 5)),
          ValueError, "sizes"),
]


@pytest.mark.parametrize("call, error, match", FEDDPDR_CASES)
def test_feddpdr(call, error, match):
  _check(call, error, match)


def test_legitimate_edge_inputs_are_accepted():
  # One participant, one row each side of a two-participant split, k = d.
  one = partition.partition(KEY, X, Y, sizes=[1])
  assert one.x.shape == (1, 1, 4) and one.sizes.tolist() == [1]
  plan = _prepare(sizes=(1, 19), dim=2, config=feddpdr.Config(k=2))
  assert plan.num_fits == 3 and plan.sizes.tolist() == [1.0, 19.0]
  assert partition.even_sizes(10, 2, 5) == (5, 5)
