"""Federated simulation: participants as a leading array axis, aggregation."""

import importlib

_SUBMODULES = ("aggregation", "distributed", "feddpdr", "fedsgd",
               "partition", "sharding")

__all__ = sorted(_SUBMODULES)


def __getattr__(name: str):
  """Imports a sub-module on first use (``federated.fedsgd``)."""
  if name in _SUBMODULES:
    return importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(__all__))
