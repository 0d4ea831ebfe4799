"""federated.ddgsgd, through fedsgd's trust="distributed": plan,
accounting and laws."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpcore import accounting, ddg_accounting, ghost
from federated import fedsgd
from tests.pinned import accounted

SIZES = [8, 8]


@ghost.layered
def _indicator_loss(layers, example):
  # ℓ(w; (x, y)) = −w·x: row i holds x = e_i, so its gradient is −e_i and
  # the model after SGD counts how often each row was used.
  x, _ = example
  return -layers.dense("w", x)[0]


def _params(dim):
  return {"w": {"w": jnp.zeros((dim, 1), jnp.float32)}}


def _plan(sizes=SIZES, **kw):
  args = dict(trust="distributed", sampling_rate=0.25, clip_norm=1.0,
              steps=200, noise_multiplier=0.0, model_size=16, delta=1e-5)
  args.update(kw)
  return fedsgd.make_plan(sizes, **args)


def _inclusions(plan, alive=None, seed=0):
  rows = sum(SIZES)
  x = jnp.eye(rows, dtype=jnp.float32).reshape(2, 8, rows)
  y = jnp.zeros((2, 8), jnp.int32)
  mask = jnp.ones((2, 8), jnp.float32)
  out = fedsgd.release(jax.random.key(seed), plan, _indicator_loss,
                       _params(rows), x, y, mask, optax.sgd(1.0),
                       alive=alive)
  # w = Σₜ (decoded sum)/qN; the decoded sum is within the rounding error
  # (≪ ½ per coordinate) of the true count of each row.
  return np.asarray(out.params["w"]["w"][:, 0]) * plan.divisor


def test_each_row_is_included_at_rate_q():
  plan = _plan()
  counts = _inclusions(plan)
  assert np.max(np.abs(counts - np.round(counts))) < 0.1
  counts = np.round(counts)
  trials = plan.steps * sum(SIZES)
  rate = counts.sum() / trials
  se = math.sqrt(0.25 * 0.75 / trials)
  assert abs(rate - 0.25) < 4 * se
  assert abs(rate - 0.2) > 4 * se  # a wrong q (0.2) would be rejected
  # Every row on its own (first, middle, last alike): Binomial(T, q).
  row_se = math.sqrt(plan.steps * 0.25 * 0.75)
  assert np.all(np.abs(counts - plan.steps * 0.25) < 5 * row_se)


@pytest.mark.slow
def test_chunks_do_not_change_the_distributed_release():
  # Without chunk the step encodes all participants in one ddg.encode_many
  # loop; with chunk each participant's ddg.encode runs under lax.map:
  # bitwise the same messages, hence the same model (noise included).
  # The second participant has 5 real rows of its 8 (the plan's sizes).
  plan = _plan((8, 5), steps=3, noise_multiplier=1.0)
  rows = sum(SIZES)
  x = jax.random.normal(jax.random.key(3), (2, 8, rows))
  y = jnp.zeros((2, 8), jnp.int32)
  mask = jnp.ones((2, 8), jnp.float32).at[1, 5:].set(0.0)

  def run(chunk):
    return np.asarray(fedsgd.release(
        jax.random.key(4), plan, _indicator_loss, _params(rows), x, y, mask,
        optax.sgd(1.0), chunk=chunk).params["w"]["w"])

  whole = run(None)
  np.testing.assert_array_equal(whole, run(1))
  assert np.any(whole != 0)


def test_dropped_participants_rows_are_not_in_the_sum():
  plan = _plan(min_survivors=1)
  alive = jnp.ones((plan.steps, 2), bool).at[:, 1].set(False)
  counts = np.round(_inclusions(plan, alive))
  assert np.all(counts[8:] == 0)
  assert abs(counts[:8].sum() / (8 * plan.steps) - 0.25) < 4 * math.sqrt(
      0.25 * 0.75 / (8 * plan.steps))


def test_too_few_survivors_leave_the_model_unchanged():
  plan = _plan()  # P_min = P = 2
  alive = jnp.ones((plan.steps, 2), bool).at[:, 1].set(False)
  assert np.all(_inclusions(plan, alive) == 0)


def test_noise_in_the_released_model_has_the_central_scale():
  # Zero data, one step: w·qN is the decoded noise sum, sd σC per
  # coordinate (P shares of σ²/P). Within 8 % over 1024 coordinates
  # (standard error ~2 %); shares of σ/P instead of σ/√P would give
  # σC/√2 and fail.
  plan = fedsgd.make_plan(SIZES, trust="distributed", sampling_rate=0.25,
                          clip_norm=2.0, steps=1, noise_multiplier=1.5,
                          model_size=1024, delta=1e-5)
  x = jnp.zeros((2, 8, 1024), jnp.float32)
  out = fedsgd.release(jax.random.key(1), plan, _indicator_loss,
                       _params(1024), x, jnp.zeros((2, 8), jnp.int32),
                       jnp.ones((2, 8)), optax.sgd(1.0))
  noise = np.asarray(out.params["w"]["w"][:, 0]) * plan.divisor
  assert np.std(noise) == pytest.approx(1.5 * 2.0, rel=0.08)


def test_calibrated_plan_meets_its_target_and_a_smaller_sigma_does_not():
  kw = dict(sampling_rate=0.05, clip_norm=1.0, steps=300, delta=1e-5,
            model_size=650)
  plan = fedsgd.make_plan([600, 600], trust="distributed", epsilon=2.0,
                          **kw)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  g = ledger.guarantee(1e-5)
  assert g.epsilon <= 2.0 and g.delta <= 1e-5
  assert g.epsilon > 1.9  # calibrated, not padded
  # The plan states the guarantee; the budget is its target.
  assert plan.epsilon == accounted(g.epsilon) and plan.target_epsilon == 2.0
  worse = fedsgd.make_plan([600, 600], trust="distributed",
                           noise_multiplier=0.8 * plan.noise_multiplier,
                           **kw)
  ledger = accounting.PrivacyLedger()
  worse.record(ledger)
  assert ledger.guarantee(1e-5).epsilon > 2.0
  # The only costs over the exact sampled Gaussian of the same
  # σ_eff = √P·s/Δ are the rounding (Δ > c) and τ, both tiny here; the
  # server trust model's Gaussian accounting at the same σ is a little
  # below (its shift is C, not the rounded Δ; fractional orders).
  p = plan.ddg_params
  sigma_eff = math.sqrt(2) * float(p.sigma_share) / p.sensitivity
  limit = ddg_accounting.rdp_epsilon(300 * ddg_accounting.subsampled_rdp(
      ddg_accounting.ORDERS / (2 * sigma_eff**2), 0.05), 1e-5)
  assert limit <= g.epsilon <= 1.02 * limit
  server = fedsgd.make_plan([600, 600], trust="server",
                            noise_multiplier=plan.noise_multiplier, **{
                                k: v for k, v in kw.items()
                                if k != "model_size"})
  ledger = accounting.PrivacyLedger()
  server.record(ledger)
  assert 0.9 * g.epsilon < ledger.guarantee(1e-5).epsilon < g.epsilon


def test_calibration_counts_the_padding_events_at_a_large_epsilon():
  # At ε = 8 the padding events' δ, (1 + e^ε)·P, is a tenth of δ: a
  # calibration on the curve alone gave a ledger of 8.08 for a target 8.
  plan = fedsgd.make_plan([600, 600], trust="distributed", epsilon=8.0,
                          sampling_rate=0.05, clip_norm=1.0, steps=300,
                          delta=1e-5, model_size=650)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  g = ledger.guarantee(1e-5)
  assert g.truncation_probability > 0
  assert 7.9 < g.epsilon <= 8.0
  assert plan.epsilon == accounted(g.epsilon)


def test_settings_report_bits_and_each_participants_own_guarantee():
  plan = fedsgd.make_plan([600, 600], trust="distributed",
                          sampling_rate=0.05, clip_norm=1.0, steps=300,
                          noise_multiplier=1.0, model_size=650, delta=1e-5)
  s = plan.settings()
  assert s["bits"] == 16 and s["padded_dim"] == 1024
  assert s["bits_per_participant_step"] == 16 * 1024
  assert s["float32_bits_per_participant_step"] == 32 * 650
  assert s["wrap_probability"] <= 1e-9
  assert s["sigma_share"] * s["granularity"] == pytest.approx(
      1.0 / math.sqrt(2), rel=1e-3)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  # One share of σ/√2 alone protects less than the sum.
  assert s["own_epsilon"] > ledger.guarantee(1e-5).epsilon
  assert s["own_delta"] >= 1e-5  # more where the padding is too likely


def test_each_participants_own_guarantee_pays_for_the_padding():
  # Ten participants: one share of σ/√10 alone is worth ε ≈ 21, where the
  # padding's truncation (P ≈ 6e-10) costs (1 + e^21)·P of δ: the own
  # guarantee states that δ, not the plan's.
  plan = fedsgd.make_plan(np.full(10, 200), trust="distributed",
                          sampling_rate=0.05, steps=200, clip_norm=1.0,
                          epsilon=2.0, delta=1e-5, model_size=20)
  s = plan.settings()
  departure = plan.truncation_probability + plan.sampler_departure
  assert 0 < departure < 1e-9
  from federated import ddgsgd  # noqa: PLC0415
  share_alone = ddg_accounting.rdp_epsilon(ddgsgd.own_rdp(
      plan.ddg_params, sampling_rate=0.05, steps=200), 1e-5)
  assert 20 < share_alone <= s["own_epsilon"] < share_alone + 1
  assert s["own_delta"] > 0.5
  assert s["own_delta"] >= departure * math.exp(s["own_epsilon"]) * 0.99


@pytest.mark.parametrize("bad,match", [
    (dict(model_size=None), "model_size"),
    (dict(min_survivors=3), "min_survivors"),
    (dict(noise_multiplier=None), "noise_multiplier"),
    (dict(epsilon=1.0), "not both"),
])
def test_bad_arguments(bad, match):
  with pytest.raises(ValueError, match=match):
    _plan(**bad)


def test_the_record_follows_the_plans_relation():
  # A plan's relation reaches the curve it records: replace-one (the
  # sensitivity 2Δ) is refused for a sampled sum, not filed under
  # add/remove's curve with a replace-one label.
  import dataclasses  # noqa: PLC0415

  from dpcore import options  # noqa: PLC0415
  plan = _plan(noise_multiplier=1.0)
  replace = dataclasses.replace(plan, relation=options.Relation.REPLACE_ONE)
  with pytest.raises(ValueError, match="replace_one"):
    replace.record(accounting.PrivacyLedger())
  with pytest.raises(ValueError, match="replace_one"):
    replace.settings()
  plan.record(accounting.PrivacyLedger())  # add/remove: recorded


def test_no_noise_has_no_guarantee_to_record():
  with pytest.raises(ValueError, match="no DP"):
    _plan().record(accounting.PrivacyLedger())


@pytest.mark.slow  # equal results along two execution paths
def test_the_release_is_the_same_with_and_without_x64():
  # The step's counters are int32 whatever the mode (jax_enable_x64 widened
  # the dropped-overflow count to int64 and the step's scan refused it).
  from tests.dpcore.modes import assert_same_in_both_modes  # noqa: PLC0415
  plan = _plan((8, 5), steps=2, noise_multiplier=1.0, min_survivors=1)
  rows = sum(SIZES)
  x = jax.random.normal(jax.random.key(3), (2, 8, rows), jnp.float32)
  y = jnp.zeros((2, 8), jnp.int32)
  mask = jnp.ones((2, 8), jnp.float32).at[1, 5:].set(0.0)
  alive = jnp.ones((plan.steps, 2), bool).at[1, 0].set(False)
  assert_same_in_both_modes(lambda: fedsgd.release(
      jax.random.key(4), plan, _indicator_loss, _params(rows), x, y, mask,
      optax.sgd(1.0), alive=alive).params)


@pytest.mark.slow  # an equal-path and one-compile check (CONTRIBUTING)
def test_one_program_serves_every_epsilon_with_the_audited_draws():
  # The plan as an argument (its DDGParams' γ, ⌊Δ²⌋ and noise sampler
  # traced): one compiled program for every ε, and the model of the plan
  # as a constant of the program (the host rationals, the path the audit
  # runs): the same integer draws; XLA may fold a constant plan's floats
  # (C, σ, γ) differently in the last bits, so the floats are compared to
  # 1e-6 (another noise draw would differ by about σ).
  rows = sum(SIZES)
  x = jax.random.normal(jax.random.key(3), (2, 8, rows))
  y = jnp.zeros((2, 8), jnp.int32)
  mask = jnp.ones((2, 8), jnp.float32)

  def release(plan):
    return fedsgd.release(jax.random.key(4), plan, _indicator_loss,
                          _params(rows), x, y, mask, optax.sgd(1.0))

  traced = jax.jit(release)
  sigmas = []
  for eps in (1.0, 4.0):
    plan = _plan(steps=3, noise_multiplier=None, epsilon=eps)
    got = traced(plan).params["w"]["w"]
    want = jax.jit(lambda plan=plan: release(plan))().params["w"]["w"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    sigmas.append(plan.ddg_params.sigma_share)
  assert sigmas[0] != sigmas[1] and traced._cache_size() == 1
