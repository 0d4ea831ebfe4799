"""One vocabulary: the neighbouring relation and every option's spellings.

Light on purpose (the standard library only: no JAX, no NumPy), so that a
launch script imports it before its flags are parsed and ``--help`` stays
fast; the script's flags and the library's checks then use the same sets.

The neighbouring relation. A privacy guarantee is stated for a pair of
neighbouring data sets, and the two relations in this library are
different promises:

* :attr:`Relation.ADD_REMOVE` (``"add_remove"``): one data set is the
  other with one row (or, where a mechanism says so, one participant)
  added or removed. DP-SGD's Poisson subsampling and DP-PCA's
  sensitivity 1 are stated under it.
* :attr:`Relation.REPLACE_ONE` (``"replace_one"``): one row replaced by
  another. Objective and output perturbation and DPWSS's selections are
  proven under it.

Under both, a plan's counts (DP-SGD's N and its divisor qN, the
participants' sizes, q, T, the padded batches) are public constants
fixed before the data are read; a neighbour differs in one row under the
same plan.

The ledger (:class:`dpcore.accounting.PrivacyLedger`) keeps the relation
of every entry and refuses to compose entries of different relations.
:func:`parse_relation` is the one place where a spelling becomes a
:class:`Relation`; it maps the old spelling ``"replace"``
(:data:`LEGACY_RELATIONS`) and refuses anything else with the canonical
spellings in the message.

>>> parse_relation("replace_one") is Relation.REPLACE_ONE
True
>>> parse_relation("replace")  # the old spelling, mapped
<Relation.REPLACE_ONE: 'replace_one'>
>>> parse(Kernel, "rbf", "kernel")
<Kernel.RBF: 'rbf'>

Every other option set is a :class:`enum.StrEnum` below, used directly:
a member *is* its spelling (``Kernel.RBF == "rbf"``), so it goes into
JSON records and jit's static arguments as the string, and
:func:`parse` is the one way a spelling becomes a member. The launch
scripts' own vocabulary (feature scalings, evaluation splits, …) lives
in :mod:`launch.vocabulary`.
"""

from __future__ import annotations

import enum
from typing import TypeVar


class Relation(enum.StrEnum):
  """The neighbouring relation a guarantee is stated under.

  A ``str`` (``Relation.ADD_REMOVE == "add_remove"``), so it goes into
  JSON records as its spelling.
  """
  ADD_REMOVE = "add_remove"
  REPLACE_ONE = "replace_one"


RELATIONS: tuple[str, ...] = tuple(r.value for r in Relation)
"""The canonical spellings of the neighbouring relations."""

LEGACY_RELATIONS: dict[str, Relation] = {"replace": Relation.REPLACE_ONE}
"""Old spellings that :func:`parse_relation` (and nothing else) maps."""

RELATION_SPELLINGS: tuple[str, ...] = RELATIONS + tuple(LEGACY_RELATIONS)
"""Every spelling :func:`parse_relation` accepts (canonical first)."""


def parse_relation(value, name: str = "relation") -> Relation:
  """``value`` as a :class:`Relation`, mapping the old spelling ``replace``.

  Args:
    value: a :class:`Relation`, one of :data:`RELATIONS`, or an old
      spelling of :data:`LEGACY_RELATIONS`.
    name: the argument's name, for the message.

  Returns:
    The relation.

  Raises:
    ValueError: any other value (the message names the spellings).
  """
  if isinstance(value, Relation):
    return value
  if isinstance(value, str):
    if value in RELATIONS:
      return Relation(value)
    if value in LEGACY_RELATIONS:
      return LEGACY_RELATIONS[value]
  raise ValueError(f"{name} must be one of {', '.join(RELATIONS)} (the "
                   f"neighbouring relation); got {value!r}.")


_Option = TypeVar("_Option", bound=enum.StrEnum)


def parse(kind: type[_Option], value, name: str) -> _Option:
  """``value`` as a member of the option set ``kind``; one-line error if not.

  Args:
    kind: the option set, a :class:`enum.StrEnum` of this module.
    value: a member of ``kind`` or its spelling.
    name: the argument's name, for the message (e.g. ``"kernel"``).

  Returns:
    The member.

  Raises:
    ValueError: ``"<name> must be one of a, b, c; got 'x'."``
  """
  if isinstance(value, str):
    try:
      return kind(value)
    except ValueError:
      pass
  raise ValueError(f"{name} must be one of {', '.join(kind)}; got "
                   f"{value!r}.")


# -- dpcore --------------------------------------------------------------------


class Sampler(enum.StrEnum):
  """Poisson batch samplers (:func:`dpcore.dpsgd.poisson_batch`)."""
  BERNOULLI = "bernoulli"
  GAPS = "gaps"
  AUTO = "auto"


class TrialDistribution(enum.StrEnum):
  """Laws of the number of trials (:func:`dpcore.tuning.trial_count`)."""
  POISSON = "poisson"
  GEOMETRIC = "geometric"
  LOGARITHMIC = "logarithmic"
  NEGATIVE_BINOMIAL = "negative_binomial"


# -- mechanisms ----------------------------------------------------------------


class PcaCalibration(enum.StrEnum):
  """DP-PCA's Gaussian calibrations (:func:`~mechanisms.pca.dp_pca.pca_sigma`).
  """
  ANALYTIC = "analytic"
  CLASSIC = "classic"


class PcaNoise(enum.StrEnum):
  """DP-PCA's noise: a float Gaussian or the discrete Gaussian on a grid."""
  FLOAT = "float"
  DISCRETE = "discrete"


class TopK(enum.StrEnum):
  """Top-k eigenvectors of a noisy matrix: exact, or by subspace iteration."""
  EIGH = "eigh"
  SUBSPACE = "subspace"


class Kernel(enum.StrEnum):
  """SVM kernels (:class:`mechanisms.svm.kernels.KernelSpec`)."""
  LINEAR = "linear"
  POLY = "poly"
  RBF = "rbf"
  SIGMOID = "sigmoid"


class Selection(enum.StrEnum):
  """DPWSS's working-set selection: the paper's, or the private one."""
  PAPER = "paper"
  PRIVATE = "private"


class PairFlags(enum.StrEnum):
  """How DPWSS remembers the pairs already selected."""
  AUTO = "auto"
  BITS = "bits"
  SCAN = "scan"


class RFFLoss(enum.StrEnum):
  """Losses of the random-feature learners (the first two are binary)."""
  HUBER_HINGE = "huber_hinge"
  LOGISTIC = "logistic"
  SOFTMAX = "softmax"


class ERMLoss(enum.StrEnum):
  """Objective perturbation's losses."""
  HUBER = "huber"
  LOGISTIC = "logistic"


class LVQModel(enum.StrEnum):
  """Prototype models: GLVQ, or GMLVQ with a learnt metric."""
  GLVQ = "glvq"
  GMLVQ = "gmlvq"


class LVQTrainer(enum.StrEnum):
  """How DP-LVQ trains: DP-SGD, or the non-private SGD and BFGS."""
  DPSGD = "dpsgd"
  SGD = "sgd"
  BFGS = "bfgs"


class SigmaRule(enum.StrEnum):
  """σ of DP-LVQ: the RDP accountant's, or the paper's formula."""
  ACCOUNTANT = "accountant"
  PAPER = "paper"


class InitMechanism(enum.StrEnum):
  """DP-LVQ's private prototype initialisation."""
  LAPLACE = "laplace"
  GAUSSIAN = "gaussian"


class FeatureNorm(enum.StrEnum):
  """How the scattering channels are normalised before a private head:
  per example (free), by private data statistics, or not at all."""
  GROUP = "group"
  DATA = "data"
  NONE = "none"


class Phi(enum.StrEnum):
  """GLVQ's squashing function Φ."""
  IDENTITY = "identity"
  SIGMOID = "sigmoid"


# -- federated -----------------------------------------------------------------


class FedDPDRMechanism(enum.StrEnum):
  """FedDPDR-DPML and its baselines."""
  NONPRIV = "nonpriv"
  DPML = "dpml"
  DPDR_DPML = "dpdr_dpml"
  FEDDPDR = "feddpdr"


class Aggregation(enum.StrEnum):
  """How FedDPDR aggregates the participants' bases.

  ``moments``: each participant releases its own noisy XᵢᵀXᵢ (local
  trust); ``distributed_moments``: the same sum under secure aggregation,
  each participant adding a discrete Gaussian share
  (:mod:`federated.feddpdr.secure_moments`).
  """
  SUBSPACE = "subspace"
  PAPER = "paper"
  MOMENTS = "moments"
  DISTRIBUTED_MOMENTS = "distributed_moments"


class ModelAggregation(enum.StrEnum):
  """How FedDPDR averages the participants' models."""
  WEIGHTED = "weighted"
  PAPER = "paper"


class Trust(enum.StrEnum):
  """Who adds federated DP-SGD's noise, and what a neighbour is."""
  SERVER = "server"
  LOCAL = "local"
  PARTICIPANT = "participant"
  DISTRIBUTED = "distributed"


__all__ = [
    "Aggregation", "ERMLoss", "FedDPDRMechanism", "FeatureNorm",
    "InitMechanism", "Kernel", "LEGACY_RELATIONS", "LVQModel", "LVQTrainer",
    "ModelAggregation",
    "PairFlags", "PcaCalibration", "PcaNoise", "Phi", "RELATIONS",
    "RELATION_SPELLINGS", "RFFLoss", "Relation", "Sampler", "Selection",
    "SigmaRule", "TopK", "TrialDistribution", "Trust", "parse",
    "parse_relation",
]
