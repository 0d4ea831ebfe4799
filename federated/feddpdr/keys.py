"""Every participant's keys, and the server's, in one repeat.

Participant i's keys are ``split(fold_in(key, i))``: a function of the
repeat's key and i alone, so a run gives the same noise on one device,
several devices, several processes, in chunks or in buckets. The server's
own randomness (post-processing only) comes from a stream no participant's
keys come from, and ``aggregation="distributed_moments"``'s protocol keys
(the public rotation, the secure-aggregation setup) from a third.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = [
    "PROTOCOL_STREAM", "SERVER_STREAM", "participant_keys", "protocol_keys",
    "server_key",
]

SERVER_STREAM = 2**32 - 1
"""The index folded into a repeat's key for the server's own randomness
(the start block of ``topk="subspace"`` aggregation). Participant i's keys
come from ``fold_in(key, i)`` with i < N ≤ 2³² − 2, so this stream is
never a participant's, and never carries noise."""

PROTOCOL_STREAM = 2**32 - 2
"""The index folded into a repeat's key for the secure-aggregation
protocol of ``aggregation="distributed_moments"`` (:func:`protocol_keys`):
neither a participant's index (i < N ≤ 2³² − 2) nor the server's."""


def participant_keys(key: jax.Array, count: int, *, first: int = 0):
  """The (DP-PCA, fit) keys of participants ``first … first + count − 1``.

  Participant i's keys are ``split(fold_in(key, i))``: a function of the
  repeat's key and i alone, so they do not depend on how many participants
  the run has, nor on the chunk, device or process that computes them
  (a process holding participants ``first …`` derives the same keys).
  """
  index = jnp.arange(first, first + count, dtype=jnp.uint32)
  pairs = jax.vmap(lambda i: jax.random.split(jax.random.fold_in(key, i)))(
      index)
  return pairs[:, 0], pairs[:, 1]


def server_key(key: jax.Array) -> jax.Array:
  """The key of the server's post-processing randomness in one repeat.

  ``fold_in(key, SERVER_STREAM)``: a stream no participant's keys come
  from (:func:`participant_keys` folds in indices below
  :data:`SERVER_STREAM`), so what it draws is independent of every noise
  draw. It seeds only the start block of ``topk="subspace"`` aggregation.
  """
  return jax.random.fold_in(key, jnp.uint32(SERVER_STREAM))


def protocol_keys(key: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(rotation_key, setup_key)`` of one repeat's secure sum.

  ``split(fold_in(key, PROTOCOL_STREAM))``: the public rotation of
  :func:`dpcore.ddg.encode` (participants and server alike) and the
  simulated setup of :mod:`federated.secagg` (the pairwise and self masks;
  participants only). Neither draws noise, and neither stream is a
  participant's or the server's.
  """
  keys = jax.random.split(jax.random.fold_in(key, jnp.uint32(PROTOCOL_STREAM)))
  return keys[0], keys[1]
