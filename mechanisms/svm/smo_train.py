"""Training entry points of the C-SVC SMO solver: WSS2 and the model.

:func:`wss2_train` is the non-private LIBSVM-equivalent reference; DPWSS
(the paper's selection, which has no DP guarantee, and the private
variant) is :func:`mechanisms.svm.dpwss.release`. Both
validate their inputs here, before anything is traced, and run the solver
of :mod:`mechanisms.svm.smo` with x64 enabled only inside the call.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.normal(size=(30, 2)); y = np.where(x[:, 0] > 0, 1, -1)
>>> model = wss2_train(x, y, c=1.0)
>>> model.exit_reason, bool(np.mean(model.predict(x) == y) > 0.9)
('stationary', True)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import memory, options, validation
from mechanisms.svm import kernels, smo, wss

__all__ = [
    "PRECOMPUTE_MAX_BYTES",
    "PRECOMPUTE_MAX_BYTES_ACCELERATOR",
    "PRECOMPUTE_SMALL",
    "RBF",
    "SPARSE_FEW_FEATURES",
    "SVMModel",
    "UNROLL_ACCELERATOR",
    "check_solver_settings",
    "check_svm_inputs",
    "fixed_bytes",
    "model_from_result",
    "resolve_precompute",
    "resolve_precompute_in_budget",
    "resolve_row_cache",
    "resolve_sparse_rows",
    "resolve_unroll",
    "run_bytes",
    "solver_setup",
    "wss2_train",
]

PRECOMPUTE_SMALL = 2_000  # l up to which Q is always cached
PRECOMPUTE_MAX_BYTES = 1 << 28  # 256 MiB cap on a cached Q (CPU)
PRECOMPUTE_MAX_BYTES_ACCELERATOR = 1 << 31  # 2 GiB on a GPU/TPU
UNROLL_ACCELERATOR = 4  # SMO iterations per loop trip on a GPU/TPU
# Rows by nonzero features (automatic, CPU): when a row has on average at
# most this many nonzeros, or at most a third of the features.
SPARSE_FEW_FEATURES = 32
RBF = kernels.KernelSpec(options.Kernel.RBF)  # LIBSVM's default, γ = 1/d


def check_svm_inputs(x, y, *, c, eps) -> tuple[np.ndarray, np.ndarray]:
  """Validates training data and C-SVC parameters (before any tracing)."""
  x = validation.check_matrix(x, "x")
  y = validation.check_labels(y, "y", binary_pm1=True, num_examples=x.shape[0])
  check_solver_settings(c=c, eps=eps)
  return x, y


def check_solver_settings(*, c, eps, max_iter=None, dtype="float64") -> None:
  """Checks the C-SVC solver's settings that need no data.

  Args:
    c: C > 0.
    eps: the stopping tolerance, > 0.
    max_iter: None (the solver's default) or an integer ≥ 1.
    dtype: ``"float32"`` or ``"float64"``.

  Raises:
    ValueError: one line naming the setting (``c``, ``eps``, ``max_iter``,
      ``dtype``) and the fix.
  """
  validation.check_positive(c, "c")
  validation.check_positive(eps, "eps")
  if max_iter is not None:
    validation.check_positive_int(max_iter, "max_iter")
  if dtype not in ("float32", "float64"):
    raise ValueError(f"dtype must be 'float32' or 'float64', got "
                     f"{dtype!r}.")


def resolve_precompute(precompute, num_examples: int, *, repeats: int = 1,
                       row_dtype: str = "float32",
                       backend: str | None = None) -> bool:
  """Whether to cache Q: forced by ``precompute``, else automatic.

  Automatic on the CPU: always for l ≤ 2,000; for several vmapped repeats
  (which share the cache, while on-demand rows cost each repeat 2 rows
  per iteration) whenever Q fits in 256 MiB; otherwise rows on demand
  (one run of T iterations computes 2T rows, usually fewer than l).

  On an accelerator (``backend`` other than ``"cpu"``; default: JAX's
  default backend) whenever Q fits in 2 GiB: there computing all of Q is
  one matrix product of negligible cost, while rows on demand cost each
  iteration a pass over X (on an H100, WSS2 on 5,000 MNIST rows: 0.108 s
  on demand, 0.075 s cached, Q's computation included).
  """
  if precompute is not None:
    return bool(precompute)
  if num_examples <= PRECOMPUTE_SMALL:
    return True
  q_bytes = num_examples * num_examples * np.dtype(row_dtype).itemsize
  if (backend or jax.default_backend()) != "cpu":
    return q_bytes <= PRECOMPUTE_MAX_BYTES_ACCELERATOR
  return q_bytes <= PRECOMPUTE_MAX_BYTES and repeats > 1


def fixed_bytes(num_examples: int, dim: int, *, dtype: str, row_dtype: str,
                precompute: bool, sparse_width: int = 0) -> int:
  """Upper estimate of the bytes a solver call holds whatever its runs.

  The training rows twice (the caller's float64 copy and the solver's
  ``dtype`` copy), a dozen l-vectors, with ``precompute`` the cached
  Q (l² in ``row_dtype``) plus its computation's l² ``dtype`` block, and
  with rows by nonzero features (``sparse_width`` p > 0,
  :func:`kernels.sparse_width`) X transposed and l × p features and values.
  """
  size = np.dtype(dtype).itemsize
  total = num_examples * dim * (8 + size) + 16 * num_examples * size
  if precompute:
    total += num_examples**2 * (np.dtype(row_dtype).itemsize + size)
  if sparse_width:
    total += num_examples * (dim * size + sparse_width * (4 + size))
  return total


def run_bytes(num_examples: int, *, dtype: str, pair_bits: bool = False,
              record_rows: int = 0, cache_rows: int = 0,
              row_dtype: str = "float32") -> int:
  """Upper estimate of the bytes each run of a call adds (its loop state).

  The loop carry (α, G, the active mask and the rows of one step: about
  eight l-vectors), DPWSS's pair memory: the packed flags (``pair_bits``,
  l²/8 bytes) and the pair record (``record_rows`` × 8 bytes, copied to
  the host at the end), and the row cache of a single run
  (``cache_rows`` rows of l values, :func:`smo.row_cache_dtype`). Each is
  counted twice: the loop's input and output buffers.
  """
  size = np.dtype(dtype).itemsize
  total = 8 * num_examples * size
  if pair_bits:
    total += wss.bitset_bytes(num_examples)
  total += record_rows * 8
  total += cache_rows * _cache_row_bytes(num_examples, dtype=dtype,
                                         row_dtype=row_dtype)
  return 2 * total


def _cache_row_bytes(num_examples: int, *, dtype: str, row_dtype: str) -> int:
  """Bytes of one cached row: l values, a tag and a stamp."""
  row = np.dtype(smo.row_cache_dtype(dtype, row_dtype))
  return num_examples * row.itemsize + 8


def resolve_row_cache(row_cache, num_examples: int, *, dtype: str,
                      row_dtype: str, precompute: bool,
                      memory_budget: int | None = None,
                      other_bytes: int = 0) -> int:
  """Rows the single-run row cache keeps (``smo.SolverConfig.row_cache``).

  None (automatic): :func:`smo.default_row_cache` rows (at most 1,024
  rows and 64 MiB); an int m ≥ 0: min(m, l); always 0 with a precomputed
  Q, which needs no cache. With ``memory_budget`` (bytes; ``other_bytes``
  of it already taken by the rest of the call), an automatic cache
  shrinks to what fits and a forced one that does not fit is refused.

  Raises:
    ValueError: ``row_cache`` is not None or an int ≥ 0.
    dpcore.memory.MemoryBudgetError: a forced cache exceeds the budget.
  """
  if row_cache is not None and (
      isinstance(row_cache, (bool, np.bool_))
      or not isinstance(row_cache, (int, np.integer)) or row_cache < 0):
    raise ValueError(
        f"row_cache must be None (automatic) or an int ≥ 0 (kernel rows "
        f"kept; 0: no cache), got {row_cache!r}.")
  if precompute:
    return 0
  rows = smo.default_row_cache(
      num_examples, dtype=dtype, row_dtype=row_dtype) if (
          row_cache is None) else min(int(row_cache), num_examples)
  if memory_budget is None:
    return rows
  each = 2 * _cache_row_bytes(num_examples, dtype=dtype, row_dtype=row_dtype)
  room = max(0, memory_budget - other_bytes)
  if rows * each <= room:
    return rows
  if row_cache is None:
    return room // each
  raise memory.MemoryBudgetError(
      f"the SMO solver on {num_examples} rows with a row cache of {rows} "
      f"rows needs an estimated "
      f"{memory.size_text(other_bytes + rows * each)}, above the "
      f"memory budget of {memory.size_text(memory_budget)}; pass a smaller "
      f"row_cache (0: no cache) or a larger memory_budget.")


def resolve_precompute_in_budget(precompute, num_examples: int, dim: int, *,
                                 dtype: str, row_dtype: str,
                                 memory_budget: int | None,
                                 repeats: int = 1, run_extra: int = 0
                                 ) -> bool:
  """:func:`resolve_precompute`, then checked against ``memory_budget``.

  Automatic caching is dropped (rows on demand) when the cached Q and one
  run (``run_bytes`` + ``run_extra``) would exceed the budget; a forced
  ``precompute=True`` that does not fit is refused. None: unchecked.

  Raises:
    dpcore.memory.MemoryBudgetError: ``precompute=True`` does not fit.
  """
  chosen = resolve_precompute(precompute, num_examples, repeats=repeats,
                              row_dtype=row_dtype)
  if not chosen or memory_budget is None:
    return chosen
  need = fixed_bytes(num_examples, dim, dtype=dtype, row_dtype=row_dtype,
                     precompute=True) + run_bytes(
                         num_examples, dtype=dtype) + run_extra
  if need <= memory_budget:
    return True
  if precompute is None:
    return False
  raise memory.MemoryBudgetError(
      f"the SMO's precomputed kernel matrix ({num_examples} x "
      f"{num_examples}) needs an estimated {memory.size_text(need)}, above "
      f"the memory budget of {memory.size_text(memory_budget)}; pass "
      f"precompute=False (rows on demand) or a larger memory_budget.")


@dataclasses.dataclass(frozen=True)
class SVMModel:
  """A trained C-SVC: f(x) = Σ_t α_t y_t K(x_t, x) + b.

  Attributes:
    kernel: the resolved kernel.
    x_sv: support-vector rows (α_t > 0) — raw training rows.
    coef: α_t y_t of those rows.
    bias: b (= −ρ of LIBSVM).
    alpha: α of every training row.
    objective: dual objective ½αᵀQα − eᵀα.
    iterations: SMO iterations run.
    exit_reason: ``stationary``, ``no_candidate`` or ``max_iter``.
  """
  kernel: kernels.KernelSpec
  x_sv: np.ndarray
  coef: np.ndarray
  bias: float
  alpha: np.ndarray
  objective: float
  iterations: int
  exit_reason: str

  @property
  def support(self) -> np.ndarray:
    return np.flatnonzero(self.alpha > 0)

  def decision_function(self, x) -> np.ndarray:
    """f(x) for each row of ``x`` (float64)."""
    with jax.enable_x64(True):
      out = kernels.decision_values(
          self.kernel, jnp.asarray(self.x_sv, jnp.float64),
          jnp.asarray(self.coef, jnp.float64), self.bias,
          jnp.asarray(np.asarray(x), jnp.float64))
      return np.asarray(out)

  def predict(self, x) -> np.ndarray:
    """Labels ±1 (sign of f, 0 mapped to −1 as LIBSVM does)."""
    return np.where(self.decision_function(x) > 0, 1, -1)


def model_from_result(spec, x, y, result: smo.SMOResult) -> SVMModel:
  """An :class:`SVMModel` from one (unbatched) solver result."""
  alpha = np.asarray(result.alpha, np.float64)
  sv = alpha > 0
  return SVMModel(
      kernel=spec, x_sv=np.asarray(x)[sv], coef=(alpha * y)[sv],
      bias=float(result.bias), alpha=alpha,
      objective=float(result.objective),
      iterations=int(result.iterations),
      exit_reason=smo.exit_reason(result.exit_code))


def resolve_unroll(unroll, backend: str | None = None) -> int:
  """SMO iterations per ``while_loop`` trip (``smo.SolverConfig.unroll``).

  Forced by ``unroll``; else 1 on the CPU, where a trip costs nothing extra,
  and ``UNROLL_ACCELERATOR`` on an accelerator (``backend``; default: JAX's
  default backend), where every trip waits for the host to read the loop
  condition. Results are the same either way.
  """
  if unroll is not None:
    return validation.check_positive_int(unroll, "unroll")
  return 1 if (backend or jax.default_backend()) == "cpu" else (
      UNROLL_ACCELERATOR)


def resolve_sparse_rows(sparse_rows, x, *, precompute: bool,
                        backend: str | None = None) -> bool:
  """Whether kernel rows are formed from the rows' nonzero features.

  Forced by ``sparse_rows`` (True/False); automatic (None) on the CPU
  when rows come on demand and the rows hold on average at most
  ``max(d / 3, SPARSE_FEW_FEATURES)`` nonzeros. Never with a precomputed Q
  (its rows are read, not formed). A 2-core CPU, per SMO iteration: MNIST
  5,000 × 784 (a fifth nonzero) 0.20 ms sparse against 0.56 ms dense; its
  4×4-pooled 49 features (37 % nonzero) 0.05 against 0.12–0.16 ms; uniform
  5,000 × 64, all nonzero, 0.13 against 0.10 ms; 5,000 × 784, 43 %
  nonzero, 0.59 against 0.47 ms. Results agree in value, not bitwise: the
  sum of a dot product runs in another order (see
  :func:`kernels.sparse_kernel_row`).

  Raises:
    ValueError: ``sparse_rows`` is not None, True or False.
  """
  if sparse_rows is not None and not isinstance(sparse_rows,
                                                (bool, np.bool_)):
    raise ValueError(f"sparse_rows must be None (automatic), True or "
                     f"False, got {sparse_rows!r}.")
  if precompute:
    return False
  if sparse_rows is not None:
    return bool(sparse_rows)
  if (backend or jax.default_backend()) != "cpu":
    return False
  x = np.asarray(x)
  mean_nonzeros = np.count_nonzero(x) / max(x.shape[0], 1)
  return mean_nonzeros <= max(x.shape[1] / 3, SPARSE_FEW_FEATURES)


def solver_setup(x, y, *, kernel, c, eps, max_iter, dtype, precompute,
                 row_dtype, shrinking, repeats=1, unroll=None,
                 memory_budget=None, row_cache=None, sparse_rows=False):
  """Shared validation and construction for the train entry points.

  Must be called inside the precision context of the run.
  ``sparse_rows``: see :func:`resolve_sparse_rows` (the default, False,
  suits the vmapped repeats of :func:`smo.solve_repeats`). With
  ``memory_budget`` (bytes), Q is cached only where it fits
  (:func:`resolve_precompute_in_budget`), one run that does not fit is
  refused, before anything is computed, and the single-run row cache is
  sized to what is left (:func:`resolve_row_cache`). Without a budget
  ``row_cache`` is checked and passed on (None: sized by the solver,
  which keeps no cache in :func:`smo.solve_repeats`).
  """
  x, y = check_svm_inputs(x, y, c=c, eps=eps)
  check_solver_settings(c=c, eps=eps, dtype=dtype)
  if row_dtype not in ("float32", "float64"):
    raise ValueError(
        f"row_dtype must be 'float32' or 'float64', got {row_dtype!r}.")
  if not isinstance(kernel, kernels.KernelSpec):
    raise TypeError(
        f"kernel must be a kernels.KernelSpec, got {kernel!r}; write e.g. "
        f"kernel=kernels.KernelSpec({kernel!r}) for a kernel name.")
  spec = kernel.resolve(x.shape[1])
  num_examples = x.shape[0]
  max_iter = smo.default_max_iter(num_examples) if max_iter is None else (
      validation.check_positive_int(max_iter, "max_iter"))
  memory_budget = memory.resolve_budget(memory_budget)
  cache = resolve_precompute_in_budget(
      precompute, num_examples, x.shape[1], dtype=dtype, row_dtype=row_dtype,
      memory_budget=memory_budget, repeats=repeats)
  sparse = resolve_sparse_rows(sparse_rows, x, precompute=cache)
  if memory_budget is not None:
    def need_with(width):
      return fixed_bytes(
          num_examples, x.shape[1], dtype=dtype, row_dtype=row_dtype,
          precompute=cache, sparse_width=width) + run_bytes(
              num_examples, dtype=dtype)
    need = need_with(0)
    if sparse and need <= memory_budget:
      with_rows = need_with(kernels.sparse_width(x))
      if with_rows <= memory_budget:
        need = with_rows
      elif sparse_rows is None:  # automatic: rows from the dense X instead
        sparse = False
      else:
        raise memory.MemoryBudgetError(
            f"the SMO solver on {num_examples} x {x.shape[1]} rows with "
            f"sparse_rows=True needs an estimated "
            f"{memory.size_text(with_rows)}, above the memory budget of "
            f"{memory.size_text(memory_budget)}; pass sparse_rows=False or a "
            f"larger memory_budget.")
    if need > memory_budget:
      raise memory.MemoryBudgetError(
          f"the SMO solver on {num_examples} x {x.shape[1]} rows needs an "
          f"estimated {memory.size_text(need)}, above the memory budget of "
          f"{memory.size_text(memory_budget)}; train on fewer rows or give a "
          f"larger memory_budget.")
    row_cache = resolve_row_cache(
        row_cache, num_examples, dtype=dtype, row_dtype=row_dtype,
        precompute=cache, memory_budget=memory_budget, other_bytes=need)
  elif row_cache is not None:
    row_cache = resolve_row_cache(row_cache, num_examples, dtype=dtype,
                                  row_dtype=row_dtype, precompute=cache)
  config = smo.SolverConfig(kernel=spec, shrinking=bool(shrinking),
                            row_dtype=row_dtype,
                            unroll=resolve_unroll(unroll),
                            row_cache=row_cache)
  problem = smo.make_problem(spec, x, y, dtype=dtype, precompute=cache,
                             row_dtype=row_dtype, sparse=sparse)
  return x, y, spec, config, problem, max_iter


def wss2_train(x, y, *, kernel: kernels.KernelSpec = RBF,
               c: float = 1.0, eps: float = 1e-3, shrinking: bool = False,
               max_iter: int | None = None, dtype: str = "float64",
               precompute: bool | None = None,
               row_dtype: str = "float32",
               unroll: int | None = None,
               memory_budget: int | str | None = None,
               row_cache: int | None = None,
               sparse_rows: bool | None = None) -> SVMModel:
  """Trains a C-SVC with LIBSVM's WSS2 (non-private reference).

  Deterministic, so it takes no key. With ``shrinking=False``, float64 and
  float32 rows it follows LIBSVM's path (same iterations, α, b), up to
  rounding: where XLA fuses a dot product's multiply-adds (FMA, as on
  most x86 CPUs) long dot products can round an ulp apart and the path
  part late (MNIST 5,000 × 784: 1,471 iterations against LIBSVM's 1,478,
  the same 1,478 without FMA; docs/benchmarks.md).

  Args:
    x: (l, d) training rows, finite.
    y: (l,) labels in {−1, +1}, both present.
    kernel: kernel and its parameters (γ defaults to 1/d).
    c: box constraint C > 0.
    eps: stopping tolerance on m − M (LIBSVM's ``-e``).
    shrinking: LIBSVM's ``-h``.
    max_iter: iteration cap (default LIBSVM's).
    dtype: solver precision, ``float64`` (x64 enabled for this call only)
      or ``float32``.
    precompute: cache Q's rows (default: see :func:`resolve_precompute`).
    row_dtype: precision of kernel rows (LIBSVM: float32).
    unroll: iterations per loop trip (default: :func:`resolve_unroll`;
      speed only, same result).
    memory_budget: bytes the call may use: Q is cached only where it
      fits, and a run that cannot fit is refused before any work; "auto":
      3/4 of the memory available now
      (:func:`dpcore.memory.resolve_budget`); None (default): no limit.
    row_cache: kernel rows kept for reuse when rows are computed on
      demand (speed only, same result): None (default) up to 1,024 rows
      and 64 MiB of them (less where ``memory_budget`` says so), an int
      m ≥ 0 that many (0: none); see :class:`smo.SolverConfig`.
    sparse_rows: form kernel rows on demand from each row's nonzero
      features: None (default) where that is faster on the CPU, True or
      False forced; see :func:`resolve_sparse_rows`.

  Returns:
    The trained :class:`SVMModel`.

  Raises:
    ValueError: bad data or settings.
    dpcore.memory.MemoryBudgetError: the run (or a forced
      ``precompute=True`` or ``row_cache``) exceeds ``memory_budget``.

  Privacy: none. This is the non-private baseline.
  """
  with jax.enable_x64(dtype == "float64"):
    x, y, spec, config, problem, max_iter = solver_setup(
        x, y, kernel=kernel, c=c, eps=eps, max_iter=max_iter, dtype=dtype,
        precompute=precompute, row_dtype=row_dtype, shrinking=shrinking,
        unroll=unroll, memory_budget=memory_budget, row_cache=row_cache,
        sparse_rows=sparse_rows)
    params = smo.SolverParams(jnp.asarray(c, dtype), jnp.asarray(eps, dtype),
                          jnp.asarray(max_iter, jnp.int32), None)
    # WSS2 is deterministic: the key is required by the solver's signature
    # but never drawn from.
    result = smo.solve(jax.random.key(0), problem, params, config=config,
                       rule=wss.WSS2())
    result = smo.to_numpy(result)
  return model_from_result(spec, x, y, result)
