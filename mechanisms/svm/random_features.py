"""A private kernel SVM: random Fourier features, then a private linear fit.

The RBF kernel k(x, x′) = exp(−γ‖x − x′‖²) is the Fourier transform of a
Gaussian, so with ω ~ N(0, 2γI) and b ~ U[0, 2π),
E[2 cos(ωᵀx + b) cos(ωᵀx′ + b)] = k(x, x′) (Rahimi & Recht 2007). D such
pairs (ω_j, b_j) give the feature map

  φ(x) = √(2/D) · (cos(ω_jᵀx + b_j))_{j=1..D},   φ(x)·φ(x′) ≈ k(x, x′),

and a linear model on φ approximates an RBF-kernel model. Unlike a kernel
SVM, which stores training rows as support vectors, the model is D + 1
numbers per output, and every coordinate of φ lies in [−√(2/D), √(2/D)], so
‖φ(x)‖ ≤ √2 for EVERY input: a per-row bound that holds by construction,
without clipping and without looking at the data.

Two steps, two kinds of function:

* :func:`make_feature_map` (host side) fixes the public facts: γ, D and the
  draws (ω, b) from a PUBLIC key. γ must be chosen without the data;
  ``gamma=None`` takes LIBSVM's default 1/d, which depends only on the
  number of columns. (scikit-learn's ``gamma="scale"`` divides by the
  data's variance: a query on the data, refused here by construction —
  γ is a number or None.)
* a private linear learner on φ, each a host-side constructor that fixes
  its public settings and a pure release function with the key first:

  - DP-SGD (:func:`dpsgd_learner`, :func:`fit_dpsgd`, the mechanism
    :func:`release_dpsgd`): a Huber-hinge or logistic loss for labels ±1,
    or a softmax over K classes (one model, one budget), trained by
    :func:`dpcore.trainer.train` on the layered fast path
    (:mod:`dpcore.ghost`), σ calibrated to a target (ε, δ) by
    :func:`dpcore.accounting.calibrate_dpsgd_noise`.
  - output perturbation (:func:`output_perturbation_learner`,
    :func:`fit_output_perturbation`) of the bias-free linear C-SVC on
    φ/√2 (norm ≤ 1, as :mod:`mechanisms.erm.output_perturbation` assumes),
    binary labels only.

  :func:`record` enters a learner's release in a
  :class:`dpcore.accounting.PrivacyLedger`.

Non-finite inputs. A NaN or infinite entry makes ωᵀx + b non-finite, and
cos of that is NaN. The map sets every non-finite projection's coordinate
to 0 (so a row with a NaN maps to φ = 0), and clips each cosine to
[−1, 1], so the bound ‖φ‖ ≤ √2 holds for every input the jitted code can
see. The host-side entry points refuse non-finite data before any work
(a NaN row is almost always a bug); the map's rule is the backstop.

Privacy: the feature map is drawn from a key that must be independent of
the data, so (ω, b) is public and φ is a fixed per-row function: a
neighbouring data set (one row added, removed or replaced) has a
neighbouring feature matrix, and each learner's guarantee on features
carries over to the rows unchanged. Publishing (ω, b) — or the key —
costs nothing. The released model is (ω, b, w, bias); see each learner
for its relation, sensitivity and guarantee.

>>> import jax, numpy as np
>>> fmap = make_feature_map(jax.random.key(0), input_dim=2,
...                         num_features=512)
>>> fmap.gamma  # LIBSVM's default 1/d
0.5
>>> x = np.array([[0.0, 0.0], [1.0, 0.0]])
>>> phi = np.asarray(features(fmap, x))
>>> bool(np.all(np.linalg.norm(phi, axis=1) <= np.sqrt(2)))
True
>>> round(float(phi[0] @ phi[1]), 1), round(float(np.exp(-0.5)), 1)
(0.6, 0.6)

References:
  Rahimi & Recht, Random Features for Large-Scale Kernel Machines,
  NIPS 2007. Rubinstein, Bartlett, Huang & Taft, Learning in a Large
  Function Space: Privacy-Preserving Mechanisms for SVM Learning, JPC 2012
  (private SVMs on random features). Chaudhuri, Monteleoni & Sarwate,
  Differentially Private Empirical Risk Minimization, JMLR 2011.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpcore import accounting, clipping, ghost, trainer, validation
from mechanisms.erm import output_perturbation

LOSSES = ("huber_hinge", "logistic", "softmax")
BINARY_LOSSES = ("huber_hinge", "logistic")
HUBER_H = 0.5  # the Huber hinge's half-width (as in mechanisms.erm)
FEATURE_BOUND = math.sqrt(2.0)  # ‖φ(x)‖ ≤ √2 for every x


# -- the public feature map ----------------------------------------------------


def _key_fingerprint(key) -> tuple[int, ...]:
  """The key's raw words, to recognise the same key passed twice."""
  if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    key = jax.random.key_data(key)
  return tuple(int(v) for v in np.asarray(key).ravel())


@dataclasses.dataclass(frozen=True, eq=False)
class FeatureMap:
  """The public random Fourier features of the RBF kernel (see module doc).

  A pytree: ``omega`` and ``offset`` are its leaves, the rest is static,
  so it can be passed into jitted and vmapped functions.

  Attributes:
    omega: (d, D) frequencies, each column ~ N(0, 2γI).
    offset: (D,) phases b ~ U[0, 2π).
    gamma: γ of k(x, x′) = exp(−γ‖x − x′‖²).
    key_fingerprint: the raw words of the key the draws came from (so a
      learner can refuse to reuse that key for its noise).
  """
  omega: jax.Array
  offset: jax.Array
  gamma: float
  key_fingerprint: tuple[int, ...]

  @property
  def input_dim(self) -> int:
    return int(self.omega.shape[0])

  @property
  def num_features(self) -> int:
    return int(self.omega.shape[1])

  def __call__(self, x) -> jax.Array:
    return features(self, x)


jax.tree_util.register_dataclass(
    FeatureMap, data_fields=["omega", "offset"],
    meta_fields=["gamma", "key_fingerprint"])


def resolve_gamma(gamma, input_dim: int) -> float:
  """γ as given (a finite number > 0), or LIBSVM's 1/d for None.

  Raises:
    ValueError: γ is not a positive finite number (a string such as
      scikit-learn's ``"scale"``, which reads the data, included).
  """
  input_dim = validation.check_positive_int(input_dim, "input_dim")
  if gamma is None:
    return 1.0 / input_dim
  if isinstance(gamma, str):
    raise ValueError(
        f"gamma={gamma!r}: γ must be a number fixed without the data "
        f"(scikit-learn's 'scale'/'auto' read the data's variance); pass "
        f"gamma=None for LIBSVM's 1/d or a positive number.")
  return validation.check_positive(gamma, "gamma")


def make_feature_map(key: jax.Array, *, input_dim: int, num_features: int,
                     gamma: float | None = None) -> FeatureMap:
  """Draws the public feature map (ω, b) for inputs of ``input_dim``.

  Args:
    key: a PUBLIC PRNG key, independent of the data (e.g. from a public
      seed); it is used for the map alone — never pass it to a learner.
    input_dim: d, the number of input columns.
    num_features: D, the number of random features.
    gamma: γ > 0, or None for LIBSVM's default 1/d (data-independent).

  Returns:
    :class:`FeatureMap`.

  Privacy: reads no data; (ω, b) is a function of ``key``, d, D and γ
  only, so it may be published.
  """
  validation.check_key(key)
  input_dim = validation.check_positive_int(input_dim, "input_dim")
  num_features = validation.check_positive_int(num_features, "num_features")
  gamma = resolve_gamma(gamma, input_dim)
  k_omega, k_offset = jax.random.split(key)
  omega = math.sqrt(2.0 * gamma) * jax.random.normal(
      k_omega, (input_dim, num_features), jnp.float32)
  offset = jax.random.uniform(k_offset, (num_features,), jnp.float32,
                              minval=0.0, maxval=2.0 * math.pi)
  return FeatureMap(omega, offset, gamma, _key_fingerprint(key))


def features(feature_map: FeatureMap, x) -> jax.Array:
  """φ(x) = √(2/D) cos(xω + b), row by row; ‖φ(x)‖ ≤ √2 for every row.

  Jittable. Each row's features depend on that row alone. Non-finite
  projections (from NaN/inf or overflowing inputs) give 0 in their
  coordinates and each cosine is clipped to [−1, 1], so the bound holds
  for any input (see the module docstring).

  Args:
    feature_map: from :func:`make_feature_map`.
    x: (n, d) rows (or one (d,) row).

  Returns:
    (n, D) features (or (D,)), float32 unless ``x`` is float64 under x64.
  """
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.float32)
  if x.ndim not in (1, 2) or x.shape[-1] != feature_map.input_dim:
    raise ValueError(
        f"x must be (n, {feature_map.input_dim}) rows for this feature map "
        f"(d = {feature_map.input_dim}), got shape {x.shape}.")
  omega = feature_map.omega.astype(x.dtype)
  z = x @ omega + feature_map.offset.astype(x.dtype)
  finite = jnp.isfinite(z)
  cosine = jnp.clip(jnp.cos(jnp.where(finite, z, 0.0)), -1.0, 1.0)
  scale = jnp.asarray(math.sqrt(2.0 / feature_map.num_features), x.dtype)
  return scale * jnp.where(finite, cosine, 0.0)


def approximate_kernel(feature_map: FeatureMap, x, x2) -> jax.Array:
  """φ(x)φ(x2)ᵀ, the map's estimate of exp(−γ‖x − x2‖²) (for checks)."""
  return features(feature_map, x) @ features(feature_map, x2).T


# -- the released model --------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class RandomFeatureModel:
  """A released linear model on φ: f(x) = φ(x) w + bias.

  Attributes:
    feature_map: the public map.
    weights: (D, K) — K = 1 for a binary model (score > 0 means +1),
      K classes for a softmax model.
    bias: (K,).
    loss: the loss it was trained with (``"hinge"`` for output
      perturbation); every loss but ``"softmax"`` is binary.
    learner: ``"dpsgd"`` or ``"output_perturbation"``.
  """
  feature_map: FeatureMap
  weights: np.ndarray
  bias: np.ndarray
  loss: str
  learner: str

  def decision_function(self, x) -> np.ndarray:
    """(n,) scores of a binary model; (n, K) logits of a softmax model."""
    phi = np.asarray(features(self.feature_map, np.asarray(x, np.float32)),
                     np.float64)
    out = phi @ self.weights + self.bias
    return out if self.loss == "softmax" else out[:, 0]

  def predict(self, x) -> np.ndarray:
    """±1 labels (binary) or class indices 0..K−1 (softmax)."""
    scores = self.decision_function(x)
    if self.loss == "softmax":
      return np.argmax(scores, axis=1)
    return np.where(scores > 0, 1, -1)


# -- host-side checks ----------------------------------------------------------


def _check_data(feature_map, x, y, *, loss, num_classes, rows=None,
                both_classes=True):
  """Shapes, finiteness and labels, before any tracing; returns (x, y).

  Binary losses need labels in {−1, +1}, both present unless
  ``both_classes=False`` (the one-row problems of the audits).
  """
  if not isinstance(feature_map, FeatureMap):
    raise ValueError(f"feature_map must come from make_feature_map, got "
                     f"{type(feature_map).__name__}.")
  x = validation.check_matrix(x, "x")
  if x.shape[1] != feature_map.input_dim:
    raise ValueError(
        f"x has {x.shape[1]} columns but the feature map was drawn for "
        f"input_dim={feature_map.input_dim}; draw the map for this data's "
        f"width.")
  if rows is not None and x.shape[0] != rows:
    raise ValueError(
        f"x has {x.shape[0]} rows but the learner was planned for "
        f"num_examples={rows}; build the learner for this data's size.")
  if loss in BINARY_LOSSES:
    y = validation.check_labels(y, "y", binary_pm1=both_classes,
                                classes=(-1, 1), n_rows=x.shape[0])
  else:
    y = validation.check_labels(y, "y", classes=range(num_classes),
                                n_rows=x.shape[0])
    if not np.issubdtype(y.dtype, np.integer) and not np.all(
        y == np.round(y)):
      raise ValueError("y must hold integer class indices 0..K−1 for the "
                       "softmax loss.")
  return x, y


def _check_keys_differ(key, feature_map, name="key"):
  if _key_fingerprint(key) == feature_map.key_fingerprint:
    raise ValueError(
        f"{name} is the feature map's own key: the learner's noise would "
        f"be a function of the public (ω, b). Derive distinct keys, e.g. "
        f"feature_key, train_key = jax.random.split(jax.random.key(seed)).")


# -- learner 1: DP-SGD ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DPSGDLearner:
  """The public settings of one DP-SGD fit on random features (hashable).

  Attributes:
    plan: the :class:`dpcore.trainer.DPSGDPlan` (N, q, T, C, σ, B).
    loss: ``"huber_hinge"``, ``"logistic"`` or ``"softmax"``.
    num_classes: K (2 for the binary losses, which output one score).
    learning_rate: SGD step size.
    weight_decay: λ of the decoupled decay λ·w per step (post-processing
      of the noisy gradient; 0 for none).
    epsilon: the target ε σ was calibrated for.
    delta: δ of the target.
  """
  plan: trainer.DPSGDPlan
  loss: str
  num_classes: int
  learning_rate: float
  weight_decay: float
  epsilon: float
  delta: float

  @property
  def outputs(self) -> int:
    return 1 if self.loss in BINARY_LOSSES else self.num_classes


def check_loss(loss, num_classes) -> tuple[str, int]:
  """(loss, K) checked: a binary loss needs K = 2, softmax K ≥ 2."""
  if loss not in LOSSES:
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}.")
  num_classes = validation.check_positive_int(num_classes, "num_classes")
  if loss in BINARY_LOSSES and num_classes != 2:
    raise ValueError(
        f"loss={loss!r} is binary (labels ±1) but num_classes="
        f"{num_classes}; use loss='softmax' for {num_classes} classes.")
  if num_classes < 2:
    raise ValueError(f"num_classes must be ≥ 2, got {num_classes}.")
  return loss, num_classes


def dpsgd_learner(num_examples: int, *, epsilon: float, delta: float,
                  sampling_rate: float, epochs: float,
                  learning_rate: float, clip_norm: float = 1.0,
                  loss: str = "huber_hinge", num_classes: int = 2,
                  weight_decay: float = 0.0) -> DPSGDLearner:
  """Fixes a DP-SGD fit's public settings and calibrates σ to (ε, δ).

  Host side. σ is the smallest noise multiplier for which T = E/q Poisson-
  subsampled Gaussian steps are (ε, δ)-DP under the RDP accountant
  (:func:`dpcore.accounting.calibrate_dpsgd_noise`); the plan is
  :func:`dpcore.trainer.make_plan` with that σ, so the steps accounted are
  the steps run.

  Args:
    num_examples: N, rows of the training data (public, as for
      :mod:`dpcore.trainer`: it fixes q·N, the divisor of the noisy sum).
    epsilon, delta: the target guarantee.
    sampling_rate: q.
    epochs: E.
    learning_rate: SGD step size (> 0).
    clip_norm: C, the bound on each example's gradient.
    loss: ``"huber_hinge"`` (h = 0.5) or ``"logistic"`` for labels ±1,
      ``"softmax"`` for labels 0..K−1.
    num_classes: K.
    weight_decay: λ ≥ 0 (decoupled, applied by the optimiser).

  Returns:
    :class:`DPSGDLearner`.

  Privacy: see :func:`release_dpsgd`; :func:`record` enters the run.
  """
  loss, num_classes = check_loss(loss, num_classes)
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  learning_rate = validation.check_positive(learning_rate, "learning_rate")
  weight_decay = validation.check_non_negative(weight_decay, "weight_decay")
  validation.check_positive(epochs, "epochs")
  sigma = accounting.calibrate_dpsgd_noise(
      epsilon=epsilon, delta=delta, sampling_rate=sampling_rate,
      epochs=epochs)
  plan = trainer.make_plan(num_examples, sampling_rate=sampling_rate,
                           clip_norm=clip_norm, noise_multiplier=sigma,
                           epochs=epochs)
  return DPSGDLearner(plan, loss, num_classes, learning_rate, weight_decay,
                      epsilon, delta)


def huber_hinge(z: jax.Array, h: float = HUBER_H) -> jax.Array:
  """The Huber hinge of the margin z: |dℓ/dz| ≤ 1 (see mechanisms.erm)."""
  return jnp.where(z > 1.0 + h, 0.0,
                   jnp.where(z < 1.0 - h, 1.0 - z,
                             (1.0 + h - z) ** 2 / (4.0 * h)))


def _binary_loss(kind):
  def fn(layers, example):
    phi, y = example
    margin = y * layers.dense("out", phi)[0]
    if kind == "huber_hinge":
      return huber_hinge(margin)
    return jax.nn.softplus(-margin)
  return fn


def _softmax_loss(layers, example):
  phi, y = example
  logits = layers.dense("out", phi)
  return optax.softmax_cross_entropy_with_integer_labels(
      logits, y.astype(jnp.int32))


def layered_loss(loss: str) -> ghost.LayeredLoss:
  """The per-example loss on (φ, y) as a :mod:`dpcore.ghost` layered loss."""
  if loss not in LOSSES:
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}.")
  fn = _softmax_loss if loss == "softmax" else _binary_loss(loss)
  return ghost.layered(fn)


def initial_params(learner: DPSGDLearner, num_features: int) -> dict:
  """Zero weights and bias: data-independent."""
  return {"out": {"w": jnp.zeros((num_features, learner.outputs),
                                 jnp.float32),
                  "b": jnp.zeros((learner.outputs,), jnp.float32)}}


@functools.partial(jax.jit, static_argnames=("learner",))
def release_dpsgd(key: jax.Array, learner: DPSGDLearner,
                  feature_map: FeatureMap, x: jax.Array, y: jax.Array
                  ) -> dict:
  """The DP-SGD mechanism: trained ``{"out": {"w", "b"}}`` on φ(x).

  Pure and jittable (vmap over ``key`` for repeats); checks shapes only —
  :func:`fit_dpsgd` is the checked entry point. φ is computed here, inside
  the mechanism, so its bound cannot be bypassed by the caller.

  Privacy: neighbouring data sets differ by adding or removing one row
  (N and q public, as in :func:`dpcore.trainer.train`). Each step clips
  every example's gradient of (w, bias) to norm C on the layered fast path
  (:meth:`dpcore.ghost.LayeredLoss.clipped_sum`) and adds N(0, σ²C²); a
  row enters only through its own φ(xᵢ) and label, so the sensitivity of
  a step's sum is C whatever the data (a label outside the loss's range —
  never accepted by :func:`fit_dpsgd` — changes the gradient, not this
  bound). The T steps are the Poisson-subsampled Gaussian mechanism the
  plan records: (ε, δ)-DP with ε from the ledger (:func:`record`), plus
  the padding's truncation probability in δ. The initial parameters and
  the optimiser do not read the data; (ω, b) is public.
  """
  phi = features(feature_map, x)
  if learner.loss in BINARY_LOSSES:
    y = y.astype(phi.dtype)
  else:
    y = y.astype(jnp.int32)
  optimizer = optax.sgd(learner.learning_rate)
  if learner.weight_decay > 0:
    optimizer = optax.chain(optax.add_decayed_weights(learner.weight_decay),
                            optimizer)
  params = initial_params(learner, feature_map.num_features)
  return trainer.train(key, learner.plan, layered_loss(learner.loss), params,
                       (phi, y), optimizer).params


def fit_dpsgd(key: jax.Array, learner: DPSGDLearner,
              feature_map: FeatureMap, x, y) -> RandomFeatureModel:
  """Checks the data, then releases a model by :func:`release_dpsgd`.

  Args:
    key: PRNG key of the run (batches and noise); it must not be the
      feature map's key.
    learner: from :func:`dpsgd_learner` (N must equal ``len(x)``).
    feature_map: from :func:`make_feature_map` (d must match ``x``).
    x: (N, d) finite rows (any scale: φ is bounded whatever x is).
    y: labels ±1 (binary losses) or 0..K−1 (softmax).

  Returns:
    :class:`RandomFeatureModel`.

  Privacy: (ε, δ)-DP under add/remove-one, as :func:`release_dpsgd`
  states; record it with :func:`record`.
  """
  validation.check_key(key)
  if not isinstance(learner, DPSGDLearner):
    raise ValueError(f"learner must come from dpsgd_learner, got "
                     f"{type(learner).__name__}.")
  _check_keys_differ(key, feature_map)
  x, y = _check_data(feature_map, x, y, loss=learner.loss,
                     num_classes=learner.num_classes,
                     rows=learner.plan.num_examples)
  params = release_dpsgd(key, learner, feature_map,
                         jnp.asarray(x, jnp.float32), jnp.asarray(y))
  return RandomFeatureModel(feature_map,
                            np.asarray(params["out"]["w"], np.float64),
                            np.asarray(params["out"]["b"], np.float64),
                            learner.loss, "dpsgd")


# -- learner 2: output perturbation --------------------------------------------


@dataclasses.dataclass(frozen=True)
class OutputPerturbationLearner:
  """The public settings of one output-perturbation release.

  Attributes:
    c: C of the bias-free C-SVC on φ/√2.
    epsilon: ε of the release (pure DP).
    tol: the dual solver's projected-gradient tolerance.
    max_epochs: the dual solver's epoch cap.
  """
  c: float
  epsilon: float
  tol: float = 1e-8
  max_epochs: int = 10_000
  loss: str = "hinge"

  @property
  def sensitivity(self) -> float:
    """Δ₂ = 2C of the minimiser (:func:`output_perturbation.sensitivity`)."""
    return output_perturbation.sensitivity(self.c)


def output_perturbation_learner(*, c: float, epsilon: float,
                                tol: float = 1e-8,
                                max_epochs: int = 10_000
                                ) -> OutputPerturbationLearner:
  """Fixes an output-perturbation release's public settings (host side).

  Privacy: see :func:`fit_output_perturbation`.
  """
  c = validation.check_positive(c, "c")
  epsilon = validation.check_epsilon(epsilon)
  tol = validation.check_positive(tol, "tol")
  max_epochs = validation.check_positive_int(max_epochs, "max_epochs")
  return OutputPerturbationLearner(c, epsilon, tol, max_epochs)


def unit_features(feature_map: FeatureMap, x) -> np.ndarray:
  """φ(x)/√2 in float64, every row in the unit ball.

  The map already bounds ‖φ‖ ≤ √2; the clip to norm 1 only absorbs
  float rounding (it changes nothing on valid input) so that the norm
  output perturbation assumes holds exactly.
  """
  phi = np.asarray(features(feature_map, np.asarray(x, np.float32)),
                   np.float64) / FEATURE_BOUND
  with jax.enable_x64(True):
    return np.asarray(clipping.clip_rows(phi, max_norm=1.0), np.float64)


def exact_weights(learner: OutputPerturbationLearner,
                  feature_map: FeatureMap, x, y) -> np.ndarray:
  """The noiseless minimiser w̃ (D + 1,) on [φ/√2, 1]/√2 (never release).

  For diagnostics and audits: :func:`fit_output_perturbation` is this
  plus noise.
  """
  x, y = _check_data(feature_map, x, y, loss="huber_hinge", num_classes=2,
                     both_classes=False)
  w_aug, _, _ = output_perturbation.fit_linear(
      unit_features(feature_map, x), y, c=learner.c, tol=learner.tol,
      max_epochs=learner.max_epochs)
  return w_aug


def fit_output_perturbation(key: jax.Array,
                            learner: OutputPerturbationLearner,
                            feature_map: FeatureMap, x, y
                            ) -> RandomFeatureModel:
  """A linear C-SVC on φ/√2, released by output perturbation.

  Args:
    key: PRNG key of the noise (not the feature map's key).
    learner: from :func:`output_perturbation_learner`.
    feature_map: from :func:`make_feature_map`.
    x: (n, d) finite rows (any scale).
    y: labels ±1, both present.

  Returns:
    :class:`RandomFeatureModel` (loss ``"hinge"``: binary, one score).

  Privacy: neighbouring data sets differ by replacing one row (n public).
  The rows the solver sees are x̃ = [φ(x)/√2, 1]/√2 with ‖x̃‖ ≤ 1 for every
  x, because ‖φ(x)‖ ≤ √2 by construction (the map is cosines; no clip is
  active). The exact minimiser of ½‖w̃‖² + C Σ hinge then has L2
  sensitivity 2C (:mod:`mechanisms.erm.output_perturbation`), and noise of
  density ∝ exp(−ε‖b‖/(2C)) makes (w, bias) ε-DP (pure), assuming the
  exact minimiser (``tol`` bounds the deviation). (ω, b) is public.
  """
  validation.check_key(key)
  if not isinstance(learner, OutputPerturbationLearner):
    raise ValueError(f"learner must come from output_perturbation_learner, "
                     f"got {type(learner).__name__}.")
  _check_keys_differ(key, feature_map)
  x, y = _check_data(feature_map, x, y, loss="huber_hinge", num_classes=2)
  release = output_perturbation.private_linear_svm(
      key, unit_features(feature_map, x), y, c=learner.c,
      epsilon=learner.epsilon, tol=learner.tol,
      max_epochs=learner.max_epochs)
  # The release is linear in φ/√2; expressed on φ itself.
  weights = np.asarray(release.w, np.float64)[:, None] / FEATURE_BOUND
  return RandomFeatureModel(feature_map, weights,
                            np.asarray([release.b], np.float64), "hinge",
                            "output_perturbation")


# -- the ledger ----------------------------------------------------------------


def record(ledger: accounting.PrivacyLedger, learner, *, count: int = 1,
           label: str | None = None) -> accounting.PrivacyLedger:
  """Enters ``count`` releases of ``learner`` (same data) in ``ledger``.

  * :class:`DPSGDLearner`: its plan's entries (T subsampled Gaussian steps
    at the learner's δ for the stand-alone ε, the batch padding's
    truncation, the sampler's departure when above 0), per release;
    add/remove-one.
  * :class:`OutputPerturbationLearner`: a pure ε entry per release
    (:func:`mechanisms.erm.output_perturbation.record`); replace-one.

  The feature map costs nothing (public). Callers never write an entry
  by hand.

  Returns:
    ``ledger``.
  """
  count = validation.check_positive_int(count, "count")
  if isinstance(learner, DPSGDLearner):
    for _ in range(count):
      learner.plan.record(ledger, delta=learner.delta,
                          label=label or "rff_dpsgd",
                          padding_label="rff_dpsgd_padding",
                          sampler_label="rff_dpsgd_sampler")
    return ledger
  if isinstance(learner, OutputPerturbationLearner):
    return output_perturbation.record(
        ledger, epsilon=learner.epsilon, count=count,
        label=label or "rff_output_perturbation")
  raise ValueError(f"learner must come from dpsgd_learner or "
                   f"output_perturbation_learner, got "
                   f"{type(learner).__name__}.")


NEIGHBOURING = {"dpsgd": "add_remove", "output_perturbation": "replace_one"}
"""The neighbouring relation each learner's guarantee is stated for."""


__all__ = [
    "BINARY_LOSSES", "DPSGDLearner", "FEATURE_BOUND", "FeatureMap", "LOSSES",
    "NEIGHBOURING", "OutputPerturbationLearner", "RandomFeatureModel",
    "approximate_kernel", "dpsgd_learner", "exact_weights", "features",
    "fit_dpsgd", "fit_output_perturbation", "huber_hinge", "layered_loss",
    "make_feature_map", "output_perturbation_learner", "record",
    "release_dpsgd", "resolve_gamma", "unit_features",
]
