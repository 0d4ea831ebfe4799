"""Running a function under JAX's 32-bit and 64-bit modes and comparing.

The exact samplers and the encoders built on them (:mod:`dpcore.discrete`,
:mod:`dpcore.lattice`, :mod:`dpcore.ddg`, :mod:`dpcore.rotation`) must
draw the same words and do the same integer arithmetic whether or not
``jax_enable_x64`` is on, so a key gives bitwise the same release in both.
"""

import jax
import numpy as np


def outputs_in_both_modes(f):
  """``f()``'s array leaves as NumPy arrays, under x32 and under x64."""
  runs = []
  for x64 in (False, True):
    with jax.enable_x64(x64):
      runs.append([np.asarray(a) for a in jax.tree.leaves(f())])
  return runs


def assert_same_in_both_modes(f):
  """``f()`` under x64 equals it under x32: dtypes, shapes and bits."""
  x32, x64 = outputs_in_both_modes(f)
  assert len(x32) == len(x64)
  for a, b in zip(x32, x64, strict=True):
    assert (a.dtype, a.shape) == (b.dtype, b.shape)
    np.testing.assert_array_equal(a, b)
    assert a.tobytes() == b.tobytes()
