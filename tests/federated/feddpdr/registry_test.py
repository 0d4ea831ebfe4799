"""Tests of federated.feddpdr.registry: the mechanism table."""

import pytest

from dpcore import options
from federated import feddpdr


def test_every_mechanism_is_described_once():
  assert tuple(feddpdr.DESCRIPTIONS) == tuple(options.FedDPDRMechanism)
  for name, mech in feddpdr.DESCRIPTIONS.items():
    assert mech.name == name and feddpdr.describe(name) is mech
    program = feddpdr.describe(mech.program)
    # A mechanism runs a private program that reduces and aggregates as
    # it does; only the noise (its plan) may differ.
    assert program.program == program.name and program.private
    assert (program.reduces, program.federated) == (mech.reduces,
                                                   mech.federated)
  assert [m for m, d in feddpdr.DESCRIPTIONS.items() if not d.private] == [
      "nonpriv"]
  with pytest.raises(ValueError, match="sweep_mechanisms must be one of"):
    feddpdr.describe("fedavg", "sweep_mechanisms")
