"""One vocabulary: the neighbouring relation and every option's spellings.

Light on purpose (the standard library only: no JAX, no NumPy), so that a
launch script imports it before its flags are parsed and ``--help`` stays
fast; the script's flags and the library's checks then use the same sets.

The neighbouring relation. A privacy guarantee is stated for a pair of
neighbouring data sets, and the two relations in this library are
different promises:

* :attr:`Relation.ADD_REMOVE` (``"add_remove"``): one data set is the
  other with one row (or, where a mechanism says so, one participant)
  added or removed; n itself is private. DP-SGD's Poisson subsampling and
  DP-PCA's sensitivity 1 are stated under it.
* :attr:`Relation.REPLACE_ONE` (``"replace_one"``): one row replaced by
  another; n is public. Objective and output perturbation and DPWSS's
  selections are proven under it.

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
>>> check_one_of("rbf", KERNELS, "--kernel")
'rbf'
"""

from __future__ import annotations

import enum
from collections.abc import Sequence


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


def check_one_of(value, allowed: Sequence[str], name: str) -> str:
  """``value`` if it is one of ``allowed``, else a one-line ValueError.

  Args:
    value: the option given.
    allowed: its spellings (one of the sets below).
    name: the argument or flag, e.g. ``"kernel"`` or ``"--kernel"``.

  Returns:
    ``value``.

  Raises:
    ValueError: ``"<name> must be one of a, b, c; got 'x'."``
  """
  if isinstance(value, str) and value in allowed:
    return value
  raise ValueError(f"{name} must be one of {', '.join(allowed)}; got "
                   f"{value!r}.")


# -- dpcore --------------------------------------------------------------------

DPSGD_SAMPLERS = ("bernoulli", "gaps", "auto")
"""Poisson batch samplers (:func:`dpcore.dpsgd.poisson_batch`)."""
TUNING_DISTRIBUTIONS = ("poisson", "geometric", "logarithmic",
                        "negative_binomial")
"""Laws of the number of trials (:func:`dpcore.tuning.trial_count`)."""

# -- mechanisms ----------------------------------------------------------------

PCA_CALIBRATIONS = ("analytic", "classic")
"""DP-PCA's Gaussian calibrations (:func:`mechanisms.pca.dp_pca.pca_sigma`)."""
PCA_NOISES = ("float", "discrete")
"""DP-PCA's noise: a float Gaussian or the discrete Gaussian on a grid."""
TOPK_METHODS = ("eigh", "subspace")
"""Top-k eigenvectors of a noisy matrix: exact, or by subspace iteration."""
KERNELS = ("linear", "poly", "rbf", "sigmoid")
"""SVM kernels (:class:`mechanisms.svm.kernels.KernelSpec`)."""
DPWSS_SELECTIONS = ("paper", "private")
"""DPWSS's working-set selection: the paper's, or the private one."""
PAIR_FLAG_MODES = ("auto", "bits", "scan")
"""How DPWSS remembers the pairs already selected."""
RFF_LOSSES = ("huber_hinge", "logistic", "softmax")
"""Losses of the random-feature learners."""
RFF_BINARY_LOSSES = ("huber_hinge", "logistic")
"""The binary ones of :data:`RFF_LOSSES`."""
ERM_LOSSES = ("huber", "logistic")
"""Objective perturbation's losses."""
LVQ_MODELS = ("glvq", "gmlvq")
LVQ_TRAINERS = ("dpsgd", "sgd", "bfgs")
LVQ_SIGMA_RULES = ("accountant", "paper")
"""σ of DP-LVQ: the RDP accountant's, or the paper's formula."""
LVQ_INIT_MECHANISMS = ("laplace", "gaussian")
LVQ_PHIS = ("identity", "sigmoid")
"""GLVQ's squashing function Φ."""

# -- federated -----------------------------------------------------------------

FEDDPDR_MECHANISMS = ("nonpriv", "dpml", "dpdr_dpml", "feddpdr")
FEDDPDR_AGGREGATIONS = ("subspace", "paper", "moments")
"""How FedDPDR aggregates the participants' bases."""
FEDDPDR_MODEL_AGGREGATIONS = ("weighted", "paper")
FEDSGD_TRUST_MODELS = ("server", "local", "participant", "distributed")
"""Who adds federated DP-SGD's noise, and what a neighbour is."""

# -- launch scripts ---------------------------------------------------------

SCALINGS = ("auto", "auto_minmax", "none", "box", "minmax", "unit_rows",
            "unit_ball")
"""Feature scalings of ``launch.dpwss`` and ``launch.kernel_compare``."""
DPWSS_WSS = ("wss2", "dpwss")
DPWSS_RELEASES = ("none", "output_perturbation")
EVAL_SPLITS = ("train", "test")
SOLVER_DTYPES = ("float64", "float32")
LVQ_TRAIN_ON = ("auto", "one_fold", "other_folds")


__all__ = [
    "DPSGD_SAMPLERS", "DPWSS_RELEASES", "DPWSS_SELECTIONS", "DPWSS_WSS",
    "ERM_LOSSES", "EVAL_SPLITS", "FEDDPDR_AGGREGATIONS",
    "FEDDPDR_MECHANISMS", "FEDDPDR_MODEL_AGGREGATIONS", "FEDSGD_TRUST_MODELS",
    "KERNELS", "LEGACY_RELATIONS", "LVQ_INIT_MECHANISMS", "LVQ_MODELS",
    "LVQ_PHIS", "LVQ_SIGMA_RULES", "LVQ_TRAINERS", "LVQ_TRAIN_ON",
    "PAIR_FLAG_MODES", "PCA_CALIBRATIONS", "PCA_NOISES", "RELATIONS",
    "RELATION_SPELLINGS", "RFF_BINARY_LOSSES", "RFF_LOSSES", "Relation",
    "SCALINGS", "SOLVER_DTYPES", "TOPK_METHODS", "TUNING_DISTRIBUTIONS",
    "check_one_of", "parse_relation",
]
