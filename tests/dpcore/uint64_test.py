"""dpcore.uint64: word-pair arithmetic against Python's integers."""

import jax.numpy as jnp
import numpy as np

from dpcore import uint64


def _words(values):
  return (jnp.asarray([v >> 32 for v in values], jnp.uint32),
          jnp.asarray([v & 0xFFFFFFFF for v in values], jnp.uint32))


def _value(hi, lo, i):
  return (int(hi[i]) << 32) | int(lo[i])


def test_word_arithmetic_matches_python_ints():
  rng = np.random.default_rng(0)
  a = rng.integers(0, 2 ** 32, 500, dtype=np.uint64)
  b = rng.integers(0, 2 ** 32, 500, dtype=np.uint64)
  hi, lo = uint64.mul32(jnp.asarray(a, jnp.uint32),
                        jnp.asarray(b, jnp.uint32))
  for i in range(500):
    prod = int(a[i]) * int(b[i])
    assert (int(hi[i]), int(lo[i])) == (prod >> 32, prod & 0xFFFFFFFF)
  q = [int(x) for x in rng.integers(1, 2 ** 62, 500, dtype=np.uint64)]
  q[:3] = [1, 3, 2 ** 62 + 12345]
  p = [int(a[i]) * int(b[i]) for i in range(500)]
  (oh, ol), (rh, rl) = uint64.divmod64(*_words(p), *_words(q))
  for i in range(500):
    assert (_value(oh, ol, i), _value(rh, rl, i)) == divmod(p[i], q[i])


def test_compare_subtract_split_and_smear_match_python_ints():
  rng = np.random.default_rng(1)
  a = [int(x) for x in rng.integers(0, 2 ** 63, 300, dtype=np.uint64)]
  b = [int(x) for x in rng.integers(0, 2 ** 63, 300, dtype=np.uint64)]
  a[:3], b[:3] = [5, 2 ** 32, 2 ** 40 + 1], [5, 2 ** 32 - 1, 2 ** 40 + 2]
  (ah, al), (bh, bl) = _words(a), _words(b)
  less = uint64.lt64(ah, al, bh, bl)
  dh, dl = uint64.sub64(ah, al, bh, bl)
  for i in range(300):
    assert bool(less[i]) == (a[i] < b[i])
    assert _value(dh, dl, i) == (a[i] - b[i]) % 2 ** 64
  hi, lo = uint64.split64(2 ** 40 + 7)
  assert (int(hi), int(lo)) == (2 ** 8, 7)
  for x in (1, 2, 5, 2 ** 20 + 3, 2 ** 31):
    assert int(uint64.smear(uint64.u32(x))) == 2 ** x.bit_length() - 1


def _signed(hi, lo, i):
  value = _value(hi, lo, i)
  return value - 2 ** 64 if value >= 2 ** 63 else value


def test_signed_add_and_rounded_shift_match_python_ints():
  rng = np.random.default_rng(2)
  a = [int(x) for x in rng.integers(-2 ** 50, 2 ** 50, 400)]
  v = [int(x) for x in rng.integers(-2 ** 31, 2 ** 31, 400)]
  a[:4], v[:4] = [0, -1, 2 ** 32 - 1, -2 ** 32], [-1, 1, 1, -(2 ** 31)]
  hi, lo = _words([x % 2 ** 64 for x in a])
  sh, sl = uint64.add_int32(hi, lo, jnp.asarray(v, jnp.int32))
  for i in range(400):
    assert _signed(sh, sl, i) == a[i] + v[i]
  # round half up, or an exact multiple; only results that fit in int32.
  for shift in (-7, 0, 1, 5, 18, 31, 32, 33, 47):
    rounded = uint64.shift_round(hi, lo, shift)
    for i in range(400):
      want = (a[i] + (1 << (shift - 1))) >> shift if shift > 0 else (
          a[i] << -shift)
      if -2 ** 31 <= want < 2 ** 31:
        assert int(rounded[i]) == want, (a[i], shift)
  ties = _words([5 % 2 ** 64, -5 % 2 ** 64, -6 % 2 ** 64])
  # 2.5 → 3, −2.5 → −2, −3 → −3: half up, not half to even or away.
  assert [int(r) for r in uint64.shift_round(*ties, 1)] == [3, -2, -3]
