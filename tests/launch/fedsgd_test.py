"""launch.experiments.fedsgd: the recipe, σ kept beside the cache, the
stored program, and the plans of every trust model."""

import os

import jax
import numpy as np
import pytest

from dpcore import accounting, options
from federated import fedsgd, partition
from launch.experiments import fedsgd as harness


def test_the_recipe_is_checked_and_its_rate_follows_n():
  recipe = harness.FedSGDRecipe(trust="local").check()
  assert recipe.trust is options.Trust.LOCAL
  assert recipe.rate(1200) == 0.05 and recipe.rate(10_000) == 0.0256
  assert recipe.steps(1200) == 600
  assert harness.FedSGDRecipe(sampling_rate=0.1).rate(10) == 0.1
  for bad, message in ((dict(trust="cloud"), "fedsgd trust must be one of"),
                       (dict(sampling_rate=1.5), "fedsgd sampling_rate"),
                       (dict(epochs=0.0), "fedsgd epochs"),
                       (dict(clip_norm=float("nan")), "fedsgd clip_norm"),
                       (dict(learning_rate=-1.0), "fedsgd learning_rate")):
    with pytest.raises(ValueError, match=message):
      harness.FedSGDRecipe(**bad).check()


def test_calibrated_sigma_is_the_calibration_and_survives_a_bad_file(
    tmp_path):
  kw = dict(epsilon=2.0, delta=1e-5, sampling_rate=0.05, steps=100)
  want = accounting.calibrate_dpsgd_noise(**kw)
  before = jax.config.jax_compilation_cache_dir
  try:
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    assert harness.calibrated_sigma(**kw) == want      # computed, stored
    assert harness.calibrated_sigma(**kw) == want      # read back
    assert (tmp_path / "dpsgd_sigma.json").exists()
    (tmp_path / "dpsgd_sigma.json").write_text("{not json")
    assert harness.calibrated_sigma(**kw) == want      # recomputed
    other = harness.calibrated_sigma(**{**kw, "epsilon": 4.0})
    assert other < want                                # another key
  finally:
    jax.config.update("jax_compilation_cache_dir", before)


def test_plans_calibrate_each_trust_model_for_epsilon():
  sizes = np.array([300, 200])
  server = harness.make_plan(harness.FedSGDRecipe(epochs=2.0), sizes,
                             epsilon=2.0, delta=1e-5, model_size=30)
  assert server.trust == "server" and server.steps == 40
  assert 0.0 < server.epsilon <= 2.0 + 1e-3
  # The distributed mode is calibrated by its own accounting (discrete
  # shares of a model of model_size parameters), not given the server's σ.
  dist = harness.make_plan(
      harness.FedSGDRecipe(trust="distributed", epochs=2.0), sizes,
      epsilon=2.0, delta=1e-5, model_size=30)
  assert dist.trust == "distributed" and dist.ddg_params.dim == 30
  assert dist.target_epsilon == 2.0
  assert dist.noise_multiplier != server.noise_multiplier
  ledger = accounting.PrivacyLedger()
  dist.record(ledger)
  assert ledger.report(1e-5)["epsilon"] <= 2.0 + 1e-6


@pytest.mark.slow
def test_the_stored_fedsgd_program_equals_the_direct_jit(tmp_path):
  # Federated DP-SGD through the stored program (cache on) and through a
  # plain jit (cache off): the same parameters, and one stored file.
  rng = np.random.default_rng(4)
  x = rng.normal(size=(90, 6)).astype(np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  y = rng.integers(0, 3, size=90).astype(np.int32)
  parts = partition.partition(jax.random.key(0), x, y, sizes=(40, 50))
  plan = fedsgd.make_plan(parts.sizes, trust="server", sampling_rate=0.2,
                          steps=5, clip_norm=1.0, noise_multiplier=1.5)
  # As run() passes it: every number of the plan a float32 array.
  plan = jax.tree.map(lambda v: np.asarray(v, np.float32), plan)
  keys = jax.random.split(jax.random.key(1), 2)
  args = (keys, plan, parts.x, parts.y, parts.mask)
  kw = dict(learning_rate=0.5, dim=6, num_classes=3, chunk=None)
  before = jax.config.jax_compilation_cache_dir
  try:
    jax.config.update("jax_compilation_cache_dir", None)
    direct = jax.device_get(harness.fedsgd_program(args, **kw)(*args))
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    stored = jax.device_get(harness.fedsgd_program(args, **kw)(*args))
  finally:
    jax.config.update("jax_compilation_cache_dir", before)
  assert len(os.listdir(tmp_path / "programs")) == 1
  for a, b in zip(jax.tree.leaves(direct), jax.tree.leaves(stored),
                  strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert direct["out"]["w"].shape == (2, 6, 3)
  assert not np.allclose(direct["out"]["w"][0], direct["out"]["w"][1])
