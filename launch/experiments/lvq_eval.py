"""Repeated k-fold evaluation of G(M)LVQ trainers, vmapped over runs.

Each repeat permutes the pooled data with its own key and cuts it into
``folds`` folds of equal size ⌊n / folds⌋ (the n mod folds left-over rows
of that permutation are not used, so every run has the same shapes and runs
can be vmapped). A run either trains on one fold and tests on the rest (the
paper's MNIST protocol) or trains on the rest and tests on one fold (Segment,
HAR). Runs are processed in chunks of ``parallel_runs`` vmapped runs; a
host-side loop over chunks reports progress.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import accounting, auditing, dpsgd, memory, validation
from mechanisms.lvq import init as lvq_init
from mechanisms.lvq import model as lvq
from mechanisms.lvq import train as lvq_train


def sgd_steps(epochs: int, sampling_rate: float) -> int:
  """The (DP-)SGD steps of one run: :func:`dpcore.dpsgd.num_steps`."""
  return dpsgd.num_steps(epochs=epochs, sampling_rate=sampling_rate)


class CVResult(NamedTuple):
  """Test errors of every run, shape (repeats, folds), and diagnostics.

  ``parallel_runs`` is the number of runs vmapped at once (fewer than
  asked where the memory budget needed it); ``memory_estimate`` the peak
  bytes estimated for it (None without a budget's check).
  """
  errors: np.ndarray
  overflow_steps: int
  final_costs: np.ndarray
  compile_seconds: float
  seconds: float
  n_train: int
  n_test: int
  parallel_runs: int | None = None
  memory_estimate: int | None = None


MEMORY_FIX = ("the memory budget (--memory_budget); one run holds its "
              "training and test rows, its Poisson batches (--q) and, "
              "without --ghost_clipping, a gradient per example")


def host_bytes(x, *index_arrays) -> int:
  """Bytes a CV evaluation holds beside its compiled runs, whatever their
  number: the data as given, its float32 copy on the device and the copy
  the compiled program holds as a constant, and each run's row indices
  (with their padded copy)."""
  n, d = np.shape(x)
  data = np.asarray(x).nbytes + 2 * (n * d * 4) + n * 8
  return int(data + sum(2 * np.asarray(a).nbytes for a in index_arrays))


def fit_runs(batched, args: tuple, *, parallel_runs: int,
             memory_budget: int | None, host: int):
  """The runs vmapped at once: ``parallel_runs``, or fewer to fit memory.

  :func:`dpcore.auditing.fit_batch` over ``batched`` (the jitted,
  vmapped run) compiled for the first runs of ``args`` (one array per
  run argument, runs first): XLA's count of the compiled program's
  buffers plus ``host`` bytes must fit ``memory_budget`` (None: no
  check). Each run keeps its own key and rows, so the runs are the same
  whatever the batch.

  Returns:
    ``(compiled, batch, estimate)``.

  Raises:
    dpcore.memory.MemoryBudgetError: even one run at a time exceeds the
      budget (one line naming the estimate, the budget and the fix).
  """
  runs = args[0].shape[0]

  def compile_at(batch):
    return batched.lower(*(a[:batch] for a in args)).compile()

  return auditing.fit_batch(
      min(parallel_runs, runs), compile_at, budget=memory_budget,
      host_bytes=host, what=f"the {runs} CV runs (folds x repeats)",
      fix=MEMORY_FIX)


def _pad_runs(chunk: int, runs: int, keys, *index_arrays):
  """Repeats the last run up to a multiple of ``chunk`` (one compiled
  shape; the repeats are dropped from the results)."""
  pad = -(-runs // chunk) * chunk - runs
  if not pad:
    return (keys, *index_arrays)
  keys = jnp.concatenate([keys, jnp.repeat(keys[-1:], pad, axis=0)])
  return (keys, *(np.concatenate([a, np.repeat(a[-1:], pad, 0)])
                  for a in index_arrays))


def _say_batch(progress, label, chunk, asked, estimate, budget):
  if progress is not None and chunk < asked:
    progress(f"{label}: {chunk} runs vmapped at once, not {asked} "
             f"(estimated {memory.size_text(estimate)} of a "
             f"{memory.size_text(budget)} memory budget; --memory_budget to "
             f"change)")


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


def _check_plan(config: lvq_train.TrainConfig, plan) -> None:
  if (config.trainer == "dpsgd") != (plan is not None):
    raise ValueError(
        "trainer='dpsgd' needs plan= (lvq_train.make_plan for the training "
        "rows), and the non-private trainers take none; got trainer="
        f"{config.trainer!r} with plan={'given' if plan else None}.")


def fit(key: jax.Array, plan: lvq_train.DPLVQPlan | None, x, y,
        config: lvq_train.TrainConfig):
  """One run's model: :func:`lvq_train.release` under ``plan`` for
  ``"dpsgd"``, else the non-private :func:`lvq_train.train`."""
  if plan is not None:
    return lvq_train.release(key, plan, x, y, config)
  return lvq_train.train(key, x, y, config)


def evaluate(split_key: jax.Array, train_key: jax.Array, x, y,
             config: lvq_train.TrainConfig, *,
             plan: lvq_train.DPLVQPlan | None = None,
             folds: int = 5, repeats: int = 5, train_on_one_fold: bool = False,
             parallel_runs: int = 5, memory_budget: int | None = None,
             progress: Callable[[str], None] | None = None) -> CVResult:
  """Trains and tests ``config`` on every fold of every repeat.

  Args:
    split_key: PRNG key of the CV splits (share it between settings to
      compare them on the same folds).
    train_key: PRNG key of the training runs (initialisation, batches,
      noise); run i gets the i-th key of ``split(train_key, runs)``.
    x: (n, d) pooled data in [−1, 1]^d.
    y: (n,) class indices 0..k−1.
    config: trainer settings (validated here).
    plan: for ``config.trainer="dpsgd"``, the :class:`lvq_train.DPLVQPlan`
      of one run's training rows (σ, C, B, the init's budget); None for
      the non-private trainers.
    folds: k of k-fold CV.
    repeats: how many times the k-fold split is redrawn.
    train_on_one_fold: train on one fold, test on the others (MNIST).
    parallel_runs: runs vmapped together per compiled call.
    memory_budget: bytes the evaluation may use (None: no check); where
      ``parallel_runs`` runs at once would exceed it, fewer are vmapped
      at once (:func:`fit_runs`), with the same keys and rows per run.
    progress: optional callback for progress lines.

  Returns:
    A :class:`CVResult`. Each trained model, when ``config.trainer`` is
    ``"dpsgd"``, carries the guarantee of ``plan`` for its own training
    set (the evaluation protocol is not a release).
  """
  config = config.validate()
  _check_plan(config, plan)
  x = lvq_init.check_box(x, "x")
  y = lvq_init.check_classes_present(y, config.num_classes, "y")
  parallel_runs = validation.check_positive_int(parallel_runs,
                                                "parallel_runs")
  train_idx, test_idx = cv_splits(split_key, x.shape[0], folds=folds,
                                  repeats=repeats,
                                  train_on_one_fold=train_on_one_fold)
  for i, idx in enumerate(train_idx):
    try:
      lvq_init.check_classes_present(y[idx], config.num_classes)
    except ValueError as err:
      raise ValueError(
          f"training set of run {i} (repeat {i // folds}, fold {i % folds}): "
          f"{err} Use fewer folds or train on the larger part.") from None
  runs = train_idx.shape[0]
  xd, yd = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.int32)
  labels = lvq_init.prototype_labels(config.num_classes,
                                     config.prototypes_per_class)

  def one_run(run_key, tr, te):
    res = fit(run_key, plan, xd[tr], yd[tr], config)
    err = lvq.error_rate(res.params, xd[te], yd[te], labels)
    return err, res.overflow_steps, lvq_train.mean_cost(
        res.params, xd[tr], yd[tr], config)

  batched = jax.jit(jax.vmap(one_run))
  asked = min(parallel_runs, runs)
  keys = jax.random.split(train_key, runs)
  if progress is not None:
    progress(f"{config.model}/{config.trainer}: compiling {asked} vmapped "
             f"runs ({runs} runs in {-(-runs // asked)} chunk(s))")
  start = time.perf_counter()
  compiled, chunk, estimate = fit_runs(
      batched, (keys, train_idx, test_idx), parallel_runs=parallel_runs,
      memory_budget=memory_budget, host=host_bytes(x, train_idx, test_idx))
  compile_seconds = time.perf_counter() - start
  _say_batch(progress, f"{config.model}/{config.trainer}", chunk, asked,
             estimate, memory_budget)
  n_chunks = -(-runs // chunk)
  keys, train_idx, test_idx = _pad_runs(chunk, runs, keys, train_idx,
                                        test_idx)
  errs, overflow, costs = [], [], []
  start = time.perf_counter()
  for c in range(n_chunks):
    sl = slice(c * chunk, (c + 1) * chunk)
    e, o, f = jax.block_until_ready(
        compiled(keys[sl], train_idx[sl], test_idx[sl]))
    errs.append(np.asarray(e))
    overflow.append(np.asarray(o))
    costs.append(np.asarray(f))
    if progress is not None:
      done = min((c + 1) * chunk, runs)
      elapsed = time.perf_counter() - start
      progress(f"{config.model}/{config.trainer}: {done}/{runs} runs, "
               f"{elapsed:.1f}s, mean error so far "
               f"{np.concatenate(errs)[:done].mean():.4f}")
  seconds = time.perf_counter() - start
  errors = np.concatenate(errs)[:runs].reshape(repeats, folds)
  return CVResult(errors, int(np.concatenate(overflow)[:runs].sum()),
                  np.concatenate(costs)[:runs].reshape(repeats, folds),
                  compile_seconds, seconds, train_idx.shape[1],
                  test_idx.shape[1], chunk, estimate)


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
  """(n_train, n_val) of every run of :func:`evaluate_trial`, from n."""
  size = n // folds
  n_tr = size if train_on_one_fold else size * (folds - 1)
  n_val = max(1, int(np.floor(validation_fraction * n_tr)))
  return n_tr - n_val, n_val


class TrialResult(NamedTuple):
  """One tuning trial on every CV run: test errors and held-out counts."""
  errors: np.ndarray
  correct: np.ndarray
  overflow_steps: int
  seconds: float
  n_train: int
  n_val: int
  n_test: int


def evaluate_trial(split_key: jax.Array, train_key: jax.Array, x, y,
                   config: lvq_train.TrainConfig, *,
                   plan: lvq_train.DPLVQPlan | None = None, folds: int,
                   repeats: int, train_on_one_fold: bool,
                   validation_fraction: float, parallel_runs: int = 5,
                   memory_budget: int | None = None,
                   cache: dict | None = None) -> TrialResult:
  """Trains ``config`` on every CV run's training rows minus held-out rows.

  Like :func:`evaluate`, with each run's training rows cut by
  :func:`carve_validation`: the model trains on the rest, and the run
  returns its test error (on the run's test rows, not a release) and the
  number of held-out rows it classifies correctly (the input of a private
  score, e.g. :func:`dpcore.tuning.noisy_accuracy`). ``cache`` (a dict
  kept by the caller) reuses the compiled runs of a config seen before.
  ``plan``, ``parallel_runs`` and ``memory_budget`` are as in
  :func:`evaluate`.
  """
  config = config.validate()
  _check_plan(config, plan)
  x = lvq_init.check_box(x, "x")
  y = lvq_init.check_classes_present(y, config.num_classes, "y")
  train_idx, test_idx = cv_splits(split_key, x.shape[0], folds=folds,
                                  repeats=repeats,
                                  train_on_one_fold=train_on_one_fold)
  train_idx, val_idx = carve_validation(train_idx, validation_fraction)
  for i, idx in enumerate(train_idx):
    try:
      lvq_init.check_classes_present(y[idx], config.num_classes)
    except ValueError as err:
      raise ValueError(
          f"training rows of run {i} after holding out validation rows: "
          f"{err} Use fewer folds or a smaller validation fraction."
      ) from None
  runs = train_idx.shape[0]
  cache = {} if cache is None else cache
  labels = lvq_init.prototype_labels(config.num_classes,
                                     config.prototypes_per_class)
  xd, yd = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.int32)
  parallel_runs = validation.check_positive_int(parallel_runs,
                                                "parallel_runs")
  if (config, plan) not in cache:
    def one_run(run_key, tr, va, te):
      res = fit(run_key, plan, xd[tr], yd[tr], config)
      err = lvq.error_rate(res.params, xd[te], yd[te], labels)
      correct = jnp.sum(lvq.predict(res.params, xd[va], labels) == yd[va])
      return err, correct, res.overflow_steps
    cache[config, plan] = jax.jit(jax.vmap(one_run))
  batched = cache[config, plan]
  keys = jax.random.split(train_key, runs)
  # Compiled once per config and shapes, for the runs that fit the memory
  # budget (the same keys and rows per run whatever their number).
  fitted = ("fitted", config, plan, parallel_runs, memory_budget,
            train_idx.shape, val_idx.shape, test_idx.shape)
  if fitted not in cache:
    cache[fitted] = fit_runs(
        batched, (keys, train_idx, val_idx, test_idx),
        parallel_runs=parallel_runs, memory_budget=memory_budget,
        host=host_bytes(x, train_idx, val_idx, test_idx))
  compiled, chunk, _ = cache[fitted]
  n_chunks = -(-runs // chunk)
  keys, train_idx, val_idx, test_idx = _pad_runs(
      chunk, runs, keys, train_idx, val_idx, test_idx)
  start = time.perf_counter()
  errs, corr, over = [], [], []
  for c in range(n_chunks):
    sl = slice(c * chunk, (c + 1) * chunk)
    e, k, o = jax.block_until_ready(
        compiled(keys[sl], train_idx[sl], val_idx[sl], test_idx[sl]))
    errs.append(np.asarray(e))
    corr.append(np.asarray(k))
    over.append(np.asarray(o))
  return TrialResult(np.concatenate(errs)[:runs],
                     np.concatenate(corr)[:runs].astype(np.int64),
                     int(np.concatenate(over)[:runs].sum()),
                     time.perf_counter() - start, train_idx.shape[1],
                     val_idx.shape[1], test_idx.shape[1])


@dataclasses.dataclass(frozen=True)
class TrainingSetting:
  """What one evaluated setting trains: the model, the trainer, its privacy.

  Attributes:
    num_classes: k, the classes of ``y``.
    model: ``"glvq"`` or ``"gmlvq"``.
    trainer: ``"dpsgd"``, ``"sgd"`` or ``"bfgs"``.
    epsilon: the total target ε of ``"dpsgd"`` (None for the others).
    delta: δ of the privacy record.
    sampling_rate: Poisson sampling rate q.
    clip_norm: per-example clipping norm.
    epochs: E; T = :func:`sgd_steps` (E, q) steps.
    learning_rate: SGD step size.
    sigma_rule: ``"accountant"`` or ``"paper"`` (σ of the DP-SGD part).
    init_fraction: ε₁/ε, the share of the private initialisation.
    rank: rank of GMLVQ's Ω (None: full rank).
    normalise: normalise Ω.
    phi_kind: ``"identity"`` or ``"sigmoid"`` cost shaping.
    prototypes_per_class: prototypes of each class.
    bfgs_iterations: L-BFGS iterations of ``"bfgs"``.
    ghost_clipping: closed-form per-example norms instead of ``vmap``.
    init_mechanism: ``"laplace"`` or ``"gaussian"`` private initialisation.
  """
  num_classes: int
  model: str
  trainer: str
  epsilon: float | None
  delta: float
  sampling_rate: float
  clip_norm: float
  epochs: int
  learning_rate: float
  sigma_rule: str = "accountant"
  init_fraction: float = 0.2
  rank: int | None = None
  normalise: bool = False
  phi_kind: str = "identity"
  prototypes_per_class: int = 1
  bfgs_iterations: int = 100
  ghost_clipping: bool = True
  init_mechanism: str = "laplace"


@dataclasses.dataclass(frozen=True)
class Protocol:
  """How a setting is evaluated (:func:`evaluate`'s arguments).

  Attributes:
    folds: k of k-fold CV.
    repeats: how many times the k-fold split is redrawn.
    train_on_one_fold: train on one fold, test on the others (MNIST).
    parallel_runs: runs vmapped together per compiled call.
    memory_budget: bytes the evaluation may use (None: no check); fewer
      runs are vmapped together where ``parallel_runs`` would exceed it.
  """
  folds: int = 5
  repeats: int = 5
  train_on_one_fold: bool = False
  parallel_runs: int = 5
  memory_budget: int | None = None


def evaluate_setting(split_key: jax.Array, train_key: jax.Array, x, y,
                     setting: TrainingSetting, protocol: Protocol, *,
                     progress: Callable[[str], None] | None = None) -> dict:
  """Plans the privacy, runs :func:`evaluate`, and returns a JSON record.

  For ``setting.trainer="dpsgd"``, ``setting.epsilon`` is the total target;
  ε₁ = ``init_fraction``·ε goes to the Laplace initialisation and σ is
  chosen for ε₂ = ε − ε₁ by ``sigma_rule``. The record's ``"privacy"`` is
  ``ledger.report(delta)`` of one trained model (fields
  :data:`dpcore.accounting.PRIVACY_FIELDS`: the best of basic, RDP and PLD
  composition at ``delta``; the target ε as ``epsilon_nominal``); the plan's
  figures (σ, ε₁, the DP-SGD part's own ε, steps) are under ``"dpsgd"``.
  Non-private trainers report
  ``accounting.no_guarantee_record(accounting.NON_PRIVATE)`` and
  ``"dpsgd": None``.

  Args:
    split_key: PRNG key of the CV splits (see :func:`evaluate`).
    train_key: PRNG key of the training runs.
    x: (n, d) pooled data in [−1, 1]^d.
    y: (n,) class indices 0..k−1.
    setting: what is trained.
    protocol: how it is evaluated.
    progress: optional callback for progress lines.
  """
  st, pr = setting, protocol
  trainer, epsilon, delta = st.trainer, st.epsilon, st.delta
  sampling_rate, epochs = st.sampling_rate, st.epochs
  if trainer == "dpsgd":
    if epsilon is None:
      raise ValueError("trainer='dpsgd' needs epsilon (the total budget).")
    validation.check_epsilon(epsilon)
  validation.check_delta(delta)
  validation.check_in_range(sampling_rate, "q", 0.0, 1.0,
                            high_inclusive=True)
  validation.check_positive(st.clip_norm, "clip")
  n, dim = np.shape(x)
  folds = validation.check_positive_int(pr.folds, "folds")
  if folds < 2 or n < folds:
    raise ValueError(
        f"folds must be ≥ 2 and ≤ the number of rows ({n}), got {folds}.")
  size = n // folds
  n_train = size if pr.train_on_one_fold else size * (folds - 1)
  steps = sgd_steps(epochs, sampling_rate)
  max_batch = dpsgd.max_batch_size(n_train, sampling_rate=sampling_rate,
                                   steps=steps)
  privacy = accounting.no_guarantee_record(accounting.NON_PRIVATE)
  details = plan = None
  if trainer == "dpsgd":
    plan = lvq_train.make_plan(
        n_train, epsilon=epsilon, delta=delta, sampling_rate=sampling_rate,
        epochs=epochs, clip_norm=st.clip_norm, dim=dim,
        max_batch=max_batch, init_fraction=st.init_fraction,
        sigma_rule=st.sigma_rule, init_mechanism=st.init_mechanism)
    ledger = accounting.PrivacyLedger()
    plan.record(ledger)
    sigma, eps_init = plan.noise_multiplier, plan.epsilon_init
    init_sigma = plan.init_noise_multiplier
    privacy = ledger.report(
        delta, nominal_epsilon=epsilon,
        nominal_note="the target total ε (private init + DP-SGD) the noise "
                     "was calibrated for")
    sgd_entry = next(e for e in ledger.entries if e.label == "dpsgd")
    details = {
        "noise_multiplier": sigma, "epsilon_init": eps_init,
        "epsilon_sgd": sgd_entry.epsilon,
        "epsilon_sgd_target": plan.epsilon_sgd_target,
        "sigma_rule": st.sigma_rule, "steps": steps,
        "neighbouring": "add/remove one row",
        "init_mechanism": st.init_mechanism,
        "init_noise_multiplier": init_sigma,
        "scope": "one trained model, on its own training set (the "
                 "evaluation protocol is not a release)",
    }
  config = lvq_train.TrainConfig(
      model=st.model, trainer=trainer, num_classes=st.num_classes,
      prototypes_per_class=st.prototypes_per_class, rank=st.rank,
      normalise=st.normalise, phi_kind=st.phi_kind, epochs=epochs,
      sampling_rate=sampling_rate, learning_rate=st.learning_rate,
      max_batch=max_batch, bfgs_iterations=st.bfgs_iterations,
      ghost_clipping=st.ghost_clipping)
  res = evaluate(split_key, train_key, x, y, config, plan=plan, folds=folds,
                 repeats=pr.repeats,
                 train_on_one_fold=pr.train_on_one_fold,
                 parallel_runs=pr.parallel_runs,
                 memory_budget=pr.memory_budget, progress=progress)
  return {
      "model": st.model, "trainer": trainer,
      "epsilon": epsilon if trainer == "dpsgd" else None,
      "delta": delta, "q": sampling_rate, "clip": st.clip_norm,
      "epochs": epochs, "learning_rate": st.learning_rate,
      "error_mean": float(res.errors.mean()),
      "error_std": float(res.errors.std(ddof=1)) if res.errors.size > 1
      else 0.0,
      "errors": res.errors.ravel().tolist(),
      "seconds": res.seconds, "compile_seconds": res.compile_seconds,
      "privacy": privacy, "dpsgd": details, "folds": folds,
      "repeats": pr.repeats,
      "train_on": "one_fold" if pr.train_on_one_fold else "other_folds",
      "n_train": res.n_train, "n_test": res.n_test, "steps": steps,
      "max_batch": max_batch, "overflow_steps": res.overflow_steps,
      "final_cost_mean": float(res.final_costs.mean()),
      "rank": st.rank, "normalise": st.normalise, "phi": st.phi_kind,
      "prototypes_per_class": st.prototypes_per_class,
      "bfgs_iterations": st.bfgs_iterations if trainer == "bfgs" else None,
      "ghost_clipping": st.ghost_clipping,
      "init_mechanism": st.init_mechanism,
      "parallel_runs": res.parallel_runs,
      "memory_estimate": res.memory_estimate,
      "memory_budget": pr.memory_budget,
  }
