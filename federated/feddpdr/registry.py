"""The mechanisms of :mod:`federated.feddpdr`, described, and the options.

Mechanisms are described, not compared by name: :data:`DESCRIPTIONS`
holds a :class:`Mechanism` for each (private or not, projecting on a PCA
basis or not, aggregated at the server or not, which program it runs);
the program's stages (:mod:`federated.feddpdr.stages`), the plan, the
evaluation and the memory estimate read those.
"""

from __future__ import annotations

import dataclasses

from dpcore import options

__all__ = [
    "DESCRIPTIONS", "Mechanism", "describe",
]


@dataclasses.dataclass(frozen=True)
class Mechanism:
  """What one mechanism runs, and how it is evaluated.

  Attributes:
    name: the ``mechanism`` setting.
    label: its name in tables and plots (the paper's).
    private: it adds noise and claims a guarantee. ``nonpriv`` does not:
      its plan switches the noise off
      (:func:`federated.feddpdr.make_plan`) and its record claims nothing.
    reduces: each participant projects its rows on a k-dimensional PCA
      basis before its fits (DP-PCA; exact PCA when not private). False:
      the fits see the d raw features, no PCA step, ``k`` unused.
    federated: the server aggregates the bases and the models, and the
      global model is evaluated. False: each participant alone, each
      participant's own model scored on the whole test set.
    program: the mechanism whose compiled program it runs
      (:func:`federated.feddpdr.program`).
  """
  name: str
  label: str
  private: bool
  reduces: bool
  federated: bool
  program: str


DESCRIPTIONS = {m.name: m for m in (
    Mechanism("nonpriv", "Non-Priv", private=False, reduces=True,
              federated=True, program="feddpdr"),
    Mechanism("dpml", "DPML", private=True, reduces=False, federated=False,
              program="dpml"),
    Mechanism("dpdr_dpml", "DPDR-DPML", private=True, reduces=True,
              federated=False, program="dpdr_dpml"),
    Mechanism("feddpdr", "FedDPDR-DPML", private=True, reduces=True,
              federated=True, program="feddpdr"),
)}
"""Every mechanism by name (:mod:`federated.feddpdr` says what each does);
the program, the plan and the evaluation read these descriptions, never
the names."""


def describe(mechanism: str, name: str = "mechanism") -> Mechanism:
  """The :class:`Mechanism` called ``mechanism``.

  Raises:
    ValueError: an unknown mechanism; the message calls the setting
      ``name`` (e.g. ``"--sweep_mechanisms"``).
  """
  mechanism = options.parse(options.FedDPDRMechanism, mechanism, name)
  return DESCRIPTIONS[mechanism]
