"""Splitting one data set among N participants, padded to a common length.

Participants are a leading array axis: ``x`` has shape (N, n_max, d), with
each participant's rows first and zero padding after them, flagged by
``mask``. Every per-participant computation is then one ``vmap``.

Very unequal sizes. Padding every participant to the longest wastes most
of the work when a few participants are much larger than the rest. When
one padded array would be more than half padding (Σ nᵢ < ½ N n_max,
:func:`wants_buckets`), :func:`bucket` and :func:`partition_buckets` group
the participants into :class:`Buckets` by padded length: nᵢ rounded up to
a power of two (capped at n_max), so every participant fills more than
half of its padded rows and no bucket wastes more than half of its work.
Each bucket is its own padded :class:`Participants`, and ``Buckets.index``
keeps every participant's original index (its keys and its place in the
outputs depend on that index alone).

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

__all__ = [
    "Buckets",
    "Participants",
    "bucket",
    "bucket_index",
    "bucket_lengths",
    "check_sizes",
    "even_sizes",
    "gather",
    "layout_record",
    "pad",
    "padded_rows",
    "partition",
    "partition_auto",
    "partition_buckets",
    "wants_buckets",
]


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
  """Every size ≥ 1 and their sum ≤ ``n_available``.

  Vectorised (one NumPy pass), so hundreds of thousands of sizes check in
  milliseconds.
  """
  sizes = tuple(sizes)
  if not sizes:
    raise ValueError("sizes is empty; give at least one participant size.")
  counts = np.asarray(sizes)
  if counts.dtype.kind in "iu" and not any(isinstance(s, bool)
                                           for s in sizes):
    bad = np.flatnonzero(counts < 1)
  else:  # a float, bool or other entry: name the first
    bad = [i for i, s in enumerate(sizes)
           if isinstance(s, bool) or not isinstance(s, (int, np.integer))
           or s < 1]
  if len(bad):
    i = int(bad[0])
    raise ValueError(
        f"participant {i} has size {sizes[i]!r}; every participant needs at "
        f"least one row (drop empty participants).")
  counts = counts.astype(np.int64)
  total = int(counts.sum())
  if total > n_available:
    raise ValueError(
        f"sizes sum to {total} but only {n_available} rows are available; "
        f"shrink the sizes.")
  return tuple(counts.tolist())


def pad(xs: Sequence, ys: Sequence) -> Participants:
  """Stacks explicit per-participant arrays, zero-padded to the longest."""
  if not xs or len(xs) != len(ys):
    raise ValueError("xs and ys must be non-empty lists of equal length.")
  sizes = np.array([len(v) for v in xs], np.int64)
  d = np.shape(xs[0])[-1]
  for i, (xi, yi) in enumerate(zip(xs, ys, strict=True)):
    if np.ndim(xi) != 2 or np.shape(xi)[1] != d:
      raise ValueError(f"xs[{i}] has shape {np.shape(xi)}; every "
                       f"participant needs (rows, {d}) like xs[0].")
    if np.shape(yi) != (len(xi),):
      raise ValueError(f"ys[{i}] has shape {np.shape(yi)}, expected "
                       f"({len(xi)},): one label per row of xs[{i}].")
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


def gather(order: np.ndarray, x: np.ndarray, y: np.ndarray,
           sizes: Sequence[int]) -> Participants:
  """Participants from consecutive runs of ``order``, padded, vectorised.

  Participant i gets rows ``order[o_i : o_i + sizes[i]]`` (o_i the sum of
  the sizes before it), in that order, then zero padding: the same arrays
  as :func:`pad` of those row lists, built by one fancy-indexing gather
  instead of a Python loop over participants (what hundreds of thousands
  of participants need).

  Args:
    order: (≥ Σ sizes,) row indices.
    x: (n, d) rows.
    y: (n,) labels.
    sizes: rows per participant, each ≥ 1 (checked by the caller).
  """
  sizes = np.asarray(sizes, np.int64)
  order = np.asarray(order)
  n_max = int(sizes.max())
  if np.all(sizes == n_max):  # equal sizes: a reshape, no padding
    index = order[:sizes.size * n_max].reshape(sizes.size, n_max)
    return Participants(x[index], y[index],
                        np.ones(index.shape, np.float32), sizes)
  return _gather_padded(order, _starts(sizes), sizes, n_max, x, y)


def _starts(sizes: np.ndarray) -> np.ndarray:
  """Offset of each participant's first row in the shuffled order."""
  return np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)


def _gather_padded(order, starts, sizes, length, x, y) -> Participants:
  """Rows ``order[starts[i] : starts[i] + sizes[i]]``, padded to
  ``length``, for each i (one fancy-indexing gather)."""
  slot = np.arange(length)
  real = slot[None, :] < sizes[:, None]
  # Padding slots read row 0 and are zeroed after the gather.
  index = np.where(real, order[np.minimum(starts[:, None] + slot,
                                          len(order) - 1)], 0)
  xs, ys = x[index], y[index]
  xs[~real] = 0
  ys[~real] = 0
  return Participants(xs, ys, real.astype(np.float32), sizes)


class Buckets(NamedTuple):
  """Participants grouped by padded length (:func:`bucket`).

  Attributes:
    groups: one :class:`Participants` per bucket, in increasing padded
      length, each padded to its own length.
    index: one (N_b,) int array per bucket: the original indices of its
      participants, ascending. Together a permutation of 0 … N − 1.
    sizes: (N,) true row counts in the original participant order.
  """
  groups: tuple
  index: tuple
  sizes: np.ndarray


def wants_buckets(sizes) -> bool:
  """Whether one padded array would be more than half padding.

  True when Σ nᵢ < ½ · N · n_max: padding everyone to the longest would
  then waste more than half of the rows computed on.
  """
  sizes = np.asarray(sizes, np.int64)
  return 2 * int(sizes.sum()) < sizes.size * int(sizes.max())


def bucket_lengths(sizes) -> np.ndarray:
  """Each participant's padded length when bucketed.

  nᵢ rounded up to a power of two, capped at n_max = max nᵢ: every
  participant then fills more than half of its padded rows (a power of two
  2ʲ ≥ nᵢ > 2ʲ⁻¹; under the cap, n_max < 2ʲ so nᵢ > 2ʲ⁻¹ > n_max/2).
  """
  sizes = np.asarray(sizes, np.int64)
  if sizes.ndim != 1 or sizes.size == 0 or np.any(sizes < 1):
    raise ValueError(f"sizes must be a non-empty list of row counts >= 1, "
                     f"got {sizes.tolist()}.")
  powers = np.left_shift(1, np.ceil(np.log2(sizes)).astype(np.int64))
  # log2 of an exact power of two may round up: step back where it did.
  powers = np.where(powers // 2 >= sizes, powers // 2, powers)
  return np.minimum(powers, sizes.max())


def bucket_index(sizes) -> list[tuple[int, np.ndarray]]:
  """(padded length, original indices) of each bucket, shortest first."""
  lengths = bucket_lengths(sizes)
  return [(int(length), np.flatnonzero(lengths == length))
          for length in np.unique(lengths)]


def bucket(participants: Participants) -> Buckets:
  """Splits padded participants into buckets (:func:`bucket_lengths`).

  The rows, labels and masks are those of ``participants``, cut to each
  bucket's length; nothing is reordered within a participant.
  """
  sizes = np.asarray(participants.sizes, np.int64)
  groups, index = [], []
  for length, which in bucket_index(sizes):
    groups.append(Participants(
        np.asarray(participants.x)[which, :length],
        np.asarray(participants.y)[which, :length],
        np.asarray(participants.mask)[which, :length], sizes[which]))
    index.append(which)
  return Buckets(tuple(groups), tuple(index), sizes)


def padded_rows(layout) -> int:
  """The rows computed on: Σ over buckets of N_b × length_b."""
  groups = layout.groups if isinstance(layout, Buckets) else (layout,)
  return int(sum(np.shape(g.mask)[0] * np.shape(g.mask)[1]
                 for g in groups))


def layout_record(sizes, *, bucketed: bool) -> dict:
  """``buckets`` (1 for one padded array) and ``padding_efficiency``
  (real rows / padded rows) of the layout of ``sizes``."""
  sizes = np.asarray(sizes, np.int64)
  if bucketed:
    buckets = bucket_index(sizes)
    padded = sum(length * len(which) for length, which in buckets)
  else:
    buckets, padded = [None], sizes.size * int(sizes.max())
  return {"buckets": len(buckets),
          "padding_efficiency": float(sizes.sum()) / padded}


def partition(key: jax.Array, x, y, *, sizes: Sequence[int]
              ) -> Participants:
  """Random disjoint subsets of the rows, one per participant.

  Vectorised (:func:`gather`): no Python loop over participants, so
  200,000 participants of 8 rows take well under a second beyond the
  shuffle.

  Args:
    key: PRNG key of the shuffle.
    x: (n, d) rows.
    y: (n,) labels.
    sizes: rows per participant (each ≥ 1, sum ≤ n).
  """
  x, y, sizes, order = _shuffled(key, x, y, sizes)
  return gather(order, x, y, sizes)


def _shuffled(key, x, y, sizes):
  """Checked ``x``, ``y`` and ``sizes``, and the shuffle of the rows that
  :func:`partition` and :func:`partition_buckets` both cut."""
  validation.check_key(key)
  x = validation.check_matrix(x, "x")
  y = np.asarray(y)
  if y.shape != (x.shape[0],):
    raise ValueError(
        f"y has shape {y.shape}, expected ({x.shape[0]},) to match x.")
  sizes = check_sizes(sizes, x.shape[0])
  order = np.asarray(jax.random.permutation(key, x.shape[0]))
  return x, y, sizes, order


def partition_buckets(key: jax.Array, x, y, *, sizes: Sequence[int]
                      ) -> Buckets:
  """:func:`partition`, laid out in buckets (:func:`bucket_index`).

  Each participant gets exactly the rows :func:`partition` gives it with
  the same key, without ever forming the array padded to the longest.
  """
  x, y, sizes, order = _shuffled(key, x, y, sizes)
  sizes = np.asarray(sizes, np.int64)
  starts = _starts(sizes)
  groups, index = [], []
  for length, which in bucket_index(sizes):
    groups.append(_gather_padded(order, starts[which], sizes[which], length,
                                 x, y))
    index.append(which)
  return Buckets(tuple(groups), tuple(index), sizes)


def partition_auto(key: jax.Array, x, y, *, sizes: Sequence[int],
                   buckets: bool = True) -> Participants | Buckets:
  """:func:`partition_buckets` when ``buckets`` and :func:`wants_buckets`,
  else :func:`partition` (the same rows either way)."""
  if buckets and wants_buckets(check_sizes(sizes, np.shape(x)[0])):
    return partition_buckets(key, x, y, sizes=sizes)
  return partition(key, x, y, sizes=sizes)
