"""launch.bench.feddpdr: the scikit-learn peer timed in a fresh process."""

import numpy as np
import pytest

from launch.bench import feddpdr as bench_feddpdr


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


@pytest.mark.slow
def test_the_record_carries_one_privacy_record_and_its_settings(tmp_path):
  from dpcore import accounting  # pylint: disable=g-import-not-at-top
  out = tmp_path / "bench.jsonl"
  record = bench_feddpdr.benchmark(
      dataset="digits", data_dir=None, participants=2, n_per=100,
      epsilon=2.0, k=3, repeats=1, variants=False, seed=0, out=str(out),
      variant_epsilons=(2.0,))
  assert tuple(record["privacy"]) == accounting.PRIVACY_FIELDS
  assert record["privacy"]["epsilon_nominal"] == 2.0
  assert 0.0 < record["privacy"]["epsilon"] <= 2.0 * (1 + 1e-9)
  assert record["settings"] == {"epsilon": 2.0, "variant_epsilons": [2.0]}
  assert "epsilon" not in record and "ours_privacy" not in record
