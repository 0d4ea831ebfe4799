"""launch.bench_feddpdr: the scikit-learn peer timed in a fresh process."""

import numpy as np
import pytest

from launch import bench_feddpdr


def test_sklearn_in_a_subprocess_fits_the_same_pipeline():
  rng = np.random.default_rng(0)
  centres = rng.normal(size=(3, 12))
  y = rng.integers(0, 3, 300)
  x = (centres[y] + 0.3 * rng.normal(size=(300, 12))).astype(np.float32)
  fresh = bench_feddpdr.sklearn_in_subprocess(x[:200], y[:200], x[200:],
                                              y[200:], k=4, repeats=1)
  here = bench_feddpdr.sklearn_pipeline(x[:200], y[:200], x[200:], y[200:],
                                        k=4, repeats=1)
  assert len(fresh) == 3
  assert fresh[0] > 0 and fresh[1] > 0
  # The same deterministic pipeline on the same rows: the same accuracy.
  assert fresh[2] == pytest.approx(here[2])
  assert fresh[2] > 0.9


def test_a_failing_subprocess_is_an_error():
  with pytest.raises(RuntimeError, match="scikit-learn timing process"):
    bench_feddpdr.sklearn_in_subprocess(np.zeros((4, 3)), np.zeros(3),
                                        np.zeros((2, 3)), np.zeros(2), k=2,
                                        repeats=1)
