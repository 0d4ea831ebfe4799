"""launch.experiments.distributed in one process: the same partition,
keys and record as the one-process harness, and the table's rows."""

import jax
import numpy as np
import pytest

from federated import feddpdr
from launch import common
from launch.data import loaders
from launch.experiments import distributed
from launch.experiments import feddpdr as single


def _prepared():
  ds = loaders.synthetic(jax.random.key(0), rows=200, d=8, test=60,
                         classes=3, rank=3)
  unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
  return single.Prepared("toy", unit(ds.x_train), ds.y_train,
                         unit(ds.x_test), ds.y_test, ds.classes)


def test_each_participants_rows_are_the_partitions():
  picks = distributed.partition_rows(jax.random.key(3), 50, (10, 20))
  assert [len(p) for p in picks] == [10, 20]
  assert not set(picks[0]) & set(picks[1])


@pytest.mark.slow
def test_the_table_over_one_process_is_the_one_process_run(tmp_path):
  prepared = _prepared()
  setting = single.Setting(
      dataset="toy", config=feddpdr.Config(k=3, epsilon=2.0, lam=0.1),
      epsilons=(2.0,), baseline=False, seeds=1,
      out=str(tmp_path / "runs.jsonl"))
  (record,) = distributed.budget_table(prepared, setting, sizes=(40, 40))
  want = single.run_one(prepared, sizes=(40, 40), seed=0, seeds=1,
                        config=setting.configs()[0])
  np.testing.assert_allclose(record["accuracy"], want["accuracy"])
  assert record["privacy"] == want["privacy"]
  assert record["processes"] == 1 and record["devices_per_process"] >= 1
  assert common.read_jsonl(setting.out)[0]["accuracy"] == record["accuracy"]
