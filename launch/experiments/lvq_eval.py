"""Repeated k-fold evaluation of G(M)LVQ trainers, vmapped over runs.

Each repeat permutes the pooled data with its own key and cuts it into
``folds`` folds of equal size ⌊n / folds⌋ (the n mod folds left-over rows
of that permutation are not used, so every run has the same shapes and runs
can be vmapped). A run either trains on one fold and tests on the rest (the
paper's MNIST protocol) or trains on the rest and tests on one fold (Segment,
HAR). Runs are processed in chunks of ``parallel_runs`` vmapped runs; a
host-side loop over chunks reports progress.

The private model's plan (:class:`mechanisms.lvq.train.DPLVQPlan`, a
pytree of its numbers) is an argument of the compiled runs, so one
compilation serves every ε of a model (:func:`evaluate`'s ``cache``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import auditing, memory, validation
from mechanisms.lvq import init as lvq_init
from mechanisms.lvq import model as lvq
from mechanisms.lvq import train as lvq_train

__all__ = [
    "CVResult", "MEMORY_FIX", "Protocol", "carve_validation",
    "carved_sizes", "cv_splits", "evaluate", "fit", "fit_runs",
    "host_bytes", "train_size",
]

MEMORY_FIX = ("the memory budget (memory_budget); one run holds its "
              "training and test rows, its Poisson batches (sampling_rate) "
              "and, without ghost_clipping, a gradient per example")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Protocol:
  """How a setting is evaluated (:func:`evaluate`'s arguments).

  Attributes:
    folds: k of k-fold CV.
    repeats: how many times the k-fold split is redrawn.
    train_on_one_fold: train on one fold, test on the others (MNIST).
    parallel_runs: runs vmapped together per compiled call.
    memory_budget: bytes the evaluation may use; None: no check;
      ``"auto"``: 3/4 of the memory available
      (:func:`dpcore.memory.resolve_budget`). Fewer runs are vmapped
      together where ``parallel_runs`` would exceed it.
    validation_fraction: None, or the share of each run's training rows
      held out to score it (:func:`carve_validation`; a tuning trial).
  """
  folds: int = 5
  repeats: int = 5
  train_on_one_fold: bool = False
  parallel_runs: int = 5
  memory_budget: int | str | None = None
  validation_fraction: float | None = None


class CVResult(NamedTuple):
  """Every run's test error, shape (repeats, folds), and diagnostics.

  ``correct`` counts each run's held-out rows classified correctly (with
  a ``validation_fraction``; else None). ``parallel_runs`` is the number
  of runs vmapped at once (fewer than asked where the memory budget
  needed it); ``memory_estimate`` the peak bytes estimated for it (None
  without a budget's check).
  """
  errors: np.ndarray
  correct: np.ndarray | None
  overflow_steps: int
  final_costs: np.ndarray
  compile_seconds: float
  seconds: float
  n_train: int
  n_test: int
  parallel_runs: int
  memory_estimate: int | None


def train_size(n: int, *, folds: int, train_on_one_fold: bool) -> int:
  """The training rows of every run of :func:`cv_splits` on n rows."""
  size = n // folds
  return size if train_on_one_fold else size * (folds - 1)


def cv_splits(key: jax.Array, n: int, *, folds: int, repeats: int,
              train_on_one_fold: bool) -> tuple[np.ndarray, np.ndarray]:
  """Train and test index arrays of every run, (repeats·folds, n_tr / n_te)."""
  folds = validation.check_positive_int(folds, "folds")
  repeats = validation.check_positive_int(repeats, "repeats")
  if folds < 2 or n < folds:
    raise ValueError(
        f"folds must be ≥ 2 and ≤ the number of rows ({n}), got {folds}.")
  size = n // folds
  train, test = [], []
  for r in range(repeats):
    perm = np.asarray(jax.random.permutation(jax.random.fold_in(key, r), n))
    parts = perm[:size * folds].reshape(folds, size)
    for f in range(folds):
      rest = np.concatenate([parts[g] for g in range(folds) if g != f])
      if train_on_one_fold:
        train.append(parts[f])
        test.append(rest)
      else:
        train.append(rest)
        test.append(parts[f])
  return np.stack(train), np.stack(test)


def carve_validation(train_idx: np.ndarray, fraction: float
                     ) -> tuple[np.ndarray, np.ndarray]:
  """Splits each run's training rows into (train, held-out validation).

  The last ⌊fraction · n_train⌋ (at least 1) of each run's training
  indices are held out. Those indices are already in the order of the
  run's random permutation (:func:`cv_splits`), so the held-out rows are a
  uniformly random subset of the run's training rows, chosen by the split
  key alone (no data value is read).
  """
  fraction = validation.check_in_range(fraction, "validation_fraction",
                                       0.0, 1.0)
  n_tr = train_idx.shape[1]
  n_val = max(1, int(np.floor(fraction * n_tr)))
  if n_val >= n_tr:
    raise ValueError(f"validation_fraction={fraction}: holding out {n_val} "
                     f"of {n_tr} training rows leaves none to train on; "
                     f"lower it (e.g. 0.2).")
  return train_idx[:, :n_tr - n_val], train_idx[:, n_tr - n_val:]


def carved_sizes(n: int, *, folds: int, train_on_one_fold: bool,
                 validation_fraction: float) -> tuple[int, int]:
  """(n_train, n_val) of every run of :func:`carve_validation`, from n."""
  n_tr = train_size(n, folds=folds, train_on_one_fold=train_on_one_fold)
  n_val = max(1, int(np.floor(validation_fraction * n_tr)))
  return n_tr - n_val, n_val


def host_bytes(x, *index_arrays) -> int:
  """Bytes a CV evaluation holds beside its compiled runs, whatever their
  number: the data as given and its float32 copy on the device, and each
  run's row indices (with their padded copy)."""
  n, d = np.shape(x)
  data = np.asarray(x).nbytes + n * d * 4 + n * 8
  return int(data + sum(2 * np.asarray(a).nbytes for a in index_arrays))


def fit_runs(batched, shared: tuple, per_run: tuple, *, parallel_runs: int,
             memory_budget: int | None, host: int):
  """The runs vmapped at once: ``parallel_runs``, or fewer to fit memory.

  :func:`dpcore.auditing.fit_batch` over ``batched`` (the jitted,
  vmapped run, ``batched(*shared, *per_run)``) compiled for the first
  runs of ``per_run`` (one array per run argument, runs first): XLA's
  count of the compiled program's buffers plus ``host`` bytes must fit
  ``memory_budget`` (None: no check). Each run keeps its own key and
  rows, so the runs are the same whatever the batch.

  Returns:
    ``(compiled, batch, estimate)``.

  Raises:
    dpcore.memory.MemoryBudgetError: even one run at a time exceeds the
      budget (one line naming the estimate, the budget and the fix).
  """
  runs = per_run[0].shape[0]

  def compile_at(batch):
    return batched.lower(*shared, *(a[:batch] for a in per_run)).compile()

  return auditing.fit_batch(
      min(parallel_runs, runs), compile_at, budget=memory_budget,
      host_bytes=host, what=f"the {runs} CV runs (folds x repeats)",
      fix=MEMORY_FIX)


def fit(key: jax.Array, plan: lvq_train.DPLVQPlan | None, x, y,
        config: lvq_train.TrainConfig):
  """One run's model: :func:`lvq_train.release` under ``plan`` for
  ``"dpsgd"``, else the non-private :func:`lvq_train.train`."""
  if plan is not None:
    return lvq_train.release(key, plan, x, y, config)
  return lvq_train.train(key, x, y, config)


def _check_plan(config: lvq_train.TrainConfig, plan) -> None:
  if (config.trainer == "dpsgd") != (plan is not None):
    raise ValueError(
        "trainer='dpsgd' needs plan= (lvq_train.make_plan for the training "
        "rows), and the non-private trainers take none; got trainer="
        f"{config.trainer!r} with plan={'given' if plan else None}.")


def _batched(config: lvq_train.TrainConfig):
  """The jitted, vmapped runs: ``(plan, x, y, keys, train, test[,
  held-out]) -> (error, overflow, final cost, correct held-out rows)``,
  one per run."""
  labels = lvq_init.prototype_labels(config.num_classes,
                                     config.prototypes_per_class)

  def one_run(plan, x, y, run_key, tr, te, va=None):
    res = fit(run_key, plan, x[tr], y[tr], config)
    err = lvq.error_rate(res.params, x[te], y[te], labels)
    cost = lvq_train.mean_cost(res.params, x[tr], y[tr], config)
    correct = (jnp.zeros((), jnp.int32) if va is None else jnp.sum(
        lvq.predict(res.params, x[va], labels) == y[va]))
    return err, res.overflow_steps, cost, correct

  def runs(plan, x, y, *per_run):
    return jax.vmap(lambda *r: one_run(plan, x, y, *r))(*per_run)

  return jax.jit(runs)


def _pad_runs(chunk: int, runs: int, *arrays):
  """Repeats the last run up to a multiple of ``chunk`` (one compiled
  shape; the repeats are dropped from the results)."""
  pad = -(-runs // chunk) * chunk - runs
  if not pad:
    return arrays
  return tuple(jnp.concatenate([a, jnp.repeat(a[-1:], pad, axis=0)])
               if isinstance(a, jax.Array)
               else np.concatenate([a, np.repeat(a[-1:], pad, 0)])
               for a in arrays)


def _run_rows(split_key, n: int, y, pr: Protocol, *,
              num_classes: int) -> list:
  """The runs' row indices: [train, test] (and validation, when ``pr``
  holds rows out), every run's training rows checked to hold every
  class (one line naming the run otherwise)."""
  train_idx, test_idx = cv_splits(split_key, n, folds=pr.folds,
                                  repeats=pr.repeats,
                                  train_on_one_fold=pr.train_on_one_fold)
  index = [train_idx, test_idx]
  if pr.validation_fraction is not None:
    train_idx, val_idx = carve_validation(train_idx, pr.validation_fraction)
    index = [train_idx, test_idx, val_idx]
  for i, idx in enumerate(train_idx):
    try:
      lvq_init.check_classes_present(y[idx], num_classes)
    except ValueError as err:
      raise ValueError(
          f"training rows of run {i} (repeat {i // pr.folds}, fold "
          f"{i % pr.folds}): {err} Use fewer folds, train on the larger "
          f"part or hold out fewer rows.") from None
  return index


def _run_chunks(compiled, shared, args, *, chunk: int, runs: int, what: str,
                progress):
  """The compiled runs, ``chunk`` at a time: (errors, overflows, costs,
  correct validation rows), one entry a run."""
  outs = []
  start = time.perf_counter()
  for c in range(-(-runs // chunk)):
    sl = slice(c * chunk, (c + 1) * chunk)
    outs.append(jax.device_get(jax.block_until_ready(
        compiled(*shared, *(a[sl] for a in args)))))
    if progress is not None:
      done = min((c + 1) * chunk, runs)
      errs = np.concatenate([o[0] for o in outs])[:done]
      progress(f"{what}: {done}/{runs} runs, "
               f"{time.perf_counter() - start:.1f}s, mean error so far "
               f"{errs.mean():.4f}")
  return tuple(np.concatenate(o)[:runs] for o in zip(*outs, strict=True))


def evaluate(split_key: jax.Array, train_key: jax.Array, x, y,
             config: lvq_train.TrainConfig, protocol: Protocol, *,
             plan: lvq_train.DPLVQPlan | None = None,
             progress: Callable[[str], None] | None = None,
             cache: dict | None = None) -> CVResult:
  """Trains and tests ``config`` on every fold of every repeat.

  Args:
    split_key: PRNG key of the CV splits (share it between settings to
      compare them on the same folds).
    train_key: PRNG key of the training runs (initialisation, batches,
      noise); run i gets the i-th key of ``split(train_key, runs)``.
    x: (n, d) pooled data in [−1, 1]^d.
    y: (n,) class indices 0..k−1.
    config: trainer settings (validated here).
    protocol: folds, repeats, which side trains, the runs vmapped at once
      and the memory budget; with ``validation_fraction`` each run's
      training rows lose a held-out share (:func:`carve_validation`),
      whose correctly classified rows the result counts.
    plan: for ``config.trainer="dpsgd"``, the :class:`lvq_train.DPLVQPlan`
      of one run's training rows (σ, C, B, the init's budget); None for
      the non-private trainers.
    progress: optional callback for progress lines.
    cache: a dict kept by the caller: the compiled runs of a config and
      shapes seen before are reused (every ε of a model, and every data
      set of the same shapes: the plan and the data are arguments of the
      compiled runs).

  Returns:
    A :class:`CVResult`. Each trained model, when ``config.trainer`` is
    ``"dpsgd"``, carries the guarantee of ``plan`` for its own training
    set (the evaluation protocol is not a release).

  Raises:
    ValueError: bad settings or data (a run without a class, rows
      outside the box).
    dpcore.memory.MemoryBudgetError: even one run exceeds the budget.
  """
  config = config.validate()
  _check_plan(config, plan)
  pr = protocol
  x = lvq_init.check_box(x, "x")
  y = lvq_init.check_classes_present(y, config.num_classes, "y")
  parallel_runs = validation.check_positive_int(pr.parallel_runs,
                                                "parallel_runs")
  budget = memory.resolve_budget(pr.memory_budget)
  index = _run_rows(split_key, x.shape[0], y, pr,
                    num_classes=config.num_classes)
  train_idx, test_idx = index[:2]
  runs = train_idx.shape[0]
  cache = {} if cache is None else cache
  shared = (plan, jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.int32))
  what = f"{config.model}/{config.trainer}"
  if config not in cache:
    cache[config] = _batched(config)
  args = (jax.random.split(train_key, runs), *index)
  asked = min(parallel_runs, runs)
  fitted = ("fitted", config, jax.tree.structure(plan), x.shape,
            parallel_runs, budget, tuple(a.shape for a in index))
  start = time.perf_counter()
  if fitted not in cache:
    if progress is not None:
      progress(f"{what}: compiling {asked} vmapped runs ({runs} runs in "
               f"{-(-runs // asked)} chunk(s))")
    cache[fitted] = fit_runs(cache[config], shared, args,
                             parallel_runs=parallel_runs,
                             memory_budget=budget,
                             host=host_bytes(x, *index))
  compiled, chunk, estimate = cache[fitted]
  compile_seconds = time.perf_counter() - start
  if progress is not None and chunk < asked:
    progress(f"{what}: {chunk} runs vmapped at once, not {asked} "
             f"(estimated {memory.size_text(estimate)} of a "
             f"{memory.size_text(budget)} memory budget; memory_budget to "
             f"change)")
  start = time.perf_counter()
  err, over, cost, correct = _run_chunks(
      compiled, shared, _pad_runs(chunk, runs, *args), chunk=chunk,
      runs=runs, what=what, progress=progress)
  seconds = time.perf_counter() - start
  shape = (pr.repeats, pr.folds)
  return CVResult(
      err.reshape(shape),
      (correct.astype(np.int64) if pr.validation_fraction is not None
       else None),
      int(over.sum()), cost.reshape(shape), compile_seconds, seconds,
      train_idx.shape[1], test_idx.shape[1], chunk, estimate)
