"""Noise samplers whose tails reach as far as the privacy proofs assume.

Pure functions, key first, jit- and vmap-compatible. Scales are keyword
arguments and may be traced values, so a vmap over participants can give
each one its own calibration. Arguments are checked before tracing: the
key must be a PRNG key, the shape a tuple of integers ≥ 0, and a concrete
scale finite and ≥ 0 (a traced one is its caller's to check).

>>> import jax
>>> z = gaussian_noise(jax.random.key(0), (3,), stddev=2.0)
>>> z.shape
(3,)

Why not ``jax.random.normal``. The Gaussian, Laplace and exponential
mechanisms are proved private for noise with unbounded support. A float32
``jax.random.normal`` inverts a uniform on a 2⁻²³ grid and can only return
values in about [−5.42, 5.22]; under a neighbouring data set the mechanism
can then release values the other data set never can. At the analytic-
Gaussian σ for δ = 1e-5 that raises the true δ to 1.5e-5 at ε = 4 and to
1.9e-4 at ε = 8, per release. ``jax.random.laplace`` stops at about 16
scales (a claimed pure ε gets a hidden δ of ~1e-7) and ``jax.random.gumbel``
at about 16.6 on the right, the tail that lets a poor candidate win.

Construction. Every continuous sampler here is a transform of one
"two-sided" uniform per draw: a fair sign bit s and m = min(U, 1 − U) in
(0, ½), taken from 64 random bits (one Threefry block, the same hashing
cost as ``jax.random.normal`` pays for its 32 bits). The sign is the top
bit of the second word; the other 63 bits k (the first word on top) give
m = (k + ½)·2⁻⁶⁴, so m is never 0 and its float32 value keeps full
relative precision down to 2⁻⁶⁵. The one cell
k = 0 (m < 2⁻⁶⁴, probability 2⁻⁶³ per draw) is refined with 60 further
bits to m = (r + ½)·2⁻¹²⁴ ≥ 2⁻¹²⁵ (a normal float32). Each call draws two
refinement blocks, used by the first and the last draw that land in that
cell; only when three or more draws of one call land there (probability
≤ n³·2⁻¹⁹¹ for n draws) do the others stay at m = 2⁻⁶⁵. The sampler is
thus the exact law evaluated at a uniform rounded to this grid; the mass of
the exact law beyond the largest value it can return (its cut-off) is

==========================  ======================  ====================
sampler                     largest value returned  cut-off mass / draw
==========================  ======================  ====================
Gaussian ``−ndtri(m)``      |z| ≤ 12.8966 σ         2·2⁻¹²⁵ = 2⁻¹²⁴
Laplace ``−log(2m)``        |z| ≤ 85.95 b           e^(−85.95) = 2⁻¹²⁴
Exp(1) ``−log U``           E ∈ [2⁻¹²⁵, 86.64]      2⁻¹²⁵ + 2⁻¹²⁵
Gumbel ``−log(−log U)``     G ∈ [−4.4617, 86.64]    2⁻¹²⁵ + 2⁻¹²⁵
==========================  ======================  ====================

(today's float32 ``jax.random.normal``: 5.42, cut-off ≈ 1.2e-7 per draw).
Adding the three-hits event, every draw of a call of at most 2³¹ draws has
cut-off below ``CUTOFF_PER_DRAW = 2⁻¹²³ ≈ 9.4e-38``. Derived samplers:
the symmetric Gaussian matrix uses dim(dim+1)/2 Gaussian draws; the norm
noise of objective/output perturbation draws its Gamma(dim) radius as a sum
of dim Exp(1) draws (so it reaches 86.64·dim scales) and its direction from
dim Gaussian draws: 2·dim draws per vector, one call for any number of
vectors.

Why that is negligible. If a mechanism with exact noise is (ε, δ)-DP and the
sampler's law is within total variation η of it, the sampled mechanism is
(ε, δ + (1 + e^ε)·η)-DP (for any event S, P̃(S) ≤ P(S) + η ≤ e^ε Q(S) + δ +
η ≤ e^ε Q̃(S) + δ + (1 + e^ε)η). Over a whole (adaptive) run η adds up over
all N draws, so the extra δ is at most ``cutoff_delta(ε, N)`` =
(1 + e^ε)·N·2⁻¹²³: below 1e-20 for ε ≤ 10 and N ≤ 10¹², below 1e-12 for
ε ≤ 30 and N ≤ 10¹². A ledger that wants to be exact can add it.

Not covered. Float rounding of the transform and of ``query + noise``
(Mironov 2012: the low bits of a float Laplace sample can reveal the query)
is a separate effect that no float sampler removes; the exact remedy is
integer noise on a grid (discrete Gaussian/Laplace, Canonne, Kamath &
Steinke 2020), provided by :mod:`dpcore.discrete` (the samplers) and
:mod:`dpcore.lattice` (grid mechanisms and their lattice sensitivity;
``docs/exact_noise.md``).

Speed. Draws whose first word is not 0 (all but 2⁻³² of them) have
m ≥ 2⁻³³, and a call in which that holds for every draw (checked by one
min-reduction) takes a fused path with a trimmed ndtri (Cephes without its
t ≥ 8 branch); otherwise a ``lax.cond`` takes the refined, full-ndtri path.
Measured in ``launch/bench/noise.py`` (results/bench_noise.jsonl).

Tail grid. The 2⁻⁶⁴ grid of m is finer than float32 resolution out to
about 7.5σ for the Gaussian (today's 2⁻²³ grid spaces draws 0.08σ apart
already at 5σ); beyond, the reachable values thin out — a rounding effect
of the kind described under "Not covered", not a cut-off.

Random bits. For Threefry keys (JAX's default) the 64 bits of a draw are
both output words of one ``threefry2x32`` block at counter (0, i), and the
refinement blocks are at counters (1, 0) and (1, 1). Other key types fall
back to ``jax.random.bits`` (two words per draw, twice the hashing).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from dpcore import validation

__all__ = [
    "CUTOFF_PER_DRAW",
    "MAX_DRAWS_PER_CALL",
    "coarse_uniform_from_words",
    "cutoff_delta",
    "exponential_from_uniform",
    "exponential_noise",
    "gaussian_from_uniform",
    "gaussian_noise",
    "gumbel_from_uniform",
    "gumbel_noise",
    "laplace_from_uniform",
    "laplace_noise",
    "objective_perturbation_noise",
    "random_words",
    "sphere_uniform",
    "symmetric_from_upper",
    "symmetric_gaussian_noise",
    "two_sided_uniform_from_words",
]

try:  # The Threefry block itself: 64 bits per hash instead of 32.
  from jax.extend.random import threefry2x32_p as _THREEFRY
except ImportError:  # pragma: no cover - older or future JAX
  _THREEFRY = None

CUTOFF_PER_DRAW = 2.0 ** -123
"""Bound on the mass a single draw cuts off (calls of ≤ 2³¹ draws)."""

MAX_DRAWS_PER_CALL = 2 ** 31

_SIGN_BIT = 0x80000000
_LOW31 = 0x7FFFFFFF
_LOW28 = 0x0FFFFFFF


def cutoff_delta(epsilon: float, num_draws: int) -> float:
  """Extra δ from the samplers' cut-off tails, over ``num_draws`` draws.

  (1 + e^ε)·num_draws·2⁻¹²³: the sampled mechanism is (ε, δ + this)-DP when
  the exact-noise mechanism is (ε, δ)-DP (see the module docstring).
  """
  if not epsilon >= 0 or not math.isfinite(epsilon):
    raise ValueError(f"epsilon must be a finite number ≥ 0, got {epsilon!r}.")
  if not num_draws >= 0:
    raise ValueError(f"num_draws must be ≥ 0, got {num_draws!r}.")
  if num_draws == 0:
    return 0.0
  # (1 + e^ε)·N·2⁻¹²³ in logs, so a huge ε gives a huge δ, not an overflow.
  log_mass = math.log(CUTOFF_PER_DRAW) + math.log(num_draws)
  return math.exp(log_mass) + math.exp(min(epsilon + log_mass, 700.0))


# -- random bits ---------------------------------------------------------------


def _typed_key(key):
  if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    return key
  return jax.random.wrap_key_data(key)


def random_words(key: jax.Array, num: int, *, block: int = 0
                 ) -> tuple[jax.Array, jax.Array]:
  """Two uint32[num] arrays: 64 independent random bits per index.

  ``block`` selects a disjoint counter range of the same key (0 for the
  draws, 1 for the refinement words).
  """
  key = _typed_key(key)
  if _THREEFRY is not None and str(jax.random.key_impl(key)) == (
      "threefry2x32"):
    data = jax.random.key_data(key)
    count = lax.iota(jnp.uint32, num)
    return _THREEFRY.bind(data[0], data[1],
                          jnp.full((num,), block, jnp.uint32), count)
  words = jax.random.bits(jax.random.fold_in(key, block), (2, num),
                          jnp.uint32)
  return words[0], words[1]


def _float_dtype(dtype):
  dtype = jax.dtypes.canonicalize_dtype(dtype)
  if not jnp.issubdtype(dtype, jnp.floating):
    raise ValueError(f"dtype must be a floating type, got {dtype}.")
  return jnp.float64 if dtype == jnp.float64 else jnp.float32


def coarse_uniform_from_words(hi, lo, dtype) -> tuple[jax.Array, jax.Array]:
  """The bits → uniform map without refinement (m ≥ 2⁻⁶⁵).

  Args:
    hi, lo: uint32[n] words, one pair per draw.
    dtype: float32 or float64, the arithmetic type.

  Returns:
    ``(upper, m)``: a boolean sign (U ≥ ½, the top bit of ``lo``) and
    m = min(U, 1 − U) = (k + ½)·2⁻⁶⁴ for the 63-bit k = hi·2³¹ + lo mod 2³¹.
  """
  upper = lo >= jnp.uint32(_SIGN_BIT)
  low = lo & jnp.uint32(_LOW31)
  m = hi.astype(dtype) * 2.0 ** -33 + (low.astype(dtype) + 0.5) * 2.0 ** -64
  return upper, m


def two_sided_uniform_from_words(hi, lo, refine_hi, refine_lo, dtype
                                 ) -> tuple[jax.Array, jax.Array]:
  """The bits → uniform map of every continuous sampler here.

  As :func:`coarse_uniform_from_words`, but the first and the last draw
  with k = 0 get m = (r + ½)·2⁻¹²⁴ from the 60-bit r of ``refine_*``
  (uint32[2] each, one pair per slot), so m ≥ 2⁻¹²⁵ always.
  """
  upper, m = coarse_uniform_from_words(hi, lo, dtype)
  hit = (hi == 0) & ((lo & jnp.uint32(_LOW31)) == 0)
  n = hi.shape[0]
  index = lax.iota(jnp.int32, n)
  first = jnp.min(jnp.where(hit, index, n))
  last = jnp.max(jnp.where(hit, index, -1))
  fine = ((refine_hi & jnp.uint32(_LOW28)).astype(dtype) * 2.0 ** -92
          + (refine_lo.astype(dtype) + 0.5) * 2.0 ** -124)
  m = jnp.where(index == first, fine[0],
                jnp.where(index == last, fine[1], m))
  return upper, m


def _sample(transform, key, shape, dtype, *, bulk_transform=None):
  """``transform`` of shape-many two-sided uniforms, in float32 or 64.

  ``bulk_transform``, if given, is used instead when every m ≥ 2⁻³³ (the
  common case); it need only be accurate there.
  """
  validation.check_key(key)
  dtype = _float_dtype(dtype)
  shape = validation.check_shape(shape)
  n = math.prod(shape)
  if n >= MAX_DRAWS_PER_CALL:
    raise ValueError(
        f"shape {shape} asks for {n} draws in one call; at most "
        f"{MAX_DRAWS_PER_CALL - 1} are supported (the cut-off bound assumes "
        f"it). Split the key and draw in pieces.")
  if n == 0:
    return jnp.zeros(shape, dtype)
  return _draws(transform, bulk_transform, key, n, dtype).reshape(shape)


@functools.partial(jax.jit, static_argnums=(0, 1, 3, 4))
def _draws(transform, bulk_transform, key, n, dtype):
  """The n draws of :func:`_sample`, one compiled program per transform,
  n and dtype: called outside ``jit`` (a notebook, a test), the sampler
  compiles once rather than operation by operation; inside a ``jit`` it
  is inlined."""
  hi, lo = random_words(key, n, block=0)
  refine_hi, refine_lo = random_words(key, 2, block=1)

  def refined():
    return transform(*two_sided_uniform_from_words(
        hi, lo, refine_hi, refine_lo, dtype))

  def coarse():
    return (bulk_transform or transform)(
        *coarse_uniform_from_words(hi, lo, dtype))

  # A draw needs refining only if hi = 0 (2⁻³² per draw); the cheap test
  # keeps the common path to one fused pass over the words.
  return lax.cond(jnp.min(hi) == 0, refined, coarse)


# -- transforms (bits → value), shared by the samplers and the tests -----------


def gaussian_from_uniform(upper, m):
  """Standard normal from the two-sided uniform: ±(−ndtri(m))."""
  z = -jax.scipy.special.ndtri(m)
  return jnp.where(upper, z, -z)


# Cephes ndtri's rational approximations (S. L. Moshier, public domain): the
# central one for m > e⁻², the tail one in t = √(−2 log m) for t < 8.
_NDTRI_P0 = (-1.23916583867381258016E0, 1.39312609387279679503E1,
             -5.66762857469070293439E1, 9.80010754185999661536E1,
             -5.99633501014107895267E1)
_NDTRI_Q0 = (-1.18331621121330003142E0, 1.59056225126211695515E1,
             -8.20372256168333339912E1, 2.00260212380060660359E2,
             -2.25462687854119370527E2, 8.63602421390890590575E1,
             4.67627912898881538453E0, 1.95448858338141759834E0, 1.0)
_NDTRI_P1 = (-8.57456785154685413611E-4, -3.50424626827848203418E-2,
             -1.40256079171354495875E-1, 2.18663306850790267539E0,
             1.46849561928858024014E1, 4.40805073893200834700E1,
             5.71628192246421288162E1, 3.15251094599893866154E1,
             4.05544892305962419923E0)
_NDTRI_Q1 = (-9.33259480895457427372E-4, -3.80806407691578277194E-2,
             -1.42182922854787788574E-1, 2.50464946208309415979E0,
             1.50425385692907503408E1, 4.13172038254672030440E1,
             4.53907635128879210584E1, 1.57799883256466749731E1, 1.0)


def _poly(coeffs, x):
  """Σ coeffs[i]·x^i by Horner's rule (lowest degree first)."""
  acc = jnp.full_like(x, coeffs[-1])
  for c in coeffs[-2::-1]:
    acc = acc * x + c
  return acc


def _gaussian_bulk(upper, m):
  """As :func:`gaussian_from_uniform` for m ≥ 2⁻⁴⁶ only, and cheaper.

  ndtri without its third (t ≥ 8) branch and its m > ½ and m = 0 cases,
  which the bulk of draws (m ≥ 2⁻³³, t ≤ 6.8) never needs.
  """
  w = m - 0.5
  ww = w * w
  central = (w + w * ww * (_poly(_NDTRI_P0, ww) / _poly(_NDTRI_Q0, ww))
             ) * -math.sqrt(2.0 * math.pi)
  t = jnp.sqrt(-2.0 * jnp.log(m))
  inv_t = 1.0 / t
  tail = t - jnp.log(t) * inv_t - (
      _poly(_NDTRI_P1, inv_t) / _poly(_NDTRI_Q1, inv_t)) * inv_t
  z = jnp.where(m > math.exp(-2.0), central, tail)
  return jnp.where(upper, z, -z)


def laplace_from_uniform(upper, m):
  """Standard Laplace (density ½e^(−|z|)): ±(−log 2m)."""
  z = -jnp.log(2.0 * m)
  return jnp.where(upper, z, -z)


def exponential_from_uniform(upper, m):
  """Exp(1) as −log U, exact at both ends (U = m or U = 1 − m)."""
  return jnp.where(upper, -jnp.log1p(-m), -jnp.log(m))


def gumbel_from_uniform(upper, m):
  """Standard Gumbel as −log(Exp(1))."""
  return -jnp.log(exponential_from_uniform(upper, m))


# -- samplers ------------------------------------------------------------------


def gaussian_noise(key: jax.Array, shape, *, stddev, dtype=jnp.float32
                   ) -> jax.Array:
  """I.i.d. N(0, stddev²) entries of the given shape, of type ``dtype``.

  Reaches |z| = 12.90·stddev; cut-off ≤ 2⁻¹²³ per entry (module docstring).
  """
  validation.check_scale(stddev, "stddev")
  _check_fits(stddev, shape, "stddev")
  z = _sample(gaussian_from_uniform, key, shape, dtype,
              bulk_transform=_gaussian_bulk)
  return (jnp.asarray(stddev, z.dtype) * z).astype(dtype)


def _check_fits(scale, shape, name: str) -> None:
  """A scale per entry must broadcast to ``shape`` without enlarging it:
  one draw spread over several entries would not be independent noise."""
  shape = validation.check_shape(shape)
  if jnp.broadcast_shapes(jnp.shape(scale), shape) != shape:
    raise ValueError(f"{name} of shape {jnp.shape(scale)} does not fit the "
                     f"noise shape {shape}: each entry needs its own draw; "
                     f"draw the noise in the scale's shape.")


def laplace_noise(key: jax.Array, shape, *, scale, dtype=jnp.float32
                  ) -> jax.Array:
  """I.i.d. Laplace(0, scale) entries (density ∝ exp(−|z|/scale)).

  Reaches |z| = 85.95·scale; cut-off ≤ 2⁻¹²³ per entry, so a claimed pure
  ε holds up to the δ of :func:`cutoff_delta`.
  """
  validation.check_scale(scale, "scale")
  _check_fits(scale, shape, "scale")
  z = _sample(laplace_from_uniform, key, shape, dtype)
  return (jnp.asarray(scale, z.dtype) * z).astype(dtype)


def exponential_noise(key: jax.Array, shape, *, dtype=jnp.float32
                      ) -> jax.Array:
  """I.i.d. Exp(1) entries in [2⁻¹²⁵, 86.64]; cut-off ≤ 2⁻¹²³ per entry."""
  return _sample(exponential_from_uniform, key, shape, dtype).astype(dtype)


def gumbel_noise(key: jax.Array, shape, *, dtype=jnp.float32) -> jax.Array:
  """I.i.d. standard Gumbel entries in [−4.46, 86.64].

  The noise of the Gumbel-max exponential mechanism; cut-off ≤ 2⁻¹²³ per
  entry on the two tails together.
  """
  return _sample(gumbel_from_uniform, key, shape, dtype).astype(dtype)


def symmetric_gaussian_noise(key: jax.Array, dim: int, *, stddev,
                             dtype=jnp.float32) -> jax.Array:
  """A symmetric dim × dim matrix whose upper triangle is i.i.d. N(0, σ²).

  The upper triangle (diagonal included) is drawn and mirrored, so every
  distinct entry of a symmetric query such as XᵀX gets exactly one
  independent draw — the noise matrix of the Analyze-Gauss DP-PCA.
  """
  dim = validation.check_positive_int(dim, "dim")
  # Only the dim(dim+1)/2 distinct entries are drawn (half the bits of a
  # full matrix).
  return symmetric_from_upper(
      gaussian_noise(key, (dim * (dim + 1) // 2,), stddev=stddev,
                     dtype=dtype), dim)


def symmetric_from_upper(distinct: jax.Array, dim: int) -> jax.Array:
  """The symmetric dim × dim matrix whose row-major upper triangle
  (diagonal included) is ``distinct`` (dim(dim+1)/2 entries, the layout
  :func:`symmetric_gaussian_noise` draws). Linear: the matrix of a sum of
  such vectors is the sum of their matrices."""
  dim = validation.check_positive_int(dim, "dim")
  if jnp.shape(distinct) != (dim * (dim + 1) // 2,):
    raise ValueError(f"distinct must have shape ({dim * (dim + 1) // 2},) "
                     f"for dim={dim}, got {jnp.shape(distinct)}.")
  # Entry (i, j) reads entry t(min(i, j), max(i, j)) of the upper triangle.
  i = lax.broadcasted_iota(jnp.int32, (dim, dim), 0)
  j = lax.broadcasted_iota(jnp.int32, (dim, dim), 1)
  row, col = jnp.minimum(i, j), jnp.maximum(i, j)
  return distinct[row * dim - (row * (row - 1)) // 2 + (col - row)]


def sphere_uniform(key: jax.Array, dim: int, *, dtype=jnp.float32
                   ) -> jax.Array:
  """A direction drawn uniformly from the unit sphere in R^dim."""
  dim = validation.check_positive_int(dim, "dim")
  z = gaussian_noise(key, (dim,), stddev=1.0, dtype=dtype)
  return z / jnp.linalg.norm(z)


@functools.lru_cache(maxsize=256)
def _radius_and_direction(count: int, dim: int, gaussian):
  """The transform of :func:`objective_perturbation_noise`'s draws: per
  vector, dim Exp(1) draws (the radius), then dim Gaussian draws (the
  direction), returned flat in the draws' order. One function object per
  (count, dim, gaussian), so the sampler's compiled program is reused."""
  def transform(upper, m):
    upper = upper.reshape(count, 2, dim)
    m = m.reshape(count, 2, dim)
    exp = exponential_from_uniform(upper[:, 0], m[:, 0])
    direction = gaussian(upper[:, 1], m[:, 1])
    return jnp.stack([exp, direction], axis=1).reshape(-1)
  return transform


def objective_perturbation_noise(key: jax.Array, dim: int, *, beta,
                                 num: int | None = None,
                                 dtype=jnp.float32) -> jax.Array:
  """b ∈ R^dim with density ∝ exp(−β ‖b‖): the one sampler of this law.

  Objective perturbation draws it with β = ε′/2, output perturbation with
  β = ε/Δ₂ (:func:`mechanisms.erm.output_perturbation.perturb`).

  Sampled as ‖b‖ ~ Gamma(shape=dim, scale=1/β) times a uniform direction
  (the radial density of exp(−β r) in dim dimensions is ∝ r^{dim−1} e^{−βr}).
  The Gamma(dim) radius is a sum of dim Exp(1) draws, so it reaches
  86.64·dim/β and cuts off at most dim·2⁻¹²³; the direction is dim
  Gaussian draws, normalised. Chaudhuri et al. (2011) use β = ε'/2 for a
  loss with ‖∇ℓ‖ ≤ 1; output perturbation uses β = ε/Δ₂.

  Args:
    key: PRNG key.
    dim: the dimension of b.
    beta: the rate β > 0 (may be traced).
    num: ``None`` for one vector of shape (dim,); an integer ≥ 1 for
      ``num`` independent vectors, shape (num, dim), all drawn by one
      sampler call of 2·num·dim draws (one Threefry pass, one transform:
      what keeps the K fits of a one-vs-rest model cheap to compile under
      ``vmap``). Row i uses draws [2i·dim, 2(i+1)·dim) of that call.
    dtype: float32 or float64.

  References:
    Chaudhuri, Monteleoni & Sarwate, Differentially Private Empirical Risk
    Minimization, JMLR 12, 2011 (Algorithm 2).
  """
  validation.check_key(key)
  dim = validation.check_positive_int(dim, "dim")
  count = 1 if num is None else validation.check_positive_int(num, "num")
  validation.check_scale(beta, "beta", allow_zero=False)

  draws = _sample(_radius_and_direction(count, dim, gaussian_from_uniform),
                  key, (count, 2, dim), dtype,
                  bulk_transform=_radius_and_direction(count, dim,
                                                       _gaussian_bulk))
  radius = jnp.sum(draws[:, 0], axis=-1, keepdims=True)
  radius = radius / jnp.asarray(beta, radius.dtype)
  direction = draws[:, 1]
  direction = direction / jnp.linalg.norm(direction, axis=-1, keepdims=True)
  b = (radius * direction).astype(dtype)
  return b[0] if num is None else b
