"""The 2-D scattering transform of order 2 with a Morlet filter bank.

For an image x and a bank of Morlet wavelets ψ_{j,θ} (scales j = 0 … J−1,
orientations θ = ℓπ/L, ℓ = 0 … L−1) and a Gaussian low-pass φ_J, the
transform is, sampled every 2^J pixels:

* order 0: x ⋆ φ_J (1 channel);
* order 1: |x ⋆ ψ_{j1,θ1}| ⋆ φ_J (J·L channels);
* order 2: ||x ⋆ ψ_{j1,θ1}| ⋆ ψ_{j2,θ2}| ⋆ φ_J for j2 > j1
  (L²·J(J−1)/2 channels).

A 28 × 28 image at J = 2, L = 8 gives 1 + 16 + 64 = 81 channels of 7 × 7.
Channels come in that order: order 0, then order 1 by (j1, θ1), then
order 2 by (j1, θ1, j2, θ2), each index slowest first (kymatio's order, so
a group normalisation over consecutive channels groups the same ones).

Filters (:func:`filter_bank`) are built on the host in the Fourier domain,
in NumPy, from the closed form of a Gaussian's Fourier transform — no data
enters them — and cached per (padded shape, J, L). The Morlet wavelet of
scale j is a Gabor function of width σ = 0.8·2^j, centre frequency
ξ = 3π/(4·2^j) along θ and aspect ("slant") 4/L, minus a multiple of its
Gaussian envelope so that its mean is exactly 0; φ_J is the Gaussian of
width 0.8·2^J with φ̂_J(0) = 1. Each continuous transform is summed over
its 2π-periodic copies, which is sampling the filter on the pixel grid
and wrapping it onto the padded image (a periodic convolution).

Borders: the image is padded by 2^J pixels on each side by reflection
(``jnp.pad(mode="reflect")``, the border pixel not repeated), to a size a
multiple of 2^J; the convolutions are periodic on the padded grid (FFT),
and one output sample (2^J pixels) is cropped on each side. The image
sides must be multiples of 2^J and larger than 2^J.

Subsampling: |x ⋆ ψ_{j1}| is computed at stride 2^{j1} and
||x ⋆ ψ_{j1}| ⋆ ψ_{j2}| at stride 2^{j2}, each exactly (the spectrum of the
product is folded — averaged over its 2^j × 2^j blocks — before the inverse
FFT, which is sampling in space). The convolution that follows a
subsampled modulus is that of the samples with the filter sampled at the
same stride (a Riemann sum of the full-resolution convolution), as in
Bruna & Mallat's and kymatio's implementations: the modulus of a
band-pass signal is nearly band-limited at its wavelet's scale, so little
is lost. Order 0, and everything at j1 = 0 up to the last low-pass, is
exact.

Example::

  s = scattering.scattering(images, J=2, L=8)   # (N, 81, 7, 7), jittable
  s = scattering.transform(images, J=2, L=8, chunk=1024)  # host, chunked
  rows = scattering.flatten(s)                   # (N, 81 · 49)

References:
  Bruna & Mallat, Invariant Scattering Convolution Networks, IEEE TPAMI
  2013.
  Andreux et al., Kymatio: Scattering Transforms in Python, JMLR 2020.
  Tramèr & Boneh, Differentially Private Learning Needs Better Features
  (or Much More Data), ICLR 2021.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import memory, validation

__all__ = [
    "FilterBank", "check_images", "filter_bank", "flatten", "morlet_hat",
    "num_channels",
    "output_shape", "padded_shape", "scattering", "transform",
]

_SIGMA0 = 0.8          # width of the finest wavelet, pixels
_XI0 = 3 * math.pi / 4  # centre frequency of the finest wavelet, rad/pixel
_PERIODS = 2           # periodic copies summed on each side of each axis


class FilterBank(NamedTuple):
  """Fourier-domain filters on a padded P × Q grid (NumPy, read-only).

  Attributes:
    phi: (P, Q) real, φ̂_J on the DFT grid (φ̂_J(0) = 1).
    psi: (J, L, P, Q) real, ψ̂_{j,θ} (ψ̂(0) = 0); ``psi[j, l]`` has
      orientation θ = lπ/L.
  """
  phi: np.ndarray
  psi: np.ndarray


def num_channels(J: int, L: int) -> int:  # noqa: N803
  """1 + J·L + L²·J(J−1)/2, the channels of an order-2 transform."""
  return 1 + J * L + L * L * J * (J - 1) // 2


def _check_jl(J, L):  # noqa: N803
  J = validation.check_positive_int(J, "J")  # noqa: N806
  L = validation.check_positive_int(L, "L")  # noqa: N806
  return J, L


def _check_sides(shape, J):  # noqa: N803
  height, width = (int(s) for s in shape)
  step = 2**J
  for side, name in ((height, "height"), (width, "width")):
    if side <= step or side % step:
      raise ValueError(
          f"image {name} {side} must be a multiple of 2^J = {step} and "
          f"larger than it; lower J (J={J}) or pad the images.")
  return height, width


def padded_shape(shape, J: int) -> tuple[int, int]:  # noqa: N803
  """(H + 2·2^J, W + 2·2^J): the grid the periodic convolutions run on."""
  J, _ = _check_jl(J, 1)  # noqa: N806
  height, width = _check_sides(shape, J)
  return height + 2 * 2**J, width + 2 * 2**J


def output_shape(shape, *, J: int, L: int) -> tuple[int, int, int]:  # noqa: N803
  """(channels, H/2^J, W/2^J) of the transform of one H × W image."""
  J, L = _check_jl(J, L)  # noqa: N806
  height, width = _check_sides(shape, J)
  return num_channels(J, L), height // 2**J, width // 2**J


def _gaussian_hat(size, *, sigma, xi, theta, slant):
  """Σ over 2π-periodic copies of exp(−½ ((ω_∥−ξ)²σ² + ω_⊥²σ²/slant²)).

  The Fourier transform of a Gabor function (a unit-mass Gaussian of widths
  σ along θ and σ/slant across it, times exp(iξ u_∥)), sampled on the DFT
  grid of ``size``; ω_∥, ω_⊥ are the frequency's components along and
  across θ. Summing the periodic copies samples the filter in space.
  """
  rows, cols = size
  wy = 2 * np.pi * np.fft.fftfreq(rows)[:, None]
  wx = 2 * np.pi * np.fft.fftfreq(cols)[None, :]
  c, s = math.cos(theta), math.sin(theta)
  total = np.zeros((rows, cols))
  for my in range(-_PERIODS, _PERIODS + 1):
    for mx in range(-_PERIODS, _PERIODS + 1):
      oy, ox = wy + 2 * np.pi * my, wx + 2 * np.pi * mx
      along, across = c * ox + s * oy, -s * ox + c * oy
      total += np.exp(-0.5 * ((along - xi)**2 * sigma**2
                              + across**2 * sigma**2 / slant**2))
  return total


def morlet_hat(size, *, sigma: float, xi: float, theta: float,
               slant: float) -> np.ndarray:
  """ψ̂ of a Morlet wavelet on the DFT grid: Gabor − β·envelope, ψ̂(0) = 0."""
  gabor = _gaussian_hat(size, sigma=sigma, xi=xi, theta=theta, slant=slant)
  envelope = _gaussian_hat(size, sigma=sigma, xi=0.0, theta=theta,
                           slant=slant)
  return gabor - (gabor[0, 0] / envelope[0, 0]) * envelope


@functools.lru_cache(maxsize=16)
def _bank(size, J, L):  # noqa: N803
  slant = 4.0 / L
  psi = np.stack([
      np.stack([morlet_hat(size, sigma=_SIGMA0 * 2**j, xi=_XI0 / 2**j,
                           theta=i * math.pi / L, slant=slant)
                for i in range(L)])
      for j in range(J)])
  phi = _gaussian_hat(size, sigma=_SIGMA0 * 2**J, xi=0.0, theta=0.0,
                      slant=1.0)
  phi, psi = phi.astype(np.float32), psi.astype(np.float32)
  phi.flags.writeable = False
  psi.flags.writeable = False
  return FilterBank(phi, psi)


def filter_bank(size, *, J: int, L: int) -> FilterBank:  # noqa: N803
  """The Fourier-domain filters on a ``size = (P, Q)`` grid (cached).

  ``size`` is the padded grid (:func:`padded_shape` of the image).
  Data-independent; built once per (size, J, L) on the host.
  """
  J, L = _check_jl(J, L)  # noqa: N806
  rows, cols = (validation.check_positive_int(s, "size") for s in size)
  return _bank((rows, cols), J, L)


def _fold(spectrum, stride: int):
  """The DFT of the signal sampled every ``stride`` pixels (block mean)."""
  if stride == 1:
    return spectrum
  *lead, rows, cols = spectrum.shape
  blocks = spectrum.reshape(*lead, stride, rows // stride, stride,
                            cols // stride)
  return blocks.mean(axis=(-4, -2))


def _at_stride(filt: np.ndarray, stride: int) -> np.ndarray:
  """A Fourier filter for signals sampled every ``stride`` pixels.

  The block sum of ĥ, whose inverse DFT is stride²·h(stride·n): the
  convolution of the samples with it is the Riemann sum of the full one.
  """
  if stride == 1:
    return filt
  *lead, rows, cols = filt.shape
  blocks = filt.reshape(*lead, stride, rows // stride, stride,
                        cols // stride)
  return blocks.sum(axis=(-4, -2))


def _real_low_pass(u, low_pass):
  """``low_pass(fft2(u))`` of real planes u (…, C, h, w), two at a time.

  φ̂ is real and even, so filtering maps real signals to real ones: the
  planes are paired as a + ib, one FFT serves both, and the real and
  imaginary parts of the result are a's and b's low-passes (half the
  FFTs).
  """
  channels = u.shape[-3]
  if channels % 2:
    u = jnp.concatenate([u, jnp.zeros_like(u[..., :1, :, :])], axis=-3)
  half = u.shape[-3] // 2
  s = low_pass(jnp.fft.fft2(jax.lax.complex(u[..., :half, :, :],
                                            u[..., half:, :, :])),
               real=False)
  return jnp.concatenate([s.real, s.imag], axis=-3)[..., :channels, :, :]


def check_images(images, *, J: int, L: int) -> tuple[int, int]:  # noqa: N803
  """Refuses a bad call in one line; returns (H, W).

  ``images`` must be (H, W) or (N, H, W), sides multiples of 2^J larger
  than 2^J; J ≥ 1 and L ≥ 1 integers.
  """
  J, L = _check_jl(J, L)  # noqa: N806
  shape = jnp.shape(images)
  if len(shape) not in (2, 3):
    raise ValueError(
        f"images must be (H, W) or (N, H, W), got shape {shape}; reshape "
        f"flat rows to (N, H, W) first.")
  return _check_sides(shape[-2:], J)


def scattering(images, *, J: int, L: int) -> jax.Array:  # noqa: N803
  """The order-2 scattering transform of one image or a batch (jittable).

  Args:
    images: (H, W) or (N, H, W) real images; sides multiples of 2^J,
      larger than 2^J.
    J: number of scales (subsampling 2^J), an integer ≥ 1.
    L: number of orientations in [0, π), an integer ≥ 1.

  Returns:
    (K, H/2^J, W/2^J) or (N, K, H/2^J, W/2^J), K = :func:`num_channels`,
    float32 (see the module docstring for the channel order).

  Raises:
    ValueError: bad rank, sides, J or L (checked from the shape, before
      tracing; works under ``jit`` and ``vmap``).
  """
  height, width = check_images(images, J=J, L=L)
  x = jnp.asarray(images, jnp.float32)
  step = 2**J
  size = (height + 2 * step, width + 2 * step)
  bank = filter_bank(size, J=J, L=L)
  lead = x.ndim - 2
  x = jnp.pad(x, [(0, 0)] * lead + [(step, step), (step, step)],
              mode="reflect")
  x_hat = jnp.fft.fft2(x)

  def low_pass(u_hat, stride, real=True):
    # u sampled every `stride` pixels → (u ⋆ φ_J) every 2^J pixels, cropped
    phi = jnp.asarray(_at_stride(bank.phi, stride))
    s = jnp.fft.ifft2(_fold(u_hat * phi, step // stride))
    s = s.real if real else s
    return s[..., 1:1 + height // step, 1:1 + width // step]

  out0 = [low_pass(x_hat, 1)[..., None, :, :]]
  out1, out2 = [], []
  for j1 in range(J):
    s1 = 2**j1
    psi1 = jnp.asarray(bank.psi[j1])                      # (L, P, Q)
    u1 = jnp.abs(jnp.fft.ifft2(_fold(x_hat[..., None, :, :] * psi1, s1)))
    u1_hat = jnp.fft.fft2(u1)                             # (…, L, P/s1, ·)
    out1.append(low_pass(u1_hat, s1))
    by_j2 = []
    for j2 in range(j1 + 1, J):
      s2 = 2**j2
      psi2 = jnp.asarray(_at_stride(bank.psi[j2], s1))    # (L, P/s1, ·)
      u2 = jnp.abs(jnp.fft.ifft2(
          _fold(u1_hat[..., :, None, :, :] * psi2, s2 // s1)))
      u2 = u2.reshape(*u2.shape[:-4], L * L, *u2.shape[-2:])
      s = _real_low_pass(u2, functools.partial(low_pass, stride=s2))
      by_j2.append(s.reshape(*s.shape[:-3], L, L, *s.shape[-2:]))
    if by_j2:  # channel order (θ1, j2, θ2) within j1
      s = jnp.stack(by_j2, axis=-4)                       # (…, L, J', L, h, w)
      out2.append(s.reshape(*s.shape[:-5], -1, *s.shape[-2:]))
  return jnp.concatenate(out0 + out1 + out2, axis=-3)


def flatten(features) -> jax.Array:
  """(N, K, h, w) → (N, K·h·w), channel-major (a view of the same order)."""
  shape = jnp.shape(features)
  if len(shape) != 4:
    raise ValueError(f"features must be (N, K, h, w), got shape {shape}.")
  return jnp.reshape(features, (shape[0], -1))


@functools.lru_cache(maxsize=16)
def _compiled(J, L):  # noqa: N803
  return jax.jit(functools.partial(scattering, J=J, L=L))


def _bytes_per_image(height, width, J, L):  # noqa: N803
  # The largest live intermediates: the order-2 products at stride 2
  # (L² complex planes) or the order-1 ones at full size (L planes), each
  # with its FFT, complex64, plus the padded input's spectrum.
  rows, cols = height + 2 * 2**J, width + 2 * 2**J
  planes = max(L, L * L // 4 if J > 1 else 0) * 3 + 4
  return 8 * rows * cols * planes


def transform(images, *, J: int, L: int, chunk: int | None = None,  # noqa: N803
              memory_budget: int | None = None) -> np.ndarray:
  """The transform of (N, H, W) images, one fixed-size chunk at a time.

  One jitted program of ``chunk`` images runs over the data (compiled
  once; the last chunk is padded with zeros and its padding dropped), so
  the peak memory is that of a chunk.

  Args:
    images: (N, H, W) array (NumPy or JAX).
    J: scales; L: orientations (as :func:`scattering`).
    chunk: images per call; None: as many as ``memory_budget`` allows
      (all of them when it is None too).
    memory_budget: bytes the intermediates of one chunk may take (an
      estimate, :func:`dpcore.memory.largest_chunk`), used only when
      ``chunk`` is None; None: no limit.

  Returns:
    (N, K, H/2^J, W/2^J) float32 NumPy array, equal bitwise whatever the
    chunk (each image is transformed on its own).

  Raises:
    ValueError: bad shape, J, L or chunk; MemoryBudgetError when one image
      does not fit the budget.
  """
  if len(jnp.shape(images)) != 3:
    raise ValueError(f"images must be (N, H, W), got shape "
                     f"{jnp.shape(images)}.")
  height, width = check_images(images, J=J, L=L)
  total = validation.check_positive_int(jnp.shape(images)[0], "len(images)")
  if chunk is None:
    per = _bytes_per_image(height, width, J, L)
    chunk, _ = memory.largest_chunk(
        total, lambda c: c * per, budget=memory_budget,
        what="the scattering transform's images", fix="chunk or "
        "memory_budget")
    chunk = total if chunk is None else chunk
  chunk = min(validation.check_positive_int(chunk, "chunk"), total)
  fn = _compiled(int(J), int(L))
  images = np.asarray(images, np.float32)
  out = np.empty((total, *output_shape((height, width), J=J, L=L)),
                 np.float32)
  for start in range(0, total, chunk):
    part = images[start:start + chunk]
    rows = len(part)
    if rows < chunk:
      part = np.concatenate(
          [part, np.zeros((chunk - rows, height, width), np.float32)])
    out[start:start + rows] = np.asarray(fn(part))[:rows]
  return out
