"""Joining a multi-process run with a limit on the wait (no flags).

``jax.distributed.initialize`` blocks until every process has registered
with the coordinator (process 0's service) and, at its own deadline,
aborts the whole process with a C++ fatal log, not a Python exception.
:func:`join` therefore says at once what the process waits for, reports
at a steady rate while it waits, and at ``timeout_s`` ends the process
itself with one ``error:`` line naming the processes that did not join
(JAX's deadline is set past ours, so it never fires first).

JAX does not say which processes have registered: process 0 can only
name the others as missing; any other process tells whether the
coordinator answers at all (process 0 not started) by opening a TCP
connection to its address.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import threading
import time

DEFAULT_TIMEOUT_S = 300.0
"""The default of ``--coordinator_timeout``: JAX's own default wait."""

PROGRESS_EVERY_S = 30.0
"""Seconds between two "still waiting" lines."""

_JAX_MARGIN_S = 60
"""JAX's deadline is ours plus this, so that ours ends the wait."""


def _missing(ids) -> str:
  """``process 1 did not join`` / ``not all of processes 1, 2 joined``."""
  ids = list(ids)
  if len(ids) == 1:
    return f"process {ids[0]} did not join"
  named = (", ".join(map(str, ids)) if len(ids) <= 8
           else f"{ids[0]} … {ids[-1]}")
  return (f"not all of processes {named} joined (JAX does not say which "
          f"did)")


def coordinator_answers(address: str, *, timeout_s: float = 1.0) -> bool:
  """Whether a TCP connection to ``host:port`` opens (the service is up)."""
  host, _, port = address.rpartition(":")
  try:
    with socket.create_connection((host.strip("[]"), int(port)),
                                  timeout=timeout_s):
      return True
  except (OSError, ValueError):
    return False


def missing_message(coordinator_address: str | None,
                    num_processes: int | None, process_id: int | None, *,
                    timeout_s: float, flag: str = "--coordinator_timeout",
                    answers: bool | None = None) -> str:
  """The one line a process ends with when the wait runs out.

  ``answers``: whether the coordinator answered (asked only by a process
  other than 0; None: not known).
  """
  waited = f"after {timeout_s:g} s"
  fix = f"or raise {flag}"
  if num_processes is None:
    return (f"{waited}, not every process of the cluster's run joined the "
            f"coordinator JAX detected; start them all, {fix}.")
  who = f"process {process_id} of {num_processes}"
  others = [i for i in range(num_processes) if i != process_id]
  start = (f"start them with --coordinator_address={coordinator_address} "
           f"--num_processes={num_processes}")
  if process_id == 0:
    return (f"{who}: {waited} at the coordinator {coordinator_address}, "
            f"{_missing(others)}; {start}, {fix}.")
  if answers is False:
    return (f"{who}: {waited}, the coordinator {coordinator_address} never "
            f"answered: process 0 did not start; start it with "
            f"--coordinator_address={coordinator_address} "
            f"--num_processes={num_processes} --process_id=0, {fix}.")
  rest = [i for i in others if i != 0] or [0]
  return (f"{who}: {waited} at the coordinator {coordinator_address}, "
          f"{_missing(rest)}; {start}, {fix}.")


def join(coordinator_address: str | None, num_processes: int | None,
         process_id: int | None, *, timeout_s: float = DEFAULT_TIMEOUT_S,
         progress_every_s: float = PROGRESS_EVERY_S,
         flag: str = "--coordinator_timeout", initialize=None) -> None:
  """Joins the run, or ends the process with one ``error:`` line.

  Args:
    coordinator_address, num_processes, process_id: as
      ``jax.distributed.initialize`` (all None: the cluster's settings);
      checked by the caller.
    timeout_s: seconds to wait for every process to join.
    progress_every_s: seconds between two "still waiting" lines.
    flag: the setting's name in the messages.
    initialize: the joining call (default ``jax.distributed.initialize``;
      tests pass a stand-in).
  """
  from launch import common  # noqa: PLC0415
  if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s)
          and timeout_s > 0):
    raise ValueError(f"{flag}={timeout_s!r}: give the seconds to wait for "
                     f"every process to join, a number > 0 (default "
                     f"{DEFAULT_TIMEOUT_S:g}).")
  if initialize is None:
    import jax  # noqa: PLC0415
    initialize = jax.distributed.initialize
  if num_processes is None:
    who, what = "this process", "every process of the cluster's run"
  else:
    who = f"process {process_id} of {num_processes}"
    what = f"the {num_processes} processes"
  where = (f" at the coordinator {coordinator_address}"
           if coordinator_address else "")
  common.progress(f"{who}: waiting for {what} to join{where} (timeout "
                  f"{timeout_s:g} s; {flag})")
  done = threading.Event()
  start = time.monotonic()

  def watch():
    while True:
      left = timeout_s - (time.monotonic() - start)
      if done.wait(max(0.0, min(progress_every_s, left))):
        return
      if time.monotonic() - start >= timeout_s:
        answers = None
        if process_id not in (None, 0) and coordinator_address:
          answers = coordinator_answers(coordinator_address)
        print("error: " + missing_message(
            coordinator_address, num_processes, process_id,
            timeout_s=timeout_s, flag=flag, answers=answers),
              file=sys.stderr, flush=True)
        os._exit(2)  # JAX's wait cannot be interrupted from Python
      common.progress(f"{who}: still waiting{where} "
                      f"({time.monotonic() - start:.0f} s of "
                      f"{timeout_s:g} s)")

  threading.Thread(target=watch, daemon=True, name="join-watch").start()
  try:
    initialize(coordinator_address=coordinator_address,
               num_processes=num_processes, process_id=process_id,
               initialization_timeout=int(math.ceil(timeout_s))
               + _JAX_MARGIN_S)
  finally:
    done.set()
  common.progress(f"{who}: joined ({time.monotonic() - start:.1f} s)")
