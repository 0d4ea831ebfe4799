"""Training G(M)LVQ: DP-SGD (private), plain SGD and L-BFGS (non-private).

The private model is a mechanism of the one shape (:mod:`dpcore.shape`):
the host-side :func:`make_plan` turns (ε, δ, q, E) into a frozen
:class:`DPLVQPlan` — the private initialisation's plan
(:mod:`mechanisms.lvq.init`) and the :class:`dpcore.trainer.DPSGDPlan` of
the steps — whose :meth:`DPLVQPlan.record` writes both into a ledger, and
:func:`release` trains under it: σ, C, B, q and T come from the plan, the
model's settings from a :class:`TrainConfig`. The non-private references,
plain SGD over the same Poisson batches (:func:`train_sgd`, on a
:func:`dpcore.trainer.nonprivate_plan`) and L-BFGS (:func:`train_bfgs`),
are :func:`train`. All return a :class:`dpcore.trainer.TrainResult` and
run a ``lax.scan``, so they jit and vmap over folds and repeats.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import optax

from dpcore import (
    accounting,
    dpsgd,
    options,
    trainer,
    validation,
)
from mechanisms.lvq import clip as lvq_clip
from mechanisms.lvq import init as lvq_init
from mechanisms.lvq import model as lvq

__all__ = [
    "DPLVQPlan", "RELATION", "SAMPLER", "TrainConfig", "check_plan_settings",
    "init_params", "make_plan", "mean_cost", "release", "train",
    "train_bfgs", "train_sgd",
]

RELATION = options.Relation.ADD_REMOVE
"""DP-LVQ's relation: the private init's and DP-SGD's (add/remove a row)."""
# One coin per row, as the reproduction was run and recorded: the private
# and the non-private trainers then see the same batches for one key.
SAMPLER = "bernoulli"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Static settings of one training run: the model and its optimiser.

  The privacy facts of a DP-SGD run (C, σ, the initialisation's ε₁ or
  σ_init) are not here: they are the :class:`DPLVQPlan`'s, which
  :func:`release` takes.

  Attributes:
    model: ``"glvq"`` or ``"gmlvq"``.
    trainer: ``"dpsgd"`` (:func:`release`), ``"sgd"`` (non-private, same
      Poisson batches) or ``"bfgs"`` (non-private full-batch L-BFGS).
    num_classes: k.
    prototypes_per_class: prototypes per class.
    rank: rows of Ω (None: full, r = d).
    normalise: project Ω to trace(ΩᵀΩ) = 1 after every update (sklvq); the
      paper does not.
    phi_kind: ``"identity"`` (paper) or ``"sigmoid"``.
    epochs: E; the number of steps is T = round(E / q) (for DP-SGD, the
      plan's: :func:`release` checks that they agree).
    sampling_rate: q (for DP-SGD, the plan's).
    learning_rate: SGD step size on the averaged gradient.
    max_batch: padded Poisson batch size (for DP-SGD, the plan's
      ``dpsgd.max_batch``).
    bfgs_iterations: L-BFGS iterations.
    ghost_clipping: closed-form per-example norms (True) or vmap(grad).
  """
  model: str = "glvq"
  trainer: str = "dpsgd"
  num_classes: int = 10
  prototypes_per_class: int = 1
  rank: int | None = None
  normalise: bool = False
  phi_kind: str = "identity"
  epochs: int = 50
  sampling_rate: float = 0.01
  learning_rate: float = 0.05
  max_batch: int = 256
  bfgs_iterations: int = 100
  ghost_clipping: bool = True

  def steps(self) -> int:
    """T, by :func:`dpcore.dpsgd.num_steps` (the accountant's rule)."""
    return dpsgd.num_steps(epochs=self.epochs,
                           sampling_rate=self.sampling_rate)

  def sgd_plan(self, num_examples: int) -> trainer.DPSGDPlan:
    """The non-private plan of plain SGD: the same batches, no clip/noise."""
    return trainer.nonprivate_plan(
        num_examples, sampling_rate=self.sampling_rate, epochs=self.epochs,
        max_batch=self.max_batch, sampler=SAMPLER)

  def validate(self) -> TrainConfig:
    """Checks every field (host side, before tracing).

    Returns:
      ``self``.

    Raises:
      ValueError: one line naming the field and the fix.
    """
    for field, kind in (("model", options.LVQModel),
                        ("trainer", options.LVQTrainer),
                        ("phi_kind", options.Phi)):
      options.parse(kind, getattr(self, field), field)
    validation.check_positive_int(self.num_classes, "num_classes")
    if self.num_classes < 2:
      raise ValueError("num_classes must be ≥ 2 (LVQ needs a wrong class).")
    validation.check_positive_int(self.epochs, "epochs")
    validation.check_in_range(self.sampling_rate, "sampling_rate", 0.0, 1.0,
                              high_inclusive=True)
    validation.check_positive(self.learning_rate, "learning_rate")
    validation.check_positive_int(self.max_batch, "max_batch")
    if self.rank is not None:
      validation.check_positive_int(self.rank, "rank")
    validation.check_positive_int(self.prototypes_per_class,
                                  "prototypes_per_class")
    validation.check_positive_int(self.bfgs_iterations, "bfgs_iterations")
    return self


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["epsilon", "delta", "init", "dpsgd", "target_epsilon",
                 "target_epsilon_sgd", "sgd_delta"],
    meta_fields=["relation", "sigma_rule"])
@dataclasses.dataclass(frozen=True)
class DPLVQPlan:
  """The public facts of one private G(M)LVQ model (see :func:`make_plan`).

  Attributes:
    epsilon: the guarantee: the ε that the ledger composes for the init,
      the steps and the padding at ``delta`` (:meth:`record`).
    delta: δ.
    relation: add/remove one row (:data:`RELATION`), the relation of the
      initialisation and of DP-SGD's Poisson subsampling.
    init: the initialisation's plan, a :class:`lvq_init.LaplacePlan`
      (ε₁-DP) or a :class:`lvq_init.GaussianPlan` ((ε₁, δ/2)-DP).
    dpsgd: the :class:`dpcore.trainer.DPSGDPlan` of the steps (N, q, T, C,
      σ, B, the one-coin-per-row sampler; its ``delta`` is ``sgd_delta``,
      its ``epsilon`` ε₂ when σ was calibrated by the accountant).
    target_epsilon: the total ε₁ + ε₂ the noise was calibrated for (with
      the paper's σ rule, the guarantee may exceed it).
    target_epsilon_sgd: ε₂ = ε − ε₁, the DP-SGD part's target.
    sgd_delta: δ of the DP-SGD part (δ with the Laplace init, δ/2 with the
      Gaussian one).
    sigma_rule: ``"accountant"`` or ``"paper"``.

  A pytree whose leaves are its numbers (the ε's and δ's, the init's and
  the steps' noise, C); the counts, the relation and the σ rule are
  static. Under ``jax.jit`` a plan passed as an argument gives one
  compiled program for every ε of the same run shape.
  """
  epsilon: float
  delta: float
  relation: options.Relation
  init: lvq_init.LaplacePlan | lvq_init.GaussianPlan
  dpsgd: trainer.DPSGDPlan
  target_epsilon: float
  target_epsilon_sgd: float
  sgd_delta: float
  sigma_rule: str

  @property
  def dim(self) -> int:
    """d, the features."""
    return self.init.dim

  @property
  def init_mechanism(self) -> options.InitMechanism:
    """``"laplace"`` or ``"gaussian"``."""
    return (options.InitMechanism.GAUSSIAN
            if isinstance(self.init, lvq_init.GaussianPlan)
            else options.InitMechanism.LAPLACE)

  @property
  def epsilon_init(self) -> float:
    """ε₁ of the initialisation."""
    return self.init.epsilon

  @property
  def init_noise_multiplier(self) -> float:
    """σ_init of the Gaussian initialisation (0 for Laplace)."""
    return getattr(self.init, "noise_multiplier", 0.0)

  @property
  def noise_multiplier(self) -> float:
    """σ of the DP-SGD steps."""
    return self.dpsgd.noise_multiplier

  @property
  def steps(self) -> int:
    """T, the DP-SGD steps."""
    return self.dpsgd.steps

  def record(self, ledger: accounting.PrivacyLedger) -> None:
    """Records the model's releases: the initialisation, then DP-SGD.

    The DP-SGD part is :meth:`dpcore.trainer.DPSGDPlan.record` (label
    ``"dpsgd"``): the T subsampled Gaussian steps and, always, the padding
    to B rows' truncation event.
    """
    self.init.record(ledger)
    self.dpsgd.record(ledger, label="dpsgd")

  def report(self) -> dict:
    """The model's privacy record (``accounting.PRIVACY_FIELDS``) at δ.

    The guarantee is the ledger's (``epsilon``); the target ε₁ + ε₂ goes
    in ``epsilon_nominal`` beside it (with the paper's σ rule that target
    is not what the noise gives; the guarantee is).
    """
    if self.sigma_rule == options.SigmaRule.PAPER:
      note = ("target ε₁ + ε₂ of the paper's rule σ = 2q√(T log(1/δ))/ε₂; "
              "the guarantee is the ledger's ε")
    else:
      note = "target ε₁ + ε₂ the DP-SGD noise was calibrated to (RDP)"
    ledger = accounting.PrivacyLedger()
    self.record(ledger)
    return ledger.report(self.delta, nominal_epsilon=self.target_epsilon,
                         nominal_note=note)




def check_plan_settings(*, epsilon: float | None, delta: float,
                        sampling_rate: float, epochs: int, clip_norm: float,
                        init_fraction: float = 0.2,
                        sigma_rule: str = "accountant",
                        init_mechanism: str = "laplace") -> None:
  """Checks :func:`make_plan`'s settings that need no data (host side).

  :func:`make_plan` runs it; a caller may run it first, before any data
  is read. Messages name the arguments as :func:`make_plan` does.

  Args:
    epsilon: as :func:`make_plan`, or None to leave it unchecked (not
      known yet).
    delta, sampling_rate, epochs, clip_norm, init_fraction: as
      :func:`make_plan`; so are ``sigma_rule`` and ``init_mechanism``.

  Raises:
    ValueError: one line naming the argument and the fix.
  """
  if epsilon is not None:
    validation.check_epsilon(epsilon, "epsilon")
  validation.check_delta(delta, "delta")
  validation.check_in_range(sampling_rate, "sampling_rate", 0.0, 1.0,
                            high_inclusive=True)
  validation.check_positive_int(epochs, "epochs")
  validation.check_in_range(init_fraction, "init_fraction", 0.0, 1.0)
  options.parse(options.SigmaRule, sigma_rule, "sigma_rule")
  options.parse(options.InitMechanism, init_mechanism, "init_mechanism")
  validation.check_positive(clip_norm, "clip_norm")


def make_plan(num_examples: int, *, epsilon: float, delta: float,
              sampling_rate: float, epochs: int, clip_norm: float, dim: int,
              max_batch: int | None = None, init_fraction: float = 0.2,
              sigma_rule: str = "accountant",
              init_mechanism: str = "laplace") -> DPLVQPlan:
  """Splits ε into ε₁ (init) + ε₂ (DP-SGD) and picks σ for N rows.

  Args:
    num_examples: N, the training rows of one model.
    epsilon: the total target ε the noise is calibrated for (the plan's
      ``target_epsilon``; its ``epsilon`` is the guarantee the ledger
      composes, at or below it with the accountant's σ).
    delta: δ.
    sampling_rate: q.
    epochs: E (T = round(E/q) steps).
    clip_norm: C, the per-example clip of the DP-SGD steps.
    dim: d (sensitivity of the class sums).
    max_batch: B, the padded Poisson batch (default
      :func:`dpcore.dpsgd.max_batch_size` at P(truncation) ≤ 1e-9). The
      truncation probability of the B chosen is always recorded.
    init_fraction: ε₁/ε (paper: 0.2).
    sigma_rule: ``"accountant"``: the smallest σ whose DP-SGD is
      (ε₂, δ)-DP by the RDP accountant; ``"paper"``: σ = 2q√(T log(1/δ))/ε₂
      (the ledger then reports the ε that σ actually gives).
    init_mechanism: ``"laplace"`` (paper: ε₁-DP, δ spent only by DP-SGD)
      or ``"gaussian"`` (each part gets δ/2: the init is (ε₁, δ/2)-DP by
      the analytic Gaussian calibration, DP-SGD is calibrated to
      (ε₂, δ/2)), so basic composition alone gives (ε, δ).

  Returns:
    A :class:`DPLVQPlan`; ``plan.record(ledger)`` writes the init, the
    steps and the padding, whose composition at δ is ``plan.epsilon``;
    :func:`release` trains under it.

  Raises:
    ValueError: an argument out of range, named with its fix.

  Privacy: add/remove one row of the N training rows (rows in
  [−1, 1]^d, enforced by the init's clip). The init is ε₁-DP (Laplace on
  counts, sensitivity 1, and sums, sensitivity d) or (ε₁, δ/2)-DP
  (Gaussian); the steps are T Poisson-subsampled Gaussians (sensitivity C,
  noise σC), padded to B with the truncation probability recorded; the
  ledger composes them to the (ε, δ) it reports.
  """
  check_plan_settings(
      epsilon=epsilon, delta=delta, sampling_rate=sampling_rate,
      epochs=epochs, clip_norm=clip_norm, init_fraction=init_fraction,
      sigma_rule=sigma_rule, init_mechanism=init_mechanism)
  epsilon, delta = float(epsilon), float(delta)
  sampling_rate, init_fraction = float(sampling_rate), float(init_fraction)
  epochs, clip_norm = int(epochs), float(clip_norm)
  num_examples = validation.check_count(num_examples, "num_examples")
  dim = validation.check_positive_int(dim, "dim")
  # T fits int32 (dpsgd.num_steps checks it, naming epochs and q).
  steps = dpsgd.num_steps(epochs=epochs, sampling_rate=sampling_rate)
  eps_init = init_fraction * epsilon
  eps_sgd = epsilon - eps_init
  laplace = init_mechanism == options.InitMechanism.LAPLACE
  delta_sgd = delta if laplace else delta / 2.0
  if laplace:
    init = lvq_init.make_laplace_plan(epsilon=eps_init, dim=dim)
  else:
    init = lvq_init.make_gaussian_plan(epsilon=eps_init, delta=delta / 2.0,
                                       dim=dim)
  common = dict(sampling_rate=sampling_rate, epochs=epochs,
                clip_norm=clip_norm, delta=delta_sgd, max_batch=max_batch,
                sampler=SAMPLER)
  if sigma_rule == options.SigmaRule.ACCOUNTANT:  # σ for (ε₂, δ₂)
    run = trainer.make_plan(num_examples, epsilon=eps_sgd, **common)
    guarantee = accounting.composed_epsilon((init, run), delta)
  else:  # the paper's σ, given: its guarantee is the ledger's
    sigma = dpsgd.paper_noise_multiplier(
        epsilon=eps_sgd, delta=delta_sgd, sampling_rate=sampling_rate,
        steps=steps)
    try:
      run = trainer.make_plan(num_examples, noise_multiplier=sigma,
                              **common)
      guarantee = accounting.composed_epsilon((init, run), delta)
    except ValueError as error:
      # Only the ledger's refusal (accounting's "holds only at δ") is the
      # rule's doing; any other refusal (e.g. max_batch) stands as it is.
      if "holds only at" not in str(error):
        raise
      raise _paper_rule_error(error, sigma=sigma, eps_sgd=eps_sgd,
                              sampling_rate=sampling_rate, steps=steps,
                              delta=delta) from None
  assert run.steps == steps
  return DPLVQPlan(guarantee, delta, RELATION, init, run, epsilon, eps_sgd,
                   delta_sgd, options.SigmaRule(sigma_rule))


def _paper_rule_error(error, *, sigma, eps_sgd, sampling_rate, steps,
                      delta) -> ValueError:
  """At a large ε the paper's σ is so small that the run holds at no δ
  near the target; the ledger's message (about the padding) alone would
  hide why."""
  return ValueError(
      f"sigma_rule='paper' gives σ = {sigma:.3g} for ε₂ = {eps_sgd:g} (q = "
      f"{sampling_rate:g}, T = {steps}), too little noise for the run to "
      f"hold at δ = {delta:g} ({error}); use sigma_rule='accountant', "
      f"which calibrates σ for ε₂.")


def init_params(key, x, y, config: TrainConfig, init=None):
  """Prototypes (exact, or private under ``init``) and a data-free Ω.

  Args:
    key: PRNG key of the prototypes.
    x, y: the training rows and their class indices.
    config: the model's settings.
    init: None for the exact class means (non-private), or an
      initialisation plan (:class:`lvq_init.LaplacePlan` or
      :class:`lvq_init.GaussianPlan`) whose release gives the prototypes.
  """
  kwargs = dict(num_classes=config.num_classes,
                prototypes_per_class=config.prototypes_per_class)
  if isinstance(init, lvq_init.GaussianPlan):
    protos = lvq_init.release_gaussian(key, init, x, y, **kwargs)
  elif init is not None:
    protos = lvq_init.release_laplace(key, init, x, y, **kwargs)
  else:
    protos = lvq_init.class_mean_prototypes(key, x, y, **kwargs)
  params = {"prototypes": protos}
  if config.model == "gmlvq":
    params["omega"] = lvq.init_omega(x.shape[1], rank=config.rank,
                                     normalise=config.normalise)
  return params


def _post(params, config):
  return lvq.normalise_omega(params) if config.normalise else params


def _mean_cost(params, x, y, labels, config):
  return lvq.cost(params, x, y, labels, phi_kind=config.phi_kind) / (
      x.shape[0])


def mean_cost(params: dict, x, y, config: TrainConfig) -> jax.Array:
  """Mean Φ(μ) of ``params`` on (x, y): a trained model's final cost.

  Args:
    params: a trained model (``TrainResult.params``).
    x: (N, d) rows, e.g. the training rows.
    y: (N,) class indices.
    config: the :class:`TrainConfig` it was trained with (k, prototypes
      per class, Φ).

  Returns:
    A scalar. It reads ``x`` and ``y``: on training rows it is not a
    private release (a diagnostic for the non-private side).
  """
  labels = lvq_init.prototype_labels(config.num_classes,
                                     config.prototypes_per_class)
  return _mean_cost(params, x, y, labels, config)


def train_sgd(key: jax.Array, x, y,
              config: TrainConfig) -> trainer.TrainResult:
  """Plain SGD over Poisson batches from the exact init (non-private).

  :func:`dpcore.trainer.train` on ``config.sgd_plan(N)``, a
  :func:`dpcore.trainer.nonprivate_plan`: steps along Σ_batch ∇ℓᵢ / (qN),
  the batches :func:`release` draws from the same key.

  Args:
    key: PRNG key.
    x: (N, d) training data.
    y: (N,) class indices.
    config: a validated :class:`TrainConfig`.

  Returns:
    A :class:`dpcore.trainer.TrainResult` (:func:`mean_cost` gives the
    final cost).

  Privacy: none (the non-private reference).
  """
  labels = lvq_init.prototype_labels(config.num_classes,
                                     config.prototypes_per_class)
  init_key, sample_key, noise_key = jax.random.split(key, 3)
  params = init_params(init_key, x, y, config)
  return _run(trainer.TrainKeys(sample_key, noise_key),
              config.sgd_plan(x.shape[0]), params, x, y, labels, config)


def _check_plan_and_config(plan, config):
  if not isinstance(plan, DPLVQPlan):
    raise TypeError(f"plan must be a DPLVQPlan (from make_plan), got "
                    f"{plan!r}.")
  if not isinstance(config, TrainConfig):
    raise TypeError(f"config must be a TrainConfig, got {config!r}.")
  config.validate()
  run = plan.dpsgd
  for field, mine, plans in (
      ("trainer", config.trainer, "dpsgd"),
      ("sampling_rate", config.sampling_rate, run.sampling_rate),
      ("steps()", config.steps(), run.steps),
      ("max_batch", config.max_batch, run.max_batch)):
    if mine != plans:
      raise ValueError(
          f"config.{field}={mine!r} differs from the plan's {plans!r}; "
          f"build the config with the plan's q, epochs and max_batch "
          f"(plan.dpsgd) and trainer='dpsgd'.")


def release(key: jax.Array, plan: DPLVQPlan, x, y,
            config: TrainConfig) -> trainer.TrainResult:
  """A private G(M)LVQ model: private init, then DP-SGD (jit/vmap-able).

  The prototypes come from the plan's initialisation
  (:func:`lvq_init.release_laplace` or :func:`lvq_init.release_gaussian`),
  then :func:`dpcore.trainer.train` runs ``plan.dpsgd``: steps along
  (Σ_batch clip_C(∇ℓᵢ) + N(0, σ²C²I)) / (qN) (closed-form clipped sums
  when ``config.ghost_clipping``). σ, C, B, q and T are the plan's.

  Args:
    key: PRNG key (split into the init's, the batches' and the noise's).
    plan: from :func:`make_plan`, for N = ``x.shape[0]`` rows and d =
      ``x.shape[1]`` features.
    x: (N, d) training data in [−1, 1]^d.
    y: (N,) class indices.
    config: the model's settings (:class:`TrainConfig`, ``trainer`` =
      ``"dpsgd"``; its q, epochs and max_batch must be the plan's).

  Returns:
    A :class:`dpcore.trainer.TrainResult`: the model, released under the
    plan's guarantee.

  Raises:
    TypeError, ValueError: a plan or config of the wrong type, a config
      that disagrees with the plan, or bad inputs (as :func:`train`).

  Privacy: add/remove one training row; ε₁-DP init (Laplace; or the
  (ε₁, δ/2)-DP Gaussian init) followed by T steps of the Poisson-sampled
  Gaussian mechanism with noise multiplier σ and sensitivity C, padded to
  B rows; ``plan.record(ledger)`` records all three.
  """
  _check_plan_and_config(plan, config)
  lvq_init.check_init_inputs(key, x, y, config.num_classes)
  labels = lvq_init.prototype_labels(config.num_classes,
                                     config.prototypes_per_class)
  init_key, sample_key, noise_key = jax.random.split(key, 3)
  params = init_params(init_key, x, y, config, plan.init)
  return _run(trainer.TrainKeys(sample_key, noise_key), plan.dpsgd, params,
              x, y, labels, config)


def _run(keys, plan, params, x, y, labels, config, *, clipped_sum=None):
  """:func:`dpcore.trainer.train` with G(M)LVQ's loss and gradient sums
  (``clipped_sum`` replaces the private one: an audit's broken variant,
  :mod:`mechanisms.lvq.train_audit`)."""
  phi_kind = config.phi_kind

  def loss(p, example):
    xi, yi = example
    return lvq.example_loss(p, xi, yi, labels, phi_kind=phi_kind)

  batch_sum = None
  if not plan.private:
    def batch_sum(p, batch, mask, clip_norm):
      del clip_norm  # ∞: plain SGD clips nothing
      xb, yb = batch
      return jax.grad(lvq.cost)(p, xb, yb, labels, phi_kind=phi_kind,
                                weights=mask)
  elif config.ghost_clipping:
    def batch_sum(p, batch, mask, clip_norm):
      xb, yb = batch
      total, _ = lvq_clip.clipped_gradient_sum(
          p, xb, yb, labels, clip_norm=clip_norm, mask=mask,
          phi_kind=phi_kind)
      return total

  return trainer.train(
      keys, plan, loss, params, (x, y), optax.sgd(config.learning_rate),
      clipped_sum=batch_sum if clipped_sum is None else clipped_sum,
      post_update=lambda p: _post(p, config))


def train_bfgs(key: jax.Array, x, y,
               config: TrainConfig) -> trainer.TrainResult:
  """Non-private full-batch L-BFGS (optax.lbfgs, zoom line search).

  Starts from the exact class means and Ω = I; minimises the mean Φ(μ).

  Privacy: none (the paper's non-private reference).
  """
  labels = lvq_init.prototype_labels(config.num_classes,
                                     config.prototypes_per_class)
  params = init_params(key, x, y, config)

  def fun(p):
    return _mean_cost(_post(p, config), x, y, labels, config)

  opt = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(fun)

  def step(carry, _):
    params, state = carry
    value, grad = value_and_grad(params, state=state)
    updates, state = opt.update(grad, state, params, value=value, grad=grad,
                                value_fn=fun)
    return (optax.apply_updates(params, updates), state), None

  (params, _), _ = jax.lax.scan(step, (params, opt.init(params)), None,
                                length=config.bfgs_iterations)
  return trainer.TrainResult(_post(params, config),
                             jnp.zeros((), jnp.int32))


def train(key: jax.Array, x, y,
          config: TrainConfig) -> trainer.TrainResult:
  """The non-private trainers: dispatches on ``config.trainer`` (jit-able).

  ``"sgd"`` is :func:`train_sgd`, ``"bfgs"`` :func:`train_bfgs`; the
  private model (``"dpsgd"``) is :func:`release`, which takes its plan.
  Validates ``config`` (:meth:`TrainConfig.validate`) and the inputs as
  :func:`lvq_init.check_init_inputs` does (shapes always; finite data and
  labels in 0..k−1 where concrete). Host-side data checks that need the
  whole data set (every class present, the box [−1, 1]^d) are
  :func:`lvq_init.check_classes_present` and :func:`lvq_init.check_box`,
  run by ``launch.experiments.lvq_eval.evaluate``.

  Raises:
    TypeError, ValueError: a bad config or inputs; ``trainer="dpsgd"``
      (use :func:`release`).
  """
  if not isinstance(config, TrainConfig):
    raise TypeError(f"config must be a TrainConfig, got {config!r}.")
  config.validate()
  if config.trainer == "dpsgd":
    raise ValueError(
        "trainer='dpsgd' is the private release: call release(key, plan, "
        "x, y, config) with plan = make_plan(...).")
  lvq_init.check_init_inputs(key, x, y, config.num_classes)
  if config.trainer == "bfgs":
    return train_bfgs(key, x, y, config)
  return train_sgd(key, x, y, config)
