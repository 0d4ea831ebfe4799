r"""Empirical privacy audit of every mechanism in the library.

Runs the audits of :func:`launch.experiments.audits.specs` (each a
worst-case pair of
neighbouring data sets and a statistic, see :mod:`dpcore.auditing`) and
compares each 95 % lower bound on ε with the ε the library reports::

  python -m launch.audit                            # every spec, defaults
  python -m launch.audit --only=gaussian,laplace --trials=100000

One JSON line per spec is appended to ``--out`` as soon as it finishes,
and ``--table`` is rewritten after every spec as a Markdown page (the
command, what the columns mean, the table).

Exit status. A lower bound above the reported ε of an unbroken spec is a
privacy bug: it is printed loudly and the script exits with status 1. So
does a deliberately broken spec (``broken=True``) whose bound does NOT
exceed its reported ε: the audit then lacks the power it claims. A bound
above a paper's nominal ε (where the library reports a different one) is a
finding, written plainly in the table, not a failure.
"""

from __future__ import annotations

import sys

from absl import flags

from launch import common
from launch.audit_run import failed, run_audits

_ONLY = flags.DEFINE_list(
    "only", None, "Comma-separated spec names to run (default: all).")
_TRIALS = flags.DEFINE_integer(
    "trials", None, "Trials per side for every spec (default: each spec's "
    "own default_trials).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed; spec s uses "
                             "fold_in(key(seed), crc32(name)).")
_CHUNK = flags.DEFINE_integer("chunk", 100_000, "Trials per vmapped batch.")
_OUT = flags.DEFINE_string("out", "results/audit.jsonl",
                           "JSON-lines file, one record appended per spec.")
_TABLE = flags.DEFINE_string("table", "docs/privacy_audit.md",
                             "Markdown page rewritten after every spec "
                             "(empty: none).")


def main(argv):
  del argv
  command = "python -m launch.audit " + " ".join(sys.argv[1:])
  records = run_audits(only=_ONLY.value, trials=_TRIALS.value,
                       seed=_SEED.value, chunk=_CHUNK.value, out=_OUT.value,
                       table=_TABLE.value, command=command.strip())
  bad = [r["name"] for r in records if failed(r)]
  if bad:
    print(f"AUDIT FAILED for: {', '.join(bad)}", file=sys.stderr)
    sys.exit(1)
  print(f"all {len(records)} audits passed", file=sys.stderr)


if __name__ == "__main__":
  common.run_cli(main)
