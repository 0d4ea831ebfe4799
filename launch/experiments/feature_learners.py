"""The other private learners on scattering features (flag-free logic).

:mod:`launch.experiments.features` trains a central DP-SGD softmax head on
the scattering transform of the images. This runner puts the library's
other private learners on the same features: ``learner="fedsgd"``,
federated DP-SGD (:mod:`federated.fedsgd`) of a softmax head over P
participants under one trust model (``"server"``, ``"local"`` or
``"participant"``), and ``learner="dplvq"``, DP-G(M)LVQ
(:mod:`mechanisms.lvq`) through the cross-validation protocol of
``launch.dplvq`` (:func:`launch.experiments.dplvq.run`), on the pixels or
on the features projected to ``projection_dim`` numbers. The feature map
reads each image alone, so the ε of every record is its learner's, from
the ledger. The recipes, the projection and the public box bound, and why
they cost no privacy: docs/features_learners.md.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import time
import zlib
from typing import NamedTuple

import numpy as np

from dpcore import options, validation
from launch import vocabulary

__all__ = [
    "PROJECTION_KEY", "Images", "Setting", "feature_rows", "load_images",
    "lvq_inputs", "projection_key", "run", "run_dplvq", "run_fedsgd",
]

# The DP-LVQ run's fields (launch.experiments.dplvq.Setting) this setting
# holds, each as ``lvq_<field>`` (its refusals are renamed so).
_LVQ_FIELDS = ("model", "trainer", "sampling_rate", "clip_norm", "epochs",
               "learning_rate", "init_mechanism", "folds", "repeats", "rank",
               "parallel_runs", "memory_budget")


class Images(NamedTuple):
  """Grey images in [0, 1] (scaled by their public range) and labels.

  Attributes:
    name: the data set's name (records; ``"mnist"`` trains LVQ on one fold
      as the paper does).
    train: (N, H, W) training images.
    y_train: (N,) class indices 0..k−1.
    test: (M, H, W) test images.
    y_test: (M,) class indices.
    num_classes: k.
  """
  name: str
  train: np.ndarray
  y_train: np.ndarray
  test: np.ndarray
  y_test: np.ndarray
  num_classes: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setting:
  """One run: the learner, the data, the features and the recipe.

  Every number here is public and was fixed before any test result was
  read (docs/features_learners.md). The federated fields start from the
  central recipe of :class:`mechanisms.features.scatternet.Recipe`; the LVQ
  fields (``lvq_*``) default to the paper's recipe of
  :class:`launch.experiments.dplvq.Setting`.

  Attributes:
    learner: ``"fedsgd"`` or ``"dplvq"``.
    dataset: a grey image set of :mod:`launch.data.loaders`.
    data_dir: where its files are (None: the loaders' search).
    cache_dir: where the scattering features are kept as .npy (None: not
      kept).
    epsilon: the target ε (σ is calibrated for it; the ledger's ε is
      reported).
    delta: δ.
    seeds: one federated run per seed (noise and sampling); for DP-LVQ the
      first is the protocol's seed (folds and training keys).
    J, L: scattering scales and orientations.
    num_groups: G of the group normalisation.
    trust: the federated trust model.
    participants: P.
    rows_per_participant: n (P·n ≤ the training rows).
    partition_seed: the seed of the split of rows over participants (the
      same for every noise seed).
    batch_size: B, expected rows of a step: q = B/(P·n).
    epochs: E (T = E/q).
    clip_norm: C.
    learning_rate: the server's SGD step size.
    momentum: its momentum.
    noise_multiplier: None to calibrate σ for ``epsilon``; 0 for the
      non-private reference (no guarantee, recorded as such).
    participant_chunk: participants per vmapped block (memory; None: all).
    inputs: DP-LVQ on ``"features"`` or ``"pixels"``.
    projection_dim: the features' dimension after the fixed random
      projection (None: keep all K·h·w).
    projection_seed: the public seed of the projection.
    feature_bound: the public bound c: [−c, c] is mapped onto [−1, 1].
    lvq_model, lvq_trainer: ``"gmlvq"``/``"glvq"``; ``"dpsgd"`` (private)
      or ``"sgd"`` (non-private reference).
    lvq_sampling_rate, lvq_clip_norm, lvq_epochs, lvq_learning_rate,
    lvq_init_mechanism, lvq_rank: the DP-LVQ recipe.
    lvq_folds, lvq_repeats: the cross-validation protocol.
    lvq_parallel_runs: runs vmapped together.
    lvq_memory_budget: bytes the evaluation may use (None: no check).
  """
  learner: vocabulary.Learner
  dataset: str = "mnist"
  data_dir: str | None = None
  cache_dir: str | None = None
  epsilon: float = 1.0
  delta: float = 1e-5
  seeds: tuple[int, ...] = (0, 1, 2)
  J: int = 2  # noqa: N815
  L: int = 8  # noqa: N815
  num_groups: int = 27
  # Federated DP-SGD.
  trust: options.Trust = options.Trust.SERVER
  participants: int = 5
  rows_per_participant: int = 10_000
  partition_seed: int = 0
  batch_size: int = 8192
  epochs: float = 40.0
  clip_norm: float = 0.1
  learning_rate: float = 4.0
  momentum: float = 0.9
  noise_multiplier: float | None = None
  participant_chunk: int | None = None
  # DP-LVQ.
  inputs: vocabulary.Inputs = vocabulary.Inputs.FEATURES
  projection_dim: int | None = 784
  projection_seed: int = 0
  feature_bound: float = 3.0
  lvq_model: options.LVQModel = options.LVQModel.GMLVQ
  lvq_trainer: options.LVQTrainer = options.LVQTrainer.DPSGD
  lvq_sampling_rate: float = 0.01
  lvq_clip_norm: float = 0.5
  lvq_epochs: int = 50
  lvq_learning_rate: float = 0.05
  lvq_init_mechanism: options.InitMechanism = (
      options.InitMechanism.LAPLACE)
  lvq_rank: int | None = None
  lvq_folds: int = 5
  lvq_repeats: int = 5
  lvq_parallel_runs: int = 5
  lvq_memory_budget: int | None = None

  def check(self) -> Setting:
    """One-line ValueErrors naming the setting, before any data is read.

    Returns:
      The setting with its option fields as their enum members.
    """
    from mechanisms.features import scattering  # pylint: disable=g-import-not-at-top

    learner = options.parse(vocabulary.Learner, self.learner, "learner")
    validation.check_epsilon(self.epsilon)
    validation.check_delta(self.delta)
    if not self.seeds or any(
        not isinstance(s, (int, np.integer)) or s < 0 for s in self.seeds):
      raise ValueError(f"seeds={self.seeds!r}: give one or more integers "
                       f"≥ 0.")
    for name in ("J", "L", "num_groups"):
      validation.check_positive_int(getattr(self, name), name)
    channels = scattering.num_channels(self.J, self.L)
    if channels % self.num_groups:
      raise ValueError(f"num_groups={self.num_groups}: must divide the "
                       f"{channels} channels of J={self.J}, L={self.L}.")
    if learner == vocabulary.Learner.FEDSGD:
      return dataclasses.replace(self, learner=learner,
                                 trust=self._check_federated())
    inputs = options.parse(vocabulary.Inputs, self.inputs, "inputs")
    model = options.parse(options.LVQModel, self.lvq_model, "lvq_model")
    trainer = options.parse(options.LVQTrainer, self.lvq_trainer,
                            "lvq_trainer")
    if trainer == options.LVQTrainer.BFGS:
      raise ValueError("lvq_trainer='bfgs': choose dpsgd (private) or sgd "
                       "(its non-private reference).")
    init = options.parse(options.InitMechanism, self.lvq_init_mechanism,
                         "lvq_init_mechanism")
    if self.projection_dim is not None:
      validation.check_positive_int(self.projection_dim, "projection_dim")
    validation.check_positive(self.feature_bound, "feature_bound")
    checked = dataclasses.replace(
        self, learner=learner, inputs=inputs, lvq_model=model,
        lvq_trainer=trainer, lvq_init_mechanism=init)
    # The LVQ run is given the feature rows: its files are not needed.
    try:
      checked.lvq_setting().check(files=False)
    except ValueError as error:
      raise ValueError(_lvq_names(str(error))) from None
    return checked

  def _check_federated(self) -> options.Trust:
    """Refuses a bad federated recipe; returns the trust model."""
    trust = options.parse(options.Trust, self.trust, "trust")
    if trust == options.Trust.DISTRIBUTED:
      raise ValueError("trust='distributed': this runner trains server, "
                       "local or participant noise (distributed noise: "
                       "python -m launch.feddpdr --fedsgd_trust=distributed)"
                       ".")
    for name in ("participants", "rows_per_participant", "batch_size"):
      validation.check_positive_int(getattr(self, name), name)
    if self.batch_size > self.participants * self.rows_per_participant:
      raise ValueError(
          f"batch_size={self.batch_size} exceeds the participants × "
          f"rows_per_participant = "
          f"{self.participants * self.rows_per_participant} rows (q = "
          f"B/N must be ≤ 1).")
    for name in ("epochs", "clip_norm", "learning_rate"):
      validation.check_positive(getattr(self, name), name)
    validation.check_in_range(self.momentum, "momentum", 0.0, 1.0,
                              low_inclusive=True)
    if self.noise_multiplier is not None:
      validation.check_non_negative(self.noise_multiplier,
                                    "noise_multiplier")
    if self.participant_chunk is not None:
      validation.check_positive_int(self.participant_chunk,
                                    "participant_chunk")
    if self.partition_seed < 0:
      raise ValueError(f"partition_seed={self.partition_seed}: must be "
                       f"≥ 0.")
    return trust

  def lvq_setting(self):
    """The :class:`launch.experiments.dplvq.Setting` of the LVQ fields.

    Its ``bounds`` are those that scaled the pixels to [0, 1] (the set's
    public bounds, or [0, 1] for images given already scaled); the
    features' box is this setting's ``feature_bound``.
    """
    from launch.data import loaders  # pylint: disable=g-import-not-at-top
    from launch.experiments import dplvq  # pylint: disable=g-import-not-at-top
    private = self.lvq_trainer == options.LVQTrainer.DPSGD
    return dplvq.Setting(
        dataset=self.dataset, data_dir=self.data_dir,
        bounds="auto" if loaders.public_bounds(self.dataset) else "0,1",
        epsilon=self.epsilon if private else None, delta=self.delta,
        seed=int(self.seeds[0]),
        **{name: getattr(self, f"lvq_{name}") for name in _LVQ_FIELDS})

  def recipe(self) -> dict:
    """The fields of this setting's learner, for its records."""
    fed = ("trust", "participants", "rows_per_participant",
           "partition_seed", "batch_size", "epochs", "clip_norm",
           "learning_rate", "momentum", "noise_multiplier",
           "participant_chunk")
    shared = ("dataset", "epsilon", "delta", "seeds", "J", "L",
              "num_groups")
    lvq = tuple(f.name for f in dataclasses.fields(self)
                if f.name.startswith("lvq_") or f.name in (
                    "inputs", "projection_dim", "projection_seed",
                    "feature_bound"))
    keep = shared + (fed if self.learner == vocabulary.Learner.FEDSGD
                     else lvq)
    return {"learner": self.learner,
            **{k: getattr(self, k) for k in keep}}


PROJECTION_KEY = "fold_in(key(projection_seed), crc32('projection'))"
"""How the public projection's key is made: in its own stream, so that it
is never a run's private root even where the seeds coincide (records
before 2026-11-28 used key(projection_seed) itself, which with the
defaults was the DP-LVQ run's root key)."""


def projection_key(seed: int):
  """The public projection's key (:data:`PROJECTION_KEY`)."""
  import jax  # pylint: disable=g-import-not-at-top
  return jax.random.fold_in(jax.random.key(seed),
                            zlib.crc32(b"projection"))


def _lvq_names(message: str) -> str:
  """A DP-LVQ refusal with its field names spelt as this setting's
  (``clip_norm=…`` → ``lvq_clip_norm=…``): the name that opens the
  message and every ``name=``."""
  names = "|".join(_LVQ_FIELDS)
  message = re.sub(rf"\b({names})(?==)", r"lvq_\1", message)
  return re.sub(rf"^({names})\b", r"lvq_\1", message)


# -- data and features ---------------------------------------------------------


def load_images(dataset: str, data_dir: str | None = None) -> Images:
  """A grey image set, pixels scaled to [0, 1] by the set's public range."""
  from launch.data import loaders  # pylint: disable=g-import-not-at-top
  data = loaders.load_dataset(dataset, data_dir=data_dir)
  h, w, c = data.image_shape
  if c != 1:
    raise ValueError(f"dataset={dataset!r} has {c} colour channels; the "
                     f"scattering features here take grey images.")
  low, high = data.bounds
  classes = np.asarray(data.classes)

  def scale(v):
    return ((np.asarray(v, np.float32) - low) / (high - low)).reshape(
        len(v), h, w)

  def labels(v):
    return np.searchsorted(classes, v).astype(np.int32)

  return Images(dataset, scale(data.x_train), labels(data.y_train),
                scale(data.x_test), labels(data.y_test), len(classes))


def feature_rows(images: np.ndarray, *, J: int, L: int,  # noqa: N803
                 num_groups: int, cache: str | None = None,
                 chunk: int = 8192) -> np.ndarray:
  """(N, K·h·w) group-normalised scattering rows of (N, H, W) images.

  The transform is :func:`launch.experiments.features.features` (cached at
  ``cache`` when given); the group norm runs ``chunk`` examples at a time.
  Each row depends on its own image only.
  """
  import jax  # pylint: disable=g-import-not-at-top

  from launch.experiments import features  # pylint: disable=g-import-not-at-top
  from mechanisms.features import normalization  # pylint: disable=g-import-not-at-top
  s = features.features(images, J=J, L=L, cache=cache)
  norm = jax.jit(functools.partial(normalization.group_norm,
                                   num_groups=num_groups))
  out = np.empty((len(s), int(np.prod(s.shape[1:]))), np.float32)
  for start in range(0, len(s), chunk):
    block = np.asarray(s[start:start + chunk], np.float32)
    out[start:start + len(block)] = np.asarray(norm(block)).reshape(
        len(block), -1)
  return out


def _features(images: Images, setting: Setting, progress):
  """Train and test feature rows, and the seconds they took."""
  def cache(part):
    if setting.cache_dir is None:
      return None
    return os.path.join(setting.cache_dir, f"{images.name}_{part}_J"
                        f"{setting.J}_L{setting.L}.npy")
  start = time.perf_counter()
  rows = [feature_rows(x, J=setting.J, L=setting.L,
                       num_groups=setting.num_groups, cache=cache(part))
          for x, part in ((images.train, "train"), (images.test, "test"))]
  seconds = time.perf_counter() - start
  progress(f"features {rows[0].shape} + {rows[1].shape} in {seconds:.1f} s")
  return rows[0], rows[1], seconds


def lvq_inputs(images: Images, setting: Setting, progress=None):
  """The pooled (train then test) rows in [−1, 1]^d of DP-LVQ's protocol.

  Returns:
    ``(prepared, details)``: a :class:`launch.experiments.dplvq.Prepared`
    and a dict of what was done (for the record).
  """
  import jax  # pylint: disable=g-import-not-at-top

  from dpcore import clipping  # pylint: disable=g-import-not-at-top
  from launch.experiments import dplvq  # pylint: disable=g-import-not-at-top
  from mechanisms.features import (  # pylint: disable=g-import-not-at-top
      projection,
  )
  say = progress or (lambda _: None)
  y = np.concatenate([images.y_train, images.y_test]).astype(np.int32)
  if setting.inputs == vocabulary.Inputs.PIXELS:
    pooled = np.concatenate([images.train, images.test])
    x = pooled.reshape(len(pooled), -1)
    bounds, details = (0.0, 1.0), {"inputs": "pixels",
                                   "feature_seconds": 0.0}
    scaling = "public_bounds"
  else:
    train, test, seconds = _features(images, setting, say)
    x = np.concatenate([train, test])
    del train, test
    dim = x.shape[1]
    details = {"inputs": "features", "feature_dim": dim,
               "feature_seconds": seconds}
    if setting.projection_dim is not None:
      start = time.perf_counter()
      if setting.projection_dim > dim:
        raise ValueError(f"projection_dim={setting.projection_dim} must be "
                         f"at most the features' dimension {dim}.")
      q = projection.random_orthonormal(
          projection_key(setting.projection_seed), dim,
          setting.projection_dim)
      x = np.asarray(jax.jit(lambda a, b: a @ b)(x, q))
      details["projection_seconds"] = time.perf_counter() - start
    c = float(setting.feature_bound)
    bounds, scaling = (-c, c), "scattering_group_norm_public_box"
    details["clipped_share"] = None  # filled below, for the operator
  x = np.asarray(clipping.scale_to_box(x, bounds), np.float32)
  if setting.inputs == vocabulary.Inputs.FEATURES:
    # A diagnostic of the public box, printed for the operator and kept in
    # the record; nothing is chosen from it.
    details["clipped_share"] = float(np.mean(np.abs(x) >= 1.0))
    say(f"rows {x.shape}; {100 * details['clipped_share']:.2f}% of the "
        f"coordinates at the box's faces")
  prepared = dplvq.Prepared(images.name, x, y, images.num_classes, scaling)
  return prepared, details


# -- the learners --------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _fedsgd_program(learning_rate: float, momentum: float, d: int,
                    num_classes: int, chunk: int | None):
  """``(key, plan, x, y, mask) -> params``, jitted (one compile per run
  shape: σ, ε and δ are the plan's traced leaves)."""
  import jax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top

  from federated import fedsgd  # pylint: disable=g-import-not-at-top
  from mechanisms.erm import softmax  # pylint: disable=g-import-not-at-top

  def train(key, plan, x, y, mask):
    opt = optax.sgd(learning_rate, momentum=momentum or None)
    return fedsgd.release(key, plan, softmax.loss,
                          softmax.initial_params(d, num_classes), x, y, mask,
                          opt, chunk=chunk).params
  return jax.jit(train)


def run_fedsgd(setting: Setting, images: Images, progress=None):
  """Yields one record per seed: federated DP-SGD on the features."""
  import jax  # pylint: disable=g-import-not-at-top

  from dpcore import accounting  # pylint: disable=g-import-not-at-top
  from federated import fedsgd, partition  # pylint: disable=g-import-not-at-top
  from mechanisms.erm import softmax  # pylint: disable=g-import-not-at-top
  s = setting
  say = progress or (lambda _: None)
  train, test, feature_s = _features(images, s, say)
  sizes = partition.even_sizes(len(train), s.participants,
                               s.rows_per_participant)
  parts = partition.partition(
      jax.random.fold_in(jax.random.key(s.partition_seed), 0), train,
      images.y_train, sizes=sizes)
  del train
  total = int(np.sum(parts.sizes))
  q = s.batch_size / total
  private = s.noise_multiplier is None or s.noise_multiplier > 0
  plan = fedsgd.make_plan(
      parts.sizes, trust=s.trust, sampling_rate=q, epochs=s.epochs,
      clip_norm=s.clip_norm, delta=s.delta,
      **({"epsilon": s.epsilon} if s.noise_multiplier is None
         else {"noise_multiplier": s.noise_multiplier}))
  if private:
    ledger = accounting.PrivacyLedger()
    plan.record(ledger)
    privacy = ledger.report(s.delta)
  else:
    privacy = accounting.no_guarantee_record(accounting.NON_PRIVATE)
  d = parts.x.shape[-1]
  program = _fedsgd_program(float(s.learning_rate), float(s.momentum), d,
                            images.num_classes, s.participant_chunk)
  args = (parts.x, parts.y.astype(np.int32), parts.mask)
  start = time.perf_counter()
  compiled = program.lower(jax.random.key(0), plan, *args).compile()
  compile_s = time.perf_counter() - start
  say(f"{s.trust} noise, {s.participants} × {s.rows_per_participant}: "
      f"q={q:.4g}, T={plan.steps}, σ={plan.noise_multiplier:.3f}, ε "
      f"{privacy.get('epsilon')}; compiled in {compile_s:.1f} s")
  accuracy = jax.jit(softmax.accuracy)
  for seed in s.seeds:
    start, cpu = time.perf_counter(), time.process_time()
    params = jax.block_until_ready(
        compiled(jax.random.fold_in(jax.random.key(seed), 1), plan, *args))
    train_s = time.perf_counter() - start
    # CPU seconds of this process (all its threads): on a shared machine
    # the wall time depends on the other jobs, this much less.
    train_cpu_s = time.process_time() - cpu
    acc = float(accuracy(params, test, images.y_test))
    say(f"seed {seed}: accuracy {acc:.4f} ({train_s:.1f} s)")
    yield {
        "experiment": "features_fedsgd", "dataset": images.name,
        "features": {"kind": "scattering", "J": s.J, "L": s.L,
                     "num_groups": s.num_groups, "dim": d},
        "trust": s.trust, "participants": s.participants,
        "rows_per_participant": s.rows_per_participant,
        "target_epsilon": s.epsilon if private else None,
        "delta": s.delta, "seed": int(seed), "accuracy": acc,
        "test_rows": len(images.y_test),
        "weight_norm": float(np.sqrt(sum(
            np.sum(np.square(v)) for v in jax.tree.leaves(params)))),
        "setting": s.recipe(), "fedsgd": plan.settings(),
        "feature_seconds": feature_s, "compile_seconds": compile_s,
        "train_seconds": train_s, "train_cpu_seconds": train_cpu_s,
        "load_average": os.getloadavg()[0],
        "device": jax.devices()[0].platform, "privacy": privacy,
    }


def run_dplvq(setting: Setting, images: Images, progress=None):
  """Yields the one record of DP-LVQ's protocol on pixels or features."""
  import jax  # pylint: disable=g-import-not-at-top

  from launch.experiments import dplvq  # pylint: disable=g-import-not-at-top
  s = setting
  say = progress or (lambda _: None)
  prepared, details = lvq_inputs(images, s, say)
  start, cpu = time.perf_counter(), time.process_time()
  record = dplvq.run(jax.random.key(int(s.seeds[0])), prepared,
                     s.lvq_setting().check(files=False), progress=say)
  total_s = time.perf_counter() - start
  total_cpu_s = time.process_time() - cpu
  say(f"DP-LVQ on {s.inputs}: error {record['error_mean']:.4f} "
      f"({record['error_std']:.4f}) in {total_s:.0f} s")
  yield {"experiment": "features_dplvq", **record,
         "accuracy": 1.0 - record["error_mean"],
         "target_epsilon": (s.epsilon if s.lvq_trainer
                            == options.LVQTrainer.DPSGD else None),
         "dim": int(prepared.x.shape[1]), **details,
         "features": ({"kind": "scattering", "J": s.J, "L": s.L,
                       "num_groups": s.num_groups,
                       "projection_dim": s.projection_dim,
                       "projection_seed": s.projection_seed,
                       "projection_key": PROJECTION_KEY,
                       "feature_bound": s.feature_bound}
                      if s.inputs == vocabulary.Inputs.FEATURES else None),
         "setting": s.recipe(), "total_seconds": total_s,
         "total_cpu_seconds": total_cpu_s,
         "load_average": os.getloadavg()[0]}


def run(setting: Setting, *, images: Images | None = None, progress=None):
  """Checks ``setting``, then yields its records.

  Args:
    setting: the run.
    images: the data (None: :func:`load_images` of ``setting.dataset``).
    progress: a callback for progress lines.
  """
  setting = setting.check()
  if images is None:
    images = load_images(setting.dataset, setting.data_dir)
  if setting.learner == vocabulary.Learner.FEDSGD:
    yield from run_fedsgd(setting, images, progress)
  else:
    yield from run_dplvq(setting, images, progress)
