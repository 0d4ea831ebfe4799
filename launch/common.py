"""Shared plumbing for launch scripts: JSON-lines output, timing, resuming.

Every run ends by printing one JSON object as its last stdout line and
appending the same object to an ``--out`` file, so results are never lost
and plots are drawn from files, not memory.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence

import jax
import numpy as np


def _jsonable(value):
  if isinstance(value, dict):
    return {str(k): _jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_jsonable(v) for v in value]
  if isinstance(value, (np.ndarray, jax.Array)):
    return _jsonable(np.asarray(value).tolist())
  if isinstance(value, (np.floating, float)):
    v = float(value)
    return v if math.isfinite(v) else str(v)
  if isinstance(value, np.integer):
    return int(value)
  if isinstance(value, np.bool_):
    return bool(value)
  return value


def to_json(record: dict) -> str:
  """One-line JSON of ``record`` (arrays and NumPy scalars converted)."""
  return json.dumps(_jsonable(record), sort_keys=False)


def append_jsonl(path: str | None, record: dict) -> None:
  """Appends ``record`` as one JSON line to ``path`` (dirs created)."""
  if not path:
    return
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  with open(path, "a", encoding="utf-8") as f:
    f.write(to_json(record) + "\n")
    f.flush()


def emit_record(record: dict, out: str | None) -> None:
  """Appends to ``out`` and prints the record as the last stdout line."""
  append_jsonl(out, record)
  print(to_json(record), flush=True)


def read_jsonl(path: str) -> list[dict]:
  """All records of a JSON-lines file (missing file: empty list)."""
  if not path or not os.path.exists(path):
    return []
  records = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if line:
        try:
          records.append(json.loads(line))
        except json.JSONDecodeError:
          continue  # a line cut by an interrupted write
  return records


def record_key(record: dict, fields: Sequence[str]) -> tuple:
  """Hashable identity of a run from its settings."""
  return tuple(json.dumps(_jsonable(record.get(f)), sort_keys=True)
               for f in fields)


def done_keys(path: str, fields: Sequence[str]) -> set[tuple]:
  """Keys of runs already in ``path``, so an interrupted sweep can resume."""
  return {record_key(r, fields) for r in read_jsonl(path)}


def block(tree):
  """Waits for every array in ``tree`` (for honest timings)."""
  return jax.block_until_ready(tree)


def timed(fn: Callable, *args, repeats: int = 1, **kwargs):
  """Runs ``fn`` once to compile, then ``repeats`` times to time it.

  Returns:
    ``(result, compile_seconds, seconds)`` where ``compile_seconds`` is the
    first call's wall time (compilation plus one run) and ``seconds`` the
    median wall time of the timed calls.
  """
  start = time.perf_counter()
  result = block(fn(*args, **kwargs))
  compile_seconds = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    result = block(fn(*args, **kwargs))
    times.append(time.perf_counter() - start)
  return result, compile_seconds, float(np.median(times))


def progress(message: str) -> None:
  """A progress line on stderr (stdout is kept for the JSON records)."""
  print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr,
        flush=True)


def parse_floats(text: str | Iterable) -> list[float]:
  """``"0.1,0.5"`` → ``[0.1, 0.5]`` (lists pass through)."""
  if isinstance(text, str):
    return [float(t) for t in text.split(",") if t.strip()]
  return [float(t) for t in text]


def parse_ints(text: str | Iterable) -> list[int]:
  if isinstance(text, str):
    return [int(t) for t in text.split(",") if t.strip()]
  return [int(t) for t in text]
