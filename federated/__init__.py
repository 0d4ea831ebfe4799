"""Federated simulation: participants as a leading array axis, aggregation."""
