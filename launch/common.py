"""Shared plumbing for launch scripts: the command line, JSON-lines output,
timing, resuming.

Every run ends by printing one JSON object as its last stdout line and
appending the same object to an ``--out`` file, so results are never lost
and plots are drawn from files, not memory.

Command line. :func:`run_cli` replaces ``absl.app.run``: a mistake on the
command line, or any argument a library check refuses (``ValueError``,
``FileNotFoundError``, …), ends the script with one line on stderr and exit
status 2, before any heavy work when the script validates first; the
traceback is shown only with ``--debug_traceback``. This module imports no
JAX at import time, so ``--help`` stays fast; scripts import their heavy
modules inside ``main``.

Records. :func:`emit_record` prints a record before writing it, and
:func:`append_jsonl` writes each line with one ``write`` on an append-mode
file; a last line cut by a crash is moved aside to ``PATH.partial`` (and
said so) before the next append, never glued to.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
from absl import app, flags

DEBUG_TRACEBACK = flags.DEFINE_bool(
    "debug_traceback", False,
    "show the full traceback of an error instead of its one-line message")

USAGE_ERRORS = (ValueError, TypeError, KeyError, FileNotFoundError,
                NotADirectoryError, IsADirectoryError, PermissionError,
                OSError, app.UsageError)
"""Exceptions that :func:`run_cli` reports as one line with exit status 2."""


def _one_line(error: BaseException) -> str:
  text = " ".join(str(error).split()) or type(error).__name__
  if isinstance(error, KeyError) and len(error.args) == 1:
    text = f"unknown {error.args[0]!r}"
  return text


def run_cli(main: Callable[[list[str]], None]) -> None:
  """``absl.app.run(main)`` with one-line errors and exit status 2.

  Stray positional arguments are refused. Flag-parsing errors and the
  exceptions in :data:`USAGE_ERRORS` raised by ``main`` print
  ``error: …`` on stderr and exit 2 (``--debug_traceback`` re-raises).
  """
  def wrapped(argv):
    try:
      if len(argv) > 1:
        raise app.UsageError(
            f"unexpected positional argument(s) {' '.join(argv[1:])!r}; "
            f"every setting is a --flag=value (see --help)")
      return main(argv)
    except Exception as e:  # noqa: BLE001  (re-raised unless reportable)
      # USAGE_ERRORS, and a library error whose class says its message
      # names the fix (e.g. objective perturbation's ConvergenceError).
      reportable = isinstance(e, USAGE_ERRORS) or getattr(
          type(e), "reported_in_one_line", False)
      if not reportable or DEBUG_TRACEBACK.value:
        raise
      print(f"error: {_one_line(e)}", file=sys.stderr, flush=True)
      sys.exit(2)
    finally:
      # The work is done: spare the interpreter's exit a garbage
      # collection of every object JAX, SciPy and dp_accounting made
      # (0.7 s of a 2-core CPU's time; atexit handlers still run).
      gc.freeze()

  def flags_parser(argv):
    try:
      return flags.FLAGS(argv)
    except flags.Error as e:
      print(f"error: {_one_line(e)} (see --help)", file=sys.stderr,
            flush=True)
      sys.exit(2)

  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  # JAX logs, at INFO, each accelerator plugin it looked for and did not
  # find ("Unable to initialize backend 'tpu'"): absl's INFO verbosity
  # would print that line, which reads like an error, on every CPU run.
  logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
  asked = [a for a in sys.argv[1:] if a.split("=")[0] in _HELP_FLAGS]
  if asked:  # absl exits 1 after --help; a help request is not an error.
    flags.FLAGS.mark_as_parsed()
    app.usage(shorthelp="--helpfull" not in asked, writeto_stdout=True,
              exitcode=0)
  app.run(wrapped, flags_parser=flags_parser)


_HELP_FLAGS = ("-h", "--help", "-?", "--helpshort", "--helpfull")


def check_output_path(path: str | None, flag: str = "--out", *,
                      required: bool = False) -> None:
  """Refuses an output file that cannot be appended to, before any work.

  Creates the parent directories and opens the file for appending (which
  creates it empty if missing), so a path under a file, a directory or a
  read-only location fails here with the flag's name, not after the run.
  An empty ``path`` means no file, refused where ``required``.
  """
  if not path:
    if required:
      raise ValueError(f"{flag}: give a JSON-lines file path.")
    return
  if os.path.isdir(path):
    raise ValueError(f"{flag}={path!r} is a directory; give a file path, "
                     f"e.g. {os.path.join(path, 'results.jsonl')!r}")
  try:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", encoding="utf-8"):
      pass
  except OSError as e:
    raise ValueError(f"{flag}={path!r} cannot be written: "
                     f"{e.strerror or e}") from None


def _jsonable(value):
  if isinstance(value, dict):
    return {str(k): _jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_jsonable(v) for v in value]
  if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
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


def set_aside_partial_line(path: str) -> str | None:
  """Moves a last line cut off by a crash to ``path + ".partial"``.

  Returns the fragment (None if the file ends cleanly). The file is
  truncated to its last complete line, so the next append starts a line of
  its own.
  """
  if not path or not os.path.exists(path) or os.path.getsize(path) == 0:
    return None
  with open(path, "rb+") as f:
    f.seek(-1, os.SEEK_END)
    if f.read(1) == b"\n":
      return None
    f.seek(0)
    data = f.read()
    cut = data.rfind(b"\n") + 1
    fragment = data[cut:]
    with open(path + ".partial", "ab") as aside:
      aside.write(fragment + b"\n")
    f.truncate(cut)
  progress(f"{path}: its last line was cut off (an interrupted write); "
           f"moved the {len(fragment)}-byte fragment to {path}.partial")
  return fragment.decode("utf-8", "replace")


def append_jsonl(path: str | None, record: dict) -> None:
  """Appends ``record`` as one JSON line to ``path`` (dirs created).

  The line goes out in one ``write`` of an append-mode file; a cut-off
  last line left by an earlier crash is set aside first
  (:func:`set_aside_partial_line`).
  """
  if not path:
    return
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  set_aside_partial_line(path)
  line = (to_json(record) + "\n").encode("utf-8")
  fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  try:
    os.write(fd, line)
  finally:
    os.close(fd)


def emit_record(record: dict, out: str | None) -> None:
  """Prints the record as the last stdout line, then appends it to ``out``.

  Printed first, so a failing write cannot lose it.
  """
  print(to_json(record), flush=True)
  append_jsonl(out, record)


def read_jsonl(path: str) -> list[dict]:
  """All complete records of a JSON-lines file (missing file: empty list).

  A line that is not valid JSON (a write cut off by a crash) is skipped
  and counted in a progress line.
  """
  if not path or not os.path.exists(path):
    return []
  records, bad = [], 0
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if line:
        try:
          records.append(json.loads(line))
        except json.JSONDecodeError:
          bad += 1
  if bad:
    progress(f"{path}: skipped {bad} unreadable line(s) (cut-off writes)")
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
  import jax  # pylint: disable=g-import-not-at-top  (keeps --help fast)
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


class Timings(NamedTuple):
  """What :func:`round_robin` measured, each a dict by path name."""
  first_call: dict  # seconds of the first call: compiling, then one run
  wall: dict  # wall seconds of each timed call, in order
  cpu: dict  # process CPU seconds of each timed call, in order


def round_robin(paths: Mapping[str, Callable[[int | None], object]], *,
                repeats: int, most: Mapping[str, int] | None = None,
                label: str | None = None) -> Timings:
  """Times several paths against each other on a shared machine.

  Each path is called once (its compile), then ``repeats`` rounds call
  every path once in turn, so load from other processes falls on all
  paths alike and their ratios stay meaningful.

  Args:
    paths: name → a call of one path: ``call(None)`` is the first call,
      ``call(r)`` the call of round r = 0, 1, …; its result is waited for.
    repeats: the rounds.
    most: name → the most timed calls of that path (a slow path).
    label: when given, a progress line ``label: compiling NAME`` before
      each first call.
  """
  most = most or {}
  timings = Timings({}, {name: [] for name in paths},
                    {name: [] for name in paths})
  for name, call in paths.items():
    if label is not None:
      progress(f"{label}: compiling {name}")
    start = time.perf_counter()
    block(call(None))
    timings.first_call[name] = time.perf_counter() - start
  for r in range(repeats):
    for name, call in paths.items():
      if len(timings.wall[name]) >= most.get(name, repeats):
        continue
      start, start_cpu = time.perf_counter(), time.process_time()
      block(call(r))
      timings.wall[name].append(time.perf_counter() - start)
      timings.cpu[name].append(time.process_time() - start_cpu)
  return timings


@contextlib.contextmanager
def heavy_imports():
  """Imports inside run with Python's cyclic garbage collector off; the
  modules are then frozen (:func:`gc.freeze`) and the collector is on again.

  JAX, SciPy and dp_accounting create millions of objects that live as long
  as the process; each collection during their import scans every object
  made so far. Imported this way, the main command's imports take about
  0.3 s less on the 2-core CPU, and later collections skip those objects.
  """
  enabled = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    gc.freeze()
    if enabled:
      gc.enable()


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_bytes(text: str, flag: str) -> int:
  """``"8G"``, ``"512M"``, ``"1.5G"`` or a plain number of bytes (> 0)."""
  raw = str(text).strip().upper().removesuffix("B").removesuffix("I")
  unit = raw[-1:] if raw[-1:] in _UNITS and raw[-1:] else ""
  try:
    value = float(raw[:-1] if unit else raw) * _UNITS[unit]
  except ValueError:
    raise ValueError(f"{flag}={text!r} is not a size; give e.g. 8G, 512M "
                     f"or a number of bytes.") from None
  if not (value >= 1 and value < 2**63):
    raise ValueError(f"{flag}={text!r} must be a positive size, e.g. 8G.")
  return int(value)


HEARTBEAT_S = 30.0
"""Seconds between two lines of :func:`heartbeat`."""


@contextlib.contextmanager
def heartbeat(what: str, *, every_s: float = HEARTBEAT_S, progress=None):
  """Within the block, a progress line every ``every_s`` seconds saying
  ``what`` is still running and for how long: a long loop that runs on
  the device (a jitted ``while_loop``) reports at a steady rate without
  any change to the program. ``progress`` prints the lines (e.g.
  :func:`progress`); None, from a caller that reports nothing: no lines."""
  report = progress
  stop = threading.Event()
  start = time.monotonic()

  def beat():
    while not stop.wait(every_s):
      report(f"{what}: still running ({time.monotonic() - start:.0f} s)")

  thread = None
  if report is not None:
    thread = threading.Thread(target=beat, daemon=True, name="heartbeat")
    thread.start()
  try:
    yield
  finally:
    stop.set()
    if thread is not None:
      thread.join()


def progress(message: str) -> None:
  """A progress line on stderr (stdout is kept for the JSON records)."""
  print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr,
        flush=True)


def _parse_list(values, kind, flag, what, example):
  items = values.split(",") if isinstance(values, str) else list(values)
  items = [v.strip() if isinstance(v, str) else v for v in items]
  try:
    return [kind(v) for v in items if v != ""]
  except ValueError:
    shown = ",".join(str(v) for v in items)
    hint = "" if example is None else f", e.g. {flag or 'value'}={example}"
    raise ValueError(f"{flag or 'value'}={shown!r}: expected a "
                     f"comma-separated list of {what}{hint}.") from None


def parse_floats(values: str | Iterable, flag: str | None = None, *,
                 example: str | None = None) -> list[float]:
  """``"0.1,0.5"`` or ``["0.1", "0.5"]`` (a list flag) → ``[0.1, 0.5]``.

  Blank items are dropped. A non-number is refused in one line naming
  ``flag`` (e.g. ``"--epsilons"``) and the list, and showing ``example``
  (e.g. ``"0.5,1,2"``) where one is given. Ranges are the caller's.
  """
  return _parse_list(values, float, flag, "numbers", example)


def parse_ints(values: str | Iterable, flag: str | None = None, *,
               example: str | None = None) -> list[int]:
  """``"1,2"`` or ``["1", "2"]`` → ``[1, 2]``; see :func:`parse_floats`."""
  return _parse_list(values, int, flag, "integers", example)


def read_candidates(path: str, flag: str, keys: Iterable[str], *,
                    example: str) -> list[dict]:
  """The candidate settings of a tuning flag's JSON file, read before any
  data.

  The file holds a non-empty list of non-empty objects whose keys are
  among ``keys`` (``[{"learning_rate": 1}, …]``), or that list as
  ``{"candidates": [...]}``. Every refusal is one line naming
  ``flag=path`` and the fix (``example``: a valid file's text). The values
  are the caller's to check.
  """
  where, allowed = f"{flag}={path}", sorted(keys)
  fix = f"give a JSON list of candidate settings, e.g. {example}"
  try:
    with open(os.path.expanduser(path), encoding="utf-8") as f:
      loaded = json.load(f)
  except FileNotFoundError:
    raise ValueError(f"{where}: no such file; {fix}.") from None
  except json.JSONDecodeError as err:
    raise ValueError(f"{where} is not JSON ({err}); {fix}.") from None
  except (OSError, UnicodeDecodeError) as err:
    raise ValueError(f"{where}: cannot read it ({err}); {fix}.") from None
  if isinstance(loaded, dict) and set(loaded) == {"candidates"}:
    loaded = loaded["candidates"]
  if not isinstance(loaded, list) or not loaded:
    raise ValueError(f"{where}: the candidate list is empty or not a "
                     f"list; {fix}.")
  for i, candidate in enumerate(loaded):
    if not isinstance(candidate, dict) or not candidate:
      raise ValueError(f"{where}: candidate {i} is not a non-empty object "
                       f"of settings ({', '.join(allowed)}).")
    unknown = sorted(set(candidate) - set(allowed))
    if unknown:
      raise ValueError(f"{where}: candidate {i} has unknown setting(s) "
                       f"{unknown}; a candidate may set "
                       f"{', '.join(allowed)}.")
  return loaded


def setting_from_flags(cls, *, flag_values=flags.FLAGS, **parsed):
  """A script's frozen setting ``cls``, read from the flags named as its
  fields.

  Each field takes the value of the flag of its name in ``flag_values``;
  ``parsed`` gives the fields whose flag text is parsed first (lists,
  class pairs, byte sizes). A field with neither is a script's bug,
  refused before any work.

  Raises:
    TypeError: a field of ``cls`` with no flag of its name and no parsed
      value.
  """
  values = dict(parsed)
  for field in dataclasses.fields(cls):
    if not field.init or field.name in values:
      continue
    if field.name not in flag_values:
      raise TypeError(f"{cls.__name__}.{field.name} has no flag "
                      f"--{field.name} and no parsed value.")
    values[field.name] = flag_values[field.name].value
  return cls(**values)
