"""Every participant's keys, and the server's, in one repeat.

Participant i's keys are ``split(fold_in(key, i))``: a function of the
repeat's key and i alone, so a run gives the same noise on one device,
several devices, several processes, in chunks or in buckets. The server's
own randomness (post-processing only) comes from a stream no participant's
keys come from.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["SERVER_STREAM", "participant_keys", "server_key"]

SERVER_STREAM = 2**32 - 1
"""The index folded into a repeat's key for the server's own randomness
(the start block of ``topk="subspace"`` aggregation). Participant i's keys
come from ``fold_in(key, i)`` with i < N ≤ 2³² − 1, so this stream is
never a participant's, and never carries noise."""


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
