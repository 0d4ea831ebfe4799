"""Parity of the JAX SMO solver (WSS2) with LIBSVM, and input validation.

LIBSVM (``libsvm-official``) is the oracle: with shrinking off the solver
must follow LIBSVM's path exactly (same #iter, objective to 1e-6 relative,
same support vectors, b to 1e-6); with shrinking on the objective must
agree to 1e-4 relative. LIBSVM's ``#iter`` and ``obj`` are read from the
text it prints, captured through its print-function hook.
"""

import os
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from libsvm import svm as libsvm_svm
from libsvm import svmutil
from sklearn import datasets

from launch.data import loaders as launch_data
from mechanisms.svm import kernels, smo, smo_train, wss

HEART = os.path.join(launch_data.BUNDLED_DIR, "heart_scale")


def libsvm_fit(x, y, options):
  """Trains LIBSVM; returns (model, #iter, obj, rho)."""
  lines = []
  hook = libsvm_svm.PRINT_STRING_FUN(lambda s: lines.append(s.decode()))
  problem = libsvm_svm.svm_problem(
      np.asarray(y, np.float64).tolist(), np.asarray(x, np.float64))
  param = libsvm_svm.svm_parameter(options)
  param.print_func = hook  # svm_train installs param.print_func
  try:
    model = svmutil.svm_train(problem, param)
  finally:
    libsvm_svm.libsvm.svm_set_print_string_function(
        libsvm_svm.ctypes_print_null)
  text = "".join(lines)
  iters = int(re.search(r"#iter = (\d+)", text).group(1))
  match = re.search(r"obj = (\S+), rho = (\S+)", text)
  return model, iters, float(match.group(1)), float(match.group(2))


def libsvm_support(model, y):
  """Support indices (0-based) and α of LIBSVM's model, in row order."""
  idx = np.asarray(model.get_sv_indices()) - 1
  coef = np.asarray([c[0] for c in model.get_sv_coef()])
  # LIBSVM's coefficients are α_t y_t for its first label's orientation.
  sign = 1.0 if model.get_labels()[0] == 1 else -1.0
  alpha = sign * coef * np.asarray(y)[idx]
  order = np.argsort(idx)
  return idx[order], alpha[order]


def assert_follows_libsvm(model, ref, ref_iter, ref_obj, ref_rho, y):
  """LIBSVM's path: same #iter, objective and b to 1e-6, same support."""
  assert model.exit_reason == "stationary"
  assert model.iterations == ref_iter
  np.testing.assert_allclose(model.objective, ref_obj, rtol=1e-6)
  np.testing.assert_allclose(model.bias, -ref_rho, atol=1e-6)
  idx, alpha = libsvm_support(ref, y)
  np.testing.assert_array_equal(model.support, idx)
  np.testing.assert_allclose(model.alpha[idx], alpha, atol=1e-6)


def heart():
  x, y = datasets.load_svmlight_file(HEART,
                                     n_features=13)
  return x.toarray(), y.astype(np.float64)


def breast_cancer():
  # Rows scaled to unit L2 norm (per-row, data-independent).
  x, y = datasets.load_breast_cancer(return_X_y=True)
  x = x / np.linalg.norm(x, axis=1, keepdims=True)
  return x, np.where(y == 1, 1.0, -1.0)


def digits_pair():
  # Digits 3 vs 8, pixels divided by their public maximum 16.
  x, y = datasets.load_digits(return_X_y=True)
  keep = (y == 3) | (y == 8)
  return x[keep] / 16.0, np.where(y[keep] == 3, 1.0, -1.0)


CASES = {
    "heart": (heart, 1.0),
    "breast_cancer": (breast_cancer, 10.0),
    "digits_3v8": (digits_pair, 1.0),
}
SLOW = pytest.mark.slow


@pytest.mark.parametrize("name", [
    "heart", "digits_3v8", pytest.param("breast_cancer", marks=SLOW)])
def test_matches_libsvm_path_without_shrinking(name):
  load, c = CASES[name]
  x, y = load()
  gamma = 1.0 / x.shape[1]
  ref, ref_iter, ref_obj, ref_rho = libsvm_fit(
      x, y, f"-s 0 -t 2 -c {c} -g {gamma!r} -e 0.001 -h 0")
  spec = kernels.KernelSpec("rbf", gamma=gamma)
  model = smo_train.wss2_train(x, y, kernel=spec, c=c, eps=1e-3,
                               shrinking=False)
  assert_follows_libsvm(model, ref, ref_iter, ref_obj, ref_rho, y)
  # Predictions agree with LIBSVM's decision values.
  _, _, dec = svmutil.svm_predict(y.tolist(), x, ref, "-q")
  sign = 1.0 if ref.get_labels()[0] == 1 else -1.0
  np.testing.assert_allclose(model.decision_function(x),
                             sign * np.asarray(dec)[:, 0], atol=1e-5)


@pytest.mark.parametrize("name", [
    "heart", pytest.param("digits_3v8", marks=SLOW)])
def test_objective_with_shrinking(name):
  load, c = CASES[name]
  x, y = load()
  gamma = 1.0 / x.shape[1]
  _, _, ref_obj, _ = libsvm_fit(
      x, y, f"-s 0 -t 2 -c {c} -g {gamma!r} -e 0.001 -h 1")
  spec = kernels.KernelSpec("rbf", gamma=gamma)
  model = smo_train.wss2_train(x, y, kernel=spec, c=c, shrinking=True)
  assert model.exit_reason == "stationary"
  np.testing.assert_allclose(model.objective, ref_obj, rtol=1e-4)


@pytest.mark.parametrize("kind,opts", [
    ("linear", "-t 0"), pytest.param("poly", "-t 1 -d 2 -r 1", marks=SLOW),
    pytest.param("sigmoid", "-t 3 -r -1", marks=SLOW)])
def test_other_kernels_match_libsvm(kind, opts):
  x, y = heart()
  x, y = x[:120], y[:120]
  gamma = 1.0 / 13
  spec = kernels.KernelSpec(kind, gamma=gamma, coef0=1.0 if kind == "poly"
                            else -1.0, degree=2)
  _, ref_iter, ref_obj, ref_rho = libsvm_fit(
      x, y, f"-s 0 {opts} -g {gamma!r} -c 1 -e 0.001 -h 0")
  model = smo_train.wss2_train(x, y, kernel=spec, c=1.0)
  np.testing.assert_allclose(model.objective, ref_obj, rtol=1e-6)
  np.testing.assert_allclose(model.bias, -ref_rho, atol=1e-6)
  assert model.iterations == ref_iter


def test_rows_on_demand_equal_precomputed():
  x, y = heart()
  a = smo_train.wss2_train(x, y, precompute=True)
  b = smo_train.wss2_train(x, y, precompute=False)
  assert a.iterations == b.iterations
  np.testing.assert_allclose(a.alpha, b.alpha, atol=1e-12)


def test_float32_mode_within_its_tolerance():
  # float32 state: documented tolerance 1e-4 relative on the objective.
  x, y = heart()
  ref = smo_train.wss2_train(x, y)
  low = smo_train.wss2_train(x, y, dtype="float32")
  np.testing.assert_allclose(low.objective, ref.objective, rtol=1e-4)
  assert low.alpha.dtype == np.float64  # results are returned as float64


def test_max_iter_exit_is_reported():
  x, y = heart()
  model = smo_train.wss2_train(x, y, max_iter=5)
  assert model.exit_reason == "max_iter"
  assert model.iterations == 5


def test_x64_is_not_left_enabled():
  import jax
  import jax.numpy as jnp
  x, y = heart()
  smo_train.wss2_train(x, y)
  assert jnp.ones(1).dtype == jnp.float32
  assert not jax.config.jax_enable_x64


@pytest.mark.parametrize("change,match", [
    (lambda x, y: (x, np.where(y > 0, 1.0, 0.0)), "only -1 and \\+1"),
    (lambda x, y: (x, np.ones_like(y)), "both classes"),
    (lambda x, y: (x[:0], y[:0]), "rows"),
    (lambda x, y: (np.where(np.arange(x.size).reshape(x.shape) == 3,
                            np.nan, x), y), "NaN"),
])
def test_bad_data_is_refused(change, match):
  x, y = change(*heart())
  with pytest.raises(ValueError, match=match):
    smo_train.wss2_train(x, y)


def test_bad_parameters_are_refused():
  x, y = heart()
  with pytest.raises(ValueError, match="c must be > 0"):
    smo_train.wss2_train(x, y, c=0.0)
  with pytest.raises(ValueError, match="gamma must be > 0"):
    smo_train.wss2_train(x, y, kernel=kernels.KernelSpec("rbf", gamma=-1.0))
  with pytest.raises(ValueError, match="kernel must be one of"):
    kernels.KernelSpec("laplace")


def test_to_numpy_trims_the_pair_record_to_the_longest_run():
  from mechanisms.svm import smo
  rows, runs = 10_000, 2
  pairs = np.full((runs, rows, 2), -1, np.int32)
  iterations = np.array([5, 4_100], np.int32)
  for r, t in enumerate(iterations):
    pairs[r, :t] = np.arange(2 * t).reshape(t, 2)
  zeros = np.zeros(runs)
  result = smo.SMOResult(zeros, zeros, zeros, zeros, iterations,
                         np.zeros(runs, np.int32), pairs)
  out = smo.to_numpy(result)
  # Longest run 4,100 → two buckets of 4,096 rows; nothing used is lost.
  assert out.pairs.shape == (runs, 8_192, 2)
  np.testing.assert_array_equal(out.pairs, pairs[:, :8_192])
  # A record shorter than one bucket is kept whole; an empty one too.
  short = smo.to_numpy(result._replace(pairs=pairs[:, :3_000],
                                       iterations=np.array([5, 2_999])))
  assert short.pairs.shape == (runs, 3_000, 2)
  empty = smo.to_numpy(result._replace(pairs=np.zeros((runs, 0, 2))))
  assert empty.pairs.shape == (runs, 0, 2)


def test_precompute_policy_per_backend():
  resolve = smo_train.resolve_precompute
  assert resolve(None, 1_500, backend="cpu")            # small: always
  assert not resolve(None, 5_000, backend="cpu")        # one run: on demand
  assert resolve(None, 5_000, repeats=8, backend="cpu")  # 100 MB shared
  assert not resolve(None, 9_000, repeats=8, backend="cpu")  # > 256 MiB
  assert resolve(None, 5_000, backend="gpu")            # cheap on a GPU
  assert resolve(None, 23_000, backend="gpu")           # 2.1 GB ≤ 2 GiB
  assert not resolve(None, 50_000, backend="gpu")       # 10 GB: on demand
  assert not resolve(False, 1_000, backend="gpu")       # forced either way
  assert resolve(True, 50_000, backend="cpu")


def test_unroll_policy_per_backend():
  resolve = smo_train.resolve_unroll
  assert resolve(None, backend="cpu") == 1
  assert resolve(None, backend="gpu") == smo_train.UNROLL_ACCELERATOR > 1
  assert resolve(2, backend="cpu") == 2
  with pytest.raises(ValueError, match="unroll"):
    resolve(0)


def _xor_set():
  # 400 × 3, labels by the sign of x₀x₁ with noise: ~1,000 iterations at
  # C = 10, so shrinking runs (every 400) and rows are asked for again.
  rng = np.random.default_rng(1)
  x = rng.normal(size=(400, 3))
  y = np.where(x[:, 0] * x[:, 1] + 0.3 * rng.normal(size=400) > 0, 1.0, -1.0)
  return x, y


def _raw_solve(x, y, *, row_cache, shrinking=True, rule=None, max_iter=5_000,
               unroll=1):
  """One :func:`smo.solve` with rows on demand; the raw result (NumPy)."""
  with jax.enable_x64(True):
    spec = kernels.KernelSpec("rbf").resolve(x.shape[1])
    problem = smo.make_problem(spec, x, y, dtype="float64", precompute=False,
                               row_dtype="float32")
    rule_params = None if rule is None else wss.DPWSSParams(
        jnp.asarray(1.0), jnp.asarray(0.5))
    params = smo.SolverParams(jnp.asarray(10.0), jnp.asarray(1e-3),
                              jnp.asarray(max_iter, jnp.int32), rule_params)
    config = smo.SolverConfig(kernel=spec, shrinking=shrinking,
                              row_cache=row_cache, unroll=unroll)
    result = smo.solve(jax.random.key(3), problem, params, config=config,
                       rule=rule or wss.WSS2())
    return jax.tree.map(np.asarray, result)


def _assert_bitwise_equal(a, b):
  for name, u, v in zip(a._fields, a, b, strict=True):
    assert u.dtype == v.dtype and u.shape == v.shape, name
    assert u.tobytes() == v.tobytes(), name


@pytest.mark.parametrize("row_cache,shrinking,unroll", [
    (1, True, 1), (5, False, 1), pytest.param(5, True, 2, marks=SLOW),
    pytest.param(None, True, 1, marks=SLOW),
    pytest.param(400, False, 1, marks=SLOW)])
@pytest.mark.slow
def test_row_cache_gives_the_results_of_recomputation(row_cache, shrinking,
                                                      unroll):
  # m = 1 and 5 are far below the rows asked for (evictions every step);
  # None is the automatic size (all 400 rows here).
  x, y = _xor_set()
  ref = _raw_solve(x, y, row_cache=0, shrinking=shrinking)
  got = _raw_solve(x, y, row_cache=row_cache, shrinking=shrinking,
                   unroll=unroll)
  assert ref.exit_code == 1 and ref.iterations > 400  # shrinking ran
  _assert_bitwise_equal(ref, got)


@pytest.mark.slow
def test_row_cache_with_a_rule_that_asks_for_both_rows():
  # DPWSS's rules leave both rows to the step (no row_i from select).
  x, y = _xor_set()
  rule = wss.PrivateWSS(buffer_rows=200)
  ref = _raw_solve(x, y, row_cache=0, shrinking=False, rule=rule,
                   max_iter=200)
  got = _raw_solve(x, y, row_cache=32, shrinking=False, rule=rule,
                   max_iter=200)
  _assert_bitwise_equal(ref, got)


@pytest.fixture
def fresh_traces():
  """Clears JAX's compilation caches around a test that patches smo."""
  jax.clear_caches()
  yield
  jax.clear_caches()


@pytest.mark.slow
def test_a_wrong_cached_row_would_be_caught(monkeypatch, fresh_traces):
  # The equality tests above can fail: a tag check that also accepts the
  # neighbouring row index returns wrong rows, and the run changes.
  x, y = _xor_set()
  ref = _raw_solve(x, y, row_cache=0)
  find = smo._cache_find

  def sloppy(tags, idx):
    hit, slot = find(tags, idx)
    near, near_slot = find(tags, idx + 1)
    return hit | near, jnp.where(hit, slot, near_slot)

  monkeypatch.setattr(smo, "_cache_find", sloppy)
  got = _raw_solve(x, y, row_cache=64)
  assert not np.array_equal(ref.alpha, got.alpha)


def test_cache_hits_skip_the_row_computation(monkeypatch, fresh_traces):
  computed = []
  rows = smo._rows

  def counted(problem, config, idx):
    jax.debug.callback(lambda: computed.append(1))
    return rows(problem, config, idx)

  monkeypatch.setattr(smo, "_rows", counted)
  x, y = _xor_set()
  counts, iterations = {}, {}
  for m in (0, 5, 400):
    computed.clear()
    result = _raw_solve(x, y, row_cache=m, shrinking=False)
    counts[m], iterations[m] = len(computed), int(result.iterations)
  # Without a cache: rows i and j of every step, the last (exit) included.
  # (Each run's own steps: on an H100 the runs took 1,012 and 957 steps.)
  assert counts[0] == 2 * (iterations[0] + 1)
  # A cache of all rows computes each row once; 5 slots evict and recompute.
  assert counts[400] < counts[5] < counts[0]


def test_bad_row_cache_is_refused():
  x, y = heart()
  for bad in (-1, 2.5, True):
    with pytest.raises(ValueError, match="row_cache must be"):
      smo_train.wss2_train(x, y, row_cache=bad)
  with pytest.raises(ValueError, match="row_cache must be"):
    smo.SolverConfig(kernel=kernels.KernelSpec("rbf", gamma=1.0),
                     row_cache=-3)


def _sparse_set(seed=0):
  # 2,400 × 40, a fifth of the entries nonzero: above PRECOMPUTE_SMALL, so
  # rows come on demand, and sparse enough for rows by nonzero features.
  rng = np.random.default_rng(seed)
  x = np.round(rng.random((2400, 40)) * (rng.random((2400, 40)) < 0.2), 3)
  score = x @ rng.normal(size=40) + 0.3 * rng.normal(size=2400)
  return x, np.where(score > np.median(score), 1.0, -1.0)


def test_sparse_rows_follow_libsvm_path():
  x, y = _sparse_set()
  assert not smo_train.resolve_precompute(None, x.shape[0], backend="cpu")
  assert smo_train.resolve_sparse_rows(None, x, precompute=False,
                                       backend="cpu")
  gamma = 1.0 / x.shape[1]
  ref, ref_iter, ref_obj, ref_rho = libsvm_fit(
      x, y, f"-s 0 -t 2 -c 1 -g {gamma!r} -e 0.001 -h 0")
  model = smo_train.wss2_train(x, y, sparse_rows=True)
  assert_follows_libsvm(model, ref, ref_iter, ref_obj, ref_rho, y)


@pytest.mark.parametrize("shrinking", [False, True])
@pytest.mark.slow
def test_sparse_and_dense_rows_agree(shrinking):
  x, y = _xor_set()
  x = x * (np.abs(x) > 0.5)  # a third of the entries zero
  dense = smo_train.wss2_train(x, y, c=10.0, precompute=False,
                               sparse_rows=False, shrinking=shrinking)
  rows = smo_train.wss2_train(x, y, c=10.0, precompute=False,
                              sparse_rows=True, shrinking=shrinking)
  assert rows.iterations == dense.iterations > 400
  np.testing.assert_allclose(rows.alpha, dense.alpha, atol=1e-9)
  np.testing.assert_allclose(rows.objective, dense.objective, rtol=1e-12)


def test_sparse_rows_policy():
  rng = np.random.default_rng(0)
  wide = rng.random((50, 300))
  fifth = wide * (rng.random((50, 300)) < 0.2)
  few = rng.random((50, 20))  # dense, but 20 features ≤ 32
  policy = smo_train.resolve_sparse_rows
  assert policy(None, fifth, precompute=False, backend="cpu")
  assert policy(None, few, precompute=False, backend="cpu")
  assert not policy(None, wide, precompute=False, backend="cpu")
  assert not policy(None, fifth, precompute=False, backend="gpu")
  assert not policy(None, fifth, precompute=True, backend="cpu")
  assert not policy(True, fifth, precompute=True, backend="cpu")
  assert policy(True, wide, precompute=False, backend="gpu")
  assert not policy(False, fifth, precompute=False, backend="cpu")
  for bad in ("yes", 1, 0.0):
    with pytest.raises(ValueError, match="sparse_rows must be"):
      policy(bad, fifth, precompute=False)


@pytest.mark.parametrize("precompute", [True, False])
@pytest.mark.slow
def test_float32_solver_with_float64_rows_is_quiet(precompute):
  # Rows are rounded through the narrower dtype: float64 rows of a float32
  # run are its float32 values, with no request for a dtype x64 lacks.
  x, y = heart()
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    wide = smo_train.wss2_train(x, y, dtype="float32", row_dtype="float64",
                                precompute=precompute)
  narrow = smo_train.wss2_train(x, y, dtype="float32", row_dtype="float32",
                                precompute=precompute)
  assert wide.iterations == narrow.iterations
  np.testing.assert_array_equal(wide.alpha, narrow.alpha)
