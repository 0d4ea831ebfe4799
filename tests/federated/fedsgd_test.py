"""federated.fedsgd: federated DP-SGD under three trust models.

Exact checks with the noise off (σ = 0) and every row or participant in
(q = 1) against sums formed here by hand; the noise's scale per trust
model, with a wrong scale rejected; the ledger against the trainer's.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpcore import accounting, clipping, ghost, options, shape, trainer
from federated import fedsgd, partition
from mechanisms.erm import softmax
from tests.pinned import accounted

D, K = 6, 3


def _participants(sizes, key=0):
  rng = np.random.default_rng(key)
  xs = [rng.normal(size=(n, D)).astype(np.float32) for n in sizes]
  ys = [rng.integers(0, K, n) for n in sizes]
  return partition.pad(xs, ys), xs, ys


def _one_step(trust, parts, sizes, *, q=1.0, sigma=0.0, clip=0.3, lr=1.0,
              key=0, chunk=None, loss=softmax.loss):
  plan = fedsgd.make_plan(sizes, trust=trust, sampling_rate=q, steps=1,
                          clip_norm=clip, noise_multiplier=sigma)
  init = softmax.initial_params(D, K)
  out = fedsgd.release(jax.random.key(key), plan, loss, init, parts.x,
                     parts.y, parts.mask, optax.sgd(lr), chunk=chunk)
  return plan, out.params


def _row_grad(w, x, y):
  return jax.grad(lambda p: softmax.loss(p, (x, y)))(w)


@pytest.mark.parametrize("garbage", [1e6, np.nan])
@pytest.mark.parametrize("trust", ["server", "local"])
def test_row_level_step_is_the_clipped_sum_of_every_real_row(trust, garbage):
  sizes = [5, 2, 4]
  parts, xs, ys = _participants(sizes)
  # Garbage in the padding: it must never enter a sum.
  parts = parts._replace(x=np.where(parts.mask[..., None] > 0, parts.x,
                                    garbage).astype(np.float32))
  plan, params = _one_step(trust, parts, sizes)
  init = softmax.initial_params(D, K)
  expected = jax.tree.map(jnp.zeros_like, init)
  for xp, yp in zip(xs, ys, strict=True):
    for xi, yi in zip(xp, yp, strict=True):
      g = clipping.clip_to_norm(_row_grad(init, xi, yi), 0.3)
      expected = jax.tree.map(jnp.add, expected, g)
  expected = jax.tree.map(lambda g: -g / sum(sizes), expected)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(expected),
                  strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  assert plan.divisor == sum(sizes)


@pytest.mark.parametrize("garbage", [0.0, 1e6, np.nan])
def test_participant_level_step_clips_each_participants_mean_gradient(
    garbage):
  sizes = [5, 2, 4]
  parts, xs, ys = _participants(sizes, key=1)
  # Garbage in the padding (0·NaN is NaN): only real rows are averaged.
  parts = parts._replace(x=np.where(parts.mask[..., None] > 0, parts.x,
                                    garbage).astype(np.float32))
  plan, params = _one_step("participant", parts, sizes, clip=0.05)
  init = softmax.initial_params(D, K)
  expected = jax.tree.map(jnp.zeros_like, init)
  for xp, yp in zip(xs, ys, strict=True):
    mean = jax.tree.map(lambda *g: sum(g) / len(g), *[
        _row_grad(init, xi, yi) for xi, yi in zip(xp, yp, strict=True)])
    expected = jax.tree.map(jnp.add, expected,
                            clipping.clip_to_norm(mean, 0.05))
  expected = jax.tree.map(lambda g: -g / 3, expected)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(expected),
                  strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  # The clip binds: each participant's update has norm 0.05 exactly.
  assert plan.divisor == 3


@ghost.layered
def _flat_loss(layers, example):
  # Zero gradient everywhere: the update is the noise alone.
  return 0.0 * jnp.sum(layers.dense("out", example[0]))


@pytest.mark.parametrize("trust, factor", [("server", 1.0),
                                           ("local", np.sqrt(3.0)),
                                           ("participant", 1.0)])
def test_noise_has_the_trust_models_scale(trust, factor):
  sizes = [4, 4, 4]
  parts, _, _ = _participants(sizes, key=2)
  sigma, clip = 1.3, 0.5
  plan = fedsgd.make_plan(sizes, trust=trust, sampling_rate=0.5, steps=1,
                          clip_norm=clip, noise_multiplier=sigma)

  def run(key):
    out = fedsgd.release(key, plan, _flat_loss, softmax.initial_params(D, K),
                       parts.x, parts.y, parts.mask, optax.sgd(1.0))
    return -out.params["out"]["w"].reshape(-1) * plan.divisor

  z = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(3), 400))
  z = np.asarray(z).reshape(-1)  # 7,200 draws
  expected = sigma * clip * factor
  # sd of the sample sd ≈ expected/√(2n): 0.8 %; a 4-sigma band.
  assert abs(z.std() / expected - 1.0) < 0.035
  assert abs(z.mean()) < 4 * expected / np.sqrt(z.size)
  wrong = sigma * clip * (np.sqrt(3.0) if factor == 1.0 else 1.0)
  assert abs(z.std() / wrong - 1.0) > 0.2
  assert plan.central_noise_multiplier == pytest.approx(sigma * factor)


@pytest.mark.slow
def test_chunks_do_not_change_the_result_and_keys_do():
  sizes = [6, 3, 5, 6, 2]
  parts, _, _ = _participants(sizes, key=4)
  plan = fedsgd.make_plan(sizes, trust="server", sampling_rate=0.4, steps=5,
                          clip_norm=0.5, noise_multiplier=1.0)

  def run(key, chunk):
    return fedsgd.release(key, plan, softmax.loss,
                        softmax.initial_params(D, K), parts.x, parts.y,
                        parts.mask, optax.sgd(0.5), chunk=chunk).params

  whole = run(jax.random.key(5), None)
  chunked = run(jax.random.key(5), 2)
  for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(chunked),
                  strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  other = run(jax.random.key(6), None)
  assert not np.allclose(other["out"]["w"], whole["out"]["w"])


def test_the_ledger_records_the_plan():
  sizes = [300, 200]
  plan = fedsgd.make_plan(sizes, trust="server", sampling_rate=0.05,
                          steps=100, clip_norm=1.0, noise_multiplier=1.1,
                          delta=1e-5)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  central = trainer.make_plan(500, sampling_rate=0.05, steps=100,
                              clip_norm=1.0, noise_multiplier=1.1,
                              delta=1e-5)
  reference = accounting.PrivacyLedger()
  central.record(reference)
  # The same subsampled Gaussian (the padding, paid per participant, moves
  # the δ left for it a little).
  assert ledger.report(1e-5)["epsilon_rdp"] == pytest.approx(
      reference.report(1e-5)["epsilon_rdp"], rel=1e-4)
  assert [e.label for e in ledger.entries][0] == "fedsgd_server"
  assert 0 < plan.truncation_probability <= 1e-9
  participant = fedsgd.make_plan(sizes, trust="participant",
                                 sampling_rate=0.5, steps=10, clip_norm=1.0,
                                 noise_multiplier=1.0, delta=1e-5)
  ledger = accounting.PrivacyLedger()
  participant.record(ledger)
  assert [e.kind for e in ledger.entries] == ["subsampled_gaussian"]
  with pytest.raises(ValueError, match="no DP"):
    fedsgd.make_plan(sizes, trust="local", sampling_rate=0.5, steps=1,
                     clip_norm=1.0, noise_multiplier=0.0,
                     delta=1e-5).record(accounting.PrivacyLedger())
  with pytest.raises(ValueError, match="no delta"):
    fedsgd.make_plan(sizes, trust="server", sampling_rate=0.5, steps=1,
                     clip_norm=1.0, noise_multiplier=1.0).record(
                         accounting.PrivacyLedger())


def test_bad_input_is_refused():
  parts, _, _ = _participants([3, 2])
  with pytest.raises(ValueError, match="trust"):
    fedsgd.make_plan([3, 2], trust="secure", sampling_rate=0.5, steps=1,
                     clip_norm=1.0, noise_multiplier=1.0)
  with pytest.raises(ValueError, match="sizes"):
    fedsgd.make_plan([3, 0], trust="server", sampling_rate=0.5, steps=1,
                     clip_norm=1.0, noise_multiplier=1.0)
  with pytest.raises(ValueError, match="sampling_rate"):
    fedsgd.make_plan([3, 2], trust="server", sampling_rate=1.5, steps=1,
                     clip_norm=1.0, noise_multiplier=1.0)
  plan = fedsgd.make_plan([3, 2, 2], trust="server", sampling_rate=0.5,
                          steps=1, clip_norm=1.0, noise_multiplier=1.0)
  with pytest.raises(ValueError, match="leading axes"):
    fedsgd.release(jax.random.key(0), plan, softmax.loss,
                 softmax.initial_params(D, K), parts.x, parts.y, parts.mask,
                 optax.sgd(1.0))
  # A mask of other rows than the plan's N (here every padded slot).
  with pytest.raises(ValueError, match="mask marks 6 real rows.*N = 5"):
    fedsgd.release(jax.random.key(0), fedsgd.make_plan(
        [3, 2], trust="server", sampling_rate=0.5, steps=1, clip_norm=1.0,
        noise_multiplier=1.0), softmax.loss,
        softmax.initial_params(D, K), parts.x, parts.y,
        np.ones_like(parts.mask), optax.sgd(1.0))
  with pytest.raises(ValueError, match="chunk"):
    fedsgd.release(jax.random.key(0), fedsgd.make_plan(
        [3, 2], trust="server", sampling_rate=0.5, steps=1, clip_norm=1.0,
        noise_multiplier=1.0), softmax.loss,
        softmax.initial_params(D, K), parts.x, parts.y, parts.mask,
        optax.sgd(1.0), chunk=0)


def test_one_program_serves_every_noise_multiplier():
  # The plan is a pytree whose one leaf is σ: jit with the plan as an
  # argument traces once for every ε of one run shape, and σ is the one
  # the plan records.
  sizes = [4, 4]
  parts, _, _ = _participants(sizes, key=7)
  traces = []

  @jax.jit
  def run(key, plan):
    traces.append(1)
    return fedsgd.release(key, plan, _flat_loss, softmax.initial_params(D, K),
                        parts.x, parts.y, parts.mask,
                        optax.sgd(1.0)).params["out"]["w"]

  outs = []
  for sigma in (0.5, 2.0):
    plan = fedsgd.make_plan(sizes, trust="server", sampling_rate=0.5,
                            steps=1, clip_norm=1.0, noise_multiplier=sigma)
    outs.append(run(jax.random.key(8), plan))
  assert len(traces) == 1
  # Same key, σ four times larger: the noise is exactly four times larger.
  np.testing.assert_allclose(outs[1], 4.0 * outs[0], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("trust", ["server", "local", "participant"])
def test_plan_epsilon_is_the_ledgers_guarantee_after_a_release(trust):
  # The convention of every plan (dpcore.shape): plan.epsilon is what the
  # ledger reports for everything the plan releases, at the plan's δ, at
  # most the budget σ was calibrated for (the ledger's 1e-9 tolerance).
  sizes = [40, 30]
  parts, _, _ = _participants(sizes, key=3)
  plan = fedsgd.make_plan(sizes, trust=trust, sampling_rate=0.2, steps=5,
                          clip_norm=1.0, epsilon=1.5, delta=1e-5)
  fedsgd.release(jax.random.key(0), plan, softmax.loss,
                 softmax.initial_params(D, K), parts.x, parts.y, parts.mask,
                 optax.sgd(1.0))
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  assert plan.epsilon == accounted(ledger.report(plan.delta)["epsilon"])
  assert plan.target_epsilon == 1.5
  assert plan.epsilon <= plan.target_epsilon * (1 + 1e-9)
  # No δ, or no noise: no guarantee to state.
  assert fedsgd.make_plan(sizes, trust=trust, sampling_rate=0.2, steps=5,
                          clip_norm=1.0, noise_multiplier=1.0).epsilon is None
  assert fedsgd.make_plan(sizes, trust=trust, sampling_rate=0.2, steps=5,
                          clip_norm=1.0, noise_multiplier=0.0,
                          delta=1e-5).epsilon is None


@pytest.mark.slow
def test_plans_that_differ_only_in_epsilon_share_one_compilation():
  # ε, the target, σ and C are traced leaves: a jitted run with the plan as
  # an argument traces once for every ε (a Python side effect counts the
  # traces), and gives the closed-over plan's numbers.
  sizes = [6, 5]
  parts, _, _ = _participants(sizes, key=4)
  traces = []

  @jax.jit
  def run(key, plan):
    traces.append(plan)
    return fedsgd.release(key, plan, softmax.loss,
                          softmax.initial_params(D, K), parts.x, parts.y,
                          parts.mask, optax.sgd(1.0)).params["out"]["w"]

  plans = [fedsgd.make_plan(sizes, trust="local", sampling_rate=0.5,
                            steps=2, clip_norm=1.0, epsilon=eps, delta=1e-5)
           for eps in (1.0, 3.0)]
  outs = [run(jax.random.key(2), p) for p in plans]
  assert len(traces) == 1
  assert not np.allclose(outs[0], outs[1])
  closed = fedsgd.release(jax.random.key(2), plans[1], softmax.loss,
                          softmax.initial_params(D, K), parts.x, parts.y,
                          parts.mask, optax.sgd(1.0)).params["out"]["w"]
  np.testing.assert_allclose(outs[1], closed, rtol=1e-6, atol=1e-7)
  run(jax.random.key(2), dataclasses.replace(plans[0], steps=3))
  assert len(traces) == 2  # another shape: the counter does count


# The ε each trust model's record gave at /tmp/base (before the one shape,
# with record(ledger, delta=1e-5)); the plan's own δ records the same.
# "server" records one more truncation event (its G gathered rows, at most
# 1e-12 here), which moves ε in the 7th digit.
BASE_EPSILON = {"server": 2.887023486142268, "local": 2.887023027961277,
                "participant": 2.886821941473764}


@pytest.mark.parametrize("trust", sorted(BASE_EPSILON))
def test_the_plan_has_the_shape_and_records_as_before(trust):
  plan = fedsgd.make_plan([200, 150, 150], trust=trust, sampling_rate=0.05,
                          steps=100, clip_norm=1.0, noise_multiplier=1.1,
                          delta=1e-5)
  shape.check_plan(plan)
  shape.check_release(fedsgd.release)
  assert plan.relation is options.Relation.ADD_REMOVE
  # σ given: no target; the plan's ε is the guarantee its record gives.
  assert plan.target_epsilon is None and plan.delta == 1e-5
  assert plan.epsilon == accounted(BASE_EPSILON[trust])
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  assert ledger.guarantee(1e-5).epsilon == accounted(BASE_EPSILON[trust])


def test_the_plan_calibrates_sigma_for_a_target():
  plan = fedsgd.make_plan([200, 300], trust="server", sampling_rate=0.05,
                          steps=100, clip_norm=1.0, epsilon=2.0, delta=1e-5)
  assert plan.target_epsilon == 2.0
  assert plan.noise_multiplier == accounting.calibrate_dpsgd_noise(
      epsilon=2.0, delta=1e-5, sampling_rate=0.05, steps=100)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  # The RDP figure is the target (the padding's event moves it a little);
  # the ledger's best composition is below it.
  report = ledger.report(1e-5)
  assert report["epsilon_rdp"] == pytest.approx(2.0, rel=1e-3)
  assert report["epsilon"] <= 2.0 * (1 + 1e-3)
  assert plan.epsilon == accounted(report["epsilon"])
  # The numbers are the pytree's leaves (C, σ, the row plan's C and σ = 0,
  # ε, the target, δ): one program for every budget.
  assert jax.tree.leaves(plan) == [1.0, plan.noise_multiplier, 1.0, 0.0,
                                   plan.epsilon, 2.0, 1e-5]
  with pytest.raises(ValueError, match="not both"):
    fedsgd.make_plan([200, 300], trust="server", sampling_rate=0.05,
                     steps=100, clip_norm=1.0, epsilon=2.0, delta=1e-5,
                     noise_multiplier=1.0)
  with pytest.raises(ValueError, match="epsilon= and delta="):
    fedsgd.make_plan([200, 300], trust="server", sampling_rate=0.05,
                     steps=100, clip_norm=1.0, epsilon=2.0)


@pytest.mark.slow
def test_server_gathers_the_same_rows_as_the_participants_batches():
  # Same keys, σ = 0: "server" (one clipped sum over the gathered rows)
  # and "local" (each participant's clipped sum, added up) sample the same
  # batches, so their models agree to rounding over several steps.
  sizes = [9, 4, 7, 9, 3]
  parts, _, _ = _participants(sizes, key=7)
  runs = {}
  for trust in ("server", "local"):
    plan = fedsgd.make_plan(sizes, trust=trust, sampling_rate=0.3, steps=6,
                            clip_norm=0.4, noise_multiplier=0.0)
    out = fedsgd.release(jax.random.key(8), plan, softmax.loss,
                         softmax.initial_params(D, K), parts.x, parts.y,
                         parts.mask, optax.sgd(0.7))
    runs[trust] = out
  assert runs["server"].overflow_steps == runs["local"].overflow_steps == 0
  for a, b in zip(jax.tree.leaves(runs["server"].params),
                  jax.tree.leaves(runs["local"].params), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  other = fedsgd.release(jax.random.key(9), plan, softmax.loss,
                         softmax.initial_params(D, K), parts.x, parts.y,
                         parts.mask, optax.sgd(0.7)).params
  assert not np.allclose(other["out"]["w"], runs["local"].params["out"]["w"])


def test_server_batch_is_sized_and_its_overflow_dropped_and_counted():
  plan = fedsgd.make_plan([60] * 1000, trust="server", sampling_rate=0.0043,
                          steps=7000, clip_norm=1.0, noise_multiplier=1.0)
  # About q·N = 258 rows a step are gathered, not P·B = 11,000.
  assert 258 < plan.server_batch < 2 * 258
  assert plan.server_batch < 1000 * plan.row_plan.max_batch
  assert plan.settings()["server_batch"] == plan.server_batch
  assert fedsgd.make_plan([60] * 10, trust="local", sampling_rate=0.1,
                          steps=5, clip_norm=1.0,
                          noise_multiplier=1.0).server_batch is None
  # q = 1: every slot is sampled; G = 3 keeps participant 0's first three.
  sizes = [5, 2, 4]
  parts, xs, ys = _participants(sizes)
  small = dataclasses.replace(
      fedsgd.make_plan(sizes, trust="server", sampling_rate=1.0, steps=1,
                       clip_norm=0.3, noise_multiplier=0.0), server_batch=3)
  init = softmax.initial_params(D, K)
  out = fedsgd.release(jax.random.key(0), small, softmax.loss, init,
                       parts.x, parts.y, parts.mask, optax.sgd(1.0))
  assert out.overflow_steps == 1
  expected = jax.tree.map(jnp.zeros_like, init)
  for xi, yi in zip(xs[0][:3], ys[0][:3], strict=True):
    expected = jax.tree.map(jnp.add, expected, clipping.clip_to_norm(
        _row_grad(init, xi, yi), 0.3))
  for a, b in zip(jax.tree.leaves(out.params), jax.tree.leaves(expected),
                  strict=True):
    np.testing.assert_allclose(a, -b / sum(sizes), rtol=1e-5, atol=1e-7)
