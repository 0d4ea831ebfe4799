"""Tests of federated.feddpdr.settings."""

import dataclasses

import pytest

from dpcore import options
from federated import feddpdr


def test_static_part_excludes_the_budget():
  a = feddpdr.Config(epsilon=0.1, delta=1e-5, calibration="classic",
                     relation="add_remove", budget_per_classifier=True)
  b = feddpdr.Config(epsilon=8.0)
  assert a.static == b.static
  assert hash(a.static) == hash(b.static)
  assert feddpdr.Config(k=3).static != b.static
  assert feddpdr.Config(topk="subspace").static != b.static
  # The baseline selects the private program; other mechanisms their own.
  assert feddpdr.program(feddpdr.Config(mechanism="nonpriv")) == b.static
  assert feddpdr.program(feddpdr.Config(mechanism="dpml")) != b.static


def test_config_rejects_an_unknown_topk():
  feddpdr.Config(topk="subspace").check(dim=30)
  with pytest.raises(ValueError, match="topk must be one of"):
    feddpdr.Config(topk="lanczos").check(dim=30)


def test_config_is_static_plus_the_budget():
  static = [f.name for f in dataclasses.fields(feddpdr.Static)]
  config = [f.name for f in dataclasses.fields(feddpdr.Config)]
  assert config[:len(static)] == static
  assert set(config[len(static):]) == {
      "epsilon", "delta", "calibration", "budget_per_classifier",
      "pca_fraction", "relation", "min_survivors", "bits", "dropouts"}
  # The program's key is a plain Static: no budget reaches the jit cache.
  assert type(feddpdr.Config(epsilon=3.0).static) is feddpdr.Static
  assert type(feddpdr.program(feddpdr.Config())) is feddpdr.Static


@pytest.mark.parametrize("change, message", [
    (dict(epsilon=0.0), "^epsilon must be > 0"),
    (dict(epsilon=2e6), "^epsilon=2e\\+06 is beyond"),
    (dict(k=40), "^k=40 exceeds the data dimension d=30; choose k <= 30"),
    (dict(calibration="classic", epsilon=2.0), "^calibration=classic is "
     "proven only for ε₁ < 1, and epsilon=2 gives ε₁ = 1"),
    (dict(relation="swap"), "^relation must be one of"),
    (dict(mechanism="fedavg"), "^mechanism must be one of"),
])
def test_settings_are_checked_once_naming_the_fields(change, message):
  config = dataclasses.replace(feddpdr.Config(k=5), **change)
  with pytest.raises(ValueError, match=message):
    feddpdr.check_settings([config], dim=30)
  with pytest.raises(ValueError, match=message):
    config.check(dim=30)


def test_settings_that_pass():
  # dpml never projects (k above d is unused); classic calibration holds
  # for ε₁ < 1 and is not asked of mechanisms without DP-PCA; the old
  # spelling of the relation is accepted.
  feddpdr.check_settings([
      feddpdr.Config(mechanism="dpml", k=40),
      feddpdr.Config(mechanism="dpml", calibration="classic", epsilon=8.0),
      feddpdr.Config(calibration="classic", epsilon=1.9),
      feddpdr.Config(relation="replace"),
      feddpdr.Config(relation="add_remove")], dim=30, seeds=2,
      participant_chunk=3)
  assert feddpdr.Config().relation == "replace_one"
  for bad, message in ((dict(seeds=0), "^seeds"),
                       (dict(participant_chunk=0), "^participant_chunk")):
    with pytest.raises(ValueError, match=message):
      feddpdr.check_settings([feddpdr.Config()], **bad)


def test_the_program_has_one_spelling():
  # Options given as strings or as members select one program (its repr
  # keys the stored trace, launch.programs).
  spelt = feddpdr.Config(mechanism="nonpriv", loss="huber", topk="eigh")
  members = feddpdr.Config(mechanism=options.FedDPDRMechanism.FEDDPDR)
  assert repr(feddpdr.program(spelt)) == repr(feddpdr.program(members))
  assert isinstance(feddpdr.program(spelt).loss, options.ERMLoss)
