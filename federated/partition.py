"""Splitting one data set among N participants, padded to a common length.

Participants are a leading array axis: ``x`` has shape (N, n_max, d), with
each participant's rows first and zero padding after them, flagged by
``mask``. Every per-participant computation is then one ``vmap``.

>>> import jax, numpy as np
>>> x = np.arange(20, dtype=np.float32).reshape(10, 2)
>>> parts = partition(jax.random.key(0), x, np.zeros(10), sizes=(3, 5))
>>> parts.x.shape, parts.mask.sum(axis=1).tolist()
((2, 5, 2), [3.0, 5.0])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np

from dpcore import validation


class Participants(NamedTuple):
  """Padded per-participant data.

  Attributes:
    x: (N, n_max, d) rows, zeros where ``mask`` is 0.
    y: (N, n_max) labels, 0 where ``mask`` is 0.
    mask: (N, n_max) float, 1 for real rows.
    sizes: (N,) true row counts (host NumPy ints).
  """
  x: np.ndarray
  y: np.ndarray
  mask: np.ndarray
  sizes: np.ndarray


def even_sizes(n_available: int, participants: int,
               n_per_participant: int) -> tuple[int, ...]:
  """``participants`` equal sizes of ``n_per_participant`` (checked)."""
  participants = validation.check_positive_int(participants, "participants")
  n_per_participant = validation.check_positive_int(
      n_per_participant, "n_per_participant")
  if participants * n_per_participant > n_available:
    raise ValueError(
        f"{participants} participants x {n_per_participant} rows = "
        f"{participants * n_per_participant} exceeds the {n_available} rows "
        f"available; lower n_per_participant to at most "
        f"{n_available // participants}.")
  return (n_per_participant,) * participants


def check_sizes(sizes: Sequence[int], n_available: int) -> tuple[int, ...]:
  """Every size ≥ 1 and their sum ≤ ``n_available``."""
  sizes = tuple(sizes)
  if not sizes:
    raise ValueError("sizes is empty; give at least one participant size.")
  for i, s in enumerate(sizes):
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1:
      raise ValueError(
          f"participant {i} has size {s!r}; every participant needs at "
          f"least one row (drop empty participants).")
  total = int(sum(sizes))
  if total > n_available:
    raise ValueError(
        f"sizes sum to {total} but only {n_available} rows are available; "
        f"shrink the sizes.")
  return tuple(int(s) for s in sizes)


def pad(xs: Sequence, ys: Sequence) -> Participants:
  """Stacks explicit per-participant arrays, zero-padded to the longest."""
  if not xs or len(xs) != len(ys):
    raise ValueError("xs and ys must be non-empty lists of equal length.")
  sizes = np.array([len(v) for v in xs], np.int64)
  if np.any(sizes < 1):
    bad = int(np.argmin(sizes))
    raise ValueError(
        f"participant {bad} has no rows; every participant needs at least "
        f"one row.")
  d = np.asarray(xs[0]).shape[1]
  n_max = int(sizes.max())
  x = np.zeros((len(xs), n_max, d), np.asarray(xs[0]).dtype)
  y = np.zeros((len(xs), n_max), np.asarray(ys[0]).dtype)
  mask = np.zeros((len(xs), n_max), np.float32)
  for i, (xi, yi) in enumerate(zip(xs, ys, strict=True)):
    x[i, :sizes[i]] = xi
    y[i, :sizes[i]] = yi
    mask[i, :sizes[i]] = 1.0
  return Participants(x, y, mask, sizes)


def partition(key: jax.Array, x, y, *, sizes: Sequence[int]
              ) -> Participants:
  """Random disjoint subsets of the rows, one per participant.

  Args:
    key: PRNG key of the shuffle.
    x: (n, d) rows.
    y: (n,) labels.
    sizes: rows per participant (each ≥ 1, sum ≤ n).
  """
  x = validation.check_matrix(x, "x")
  y = np.asarray(y)
  if y.shape != (x.shape[0],):
    raise ValueError(
        f"y has shape {y.shape}, expected ({x.shape[0]},) to match x.")
  sizes = check_sizes(sizes, x.shape[0])
  order = np.asarray(jax.random.permutation(key, x.shape[0]))
  bounds = np.cumsum((0,) + sizes)
  parts = [order[bounds[i]:bounds[i + 1]] for i in range(len(sizes))]
  return pad([x[p] for p in parts], [y[p] for p in parts])
