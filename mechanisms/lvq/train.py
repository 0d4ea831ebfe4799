"""Training G(M)LVQ: DP-SGD (private), plain SGD and L-BFGS (non-private).

All trainers are pure functions ``train(key, x, y, ...)`` that run a
``lax.scan`` over steps, so they jit and vmap over folds and repeats. The
host-side :func:`privacy_plan` turns (ε, δ, q, E) into the noise multiplier
and the :class:`~dpcore.accounting.PrivacyLedger` of one trained model.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpcore import accounting, calibration, dpsgd, trainer, validation
from mechanisms.lvq import clip as lvq_clip
from mechanisms.lvq import init as lvq_init
from mechanisms.lvq import model as lvq

MODELS = ("glvq", "gmlvq")
TRAINERS = ("dpsgd", "sgd", "bfgs")
SIGMA_RULES = ("accountant", "paper")
INIT_MECHANISMS = ("laplace", "gaussian")
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
    noise_multiplier: σ (DP-SGD only).
    learning_rate: SGD step size on the averaged gradient.
    epsilon_init: ε₁ of the private initialisation (DP-SGD only).
    init_mechanism: ``"laplace"`` (paper) or ``"gaussian"`` (see
      :func:`lvq_init.gaussian_private_prototypes`).
    init_noise_multiplier: σ_init of the Gaussian initialisation.
    max_batch: padded Poisson batch size (from :func:`dpsgd.max_batch_size`).
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


class TrainResult(NamedTuple):
  """Output of a trainer: the params and diagnostics.

  Attributes:
    params: trained model pytree.
    overflow_steps: DP-SGD/SGD steps whose Poisson batch exceeded
      ``max_batch`` (rows dropped; should be 0 — see dpsgd.max_batch_size).
    final_cost: mean Φ(μ) on the training set at the end.
  """
  params: dict
  overflow_steps: jax.Array
  final_cost: jax.Array


class PrivacyPlan(NamedTuple):
  """Noise and accounting of one private model."""
  noise_multiplier: float
  epsilon_init: float
  epsilon_sgd_target: float
  steps: int
  ledger: accounting.PrivacyLedger
  init_noise_multiplier: float = 0.0
  sigma_rule: str = "accountant"

  def report(self, delta: float) -> dict:
    """The run's privacy record (``accounting.PRIVACY_FIELDS``).

    The guarantee is the ledger's at ``delta``; the target ε₁ + ε₂ goes in
    ``epsilon_nominal`` beside it (with the paper's σ rule that target is
    not what the noise gives; the guarantee is).
    """
    if self.sigma_rule == "paper":
      note = ("target ε₁ + ε₂ of the paper's rule σ = 2q√(T log(1/δ))/ε₂; "
              "the guarantee is the ledger's ε")
    else:
      note = "target ε₁ + ε₂ the DP-SGD noise was calibrated to (RDP)"
    return self.ledger.report(
        delta, nominal_epsilon=self.epsilon_init + self.epsilon_sgd_target,
        nominal_note=note)


def privacy_plan(*, epsilon: float, delta: float, sampling_rate: float,
                 epochs: int, dim: int, init_fraction: float = 0.2,
                 sigma_rule: str = "accountant",
                 init_mechanism: str = "laplace",
                 num_examples: int | None = None,
                 max_batch: int | None = None) -> PrivacyPlan:
  """Splits ε into ε₁ (init) + ε₂ (DP-SGD), picks σ, and records both.

  Args:
    epsilon: total target ε.
    delta: δ.
    sampling_rate: q.
    epochs: E (T = round(E/q) steps).
    dim: d (sensitivity of the class sums).
    init_fraction: ε₁/ε (paper: 0.2).
    sigma_rule: ``"accountant"``: the smallest σ whose DP-SGD is
      (ε₂, δ)-DP by the RDP accountant; ``"paper"``: σ = 2q√(T log(1/δ))/ε₂
      (the ledger then reports the ε that σ actually gives).
    init_mechanism: ``"laplace"`` (paper: ε₁-DP, δ spent only by DP-SGD)
      or ``"gaussian"`` (each part gets δ/2: the init is (ε₁, δ/2)-DP by
      the analytic Gaussian calibration, DP-SGD is calibrated to
      (ε₂, δ/2)), so basic composition alone gives (ε, δ).

  Returns:
    A :class:`PrivacyPlan` whose ledger holds the Laplace init and the
    subsampled Gaussian steps; ``ledger.guarantee(delta)`` is the guarantee.
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
  ledger = accounting.PrivacyLedger()
  init_sigma = 0.0
  if init_mechanism == "laplace":
    lvq_init.record_private_init(ledger, epsilon=eps_init, dim=dim)
  else:
    init_sigma = calibration.gaussian_sigma_analytic(
        epsilon=eps_init, delta=delta / 2.0, sensitivity=1.0)
    lvq_init.record_gaussian_init(ledger, noise_multiplier=init_sigma,
                                  dim=dim, delta=delta / 2.0)
  if (num_examples is None) != (max_batch is None):
    raise ValueError("pass num_examples and max_batch together (or neither).")
  if max_batch is not None:
    # The trainer's own plan records the steps it runs and the padding. C
    # does not enter the accounting (σ is relative to C): any C > 0 will do.
    run = trainer.make_plan(num_examples, sampling_rate=sampling_rate,
                            epochs=epochs, clip_norm=1.0,
                            noise_multiplier=sigma, max_batch=max_batch,
                            sampler=SAMPLER)
    assert run.steps == steps
    run.record(ledger, delta=delta_sgd, label="dpsgd")
  else:
    ledger.record_subsampled_gaussian(
        noise_multiplier=sigma, sampling_rate=sampling_rate, steps=steps,
        delta=delta_sgd, label="dpsgd")
  return PrivacyPlan(sigma, eps_init, eps_sgd, steps, ledger, init_sigma,
                     sigma_rule)


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


def train_sgd(key: jax.Array, x, y, config: TrainConfig, *,
              private: bool) -> TrainResult:
  """DP-SGD (``private``) or plain SGD over Poisson batches, as lax.scan.

  Both draw the same batches from the same key. Plain SGD steps along
  Σ_batch ∇ℓᵢ / (qN); DP-SGD along (Σ_batch clip_C(∇ℓᵢ) + N(0, σ²C²I)) /
  (qN), via the generic :func:`dpcore.trainer.train` (closed-form clipped
  sums when ``config.ghost_clipping``), after a private init.

  Args:
    key: PRNG key.
    x: (N, d) training data in [−1, 1]^d.
    y: (N,) class indices.
    config: a validated :class:`TrainConfig`.
    private: DP-SGD with private init, or plain SGD with exact init.

  Privacy: with ``private``, ε₁-DP init (Laplace) followed by T steps of the
  Poisson-sampled Gaussian mechanism with noise multiplier σ and
  sensitivity C (add/remove-one); account with :func:`privacy_plan`.
  Without it: none.
  """
  labels = lvq_init.prototype_labels(config.num_classes,
                                     config.prototypes_per_class)
  init_key, sample_key, noise_key = jax.random.split(key, 3)
  params = init_params(init_key, x, y, config, private=private)
  if private:
    params, overflow = _train_dpsgd(
        trainer.TrainKeys(sample_key, noise_key), params, x, y, labels,
        config)
  else:
    params, overflow = _train_plain(sample_key, params, x, y, labels, config)
  return TrainResult(params, overflow,
                     _mean_cost(params, x, y, labels, config))


def _train_dpsgd(keys, params, x, y, labels, config):
  """DP-SGD through :func:`dpcore.trainer.train`."""
  phi_kind = config.phi_kind

  def loss(p, example):
    xi, yi = example
    return lvq.example_loss(p, xi, yi, labels, phi_kind=phi_kind)

  clipped_sum = None
  if config.ghost_clipping:
    def clipped_sum(p, batch, mask, clip_norm):
      xb, yb = batch
      total, _ = lvq_clip.clipped_gradient_sum(
          p, xb, yb, labels, clip_norm=clip_norm, mask=mask,
          phi_kind=phi_kind)
      return total

  result = trainer.train(
      keys, config.dpsgd_plan(x.shape[0]), loss, params, (x, y),
      optax.sgd(config.learning_rate), clipped_sum=clipped_sum,
      post_update=lambda p: _post(p, config))
  return result.params, result.overflow_steps


def _train_plain(sample_key, params, x, y, labels, config):
  """Non-private SGD over the same Poisson batches (no clip, no noise)."""
  n = x.shape[0]
  expected = config.sampling_rate * n
  tx = optax.sgd(config.learning_rate)

  def step(carry, t):
    params, opt_state, overflow = carry
    batch = dpsgd.poisson_batch(
        jax.random.fold_in(sample_key, t), n,
        sampling_rate=config.sampling_rate, max_batch=config.max_batch,
        method=SAMPLER)
    xb, yb = x[batch.indices], y[batch.indices]
    grads = jax.grad(lvq.cost)(params, xb, yb, labels,
                               phi_kind=config.phi_kind, weights=batch.mask)
    grads = jax.tree.map(lambda g: g / expected, grads)
    updates, opt_state = tx.update(grads, opt_state, params)
    params = _post(optax.apply_updates(params, updates), config)
    overflow = overflow + (batch.size > config.max_batch)
    return (params, opt_state, overflow), None

  carry = (params, tx.init(params), jnp.zeros((), jnp.int32))
  (params, _, overflow), _ = jax.lax.scan(
      step, carry, jnp.arange(config.steps()))
  return params, overflow


def train_bfgs(key: jax.Array, x, y, config: TrainConfig) -> TrainResult:
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
  params = _post(params, config)
  return TrainResult(params, jnp.zeros((), jnp.int32),
                     _mean_cost(params, x, y, labels, config))


def train(key: jax.Array, x, y, config: TrainConfig) -> TrainResult:
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
