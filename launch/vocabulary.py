"""The launch scripts' own option sets (the library's are in dpcore.options).

Light on purpose (the standard library only), so a script imports it
before its flags are parsed. Each set is a :class:`enum.StrEnum`: a
member is its spelling, and ``dpcore.options.parse`` checks a value.
"""

from __future__ import annotations

import enum


class Scaling(enum.StrEnum):
  """Feature scalings of ``launch.dpwss`` and ``launch.kernel_compare``."""
  AUTO = "auto"
  AUTO_MINMAX = "auto_minmax"
  NONE = "none"
  BOX = "box"
  MINMAX = "minmax"
  UNIT_ROWS = "unit_rows"
  UNIT_BALL = "unit_ball"


class WorkingSet(enum.StrEnum):
  """``launch.dpwss``'s working-set rule: LIBSVM's WSS2 or DPWSS."""
  WSS2 = "wss2"
  DPWSS = "dpwss"


class Release(enum.StrEnum):
  """What ``launch.dpwss`` releases after training."""
  NONE = "none"
  OUTPUT_PERTURBATION = "output_perturbation"


class EvalSplit(enum.StrEnum):
  """The split a DPWSS model is scored on."""
  TRAIN = "train"
  TEST = "test"


class SolverDtype(enum.StrEnum):
  """The SMO solver's float type."""
  FLOAT64 = "float64"
  FLOAT32 = "float32"


class Learner(enum.StrEnum):
  """``launch.feature_learners``' learner on the scattering features."""
  FEDSGD = "fedsgd"
  DPLVQ = "dplvq"


class Inputs(enum.StrEnum):
  """What ``launch.feature_learners``' DP-LVQ reads: features or pixels."""
  FEATURES = "features"
  PIXELS = "pixels"


class TrainOn(enum.StrEnum):
  """Which folds ``launch.dplvq`` trains on."""
  AUTO = "auto"
  ONE_FOLD = "one_fold"
  OTHER_FOLDS = "other_folds"


__all__ = ["EvalSplit", "Inputs", "Learner", "Release", "Scaling",
           "SolverDtype", "TrainOn", "WorkingSet"]
