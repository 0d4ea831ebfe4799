"""Runs the examples in dpcore's module docstrings (they are documentation
and must stay true)."""

import doctest

import pytest

from dpcore import (
    accounting,
    calibration,
    clipping,
    discrete,
    discrete_calibration,
    exponential,
    lattice,
    noise,
    trainer,
    tuning,
    uint64,
    validation,
)


@pytest.mark.parametrize("module", [
    accounting, calibration, clipping, discrete, discrete_calibration,
    exponential, lattice, noise, trainer, tuning, uint64, validation],
    ids=lambda m: m.__name__)
def test_docstring_examples(module):
  result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
  assert result.failed == 0
