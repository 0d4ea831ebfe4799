"""The mechanism's shape: :func:`make_plan`, its plan, and :func:`release`.

:func:`make_plan` validates the settings and calibrates a frozen
:class:`FedDPDRPlan`; ``plan.record(ledger)`` records one participant's
releases; :func:`release` is the training release of the plan
(:func:`federated.feddpdr.train` on its arguments).

Budget. ε is split ε₁ = ``pca_fraction``·ε, ε₂ = ε − ε₁ (the paper: ½).
By default the K one-vs-rest classifiers get ε₂/K each (total ε₂);
``budget_per_classifier=True`` gives each ε₂, as the paper's experiments
appear to, for a true total of K·ε₂. The accountant
(:class:`dpcore.accounting.PrivacyLedger`) composes the Gaussian DP-PCA
step with the K pure-DP fits for each participant; as neither σ nor the
per-fit ε depends on nᵢ, every participant gets the same guarantee, which
is what ``privacy`` reports (beside the paper's nominal ε, labelled).
``nonpriv`` claims nothing: its record is
``accounting.no_guarantee_record(accounting.NON_PRIVATE)``, and its plan
switches the noise off in the private program (σ = 0, θ = 0, p = ∞).

``aggregation="distributed_moments"`` (:mod:`.secure_moments`) replaces
DP-PCA's Gaussian entry by the secure sum's RDP curve, its share σ
calibrated for the same (ε₁, δ) under replace-one; the plan's ``pca`` is
then a :class:`~federated.feddpdr.secure_moments.SecureMomentsPlan`, its
``secure_sum`` the sum's parameters (noise-free ones for ``nonpriv``;
they reach the program traced, so every budget shares it), and
``secure_aggregation`` states both guarantees: against
the server given secure aggregation (``privacy``), and each
participant's own should it fail (``own_epsilon``: its share alone,
composed with its fits). The curve counts ``Config.min_survivors``
shares (P_min, default P), and a run whose simulated ``dropouts`` leave
fewer survivors is refused here, before any work (the protocol would
abort).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from dpcore import accounting, ddg, options, validation
from federated.feddpdr import secure_moments
from federated.feddpdr.arguments import TrainingJob
from federated.feddpdr.arrays import TrainOutput
from federated.feddpdr.settings import Config, check_chunk
from federated.partition import Buckets, Participants
from mechanisms.erm import objective_perturbation as op
from mechanisms.pca import dp_pca

__all__ = [
    "FedDPDRPlan", "NOMINAL_NOTE", "RELATION", "check_converged", "make_plan",
    "release",
]

NOMINAL_NOTE = ("the paper's figure: eps1 + eps2, one classifier's eps2 "
                "counted once")

RELATION = options.Relation.REPLACE_ONE
"""The relation every run is accounted under: one row of one participant
replaced (objective perturbation's; DP-PCA's σ may be calibrated for
add/remove, ``Config.relation``, but is recorded under this)."""


@dataclasses.dataclass(frozen=True)
class FedDPDRPlan:
  """Host-side calibration of one experiment (see :func:`make_plan`).

  Attributes:
    epsilon: the guarantee ε of every participant's releases at
      ``delta``, as the ledger composes them (``privacy``'s
      ``epsilon``); None for ``nonpriv``. The budget setting the noise was
      calibrated from is :attr:`target_epsilon`.
    delta: δ of the setting; None for ``nonpriv``.
    relation: :data:`RELATION` (replace one row of one participant).
    config: the experiment (its :func:`program` selects the compiled
      program :func:`release` runs).
    num_classes: K.
    sigma: (N,) DP-PCA noise σ (0 where there is no private PCA).
    sizes: (N,) true sizes, float.
    p: (N,) objective-perturbation p of each fit (∞ for ``nonpriv``:
      the noise b, of density ∝ exp(−(p/2)‖b‖), is then exactly 0).
    theta: (N,) θ of each fit.
    epsilon_gap: (N,) ε_g of each fit, the fit plans' ``epsilon_gap``,
      from which each fit sizes the noise it adds for the solver's gap
      (∞ for ``nonpriv``: no noise).
    epsilon_pca: ε₁ (None without private PCA).
    epsilon_fit: ε of each classifier (None when non-private).
    num_fits: classifiers per participant (K, or 1 for K = 2).
    privacy: the privacy record (fields ``accounting.PRIVACY_FIELDS``) of
      every participant's ledger (:meth:`record`), with the paper's
      nominal ε beside it; a no-guarantee record for ``nonpriv``.
    pca: the participants' DP-PCA plan (one σ for all), or None without
      private PCA; with ``aggregation="distributed_moments"`` the secure
      sum's :class:`~federated.feddpdr.secure_moments.SecureMomentsPlan`
      (``sigma`` is then each share's σ in the rows' units, s·γ).
    fits: the participants' objective-perturbation plans, one per
      distinct size (their records do not depend on n), or () when
      non-private.
    target_epsilon: the budget setting ε the noise was calibrated from
      (the paper's nominal figure ε₁ + ε₂, the record's
      ``epsilon_nominal``; with ``budget_per_classifier`` the guarantee is
      larger); None for ``nonpriv``.
    secure_sum: the secure sum's parameters
      (``aggregation="distributed_moments"``, noise-free for ``nonpriv``),
      else None.
    secure_aggregation: JSON-ready facts of the secure sum (grid, bits,
      wrap-around bound, the PCA release's central and own ε, and
      ``own_epsilon``/``own_delta``: each participant's whole guarantee
      if secure aggregation fails), else None.
  """
  epsilon: float | None
  delta: float | None
  relation: options.Relation
  config: Config
  num_classes: int
  sigma: np.ndarray
  sizes: np.ndarray
  p: np.ndarray
  theta: np.ndarray
  epsilon_gap: np.ndarray
  epsilon_pca: float | None
  epsilon_fit: float | None
  num_fits: int
  privacy: dict
  pca: dp_pca.PcaPlan | secure_moments.SecureMomentsPlan | None = None
  fits: tuple = ()
  target_epsilon: float | None = None
  secure_sum: ddg.DDGParams | None = None
  secure_aggregation: dict | None = None

  def record(self, ledger: accounting.PrivacyLedger) -> None:
    """Records one participant's releases: DP-PCA, then its K fits.

    Every participant's ledger holds the same entries (neither σ nor the
    per-fit ε depends on nᵢ), so one ledger stands for each of them.
    DP-PCA is recorded under replace-one (the relation objective
    perturbation is proven under), whatever σ was calibrated for.

    Raises:
      ValueError: a ``nonpriv`` plan (no guarantee).
    """
    _record(ledger, self.pca, self.fits, relation=self.relation)


def _record(ledger: accounting.PrivacyLedger,
            pca: dp_pca.PcaPlan | secure_moments.SecureMomentsPlan | None,
            fits: tuple, *, relation: options.Relation) -> None:
  """:meth:`FedDPDRPlan.record` of a plan's DP-PCA and fit plans."""
  if not fits:
    raise ValueError(
        "this plan is non-private (nonpriv: no noise): it has no DP "
        "guarantee to record; report "
        "accounting.no_guarantee_record(accounting.NON_PRIVATE) instead.")
  if pca is not None:
    pca.record(ledger, relation=relation)
  fits[0].record(ledger)


def _secure_aggregation(secure: secure_moments.SecureMomentsPlan,
                        fits: tuple, *, delta: float) -> dict:
  """The secure sum's record: its facts, and each participant's whole
  guarantee should secure aggregation fail (its own share, its fits)."""
  ledger = accounting.PrivacyLedger()
  secure.record(ledger, relation=RELATION, own=True)
  fits[0].record(ledger)
  own = ledger.guarantee(delta)
  return {**secure.settings(), "own_epsilon": own.epsilon,
          "own_delta": own.delta}


def _privacy(pca: dp_pca.PcaPlan | None, fits: tuple, *, delta: float,
             target_epsilon: float) -> dict:
  """The privacy record (fields ``accounting.PRIVACY_FIELDS``) of every
  participant's ledger (:func:`_record`), with the paper's nominal ε
  beside it."""
  ledger = accounting.PrivacyLedger()
  _record(ledger, pca, fits, relation=RELATION)
  return ledger.report(delta, nominal_epsilon=target_epsilon,
                       nominal_note=NOMINAL_NOTE)

def _checked_sizes(sizes) -> np.ndarray:
  """Every participant's rows: whole, positive counts, at least one."""
  sizes = np.asarray(sizes)
  if sizes.size and not np.issubdtype(sizes.dtype, np.integer):
    raise ValueError(f"sizes must be whole row counts, got {sizes!r}.")
  if sizes.ndim != 1 or sizes.size == 0:
    raise ValueError(f"sizes must be a non-empty list, got {sizes!r}.")
  if np.any(sizes < 1):
    raise ValueError(
        f"participant {int(np.argmin(sizes))} has no rows (sizes "
        f"{sizes.tolist()}); every participant needs at least one row.")
  # The program indexes the padded slots (participants × longest) as int32.
  validation.check_count_product(
      {"participants": sizes.size,
       "rows of the largest participant": int(sizes.max())},
      "participants × rows", fix="use fewer or smaller participants")
  return sizes


def _survivors(config: Config, count: int) -> int:
  """P_min of a secure sum, refused (one line) where it exceeds the P
  participants or the simulated dropouts leave fewer survivors."""
  survivors = secure_moments.check_min_survivors(config.min_survivors,
                                                 count)
  if count - config.dropouts < survivors:
    raise ValueError(
        f"dropouts={config.dropouts} leaves {count - config.dropouts} of "
        f"the {count} participants' messages, fewer than min_survivors="
        f"{survivors}: the secure sum would abort; use fewer dropouts or a "
        f"smaller min_survivors.")
  return survivors


def _fit_plans(sizes, config: Config, *, epsilon: float, num_classes: int,
               dim: int) -> tuple:
  """One objective-perturbation plan per size in ``sizes`` (ε of one
  release, K fits on rows of dimension ``dim``). Settings whose fits
  could never be certified (float64's rounding at the noise cap above
  tol) are refused here, before any work."""
  fits = tuple(op.make_plan(epsilon=epsilon, num_examples=int(n_i),
                            lam=config.lam, loss=config.loss,
                            h=config.huber_h, num_classes=num_classes,
                            tol=config.tol)
               for n_i in sizes)
  for fit in fits:
    op.check_rounding(fit, rows=int(np.max(sizes)), dim=dim)
  return fits


def make_plan(sizes, *, dim: int, num_classes: int,
              config: Config) -> FedDPDRPlan:
  """Validates the settings and calibrates every participant's noise.

  Args:
    sizes: every participant's rows (public).
    dim: d, the data dimension.
    num_classes: K.
    config: the experiment; its budget (ε, δ, calibration, split, the
      relation DP-PCA's σ is calibrated for) is calibrated here.

  Returns:
    A :class:`FedDPDRPlan`; :func:`release` trains under it and
    ``plan.record(ledger)`` records one participant's releases.

  Raises:
    TypeError, ValueError: bad settings or sizes (one line, named).

  Privacy: per participant, (ε₁, δ) DP-PCA (Gaussian on XᵀX, σ for the
  configured relation; with ``aggregation="distributed_moments"`` the
  secure sum's discrete Gaussian shares, (ε₁, δ) against the server at
  sensitivity 2Δ) and K ε₂/K-DP objective-perturbation fits (ε₂
  each with ``budget_per_classifier``), composed by the ledger under
  replace-one (module docstring).
  """
  if not isinstance(config, Config):
    raise TypeError(f"config must be a feddpdr.Config, got {config!r}.")
  config.check(dim=dim)
  sizes = _checked_sizes(sizes)
  num_classes = validation.check_positive_int(num_classes, "num_classes")
  if num_classes < 2:
    raise ValueError("num_classes must be >= 2 for a classifier.")
  count = len(sizes)
  num_fits = 1 if num_classes == 2 else num_classes
  has_pca = config.description.reduces
  secure = config.secure
  summed = int(np.sum(sizes))  # the rows one secure sum adds
  survivors = _survivors(config, count) if secure else None
  if not config.private:
    # σ = 0, θ = 0, p = ∞ and ε_g = ∞ turn the noise off inside the
    # private
    # program (federated.feddpdr.stages); the record claims nothing.
    params = (secure_moments.noise_free_params(dim=dim, count=count,
                                               rows=summed, bits=config.bits)
              if secure else None)
    return FedDPDRPlan(
        epsilon=None, delta=None, relation=RELATION, config=config,
        num_classes=num_classes, sigma=np.zeros(count),
        sizes=sizes.astype(np.float64), p=np.full(count, np.inf),
        theta=np.zeros(count), epsilon_gap=np.full(count, np.inf),
        epsilon_pca=None, epsilon_fit=None,
        num_fits=num_fits,
        privacy=accounting.no_guarantee_record(accounting.NON_PRIVATE),
        secure_sum=params,
        secure_aggregation=(None if params is None else
                            secure_moments.params_record(
                                params, rows=summed, count=count,
                                min_survivors=survivors)))
  eps_pca = config.epsilon * config.pca_fraction if has_pca else None
  eps_train = config.epsilon - eps_pca if has_pca else config.epsilon
  eps_fit = (eps_train if config.budget_per_classifier
             else eps_train / num_fits)
  sigma, pca_plan = 0.0, None
  if secure:
    pca_plan = secure_moments.make_plan(
        epsilon=eps_pca, delta=config.delta, dim=dim, count=count,
        rows=summed, bits=config.bits, min_survivors=survivors)
    sigma = float(pca_plan.params.sigma_share) * pca_plan.params.gamma
  elif has_pca:
    pca_plan = dp_pca.make_plan(
        epsilon=eps_pca, delta=config.delta, k=config.k, dim=dim,
        relation=config.relation, calibration=config.calibration)
    sigma = pca_plan.sigma
  # p and θ depend on nᵢ only: computed once per distinct size.
  distinct, which = np.unique(sizes, return_inverse=True)
  # A plan's ε is its release's K fits together (ε/K each): ε₂, or K·ε₂
  # with the paper's budget per classifier.
  eps_release = eps_fit * num_fits if config.budget_per_classifier else (
      eps_train)
  fits = _fit_plans(distinct, config, epsilon=eps_release,
                    num_classes=num_classes, dim=config.k if has_pca else dim)
  privacy = _privacy(pca_plan, fits, delta=config.delta,
                     target_epsilon=config.epsilon)
  # The plan's ε is the guarantee its record composes to, not the setting.
  return FedDPDRPlan(
      epsilon=privacy["epsilon"], delta=config.delta, relation=RELATION,
      config=config, num_classes=num_classes, sigma=np.full(count, sigma),
      sizes=sizes.astype(np.float64),
      p=np.asarray([q.p for q in fits])[which],
      theta=np.asarray([q.theta for q in fits])[which],
      epsilon_gap=np.asarray([q.epsilon_gap for q in fits])[which],
      epsilon_pca=eps_pca,
      epsilon_fit=eps_fit, num_fits=num_fits, privacy=privacy, pca=pca_plan,
      fits=fits, target_epsilon=config.epsilon,
      secure_sum=pca_plan.params if secure else None,
      secure_aggregation=(_secure_aggregation(pca_plan, fits,
                                              delta=config.delta)
                          if secure else None))


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
      (:func:`federated.distributed.local_block`).
    seeds: repeats.
    mesh: optional participant mesh (:mod:`federated.sharding`,
      :func:`federated.distributed.global_mesh`).
    chunk: participants mapped at once (None: all).

  Returns:
    :class:`TrainOutput` (global arrays over several processes).

  Raises:
    TypeError, ValueError: a plan not from :func:`make_plan`, bad seeds
      or chunk.
    ConvergenceError: a fit stopped at ``max_iter`` (checked where this
      process holds every output; over several processes the caller
      checks with :func:`check_converged`).

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
    out = TrainingJob.of(key, plan, participants, seeds=seeds, mesh=mesh,
                         chunk=chunk)()
  if getattr(out.converged, "is_fully_addressable", True):
    check_converged(out, plan.config)  # else each process's caller checks
  return out


def check_converged(out: TrainOutput, config: Config) -> None:
  """Raises :class:`ConvergenceError` unless every fit of ``out``
  converged (‖∇J‖ ≤ ``config.tol``): the fits' gap noise is sized for
  that tolerance, so unconverged models are not released."""
  converged, grad_norm = jax.device_get((out.converged, out.grad_norm))
  if not np.all(converged):
    raise op.ConvergenceError(
        f"{int(np.size(converged) - np.sum(converged))} of "
        f"{np.size(converged)} fits did not converge within max_iter="
        f"{config.max_iter} (||grad J|| up to {float(np.max(grad_norm)):.3g}"
        f", tol={config.tol}, or the float64 rounding bound of it above "
        f"tol); the privacy guarantee needs converged fits. Raise max_iter "
        f"or tol, or check the data.")
