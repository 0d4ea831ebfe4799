"""DPWSS: SMO training with working sets chosen by the exponential mechanism.

Implements Algorithms 1–2 of *DPWSS: differentially private working set
selection for training support vector machines* (PeerJ CS 7:e799, 2021) on
top of :mod:`mechanisms.smo`: i as in WSS4 (the maximal violator of I_up),
j drawn among the never-selected pairs whose score q ≥ σ by the exponential
mechanism with per-selection ε and Δq = 1 − σ (see :mod:`mechanisms.wss`).
Repeats are one ``vmap`` over keys.

What is and is not private (read before using):

* Each selection is ε-DP *as a function of the current state*, and the run
  makes T of them, so the selection transcript is (T·ε)-DP by basic
  composition, or ε²/8-zCDP per selection composed by the RDP accountant
  (T = 400, ε = 1: about ε ≈ 96 at δ = 1e-5) — not ε as the paper claims.
* The trained model is NOT differentially private, for any kernel: α, the
  gradient, the candidate filter and the stopping test are exact functions
  of the data given the selections, and a kernel model stores raw rows as
  support vectors. ``model_is_private`` is therefore always False here; a
  private release needs its own mechanism, e.g.
  :func:`mechanisms.output_perturbation.private_linear_svm`.
* Even one selection's ε rests on the paper's sensitivity claim Δq = 1 − σ,
  taken at face value (:data:`SELECTION_ASSUMPTION`, carried in every
  privacy report): one row changes m, M′ and every Gₜ, and the set of
  candidates itself depends on the data, which the textbook analysis of the
  exponential mechanism does not cover.

>>> import jax, numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.normal(size=(40, 2)); y = np.where(x[:, 0] > 0, 1, -1)
>>> run = dpwss_train(jax.random.key(1), x, y, epsilon=1.0, sigma=0.5,
...                   repeats=2)
>>> len(run.models), run.model_is_private
(2, False)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import accounting, validation
from mechanisms import kernels, smo, smo_train, wss

DEFAULT_DELTA = 1e-5

# Carried in every privacy report: the per-selection guarantee rests on it.
SELECTION_ASSUMPTION = (
    "each selection is taken to be epsilon-DP with the paper's score "
    "sensitivity 1 - sigma; not proven here: one row changes m, M' and every "
    "G_t, and the candidate set itself depends on the data")


# Cap on the pair flags of all repeats of one call together (see
# :func:`resolve_pair_flags`); the per-run cap is ``wss.BITSET_MAX_BYTES``.
PAIR_FLAGS_TOTAL_BYTES = 4 << 30


def resolve_pair_flags(pair_flags: str, num: int, repeats: int) -> str:
  """``"auto"`` → ``"bits"`` when the flags of every repeat fit, else scan.

  The flags take l²/8 bytes per repeat and the repeats run together, so
  ``"auto"`` keeps them when ``repeats`` · l²/8 ≤ 4 GiB (and each run is
  within ``wss.BITSET_MAX_BYTES``): 5 repeats at l = 50,000 take 1.6 GB;
  64 repeats at l = 50,000 (20 GB) scan the pair record instead.
  """
  if pair_flags != "auto":
    return pair_flags
  per_run = wss.bitset_bytes(num)
  fits = (per_run <= wss.BITSET_MAX_BYTES
          and repeats * per_run <= PAIR_FLAGS_TOTAL_BYTES)
  return "bits" if fits else "scan"


def default_max_iter(num: int) -> int:
  """Iteration cap = pair-buffer rows: max(10⁴, 100·l) (8 bytes each)."""
  return max(10_000, 100 * num)


@dataclasses.dataclass(frozen=True)
class DPWSSRun:
  """The repeats of one DPWSS setting.

  Attributes:
    models: one :class:`smo_train.SVMModel` per repeat.
    epsilon: per-selection ε.
    sigma: the constant factor σ.
    pairs: per repeat, the (iterations, 2) selected pairs (i, j) — the
      selection transcript the accounting covers.
    model_is_private: always False (see the module docstring).
  """
  models: tuple[smo_train.SVMModel, ...]
  epsilon: float
  sigma: float
  pairs: tuple[np.ndarray, ...]
  model_is_private: bool = False

  @property
  def iterations(self) -> np.ndarray:
    return np.asarray([m.iterations for m in self.models])


def check_dpwss_parameters(epsilon, sigma) -> tuple[float, float]:
  epsilon = validation.check_epsilon(epsilon)
  sigma = validation.check_in_range(sigma, "sigma", 0.0, 1.0)
  return epsilon, sigma


def dpwss_train(key: jax.Array, x, y, *, epsilon: float, sigma: float,
                kernel: kernels.KernelSpec = smo_train.RBF, c: float = 1.0,
                eps: float = 1e-3, shrinking: bool = False,
                max_iter: int | None = None, repeats: int = 1,
                dtype: str = "float64", precompute: bool | None = None,
                row_dtype: str = "float32",
                ordered_pairs: bool = True,
                pair_flags: str = "auto",
                unroll: int | None = None) -> DPWSSRun:
  """Trains ``repeats`` C-SVCs with DPWSS, vmapped over split keys.

  Args:
    key: PRNG key; split into one key per repeat, each folded with the
      iteration number for its selections.
    x: (l, d) training rows, finite.
    y: (l,) labels in {−1, +1}, both present.
    epsilon: ε of each selection (the paper's ε).
    sigma: constant factor σ ∈ (0, 1); Δq = 1 − σ.
    kernel: kernel spec (γ defaults to 1/d).
    c: box constraint C > 0.
    eps: stopping tolerance (LIBSVM's ``-e``).
    shrinking: LIBSVM's shrinking heuristic.
    max_iter: iteration cap, also the pair record's length (default
      max(10⁴, 100·l)).
    repeats: independent runs (the paper averages 5).
    dtype: solver precision (``float64`` enables x64 for this call only).
    precompute: cache Q's rows (default: ``smo_train.resolve_precompute``).
    row_dtype: kernel-row precision (LIBSVM's float32 cache).
    ordered_pairs: the paper's ordered flag I[i][j] (default) or
      unordered pairs.
    pair_flags: how used pairs are looked up (``wss.DPWSS.pair_flags``):
      ``"auto"`` (:func:`resolve_pair_flags`), ``"bits"`` (l²/8 bytes per
      repeat, O(l) per iteration) or ``"scan"`` (O(max_iter) memory,
      O(iteration) per iteration).
    unroll: iterations per loop trip (``smo_train.resolve_unroll``; speed
      only, same result).

  Returns:
    A :class:`DPWSSRun`; exits are reported per model, never raised.

  Privacy: neighbouring datasets differ in one row. Each selection is
  ε-DP given the state under the paper's sensitivity claim Δq = 1 − σ; a
  run's transcript of T selections is what :func:`privacy_report`
  accounts. The returned models are NOT differentially private.
  """
  epsilon, sigma = check_dpwss_parameters(epsilon, sigma)
  repeats = validation.check_positive_int(repeats, "repeats")
  with jax.enable_x64(dtype == "float64"):
    num = np.shape(x)[0] if np.ndim(x) == 2 else 0
    if max_iter is None:
      max_iter = default_max_iter(max(num, 1))
    x, y, spec, config, problem, max_iter = smo_train.solver_setup(
        x, y, kernel=kernel, c=c, eps=eps, max_iter=max_iter, dtype=dtype,
        precompute=precompute, row_dtype=row_dtype, shrinking=shrinking,
        repeats=repeats, unroll=unroll)
    rule = wss.DPWSS(buffer_rows=max_iter, ordered_pairs=ordered_pairs,
                     pair_flags=resolve_pair_flags(pair_flags, num,
                                                   repeats))
    params = smo.SolverParams(
        jnp.asarray(c, dtype), jnp.asarray(eps, dtype),
        jnp.asarray(max_iter, jnp.int32),
        wss.DPWSSParams(jnp.asarray(epsilon, dtype),
                        jnp.asarray(sigma, dtype)))
    keys = jax.random.split(key, repeats)
    result = smo.to_numpy(smo.solve_repeats(keys, problem, params,
                                            config=config, rule=rule))
  models = tuple(
      smo_train.model_from_result(spec, x, y, smo.SMOResult(
          *(v[r] for v in result)))
      for r in range(repeats))
  pairs = tuple(result.pairs[r][:models[r].iterations]
                for r in range(repeats))
  return DPWSSRun(models, epsilon, sigma, pairs)


def selection_ledger(epsilon: float, iterations: int,
                     ledger: accounting.PrivacyLedger | None = None
                     ) -> accounting.PrivacyLedger:
  """A ledger holding one exponential-mechanism event per selection."""
  ledger = accounting.PrivacyLedger() if ledger is None else ledger
  iterations = int(iterations)
  if iterations > 0:
    ledger.record_exponential(epsilon, count=iterations,
                              label="dpwss_selections")
  return ledger


def privacy_report(epsilon: float, iterations: int, *,
                   delta: float = DEFAULT_DELTA,
                   ledger: accounting.PrivacyLedger | None = None) -> dict:
  """The paper's nominal ε beside what the selection transcript costs.

  Args:
    epsilon: per-selection ε.
    iterations: selections actually made (use the largest over repeats).
    delta: δ of the composed (RDP/zCDP) guarantee.
    ledger: an existing ledger to add the selections to (e.g. one that
      already holds an output-perturbation release).

  Returns:
    ``epsilon_per_iteration``, ``iterations``, ``epsilon_nominal`` (the
    paper's claim, = ε), ``epsilon_basic`` (T·ε plus any other entries),
    ``epsilon`` and ``delta`` (the tightest composed guarantee of all
    entries), ``method`` and the ledger's entries.
  """
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  ledger = selection_ledger(epsilon, iterations, ledger)
  summary = ledger.summary(delta)
  return {
      "epsilon_per_iteration": epsilon,
      "iterations": int(iterations),
      "epsilon_nominal": epsilon,
      "epsilon_basic": summary["basic_epsilon"],
      "epsilon": summary["epsilon"],
      "delta": summary["delta"],
      "method": summary["method"],
      "entries": summary["entries"],
      "note": ("epsilon_nominal is the paper's claim; epsilon/delta compose "
               "the selections (and any release) actually made. The SMO "
               "model itself is not DP."),
      "selection_assumption": SELECTION_ASSUMPTION,
  }


def epsilon_per_iteration(total_epsilon: float, *, max_iter: int,
                          delta: float = DEFAULT_DELTA,
                          tol: float = 1e-9) -> float:
  """Largest per-selection ε whose ``max_iter`` selections fit the target.

  Bisection on the composed guarantee (min of basic and zCDP/RDP) of
  ``max_iter`` exponential-mechanism selections at ``delta``.
  """
  total_epsilon = validation.check_epsilon(total_epsilon, "total_epsilon")
  max_iter = validation.check_positive_int(max_iter, "max_iter")
  delta = validation.check_delta(delta)

  def spent(eps_iter):
    ledger = accounting.PrivacyLedger(use_pld=False)
    ledger.record_exponential(eps_iter, count=max_iter, label="selections")
    return ledger.guarantee(delta).epsilon

  lo, hi = 0.0, total_epsilon  # T selections never cost less than one
  if spent(hi) <= total_epsilon:
    return hi
  while hi - lo > tol * hi:
    mid = 0.5 * (lo + hi)
    if spent(mid) <= total_epsilon:
      lo = mid
    else:
      hi = mid
  return lo
