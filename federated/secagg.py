"""Secure aggregation, simulated: pairwise masks that cancel in the sum.

A simulation of the masking layer of Bonawitz et al.'s protocol, faithful
in what each party sees. P participants hold b-bit messages (vectors in
Z_{2^b}^D, :mod:`dpcore.ddg`). Every pair i < j shares a key k_ij (in the
protocol, from a Diffie–Hellman agreement); each participant also holds a
self-mask seed. Participant p sends

    y_p = x_p + Σ_{j>p} PRG(k_pj) − Σ_{j<p} PRG(k_jp) + PRG(self_p)  mod 2^b.

Each pairwise mask enters once with + and once with −, so they cancel in
Σ y_p; every masked message, and every proper subset's sum, is uniform
on the ring whatever the messages are (each is masked by a pair mask
with someone outside the subset), so a server that sees the y_p learns
only Σ x_p.

Dropouts. A participant u that sends nothing after the masks were fixed
leaves its pair masks uncancelled in the survivors' sum. As in the
protocol, the survivors reveal (through secret shares, here by
:func:`unmasking`) u's pair keys and their own self-mask seeds — never
both for one participant — and the server removes
Σ_{v alive} PRG(self_v) + Σ_{v alive, u dropped} ±PRG(k_uv). u's message
and its noise share are then not in the sum. The protocol aborts when
fewer than a threshold survive; :func:`server_sum` returns ``ok`` False
then and its sum must not be used.

What the server sees is visible in the signatures: :func:`server_sum`
takes the masked messages, who survived, and the unmasking vector, and
nothing else. :func:`mask_message` runs on the participant's side and is
the only function that sees x_p.

Keys. The simulation derives k_ij = fold_in(fold_in(setup, i), j) (i < j)
and self_p = fold_in(fold_in(setup, P), p) from one setup key, and each
step's masks from fold_in(·, step): fresh, independent masks per step.

References:
  Bonawitz et al., Practical Secure Aggregation for Privacy-Preserving
  Machine Learning, CCS 2017.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["mask_message", "pair_masks", "server_sum", "unmasking"]

_U32 = jnp.uint32


def _modulus(bits: int) -> jax.Array:
  if isinstance(bits, bool) or not isinstance(bits, int) or not (
      1 <= bits <= 32):
    raise ValueError(f"bits must be an int in [1, 32], got {bits!r}.")
  return _U32((1 << bits) - 1)


def _prg(key, padded, bits):
  return jax.random.bits(key, (padded,), _U32) & _modulus(bits)


def _pair_key(setup, step, i, j):
  lo, hi = jnp.minimum(i, j), jnp.maximum(i, j)
  return jax.random.fold_in(jax.random.fold_in(
      jax.random.fold_in(setup, step), lo), hi)


def _self_key(setup, step, p, count):
  return jax.random.fold_in(jax.random.fold_in(
      jax.random.fold_in(setup, step), count), p)


def pair_masks(setup: jax.Array, step, p, *, count: int, padded: int,
               bits: int) -> jax.Array:
  """(P, D): row j is participant p's signed pair mask with j (0 for j = p).

  +PRG(k_pj) for j > p, −PRG(k_jp) for j < p, modulo 2^b.
  """
  mask = _modulus(bits)
  others = jnp.arange(count)
  raw = jax.vmap(lambda j: _prg(_pair_key(setup, step, p, j), padded,
                                bits))(others)
  sign = jnp.sign(others - p)[:, None]
  signed = jnp.where(sign > 0, raw, jnp.where(sign < 0, _U32(0) - raw,
                                               _U32(0)))
  return signed & mask


def _pair_sum(setup, step, p, partners, *, count, padded, bits):
  """Σ_j partners[j]·(p's signed pair mask with j), modulo 2^b, one
  partner at a time: O(D) memory (:func:`pair_masks` holds all P rows,
  and under ``vmap`` over participants P²·D words).

  ``partners`` is a (P,) bool; a partner left out costs no draw where
  the loop is not batched (a ``lax.cond``).
  """
  mask = _modulus(bits)

  def body(j, acc):
    def draw():
      raw = _prg(_pair_key(setup, step, p, j), padded, bits)
      return jnp.where(j > p, raw, _U32(0) - raw)
    term = jax.lax.cond(partners[j] & (j != p), draw,
                        lambda: jnp.zeros((padded,), _U32))
    return (acc + term) & mask

  return jax.lax.fori_loop(0, count, body, jnp.zeros((padded,), _U32))


def mask_message(setup: jax.Array, step, p, message: jax.Array, *,
                 count: int, bits: int) -> jax.Array:
  """y_p: participant p's message, masked (participant side).

  Args:
    setup: the protocol's secret setup key (participants only).
    step: the round.
    p: this participant's index in [0, P).
    message: uint32 (D,), entries in [0, 2^b).
    count: P.
    bits: b.
  """
  message = jnp.asarray(message, _U32)
  padded = message.shape[-1]
  pairs = _pair_sum(setup, step, p, jnp.ones((count,), bool), count=count,
                    padded=padded, bits=bits)
  own = _prg(_self_key(setup, step, p, count), padded, bits)
  return (message + pairs + own) & _modulus(bits)


def unmasking(setup: jax.Array, step, alive: jax.Array, *, count: int,
              padded: int, bits: int) -> jax.Array:
  """What the survivors' revealed seeds let the server remove (uint32 (D,)).

  Σ_{v alive} PRG(self_v) + Σ_{v alive} Σ_{u dropped} (v's signed pair
  mask with u). In the protocol the server computes it from the revealed
  self-mask seeds of the survivors and pair keys of the dropped; no
  survivor's pair key with another survivor is revealed.
  """
  alive = jnp.asarray(alive).astype(bool)
  mask = _modulus(bits)

  def body(v, acc):
    def part():
      own = _prg(_self_key(setup, step, v, count), padded, bits)
      return own + _pair_sum(setup, step, v, ~alive, count=count,
                             padded=padded, bits=bits)
    return (acc + jax.lax.cond(alive[v], part,
                               lambda: jnp.zeros((padded,), _U32))) & mask

  return jax.lax.fori_loop(0, count, body, jnp.zeros((padded,), _U32))


def server_sum(masked: jax.Array, alive: jax.Array, correction: jax.Array,
               *, bits: int, threshold: int) -> tuple[jax.Array, jax.Array]:
  """The server's view: Σ_{alive} y_p − correction, modulo 2^b.

  Args:
    masked: uint32 (P, D), the masked messages (a dropped participant's
      row is ignored: it never arrived).
    alive: (P,) which participants' messages arrived.
    correction: :func:`unmasking`'s vector for this ``alive``.
    bits: b.
    threshold: the fewest survivors the protocol proceeds with.

  Returns:
    ``(total, ok)``: Σ_{alive} x_p modulo 2^b, and whether at least
    ``threshold`` survived (if not, the protocol aborts: ``total`` is 0
    and must not be used).
  """
  alive = jnp.asarray(alive).astype(bool)
  arrived = jnp.where(alive[:, None], jnp.asarray(masked, _U32), _U32(0))
  total = (jnp.sum(arrived, axis=0, dtype=_U32) - jnp.asarray(
      correction, _U32)) & _modulus(bits)
  ok = jnp.sum(alive) >= threshold
  return jnp.where(ok, total, _U32(0)), ok
