r"""Benchmark: time to the first result of the README's main command.

Runs ``python -m launch.feddpdr`` (the README's main job, default flags) as
a fresh process, ``--first_result_pairs`` times a pair: once with an empty
JAX cache directory (everything traced and compiled: what a new user's
first run costs after the install) and once more on the cache the first
run left (what every later run costs). Wall time of the whole process,
from ``exec`` to exit, is what a user waits; the process's CPU time
(children's ``ru_utime + ru_stime``) is recorded beside it, with the load
averages before and after, because a shared machine stretches the wall
time. Each run's table goes to a temporary file (not ``runs/``).

One JSON line per run::

  python -m launch.bench.first_result --first_result_pairs=3

The issue's targets on the 2-core CPU, idle: ≤ 15 s for the first run,
≤ 5 s for the second.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time

from absl import flags

from launch import common

_PAIRS = flags.DEFINE_integer("first_result_pairs", 3,
                              "(cold, warm) pairs of runs")
_ARGS = flags.DEFINE_list("first_result_args", [],
                          "extra flags for launch.feddpdr")
_OUT = flags.DEFINE_string("first_result_out",
                           "results/bench_first_result.jsonl", "JSON lines")

NO_RELEASE = ("timing benchmark of the main job: its own records (not kept) "
              "hold their privacy")


def _children_cpu() -> float:
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def time_run(cache_dir: str, out: str, extra: list[str]) -> dict:
  """One ``python -m launch.feddpdr`` process; its wall and CPU seconds."""
  command = [sys.executable, "-m", "launch.feddpdr",
             f"--jax_cache_dir={cache_dir}", f"--out={out}", *extra]
  load_before = os.getloadavg()
  cpu_before = _children_cpu()
  start = time.perf_counter()
  done = subprocess.run(command, capture_output=True, text=True,
                        check=False, stdin=subprocess.DEVNULL)
  wall = time.perf_counter() - start
  if done.returncode != 0:
    raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): "
                       f"{done.stderr.strip().splitlines()[-1:]}")
  table = done.stderr[done.stderr.rfind("digits:"):].strip() or None
  return {
      "wall_seconds": wall,
      "cpu_seconds": _children_cpu() - cpu_before,
      "load_before": load_before,
      "load_after": os.getloadavg(),
      "command": " ".join(command[1:]),
      "table": table,
  }


def main(argv):
  del argv
  common.check_output_path(_OUT.value, "--first_result_out")
  pairs = _PAIRS.value
  if pairs < 1:
    raise ValueError(f"--first_result_pairs={pairs}: give at least 1")
  from dpcore import accounting  # after flag parsing: --help stays fast
  for pair in range(pairs):
    with tempfile.TemporaryDirectory(prefix="dpjax-first-") as scratch:
      cache = os.path.join(scratch, "jax")
      for label in ("first", "second"):
        common.progress(f"pair {pair + 1}/{pairs}: {label} run ...")
        result = time_run(cache, os.path.join(scratch, f"{label}.jsonl"),
                          list(_ARGS.value))
        record = {
            "benchmark": "first_result",
            "run": label,
            "pair": pair,
            "settings": {"args": list(_ARGS.value), "pairs": pairs},
            "cpu_count": os.cpu_count(),
            **result,
            "privacy": accounting.no_guarantee_record(NO_RELEASE),
        }
        common.progress(f"{label} run: {result['wall_seconds']:.1f} s wall, "
                        f"{result['cpu_seconds']:.1f} s CPU (load "
                        f"{result['load_before'][0]:.2f})")
        common.emit_record(record, _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
