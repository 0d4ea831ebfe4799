"""mechanisms.features.scatternet: the normalisation and DP-SGD in one
ledger, the tuning's calibration, the recipe's checks, a head that learns."""

import jax
import numpy as np
import pytest

from dpcore import accounting, trainer, tuning
from mechanisms.erm import softmax
from mechanisms.features import normalization, scatternet


def test_dpsgd_noise_leaves_room_for_the_data_normalisation():
  recipe = scatternet.Recipe(norm="data", epochs=5.0, batch_size=600)
  norm = normalization.make_plan(
      epsilon=None, noise_multiplier=recipe.norm_noise_multiplier,
      delta=1e-5, num_examples=6000, channels=81, clip_mean=1.0,
      clip_square=1.0)
  alone = scatternet.make_plan(6000, recipe, epsilon=1.0, delta=1e-5)
  plan = scatternet.make_plan(6000, recipe, epsilon=1.0, delta=1e-5,
                              normalisation=norm)
  ledger = accounting.PrivacyLedger()
  norm.record(ledger)
  plan.record(ledger)
  total = ledger.guarantee(1e-5).epsilon
  assert 0.99 <= total <= 1.0 + 1e-9
  # The normalisation costs something: DP-SGD alone needs less noise.
  assert plan.noise_multiplier > alone.noise_multiplier
  assert plan.sampling_rate == pytest.approx(600 / 6000)


def test_calibration_refuses_a_budget_the_normalisation_exhausts():
  norm = normalization.make_plan(
      epsilon=None, noise_multiplier=0.5, delta=1e-5, num_examples=6000,
      channels=81, clip_mean=1.0, clip_square=1.0)
  with pytest.raises(ValueError, match="below what the releases before"):
    scatternet.make_plan(
        6000, scatternet.Recipe(norm="data", epochs=1.0, batch_size=600),
        epsilon=1.0, delta=1e-5, normalisation=norm)


def test_normalise_refuses_an_unknown_norm_and_a_data_norm_without_key():
  rows = np.ones((4, 3, 2, 2), np.float32)
  with pytest.raises(ValueError, match="norm must be one of"):
    scatternet.normalise(None, scatternet.Recipe(norm="batch"), rows, rows,
                         delta=1e-5)
  with pytest.raises(ValueError, match="give it a key"):
    scatternet.normalise(None, scatternet.Recipe(norm="data"), rows, rows,
                         delta=1e-5)


def test_normalise_group_is_free_and_data_releases_one_plan():
  rng = np.random.default_rng(0)
  rows = rng.normal(3.0, 2.0, (64, 4, 2, 2)).astype(np.float32)
  x, xt, plan = scatternet.normalise(
      None, scatternet.Recipe(num_groups=2), rows, rows[:8], delta=1e-5)
  assert plan is None and x.shape == (64, 16) and xt.shape == (8, 16)
  # Group norm of each example alone: its rows are centred per group.
  assert np.allclose(x.reshape(64, 2, 8).mean(axis=2), 0.0, atol=1e-4)
  x, _, plan = scatternet.normalise(
      jax.random.key(0), scatternet.Recipe(norm="data"), rows, rows[:8],
      delta=1e-5)
  assert plan is not None and plan.epsilon > 0
  x_none, _, plan_none = scatternet.normalise(
      None, scatternet.Recipe(norm="none"), rows, rows[:8], delta=1e-5)
  assert plan_none is None
  np.testing.assert_array_equal(x_none, rows.reshape(64, -1))


@pytest.mark.slow  # PLD bisections
def test_tuning_calibration_meets_the_whole_tunings_epsilon():
  count = tuning.trial_count("logarithmic", 3.0)
  candidates = [scatternet.Recipe(batch_size=500, epochs=4.0),
                scatternet.Recipe(batch_size=250, epochs=4.0)]
  plans, _, guarantee, trial_eps = scatternet.calibrate_tuning(
      5000, candidates, epsilon=3.0, delta=1e-5, count=count)
  assert 0.98 * 3.0 <= guarantee.epsilon <= 3.0
  assert trial_eps < 3.0  # each trial gets less than the whole
  assert [p.num_examples for p in plans] == [5000, 5000]
  with pytest.raises(ValueError, match="norm='data'"):
    scatternet.calibrate_tuning(5000, [scatternet.Recipe(norm="data")],
                                epsilon=3.0, delta=1e-5, count=count)


def test_release_learns_a_separable_problem_and_depends_on_the_key():
  rng = np.random.default_rng(1)
  y = rng.integers(0, 2, 2000)
  x = rng.normal(0.0, 0.3, (2000, 4)).astype(np.float32)
  x[:, 0] += np.where(y == 1, 1.0, -1.0)
  recipe = scatternet.Recipe(batch_size=200, epochs=3.0, clip_norm=1.0,
                             learning_rate=1.0)
  plan = scatternet.make_plan(2000, recipe, epsilon=4.0, delta=1e-5)
  params = scatternet.release(jax.random.key(0), plan, recipe, x, y, 2)
  assert float(softmax.accuracy(params, x, y)) > 0.9
  other = scatternet.release(jax.random.key(1), plan, recipe, x, y, 2)
  assert not np.allclose(params["out"]["w"], other["out"]["w"])


def test_one_compiled_program_serves_every_epsilon():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(300, 5)).astype(np.float32)
  y = rng.integers(0, 3, 300)
  recipe = scatternet.Recipe(batch_size=60, epochs=1.0, clip_norm=1.0,
                             learning_rate=0.5, momentum=0.0)
  before = scatternet._fit._cache_size()
  outs = [scatternet.release(
      jax.random.key(0), trainer.make_plan(
          300, sampling_rate=0.2, steps=5, clip_norm=1.0,
          noise_multiplier=sigma, delta=1e-5), recipe, x, y, 3)
          for sigma in (0.8, 3.0)]
  assert scatternet._fit._cache_size() == before + 1
  # The two σ really reach the program: the released weights differ.
  assert not np.allclose(outs[0]["out"]["w"], outs[1]["out"]["w"])


def test_data_norm_standardises_with_the_released_statistics_only():
  # The composition the ledger accounts: train and test rows are
  # standardised by the noisy statistics of the one release (the plan
  # returned), never by the data's exact mean and variance.
  rng = np.random.default_rng(1)
  rows = rng.normal(0.3, 0.2, (256, 3, 2, 2)).astype(np.float32)
  test = rng.normal(0.3, 0.2, (16, 3, 2, 2)).astype(np.float32)
  key = jax.random.key(4)
  recipe = scatternet.Recipe(norm="data")
  x, xt, plan = scatternet.normalise(key, recipe, rows, test, delta=1e-5)
  stats = normalization.release(key, plan, rows)
  np.testing.assert_array_equal(
      x, np.asarray(normalization.standardize(rows, stats)).reshape(256, -1))
  np.testing.assert_array_equal(
      xt, np.asarray(normalization.standardize(test, stats)).reshape(16, -1))
  # Not the exact statistics (what a leaky composition would use).
  exact = normalization.NormStats(rows.mean(axis=(0, 2, 3)),
                                  rows.var(axis=(0, 2, 3)))
  leaky = np.asarray(normalization.standardize(rows, exact)).reshape(256, -1)
  assert np.max(np.abs(x - leaky)) > 0.05
  # Another key, another release.
  x2, _, _ = scatternet.normalise(jax.random.key(5), recipe, rows, test,
                                  delta=1e-5)
  assert not np.array_equal(x, x2)
