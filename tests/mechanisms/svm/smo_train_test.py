"""mechanisms.svm.smo_train: the checks and sizing of the entry points.

The solver's agreement with LIBSVM is tested in ``smo_test.py`` and the
memory budget in ``memory_test.py``; here the host-side pieces of
``smo_train`` on their own.
"""

import inspect

import numpy as np
import pytest

from dpcore import options
from mechanisms.svm import smo_train


@pytest.mark.parametrize("kwargs,words", [
    ({"c": 0.0}, "c must be > 0, got 0.0"),
    ({"eps": -1.0}, "eps must be > 0, got -1.0"),
    ({"max_iter": 0}, "max_iter must be ≥ 1, got 0"),
    ({"dtype": "float16"},
     "dtype must be 'float32' or 'float64', got 'float16'"),
])
def test_solver_settings_are_refused_by_their_own_names(kwargs, words):
  # The library names its parameters; a script spells its flags the same.
  args = {"c": 1.0, "eps": 1e-3, **kwargs}
  with pytest.raises(ValueError) as caught:
    smo_train.check_solver_settings(**args)
  assert str(caught.value).startswith(words)


def test_the_checks_take_no_flag_prefix_and_memory_has_no_default_limit():
  assert set(inspect.signature(smo_train.check_solver_settings).parameters
             ) == {"c", "eps", "max_iter", "dtype"}
  assert inspect.signature(smo_train.wss2_train).parameters[
      "memory_budget"].default is None


def test_the_default_kernel_is_libsvms():
  assert smo_train.RBF.kind is options.Kernel.RBF
  assert smo_train.RBF.gamma is None  # 1/dim, resolved on the data


def test_fixed_and_run_bytes_count_what_they_say():
  # Rows twice (the float64 copy and the solver's), 16 l-vectors; Q in the
  # row dtype plus its computation's block.
  n, d = 100, 7
  plain = smo_train.fixed_bytes(n, d, dtype="float64", row_dtype="float32",
                                precompute=False)
  assert plain == n * d * 16 + 16 * n * 8
  cached = smo_train.fixed_bytes(n, d, dtype="float64", row_dtype="float32",
                                 precompute=True)
  assert cached - plain == n * n * (4 + 8)
  assert smo_train.run_bytes(n, dtype="float64") == 2 * 8 * n * 8


def test_predict_maps_a_zero_score_to_minus_one():
  model = smo_train.SVMModel(
      kernel=smo_train.RBF.resolve(1), x_sv=np.zeros((1, 1)),
      coef=np.zeros(1), bias=0.0, alpha=np.zeros(1), objective=0.0,
      iterations=0, exit_reason="stationary")
  assert model.predict(np.zeros((2, 1))).tolist() == [-1, -1]
  shifted = smo_train.SVMModel(**{**model.__dict__, "bias": 0.5})
  assert shifted.predict(np.zeros((1, 1))).tolist() == [1]
