"""Comparing an accounted ε (or a σ calibrated through an accountant) with
a figure pinned on another machine.

The PLD and RDP accountants (``dp_accounting``) sum many floats, through
NumPy/SciPy FFTs and reductions whose order depends on the CPU and the
BLAS/FFT build, so the same events give an ε that moves in the 10th–11th
digit from one machine to another (issue #32: 3.503045867593377 against
3.5030458677540453, 5e-11 relative). :func:`accounted` allows a relative
change of 1e-8: 200 times that drift, and 16 times below the smallest
change the pinned tests must see (one extra truncation event of 1e-12
moves Fed DP-SGD's ε by 1.6e-7 relative, ``tests/federated/fedsgd_test``).
Keys, integer draws and counts stay compared bitwise.
"""

import pytest

ACCOUNTED_REL = 1e-8


def accounted(value: float):
  """``pytest.approx(value, rel=ACCOUNTED_REL)``: see the module."""
  return pytest.approx(value, rel=ACCOUNTED_REL)
