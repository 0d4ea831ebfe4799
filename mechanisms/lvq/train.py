"""Training G(M)LVQ: DP-SGD (private), plain SGD and L-BFGS (non-private).

All trainers are pure functions ``train(key, x, y, ...)`` returning a
:class:`dpcore.trainer.TrainResult`; they run a ``lax.scan`` over steps, so
they jit and vmap over folds and repeats. DP-SGD and plain SGD are both
:func:`dpcore.trainer.train`, on a :func:`dpcore.trainer.make_plan` and a
:func:`dpcore.trainer.nonprivate_plan` of the same batches. The host-side
:func:`make_plan` turns (ε, δ, q, E) into a :class:`DPLVQPlan`: the private
initialisation's facts and the :class:`dpcore.trainer.DPSGDPlan` of the
steps, whose :meth:`DPLVQPlan.record` writes both into a ledger.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from dpcore import (
    accounting,
    calibration,
    dpsgd,
    options,
    trainer,
    validation,
)
from mechanisms.lvq import clip as lvq_clip
from mechanisms.lvq import init as lvq_init
from mechanisms.lvq import model as lvq

MODELS = options.LVQ_MODELS
TRAINERS = options.LVQ_TRAINERS
SIGMA_RULES = options.LVQ_SIGMA_RULES
INIT_MECHANISMS = options.LVQ_INIT_MECHANISMS
RELATION = options.Relation.ADD_REMOVE
"""DP-LVQ's relation: the private init's and DP-SGD's (add/remove a row)."""
# One coin per row, as the reproduction was run and recorded: the private
# and the non-private trainers then see the same batches for one key.
SAMPLER = "bernoulli"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Static settings of one training run.

  Attributes:
    model: ``"glvq"`` or ``"gmlvq"``.
    trainer: ``"dpsgd"``, ``"sgd"`` (non-private, same Poisson batches) or
      ``"bfgs"`` (non-private full-batch L-BFGS).
    num_classes: k.
    prototypes_per_class: prototypes per class.
    rank: rows of Ω (None: full, r = d).
    normalise: project Ω to trace(ΩᵀΩ) = 1 after every update (sklvq); the
      paper does not.
    phi_kind: ``"identity"`` (paper) or ``"sigmoid"``.
    epochs: E; the number of steps is T = round(E / q).
    sampling_rate: q.
    clip_norm: C.
    noise_multiplier: σ (DP-SGD only; ``DPLVQPlan.noise_multiplier``).
    learning_rate: SGD step size on the averaged gradient.
    epsilon_init: ε₁ of the private initialisation (DP-SGD only).
    init_mechanism: ``"laplace"`` (paper) or ``"gaussian"`` (see
      :func:`lvq_init.gaussian_private_prototypes`).
    init_noise_multiplier: σ_init of the Gaussian initialisation.
    max_batch: padded Poisson batch size (from :func:`dpsgd.max_batch_size`;
      for DP-SGD the plan's, ``DPLVQPlan.dpsgd.max_batch``).
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
  clip_norm: float = 0.5
  noise_multiplier: float = 1.0
  learning_rate: float = 0.05
  epsilon_init: float = 0.1
  init_mechanism: str = "laplace"
  init_noise_multiplier: float = 1.0
  max_batch: int = 256
  bfgs_iterations: int = 100
  ghost_clipping: bool = True

  def steps(self) -> int:
    """T, by :func:`dpcore.dpsgd.num_steps` (the accountant's rule)."""
    return dpsgd.num_steps(epochs=self.epochs,
                           sampling_rate=self.sampling_rate)

  def dpsgd_plan(self, num_examples: int) -> trainer.DPSGDPlan:
    """The :class:`~dpcore.trainer.DPSGDPlan` this config runs on N rows."""
    return trainer.make_plan(
        num_examples, sampling_rate=self.sampling_rate, epochs=self.epochs,
        clip_norm=self.clip_norm, noise_multiplier=self.noise_multiplier,
        max_batch=self.max_batch, sampler=SAMPLER)

  def sgd_plan(self, num_examples: int) -> trainer.DPSGDPlan:
    """The non-private plan of plain SGD: the same batches, no clip/noise."""
    return trainer.nonprivate_plan(
        num_examples, sampling_rate=self.sampling_rate, epochs=self.epochs,
        max_batch=self.max_batch, sampler=SAMPLER)

  def validate(self) -> TrainConfig:
    if self.model not in MODELS:
      raise ValueError(f"model must be one of {MODELS}, got {self.model!r}.")
    if self.trainer not in TRAINERS:
      raise ValueError(
          f"trainer must be one of {TRAINERS}, got {self.trainer!r}.")
    if self.phi_kind not in lvq.PHIS:
      raise ValueError(
          f"phi_kind must be one of {lvq.PHIS}, got {self.phi_kind!r}.")
    validation.check_positive_int(self.num_classes, "num_classes")
    if self.num_classes < 2:
      raise ValueError("num_classes must be ≥ 2 (LVQ needs a wrong class).")
    validation.check_positive_int(self.epochs, "epochs")
    validation.check_in_range(self.sampling_rate, "q (sampling_rate)", 0.0,
                              1.0, high_inclusive=True)
    validation.check_positive(self.clip_norm, "clip (clip_norm)")
    validation.check_positive(self.learning_rate, "learning_rate")
    validation.check_positive_int(self.max_batch, "max_batch")
    if self.rank is not None:
      validation.check_positive_int(self.rank, "rank")
    if self.init_mechanism not in INIT_MECHANISMS:
      raise ValueError(f"init_mechanism must be one of {INIT_MECHANISMS}, "
                       f"got {self.init_mechanism!r}.")
    if self.trainer == "dpsgd":
      validation.check_positive(self.noise_multiplier, "noise_multiplier")
      validation.check_epsilon(self.epsilon_init, "epsilon_init")
    return self


@dataclasses.dataclass(frozen=True)
class DPLVQPlan:
  """The public facts of one private G(M)LVQ model (see :func:`make_plan`).

  Attributes:
    epsilon: the target total ε (initialisation + DP-SGD).
    delta: δ of the target.
    dim: d, the features (the Laplace init's sensitivity).
    init_mechanism: ``"laplace"`` or ``"gaussian"``.
    epsilon_init: ε₁ of the initialisation.
    init_noise_multiplier: σ_init of the Gaussian initialisation (0 for
      Laplace).
    epsilon_sgd_target: ε₂ = ε − ε₁, the DP-SGD part's target.
    sgd_delta: δ of the DP-SGD part (δ with the Laplace init, δ/2 with the
      Gaussian one).
    sigma_rule: ``"accountant"`` or ``"paper"``.
    dpsgd: the :class:`dpcore.trainer.DPSGDPlan` of the steps (N, q, T, C,
      σ, B, the one-coin-per-row sampler); :meth:`TrainConfig.dpsgd_plan`
      of a config with this σ, C and B is the same plan.
  """
  epsilon: float
  delta: float
  dim: int
  init_mechanism: str
  epsilon_init: float
  init_noise_multiplier: float
  epsilon_sgd_target: float
  sgd_delta: float
  sigma_rule: str
  dpsgd: trainer.DPSGDPlan

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
    if self.init_mechanism == "laplace":
      lvq_init.record_private_init(ledger, epsilon=self.epsilon_init,
                                   dim=self.dim)
    else:
      lvq_init.record_gaussian_init(
          ledger, noise_multiplier=self.init_noise_multiplier, dim=self.dim,
          delta=self.delta / 2.0)
    self.dpsgd.record(ledger, delta=self.sgd_delta, label="dpsgd")

  def report(self) -> dict:
    """The model's privacy record (``accounting.PRIVACY_FIELDS``) at δ.

    The guarantee is the ledger's; the target ε₁ + ε₂ goes in
    ``epsilon_nominal`` beside it (with the paper's σ rule that target is
    not what the noise gives; the guarantee is).
    """
    if self.sigma_rule == "paper":
      note = ("target ε₁ + ε₂ of the paper's rule σ = 2q√(T log(1/δ))/ε₂; "
              "the guarantee is the ledger's ε")
    else:
      note = "target ε₁ + ε₂ the DP-SGD noise was calibrated to (RDP)"
    ledger = accounting.PrivacyLedger()
    self.record(ledger)
    return ledger.report(
        self.delta, nominal_epsilon=self.epsilon_init + self.epsilon_sgd_target,
        nominal_note=note)


def make_plan(num_examples: int, *, epsilon: float, delta: float,
              sampling_rate: float, epochs: int, clip_norm: float, dim: int,
              max_batch: int | None = None, init_fraction: float = 0.2,
              sigma_rule: str = "accountant",
              init_mechanism: str = "laplace") -> DPLVQPlan:
  """Splits ε into ε₁ (init) + ε₂ (DP-SGD) and picks σ for N rows.

  Args:
    num_examples: N, the training rows of one model.
    epsilon: total target ε.
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
    steps and the padding, and ``ledger.guarantee(delta)`` is the
    guarantee.

  Raises:
    ValueError: an argument out of range, named with its fix.

  Privacy: add/remove one row of the N training rows (rows in
  [−1, 1]^d, enforced by the init's clip). The init is ε₁-DP (Laplace on
  counts, sensitivity 1, and sums, sensitivity d) or (ε₁, δ/2)-DP
  (Gaussian); the steps are T Poisson-subsampled Gaussians (sensitivity C,
  noise σC), padded to B with the truncation probability recorded; the
  ledger composes them to the (ε, δ) it reports.
  """
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  sampling_rate = validation.check_in_range(
      sampling_rate, "q (sampling_rate)", 0.0, 1.0, high_inclusive=True)
  epochs = validation.check_positive_int(epochs, "epochs")
  init_fraction = validation.check_in_range(init_fraction, "init_fraction",
                                            0.0, 1.0)
  if sigma_rule not in SIGMA_RULES:
    raise ValueError(
        f"sigma_rule must be one of {SIGMA_RULES}, got {sigma_rule!r}.")
  if init_mechanism not in INIT_MECHANISMS:
    raise ValueError(f"init_mechanism must be one of {INIT_MECHANISMS}, "
                     f"got {init_mechanism!r}.")
  num_examples = validation.check_positive_int(num_examples, "num_examples")
  clip_norm = validation.check_positive(clip_norm, "clip (clip_norm)")
  dim = validation.check_positive_int(dim, "dim")
  steps = dpsgd.num_steps(epochs=epochs, sampling_rate=sampling_rate)
  eps_init = init_fraction * epsilon
  eps_sgd = epsilon - eps_init
  delta_sgd = delta if init_mechanism == "laplace" else delta / 2.0
  if sigma_rule == "accountant":
    sigma = accounting.calibrate_dpsgd_noise(
        epsilon=eps_sgd, delta=delta_sgd, sampling_rate=sampling_rate,
        steps=steps)
  else:
    sigma = dpsgd.paper_noise_multiplier(
        epsilon=eps_sgd, delta=delta_sgd, sampling_rate=sampling_rate,
        steps=steps)
  init_sigma = 0.0
  if init_mechanism == "gaussian":
    init_sigma = calibration.gaussian_sigma_analytic(
        epsilon=eps_init, delta=delta / 2.0, sensitivity=1.0)
  run = trainer.make_plan(num_examples, sampling_rate=sampling_rate,
                          epochs=epochs, clip_norm=clip_norm,
                          noise_multiplier=sigma, max_batch=max_batch,
                          sampler=SAMPLER)
  assert run.steps == steps
  return DPLVQPlan(epsilon, delta, dim, init_mechanism, eps_init, init_sigma,
                   eps_sgd, delta_sgd, sigma_rule, run)


def init_params(key, x, y, config: TrainConfig, *, private: bool):
  """Prototypes (exact or private class means) and a data-free Ω."""
  if private and config.init_mechanism == "gaussian":
    protos = lvq_init.gaussian_private_prototypes(
        key, x, y, num_classes=config.num_classes,
        noise_multiplier=config.init_noise_multiplier,
        prototypes_per_class=config.prototypes_per_class)
  elif private:
    protos = lvq_init.private_prototypes(
        key, x, y, num_classes=config.num_classes,
        epsilon=config.epsilon_init,
        prototypes_per_class=config.prototypes_per_class)
  else:
    protos = lvq_init.class_mean_prototypes(
        key, x, y, num_classes=config.num_classes,
        prototypes_per_class=config.prototypes_per_class)
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


def train_sgd(key: jax.Array, x, y, config: TrainConfig, *,
              private: bool) -> trainer.TrainResult:
  """DP-SGD (``private``) or plain SGD over Poisson batches, as lax.scan.

  Both are :func:`dpcore.trainer.train` and draw the same batches from the
  same key. DP-SGD runs ``config.dpsgd_plan(N)``: steps along
  (Σ_batch clip_C(∇ℓᵢ) + N(0, σ²C²I)) / (qN) (closed-form clipped sums
  when ``config.ghost_clipping``), after a private init. Plain SGD runs
  ``config.sgd_plan(N)``, a :func:`dpcore.trainer.nonprivate_plan`: steps
  along Σ_batch ∇ℓᵢ / (qN) from the exact init.

  Args:
    key: PRNG key.
    x: (N, d) training data in [−1, 1]^d.
    y: (N,) class indices.
    config: a validated :class:`TrainConfig`.
    private: DP-SGD with private init, or plain SGD with exact init.

  Returns:
    A :class:`dpcore.trainer.TrainResult` (:func:`mean_cost` gives the
    final cost).

  Privacy: with ``private``, ε₁-DP init (Laplace; or the Gaussian init)
  followed by T steps of the Poisson-sampled Gaussian mechanism with noise
  multiplier σ and sensitivity C (add/remove-one), padded to B rows; the
  :class:`DPLVQPlan` of :func:`make_plan` records all three. Without it:
  none.
  """
  labels = lvq_init.prototype_labels(config.num_classes,
                                     config.prototypes_per_class)
  init_key, sample_key, noise_key = jax.random.split(key, 3)
  params = init_params(init_key, x, y, config, private=private)
  n = x.shape[0]
  plan = config.dpsgd_plan(n) if private else config.sgd_plan(n)
  return _run(trainer.TrainKeys(sample_key, noise_key), plan, params, x, y,
              labels, config)


def _run(keys, plan, params, x, y, labels, config):
  """:func:`dpcore.trainer.train` with G(M)LVQ's loss and gradient sums."""
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
      clipped_sum=batch_sum, post_update=lambda p: _post(p, config))


def train_bfgs(key: jax.Array, x, y,
               config: TrainConfig) -> trainer.TrainResult:
  """Non-private full-batch L-BFGS (optax.lbfgs, zoom line search).

  Starts from the exact class means and Ω = I; minimises the mean Φ(μ).

  Privacy: none (the paper's non-private reference).
  """
  labels = lvq_init.prototype_labels(config.num_classes,
                                     config.prototypes_per_class)
  params = init_params(key, x, y, config, private=False)

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
  """Dispatches on ``config.trainer`` (jit/vmap-friendly).

  Validates ``config`` (:meth:`TrainConfig.validate`) and the inputs as
  :func:`lvq_init.check_init_inputs` does (shapes always; finite data and
  labels in 0..k−1 where concrete). Host-side data checks that need the
  whole data set (every class present, the box [−1, 1]^d) are
  :func:`lvq_init.check_classes_present` and :func:`lvq_init.check_box`,
  run by ``launch.experiments.lvq_eval.evaluate``.
  """
  if not isinstance(config, TrainConfig):
    raise TypeError(f"config must be a TrainConfig, got {config!r}.")
  config.validate()
  lvq_init.check_init_inputs(key, x, y, config.num_classes)
  if config.trainer == "bfgs":
    return train_bfgs(key, x, y, config)
  return train_sgd(key, x, y, config, private=config.trainer == "dpsgd")
