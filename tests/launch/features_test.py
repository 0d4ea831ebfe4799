"""launch.experiments.features: the ε composition, the recipe's checks."""

import pytest

from dpcore import accounting
from launch.experiments import features
from mechanisms.features import normalization


def test_dpsgd_noise_leaves_room_for_the_data_normalisation():
  recipe = features.Recipe(norm="data", epochs=5.0, batch_size=600)
  norm = normalization.make_plan(
      epsilon=None, noise_multiplier=recipe.norm_noise_multiplier,
      delta=1e-5, num_examples=6000, channels=81, clip_mean=1.0,
      clip_square=1.0)
  alone = features._dpsgd_plan(6000, recipe, 1.0, 1e-5, None)
  plan = features._dpsgd_plan(6000, recipe, 1.0, 1e-5, norm)
  ledger = accounting.PrivacyLedger()
  norm.record(ledger)
  plan.record(ledger)
  total = ledger.guarantee(1e-5).epsilon
  assert 0.99 <= total <= 1.0 + 1e-9
  # The normalisation costs something: DP-SGD alone needs less noise.
  assert plan.noise_multiplier > alone.noise_multiplier


def test_recipe_refuses_an_unknown_norm():
  with pytest.raises(ValueError, match="norm must be"):
    features._normalise(None, features.Recipe(norm="batch"), None, None,
                        1e-5)
