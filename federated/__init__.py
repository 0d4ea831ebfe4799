"""Federated simulation: participants as a leading array axis, aggregation."""

from dpcore import lazy

_SUBMODULES = ("aggregation", "ddgsgd", "distributed", "feddpdr", "fedsgd",
               "partition", "secagg", "sharding")

__getattr__, __dir__, __all__ = lazy.attach(__name__, _SUBMODULES)
