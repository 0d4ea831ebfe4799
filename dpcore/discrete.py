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
exponent are built from pairs of uint32 words (:mod:`dpcore.uint64`; the
division is read from a host-side table of exact Python-integer divisions
for the proposals |y| ≤ 64·t + 64, or 2¹⁶ − 1 for a
:class:`GaussianSampler`, and done by word-level long division beyond).
Releasing a float query on a grid with this noise is
:mod:`dpcore.lattice`; σ for an (ε, δ) target is
:func:`dpcore.discrete_calibration.discrete_gaussian_sigma`.

>>> import jax
>>> z = discrete_gaussian(jax.random.key(0), (4,), sigma=3)
>>> z.dtype, z.shape
(dtype('int32'), (4,))

Parameters are host-side rationals (``int``, ``fractions.Fraction`` or a
float that is exactly such a fraction, e.g. 2.5), validated when the
sampler is called; a float such as 3.7296 has a 50-bit denominator and is
refused: round it *up* with :func:`round_up` (more noise, never less).
A rational σ is a constant of the compiled program; to serve every σ with
one program, pass :func:`gaussian_sampler` (σ) instead (its constants
and exponent table as arrays, traced): the same draws, bitwise.

JAX's 64-bit mode (``jax_enable_x64``) changes nothing: every word,
counter and index the samplers carry is explicitly 32-bit (a Python int or
a ``jnp.sum`` would widen to int64 under x64), so a key gives bitwise the
same draws with it or without it.

=====================  ========================  =================  =========
sampler                returns                   exact for          draws/s
=====================  ========================  =================  =========
``bernoulli_exp``      bool, P(1) = exp(−n/d)    0 ≤ n < 2⁶³,       5.0–5.3 M
                                                 1 ≤ d < 2³¹        (n/d=3/2)
``discrete_laplace``   int32, ∝ e^(−|z|/t)       t = a/b, a, b ≤    1.6–1.8 M
                                                 2³⁰, t ≤ 2²³       (t = 2)
``discrete_gaussian``  int32, ∝ e^(−z²/2σ²)      σ = p/q, σ² = n/d  0.92–1.05 M
                                                 n < 2³¹, (⌊σ⌋+1)d  (σ = 3),
                                                 < 2³⁰, cut-off ok  0.88–0.92 M
                                                 (p ≤ ~17 000)      (σ=1049)
=====================  ========================  =================  =========

(float ``dpcore.noise.gaussian_noise``: 41–47 M draws/s on the same CPU.)

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
timed, on the 2-core development CPU, idle (ranges over three runs of
``python -m launch.bench.discrete``, 2026-11-27; under a load of ~6 from
other jobs they were 1.5–2.5× lower). Each sampler is
one ``lax.while_loop`` stepping elements through CKS's algorithm.
``bernoulli_exp`` and ``discrete_laplace`` step every element until the
slowest is done: 8–30× slower than the float sampler. The Gaussian
sampler runs size/16 lanes (at least 1,024) that each take the next
element when theirs is accepted, and an eighth of them for the tail,
with words drawn two per Threefry hash
(:func:`random_words`; :func:`_gaussian_batch`), so a batch costs about
its total number of steps rather than size × its slowest element's:
~45× slower than the float sampler. In the runs under load, where the
lanes drew 360–430 k/s, the one-lane-per-element loop they replaced
drew 190–260 k/s at 10⁵ draws; at 40,960 draws
of σ ≈ 307 (the DDG benchmark's shares) the lanes were 4–5× faster
(figures above taken before the tail's narrower lanes, which saved a
further ~20 % at 40,960 and 25 % at 10⁵ draws).

References:
  Canonne, Kamath & Steinke, The Discrete Gaussian for Differential
  Privacy, NeurIPS 2020 (Algorithms 1–3, Theorems 14–15).
  Mironov, On Significance of the Least Significant Bits for Differential
  Privacy, CCS 2012.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import NamedTuple

import jax
import jax.extend.random as jax_random_ext
import jax.numpy as jnp
import numpy as np
from jax import lax

from dpcore.uint64 import (
    ALL_ONES,
    U32,
    divmod64,
    lt64,
    mul32,
    smear,
    split64,
    sub64,
    u32,
)

MAX_MAGNITUDE = 2 ** 30 - 1
"""Largest |noise| any sampler returns (the cut-off described above)."""

MAX_CUTOFF_MASS = 2.0 ** -128
"""Largest probability mass per draw a parameter may cut off."""


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


# -- exact samplers as flat state machines ----------------------------------
#
# Each sampler is one ``lax.while_loop`` over the whole batch (the
# Gaussian's over refilled lanes, :func:`_gaussian_batch`). Every step
# draws fresh words for every element (``fold_in(key, step)``) and moves each
# unfinished element one step through CKS's algorithm; a uniform draw that
# is rejected (masked bits ≥ the bound) makes its element redo the step with
# the next words, which keeps it exactly uniform. Nested loops of the
# algorithms become phases of the state, so a batch costs about as many
# steps as its slowest element needs, not the product of the loops' maxima.


def _words(key, step, n, num):
  return jax.random.bits(jax.random.fold_in(key, step), (num, n), U32)


def random_words(key: jax.Array, shape) -> jax.Array:
  """I.i.d. uniform uint32 words from ``key``, two per Threefry hash.

  For a Threefry key these are the words threefry2x32(key, 0 … n − 1)
  (what ``jax.random.bits`` returned before ``jax_threefry_partitionable``
  became the default; the partitionable form spends a whole hash per
  word): the same law, i.i.d. uniform 32-bit words, at about a quarter of
  the cost on CPU. Other key implementations use ``jax.random.bits``.
  """
  shape, size = _flat_size(shape)
  if (jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
      and str(jax.random.key_impl(key)) == "threefry2x32" and size > 0):
    words = jax_random_ext.threefry_2x32(jax.random.key_data(key),
                                         lax.iota(U32, size))
    return words.reshape(shape)
  return jax.random.bits(key, shape, U32)


def _below(word, bound):
  """Masked candidate for a uniform in [0, bound) and whether it is valid."""
  value = word & smear(bound - 1)
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
  zero = jnp.zeros((n,), U32)
  one = jnp.ones((n,), U32)
  mh, ml = sub64(qh, ql, u32(0), u32(1))
  mask_h = smear(mh)
  mask_l = jnp.where(mh > 0, u32(ALL_ONES), smear(ml))

  def cond(s):
    return ~jnp.all(s.done)

  def body(s):
    w = _words(key, s.step, n, 3)
    in_int = lt64(s.count_hi, s.count_lo, nh, nl)
    vh, vl = w[0] & mask_h, w[1] & mask_l
    ok_q = lt64(vh, vl, qh, ql) | in_int
    c, ok_k = _below(w[2], s.k)
    valid = ~s.done & ok_q & ok_k
    hit = (c == 0) & (in_int | lt64(vh, vl, rh, rl))
    grow = valid & hit
    end = valid & ~hit
    odd = (s.k & 1) == 1
    # End of one Algorithm-1 run: in the integer part an odd K is one more
    # success (count += 1, K = 1), an even K a failure (result False); in
    # the fractional part the result is "K is odd".
    next_lo = s.count_lo + 1
    next_hi = s.count_hi + (next_lo == 0).astype(U32)
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
  nh, nl = split64(whole)
  rh, rl = split64(rest)
  qh, ql = split64(denominator)
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


def _proposal_step(key, s, n: int, t, words=_words) -> _Step:
  """Phases 0–2 (CKS Algorithm 2) of a sampler state ``s``, one step.

  Shared by :func:`_laplace_batch` and :func:`_gaussian_batch`, whose states
  both carry ``step``, ``phase``, ``u`` and ``k``: draws the step's three
  words per element and reads from them uniform candidates below t and
  below ``s.k`` (each valid where ``_below`` says so) and the sign.
  """
  w = words(key, s.step, n, 3)
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
  t = u32(num)
  s_ = u32(den)
  zero = jnp.zeros((n,), U32)
  one = jnp.ones((n,), U32)

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
  return _rational_laplace(key, size, p.num, p.den).reshape(shape)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _rational_laplace(key, size: int, num: int, den: int):
  """:func:`discrete_laplace`'s draws, one compiled program per (size,
  scale): an eager call compiles its loop once, not at every call."""
  return _laplace_batch(key, jnp.ones((size,), bool), num, den)


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
_DIVIDE_LANES = 128  # lanes of one pass of the long division


def _exponent_rows(p: GaussianParams, size: int) -> list:
  """(N, R) of (|y|·t·d − n)² = N·m + R for |y| < ``size`` (host), as
  four uint32 words each."""
  rows = []
  for a in range(size):
    q, r = divmod((a * p.td - p.n) ** 2, p.m)
    rows.append((q >> 32, q & ALL_ONES, r >> 32, r & ALL_ONES))
  return rows


class GaussianSampler(NamedTuple):
  """A discrete Gaussian σ as arrays, so that one compiled sampler serves
  every σ: made host-side by :func:`gaussian_sampler`, passed through
  ``jit`` as an argument (a pytree) and given to :func:`discrete_gaussian`
  as ``sigma``.

  The uint32 words of :class:`GaussianParams` (t, n, t·d, the cut-off L,
  m = 2·n·d·t² split in two words) and the exponent table at its full
  size (:data:`_TABLE_MAX` rows; |y| up to ``table_size`` − 1 =
  min(L, 2¹⁶ − 1) read from it, beyond by long division). Every entry is
  an exact Python-integer division, as for a rational σ, so the draws of
  a key are the same bitwise.
  """
  t: jax.Array
  n: jax.Array
  td: jax.Array
  limit: jax.Array
  m_hi: jax.Array
  m_lo: jax.Array
  table_size: jax.Array
  table: jax.Array


def gaussian_sampler(sigma) -> GaussianSampler:
  """σ (an exact rational, validated as by :func:`gaussian_params`) as a
  :class:`GaussianSampler` (host-side; about 0.1 s for the table)."""
  p = gaussian_params(sigma)
  size = min(p.limit, _TABLE_MAX - 1) + 1
  table = np.zeros((_TABLE_MAX, 4), np.uint32)
  table[:size] = np.asarray(_exponent_rows(p, size), np.uint32)
  word = np.uint32
  return GaussianSampler(word(p.t), word(p.n), word(p.td), word(p.limit),
                         word(p.m >> 32), word(p.m & ALL_ONES), word(size),
                         table)


def _constants(sigma) -> GaussianSampler:
  """What :func:`_gaussian_step` reads: a sampler's arrays, or for a
  rational σ the same fields with the cut-off and the table size as
  Python ints and a table of 64·t + 64 rows (constants of the program)."""
  if isinstance(sigma, GaussianSampler):
    return GaussianSampler(*(jnp.asarray(v, U32) for v in sigma))
  p = gaussian_params(sigma)
  size = min(p.limit, 64 * p.t + 64, _TABLE_MAX - 1) + 1
  mh, ml = split64(p.m)
  return GaussianSampler(u32(p.t), u32(p.n), u32(p.td), p.limit, mh, ml,
                         size, jnp.asarray(_exponent_rows(p, size), U32))


def _gaussian_words(key, step, n, num):
  return random_words(jax.random.fold_in(key, step), (num, n))


_REFILL_MIN = 1024
_REFILL_DIV = 16
_TAIL_DIV = 8
_TAIL_MIN = 64


def _lanes(size: int) -> int:
  """Lanes of the Gaussian machine: size/16, at least 1,024, at most size."""
  return min(size, max(_REFILL_MIN, size // _REFILL_DIV))


def _fresh_state(width: int) -> _GaussState:
  zero = jnp.zeros((width,), U32)
  return _GaussState(jnp.uint32(0), jnp.zeros((width,), jnp.int32), zero,
                     jnp.ones((width,), U32), zero, zero,
                     jnp.zeros((width,), jnp.int32), zero, zero, zero, zero,
                     zero, zero)


def _gaussian_step(key, p: GaussianSampler):
  """One step of every lane of :func:`_gaussian_batch`: ``state -> state``.

  A lane in phase 0–2 advances its discrete Laplace proposal (scale t);
  one in phase 3 its acceptance Bernoulli(exp(−E)); phase 4 is accepted,
  its value in ``value``. The constants (t, m, the exponent table) are
  made once, outside the loop.
  """
  t, mh, ml, n_word, td = p.t, p.m_hi, p.m_lo, p.n, p.td
  table_size, table = p.table_size, p.table
  one = u32(1)
  m1h, m1l = sub64(mh, ml, u32(0), u32(1))
  mask_h = smear(m1h)
  mask_l = jnp.where(m1h > 0, u32(ALL_ONES), smear(m1l))

  def exponent(a, wanted):
    n = a.shape[0]
    small = a < table_size
    rows = table[jnp.where(small, a, 0)]
    if isinstance(p.limit, int) and p.limit < table_size:
      return rows  # a rational σ whose table reaches L: nothing to divide
    width = min(n, _DIVIDE_LANES)

    def divide(c):
      rows, need = c
      pick = jnp.nonzero(need, size=width, fill_value=n)[0]
      lane = jnp.minimum(pick, n - 1)
      scaled = jnp.where(a[lane] <= p.limit, a[lane], 0) * td
      u = jnp.where(scaled >= n_word, scaled - n_word, n_word - scaled)
      uh, ul = mul32(u, u)
      (qh, ql), (rh, rl) = divmod64(uh, ul, jnp.broadcast_to(mh, (width,)),
                                     jnp.broadcast_to(ml, (width,)))
      rows = rows.at[pick].set(jnp.stack([qh, ql, rh, rl], axis=1),
                               mode="drop")
      return rows, need.at[pick].set(False, mode="drop")

    # The lanes past the table, by word-level long division, at most
    # _DIVIDE_LANES a time, while any is left. A loop that has nothing to
    # do runs no iteration, under a vmap too (a cond on the lanes would
    # become a select there and divide every lane at every step).
    return lax.while_loop(lambda c: jnp.any(c[1]), divide,
                          (rows, wanted & ~small))[0]

  def body(s):
    n = s.phase.shape[0]
    # Laplace proposal (CKS Algorithm 2 with s = 1: Y = U + t·V).
    w, c_t, negative, take_u, keep, drop1, more, stop, grow = (
        _proposal_step(key, s, n, t, _gaussian_words))
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
    in_int = lt64(s.count_hi, s.count_lo, s.eh, s.el)
    vh, vl = w[0] & mask_h, w[1] & mask_l
    ok_q = lt64(vh, vl, mh, ml) | in_int
    v3 = p3 & ok_q & ok_a
    hit3 = (c_a == 0) & (in_int | lt64(vh, vl, s.fh, s.fl))
    end3 = v3 & ~hit3
    odd = (s.k & 1) == 1
    success = end3 & in_int & odd
    finish = end3 & (~in_int | ~odd)
    accepted = finish & ~in_int & odd
    rejected = finish & ~accepted
    next_lo = s.count_lo + 1
    next_hi = s.count_hi + (next_lo == 0).astype(U32)

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

  return body


def _run_lanes(step, size: int):
  """``size`` accepted values of the lane machine ``step`` (int32).

  :func:`_lanes` (size) lanes run ``step`` together; a lane whose element
  is accepted (phase 4) writes its value out and restarts from a fresh
  state on the next element not yet started. Once every element has
  started and at most W/8 are unfinished, their states move to W/8 lanes
  for the tail.
  """
  width = _lanes(size)
  narrow = width // _TAIL_DIV if width // _TAIL_DIV >= _TAIL_MIN else 0

  def refill_body(c):
    s, lanes, following, values = c
    s = step(s)
    done = (s.phase == 4) & (lanes < size)  # accepted this step
    values = values.at[jnp.where(done, lanes, size)].set(s.value,
                                                         mode="drop")
    # Counts are int32 in both modes (x64 would widen a sum to int64 and
    # break the loop's carry).
    new = following + jnp.cumsum(done, dtype=jnp.int32) - 1
    take = done & (new < size)
    lanes = jnp.where(take, new, jnp.where(done, size, lanes))
    s = jax.tree.map(lambda a, f: a if a.ndim == 0 else jnp.where(take, f, a),
                     s, _fresh_state(s.phase.shape[0]))
    return s, lanes, following + jnp.sum(done, dtype=jnp.int32), values

  def busy(c):  # until all are done, or all started and few still running
    active = c[0].phase < 4
    return jnp.any(active) & ((c[2] < size)
                              | (jnp.sum(active, dtype=jnp.int32) > narrow))

  c = lax.while_loop(busy, refill_body, (
      _fresh_state(width), jnp.arange(width, dtype=jnp.int32),
      jnp.int32(width), jnp.zeros((size,), jnp.int32)))
  if narrow:  # the tail: the unfinished elements' states on fewer lanes
    s, lanes, following, values = c
    pick = jnp.nonzero(s.phase < 4, size=narrow,
                       fill_value=width)[0].astype(jnp.int32)
    real = pick < width
    pick = jnp.minimum(pick, width - 1)
    s = jax.tree.map(lambda a: a if a.ndim == 0 else a[pick], s)
    c = lax.while_loop(
        lambda c: jnp.any(c[0].phase < 4), refill_body,
        (s._replace(phase=jnp.where(real, s.phase, 4)),
         jnp.where(real, lanes[pick], size), following, values))
  return c[3]


def _gaussian_batch(key, size: int, p: GaussianSampler):
  """Discrete Gaussian N_Z(0, n/d) (CKS Algorithm 3), as one flat machine.

  Each element runs its own sequence of proposals: the discrete Laplace
  steps of :func:`_laplace_batch` (scale t, den 1), then the acceptance
  Bernoulli(exp(−E)) steps of :func:`_bernoulli_exp_batch`, back to a new
  proposal on rejection. E's integer and fractional parts come from a
  host-side table of exact divisions (|y| up to 64·t + 64 for a rational
  σ, up to 2¹⁶ − 1 for a :class:`GaussianSampler`) and from the
  word-level long division beyond, in a loop over the few lanes that
  need it that essentially never iterates (also under ``vmap``), and is
  not built for a rational σ whose table reaches the cut-off L.

  Lanes: the machine has W = :func:`_lanes` (size) lanes (size/16, at
  least 1,024), each running one element; a lane whose element is
  accepted writes the value out and takes the next element not yet
  started, from a fresh state. A draw takes ~18 steps on average at
  σ ≈ 307 but the slowest of 40,960 ~160, so one full-width lane per
  element would spend ~90 % of its steps waiting for the slowest; with
  refills the lanes stay busy until the last W elements have started.
  Then, once at most W/8 are unfinished, their states move to W/8 lanes
  (a second loop) for the tail. Every step
  draws fresh words for every lane (:func:`random_words` of
  ``fold_in(key, step)``), so each element meets i.i.d. uniform words
  at every step of its own run, whichever lane runs it and from which
  step: the law is exactly that of one lane per element; only the words
  an element meets differ.
  """
  return _run_lanes(_gaussian_step(key, p), size)


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
      :func:`gaussian_params`; round a float up with :func:`round_up`),
      or a :class:`GaussianSampler` of one (:func:`gaussian_sampler`),
      which may be traced: one compiled program for every σ, the same
      draws.
  """
  if isinstance(sigma, GaussianSampler):
    p, draw = _constants(sigma), _gaussian_batch
  else:
    gaussian_params(sigma)  # a bad σ is refused here, before any tracing
    p, draw = as_fraction(sigma, "sigma"), _rational_gaussian
  shape, size = _flat_size(shape)
  if size == 0:
    return jnp.zeros(shape, jnp.int32)
  return draw(key, size, p).reshape(shape)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _rational_gaussian(key, size: int, sigma: Fraction):
  """:func:`discrete_gaussian`'s draws for a rational σ, one compiled
  program per (size, σ) with σ's constants and table in it: an eager call
  compiles its loops once, not at every call."""
  return _gaussian_batch(key, size, _constants(sigma))


__all__ = [
    "GaussianParams", "GaussianSampler", "LaplaceParams", "MAX_CUTOFF_MASS",
    "MAX_MAGNITUDE", "as_fraction", "bernoulli_exp", "cutoff_mass",
    "discrete_gaussian", "discrete_laplace", "gaussian_params",
    "gaussian_sampler", "laplace_params", "random_words", "round_up",
]
