"""Federated simulation: participants as a leading array axis, aggregation."""

from dpcore import lazy

__getattr__, __dir__, __all__ = lazy.attach(__name__)
