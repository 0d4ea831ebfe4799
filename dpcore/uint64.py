"""Unsigned 64-bit integer arithmetic on pairs of uint32 words.

JAX runs in 32-bit mode by default, so the exact samplers of
:mod:`dpcore.discrete` hold a 64-bit value as two uint32 arrays, ``hi`` and
``lo`` (value = hi·2³² + lo), and build what they need from 32-bit
operations: comparison, subtraction, the full product of two words and
the long division of two 64-bit values. :func:`add_int32` and
:func:`shift_round` read a pair as a signed (two's complement) value, for
the exact integer sums of :func:`dpcore.lattice.integer_gram`. Every
function works elementwise on arrays of any (equal or broadcastable)
shape and is exact.

>>> import jax.numpy as jnp
>>> hi, lo = mul32(jnp.uint32(2 ** 32 - 1), jnp.uint32(3))
>>> int(hi) * 2 ** 32 + int(lo) == (2 ** 32 - 1) * 3
True
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

U32 = jnp.uint32
"""The word type."""

ALL_ONES = 0xFFFFFFFF
"""The largest word, 2³² − 1 (all 32 bits set)."""


def u32(x):
  """``x`` as a uint32 array."""
  return jnp.asarray(x, U32)


def split64(value: int):
  """A host-side Python int 0 ≤ value < 2⁶⁴ as its words ``(hi, lo)``."""
  return u32(value >> 32), u32(value & ALL_ONES)


def smear(x):
  """All bits below the highest set bit of x set (x ≥ 0)."""
  for shift in (1, 2, 4, 8, 16):
    x = x | (x >> shift)
  return x


def lt64(ah, al, bh, bl):
  """Whether A < B for A = (ah, al) and B = (bh, bl)."""
  return (ah < bh) | ((ah == bh) & (al < bl))


def sub64(ah, al, bh, bl):
  """A − B (mod 2⁶⁴) as ``(hi, lo)``."""
  borrow = (al < bl).astype(U32)
  return ah - bh - borrow, al - bl


def mul32(a, b):
  """The 64-bit product of two uint32 as (hi, lo)."""
  mask = u32(0xFFFF)
  a0, a1, b0, b1 = a & mask, a >> 16, b & mask, b >> 16
  p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
  mid = (p00 >> 16) + (p01 & mask) + (p10 & mask)  # < 3·2¹⁶, no overflow
  lo = (p00 & mask) | (mid << 16)
  hi = p11 + (p01 >> 16) + (p10 >> 16) + (mid >> 16)
  return hi, lo


def add64(ah, al, bh, bl):
  """A + B (mod 2⁶⁴) as ``(hi, lo)``."""
  lo = al + bl
  return ah + bh + (lo < al).astype(U32), lo


def add_int32(hi, lo, v):
  """A + v (mod 2⁶⁴) for A = (hi, lo) and a signed int32 v.

  v is sign-extended to 64 bits, so a pair read as a signed (two's
  complement) value holds the exact sum while it stays within ±2⁶³.
  """
  v = jnp.asarray(v, jnp.int32)
  extend = jnp.where(v < 0, u32(ALL_ONES), u32(0))
  return add64(hi, lo, extend, lax.bitcast_convert_type(v, U32))


def shift_round(hi, lo, shift: int):
  """round(A / 2^shift) as int32, A = (hi, lo) read as signed.

  ``shift`` is a Python int in [−31, 62]: > 0 divides, rounding half up
  (⌊(A + 2^(shift−1)) / 2^shift⌋, an arithmetic shift of the pair); ≤ 0
  multiplies by 2^−shift. Exact whenever the result lies in the int32
  range, which the caller guarantees: the low word of the shifted pair
  is returned.
  """
  if isinstance(shift, bool) or not isinstance(shift, int) or not (
      -31 <= shift <= 62):
    raise ValueError(f"shift must be an int in [-31, 62], got {shift!r}.")
  if shift <= 0:
    return lax.bitcast_convert_type(lo << u32(-shift), jnp.int32)
  hi, lo = add64(hi, lo, *split64(1 << (shift - 1)))
  if shift < 32:
    word = (lo >> u32(shift)) | (hi << u32(32 - shift))
    return lax.bitcast_convert_type(word, jnp.int32)
  return lax.bitcast_convert_type(hi, jnp.int32) >> (shift - 32)


def divmod64(ph, pl, qh, ql):
  """(P // Q, P mod Q) for 64-bit P and 1 ≤ Q < 2⁶³, by long division."""
  def body(i, state):
    rh, rl, oh, ol = state
    bit = 63 - i
    word = jnp.where(bit >= 32, ph, pl)
    b = (word >> (bit % 32).astype(U32)) & 1
    rh, rl = (rh << 1) | (rl >> 31), (rl << 1) | b  # R < 2⁶³: no overflow
    take = ~lt64(rh, rl, qh, ql)
    sh, sl = sub64(rh, rl, qh, ql)
    rh, rl = jnp.where(take, sh, rh), jnp.where(take, sl, rl)
    one = take.astype(U32)
    oh = oh | jnp.where(bit >= 32, one << (bit % 32).astype(U32), 0)
    ol = ol | jnp.where(bit < 32, one << (bit % 32).astype(U32), 0)
    return rh, rl, oh, ol
  zero = jnp.zeros(jnp.shape(ph), U32)
  rh, rl, oh, ol = lax.fori_loop(0, 64, body, (zero, zero, zero, zero))
  return (oh, ol), (rh, rl)


__all__ = [
    "ALL_ONES", "U32", "add64", "add_int32", "divmod64", "lt64", "mul32",
    "shift_round", "smear", "split64", "sub64", "u32",
]
