"""launch.experiments.features: the records of a run on a data set, its
validation split, the private tuning's record (the method itself:
tests/mechanisms/features/scatternet_test.py)."""

import numpy as np
import pytest

from dpcore import tuning
from launch.data import loaders
from launch.experiments import features
from mechanisms.features import scatternet


def _tiny(monkeypatch, *, test=True):
  """MNIST-like 8 × 8 images: class = which half is bright; J=1, L=4."""
  rng = np.random.default_rng(0)

  def images(n):
    y = rng.integers(0, 2, n)
    x = rng.uniform(0, 60, (n, 8, 8))
    x[y == 0, :4] += 180
    x[y == 1, 4:] += 180
    return x.reshape(n, 64).astype(np.float32), y

  x, y = images(2000)
  xt, yt = images(400) if test else (None, None)
  data = loaders._make("tiny", x, y, xt, yt, image_shape=(8, 8, 1),
                       bounds=(0.0, 255.0))
  monkeypatch.setattr(loaders, "load_dataset", lambda *a, **k: data)
  return scatternet.Recipe(J=1, L=4, num_groups=5, batch_size=500,
                         epochs=4.0, learning_rate=2.0)


@pytest.mark.slow  # PLD bisections and small training runs
def test_run_records_ledger_epsilon_and_learns(monkeypatch):
  recipe = _tiny(monkeypatch)
  (record,) = features.run(dataset="tiny", epsilons=[3.0], seeds=[0],
                           delta=1e-5, recipe=recipe)
  assert record["split"] == "test"
  assert record["num_examples"] == 2000
  assert record["accuracy"] > 0.9
  assert 2.98 <= record["privacy"]["epsilon"] <= 3.0


@pytest.mark.slow  # PLD bisections and small training runs
def test_validation_scores_held_out_training_rows_never_the_test(
    monkeypatch):
  recipe = _tiny(monkeypatch, test=False)  # no test set to read at all
  (record,) = features.run(dataset="tiny", epsilons=[3.0], seeds=[0],
                           delta=1e-5, recipe=recipe, validation=400)
  assert record["num_examples"] == 1600
  assert record["split"].startswith("validation: the last 400")
  assert record["accuracy"] > 0.9
  with pytest.raises(ValueError, match="validation=1500"):
    list(features.run(dataset="tiny", epsilons=[3.0], seeds=[0],
                      delta=1e-5, recipe=recipe, validation=1500))


@pytest.mark.slow  # PLD bisections and small training runs
def test_tuned_run_releases_the_winner_and_one_ledger_entry(monkeypatch):
  recipe = _tiny(monkeypatch)
  candidates = [recipe, scatternet.Recipe(**{**recipe.__dict__,
                                           "learning_rate": 0.5})]
  record = features.run_tuned(
      dataset="tiny", epsilon=3.0, delta=1e-5, candidates=candidates,
      count=tuning.trial_count("logarithmic", 2.0), validation=400)
  privacy = record["privacy"]
  assert len(privacy["entries"]) == 1  # the whole tuning, once
  assert privacy["epsilon"] <= 3.0 + 1e-9
  t = record["tuning"]
  assert t["winner"] in (0, 1) and record["accuracy"] > 0.9
  assert t["fit_rows"] == 1600 and t["validation_rows"] == 400
  # K and the other trials' scores are not released.
  assert "trials" not in t and "scores" not in t
