r"""Empirical privacy audit of every mechanism in the library.

Runs every audit spec of the library (each a worst-case pair of
neighbouring data sets and a statistic, see :mod:`dpcore.auditing`) and
compares each 95 % lower bound on ε with the ε the library reports. The
specs live beside their mechanisms, in the modules named ``*_audit`` of
``dpcore``, ``mechanisms`` and ``federated``; :func:`launch.audit_run.specs`
finds them all::

  python -m launch.audit                            # every spec, defaults
  python -m launch.audit --only=gaussian,laplace --trials=100000

What it writes, its memory check and its exit status: docs/privacy.md
(The audit); the table it writes: docs/privacy_audit.md.
"""

from __future__ import annotations

import sys

from absl import flags

from dpcore.audit_spec import failed
from launch import common
from launch.audit_run import memory_budget, run_audits

_ONLY = flags.DEFINE_list(
    "only", None, "Comma-separated spec names to run (default: all).")
_TRIALS = flags.DEFINE_integer(
    "trials", None, "Trials per side for every spec (default: each spec's "
    "own default_trials).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed; spec s uses "
                             "fold_in(key(seed), crc32(name)).")
_CHUNK = flags.DEFINE_integer(
    "chunk", 100_000, "Trials per chunk of keys, vmapped at once unless "
    "--memory_budget needs smaller batches (which draw the same trials).")
_MEMORY_BUDGET = flags.DEFINE_string(
    "memory_budget", "auto",
    "Memory the audit may use, e.g. 8G or 512M; auto: 3/4 of the memory "
    "the system reports available. A chunk whose estimate exceeds it is "
    "drawn in smaller vmapped batches; a spec that does not fit even one "
    "trial at a time is refused before it runs.")
_OUT = flags.DEFINE_string("out", "results/audit.jsonl",
                           "JSON-lines file, one record appended per spec.")
_TABLE = flags.DEFINE_string("table", "docs/privacy_audit.md",
                             "Markdown page rewritten after every spec "
                             "(empty: none).")


def main(argv):
  del argv
  command = "python -m launch.audit " + " ".join(sys.argv[1:])
  budget = memory_budget(_MEMORY_BUDGET.value)
  records = run_audits(only=_ONLY.value, trials=_TRIALS.value,
                       seed=_SEED.value, chunk=_CHUNK.value, out=_OUT.value,
                       table=_TABLE.value, command=command.strip(),
                       memory_budget=budget)
  bad = [r["name"] for r in records if failed(r)]
  if bad:
    print(f"AUDIT FAILED for: {', '.join(bad)}", file=sys.stderr)
    sys.exit(1)
  print(f"all {len(records)} audits passed", file=sys.stderr)


if __name__ == "__main__":
  common.run_cli(main)
