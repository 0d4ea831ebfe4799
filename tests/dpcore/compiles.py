"""Counting the programs XLA compiles while a function runs.

An eager call (outside ``jit``) of a sampler must reuse the program
compiled for its shape the first time, not compile its operations again
at every call.
"""

import itertools

import jax

_FRESH = itertools.count(1)


def compiled(run) -> list:
  """The names of the programs XLA compiled while ``run()`` ran."""
  names = []

  def listen(event, duration, **kwargs):
    del duration
    if event.endswith("backend_compile_duration"):
      names.append(kwargs.get("fun_name"))

  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    run()
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)
  return names


def sees_a_new_program() -> bool:
  """Whether :func:`compiled` sees a program never compiled before (a
  fresh function), so that an empty list from it means something."""
  offset = float(next(_FRESH))  # a constant no program had before
  return bool(compiled(lambda: jax.jit(lambda x: x + offset)(1.0)))
