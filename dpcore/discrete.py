"""Exact integer noise: discrete Laplace and discrete Gaussian samplers.

Float noise added to a float query leaks through its low bits (Mironov
2012). The remedy (Canonne, Kamath & Steinke 2020, "CKS") is to round the
query to a grid, add *integer* noise drawn exactly, and release integers.
Every sampler here is CKS's rejection algorithm run on 32-bit words: each
random decision is a Bernoulli(p/q) decided by comparing a uniform integer
in [0, q) with p, and the uniform integers are drawn by rejection from
random bits (masked to the next power of two), so they are exactly uniform.
No float probability is computed anywhere in a sampler; 64-bit products
and the 64-by-64-bit division of the discrete Gaussian's acceptance
exponent are built from pairs of uint32 words (the division is read from
a host-side table of exact Python-integer divisions for the proposals
|y| ≤ 64·t + 64, and done by word-level long division beyond).

>>> import jax
>>> z = discrete_gaussian(jax.random.key(0), (4,), sigma=3)
>>> z.dtype, z.shape
(dtype('int32'), (4,))

Parameters are host-side rationals (``int``, ``fractions.Fraction`` or a
float that is exactly such a fraction, e.g. 2.5), validated when the
sampler is called; a float such as 3.7296 has a 50-bit denominator and is
refused: round it *up* with :func:`round_up` (more noise, never less).

=====================  ========================  =================  =========
sampler                returns                   exact for          draws/s
=====================  ========================  =================  =========
``bernoulli_exp``      bool, P(1) = exp(−n/d)    0 ≤ n < 2⁶³,       0.8–1.6 M
                                                 1 ≤ d < 2³¹        (n/d=3/2)
``discrete_laplace``   int32, ∝ e^(−|z|/t)       t = a/b, a, b ≤    0.25–0.6M
                                                 2³⁰, t ≤ 2²³       (t = 2)
``discrete_gaussian``  int32, ∝ e^(−z²/2σ²)      σ = p/q, σ² = n/d  45–120 k
                                                 n < 2³¹, (⌊σ⌋+1)d  (σ = 3),
                                                 < 2³⁰, cut-off ok  44–70 k
                                                 (p ≤ ~17 000)      (σ=1049)
``gaussian_mechanism`` int32 lattice points      as the Gaussian
``laplace_mechanism``  int32 lattice points      as the Laplace
=====================  ========================  =================  =========

(float ``dpcore.noise.gaussian_noise``: 11–14 M draws/s on the same CPU.)

Cut-off. Integers live in 32-bit words, so a candidate whose magnitude
would leave the word is *rejected* (the rejection loop draws again). A
rejection sampler whose proposals are restricted to a set S returns the
target law conditioned on S, so the samplers return the exact law
conditioned on |z| ≤ ``MAX_MAGNITUDE`` (discrete Laplace) or on
|z| ≤ L(σ) = ⌊(2³²−1)/((⌊σ⌋+1)q²)⌋ (discrete Gaussian). The mass removed is
checked host-side to be below ``MAX_CUTOFF_MASS`` = 2⁻¹²⁸ per draw (the same
order as the float samplers' 2⁻¹²³ of :mod:`dpcore.noise`); a parameter
for which it is not is refused. Nothing else is approximate.

Cost: draws/s above are for 10⁵ draws per call, jit-compiled, second call
timed, on the 2-core development CPU under load from other jobs (ranges
over three runs of ``python -m dpcore.discrete``). Each sampler is one
``lax.while_loop`` stepping every element through CKS's algorithm, so a
batch costs as many steps as its slowest element: 20–30× (Laplace) and
100–300× (Gaussian) slower than the float samplers.

References:
  Canonne, Kamath & Steinke, The Discrete Gaussian for Differential
  Privacy, NeurIPS 2020 (Algorithms 1–3, Theorems 14–15).
  Mironov, On Significance of the Least Significant Bits for Differential
  Privacy, CCS 2012.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from dpcore import accounting, validation

MAX_MAGNITUDE = 2 ** 30 - 1
"""Largest |noise| any sampler returns (the cut-off described above)."""

MAX_CUTOFF_MASS = 2.0 ** -128
"""Largest probability mass per draw a parameter may cut off."""

_U32 = jnp.uint32
_ALL = 0xFFFFFFFF


# -- host-side parameters ------------------------------------------------------


def as_fraction(x, name: str) -> Fraction:
  """``x`` (int, Fraction or float) as an exact positive Fraction."""
  if isinstance(x, bool) or not isinstance(x, (int, float, Fraction)):
    try:
      x = float(x)  # numpy scalars, 0-d arrays
    except (TypeError, ValueError):
      raise ValueError(f"{name} must be a number, got {x!r}.") from None
  if isinstance(x, float) and not math.isfinite(x):
    raise ValueError(f"{name} must be finite, got {x!r}.")
  f = Fraction(x)
  if f <= 0:
    raise ValueError(f"{name} must be > 0, got {x!r}.")
  return f


def round_up(x, denominator: int = 1) -> Fraction:
  """The smallest multiple of 1/denominator that is ≥ x (more noise)."""
  f = as_fraction(x, "x")
  if not isinstance(denominator, int) or denominator < 1:
    raise ValueError(f"denominator must be an int ≥ 1, got {denominator!r}.")
  return Fraction(-((-f.numerator * denominator) // f.denominator),
                  denominator)


def _log_tail(threshold: int, inv_scale: float, square: bool) -> float:
  """log of a bound on P(|Z| > threshold) for the unnormalised pmf.

  Σ_{z>L} e^(−z/t) ≤ e^(−(L+1)/t)/(1 − e^(−1/t)); for the Gaussian,
  e^(−z²/2σ²) ≤ e^(−(L+1)(z)/2σ²) for z ≥ L+1, the same geometric sum.
  The normalising constant is ≥ 1 (the z = 0 term), and there are two
  tails.
  """
  rate = inv_scale * ((threshold + 1) if square else 1.0)
  return (math.log(2.0) - (threshold + 1) * rate
          - math.log(-math.expm1(-rate)))


class LaplaceParams(NamedTuple):
  """Discrete Laplace scale t = num/den as the words the sampler uses."""
  num: int
  den: int


class GaussianParams(NamedTuple):
  """Discrete Gaussian σ² = n/d and the constants CKS Algorithm 3 needs.

  ``t`` = ⌊σ⌋ + 1 (the Laplace proposal's scale), ``td`` = t·d, ``limit``
  the largest |y| whose t·d·|y| fits 32 bits, ``m`` = 2·n·d·t² (the
  acceptance exponent is (|y|·t·d − n)²/m).
  """
  n: int
  d: int
  t: int
  td: int
  limit: int
  m: int


def laplace_params(scale) -> LaplaceParams:
  """Validates a discrete Laplace scale (see the module's table)."""
  f = as_fraction(scale, "scale")
  if f.numerator > 2 ** 30 or f.denominator > 2 ** 30:
    raise ValueError(
        f"scale={scale!r} = {f.numerator}/{f.denominator}: numerator and "
        f"denominator must be ≤ 2^30; round it with "
        f"discrete.round_up(scale, denominator).")
  if _log_tail(MAX_MAGNITUDE, 1.0 / float(f), square=False) > math.log(
      MAX_CUTOFF_MASS):
    raise ValueError(f"scale={scale!r} is too large: the cut-off at |z| "
                     f"≤ 2^30 - 1 would remove more than 2^-128 (keep "
                     f"scale ≤ 2^23).")
  return LaplaceParams(f.numerator, f.denominator)


def gaussian_params(sigma) -> GaussianParams:
  """Validates a discrete Gaussian σ (see the module's table)."""
  f = as_fraction(sigma, "sigma")
  sq = f * f
  n, d = sq.numerator, sq.denominator
  t = math.floor(f) + 1
  td = t * d
  hint = ("round σ up to a coarser rational with discrete.round_up(sigma, "
          "denominator), or use a coarser grid")
  if n >= 2 ** 31 or td >= 2 ** 30:
    raise ValueError(f"sigma={sigma!r} = {f}: σ² = {n}/{d} and (⌊σ⌋+1)·"
                     f"{d} must stay below 2^31 and 2^30; {hint}.")
  limit = min((2 ** 32 - 1) // td, MAX_MAGNITUDE)
  m = 2 * n * d * t * t
  if m >= 2 ** 63:
    raise ValueError(f"sigma={sigma!r}: 2σ²·d²·t² = {m} ≥ 2^63; {hint}.")
  log_mass = _log_tail(limit, 1.0 / (2.0 * float(sq)), square=True)
  if log_mass > math.log(MAX_CUTOFF_MASS):
    raise ValueError(
        f"sigma={sigma!r} = {f}: the 32-bit cut-off at |z| ≤ {limit} "
        f"removes more than 2^-128 of the mass (numerator too large); "
        f"{hint}.")
  return GaussianParams(n, d, t, td, limit, m)


def cutoff_mass(*, sigma=None, scale=None) -> float:
  """Bound on the mass per draw the 32-bit cut-off removes (host-side)."""
  if (sigma is None) == (scale is None):
    raise ValueError("give exactly one of sigma and scale.")
  if sigma is not None:
    p = gaussian_params(sigma)
    return math.exp(_log_tail(p.limit, p.d / (2.0 * p.n), square=True))
  p = laplace_params(scale)
  return math.exp(_log_tail(MAX_MAGNITUDE, p.den / p.num, square=False))


# -- 32/64-bit word arithmetic -------------------------------------------------


def _u32(x):
  return jnp.asarray(x, _U32)


def _split64(value: int):
  return _u32(value >> 32), _u32(value & _ALL)


def _smear(x):
  """All bits below the highest set bit of x set (x ≥ 0)."""
  for shift in (1, 2, 4, 8, 16):
    x = x | (x >> shift)
  return x


def _lt64(ah, al, bh, bl):
  return (ah < bh) | ((ah == bh) & (al < bl))


def _sub64(ah, al, bh, bl):
  borrow = (al < bl).astype(_U32)
  return ah - bh - borrow, al - bl


def _mul32(a, b):
  """The 64-bit product of two uint32 as (hi, lo)."""
  mask = _u32(0xFFFF)
  a0, a1, b0, b1 = a & mask, a >> 16, b & mask, b >> 16
  p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
  mid = (p00 >> 16) + (p01 & mask) + (p10 & mask)  # < 3·2¹⁶, no overflow
  lo = (p00 & mask) | (mid << 16)
  hi = p11 + (p01 >> 16) + (p10 >> 16) + (mid >> 16)
  return hi, lo


def _divmod64(ph, pl, qh, ql):
  """(P // Q, P mod Q) for 64-bit P and 1 ≤ Q < 2⁶³, by long division."""
  def body(i, state):
    rh, rl, oh, ol = state
    bit = 63 - i
    word = jnp.where(bit >= 32, ph, pl)
    b = (word >> (bit % 32).astype(_U32)) & 1
    rh, rl = (rh << 1) | (rl >> 31), (rl << 1) | b  # R < 2⁶³: no overflow
    take = ~_lt64(rh, rl, qh, ql)
    sh, sl = _sub64(rh, rl, qh, ql)
    rh, rl = jnp.where(take, sh, rh), jnp.where(take, sl, rl)
    one = take.astype(_U32)
    oh = oh | jnp.where(bit >= 32, one << (bit % 32).astype(_U32), 0)
    ol = ol | jnp.where(bit < 32, one << (bit % 32).astype(_U32), 0)
    return rh, rl, oh, ol
  zero = jnp.zeros(jnp.shape(ph), _U32)
  rh, rl, oh, ol = lax.fori_loop(0, 64, body, (zero, zero, zero, zero))
  return (oh, ol), (rh, rl)


# -- exact samplers as flat state machines ----------------------------------
#
# Each sampler is one ``lax.while_loop`` over the whole batch. Every step
# draws fresh words for every element (``fold_in(key, step)``) and moves each
# unfinished element one step through CKS's algorithm; a uniform draw that
# is rejected (masked bits ≥ the bound) makes its element redo the step with
# the next words, which keeps it exactly uniform. Nested loops of the
# algorithms become phases of the state, so a batch costs about as many
# steps as its slowest element needs, not the product of the loops' maxima.


def _words(key, step, n, num):
  return jax.random.bits(jax.random.fold_in(key, step), (num, n), _U32)


def _below(word, bound):
  """Masked candidate for a uniform in [0, bound) and whether it is valid."""
  value = word & _smear(bound - 1)
  return value, value < bound


class _BernState(NamedTuple):
  step: jax.Array
  count_hi: jax.Array   # Bernoulli(exp(−1)) successes so far (64-bit)
  count_lo: jax.Array
  k: jax.Array          # CKS Algorithm 1's K
  done: jax.Array
  result: jax.Array


def _bernoulli_exp_batch(key, active, nh, nl, rh, rl, qh, ql):
  """Bernoulli(exp(−(N + R/Q))) per element, for active elements.

  N (64-bit) integer part: N independent Bernoulli(exp(−1)), each by CKS
  Algorithm 1 (γ = 1, so only the Bernoulli(1/K) factor is drawn); then
  Bernoulli(exp(−R/Q)), 0 ≤ R < Q < 2⁶³, by Algorithm 1 with
  Bernoulli(γ/K) drawn as Bernoulli(R/Q) ∧ Bernoulli(1/K).
  Inactive elements return False.
  """
  n = active.shape[0]
  zero = jnp.zeros((n,), _U32)
  one = jnp.ones((n,), _U32)
  mh, ml = _sub64(qh, ql, _u32(0), _u32(1))
  mask_h = _smear(mh)
  mask_l = jnp.where(mh > 0, _u32(_ALL), _smear(ml))

  def cond(s):
    return ~jnp.all(s.done)

  def body(s):
    w = _words(key, s.step, n, 3)
    in_int = _lt64(s.count_hi, s.count_lo, nh, nl)
    vh, vl = w[0] & mask_h, w[1] & mask_l
    ok_q = _lt64(vh, vl, qh, ql) | in_int
    c, ok_k = _below(w[2], s.k)
    valid = ~s.done & ok_q & ok_k
    hit = (c == 0) & (in_int | _lt64(vh, vl, rh, rl))
    grow = valid & hit
    end = valid & ~hit
    odd = (s.k & 1) == 1
    # End of one Algorithm-1 run: in the integer part an odd K is one more
    # success (count += 1, K = 1), an even K a failure (result False); in
    # the fractional part the result is "K is odd".
    next_lo = s.count_lo + 1
    next_hi = s.count_hi + (next_lo == 0).astype(_U32)
    success = end & in_int & odd
    finish = end & (~in_int | ~odd)
    return _BernState(
        s.step + 1,
        jnp.where(success, next_hi, s.count_hi),
        jnp.where(success, next_lo, s.count_lo),
        jnp.where(grow, s.k + 1, jnp.where(success, one, s.k)),
        s.done | finish,
        jnp.where(finish, ~in_int & odd, s.result))

  init = _BernState(jnp.uint32(0), zero, zero, one, ~active,
                    jnp.zeros((n,), bool))
  return lax.while_loop(cond, body, init).result


def bernoulli_exp(key: jax.Array, shape, *, numerator: int,
                  denominator: int) -> jax.Array:
  """I.i.d. exact Bernoulli(exp(−numerator/denominator)) booleans.

  Args:
    key: PRNG key (consumed).
    shape: output shape.
    numerator: integer 0 ≤ n < 2⁶³.
    denominator: integer 1 ≤ d < 2³¹.
  """
  for value, name, low, high in ((numerator, "numerator", 0, 2 ** 63),
                                 (denominator, "denominator", 1, 2 ** 31)):
    if isinstance(value, bool) or not isinstance(value, int) or not (
        low <= value < high):
      raise ValueError(f"{name} must be an int in [{low}, {high}), got "
                       f"{value!r}.")
  shape = tuple(shape)
  size = math.prod(shape)
  whole, rest = divmod(numerator, denominator)
  nh, nl = _split64(whole)
  rh, rl = _split64(rest)
  qh, ql = _split64(denominator)
  out = _bernoulli_exp_batch(key, jnp.ones((size,), bool), nh, nl, rh, rl,
                             qh, ql)
  return out.reshape(shape)


class _LapState(NamedTuple):
  step: jax.Array
  phase: jax.Array      # 0: draw U; 1: Bern(exp(−U/t)); 2: the V loop; 3: done
  u: jax.Array
  k: jax.Array
  y: jax.Array
  r: jax.Array
  value: jax.Array


class _Step(NamedTuple):
  """One step's random words, and what the Laplace proposal does with them."""
  words: jax.Array      # (3, n) uint32 words of this step
  c_t: jax.Array        # a uniform candidate below t (from words[0])
  negative: jax.Array   # the proposal's sign bit (from words[2])
  take_u: jax.Array     # phase 0 → 1: U drawn uniform in [0, t)
  keep: jax.Array       # phase 1 → 2: Bernoulli(exp(−U/t)) came out 1
  drop: jax.Array       # phase 1 → 0: it came out 0 (reject the proposal)
  more: jax.Array       # phase 2: one more Bernoulli(exp(−1)) success
  stop: jax.Array       # phase 2 ends: V is complete
  grow: jax.Array       # a 1/K trial hit: K grows by one


def _proposal_step(key, s, n: int, t) -> _Step:
  """Phases 0–2 (CKS Algorithm 2) of a sampler state ``s``, one step.

  Shared by :func:`_laplace_batch` and :func:`_gaussian_batch`, whose states
  both carry ``step``, ``phase``, ``u`` and ``k``: draws the step's three
  words per element and reads from them uniform candidates below t and
  below ``s.k`` (each valid where ``_below`` says so) and the sign.
  """
  w = _words(key, s.step, n, 3)
  c_t, ok_t = _below(w[0], t)
  c_k, ok_k = _below(w[1], s.k)
  negative = (w[2] >> 31) == 1
  p0, p1, p2 = s.phase == 0, s.phase == 1, s.phase == 2
  # phase 0: U uniform in [0, t).
  take_u = p0 & ok_t
  # phase 1: Bernoulli(exp(−U/t)) by Algorithm 1.
  v1 = p1 & ok_t & ok_k
  hit1 = (c_t < s.u) & (c_k == 0)
  end1 = v1 & ~hit1
  keep = end1 & ((s.k & 1) == 1)
  drop = end1 & ((s.k & 1) == 0)
  # phase 2: V counts Bernoulli(exp(−1)) successes (γ = 1: only 1/K).
  v2 = p2 & ok_k
  hit2 = c_k == 0
  end2 = v2 & ~hit2
  more = end2 & ((s.k & 1) == 1)
  stop = end2 & ((s.k & 1) == 0)
  return _Step(w, c_t, negative, take_u, keep, drop, more, stop,
               (v1 & hit1) | (v2 & hit2))


def _laplace_batch(key, active, num: int, den: int):
  """Discrete Laplace of scale num/den (CKS Algorithm 2) per active element.

  Y = ⌊(U + num·V)/den⌋ is accumulated one V at a time as a quotient and a
  remainder < den (no word above num + den is formed); a candidate whose
  Y exceeds ``MAX_MAGNITUDE`` is rejected, as are (sign −, Y = 0).
  """
  n = active.shape[0]
  t = _u32(num)
  s_ = _u32(den)
  zero = jnp.zeros((n,), _U32)
  one = jnp.ones((n,), _U32)

  def cond(s):
    return jnp.any(s.phase < 3)

  def body(s):
    _, c_t, negative, take_u, keep, drop1, more, stop, grow = (
        _proposal_step(key, s, n, t))
    r_more = s.r + t
    y_more = s.y + r_more // s_
    r_more = r_more % s_
    too_big = more & (y_more > MAX_MAGNITUDE)
    reject = drop1 | too_big | (stop & negative & (s.y == 0))
    accept = stop & ~(negative & (s.y == 0))
    signed = jnp.where(negative, -s.y.astype(jnp.int32),
                       s.y.astype(jnp.int32))
    phase = jnp.where(take_u, 1, s.phase)
    phase = jnp.where(keep, 2, phase)
    phase = jnp.where(reject, 0, phase)
    phase = jnp.where(accept, 3, phase)
    k = jnp.where(grow, s.k + 1, s.k)
    k = jnp.where(take_u | keep | more | reject, one, k)
    return _LapState(
        s.step + 1, phase,
        jnp.where(take_u, c_t, s.u), k,
        jnp.where(keep, s.u // s_, jnp.where(more, y_more, s.y)),
        jnp.where(keep, s.u % s_, jnp.where(more, r_more, s.r)),
        jnp.where(accept, signed, s.value))

  init = _LapState(jnp.uint32(0), jnp.where(active, 0, 3).astype(jnp.int32),
                   zero, one, zero, zero, jnp.zeros((n,), jnp.int32))
  return lax.while_loop(cond, body, init).value


def _flat_size(shape):
  shape = tuple(shape)
  return shape, math.prod(shape)


def discrete_laplace(key: jax.Array, shape, *, scale) -> jax.Array:
  """I.i.d. int32 draws with P(z) ∝ exp(−|z|/scale), exactly.

  Args:
    key: PRNG key (consumed).
    shape: output shape.
    scale: t > 0 as an exact rational a/b, a, b ≤ 2³⁰, t ≤ 2²³
      (validated host-side; see the module docstring for the cut-off).
  """
  p = laplace_params(scale)
  shape, size = _flat_size(shape)
  return _laplace_batch(key, jnp.ones((size,), bool), p.num,
                        p.den).reshape(shape)


class _GaussState(NamedTuple):
  step: jax.Array
  phase: jax.Array      # 0–2: Laplace proposal (as _LapState); 3: accept
  u: jax.Array          # with exp(−E); 4: done
  k: jax.Array
  y: jax.Array
  r: jax.Array
  value: jax.Array
  count_hi: jax.Array   # Bernoulli(exp(−1)) successes of the acceptance
  count_lo: jax.Array
  eh: jax.Array         # E = N + R/m: N (64-bit) and R (64-bit)
  el: jax.Array
  fh: jax.Array
  fl: jax.Array


_TABLE_MAX = 1 << 16


def _exponent_table(p: GaussianParams):
  """(N, R) of (|y|·t·d − n)² = N·m + R for |y| ≤ a table bound (host)."""
  size = min(p.limit, 64 * p.t + 64, _TABLE_MAX - 1) + 1
  rows = []
  for a in range(size):
    q, r = divmod((a * p.td - p.n) ** 2, p.m)
    rows.append((q >> 32, q & _ALL, r >> 32, r & _ALL))
  table = jnp.asarray(rows, _U32)
  return size, table


def _gaussian_batch(key, size: int, p: GaussianParams):
  """Discrete Gaussian N_Z(0, n/d) (CKS Algorithm 3), as one flat machine.

  Each element runs its own sequence of proposals: the discrete Laplace
  steps of :func:`_laplace_batch` (scale t, den 1), then the acceptance
  Bernoulli(exp(−E)) steps of :func:`_bernoulli_exp_batch`, back to a new
  proposal on rejection. E's integer and fractional parts come from a
  host-side table of exact divisions for |y| up to 64·t + 64 and from the
  word-level long division beyond (a ``lax.cond`` that essentially never
  runs).
  """
  n = size
  t = _u32(p.t)
  mh, ml = _split64(p.m)
  n_word = _u32(p.n)
  td = _u32(p.td)
  table_size, table = _exponent_table(p)
  zero = jnp.zeros((n,), _U32)
  one = jnp.ones((n,), _U32)
  m1h, m1l = _sub64(mh, ml, _u32(0), _u32(1))
  mask_h = _smear(m1h)
  mask_l = jnp.where(m1h > 0, _u32(_ALL), _smear(m1l))

  def exponent(a, wanted):
    small = a < table_size
    row = table[jnp.where(small, a, 0)]

    def divide():
      scaled = jnp.where(a <= p.limit, a, 0) * td
      u = jnp.where(scaled >= n_word, scaled - n_word, n_word - scaled)
      uh, ul = _mul32(u, u)
      (qh, ql), (rh, rl) = _divmod64(uh, ul, jnp.broadcast_to(mh, (n,)),
                                     jnp.broadcast_to(ml, (n,)))
      return jnp.stack([qh, ql, rh, rl], axis=1)

    big = lax.cond(jnp.any(wanted & ~small), divide,
                   lambda: jnp.zeros((n, 4), _U32))
    return jnp.where(small[:, None], row, big)

  def cond(s):
    return jnp.any(s.phase < 4)

  def body(s):
    # Laplace proposal (CKS Algorithm 2 with s = 1: Y = U + t·V).
    w, c_t, negative, take_u, keep, drop1, more, stop, grow = (
        _proposal_step(key, s, n, t))
    p3 = s.phase == 3
    y_more = s.y + t
    too_big = more & (y_more > p.limit)
    fits = (s.y <= p.limit) & ~(negative & (s.y == 0))
    proposed = stop & fits
    drop2 = too_big | (stop & ~fits)
    signed = jnp.where(negative, -s.y.astype(jnp.int32),
                       s.y.astype(jnp.int32))
    e = exponent(s.y, proposed)
    # Acceptance: Bernoulli(exp(−(N + R/m))) (as _bernoulli_exp_batch,
    # reading the 1/K candidate from w[2] and the 64-bit one from w[0:2]).
    c_a, ok_a = _below(w[2], s.k)
    in_int = _lt64(s.count_hi, s.count_lo, s.eh, s.el)
    vh, vl = w[0] & mask_h, w[1] & mask_l
    ok_q = _lt64(vh, vl, mh, ml) | in_int
    v3 = p3 & ok_q & ok_a
    hit3 = (c_a == 0) & (in_int | _lt64(vh, vl, s.fh, s.fl))
    end3 = v3 & ~hit3
    odd = (s.k & 1) == 1
    success = end3 & in_int & odd
    finish = end3 & (~in_int | ~odd)
    accepted = finish & ~in_int & odd
    rejected = finish & ~accepted
    next_lo = s.count_lo + 1
    next_hi = s.count_hi + (next_lo == 0).astype(_U32)

    phase = jnp.where(take_u, 1, s.phase)
    phase = jnp.where(keep, 2, phase)
    phase = jnp.where(drop1 | drop2 | rejected, 0, phase)
    phase = jnp.where(proposed, 3, phase)
    phase = jnp.where(accepted, 4, phase)
    k = jnp.where(grow | (v3 & hit3), s.k + 1, s.k)
    k = jnp.where(take_u | keep | more | drop1 | drop2 | proposed | success
                  | rejected, one, k)
    return _GaussState(
        s.step + 1, phase,
        jnp.where(take_u, c_t, s.u), k,
        jnp.where(keep, s.u, jnp.where(more, y_more, s.y)),
        s.r,
        jnp.where(proposed, signed, s.value),
        jnp.where(proposed, 0, jnp.where(success, next_hi, s.count_hi)),
        jnp.where(proposed, 0, jnp.where(success, next_lo, s.count_lo)),
        jnp.where(proposed, e[:, 0], s.eh),
        jnp.where(proposed, e[:, 1], s.el),
        jnp.where(proposed, e[:, 2], s.fh),
        jnp.where(proposed, e[:, 3], s.fl))

  init = _GaussState(jnp.uint32(0), jnp.zeros((n,), jnp.int32), zero, one,
                     zero, zero, jnp.zeros((n,), jnp.int32), zero, zero,
                     zero, zero, zero, zero)
  return lax.while_loop(cond, body, init).value


def discrete_gaussian(key: jax.Array, shape, *, sigma) -> jax.Array:
  """I.i.d. int32 draws with P(z) ∝ exp(−z²/2σ²), exactly.

  CKS Algorithm 3: propose y from the discrete Laplace of scale
  t = ⌊σ⌋ + 1 and accept with probability
  exp(−(|y| − σ²/t)²/2σ²) = exp(−(|y|·t·d − n)²/m) for σ² = n/d,
  m = 2·n·d·t² (see :func:`_gaussian_batch`).

  Args:
    key: PRNG key (consumed).
    shape: output shape.
    sigma: σ > 0 as an exact rational (validated host-side by
      :func:`gaussian_params`; round a float up with :func:`round_up`).
  """
  p = gaussian_params(sigma)
  shape, size = _flat_size(shape)
  if size == 0:
    return jnp.zeros(shape, jnp.int32)
  return _gaussian_batch(key, size, p).reshape(shape)


# -- grid mechanisms -----------------------------------------------------------


def check_granularity(granularity) -> float:
  """γ must be a power of two 2^k with −40 ≤ k ≤ 40 (exact in float32)."""
  if isinstance(granularity, bool) or not isinstance(
      granularity, (int, float)):
    raise ValueError(f"granularity must be a power of two, got "
                     f"{granularity!r}.")
  g = float(granularity)
  if not (math.isfinite(g) and g > 0):
    raise ValueError(f"granularity must be a power of two > 0, got {g!r}.")
  mantissa, exponent = math.frexp(g)
  if mantissa != 0.5 or not -40 <= exponent - 1 <= 40:
    raise ValueError(
        f"granularity must be a power of two 2^k with -40 <= k <= 40 (so "
        f"grid values are exact floats), got {g!r}; e.g. 2**-10.")
  return g


def lattice_l2_sensitivity(sensitivity: float, *, granularity,
                           dim: int) -> float:
  """L2 sensitivity, in grid units, of a d-dim query rounded to the grid.

  Nearest rounding moves each coordinate by at most ½, so two neighbours'
  rounded queries differ per coordinate by at most |δᵢ|/γ + 1 (and by 0
  where δᵢ = 0): the bound is Δ/γ + √d (triangle inequality with the
  all-ones vector). Note: not Δ/γ + √d/2 — the two roundings can move in
  opposite directions (0.495 → 0, 0.505 → 1).
  """
  g = check_granularity(granularity)
  if not (isinstance(dim, int) and dim >= 1):
    raise ValueError(f"dim must be an int ≥ 1, got {dim!r}.")
  return float(sensitivity) / g + math.sqrt(dim)


def lattice_l1_sensitivity(sensitivity: float, *, granularity,
                           dim: int) -> float:
  """L1 sensitivity in grid units after nearest rounding: Δ₁/γ + d."""
  g = check_granularity(granularity)
  if not (isinstance(dim, int) and dim >= 1):
    raise ValueError(f"dim must be an int ≥ 1, got {dim!r}.")
  return float(sensitivity) / g + dim


def to_lattice(value, granularity: float) -> jax.Array:
  """round(value/γ) as int32, clipped to ±2³⁰ (a contraction) and NaN → 0.

  The clip and NaN map are applied identically to every data set and do
  not increase the distance between neighbours' rounded queries.
  """
  v = jnp.asarray(value)
  if not jnp.issubdtype(v.dtype, jnp.floating):
    v = v.astype(jnp.float32)
  scaled = jnp.round(v / jnp.asarray(granularity, v.dtype))
  limit = float(2 ** 30)
  scaled = jnp.where(jnp.isnan(scaled), 0.0, jnp.clip(scaled, -limit, limit))
  return scaled.astype(jnp.int32)


def from_lattice(z, granularity: float, dtype=jnp.float32) -> jax.Array:
  """z·γ as floats: exact when |z| < 2²⁴ (float32) or 2⁵³ (float64).

  Privacy does not depend on it: the integers are the release, and any
  function of them (this one included) is post-processing.
  """
  return jnp.asarray(z).astype(dtype) * jnp.asarray(granularity, dtype)


def gaussian_mechanism(key: jax.Array, value, *, sensitivity: float,
                       sigma, granularity) -> tuple[jax.Array, float]:
  """round(value/γ) + discrete Gaussian noise, as int32 lattice points.

  Args:
    key: PRNG key (consumed).
    value: float query (any shape; d = its size).
    sensitivity: L2 sensitivity Δ of ``value`` (in value units).
    sigma: σ of the noise *in grid units* (exact rational, see
      :func:`gaussian_params`); the noise in value units is σ·γ.
    granularity: grid step γ, a power of two.

  Returns:
    ``(z, lattice_sensitivity)``: int32 lattice points (release z; z·γ by
    :func:`from_lattice`) and Δ/γ + √d, the L2 sensitivity to record
    (``ledger.record_discrete_gaussian(sigma=sigma,
    sensitivity=lattice_sensitivity, ...)``).

  Privacy:
    (Δ_lattice²/2σ²)-zCDP (CKS Theorem 14) for neighbours whose ``value``
    differs by at most Δ in L2 norm, the query being computed exactly
    (see docs/exact_noise.md for float error in the query itself).
  """
  g = check_granularity(granularity)
  shape = jnp.shape(value)
  sens = lattice_l2_sensitivity(sensitivity, granularity=g,
                                dim=max(1, math.prod(shape)))
  z = to_lattice(value, g) + discrete_gaussian(key, shape, sigma=sigma)
  return z, sens


def laplace_mechanism(key: jax.Array, value, *, sensitivity: float, scale,
                      granularity) -> tuple[jax.Array, float]:
  """round(value/γ) + discrete Laplace noise, as int32 lattice points.

  As :func:`gaussian_mechanism`, with ``sensitivity`` the L1 sensitivity
  Δ₁ and ``scale`` t in grid units; the returned lattice sensitivity is
  Δ₁/γ + d and the release is (Δ₁/γ + d)/t-DP (pure).
  """
  g = check_granularity(granularity)
  shape = jnp.shape(value)
  sens = lattice_l1_sensitivity(sensitivity, granularity=g,
                                dim=max(1, math.prod(shape)))
  z = to_lattice(value, g) + discrete_laplace(key, shape, scale=scale)
  return z, sens


# -- calibration (host-side) ---------------------------------------------------


def discrete_gaussian_sigma(*, epsilon: float, delta: float,
                            sensitivity: float, denominator: int = 1
                            ) -> Fraction:
  """Smallest σ (a multiple of 1/denominator) whose zCDP gives (ε, δ).

  The discrete Gaussian is ρ = Δ²/2σ²-zCDP; (ε, δ) is read from ρ by
  :func:`dpcore.accounting.zcdp_epsilon`, the conversion
  :meth:`dpcore.accounting.PrivacyLedger.record_discrete_gaussian` uses.
  """
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  sensitivity = validation.check_positive(sensitivity, "sensitivity")

  def eps_at(sigma):
    return accounting.zcdp_epsilon(
        rho=sensitivity ** 2 / (2 * sigma ** 2), delta=delta)

  lo, hi = 1e-6, 1.0
  while eps_at(hi) > epsilon:
    lo, hi = hi, hi * 2.0
  for _ in range(100):
    mid = 0.5 * (lo + hi)
    if eps_at(mid) > epsilon:
      lo = mid
    else:
      hi = mid
  return round_up(hi, denominator)


__all__ = [
    "GaussianParams", "LaplaceParams", "MAX_CUTOFF_MASS", "MAX_MAGNITUDE",
    "as_fraction", "bernoulli_exp", "check_granularity", "cutoff_mass",
    "discrete_gaussian", "discrete_gaussian_sigma", "discrete_laplace",
    "from_lattice", "gaussian_mechanism", "gaussian_params",
    "laplace_mechanism", "laplace_params", "lattice_l1_sensitivity",
    "lattice_l2_sensitivity", "round_up", "to_lattice",
]


def _benchmark(num: int = 100_000) -> list[tuple[str, float]]:
  """Draws/s of each sampler (second jit call timed), for the docs."""
  import time

  from dpcore import noise
  cases = [
      ("noise.gaussian_noise (float, reference)",
       lambda k: noise.gaussian_noise(k, (num,), stddev=3.0)),
      ("bernoulli_exp n/d = 3/2",
       lambda k: bernoulli_exp(k, (num,), numerator=3, denominator=2)),
      ("discrete_laplace t = 2",
       lambda k: discrete_laplace(k, (num,), scale=2)),
      ("discrete_laplace t = 100",
       lambda k: discrete_laplace(k, (num,), scale=100)),
      ("discrete_gaussian σ = 3",
       lambda k: discrete_gaussian(k, (num,), sigma=3)),
      ("discrete_gaussian σ = 26",
       lambda k: discrete_gaussian(k, (num,), sigma=26)),
      ("discrete_gaussian σ = 1049",
       lambda k: discrete_gaussian(k, (num,), sigma=1049)),
  ]
  out = []
  for name, fn in cases:
    f = jax.jit(fn)
    f(jax.random.key(0)).block_until_ready()
    start = time.perf_counter()
    f(jax.random.key(1)).block_until_ready()
    out.append((name, num / (time.perf_counter() - start)))
  return out


if __name__ == "__main__":
  for case, rate in _benchmark():
    print(f"| {case} | {rate:,.0f} |")
