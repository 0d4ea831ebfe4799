r"""Benchmark of FedDPDR-DPML at MNIST scale against scikit-learn and a floor.

  python -m launch.bench.feddpdr --out=results/bench_feddpdr.jsonl

Setting: 5 participants × 10,000 MNIST training rows (unit rows, d = 784),
k = 20, 10 classes one-vs-rest, ε = 0.1, δ = 1e-4, λ = 0.01, Huber loss.
Three timings on the same machine, in one process, each after compilation
(median of ``--repeats``):

* ``ours``: FedDPDR-DPML end to end — DP-PCA of the 5 participants,
  subspace aggregation, projection and clipping, 50 vmapped
  objective-perturbation fits in float64 to ‖∇J‖ ≤ 1e-8, model averaging;
* ``sklearn``: ``PCA(20)`` then ``LinearSVC`` (one-vs-rest) on the same
  50,000 rows pooled, non-private, timed in a fresh process (records
  before ``sklearn_timed_in`` timed it in this one, after the JAX runs,
  which slowed it);
* ``floor``: XᵀX plus one ``eigh`` for each of the 5 participants (vmapped),
  the least any DP-PCA pipeline must do.

``ours`` runs through the experiment harness
(``launch.experiments.feddpdr.run_one``): ``ours_compile_seconds`` is its
first call (compilation plus one run) minus the median run. The
persistent compilation cache is off unless ``--jax_cache_dir`` is given.

Targets (issue 3): ours ≤ 0.25 × sklearn on the CPU and ≤ 3 × floor. The
record also gives the test accuracy of the basis/model aggregation choices
(subspace vs. the paper's (1/N)Σwᵢ Ûᵢ; Σwᵢβᵢ vs. (1/N)Σwᵢβᵢ) and of
Non-Priv, and the load average, since the machine may be shared.
``"privacy"`` is the privacy record of the timed run (``ours``); the ε
values asked for are under ``"settings"``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from federated import feddpdr, partition
from launch import common
from launch.experiments import feddpdr as feddpdr_experiment
from mechanisms.pca import dp_pca

_DATASET = flags.DEFINE_string("dataset", "mnist", "data set (see loaders)")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "where the data files are")
_PARTICIPANTS = flags.DEFINE_integer("participants", 5, "N")
_N_PER = flags.DEFINE_integer("n_per_participant", 10_000,
                              "rows per participant")
_EPSILON = flags.DEFINE_float("epsilon", 0.1, "total ε of the timed run")
_K = flags.DEFINE_integer("k", 20, "target dimension")
_SEED = flags.DEFINE_integer("seed", 0, "seed of the partition and noise")
_OUT = flags.DEFINE_string("out", "results/bench_feddpdr.jsonl",
                           "JSON-lines output file")
_REPEATS = flags.DEFINE_integer("repeats", 3, "timed repetitions (median)")
_VARIANTS = flags.DEFINE_bool("variants", True,
                              "also run the aggregation variants")
_VARIANT_EPSILONS = flags.DEFINE_list(
    "variant_epsilons", ["0.1", "2.0"],
    "total ε values at which the private aggregation variants are scored")
_JAX_CACHE_DIR = flags.DEFINE_string(
    "jax_cache_dir", "",
    "JAX's persistent compilation cache (default off: the compile time is "
    "part of what is measured)")


def floor_seconds(x, mask, *, k, repeats):
  """XᵀX + eigh for every participant (vmapped): median (wall, CPU)
  seconds of ``repeats`` calls after one warm-up call."""
  fn = jax.jit(jax.vmap(lambda xi, mi: dp_pca.pca(xi, mi, k=k).components))
  xj, mj = jnp.asarray(x, jnp.float32), jnp.asarray(mask, jnp.float32)
  timed = common.round_robin({"floor": lambda _: fn(xj, mj)}, repeats=repeats)
  return (float(np.median(timed.wall["floor"])),
          float(np.median(timed.cpu["floor"])))


def sklearn_in_subprocess(x, y, x_test, y_test, *, k, repeats):
  """:func:`sklearn_pipeline` timed in a fresh Python process.

  In the benchmark's own process, after the JAX runs, scikit-learn took
  1.65 s against 0.90 s in a fresh process on the 2-core machine (we did
  not find out why; LIBSVM showed no such effect), which would flatter our
  ratio. The rows travel in a temporary ``.npz``.
  """
  import json
  import subprocess
  import tempfile

  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "rows.npz")
    np.savez(path, x=x, y=y, x_test=x_test, y_test=y_test)
    code = ("import json, numpy as np; from launch.bench import feddpdr as b;"
            f" d = np.load({path!r}); print(json.dumps(b.sklearn_pipeline("
            "d['x'], d['y'], d['x_test'], d['y_test'],"
            f" k={int(k)}, repeats={int(repeats)})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, check=False,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
  if proc.returncode != 0:
    raise RuntimeError("the scikit-learn timing process failed:\n"
                       + proc.stderr[-2000:])
  return tuple(json.loads(proc.stdout.strip().splitlines()[-1]))


def sklearn_pipeline(x, y, x_test, y_test, *, k, repeats):
  """PCA(k) + LinearSVC one-vs-rest on the pooled rows.

  Returns:
    (wall seconds, CPU seconds, test accuracy), medians over ``repeats``.
  """
  from sklearn.decomposition import PCA
  from sklearn.pipeline import make_pipeline
  from sklearn.svm import LinearSVC

  times, cpu, model = [], [], None
  for _ in range(repeats):
    model = make_pipeline(PCA(n_components=k, random_state=0), LinearSVC())
    start, cpu_start = time.perf_counter(), time.process_time()
    model.fit(x, y)
    times.append(time.perf_counter() - start)
    cpu.append(time.process_time() - cpu_start)
  return (float(np.median(times)), float(np.median(cpu)),
          float(model.score(x_test, y_test)))


def benchmark(*, dataset, data_dir, participants, n_per, epsilon, k,
              repeats, variants, seed, out,
              variant_epsilons=(0.1, 2.0)) -> dict:
  """Runs the three timings (and accuracy variants); emits one record."""
  prepared = feddpdr_experiment.prepare_data(dataset, data_dir=data_dir,
                                             seed=seed)
  sizes = (n_per,) * participants
  key = jax.random.key(seed)
  # The partition run_one makes from the same seed.
  parts = partition.partition(jax.random.fold_in(key, 0), prepared.x_train,
                              prepared.y_train, sizes=sizes)
  num_classes = len(prepared.classes)
  base = feddpdr.Config(mechanism="feddpdr", epsilon=epsilon, k=k)

  def ours(config, timing_repeats):
    return feddpdr_experiment.run_one(prepared, sizes=sizes, seed=seed,
                                      seeds=1, config=config,
                                      timing_repeats=timing_repeats)

  common.progress("ours: FedDPDR-DPML end to end")
  main_run = ours(base, repeats)
  common.progress("floor: X^T X + eigh per participant")
  floor, floor_cpu = floor_seconds(parts.x, parts.mask, k=k,
                                   repeats=repeats)
  common.progress("scikit-learn: PCA + LinearSVC")
  real = np.asarray(parts.mask) > 0
  sk_seconds, sk_cpu, sk_acc = sklearn_in_subprocess(
      np.asarray(parts.x)[real], np.asarray(parts.y)[real], prepared.x_test,
      prepared.y_test, k=k, repeats=repeats)
  accuracy_variants = {}
  if variants:
    for agg in ("subspace", "paper"):
      common.progress(f"variant nonpriv/{agg}")
      r = ours(dataclasses.replace(base, mechanism="nonpriv",
                                   aggregation=agg), 1)
      accuracy_variants[f"nonpriv/{agg}/weighted"] = r["accuracy"]
      for model_agg in ("weighted", "paper"):
        for eps in variant_epsilons:
          name = f"feddpdr/{agg}/{model_agg}/eps={eps:g}"
          common.progress(f"variant {name}")
          r = ours(dataclasses.replace(base, aggregation=agg, epsilon=eps,
                                       model_aggregation=model_agg), 1)
          accuracy_variants[name] = r["accuracy"]
  record = {
      "benchmark": "feddpdr",
      "dataset": dataset,
      "participants": participants,
      "sizes": list(sizes),
      "d": int(prepared.x_train.shape[1]),
      "k": k,
      "num_classes": num_classes,
      "settings": {"epsilon": epsilon,
                   "variant_epsilons": list(variant_epsilons)},
      "ours_seconds": main_run["seconds"],
      "ours_cpu_seconds": main_run["cpu_seconds"],
      "ours_compile_seconds": main_run["compile_seconds"],
      "ours_accuracy": main_run["accuracy"],
      "ours_iterations_max": main_run["iterations_max"],
      "ours_grad_norm_max": main_run["grad_norm_max"],
      "sklearn_seconds": sk_seconds,
      "sklearn_cpu_seconds": sk_cpu,
      "sklearn_accuracy": sk_acc,
      "sklearn_timed_in": "a fresh subprocess",
      "floor_seconds": floor,
      "floor_cpu_seconds": floor_cpu,
      "ratio_to_sklearn": main_run["seconds"] / sk_seconds,
      "ratio_to_floor": main_run["seconds"] / floor,
      "cpu_ratio_to_sklearn": main_run["cpu_seconds"] / sk_cpu,
      "cpu_ratio_to_floor": main_run["cpu_seconds"] / floor_cpu,
      "target_sklearn_met": main_run["seconds"] <= 0.25 * sk_seconds,
      "target_floor_met": main_run["seconds"] <= 3.0 * floor,
      "accuracy_variants": accuracy_variants,
      "repeats": repeats,
      "device": jax.devices()[0].platform,
      "device_kind": jax.devices()[0].device_kind,
      "cpu_count": os.cpu_count(),
      "load_average": os.getloadavg(),
      "note": "timings on a shared machine; see load_average",
      "seed": seed,
      "privacy": main_run["privacy"],
  }
  common.emit_record(record, out)
  return record


def main(argv):
  del argv
  common.check_output_path(_OUT.value, "--out")
  feddpdr_experiment.enable_compilation_cache(_JAX_CACHE_DIR.value)
  benchmark(dataset=_DATASET.value, data_dir=_DATA_DIR.value,
            participants=_PARTICIPANTS.value, n_per=_N_PER.value,
            epsilon=_EPSILON.value, k=_K.value, repeats=_REPEATS.value,
            variants=_VARIANTS.value, seed=_SEED.value, out=_OUT.value,
            variant_epsilons=common.parse_floats(
                _VARIANT_EPSILONS.value, "--variant_epsilons"))


if __name__ == "__main__":
  common.run_cli(main)
