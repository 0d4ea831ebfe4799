"""FedDPDR-DPML (Wang et al. 2024, Algorithms 1–3) and its baselines.

N participants hold disjoint rows (a leading array axis, padded with a
mask; :mod:`federated.partition`). Rows must have ‖x‖ ≤ 1 (e.g. pixels/255
then per-row L2 normalisation). K classes are handled one-vs-rest
(:func:`mechanisms.erm.objective_perturbation.one_vs_rest`). Every
per-participant step is one ``vmap``; repeats (seeds) are a second ``vmap``
over keys, the data being shared.

Mechanisms and how each is evaluated (accuracy on the held-out test set,
test rows preprocessed like the training rows):

* ``feddpdr`` — FedDPDR-DPML. Each participant runs DP-PCA (ε₁, δ) on its
  rows; the server aggregates the bases (``aggregation``: ``"subspace"``,
  top-k of Σ wᵢÛᵢÛᵢᵀ, default; or ``"paper"``, (1/N)Σ wᵢÛᵢ as printed);
  or, with ``aggregation="moments"``, each participant sends the noisy
  matrix XᵢᵀXᵢ + Zᵢ of its DP-PCA instead of its top k, and the global
  basis is the top k of Σᵢ (XᵢᵀXᵢ + Zᵢ) (the plain sum: every Zᵢ has the
  same σ; see :func:`federated.aggregation.moments_aggregate`), no local
  basis being computed (``bases`` is then (N, 0, 0));
  each participant projects its rows on the global basis, clips them to
  norm ≤ 1, and trains K objective-perturbation classifiers; the server
  averages the models (Σ wᵢβ̂ᵢ, or (1/N)Σ wᵢβ̂ᵢ with
  ``model_aggregation="paper"``). Evaluated: the global basis and global
  model on the test set.
* ``dpdr_dpml`` — DPDR-DPML, each participant alone: its own DP-PCA basis
  and its own private classifiers, no aggregation. Evaluated: each
  participant's (Ûᵢ, β̂ᵢ) on the whole test set; ``accuracy`` is the mean
  over participants (each participant's accuracy is also returned).
* ``dpml`` — DPML, objective perturbation on the full d dimensions, no
  reduction, each participant alone. There is no PCA step, so the whole ε
  goes to training. Evaluated like ``dpdr_dpml`` (mean over participants).
* ``nonpriv`` — Non-Priv: the FedDPDR pipeline with the noise off (σ = 0:
  exact PCA per participant; the same basis aggregation; fits with b = 0
  and θ = 0; the same model averaging), so its gap to ``feddpdr`` is the
  cost of privacy alone. It runs the ``feddpdr`` program itself, the
  noise switched off by its traced σ, θ and p (:func:`program`).
  Evaluated like ``feddpdr``.

Budget. ε is split ε₁ = ``pca_fraction``·ε, ε₂ = ε − ε₁ (the paper: ½).
By default the K one-vs-rest classifiers get ε₂/K each (total ε₂);
``budget_per_classifier=True`` gives each ε₂, as the paper's experiments
appear to, for a true total of K·ε₂. The accountant
(:class:`dpcore.accounting.PrivacyLedger`) composes the Gaussian DP-PCA
step with the K pure-DP fits for each participant; as neither σ nor the
per-fit ε depends on nᵢ, every participant gets the same guarantee, which
is what ``privacy`` reports (beside the paper's nominal ε, labelled).
``nonpriv`` claims nothing: its record is
``accounting.no_guarantee_record(accounting.NON_PRIVATE)``.

Top k. ``topk="eigh"`` (default) finds every top-k basis exactly (DP-PCA
by ``eigh``, the server's aggregate by a thin SVD); ``topk="subspace"``
uses block subspace iteration for both
(:func:`mechanisms.pca.dp_pca.noisy_basis` and
:func:`federated.aggregation.subspace_aggregate`). Either is
post-processing of the noisy matrices; the server's start block comes from
:func:`server_key`, a stream no noise is drawn from.

Mechanisms are described, not compared by name: :data:`DESCRIPTIONS`
holds a :class:`Mechanism` for each (private or not, projecting on a PCA
basis or not, aggregated at the server or not, which program it runs),
and the program, the ledger, the evaluation and the memory estimate read
those.

Compilation. :class:`Config` is :class:`Static` (what shapes the compiled
program: mechanism, k, λ, loss, aggregations, top-k, tol, max_iter) plus
the budget (ε, δ, calibration, split, neighbouring), which reaches the
program only through the traced per-participant arrays σ, p and θ of
:class:`FedDPDRPlan`. :func:`train` is one module-level ``jax.jit`` with static
arguments, so a sweep over ε or δ reuses one executable (JAX's own
cache), and ``nonpriv`` reuses the ``feddpdr`` one (:func:`program`).

The shape (:mod:`dpcore.shape`): :func:`make_plan` calibrates a frozen
:class:`FedDPDRPlan` (ε, δ, the relation, every participant's σ, p, θ),
``plan.record(ledger)`` records one participant's releases, and
:func:`release` is the training release of the plan.

Orchestration. :func:`execute` is the one place a run is put together:
checks, calibration (:func:`make_plan`), the participant chunk against a
memory budget (:func:`plan_chunk`), training (one padded array, buckets,
a local mesh, or a mesh over several processes,
:mod:`federated.distributed`), evaluation and the summary with its
privacy record (:func:`summarise`); :func:`run` returns that summary.
Timing, the stored programs, records and sweeps are the harnesses'
(``launch/experiments/feddpdr.py``, ``launch/experiments/distributed.py``),
which call :func:`execute`.

Privacy:
  Per participant, neighbouring data sets differ in one of its rows. DP-PCA
  has sensitivity 1 under add/remove (the paper's Lemma 4.1) and √2 under
  replacement, the relation objective perturbation is proven under. The
  run is always *accounted* under replacement (sensitivity √2), so one
  guarantee covers all of it; ``neighbouring`` only picks what σ is
  calibrated for: ``"replace_one"`` (default; the old spelling
  ``"replace"`` is accepted, :func:`dpcore.options.parse_relation`) or
  ``"add_remove"`` (the paper's calibration, reproduced; the reported ε is
  then larger than nominal).
  Objective perturbation is ε-DP per fit under replacement given ‖x‖ ≤ 1
  (enforced by clipping each projected row, which is per-row and
  data-independent) and the exact minimiser (fits must converge to
  ‖∇J‖ ≤ ``tol``; :func:`summarise` raises :class:`ConvergenceError`
  otherwise).
  Aggregation at the server is post-processing. The test set is public.
  ``aggregation="moments"`` releases each participant's noisy matrix
  XᵢᵀXᵢ + Zᵢ itself, which is exactly the Gaussian mechanism's output that
  DP-PCA's guarantee is about (its top k is post-processing of it): the
  same σ, the same ledger entry, the same privacy record as ``"subspace"``
  (:func:`make_plan` does not look at the aggregation); the server's sum and
  its top k are post-processing.

Unequal sizes. Participants padded to one length waste the work done on
padding; :class:`federated.partition.Buckets` (participants grouped by
padded length) run each bucket as its own map inside the one compiled
program, every participant keyed by its original index, so the results
are those of the single padded array up to rounding (:func:`train`).
"""

from __future__ import annotations

import dataclasses
from functools import cached_property, partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import accounting, clipping, memory, metrics, options, validation
from dpcore import calibration as dp_calibration
from dpcore import noise as dp_noise
from federated import aggregation, distributed, sharding
from federated.partition import Buckets, Participants
from mechanisms.erm import objective_perturbation as op
from mechanisms.pca import dp_pca

__all__ = [
    "AGGREGATIONS", "Config", "ConvergenceError", "DESCRIPTIONS",
    "FedDPDRPlan", "MECHANISMS", "MODEL_AGGREGATIONS", "Mechanism",
    "NEIGHBOURING", "NOMINAL_NOTE", "Outcome", "RELATION", "SERVER_STREAM",
    "Static", "TOPK", "TrainOutput", "TrainingJob", "check_chunk",
    "check_data", "check_settings", "choose_chunk", "describe", "evaluate",
    "execute", "make_plan", "memory_estimate", "participant_keys",
    "plan_chunk", "program", "release", "run", "server_key", "summarise",
    "train", "train_arguments",
]


@dataclasses.dataclass(frozen=True)
class Mechanism:
  """What one mechanism runs, and how it is evaluated.

  Attributes:
    name: the ``mechanism`` setting.
    label: its name in tables and plots (the paper's).
    private: it adds noise and claims a guarantee. ``nonpriv`` does not:
      its plan switches the noise off (:func:`make_plan`) and its record
      claims nothing.
    reduces: each participant projects its rows on a k-dimensional PCA
      basis before its fits (DP-PCA; exact PCA when not private). False:
      the fits see the d raw features, no PCA step, ``k`` unused.
    federated: the server aggregates the bases and the models, and the
      global model is evaluated. False: each participant alone, each
      participant's own model scored on the whole test set.
    program: the mechanism whose compiled program it runs
      (:func:`program`).
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
"""Every mechanism of this module by name (the module docstring says what
each does); the program, the ledger and the evaluation read these
descriptions, never the names."""
MECHANISMS = options.FEDDPDR_MECHANISMS  # the keys of DESCRIPTIONS
AGGREGATIONS = options.FEDDPDR_AGGREGATIONS
MODEL_AGGREGATIONS = options.FEDDPDR_MODEL_AGGREGATIONS
NEIGHBOURING = dp_pca.NEIGHBOURING
TOPK = dp_pca.TOPK
SERVER_STREAM = 2**32 - 1
"""The index folded into a repeat's key for the server's own randomness
(the start block of ``topk="subspace"`` aggregation). Participant i's keys
come from ``fold_in(key, i)`` with i < N ≤ 2³² − 1, so this stream is
never a participant's, and never carries noise."""
NOMINAL_NOTE = ("the paper's figure: eps1 + eps2, one classifier's eps2 "
                "counted once")

# Defined next to the fits it is about; re-exported here, the same class.
ConvergenceError = op.ConvergenceError


def describe(mechanism: str, name: str = "mechanism") -> Mechanism:
  """The :class:`Mechanism` called ``mechanism``.

  Raises:
    ValueError: an unknown mechanism; the message calls the setting
      ``name`` (e.g. ``"--sweep_mechanisms"``).
  """
  options.check_one_of(mechanism, MECHANISMS, name)
  return DESCRIPTIONS[mechanism]


@dataclasses.dataclass(frozen=True)
class Static:
  """The settings that shape the compiled program (``jit`` static)."""
  mechanism: str = "feddpdr"
  k: int = 20
  lam: float = 0.01
  loss: str = "huber"
  huber_h: float = op.HUBER_H
  aggregation: str = "subspace"
  model_aggregation: str = "weighted"
  topk: str = "eigh"
  tol: float = 1e-8
  max_iter: int = 500

  @property
  def description(self) -> Mechanism:
    """The mechanism's :class:`Mechanism` (ValueError if unknown)."""
    return describe(self.mechanism)

  @property
  def private(self) -> bool:
    return self.description.private


@dataclasses.dataclass(frozen=True)
class Config(Static):
  """Settings of one FedDPDR-DPML experiment (see the module docstring).

  The fields of :class:`Static`, which shape the compiled program, and the
  budget (ε, δ, calibration, split, neighbouring), which only changes the
  host-side calibration (:func:`make_plan`) and reaches the program as
  traced arrays.
  """
  epsilon: float = 0.1
  delta: float = 1e-4
  calibration: str = "analytic"
  budget_per_classifier: bool = False
  pca_fraction: float = 0.5
  neighbouring: str = options.Relation.REPLACE_ONE.value

  @property
  def static(self) -> Static:
    """The program-shaping fields, as a plain :class:`Static`."""
    return Static(**{f.name: getattr(self, f.name)
                     for f in dataclasses.fields(Static)})

  def check(self, *, d: int | None = None, prefix: str = "") -> Config:
    """Validates every field, and k against the data dimension d.

    Args:
      d: the data dimension; None leaves the check of k against it for
        later (e.g. before the data is loaded).
      prefix: what the messages put before each setting's name: ``"--"``
        when the settings came from command-line flags of the same names.

    Returns:
      ``self``.

    Raises:
      ValueError: one line naming the setting and the fix.
    """
    def name(field):
      return prefix + field
    mech = describe(self.mechanism, name("mechanism"))
    for value, allowed, field in (
        (self.aggregation, AGGREGATIONS, "aggregation"),
        (self.model_aggregation, MODEL_AGGREGATIONS, "model_aggregation"),
        (self.loss, op.LOSSES, "loss"),
        (self.calibration, dp_pca.CALIBRATIONS, "calibration"),
        (self.topk, TOPK, "topk")):
      options.check_one_of(value, allowed, name(field))
    options.parse_relation(self.neighbouring, name("neighbouring"))
    dp_calibration.check_calibrated_epsilon(self.epsilon, name("epsilon"))
    validation.check_delta(self.delta, name("delta"))
    validation.check_positive(self.lam, name("lam"))
    validation.check_positive(self.huber_h, name("huber_h"))
    validation.check_positive(self.tol, name("tol"))
    validation.check_positive_int(self.max_iter, name("max_iter"))
    validation.check_in_range(self.pca_fraction, name("pca_fraction"), 0.0,
                              1.0)
    k = validation.check_positive_int(self.k, name("k"))
    if mech.reduces and d is not None and k > d:
      raise ValueError(
          f"{name('k')}={k} exceeds the data dimension d={d}; choose "
          f"{name('k')} <= {d}.")
    eps_pca = self.epsilon * self.pca_fraction
    if (self.calibration == "classic" and mech.private and mech.reduces
        and eps_pca >= 1):
      raise ValueError(
          f"{name('calibration')}=classic is proven only for ε₁ < 1, and "
          f"{name('epsilon')}={self.epsilon:g} gives ε₁ = {eps_pca:g}; use "
          f"{name('calibration')}=analytic or a smaller {name('epsilon')}.")
    return self


def check_settings(configs, *, d: int | None = None, seeds: int = 1,
                   participant_chunk: int | None = None,
                   prefix: str = "") -> None:
  """Every setting of runs of ``configs``, checked before any work.

  Args:
    configs: the runs' :class:`Config` s (:meth:`Config.check` each).
    d: the data dimension, or None where not known yet.
    seeds: repeats per run.
    participant_chunk: participants mapped at once, or None.
    prefix: what the messages put before the settings' names (``"--"``
      when they came from command-line flags of the same names).

  Raises:
    ValueError: one line naming the setting and the fix.
  """
  for config in configs:
    if not isinstance(config, Config):
      raise TypeError(f"config must be a feddpdr.Config, got {config!r}.")
    config.check(d=d, prefix=prefix)
  validation.check_positive_int(seeds, prefix + "seeds")
  check_chunk(participant_chunk, prefix + "participant_chunk")


def _static(config: Config | Static) -> Static:
  return config.static if isinstance(config, Config) else config


def program(config: Config | Static) -> Static:
  """The :class:`Static` that selects the compiled program.

  A mechanism runs the program its :class:`Mechanism` names: ``nonpriv``
  runs the ``feddpdr`` program with the noise switched off by its traced
  arguments (:func:`make_plan`), so the baseline and every private budget
  share one executable; every other mechanism is its own.
  """
  static = _static(config)
  return dataclasses.replace(static, mechanism=static.description.program)


RELATION = options.Relation.REPLACE_ONE
"""The relation every run is accounted under: one row of one participant
replaced (objective perturbation's; DP-PCA's σ may be calibrated for
add/remove, ``Config.neighbouring``, but is recorded under this)."""


@dataclasses.dataclass(frozen=True)
class FedDPDRPlan:
  """Host-side calibration of one experiment (see :func:`make_plan`).

  Attributes:
    epsilon: the guarantee ε of every participant's releases at
      ``delta``, as the ledger composes them (:attr:`privacy`'s
      ``epsilon``); None for ``nonpriv``. The budget setting the noise was
      calibrated from is :attr:`epsilon_nominal`.
    delta: δ of the setting; None for ``nonpriv``.
    relation: :data:`RELATION` (replace one row of one participant).
    config: the experiment (its :func:`program` selects the compiled
      program :func:`release` runs).
    num_classes: K.
    sigma: (N,) DP-PCA noise σ (0 where there is no private PCA).
    n: (N,) true sizes, float.
    p: (N,) objective-perturbation p of each fit (∞ for ``nonpriv``:
      the noise b, of density ∝ exp(−(p/2)‖b‖), is then exactly 0).
    theta: (N,) θ of each fit.
    epsilon_pca: ε₁ (None without private PCA).
    epsilon_fit: ε of each classifier (None when non-private).
    num_fits: classifiers per participant (K, or 1 for K = 2).
    pca: the participants' DP-PCA plan (one σ for all), or None without
      private PCA.
    fits: the participants' objective-perturbation plans, one per
      distinct size (their records do not depend on n), or () when
      non-private.
    epsilon_nominal: the budget setting ε the noise was calibrated from
      (the paper's nominal figure ε₁ + ε₂; with ``budget_per_classifier``
      the guarantee is larger); None for ``nonpriv``.
  """
  epsilon: float | None
  delta: float | None
  relation: options.Relation
  config: Config
  num_classes: int
  sigma: np.ndarray
  n: np.ndarray
  p: np.ndarray
  theta: np.ndarray
  epsilon_pca: float | None
  epsilon_fit: float | None
  num_fits: int
  pca: dp_pca.PcaPlan | None = None
  fits: tuple = ()
  epsilon_nominal: float | None = None

  def record(self, ledger: accounting.PrivacyLedger) -> None:
    """Records one participant's releases: DP-PCA, then its K fits.

    Every participant's ledger holds the same entries (neither σ nor the
    per-fit ε depends on nᵢ), so one ledger stands for each of them.
    DP-PCA is recorded under replace-one (the relation objective
    perturbation is proven under), whatever σ was calibrated for.

    Raises:
      ValueError: a ``nonpriv`` plan (no guarantee).
    """
    if not self.fits:
      raise ValueError(
          "this plan is non-private (nonpriv: no noise): it has no DP "
          "guarantee to record; report "
          "accounting.no_guarantee_record(accounting.NON_PRIVATE) instead.")
    if self.pca is not None:
      self.pca.record(ledger, relation=self.relation)
    self.fits[0].record(ledger)

  @cached_property
  def privacy(self) -> dict:
    """The privacy record (fields ``accounting.PRIVACY_FIELDS``) of every
    participant's ledger (:meth:`record`), with the paper's nominal ε
    beside it; a no-guarantee record for ``nonpriv``."""
    if not self.fits:
      return accounting.no_guarantee_record(accounting.NON_PRIVATE)
    ledger = accounting.PrivacyLedger()
    self.record(ledger)
    return ledger.report(self.delta, nominal_epsilon=self.epsilon_nominal,
                         nominal_note=NOMINAL_NOTE)


def make_plan(sizes, *, d: int, num_classes: int,
              config: Config) -> FedDPDRPlan:
  """Validates the settings and calibrates every participant's noise.

  Args:
    sizes: every participant's rows (public).
    d: the data dimension.
    num_classes: K.
    config: the experiment; its budget (ε, δ, calibration, split,
      neighbouring) is calibrated here.

  Returns:
    A :class:`FedDPDRPlan`; :func:`release` trains under it and
    ``plan.record(ledger)`` records one participant's releases.

  Raises:
    TypeError, ValueError: bad settings or sizes (one line, named).

  Privacy: per participant, (ε₁, δ) DP-PCA (Gaussian on XᵀX, σ for the
  configured relation) and K ε₂/K-DP objective-perturbation fits (ε₂
  each with ``budget_per_classifier``), composed by the ledger under
  replace-one (module docstring).
  """
  if not isinstance(config, Config):
    raise TypeError(f"config must be a feddpdr.Config, got {config!r}.")
  config.check(d=d)
  sizes = np.asarray(sizes)
  if sizes.size and not np.issubdtype(sizes.dtype, np.integer):
    raise ValueError(f"sizes must be whole row counts, got {sizes!r}.")
  if sizes.ndim != 1 or sizes.size == 0:
    raise ValueError(f"sizes must be a non-empty list, got {sizes!r}.")
  if np.any(sizes < 1):
    raise ValueError(
        f"participant {int(np.argmin(sizes))} has no rows (sizes "
        f"{sizes.tolist()}); every participant needs at least one row.")
  num_classes = validation.check_positive_int(num_classes, "num_classes")
  if num_classes < 2:
    raise ValueError("num_classes must be >= 2 for a classifier.")
  count = len(sizes)
  num_fits = 1 if num_classes == 2 else num_classes
  has_pca = config.description.reduces
  if not config.private:
    # σ = 0, θ = 0 and p = ∞ turn the noise off inside the private
    # program (:func:`_train_one`); the record claims nothing.
    return FedDPDRPlan(None, None, RELATION, config, num_classes,
                       np.zeros(count), sizes.astype(np.float64),
                       np.full(count, np.inf), np.zeros(count), None, None,
                       num_fits)
  eps_pca = config.epsilon * config.pca_fraction if has_pca else None
  eps_train = config.epsilon - eps_pca if has_pca else config.epsilon
  eps_fit = (eps_train if config.budget_per_classifier
             else eps_train / num_fits)
  sigma, pca_plan = 0.0, None
  if has_pca:
    pca_plan = dp_pca.make_plan(
        epsilon=eps_pca, delta=config.delta, k=config.k, dim=d,
        relation=config.neighbouring, calibration=config.calibration)
    sigma = pca_plan.sigma
  # p and θ depend on nᵢ only: computed once per distinct size.
  distinct, which = np.unique(sizes, return_inverse=True)
  params = [op.make_plan(epsilon=eps_fit, n=int(n_i), lam=config.lam,
                         loss=config.loss, h=config.huber_h,
                         num_classes=num_classes) for n_i in distinct]
  plan = FedDPDRPlan(None, config.delta, RELATION, config,
                     num_classes, np.full(count, sigma),
                     sizes.astype(np.float64),
                     np.asarray([q.p for q in params])[which],
                     np.asarray([q.theta for q in params])[which], eps_pca,
                     eps_fit, num_fits, pca_plan, tuple(params),
                     epsilon_nominal=config.epsilon)
  # The plan's ε is the guarantee its record composes to, not the setting.
  privacy = plan.privacy
  plan = dataclasses.replace(plan, epsilon=privacy["epsilon"])
  plan.__dict__["privacy"] = privacy  # the cached record, computed once
  return plan


class TrainOutput(NamedTuple):
  """Per-seed outputs (a leading seed axis S when vmapped).

  Attributes:
    bases: (N, d, k) the basis each participant's model uses (identity
      projection is not stored for ``dpml``: shape (N, 0, 0)).
    betas: (N, F, k) each participant's F classifiers.
    global_basis: (d, k) aggregated basis (federated mechanisms).
    global_betas: (F, k) aggregated model (federated mechanisms).
    grad_norm: (N, F) ‖∇J‖ at each returned fit.
    iterations: (N, F) L-BFGS iterations.
    converged: (N, F).
  """
  bases: jax.Array
  betas: jax.Array
  global_basis: jax.Array
  global_betas: jax.Array
  grad_norm: jax.Array
  iterations: jax.Array
  converged: jax.Array


def participant_keys(key: jax.Array, count: int, *, first: int = 0):
  """The (DP-PCA, fit) keys of participants ``first … first + count − 1``.

  Participant i's keys are ``split(fold_in(key, i))``: a function of the
  repeat's key and i alone, so they do not depend on how many participants
  the run has, nor on the chunk, device or process that computes them
  (a process holding participants ``first …`` derives the same keys).
  """
  index = jnp.arange(first, first + count, dtype=jnp.uint32)
  pairs = jax.vmap(lambda i: jax.random.split(jax.random.fold_in(key, i)))(
      index)
  return pairs[:, 0], pairs[:, 1]


def server_key(key: jax.Array) -> jax.Array:
  """The key of the server's post-processing randomness in one repeat.

  ``fold_in(key, SERVER_STREAM)``: a stream no participant's keys come
  from (:func:`participant_keys` folds in indices below
  :data:`SERVER_STREAM`), so what it draws is independent of every noise
  draw. It seeds only the start block of ``topk="subspace"`` aggregation.
  """
  return jax.random.fold_in(key, jnp.uint32(SERVER_STREAM))


def _train_one(key, x, labels, mask, sigma, n, p, theta, index=None, *,
               config: Config | Static, num_classes: int, mesh=None,
               chunk=None) -> TrainOutput:
  """One repeat. x: (N, n_max, d) float32; labels: (N, n_max) class ids.

  Per-participant steps map over the participant axis with
  :func:`sharding.over_participants` (a ``vmap``, or with ``mesh`` a
  ``shard_map`` of it; with ``chunk``, ``chunk`` participants at a time).
  Each participant's projection, clipping and fits happen inside that map,
  so with ``chunk`` no intermediate is held for all N participants at
  once: only the inputs, the (N, d, k) bases and the outputs scale with N.

  Buckets (:class:`federated.partition.Buckets`): ``x``, ``labels`` and
  ``mask`` are tuples, one padded array per bucket, and ``index`` the
  tuple of each bucket's original participant indices; σ, n, p and θ stay
  (N,) in the original order. Each bucket is its own map in this one
  program; every participant's keys come from its original index, and the
  bases and fits are put back in the original order before the server's
  steps, so the outputs do not depend on the bucketing (up to rounding).

  ``nonpriv`` is the ``feddpdr`` program with the noise off by its traced
  arguments (:func:`make_plan`: σ = 0, θ = 0, p = ∞, so DP-PCA adds 0·Z and
  each fit's b has radius Gamma/∞ = 0): the samplers run, add nothing, and
  both share one executable.
  """
  static = program(config)
  mech = static.description
  count = sigma.shape[0]
  d = (x[0] if index is not None else x).shape[-1]
  dtype = (x[0] if index is not None else x).dtype
  k = static.k
  pca_keys, fit_keys = participant_keys(key, count)
  weights = aggregation.size_weights(n)
  sigma = sigma.astype(dtype)
  # One entry per bucket: (rows, labels, mask, original indices or None).
  groups = ([(x, labels, mask, None)] if index is None
            else list(zip(x, labels, mask, index, strict=True)))

  def pick(values, which):
    return values if which is None else values[which]

  def in_order(parts, groups_):
    # Bucket outputs back in the original participant order.
    if index is None:
      return parts[0]
    order = jnp.concatenate([g[3] for g in groups_])
    return jax.tree_util.tree_map(
        lambda *a: jnp.zeros((count,) + a[0].shape[1:], a[0].dtype).at[
            order].set(jnp.concatenate(a)), *parts)

  each = partial(sharding.over_participants, mesh=mesh, chunk=chunk)
  moments = mech.federated and static.aggregation == "moments"
  global_basis = jnp.zeros((d, k), dtype)
  if moments:
    # The participants release their noisy XᵢᵀXᵢ + Zᵢ (what DP-PCA
    # releases; the same noise key as its ``topk="eigh"`` path) and the
    # server sums them: no local basis is computed.
    # The sum of the releases mᵢ + mirror(zᵢ) is computed as Σ mᵢ +
    # mirror(Σ zᵢ) (dp_pca.second_moment_and_noise): the same matrix, one
    # mirroring instead of N.
    summed = aggregation.summed_over_participants(
        lambda kk, xi, mi, si: dp_pca.second_moment_and_noise(
            kk, xi, mi, sigma=si), mesh=mesh, chunk=chunk)
    parts = [summed(pick(pca_keys, w), xi, mi, pick(sigma, w))
             for xi, _, mi, w in groups]
    total = sum(m for m, _ in parts) + dp_noise.symmetric_from_upper(
        sum(z for _, z in parts), d)
    global_basis = (aggregation.moments_aggregate(
        total, k, topk="subspace", key=server_key(key))
                    if static.topk == "subspace"
                    else aggregation.moments_aggregate(total, k))
    bases = jnp.zeros((count, 0, 0), dtype)
  elif mech.reduces:
    local_pca = each(
        lambda kk, xi, mi, si: dp_pca.noisy_basis(
            kk, xi, mi, k=k, sigma=si, topk=static.topk).components)
    bases = in_order([local_pca(pick(pca_keys, w), xi, mi, pick(sigma, w))
                      for xi, _, mi, w in groups], groups)
  else:
    bases = jnp.zeros((count, 0, 0), dtype)

  if mech.federated and not moments:
    if static.aggregation == "subspace":
      global_basis = _subspace_aggregate(bases, weights, key,
                                         topk=static.topk)
    else:
      global_basis = aggregation.paper_aggregate(bases, weights)

  def fit(kk, xi, yi, mi, ni, pi, ti, basis):
    # Each participant projects its own rows (z = x Û, or x itself for
    # dpml) and clips them to norm ≤ 1 before its K fits.
    z = xi if basis is None else xi @ basis
    z = clipping.clip_rows(z.astype(jnp.float64))
    return op.one_vs_rest(
        kk, z, yi, mi.astype(jnp.float64), num_classes=num_classes, n=ni,
        p=pi, theta=ti, lam=static.lam, loss=static.loss, h=static.huber_h,
        tol=static.tol, max_iter=static.max_iter, private=True)

  # The basis each participant's fits project on: the server's, its own
  # (passed per participant below), or none (the raw features).
  if not mech.reduces:
    local_fit = each(lambda *a: fit(*a, None))
  elif mech.federated:
    local_fit = each(lambda *a: fit(*a, global_basis))
  else:
    local_fit = each(fit)
  own_basis = mech.reduces and not mech.federated
  fits = []
  for xi, yi, mi, w in groups:
    args = (pick(fit_keys, w), xi, yi, mi, pick(n, w), pick(p, w),
            pick(theta, w))
    if own_basis:
      args += (pick(bases, w),)
    fits.append(local_fit(*args))
  fits = in_order(fits, groups)
  global_betas = jnp.zeros(fits.beta.shape[1:], fits.beta.dtype)
  if mech.federated:
    global_betas = aggregation.model_aggregate(
        fits.beta, weights, paper=static.model_aggregation == "paper")
  return TrainOutput(bases, fits.beta, global_basis, global_betas,
                     fits.grad_norm, fits.iterations, fits.converged)


def _subspace_aggregate(bases, weights, key, *, topk: str):
  """The server's subspace aggregate; ``"subspace"`` seeds its start block
  from :func:`server_key` (post-processing: never a noise key)."""
  if topk == "subspace":
    return aggregation.subspace_aggregate(bases, weights, topk=topk,
                                          key=server_key(key))
  return aggregation.subspace_aggregate(bases, weights)


@partial(jax.jit, static_argnames=("static", "num_classes", "mesh", "chunk"))
def _train_all(keys, x, labels, mask, sigma, n, p, theta, index, *,
               static: Static, num_classes: int, mesh, chunk) -> TrainOutput:
  fn = partial(_train_one, config=static, num_classes=num_classes, mesh=mesh,
               chunk=chunk)
  return jax.vmap(fn, in_axes=(0,) + (None,) * 8)(
      keys, x, labels, mask, sigma, n, p, theta, index)


def train(keys, x, labels, mask, sigma, n, p, theta, index=None, *,
          config: Config | Static, num_classes: int, mesh=None,
          chunk=None) -> TrainOutput:
  """All repeats (one per key, vmapped), jitted. Call under ``enable_x64``.

  One module-level ``jax.jit``: only :func:`program` of ``config``,
  ``num_classes``, ``mesh``, ``chunk`` and the arrays' shapes select the
  executable, so runs that differ in ε, δ or calibration reuse it, and so
  does ``nonpriv`` (the ``feddpdr`` program with the noise off).

  Args:
    keys: (S,) PRNG keys, one per repeat.
    x: (N, n_max, d) float32 rows (‖x‖ ≤ 1).
    labels: (N, n_max) class indices.
    mask: (N, n_max) 1 for real rows.
    sigma, n, p, theta: (N,) arrays of :class:`FedDPDRPlan` (traced).
    config: the experiment, or its :class:`Static` part (static).
    num_classes: K (static).
    mesh: optional participant mesh (static; :mod:`federated.sharding`).
    chunk: optional number of participants mapped at once (static; bounds
      peak memory, see :func:`sharding.over_participants`).
    index: None for one padded array; for buckets
      (:class:`federated.partition.Buckets`, as :func:`train_arguments`
      gives them), ``x``, ``labels`` and ``mask`` are tuples of per-bucket
      arrays and ``index`` the tuple of their original participant indices.
      The outputs are in the original participant order either way.

  Raises:
    ValueError: buckets with a mesh (not supported: give one padded array,
      or no mesh).
  """
  if index is not None and mesh is not None:
    raise ValueError(
        "bucketed participants (index given) cannot be sharded over a mesh;"
        " pass one padded array (partition.partition) with the mesh, or "
        "leave out the mesh.")
  return _train_all(keys, x, labels, mask, sigma, n, p, theta, index,
                    static=program(config), num_classes=num_classes,
                    mesh=mesh, chunk=chunk)


@partial(jax.jit, static_argnames=("static", "num_classes", "chunk"))
def _evaluate(out: TrainOutput, x_test, y_test, *, static: Static,
              num_classes: int, chunk):
  def predict(basis, betas):
    z = x_test if basis is None else x_test @ basis
    scores = op.decision_scores(z, betas, num_classes)
    return jnp.argmax(scores, axis=-1)

  def score(basis, betas):
    return metrics.accuracy(y_test, predict(basis, betas))

  mech = static.description
  if mech.federated:
    return jax.vmap(score)(out.global_basis, out.global_betas), None
  # Local models: every participant's model on the whole test set, mapped
  # ``chunk`` participants at a time when given (as in training).
  each = partial(sharding.over_participants, mesh=None, chunk=chunk)
  if mech.reduces:  # each participant's own basis
    per = jax.vmap(each(score))(out.bases, out.betas)
  else:
    per = jax.vmap(each(lambda w: score(None, w)))(out.betas)
  return jnp.mean(per, axis=1), per


def evaluate(out: TrainOutput, x_test, y_test, *, config: Config | Static,
             num_classes: int, chunk: int | None = None):
  """Test accuracy per repeat, and per participant for local mechanisms.

  Jitted (one module-level ``jax.jit``); call under ``jax.enable_x64``.

  Returns:
    ``(accuracy (S,), per_participant (S, N) or None)``.
  """
  return _evaluate(out, jnp.asarray(x_test, jnp.float64),
                   jnp.asarray(y_test), static=program(config),
                   num_classes=num_classes, chunk=chunk)


def check_data(participants: Participants | Buckets, x_test, y_test, *,
               num_classes: int) -> None:
  """Host-side input checks (finite data, ‖x‖ ≤ 1, labels in [0, K))."""
  sizes = np.asarray(participants.sizes)
  if np.any(sizes < 1):
    raise ValueError(
        f"participant {int(np.argmin(sizes))} has no rows; every "
        f"participant needs at least one row.")
  groups = (participants.groups if isinstance(participants, Buckets)
            else (participants,))
  for group in groups:
    mask = np.asarray(group.mask) > 0
    validation.check_row_norms(np.asarray(group.x)[mask], "participants.x")
    validation.check_labels(np.asarray(group.y)[mask], "participants.y",
                            classes=range(num_classes))
  x_test = validation.check_row_norms(x_test, "x_test")
  if x_test.shape[1] != np.shape(groups[0].x)[-1]:
    raise ValueError(
        f"x_test has {x_test.shape[1]} features, the participants' rows "
        f"{np.shape(groups[0].x)[-1]}; use the same features.")
  validation.check_labels(y_test, "y_test", classes=range(num_classes),
                          n_rows=np.asarray(x_test).shape[0])


def train_arguments(key: jax.Array, participants: Participants | Buckets,
                    plan: FedDPDRPlan, *, seeds: int, mesh=None) -> tuple:
  """The positional arguments of :func:`train`, typed and placed.

  Call under ``jax.enable_x64(True)`` (the fits' arrays are float64).

  Args:
    key: PRNG key; repeat s uses ``split(key, seeds)[s]``.
    participants: padded data (:mod:`federated.partition`), or
      :class:`federated.partition.Buckets` (then x, labels and mask are
      tuples, one array per bucket, and a ninth argument, ``index``,
      follows: see :func:`train`).
    plan: :func:`make_plan`'s calibration for these participants.
    seeds: number of repeats.
    mesh: optional participant mesh; per-participant arrays are split
      over it, the keys replicated (one padded array only).
  """
  keys = jax.random.split(key, seeds)
  if isinstance(participants, Buckets):
    if mesh is not None:
      raise ValueError("bucketed participants cannot be sharded over a "
                       "mesh; use partition.partition (one padded array) "
                       "with a mesh, or leave out the mesh.")
    groups = participants.groups
    return (keys,
            tuple(jnp.asarray(g.x, jnp.float32) for g in groups),
            tuple(jnp.asarray(g.y, jnp.int32) for g in groups),
            tuple(jnp.asarray(g.mask, jnp.float32) for g in groups),
            jnp.asarray(plan.sigma, jnp.float32),
            jnp.asarray(plan.n, jnp.float64),
            jnp.asarray(plan.p, jnp.float64),
            jnp.asarray(plan.theta, jnp.float64),
            tuple(jnp.asarray(i, jnp.int32) for i in participants.index))
  per_participant = (jnp.asarray(participants.x, jnp.float32),
                     jnp.asarray(participants.y, jnp.int32),
                     jnp.asarray(participants.mask, jnp.float32),
                     jnp.asarray(plan.sigma, jnp.float32),
                     jnp.asarray(plan.n, jnp.float64),
                     jnp.asarray(plan.p, jnp.float64),
                     jnp.asarray(plan.theta, jnp.float64))
  return (sharding.place(keys, mesh, split=False),
          *(sharding.place(a, mesh) for a in per_participant))


def check_chunk(participant_chunk: int | None,
                name: str = "participant_chunk") -> int | None:
  """``participant_chunk`` checked (None, or a positive integer); the
  message calls it ``name`` (e.g. ``"--participant_chunk"``)."""
  if participant_chunk is None:
    return None
  return validation.check_positive_int(participant_chunk, name)


def memory_estimate(num_participants: int, n_max: int, d: int, *,
                    config: Config | Static, num_classes: int,
                    seeds: int = 1, chunk: int | None = None) -> int:
  """An upper estimate of :func:`train`'s peak bytes, before any work.

  The stacked inputs and outputs (held for all P participants) plus the
  scratch of the participants mapped at once (``chunk``, or all P) times
  the seeds (vmapped over keys). Per participant and seed in flight:
  DP-PCA holds a few d × d float64 matrices (XᵀX, its noise, the
  eigendecomposition), 4·d²·8 bytes are counted, plus 2·n·d·8 for its rows
  in float64; DPML fits in d dimensions instead, n·d·K·8 bytes for the K
  one-vs-rest fits, and 2·d²·8 for the solver. Checked against XLA's own
  accounting of the compiled program (``memory_analysis``) in
  ``tests/federated/memory_test.py`` (above it at small d). At d = 784,
  MNIST, 1,000 participants × 60 rows, 3 seeds, the process's resident
  memory reached 15.4 GB with 346 participants mapped at once (14.8 MB per
  participant and seed in flight, data and JAX included) against 20.4 MB
  counted here.
  """
  num_participants = validation.check_positive_int(num_participants,
                                                   "num_participants")
  n_max = validation.check_positive_int(n_max, "n_max")
  d = validation.check_positive_int(d, "d")
  seeds = validation.check_positive_int(seeds, "seeds")
  chunk = check_chunk(chunk)
  static = _static(config)
  fits = 1 if num_classes == 2 else num_classes
  reduces = static.description.reduces
  k = static.k if reduces else d
  inputs = num_participants * (n_max * d * 4 + n_max * 8 + 4 * 8)
  outputs = num_participants * seeds * (d * k * 4 + fits * (k + 4) * 8)
  if reduces:
    unit = 4 * d * d * 8 + 2 * n_max * d * 8 + n_max * k * fits * 8
  else:
    unit = n_max * d * fits * 8 + 2 * d * d * 8
  in_flight = min(chunk or num_participants, num_participants) * seeds
  return int(inputs + outputs + unit * in_flight)


def choose_chunk(num_participants: int, n_max: int, d: int, *,
                 config: Config | Static, num_classes: int, seeds: int,
                 budget: int, prefix: str = "") -> tuple[int | None, int]:
  """The largest participant chunk whose :func:`memory_estimate` fits.

  :func:`dpcore.memory.largest_chunk` over :func:`memory_estimate`.

  Args:
    num_participants, n_max, d: the participants held, their padded rows,
      the data dimension.
    config, num_classes, seeds: the run (what :func:`memory_estimate`
      needs).
    budget: the bytes the training may use.
    prefix: what the message puts before the settings' names (``"--"``
      for command-line flags).

  Returns:
    ``(chunk, estimate)``: ``chunk`` None when all participants fit at
    once; ``estimate`` the estimate at that chunk.

  Raises:
    dpcore.memory.MemoryBudgetError: even one participant at a time would
      not fit; one line naming the estimate, the budget and the fix.
  """
  budget = validation.check_positive_int(budget, "budget")
  total = validation.check_positive_int(num_participants, "num_participants")
  return memory.largest_chunk(
      total,
      lambda chunk: memory_estimate(total, n_max, d, config=config,
                                    num_classes=num_classes, seeds=seeds,
                                    chunk=chunk),
      budget=budget,
      what=f"the training's {total} participants ({n_max} rows each at "
           f"d={d})",
      fix=f"{prefix}memory_budget, or use fewer participants, "
          f"{prefix}seeds or rows")


def plan_chunk(configs, *, sizes, d: int, num_classes: int, seeds: int,
               budget: int | None, chunk: int | None = None,
               processes: int = 1,
               prefix: str = "") -> tuple[int | None, int | None]:
  """One participant chunk for runs of ``configs``, checked against memory.

  With ``chunk`` given, :func:`memory_estimate` at that chunk must fit
  ``budget`` for every config; otherwise the largest chunk that fits them
  all is chosen (:func:`choose_chunk`; None: all participants at once).
  Participants split over ``processes`` are estimated per process.

  Args:
    configs: the runs that will share the chunk (e.g. a table's baseline
      and its budgets).
    sizes: every participant's rows.
    d, num_classes, seeds: the data dimension, classes and repeats.
    budget: the bytes the training may use; None (unknown) keeps
      ``chunk`` as given, unchecked against memory.
    chunk: the participants mapped at once, or None to choose.
    processes: the processes the participants are split over.
    prefix: what the messages put before the settings' names (``"--"``
      for command-line flags).

  Returns:
    ``(chunk, estimate)``: the chunk, and the largest estimate among the
    configs at it (None without a budget).

  Raises:
    dpcore.memory.MemoryBudgetError: the given chunk, or even one
      participant at a time, does not fit; one line naming the estimate,
      the budget and the settings to change.
  """
  chunk = check_chunk(chunk, f"{prefix}participant_chunk")
  if budget is None:
    return chunk, None
  count = -(-len(sizes) // max(1, processes))
  n_max = int(max(sizes))
  kwargs = dict(num_classes=num_classes, seeds=seeds)
  if chunk is not None:
    worst = max(memory_estimate(count, n_max, d, config=c, chunk=chunk,
                                **kwargs) for c in configs)
    if worst > budget:
      raise memory.MemoryBudgetError(
          f"{prefix}participant_chunk={chunk} needs an estimated "
          f"{memory.size_text(worst)}, above the memory budget of "
          f"{memory.size_text(budget)}; give a smaller "
          f"{prefix}participant_chunk, leave it out to have one chosen, or "
          f"raise {prefix}memory_budget.")
    return chunk, worst
  chosen, estimate = None, 0
  for config in configs:
    c, e = choose_chunk(count, n_max, d, config=config, budget=budget,
                        prefix=prefix, **kwargs)
    if c is not None and (chosen is None or c < chosen):
      chosen = c
    estimate = max(estimate, e)
  return chosen, estimate


def summarise(plan: FedDPDRPlan, out: TrainOutput, accuracy, per_participant, *,
              config: Config) -> dict:
  """The results of one trained experiment, after the convergence check.

  Args:
    plan: :func:`make_plan`'s calibration.
    out: :func:`train`'s outputs (host arrays or device arrays).
    accuracy, per_participant: :func:`evaluate`'s outputs.
    config: the experiment.

  Returns:
    A JSON-ready dict: accuracy (mean over repeats), accuracy_std,
    accuracy_per_seed, accuracy_per_participant (local mechanisms only),
    privacy, epsilon_pca, epsilon_per_classifier, sigma_pca, grad_norm_max,
    iterations_max, seeds.

  Raises:
    ConvergenceError: a fit hit ``max_iter``; the models are not released.
  """
  out, acc, per = jax.device_get((out, accuracy, per_participant))
  acc = np.asarray(acc, np.float64)
  grad_max = float(np.max(out.grad_norm))
  if not np.all(out.converged):
    raise ConvergenceError(
        f"{int(np.size(out.converged) - np.sum(out.converged))} of "
        f"{np.size(out.converged)} fits stopped at max_iter="
        f"{config.max_iter} with ||grad J|| up to {grad_max:.3g} > tol="
        f"{config.tol}; the privacy guarantee assumes the exact minimiser. "
        f"Raise max_iter or check the data.")
  result = {
      "accuracy": float(np.mean(acc)),
      "accuracy_std": float(np.std(acc)),
      "accuracy_per_seed": acc.tolist(),
      "privacy": plan.privacy,
      "epsilon_pca": plan.epsilon_pca,
      "epsilon_per_classifier": plan.epsilon_fit,
      "sigma_pca": float(plan.sigma[0]),
      "grad_norm_max": grad_max,
      "iterations_max": int(np.max(out.iterations)),
      "seeds": int(acc.shape[0]),
  }
  if per is not None:
    result["accuracy_per_participant"] = np.asarray(per).tolist()
  return result


@dataclasses.dataclass(frozen=True, eq=False)
class TrainingJob:
  """One call of :func:`train`, as :func:`execute` is about to make it.

  ``job()`` makes the call. A harness that times or compiles the training
  itself (``execute(..., train_with=...)``) is handed the job and returns
  its outputs: ``job()``'s, or those of the same program on ``job.args``
  (e.g. a stored, precompiled copy of it).

  Attributes:
    args: the positional arguments of :func:`train` (placed arrays).
    program: the :class:`Static` of the compiled program (:func:`program`).
    num_classes: K.
    mesh: the participant mesh, or None.
    chunk: the participants mapped at once, or None for all.
  """
  args: tuple
  program: Static
  num_classes: int
  mesh: object = None
  chunk: int | None = None

  def __call__(self) -> TrainOutput:
    return train(*self.args, config=self.program,
                 num_classes=self.num_classes, mesh=self.mesh,
                 chunk=self.chunk)


class Outcome(NamedTuple):
  """What :func:`execute` returns.

  Attributes:
    plan: :func:`make_plan`'s calibration of every participant.
    output: :func:`train`'s outputs (copied to every process's host when
      the mesh spans several processes).
    summary: :func:`summarise`'s dict (results and the privacy record).
    chunk: the participants mapped at once (None: all at once).
  """
  plan: FedDPDRPlan
  output: TrainOutput
  summary: dict
  chunk: int | None


def _job(key, plan, participants, *, seeds, mesh, chunk) -> TrainingJob:
  """The :func:`train` call of ``plan`` (call under ``enable_x64``)."""
  if mesh is not None and distributed.spans_processes(mesh):
    args = distributed.train_arguments(key, participants, plan, seeds=seeds,
                                       mesh=mesh)
  else:
    args = train_arguments(key, participants, plan, seeds=seeds, mesh=mesh)
  return TrainingJob(args, program(plan.config), plan.num_classes, mesh,
                     chunk)


def release(key: jax.Array, plan: FedDPDRPlan,
            participants: Participants | Buckets, *, seeds: int = 1,
            mesh=None, chunk: int | None = None) -> TrainOutput:
  """The training release of a plan: every participant's noisy steps.

  ``seeds`` repeats (vmapped over ``split(key, seeds)``) of the plan's
  mechanism: each participant's DP-PCA and its objective-perturbation
  fits, and, for the federated mechanisms, the server's aggregation
  (:func:`train`, the one compiled program, on :func:`train_arguments`).
  :func:`execute` runs the same call inside the whole pipeline (checks,
  memory, evaluation, summary).

  Args:
    key: PRNG key; repeat s uses ``split(key, seeds)[s]``.
    plan: from :func:`make_plan`, for these participants' sizes.
    participants: padded data (labels as class indices), or buckets; with
      a mesh over several processes, this process's block
      (:func:`distributed.local_block`).
    seeds: repeats.
    mesh: optional participant mesh (:mod:`federated.sharding`,
      :func:`distributed.global_mesh`).
    chunk: participants mapped at once (None: all).

  Returns:
    :class:`TrainOutput` (global arrays over several processes).

  Raises:
    TypeError, ValueError: a plan not from :func:`make_plan`, bad seeds
      or chunk.

  Privacy: per participant, exactly the releases ``plan.record`` accounts
  (DP-PCA's Gaussian noise on XᵀX, and K objective-perturbation fits),
  under replace-one of a row of that participant; the server's steps and
  the average are post-processing. ``nonpriv`` plans draw zero noise and
  claim nothing.
  """
  validation.check_key(key)
  if not isinstance(plan, FedDPDRPlan):
    raise TypeError(f"plan must be a FedDPDRPlan (from make_plan), got "
                    f"{type(plan).__name__}.")
  seeds = validation.check_positive_int(seeds, "seeds")
  chunk = check_chunk(chunk)
  with jax.enable_x64(True):
    return _job(key, plan, participants, seeds=seeds, mesh=mesh,
                chunk=chunk)()


def execute(key: jax.Array, participants: Participants | Buckets, x_test,
            y_test, *, num_classes: int, config: Config, seeds: int = 1,
            mesh=None, participant_chunk: int | None = None,
            memory_budget: int | str | None = memory.AUTO, sizes=None,
            train_with=None) -> Outcome:
  """The pipeline: calibrates, trains ``seeds`` repeats, evaluates, sums up.

  The one orchestration of FedDPDR and its baselines: :func:`run`, the
  experiment harness (``launch.experiments.feddpdr.run_one``) and the
  multi-process harness (``launch.experiments.distributed``) all call it;
  they add timing and records.

  With a ``mesh`` over several processes (:mod:`federated.distributed`),
  every process calls this with the same arguments except
  ``participants``, its own block (:func:`distributed.local_block`), and
  ``sizes`` gives every participant's rows; the arrays become global ones
  (:func:`distributed.train_arguments`), and the outputs are copied to
  every process (:func:`distributed.gather`) before the evaluation.

  Args:
    key: PRNG key; repeat s uses ``split(key, seeds)[s]``.
    participants: padded data, labels as class indices in [0, K), or the
      same in buckets (:func:`federated.partition.bucket`; not with a
      mesh): the results are the same up to rounding.
    x_test, y_test: held-out rows (‖x‖ ≤ 1) and class indices.
    num_classes: K.
    config: the experiment.
    seeds: repeats, vmapped over keys (the partition is the caller's).
    mesh: optional participant mesh (:func:`sharding.participant_mesh`, or
      :func:`distributed.global_mesh` over several processes): the
      participant axis is split over its devices; results are the same.
    participant_chunk: map this many participants at a time (default: all
      at once, or what ``memory_budget`` allows). Peak memory then grows
      with the chunk, not with N; results are the same up to rounding.
    memory_budget: bytes the training may use: the chunk is checked
      against it, or chosen by it (:func:`plan_chunk`); "auto" (default):
      3/4 of the memory available now (:func:`memory.resolve_budget`);
      None: unchecked.
    sizes: every participant's rows; default ``participants.sizes``
      (required with a mesh over several processes).
    train_with: optional ``f(job) -> TrainOutput`` that makes the
      training call (:class:`TrainingJob`), e.g. to time it; default
      ``job()``.

  Returns:
    :class:`Outcome`.

  Raises:
    ValueError: bad settings or data; the memory budget cannot be met.
    ConvergenceError: a fit hit ``max_iter``.
  """
  validation.check_key(key)
  seeds = validation.check_positive_int(seeds, "seeds")
  chunk = check_chunk(participant_chunk)
  several = mesh is not None and distributed.spans_processes(mesh)
  if sizes is None:
    if several:
      raise ValueError(
          "sizes not given: over several processes each holds only its "
          "own participants; pass every participant's rows as sizes=.")
    sizes = participants.sizes
  first = (participants.groups[0] if isinstance(participants, Buckets)
           else participants)
  d = np.shape(first.x)[-1]
  plan = make_plan(sizes, d=d, num_classes=num_classes, config=config)
  memory_budget = memory.resolve_budget(memory_budget)
  if memory_budget is not None:
    processes = (len({dev.process_index for dev in mesh.devices.flat})
                 if several else 1)
    chunk, _ = plan_chunk([config], sizes=plan.n.astype(int), d=d,
                          num_classes=num_classes, seeds=seeds,
                          budget=memory_budget, chunk=chunk,
                          processes=processes)
  check_data(participants, x_test, y_test, num_classes=num_classes)
  with jax.enable_x64(True):
    job = _job(key, plan, participants, seeds=seeds, mesh=mesh, chunk=chunk)
    out = job() if train_with is None else train_with(job)
    if several:  # local mechanisms are scored on every participant's model
      out = distributed.gather(
          out, per_participant=not config.description.federated)
    acc, per = evaluate(out, x_test, y_test, config=config,
                        num_classes=num_classes, chunk=chunk)
    summary = summarise(plan, out, acc, per, config=config)
  return Outcome(plan, out, summary, chunk)


def run(key: jax.Array, participants: Participants | Buckets, x_test, y_test,
        *, num_classes: int, config: Config, seeds: int = 1, mesh=None,
        participant_chunk: int | None = None,
        memory_budget: int | str | None = memory.AUTO) -> dict:
  """:func:`execute`'s summary: checks, calibrates, trains, evaluates.

  The library's one-call entry point (arguments as :func:`execute`'s);
  timings and records are the harness's
  (``launch.experiments.feddpdr.run_one``).

  Returns:
    :func:`summarise`'s dict.

  Raises:
    ValueError: bad settings or data.
    ConvergenceError: a fit hit ``max_iter``.
  """
  return execute(key, participants, x_test, y_test, num_classes=num_classes,
                 config=config, seeds=seeds, mesh=mesh,
                 participant_chunk=participant_chunk,
                 memory_budget=memory_budget).summary
