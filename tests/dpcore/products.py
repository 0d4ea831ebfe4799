"""Finding the float32 matrix products a function traces below full
precision (``dpcore.linalg.full_precision``), tracing it at JAX's default
precision.

The precision is a parameter of each product in the traced program, so
this is checked on any platform, the CPU included, although only some
accelerators compute a product faster and coarser at the default.
"""

import collections

import jax
from jax import lax
from jax.extend import core

_PRODUCTS = ("dot_general", "conv_general_dilated")
_LOW = ("float32", "bfloat16", "float16")


def _inner(eqn):
  for value in eqn.params.values():
    for item in value if isinstance(value, (list, tuple)) else (value,):
      if isinstance(item, core.ClosedJaxpr):
        yield item.jaxpr
      elif isinstance(item, core.Jaxpr):
        yield item


def _full(precision) -> bool:
  if precision is None:
    return False
  pair = precision if isinstance(precision, tuple) else (precision,)
  return all(p == lax.Precision.HIGHEST for p in pair)


def _source(eqn) -> str:
  """``path:function`` of the innermost library frame that traced it."""
  frames = eqn.source_info.traceback.frames if eqn.source_info.traceback \
      else []
  for frame in frames:
    path = frame.file_name.replace("\\", "/")
    for package in ("dpcore/", "mechanisms/", "federated/"):
      at = path.rfind("/" + package)
      if at >= 0 and "/site-packages/" not in path and "/tests/" not in path:
        return f"{path[at + 1:]}:{frame.function_name}"
  return "?"


def below_full_precision(fn, *args) -> collections.Counter:
  """``{source: count}`` of the float32 (or narrower) products that
  ``fn(*args)`` traces at less than ``Precision.HIGHEST``, through every
  nested program (jit, vmap, scan, while, cond, custom derivatives)."""
  found = collections.Counter()

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      if eqn.primitive.name in _PRODUCTS and not _full(
          eqn.params.get("precision")) and any(
              str(v.aval.dtype) in _LOW for v in eqn.invars):
        found[_source(eqn)] += 1
      for inner in _inner(eqn):
        walk(inner)

  # At the platform's default, whatever the suite's setting (conftest):
  # only the library's own markers may ask for more.
  with jax.default_matmul_precision("default"):
    walk(jax.make_jaxpr(fn)(*args).jaxpr)
  return found
