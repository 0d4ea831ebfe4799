"""dpcore.audit_spec: positions, names, the claim's relation, run(), the
verdicts."""

import jax
import jax.numpy as jnp
import pytest

from dpcore import accounting, audit_spec, noise, noise_audit
from dpcore.audit_spec import AuditSpec


def _spec(*, stddev=1.0, x64=False, trials=2_000):
  def mechanism(key, value):
    return value + noise.gaussian_noise(key, (), stddev=stddev)

  return AuditSpec(
      name="toy", relation="add_remove", settings={}, mechanism=mechanism,
      data_0=0.0, data_1=1.0, statistic=lambda out: out, delta=1e-5,
      reported_epsilon=None, default_trials=trials, x64=x64)


def test_positions_and_names():
  assert [audit_spec.canary_index(8, p) for p in audit_spec.POSITIONS] == [
      0, 4, 7]
  with pytest.raises(ValueError, match="position must be one of"):
    audit_spec.canary_index(8, "second")
  assert audit_spec.spec_name("dpsgd", "last") == "dpsgd@last"
  assert audit_spec.spec_name("gaussian", None) == "gaussian"
  assert audit_spec.group("dpsgd@last") == "dpsgd"
  assert audit_spec.group("gaussian") == "gaussian"


def test_identity_names_a_broken_variant_base_broken_without_a_position():
  trials = (200_000, 20_000)
  assert audit_spec.identity("dpsgd", position="middle", broken=None,
                             trials=trials) == {
      "name": "dpsgd@middle", "position": "middle", "broken": False,
      "default_trials": 200_000}
  assert audit_spec.identity("dpsgd", position="middle",
                             broken="clip_skipped", trials=trials) == {
      "name": "dpsgd_clip_skipped", "position": None, "broken": True,
      "default_trials": 20_000}
  assert audit_spec.identity("gaussian", position=None, broken=None,
                             trials=trials)["name"] == "gaussian"


def test_the_relation_is_parsed_and_a_claim_under_another_refused():
  assert _spec().relation == "add_remove"
  ledger = accounting.PrivacyLedger()
  ledger.record_laplace(scale=1.0, sensitivity=1.0, label="l",
                        relation="replace_one")
  assert audit_spec.claimed_epsilon(ledger, "replace_one") == (
      pytest.approx(1.0))
  with pytest.raises(ValueError, match="claims its ε under"):
    audit_spec.claimed_epsilon(ledger, "add_remove")
  record = {"relation": "add_remove", "epsilon": 2.0}
  assert audit_spec.claimed_epsilon(record, "add_remove") == 2.0


def test_run_uses_the_default_trials_and_is_pure():
  spec = _spec()
  first = audit_spec.run(jax.random.key(0), spec)
  assert first.trials == spec.default_trials
  again = audit_spec.run(jax.random.key(0), spec)
  assert again.epsilon_lower == first.epsilon_lower
  other = audit_spec.run(jax.random.key(1), spec)
  assert other.threshold != first.threshold
  assert audit_spec.run(jax.random.key(0), spec, trials=1_000).trials == (
      1_000)


def test_run_sees_the_neighbours_apart():
  # A mechanism with far too little noise is found out; a noisy one not.
  loud = audit_spec.run(jax.random.key(2), _spec(stddev=0.05))
  quiet = audit_spec.run(jax.random.key(2), _spec(stddev=20.0))
  assert loud.epsilon_lower > 3.0
  assert quiet.epsilon_lower < 0.5


def test_run_enables_x64_only_for_a_spec_that_asks():
  seen = []

  def mechanism(key, value):
    seen.append(jnp.asarray(value).dtype)
    return value + 0.0 * jax.random.uniform(key)

  for x64 in (False, True):
    spec = AuditSpec(
        name="dtype", relation="add_remove", settings={},
        mechanism=mechanism, data_0=0.0, data_1=1.0,
        statistic=lambda out: out, delta=1e-5, reported_epsilon=None,
        default_trials=100, x64=x64)
    audit_spec.run(jax.random.key(0), spec)
  assert jnp.float64 not in seen[:1]
  assert seen[-1] == jnp.float64


def test_check_variant_names_the_variants_it_accepts():
  audit_spec.check_variant(None, ("clip_skipped",))
  audit_spec.check_variant("clip_skipped", ("clip_skipped",))
  with pytest.raises(ValueError, match=r"one of \('clip_skipped',\), got "
                     r"'clip'"):
    audit_spec.check_variant("clip", ("clip_skipped",))


def test_verdicts():
  spec = noise_audit.gaussian_spec()
  broken = noise_audit.gaussian_spec(broken=True)
  assert audit_spec.verdict(spec, spec.reported_epsilon / 2) == "ok"
  assert audit_spec.verdict(spec, spec.reported_epsilon + 0.1) == (
      "VIOLATION")
  assert audit_spec.verdict(broken, broken.reported_epsilon + 0.1) == (
      "caught")
  assert audit_spec.verdict(broken, broken.reported_epsilon / 2) == (
      "NOT CAUGHT")


def test_group_verdict_is_the_worst_position():
  def rec(name, v):
    return {"name": name, "verdict": v}
  assert audit_spec.group_verdicts(
      [rec("a@first", "ok"), rec("a@middle", "VIOLATION"),
       rec("a@last", "ok"), rec("b@first", "NOT CAUGHT"),
       rec("b@last", "caught"), rec("c", "ok")]) == {
           "a": "VIOLATION", "b": "caught", "c": "ok"}
  assert audit_spec.group_verdicts(
      [rec("b@first", "NOT CAUGHT"), rec("b@last", "NOT CAUGHT")]) == {
          "b": "NOT CAUGHT"}
