"""Tests of mechanisms.lvq.init: the exact and private initialisations."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpcore import accounting
from mechanisms.lvq import init as lvq_init
from mechanisms.lvq import train as lvq_train
from tests.mechanisms.lvq.problems import D, K, ledger_of, problem, trace_count
from tests.pinned import accounted


def test_private_init_noise_scales_and_ledger():
  x = jnp.zeros((1000, 4))
  y = jnp.repeat(jnp.arange(2), 500)
  eps = 0.5
  plan = lvq_init.make_laplace_plan(epsilon=eps, dim=4)
  draws = jax.vmap(lambda k: lvq_init.release_laplace(
      k, plan, x, y, num_classes=2))(
          jax.random.split(jax.random.key(0), 4000))
  # Sum noise Laplace(2d/ε) over a count of 500 (count noise ≪ 500):
  # prototype noise ≈ Laplace(2d/(500 ε)).
  scale = 2 * 4 / eps / 500
  z = np.asarray(draws[:, 0, 0])
  assert stats.kstest(z, "laplace", args=(0, scale)).pvalue > 1e-3
  assert stats.kstest(z, "laplace", args=(0, 0.8 * scale)).pvalue < 1e-6
  ledger = lvq_train.accounting.PrivacyLedger()
  plan.record(ledger)
  entries = ledger.entries
  assert [e.params["scale"] for e in entries] == pytest.approx(
      [2 / eps, 2 * 4 / eps])
  assert [e.params["sensitivity"] for e in entries] == [1.0, 4.0]
  assert ledger.guarantee().epsilon == pytest.approx(eps)


def test_private_init_recovers_means_at_large_epsilon_and_stays_in_box():
  params, x, y, labels = problem(4)
  means = lvq_init.class_mean_prototypes(jax.random.key(0), x, y,
                                         num_classes=K)
  priv = lvq_init.release_laplace(
      jax.random.key(1), lvq_init.make_laplace_plan(epsilon=1e9, dim=D), x,
      y, num_classes=K)
  np.testing.assert_allclose(priv, means, atol=1e-4)
  noisy = lvq_init.release_laplace(
      jax.random.key(1), lvq_init.make_laplace_plan(epsilon=1e-3, dim=D), x,
      y, num_classes=K)
  assert float(jnp.max(jnp.abs(noisy))) <= 1.0


def test_gaussian_init_noise_scale_and_plan():
  d, n_per = 4, 500
  x = jnp.zeros((2 * n_per, d))
  y = jnp.repeat(jnp.arange(2), n_per)
  sigma = 3.0
  # A plan's σ_init set by hand (the calibration is tested below).
  fixed = dataclasses.replace(
      lvq_init.make_gaussian_plan(epsilon=1.0, delta=1e-6, dim=d),
      noise_multiplier=sigma)
  draws = jax.vmap(lambda k: lvq_init.release_gaussian(
      k, fixed, x, y, num_classes=2))(
          jax.random.split(jax.random.key(1), 4000))
  # Sum noise N(0, (σ√(1+d))²) over a count of ≈500: std σ√(1+d)/500.
  scale = sigma * np.sqrt(1 + d) / n_per
  z = np.asarray(draws[:, 1, 2])
  assert stats.kstest(z, stats.norm(0, scale).cdf).pvalue > 1e-3
  assert stats.kstest(z, stats.norm(0, 0.8 * scale).cdf).pvalue < 1e-6
  plan = lvq_train.make_plan(1000, epsilon=1.0, delta=1e-5,
                             sampling_rate=0.01, epochs=5, clip_norm=0.5,
                             dim=d, init_mechanism="gaussian")
  ledger = ledger_of(plan)
  init, sgd, padding = ledger.entries
  assert init.kind == "gaussian" and init.delta == pytest.approx(5e-6)
  assert init.epsilon == pytest.approx(0.2, rel=1e-6)
  assert sgd.delta == pytest.approx(5e-6)
  assert sgd.epsilon == pytest.approx(0.8, rel=1e-3)
  assert padding.kind == "truncation"
  g = ledger.guarantee(1e-5)
  assert g.basic_delta == pytest.approx(1e-5)
  assert g.epsilon <= 1.0 + 1e-6


@pytest.mark.parametrize("init", ["laplace", "gaussian"])
def test_private_init_clips_data_to_the_box(init):
  # The sums' sensitivity needs x ∈ [−1, 1]^d: the jitted initialisation
  # clips itself, so out-of-box rows count as their clipped versions.
  rng = np.random.default_rng(2)
  x = rng.uniform(-1, 1, size=(60, 5)).astype(np.float32)
  y = np.arange(60) % 3
  wild = x.copy()
  wild[:4] *= 40.0
  key = jax.random.key(7)
  if init == "laplace":
    plan = lvq_init.make_laplace_plan(epsilon=50.0, dim=5)
    run = lambda rows: lvq_init.release_laplace(  # noqa: E731
        key, plan, jnp.asarray(rows), jnp.asarray(y), num_classes=3)
  else:
    plan = dataclasses.replace(
        lvq_init.make_gaussian_plan(epsilon=1.0, delta=1e-6, dim=5),
        noise_multiplier=0.01)
    run = lambda rows: lvq_init.release_gaussian(  # noqa: E731
        key, plan, jnp.asarray(rows), jnp.asarray(y), num_classes=3)
  np.testing.assert_allclose(run(wild), run(np.clip(wild, -1, 1)),
                             rtol=1e-6, atol=1e-6)
  assert not np.allclose(run(wild), run(x), atol=1e-3)


def test_init_plans_record_as_before():
  ledger = accounting.PrivacyLedger()
  lvq_init.make_laplace_plan(epsilon=0.5, dim=4).record(ledger)
  assert ledger.guarantee(1e-5).epsilon == accounted(0.49996000119999157)
  gaussian = dataclasses.replace(
      lvq_init.make_gaussian_plan(epsilon=1.0, delta=1e-6, dim=4),
      noise_multiplier=3.0)
  ledger = accounting.PrivacyLedger()
  gaussian.record(ledger)
  assert ledger.guarantee(1e-5).epsilon == accounted(1.271087773716238)
  with pytest.raises(ValueError, match="dim"):
    lvq_init.release_laplace(jax.random.key(0),
                             lvq_init.make_laplace_plan(epsilon=1.0, dim=3),
                             jnp.zeros((4, 2)), jnp.arange(4) % 2,
                             num_classes=2)
  with pytest.raises(TypeError, match="LaplacePlan"):
    lvq_init.release_laplace(jax.random.key(0), gaussian, jnp.zeros((4, 4)),
                             jnp.arange(4) % 2, num_classes=2)


@pytest.mark.parametrize("make, release", [
    (lambda eps: lvq_init.make_laplace_plan(epsilon=eps, dim=3),
     lvq_init.release_laplace),
    (lambda eps: lvq_init.make_gaussian_plan(epsilon=eps, delta=1e-6, dim=3),
     lvq_init.release_gaussian),
], ids=["laplace", "gaussian"])
@pytest.mark.slow
def test_two_epsilons_reuse_one_compiled_init(make, release):
  x = jax.random.uniform(jax.random.key(0), (60, 3), minval=-1.0)
  y = jnp.arange(60) % 2
  run, traces = trace_count(lambda plan, x, y: release(
      jax.random.key(1), plan, x, y, num_classes=2))
  a, b = run(make(0.5), x, y), run(make(4.0), x, y)
  assert len(traces) == 1  # ε is a traced leaf, not a constant
  assert not np.allclose(a, b)
  np.testing.assert_allclose(
      a, release(jax.random.key(1), make(0.5), x, y, num_classes=2),
      rtol=1e-6)
