"""launch.bench.participants: a tiny run, and the loop against the vmap."""

import subprocess
import sys

import jax
import numpy as np
import pytest

from dpcore import accounting, clipping, linalg
from federated import feddpdr, partition
from launch.bench import participants as bench
from launch.data import loaders
from launch.experiments import feddpdr as ex


def _toy() -> ex.Prepared:
  ds = loaders.synthetic(jax.random.key(0), rows=200, d=16, test=100,
                         classes=3, rank=4)
  return ex.Prepared("toy", np.asarray(clipping.unit_rows(ds.x_train)),
                     ds.y_train, np.asarray(clipping.unit_rows(ds.x_test)),
                     ds.y_test, ds.classes)


@pytest.mark.slow  # the pipeline and its loop compiled (~30 s)
@pytest.mark.parametrize("topk", ["eigh", "subspace"])
def test_a_tiny_benchmark_records_both_paths_and_they_agree(topk):
  record = bench.benchmark(d=16, participants=6, rows=20, k=3, epsilon=8.0,
                           delta=1e-4, lam=0.1, chunk=4, topk=topk,
                           loop=True, repeats=1, seed=0, prepared=_toy())
  vm, loop = record["vmapped"], record["loop"]
  assert record["topk"]["solver"] == topk
  assert record["chunk"] == 4 and record["participants"] == 6
  for path in (vm, loop):
    assert path["participants_per_second"] == pytest.approx(
        6 / path["seconds"])
    assert 0.0 < path["global_captured_fraction"] <= 1.0 + 1e-9
    # At ε = 8 on 20 rows the noisy top 3 beats a random subspace.
    assert path["local_captured_fraction_mean"] > (
        path["local_random_fraction_mean"] + 0.2)
  assert record["speedup"] == pytest.approx(
      vm["participants_per_second"] / loop["participants_per_second"])
  # Same keys, same stages: the same numbers up to float32 rounding.
  assert loop["local_basis_distance_to_vmapped_max"] < 1e-4
  assert loop["global_basis_distance_to_vmapped"] < 1e-4
  assert loop["global_betas_max_abs_diff"] < 1e-4
  assert loop["accuracy"] == vm["accuracy"]
  assert len(record["loadavg_before"]) == 3
  assert record["peak_host_memory_bytes"] > 0
  assert tuple(record["privacy"]) == accounting.PRIVACY_FIELDS
  assert record["privacy"]["epsilon"] <= 8.0 + 1e-9


@pytest.mark.slow  # two pipelines compiled (~15 s); the sum's equality
# with the per-participant releases is in the default suite
# (tests/federated/moments_test.py, tests/mechanisms/pca/dp_pca_test.py)
def test_the_moments_aggregate_is_benchmarked_against_its_loop():
  record = bench.benchmark(d=16, participants=6, rows=20, k=3, epsilon=8.0,
                           delta=1e-4, lam=0.1, chunk=None, topk="eigh",
                           loop=True, repeats=1, seed=0, prepared=_toy(),
                           aggregation="moments")
  vm, loop = record["vmapped"], record["loop"]
  assert record["aggregation"] == "moments"
  # No local top-k: no local fractions; the server's basis is the same.
  assert vm["local_captured_fraction_mean"] is None
  assert loop["local_basis_distance_to_vmapped_max"] is None
  assert 0.0 < vm["global_captured_fraction"] <= 1.0 + 1e-9
  assert loop["global_basis_distance_to_vmapped"] < 1e-4
  assert loop["global_betas_max_abs_diff"] < 1e-4
  assert loop["accuracy"] == vm["accuracy"]
  # At ε = 8 the summed moments find the pooled top 3 far better than a
  # random subspace would (k/d = 3/16 of the variance, or less).
  assert vm["global_captured_fraction"] > 0.6


@pytest.mark.slow  # the pipeline and the loop compiled (~25 s)
def test_the_loop_follows_the_participant_keys():
  # The comparison above can fail: another repeat key moves every basis.
  prepared = _toy()
  config = feddpdr.Config(epsilon=8.0, k=3, lam=0.1)
  parts = partition.partition(jax.random.key(1), prepared.x_train,
                              prepared.y_train, sizes=(20,) * 6)
  plan = feddpdr.make_plan(parts.sizes, dim=16, num_classes=3, config=config)
  with jax.enable_x64(True):
    args = feddpdr.train_arguments(jax.random.key(2), parts, plan, seeds=1)
    out = feddpdr.train(*args, config=config, num_classes=3, chunk=4)
    host = [np.asarray(a) for a in jax.tree.leaves(args[1:])]
    same = bench.loop_train(args[0][0], *host, static=config.static,
                            num_classes=3)
    other = bench.loop_train(jax.random.fold_in(args[0][0], 1), *host,
                             static=config.static, num_classes=3)
  assert np.max(linalg.subspace_distance(same.bases, out.bases[0])) < 1e-4
  assert np.min(linalg.subspace_distance(other.bases, out.bases[0])) > 0.05


def test_the_command_line_refuses_a_k_above_d(tmp_path):
  out = tmp_path / "bench.jsonl"
  done = subprocess.run(
      [sys.executable, "-m", "launch.bench.participants", "--bench_dims=8",
       "--bench_k=20", f"--bench_out={out}"], capture_output=True,
      text=True, check=False)
  assert done.returncode == 2
  assert "--bench_k=20 exceeds d=8" in done.stderr
  assert out.read_text() == ""
