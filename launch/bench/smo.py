r"""Benchmark: our WSS2 SMO against LIBSVM, and vmapped DPWSS repeats.

Not a test. Same data, tolerance (eps = 1e-3), C = 1 and RBF kernel
(γ = 1/d) for both solvers; LIBSVM (``libsvm-official``) with its default
100 MB kernel cache. Reported per dataset: wall time of LIBSVM's
``svm_train`` and of our solver (compile time separately; ours timed on a
second, compiled call), iterations of both and the relative objective gap.

Datasets (all offline):

* ``heart``: LIBSVM's heart_scale (270 × 13).
* ``mnist_pool4_4601``: a 4,601-row low-dimensional set standing in for
  spambase (not available offline): the first 4,601 MNIST training images,
  4×4 average-pooled to 7×7 = 49 features, pixels / 255, even vs odd.
* ``mnist_5000``: the first 5,000 MNIST training images, 784 features,
  pixels / 255, even vs odd (binary MNIST); ``mnist_N`` likewise with the
  first N rows (e.g. ``mnist_20000`` on a GPU).

Then the vmapped DPWSS repeats: 1 against ``--dpwss_repeats`` (64) on the
4,601-row set. Timings on a shared CPU are under contention. Nothing is
released: every record's ``"privacy"`` claims no guarantee (the DPWSS
settings, ε per selection and σ, are under ``"settings"``)::

  python -m launch.bench.smo --out=results/bench_smo.jsonl
"""

from __future__ import annotations

import os
import time

import jax
import numpy as np
from absl import flags

from dpcore import accounting
from launch import common
from launch.data import loaders as data
from mechanisms.svm import dpwss, kernels, smo_train

_DATASETS = flags.DEFINE_string(
    "datasets", "heart,mnist_pool4_4601,mnist_5000", "Which sets.")
_SHRINKING = flags.DEFINE_string("shrinking", "0,1", "Shrinking settings.")
_PRECOMPUTE = flags.DEFINE_enum("precompute", "auto",
                                ["auto", "yes", "no"], "Cache Q's rows.")
_SPARSE_ROWS = flags.DEFINE_enum(
    "sparse_rows", "auto", ["auto", "yes", "no"],
    "Form kernel rows from each row's nonzero features (auto: "
    "smo_train.resolve_sparse_rows).")
_DTYPE = flags.DEFINE_enum("dtype", "float64", ["float64", "float32"],
                           "Our solver's precision.")
_REPEATS_SET = flags.DEFINE_string("repeats_dataset", "mnist_pool4_4601",
                                   "Set of the vmapped-repeats benchmark.")
_DPWSS_REPEATS = flags.DEFINE_integer("dpwss_repeats", 64,
                                      "Vmapped DPWSS repeats (0: skip).")
_UNROLL = flags.DEFINE_integer(
    "unroll", None, "SMO iterations per loop trip (default: 1 on the CPU, "
    "smo_train.UNROLL_ACCELERATOR on a GPU).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed (DPWSS).")
_OUT = flags.DEFINE_string("out", "results/bench_smo.jsonl", "JSON lines.")

# The timed DPWSS runs: ε of each selection and the constant factor σ.
DPWSS_SETTINGS = {"epsilon": 1.0, "sigma": 0.5}
TIMING_ONLY = "timing benchmark: the trained models are not released"


def load(name: str, data_dir=None):
  """(x float64, y ±1) of a benchmark set."""
  if name == "heart":
    ds = data.load_dataset("heart", data_dir=data_dir)
    return np.asarray(ds.x_train, np.float64), ds.y_train.astype(np.float64)
  ds = data.load_dataset("mnist", data_dir=data_dir)
  y = np.where(ds.y_train % 2 == 0, 1.0, -1.0)
  if name.startswith("mnist_") and name[6:].isdigit():
    rows = int(name[6:])
    return ds.x_train[:rows].astype(np.float64) / 255.0, y[:rows]
  if name == "mnist_pool4_4601":
    img = ds.x_train[:4601].reshape(-1, 7, 4, 7, 4).astype(np.float64)
    return img.mean(axis=(2, 4)).reshape(-1, 49) / 255.0, y[:4601]
  raise ValueError(f"unknown benchmark set {name!r}")


def libsvm_run(x, y, *, shrinking: bool, repeats: int = 3):
  """LIBSVM's best wall time of ``repeats``, #iter and objective.

  The best of as many runs as ours (:func:`timed_cpu`), so neither side
  gains from the minimum; #iter and objective are parsed from its output.
  """
  import re

  from libsvm import svm as libsvm_svm
  from libsvm import svmutil

  lines = []
  hook = libsvm_svm.PRINT_STRING_FUN(lambda s: lines.append(s.decode()))
  problem = libsvm_svm.svm_problem(y.tolist(), x)
  param = libsvm_svm.svm_parameter(
      f"-s 0 -t 2 -c 1 -g {1.0 / x.shape[1]!r} -e 0.001 "
      f"-h {int(shrinking)}")
  param.print_func = hook
  best = (float("inf"), float("inf"))
  for _ in range(repeats):
    lines.clear()
    start, cpu = time.perf_counter(), time.process_time()
    svmutil.svm_train(problem, param)
    best = min(best, (time.perf_counter() - start,
                      time.process_time() - cpu))
  seconds, cpu = best
  text = "".join(lines)
  return {"seconds": seconds, "cpu_seconds": cpu,
          "iterations": int(re.search(r"#iter = (\d+)", text).group(1)),
          "obj": float(re.search(r"obj = (\S+),", text).group(1))}


def timed_cpu(fn, repeats: int = 3):
  """(result, compile_s, best wall s, its process CPU s) of ``fn()``.

  The first call compiles; the best of ``repeats`` timed calls is kept
  (the minimum is the least disturbed by other processes on the CPU).
  """
  start = time.perf_counter()
  result = common.block(fn())
  compile_s = time.perf_counter() - start
  best = (float("inf"), float("inf"))
  for _ in range(repeats):
    start, cpu = time.perf_counter(), time.process_time()
    result = common.block(fn())
    best = min(best, (time.perf_counter() - start,
                      time.process_time() - cpu))
  return result, compile_s, best[0], best[1]


def bench_dataset(name, *, shrinking, precompute, dtype, unroll=None,
                  sparse_rows=None) -> dict:
  x, y = load(name)
  ref = libsvm_run(x, y, shrinking=shrinking)
  model, compile_s, seconds, cpu = timed_cpu(
      lambda: smo_train.wss2_train(
          x, y, kernel=kernels.KernelSpec("rbf"), c=1.0, eps=1e-3,
          shrinking=shrinking, dtype=dtype, precompute=precompute,
          unroll=unroll, sparse_rows=sparse_rows))
  cached = smo_train.resolve_precompute(precompute, x.shape[0])
  return {
      "bench": "wss2_vs_libsvm", "dataset": name, "n": int(x.shape[0]),
      "d": int(x.shape[1]), "shrinking": shrinking, "dtype": dtype,
      "precompute": cached,
      "sparse_rows": smo_train.resolve_sparse_rows(sparse_rows, x,
                                                   precompute=cached),
      "unroll": smo_train.resolve_unroll(unroll),
      "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
      "xla_flags": os.environ.get("XLA_FLAGS"),
      "libsvm_seconds": ref["seconds"], "libsvm_cpu_seconds":
      ref["cpu_seconds"], "libsvm_iterations": ref["iterations"],
      "libsvm_obj": ref["obj"], "seconds": seconds, "cpu_seconds": cpu,
      "compile_seconds": compile_s, "iterations": model.iterations,
      "obj": model.objective,
      "obj_rel_diff": abs(model.objective - ref["obj"]) / abs(ref["obj"]),
      "time_ratio": seconds / ref["seconds"],
      "cpu_time_ratio": cpu / ref["cpu_seconds"],
      "same_iterations": model.iterations == ref["iterations"],
      "device": jax.devices()[0].device_kind,
      "load_average": os.getloadavg(),
      "note": "best of 3 timed runs each; timings on a shared machine, "
              "see load_average",
      "privacy": accounting.no_guarantee_record(accounting.NON_PRIVATE),
  }


def bench_repeats(name, *, repeats, seed, precompute, unroll=None) -> dict:
  x, y = load(name)
  key = jax.random.key(seed)
  out = {"bench": "dpwss_vmap_repeats", "dataset": name, "n": x.shape[0],
         "settings": dict(DPWSS_SETTINGS),
         "unroll": smo_train.resolve_unroll(unroll), "precompute": {
             r: smo_train.resolve_precompute(precompute, x.shape[0], repeats=r)
             for r in (1, repeats)}}
  plan = dpwss.make_plan(selection_epsilon=DPWSS_SETTINGS["epsilon"],
                         sigma=DPWSS_SETTINGS["sigma"])
  for r in (1, repeats):
    run, compile_s, seconds, cpu = timed_cpu(
        lambda r=r: dpwss.release(key, plan, x, y, repeats=r,
                                  precompute=precompute, unroll=unroll),
        repeats=1)
    out[f"seconds_{r}"] = seconds
    out[f"cpu_seconds_{r}"] = cpu
    out[f"compile_seconds_{r}"] = compile_s
    out[f"iterations_{r}"] = run.iterations.tolist()
  out["ratio"] = out[f"seconds_{repeats}"] / out["seconds_1"]
  out["cpu_ratio"] = out[f"cpu_seconds_{repeats}"] / out["cpu_seconds_1"]
  out["device"] = jax.devices()[0].device_kind
  out["load_average"] = os.getloadavg()
  out["note"] = "timings on a shared machine; see load_average"
  out["privacy"] = accounting.no_guarantee_record(TIMING_ONLY)
  return out


def main(argv):
  del argv
  choice = {"auto": None, "yes": True, "no": False}
  precompute = choice[_PRECOMPUTE.value]
  sparse_rows = choice[_SPARSE_ROWS.value]
  for name in filter(None, _DATASETS.value.split(",")):
    for shrinking in common.parse_ints(_SHRINKING.value):
      common.progress(f"{name} shrinking={shrinking}")
      common.emit_record(bench_dataset(name, shrinking=bool(shrinking),
                                       precompute=precompute,
                                       dtype=_DTYPE.value,
                                       unroll=_UNROLL.value,
                                       sparse_rows=sparse_rows), _OUT.value)
  if _DPWSS_REPEATS.value:
    common.progress("DPWSS vmapped repeats")
    common.emit_record(bench_repeats(
        _REPEATS_SET.value, repeats=_DPWSS_REPEATS.value, seed=_SEED.value,
        precompute=precompute, unroll=_UNROLL.value), _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
