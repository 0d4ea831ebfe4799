"""launch.experiments.feature_learners on tiny synthetic images."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from dpcore import options
from launch import vocabulary
from launch.experiments import feature_learners as fl
from mechanisms.features import projection


def _images(n_train=240, n_test=80, side=8, seed=0):
  """Two classes of 8 × 8 images: a bright left or right half, plus noise."""
  rng = np.random.default_rng(seed)

  def draw(n):
    y = rng.integers(0, 2, size=n).astype(np.int32)
    x = 0.2 * rng.random((n, side, side), dtype=np.float32)
    half = side // 2
    for i, label in enumerate(y):
      cols = slice(0, half) if label == 0 else slice(half, side)
      x[i, :, cols] += 0.7
    return np.clip(x, 0.0, 1.0), y

  train, y_train = draw(n_train)
  test, y_test = draw(n_test)
  return fl.Images("synthetic", train, y_train, test, y_test, 2)


# J = 1, L = 4 on 8 × 8 images: 5 channels of 4 × 4, 80 numbers a row.
TINY = dict(J=1, L=4, num_groups=5, epsilon=1.0, delta=1e-5)
FED = dict(learner="fedsgd", participants=4, rows_per_participant=60,
           batch_size=48, epochs=4.0, clip_norm=0.5, learning_rate=1.0,
           seeds=(0, 1), **TINY)


@pytest.fixture(scope="module")
def images():
  return _images()


@pytest.fixture(scope="module")
def server_runs(images):
  """The private server-noise runs (seeds 0, 1) and a noiseless one."""
  noisy = list(fl.run(fl.Setting(trust="server", **FED), images=images))
  clean = list(fl.run(fl.Setting(trust="server", noise_multiplier=0.0,
                                 **FED), images=images))
  return noisy, clean


def _check_private_records(records, trust):
  assert [r["seed"] for r in records] == [0, 1]
  for r in records:
    eps = r["privacy"]["epsilon"]
    # σ was calibrated for ε = 1: the ledger's ε is at most that, and not
    # far below (the calibration is tight to a few per cent).
    assert 0.8 <= eps <= 1.0 + 1e-9, eps
    assert r["privacy"]["delta"] == pytest.approx(1e-5, rel=0.01)
    assert r["target_epsilon"] == 1.0
    assert r["fedsgd"]["trust"] == trust
    assert r["fedsgd"]["steps"] == round(4.0 / (48 / 240))
    assert r["features"]["dim"] == 80
    assert 0.0 <= r["accuracy"] <= 1.0
    assert r["train_seconds"] > 0
  # Two seeds, two noise draws: different models.
  assert records[0]["weight_norm"] != records[1]["weight_norm"]


def test_server_records_carry_the_ledgers_epsilon(server_runs):
  _check_private_records(server_runs[0], "server")


@pytest.mark.slow
@pytest.mark.parametrize("trust", ["local", "participant"])
def test_other_trust_models_carry_the_ledgers_epsilon(images, trust):
  _check_private_records(
      list(fl.run(fl.Setting(trust=trust, **FED), images=images)), trust)


def test_a_private_run_differs_from_the_noiseless_one(server_runs):
  noisy, clean = server_runs[0][0], server_runs[1][0]
  assert clean["privacy"]["epsilon"] is None
  assert clean["privacy"]["no_guarantee"]
  assert clean["target_epsilon"] is None
  assert noisy["fedsgd"]["noise_multiplier"] > 1.0
  # The noise is big against a clipped sum of ~10 rows: the models differ
  # by much more than rounding, and the noiseless one learns the task.
  assert abs(noisy["weight_norm"] - clean["weight_norm"]) > (
      0.05 * clean["weight_norm"])
  assert clean["accuracy"] >= 0.9


def test_the_same_seed_gives_the_same_model(images, server_runs):
  again = next(fl.run(fl.Setting(trust="server", **FED), images=images))
  assert again["weight_norm"] == server_runs[0][0]["weight_norm"]
  assert again["accuracy"] == server_runs[0][0]["accuracy"]


LVQ = dict(learner="dplvq", lvq_epochs=2, lvq_sampling_rate=0.1,
           lvq_folds=2, lvq_repeats=1, lvq_parallel_runs=2, seeds=(0,), **TINY)


@pytest.mark.parametrize("inputs,dim", [
    ("features", 24), pytest.param("pixels", 64, marks=pytest.mark.slow)])
@pytest.mark.slow
def test_dplvq_on_features_and_pixels(images, inputs, dim):
  setting = fl.Setting(inputs=inputs, projection_dim=24, **LVQ)
  (record,) = fl.run(setting, images=images)
  assert record["experiment"] == "features_dplvq"
  assert record["inputs"] == inputs
  assert record["dim"] == dim
  eps = record["privacy"]["epsilon"]
  assert 0.5 <= eps <= 1.0 + 1e-9, eps
  assert record["model"] == "gmlvq" and record["trainer"] == "dpsgd"
  assert len(record["errors"]) == 2
  assert record["accuracy"] == pytest.approx(1 - record["error_mean"])


def test_lvq_rows_lie_in_the_box_and_the_projection_is_public(images):
  setting = fl.Setting(inputs="features", projection_dim=24,
                       feature_bound=1.5, **LVQ)
  prepared, details = fl.lvq_inputs(images, setting)
  assert prepared.x.shape == (320, 24)
  assert np.all(np.abs(prepared.x) <= 1.0)
  assert 0.0 < details["clipped_share"] < 0.5
  # The train rows come first, then the test rows, as in launch.dplvq.
  np.testing.assert_array_equal(
      prepared.y, np.concatenate([images.y_train, images.y_test]))
  # The projection is the public one of projection_key(projection_seed):
  # with a box too wide to clip, the rows are the features times it, over
  # the bound.
  wide, _ = fl.lvq_inputs(images, dataclasses.replace(
      setting, feature_bound=100.0))
  feats = fl.feature_rows(np.concatenate([images.train, images.test]),
                          J=1, L=4, num_groups=5)
  q = projection.random_orthonormal(fl.projection_key(0), feats.shape[1],
                                    24)
  np.testing.assert_allclose(wide.x * 100.0, feats @ np.asarray(q),
                             atol=2e-3)


def test_group_normalised_rows_are_bounded_per_group(images):
  rows = fl.feature_rows(images.train[:16], J=1, L=4, num_groups=5)
  groups = rows.reshape(16, 5, 16)  # 5 groups of one channel of 4 × 4
  np.testing.assert_allclose(groups.mean(axis=-1), 0.0, atol=1e-5)
  # Variance v/(v + eps) of each group: at most 1, the public bound the
  # feature box rests on; the low-pass channel (large v) reaches it.
  square = np.mean(groups**2, axis=-1)
  assert np.all(square <= 1.0 + 1e-5) and np.all(square > 0.1)
  assert np.all(square[:, 0] > 0.99)


@pytest.mark.parametrize("change,message", [
    (dict(learner="sgd"), "^learner must be one of"),
    (dict(trust="distributed"), "^trust='distributed'"),
    (dict(trust="nobody"), "^trust must be one of"),
    (dict(num_groups=3), "num_groups=3"),
    (dict(batch_size=10_000), "batch_size=10000"),
    (dict(epsilon=0.0), "^epsilon must be > 0"),
    (dict(momentum=1.0), r"^momentum must lie in \[0"),
    (dict(participants=0), "^participants must be"),
    (dict(seeds=()), "seeds="),
])
def test_check_refuses_bad_federated_settings(change, message):
  with pytest.raises(ValueError, match=message):
    dataclasses.replace(fl.Setting(**FED), **change).check()


@pytest.mark.parametrize("change,message", [
    (dict(inputs="both"), "^inputs must be one of"),
    (dict(lvq_model="lvq"), "^lvq_model must be one of"),
    (dict(lvq_trainer="bfgs"), "^lvq_trainer='bfgs'"),
    (dict(projection_dim=0), "^projection_dim must be"),
    (dict(feature_bound=-1.0), "^feature_bound must be > 0"),
    # The DP-LVQ run's own refusals name this script's fields.
    (dict(lvq_folds=1), "^lvq_folds=1:.*e.g. lvq_folds=5"),
    (dict(lvq_clip_norm=-1.0), "^lvq_clip_norm must be > 0"),
    (dict(lvq_sampling_rate=2.0), "^lvq_sampling_rate must"),
    (dict(lvq_parallel_runs=0), "^lvq_parallel_runs must"),
])
def test_check_refuses_bad_lvq_settings(change, message):
  with pytest.raises(ValueError, match=message):
    dataclasses.replace(fl.Setting(**LVQ), **change).check()


def test_check_returns_the_options_as_members_and_records_them_as_text():
  fed = fl.Setting(**FED).check()
  assert fed.learner is vocabulary.Learner.FEDSGD
  assert fed.trust is options.Trust(FED.get("trust", "server"))
  lvq = fl.Setting(**LVQ).check()
  assert lvq.inputs is vocabulary.Inputs(LVQ.get("inputs", "features"))
  assert lvq.lvq_model is options.LVQModel(LVQ.get("lvq_model", "gmlvq"))
  # A member is its spelling: the record (and so the resume key) reads as
  # the text it read before the options became members.
  assert json.loads(json.dumps(lvq.recipe()))["learner"] == "dplvq"
  assert '"trust": "server"' in json.dumps(fed.recipe())


def test_setting_is_keyword_only_and_frozen():
  with pytest.raises(TypeError):
    fl.Setting("fedsgd")  # pylint: disable=too-many-function-args
  setting = fl.Setting(**FED)
  with pytest.raises(dataclasses.FrozenInstanceError):
    setting.trust = "local"


def test_the_projection_key_is_never_a_runs_root_key():
  # The public projection's key lives in its own stream: with seed 0 for
  # both, the projection key is not DP-LVQ's root key(0), nor any of the
  # first fold_in children the run derives its noise from.
  public = jax.random.key_data(fl.projection_key(0)).tolist()
  root = jax.random.key(0)
  private = [jax.random.key_data(root).tolist()] + [
      jax.random.key_data(jax.random.fold_in(root, i)).tolist()
      for i in range(16)]
  assert public not in private
