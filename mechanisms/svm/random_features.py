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
* a private linear learner on φ, each a mechanism of the one shape: a
  host-side ``make_<variant>_plan`` that checks and calibrates its public
  settings into a frozen plan, ``plan.record(ledger)`` (the one way into
  a :class:`dpcore.accounting.PrivacyLedger`), and ``release_<variant>``
  with the key first and the plan second:

  - DP-SGD (:func:`make_dpsgd_plan` → :class:`RFFDPSGDPlan`, the pure
    mechanism :func:`release_dpsgd`, the checked entry point
    :func:`fit_dpsgd`): a Huber-hinge or logistic loss for labels ±1, or
    a softmax over K classes (one model, one budget), trained by
    :func:`dpcore.trainer.train` on the layered fast path
    (:mod:`dpcore.ghost`), σ calibrated to a target (ε, δ) by
    :func:`dpcore.accounting.calibrate_dpsgd_noise`.
  - output perturbation (:func:`make_output_perturbation_plan` →
    :class:`RFFOutputPerturbationPlan`,
    :func:`release_output_perturbation`) of the bias-free linear C-SVC on
    φ/√2 (norm ≤ 1, as :mod:`mechanisms.erm.output_perturbation`
    assumes), binary labels only.

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
>>> fmap = make_feature_map(jax.random.key(0), dim=2, num_features=512)
>>> fmap.gamma  # LIBSVM's default 1/d
0.5
>>> x = np.array([[0.0, 0.0], [1.0, 0.0]])
>>> phi = np.asarray(features(fmap, x))
>>> bool(np.all(np.linalg.norm(phi, axis=1) <= np.sqrt(2)))
True
>>> round(float(phi[0] @ phi[1]), 1), round(float(np.exp(-0.5)), 1)
(0.6, 0.6)
>>> plan = make_output_perturbation_plan(c=0.3, epsilon=1.0)
>>> plan.epsilon, plan.delta, plan.relation.value, plan.sensitivity
(1.0, 0.0, 'replace_one', 0.6)

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

from dpcore import accounting, clipping, ghost, options, trainer, validation
from mechanisms.erm import output_perturbation

_BINARY = (options.RFFLoss.HUBER_HINGE, options.RFFLoss.LOGISTIC)
HUBER_H = 0.5  # the Huber hinge's half-width (as in mechanisms.erm)
FEATURE_BOUND = math.sqrt(2.0)  # ‖φ(x)‖ ≤ √2 for every x


# -- the public feature map ----------------------------------------------------


def _key_fingerprint(key) -> np.ndarray:
  """The key's raw words, to recognise the same key passed twice."""
  if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    key = jax.random.key_data(key)
  return np.asarray(key, np.uint32).ravel()


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["omega", "offset", "gamma", "key_fingerprint"],
    meta_fields=[])
@dataclasses.dataclass(frozen=True, eq=False)
class FeatureMap:
  """The public random Fourier features of the RBF kernel (see module doc).

  A pytree whose leaves are all its fields (the shapes d and D are the
  arrays'), so one compiled learner serves every map of the same shape:
  every seed's feature key, every γ.

  Attributes:
    omega: (dim, D) frequencies, each column ~ N(0, 2γI).
    offset: (D,) phases b ~ U[0, 2π).
    gamma: γ of k(x, x′) = exp(−γ‖x − x′‖²).
    key_fingerprint: the raw words of the key the draws came from (so a
      learner can refuse to reuse that key for its noise).
  """
  omega: jax.Array
  offset: jax.Array
  gamma: float
  key_fingerprint: np.ndarray

  @property
  def dim(self) -> int:
    """d, the number of input features."""
    return int(self.omega.shape[0])

  @property
  def num_features(self) -> int:
    """D, the number of random features."""
    return int(self.omega.shape[1])

  def __call__(self, x) -> jax.Array:
    return features(self, x)


def resolve_gamma(gamma, dim: int) -> float:
  """γ as given (a finite number > 0), or LIBSVM's 1/d for None.

  Raises:
    ValueError: γ is not a positive finite number (a string such as
      scikit-learn's ``"scale"``, which reads the data, included).
  """
  dim = validation.check_positive_int(dim, "dim")
  if gamma is None:
    return 1.0 / dim
  if isinstance(gamma, str):
    raise ValueError(
        f"gamma={gamma!r}: γ must be a number fixed without the data "
        f"(scikit-learn's 'scale'/'auto' read the data's variance); pass "
        f"gamma=None for LIBSVM's 1/d or a positive number.")
  return validation.check_positive(gamma, "gamma")


def make_feature_map(key: jax.Array, *, dim: int, num_features: int,
                     gamma: float | None = None) -> FeatureMap:
  """Draws the public feature map (ω, b) for inputs of ``dim`` features.

  Args:
    key: a PUBLIC PRNG key, independent of the data (e.g. from a public
      seed); it is used for the map alone — never pass it to a learner.
    dim: d, the number of input columns.
    num_features: D, the number of random features.
    gamma: γ > 0, or None for LIBSVM's default 1/d (data-independent).

  Returns:
    :class:`FeatureMap`.

  Privacy: reads no data; (ω, b) is a function of ``key``, d, D and γ
  only, so it may be published.
  """
  validation.check_key(key)
  dim = validation.check_positive_int(dim, "dim")
  num_features = validation.check_positive_int(num_features, "num_features")
  gamma = resolve_gamma(gamma, dim)
  k_omega, k_offset = jax.random.split(key)
  omega = math.sqrt(2.0 * gamma) * jax.random.normal(
      k_omega, (dim, num_features), jnp.float32)
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
  if x.ndim not in (1, 2) or x.shape[-1] != feature_map.dim:
    raise ValueError(
        f"x must be (n, {feature_map.dim}) rows for this feature map "
        f"(dim = {feature_map.dim}), got shape {x.shape}.")
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
    return out if self.loss == options.RFFLoss.SOFTMAX else out[:, 0]

  def predict(self, x) -> np.ndarray:
    """±1 labels (binary) or class indices 0..K−1 (softmax)."""
    scores = self.decision_function(x)
    if self.loss == options.RFFLoss.SOFTMAX:
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
  if x.shape[1] != feature_map.dim:
    raise ValueError(
        f"x has {x.shape[1]} columns but the feature map was drawn for "
        f"dim={feature_map.dim}; draw the map for this data's width.")
  if rows is not None and x.shape[0] != rows:
    raise ValueError(
        f"x has {x.shape[0]} rows but the plan was made for "
        f"num_examples={rows}; make the plan for this data's size.")
  if loss in _BINARY:
    y = validation.check_labels(y, "y", binary_pm1=both_classes,
                                classes=(-1, 1), num_examples=x.shape[0])
  else:
    y = validation.check_labels(y, "y", classes=range(num_classes),
                                num_examples=x.shape[0])
    if not np.issubdtype(y.dtype, np.integer) and not np.all(
        y == np.round(y)):
      raise ValueError("y must hold integer class indices 0..K−1 for the "
                       "softmax loss.")
  return x, y


def _check_keys_differ(key, feature_map, name="key"):
  if np.array_equal(_key_fingerprint(key),
                    np.asarray(feature_map.key_fingerprint)):
    raise ValueError(
        f"{name} is the feature map's own key: the learner's noise would "
        f"be a function of the public (ω, b). Derive distinct keys, e.g. "
        f"feature_key, train_key = jax.random.split(jax.random.key(seed)).")


# -- learner 1: DP-SGD ---------------------------------------------------------


def _check_relation(relation, expected: options.Relation,
                    what: str) -> options.Relation:
  """``relation`` parsed; refused unless it is the one ``what`` is proven
  for."""
  relation = options.parse_relation(relation, "relation")
  if relation is not expected:
    raise ValueError(
        f"relation={relation.value}: {what} is proven for {expected.value} "
        f"neighbours only; pass relation='{expected.value}'.")
  return relation


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["epsilon", "target_epsilon", "delta", "dpsgd"],
    meta_fields=["relation", "loss", "num_classes", "learning_rate",
                 "weight_decay"])
@dataclasses.dataclass(frozen=True)
class RFFDPSGDPlan:
  """The public facts of one DP-SGD fit on random features.

  A pytree (as :class:`dpcore.trainer.DPSGDPlan`, which it holds): the
  numbers that follow the budget — ε, the target ε, δ, and the steps' σ
  and C — are leaves, so a plan passed to the jitted
  :func:`release_dpsgd` is an argument, not a constant, and one compiled
  program serves every ε. The rest is static: the steps' counts and
  shapes (N, q, T, B, the sampler, which the Poisson batch needs as
  concrete numbers), the loss, K, λ (whether the optimiser decays at all
  is the program's structure) and the learning rate (a constant that XLA
  folds with the divisor qN: traced, the fits would move by an ulp from
  the figures recorded with it constant).

  Attributes:
    epsilon: the guarantee: the ε at ``delta`` that a ledger holding
      :meth:`record`'s entries reports (the T steps, the padding's
      truncation and the sampler's departure); at most ``target_epsilon``
      when σ was calibrated.
    target_epsilon: the budget ε σ was calibrated for; None when σ was
      given directly (``noise_multiplier=``).
    delta: δ of the guarantee (and of the calibration).
    relation: add/remove one row (:data:`dpcore.trainer.RELATION`).
    dpsgd: the :class:`dpcore.trainer.DPSGDPlan` of the steps (N, q, T,
      C, σ, B, the sampler).
    loss: a :class:`dpcore.options.RFFLoss`.
    num_classes: K (2 for the binary losses, which output one score).
    learning_rate: SGD step size.
    weight_decay: λ of the decoupled decay λ·w per step (post-processing
      of the noisy gradient; 0 for none).
  """
  epsilon: float
  target_epsilon: float | None
  delta: float
  relation: options.Relation
  dpsgd: trainer.DPSGDPlan
  loss: options.RFFLoss
  num_classes: int
  learning_rate: float
  weight_decay: float

  @property
  def outputs(self) -> int:
    return 1 if self.loss in _BINARY else self.num_classes

  @property
  def noise_multiplier(self) -> float:
    """σ: each step's noise std per coordinate is σC."""
    return self.dpsgd.noise_multiplier

  @property
  def sensitivity(self) -> float:
    """C, the L2 bound on each example's gradient (the clip)."""
    return self.dpsgd.clip_norm

  @property
  def steps(self) -> int:
    """T, the subsampled Gaussian steps."""
    return self.dpsgd.steps

  @property
  def num_examples(self) -> int:
    """N, the training rows (public)."""
    return self.dpsgd.num_examples

  def record(self, ledger: accounting.PrivacyLedger, *,
             label: str = "rff_dpsgd", count: int = 1) -> None:
    """Records ``count`` fits of this plan (same data) in ``ledger``.

    Per fit, :meth:`dpcore.trainer.DPSGDPlan.record` at the plan's δ: T
    Poisson-subsampled Gaussian steps (``label``), the batch padding's
    truncation (``rff_dpsgd_padding``) and the sampler's departure when
    above 0 (``rff_dpsgd_sampler``); add/remove-one. The feature map
    costs nothing (public).
    """
    count = validation.check_positive_int(count, "count")
    for _ in range(count):
      self.dpsgd.record(ledger, delta=self.delta, label=label,
                        padding_label="rff_dpsgd_padding",
                        sampler_label="rff_dpsgd_sampler")


def check_loss(loss, num_classes) -> tuple[options.RFFLoss, int]:
  """(loss, K) checked: a binary loss needs K = 2, softmax K ≥ 2."""
  loss = options.parse(options.RFFLoss, loss, "loss")
  num_classes = validation.check_positive_int(num_classes, "num_classes")
  if loss in _BINARY and num_classes != 2:
    raise ValueError(
        f"loss={loss.value!r} is binary (labels ±1) but num_classes="
        f"{num_classes}; use loss='softmax' for {num_classes} classes.")
  if num_classes < 2:
    raise ValueError(f"num_classes must be ≥ 2, got {num_classes}.")
  return loss, num_classes


def make_dpsgd_plan(num_examples: int, *, epsilon: float | None = None,
                    delta: float, sampling_rate: float, epochs: float,
                    learning_rate: float, clip_norm: float = 1.0,
                    loss: options.RFFLoss = options.RFFLoss.HUBER_HINGE,
                    num_classes: int = 2, weight_decay: float = 0.0,
                    noise_multiplier: float | None = None,
                    relation: options.Relation | str = trainer.RELATION
                    ) -> RFFDPSGDPlan:
  """Fixes a DP-SGD fit's public settings and calibrates σ to (ε, δ).

  Host side. The steps' plan is :func:`dpcore.trainer.make_plan`: σ is
  the smallest noise multiplier for which T = E/q Poisson-subsampled
  Gaussian steps are (ε, δ)-DP under the RDP accountant (or σ as given),
  so the steps accounted are the steps run; the plan's ``epsilon`` is
  then what the ledger reports for them at δ.

  Args:
    num_examples: N, rows of the training data (public, as for
      :mod:`dpcore.trainer`: it fixes q·N, the divisor of the noisy sum).
    epsilon: the budget ε to meet (σ calibrated for it); or
    delta: δ of the guarantee (and of the calibration).
    sampling_rate: q.
    epochs: E.
    learning_rate: SGD step size (> 0).
    clip_norm: C, the bound on each example's gradient.
    loss: a :class:`dpcore.options.RFFLoss`: ``"huber_hinge"`` (h = 0.5)
      or ``"logistic"`` for labels ±1, ``"softmax"`` for labels 0..K−1.
    num_classes: K.
    weight_decay: λ ≥ 0 (decoupled, applied by the optimiser).
    noise_multiplier: σ given directly (exactly one of it and
      ``epsilon``).
    relation: add/remove, the only relation DP-SGD's subsampling is
      proven for.

  Returns:
    :class:`RFFDPSGDPlan`.

  Raises:
    ValueError: a bad setting, named with its fix.

  Privacy: see :func:`release_dpsgd`; ``plan.record(ledger)`` enters a
  fit.
  """
  loss, num_classes = check_loss(loss, num_classes)
  learning_rate = validation.check_positive(learning_rate, "learning_rate")
  weight_decay = validation.check_non_negative(weight_decay, "weight_decay")
  validation.check_positive(epochs, "epochs")
  relation = _check_relation(relation, trainer.RELATION, "DP-SGD")
  delta = validation.check_delta(delta)
  steps = trainer.make_plan(num_examples, sampling_rate=sampling_rate,
                            clip_norm=clip_norm, epochs=epochs,
                            noise_multiplier=noise_multiplier,
                            epsilon=epsilon, delta=delta)
  # The steps' guarantee is the fit's: record() enters exactly their
  # entries (under this learner's labels).
  return RFFDPSGDPlan(steps.epsilon, steps.target_epsilon, delta, relation,
                      steps, loss, num_classes, learning_rate, weight_decay)


def huber_hinge(z: jax.Array, h: float = HUBER_H) -> jax.Array:
  """The Huber hinge of the margin z: |dℓ/dz| ≤ 1 (see mechanisms.erm)."""
  return jnp.where(z > 1.0 + h, 0.0,
                   jnp.where(z < 1.0 - h, 1.0 - z,
                             (1.0 + h - z) ** 2 / (4.0 * h)))


def _binary_loss(kind):
  def fn(layers, example):
    phi, y = example
    margin = y * layers.dense("out", phi)[0]
    if kind is options.RFFLoss.HUBER_HINGE:
      return huber_hinge(margin)
    return jax.nn.softplus(-margin)
  return fn


def _softmax_loss(layers, example):
  phi, y = example
  logits = layers.dense("out", phi)
  return optax.softmax_cross_entropy_with_integer_labels(
      logits, y.astype(jnp.int32))


def layered_loss(loss) -> ghost.LayeredLoss:
  """The per-example loss on (φ, y) as a :mod:`dpcore.ghost` layered loss."""
  loss = options.parse(options.RFFLoss, loss, "loss")
  fn = (_softmax_loss if loss is options.RFFLoss.SOFTMAX
        else _binary_loss(loss))
  return ghost.layered(fn)


def initial_params(plan: RFFDPSGDPlan, num_features: int) -> dict:
  """Zero weights and bias: data-independent."""
  return {"out": {"w": jnp.zeros((num_features, plan.outputs),
                                 jnp.float32),
                  "b": jnp.zeros((plan.outputs,), jnp.float32)}}


@jax.jit
def release_dpsgd(key: jax.Array, plan: RFFDPSGDPlan,
                  feature_map: FeatureMap, x: jax.Array, y: jax.Array
                  ) -> dict:
  """The DP-SGD mechanism: trained ``{"out": {"w", "b"}}`` on φ(x).

  Pure and jittable (vmap over ``key`` for repeats); checks shapes only —
  :func:`fit_dpsgd` is the checked entry point. φ is computed here, inside
  the mechanism, so its bound cannot be bypassed by the caller. The plan
  and the map are arguments (pytrees of their numbers): one compilation
  per data shape serves every ε, σ, feature key and γ.

  Args:
    key: PRNG key of the run (batches and noise).
    plan: from :func:`make_dpsgd_plan`.
    feature_map: from :func:`make_feature_map`.
    x: (N, d) rows.
    y: (N,) labels ±1 (binary losses) or 0..K−1 (softmax).

  Returns:
    The released parameters ``{"out": {"w": (D, K), "b": (K,)}}``.

  Privacy: neighbouring data sets differ by adding or removing one row
  (N and q public, as in :func:`dpcore.trainer.train`). Each step clips
  every example's gradient of (w, bias) to norm C on the layered fast path
  (:meth:`dpcore.ghost.LayeredLoss.clipped_sum`) and adds N(0, σ²C²); a
  row enters only through its own φ(xᵢ) and label, so the sensitivity of
  a step's sum is C whatever the data (a label outside the loss's range —
  never accepted by :func:`fit_dpsgd` — changes the gradient, not this
  bound). The T steps are the Poisson-subsampled Gaussian mechanism that
  :meth:`RFFDPSGDPlan.record` enters: (ε, δ)-DP with ε from the ledger,
  plus the padding's truncation probability in δ. The initial parameters
  and the optimiser do not read the data; (ω, b) is public.
  """
  phi = features(feature_map, x)
  if plan.loss in _BINARY:
    y = y.astype(phi.dtype)
  else:
    y = y.astype(jnp.int32)
  optimizer = optax.sgd(plan.learning_rate)
  if plan.weight_decay > 0:
    optimizer = optax.chain(optax.add_decayed_weights(plan.weight_decay),
                            optimizer)
  params = initial_params(plan, feature_map.num_features)
  return trainer.train(key, plan.dpsgd, layered_loss(plan.loss), params,
                       (phi, y), optimizer).params


def fit_dpsgd(key: jax.Array, plan: RFFDPSGDPlan, feature_map: FeatureMap,
              x, y) -> RandomFeatureModel:
  """Checks the data, then releases a model by :func:`release_dpsgd`.

  Args:
    key: PRNG key of the run (batches and noise); it must not be the
      feature map's key.
    plan: from :func:`make_dpsgd_plan` (N must equal ``len(x)``).
    feature_map: from :func:`make_feature_map` (d must match ``x``).
    x: (N, d) finite rows (any scale: φ is bounded whatever x is).
    y: labels ±1 (binary losses) or 0..K−1 (softmax).

  Returns:
    :class:`RandomFeatureModel`.

  Raises:
    ValueError: a plan not from :func:`make_dpsgd_plan`, the map's own
      key, or data that does not fit the plan and map (before any work).

  Privacy: (ε, δ)-DP under add/remove-one, as :func:`release_dpsgd`
  states; record it with ``plan.record(ledger)``.
  """
  validation.check_key(key)
  if not isinstance(plan, RFFDPSGDPlan):
    raise ValueError(f"plan must come from make_dpsgd_plan, got "
                     f"{type(plan).__name__}.")
  _check_keys_differ(key, feature_map)
  x, y = _check_data(feature_map, x, y, loss=plan.loss,
                     num_classes=plan.num_classes, rows=plan.num_examples)
  params = release_dpsgd(key, plan, feature_map,
                         jnp.asarray(x, jnp.float32), jnp.asarray(y))
  return RandomFeatureModel(feature_map,
                            np.asarray(params["out"]["w"], np.float64),
                            np.asarray(params["out"]["b"], np.float64),
                            plan.loss, "dpsgd")


# -- learner 2: output perturbation --------------------------------------------


@dataclasses.dataclass(frozen=True)
class RFFOutputPerturbationPlan:
  """The public facts of one output-perturbation release on φ/√2.

  Attributes:
    epsilon: the guarantee: the pure ε that a ledger holding
      :meth:`record`'s entry reports (the target itself: the noise scale
      is calibrated exactly).
    target_epsilon: the budget ε the noise scale was calibrated for.
    delta: 0 (pure DP).
    relation: replace one row, n public
      (:data:`mechanisms.erm.output_perturbation.RELATION`).
    linear: the
      :class:`mechanisms.erm.output_perturbation.OutputPerturbationPlan`
      of the C-SVC on the rows [φ/√2, 1]/√2 (C, Δ₂ = 2C(1 + ρ), the noise scale
      Δ₂/ε).
    tol: the dual solver's projected-gradient tolerance.
    max_epochs: the dual solver's epoch cap.
  """
  epsilon: float
  target_epsilon: float
  delta: float
  relation: options.Relation
  linear: output_perturbation.OutputPerturbationPlan
  tol: float = 1e-8
  max_epochs: int = 10_000

  @property
  def c(self) -> float:
    """C of the bias-free C-SVC on φ/√2."""
    return self.linear.c

  @property
  def sensitivity(self) -> float:
    """Δ₂ = 2C(1 + ρ): the exact minimiser's 2C, widened for the
    solver's certified gap."""
    return self.linear.sensitivity

  @property
  def noise_scale(self) -> float:
    """Δ₂/ε: the noise has density ∝ exp(−‖b‖/scale)."""
    return self.linear.scale

  def record(self, ledger: accounting.PrivacyLedger, *,
             label: str = "rff_output_perturbation",
             count: int = 1) -> None:
    """Records ``count`` releases of this plan (same data) in ``ledger``:
    one pure ε entry, replace-one
    (:meth:`mechanisms.erm.output_perturbation.OutputPerturbationPlan.record`).
    The feature map costs nothing (public)."""
    self.linear.record(ledger, label=label, count=count)


def make_output_perturbation_plan(
    *, c: float, epsilon: float, tol: float = 1e-8,
    max_epochs: int = 10_000,
    relation: options.Relation | str = output_perturbation.RELATION
) -> RFFOutputPerturbationPlan:
  """Fixes an output-perturbation release's public settings (host side).

  Args:
    c: C > 0 of the C-SVC on φ/√2.
    epsilon: the budget ε of the release (the noise scale 2C(1 + ρ)/ε).
    tol: the solver's projected-gradient tolerance (the release also
      runs until its certified duality gap covers the solver's gap, so
      ``tol`` does not bear on the guarantee).
    max_epochs: the solver's epoch cap.
    relation: replace-one, the only relation the sensitivity 2C is
      proven for.

  Returns:
    :class:`RFFOutputPerturbationPlan` (δ = 0).

  Raises:
    ValueError: a bad setting, named with its fix.

  Privacy: see :func:`release_output_perturbation`.
  """
  c = validation.check_positive(c, "c")
  epsilon = validation.check_epsilon(epsilon)
  tol = validation.check_positive(tol, "tol")
  max_epochs = validation.check_count(max_epochs, "max_epochs")
  relation = _check_relation(relation, output_perturbation.RELATION,
                             "output perturbation")
  linear = output_perturbation.make_plan(epsilon=epsilon, c=c)
  # Its guarantee is the C-SVC's: record() enters exactly that entry.
  return RFFOutputPerturbationPlan(linear.epsilon, linear.target_epsilon,
                                   linear.delta, relation, linear, tol,
                                   max_epochs)


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


def exact_weights(plan: RFFOutputPerturbationPlan, feature_map: FeatureMap,
                  x, y) -> np.ndarray:
  """The noiseless minimiser w̃ (D + 1,) on [φ/√2, 1]/√2 (never release).

  For diagnostics and audits: :func:`release_output_perturbation` is
  the certified solver's ŵ (within ρC of this) plus noise.
  """
  x, y = _check_data(feature_map, x, y, loss=options.RFFLoss.HUBER_HINGE,
                     num_classes=2, both_classes=False)
  w_aug, _, _ = output_perturbation.fit_linear(
      unit_features(feature_map, x), y, c=plan.c, tol=plan.tol,
      max_epochs=plan.max_epochs)
  return w_aug


def release_output_perturbation(key: jax.Array,
                                plan: RFFOutputPerturbationPlan,
                                feature_map: FeatureMap, x, y
                                ) -> RandomFeatureModel:
  """A linear C-SVC on φ/√2, released by output perturbation.

  Host side (the dual solver runs until its duality gap is certified,
  then one noise draw).

  Args:
    key: PRNG key of the noise (not the feature map's key).
    plan: from :func:`make_output_perturbation_plan`.
    feature_map: from :func:`make_feature_map`.
    x: (n, d) finite rows (any scale).
    y: labels ±1, both present.

  Returns:
    :class:`RandomFeatureModel` (loss ``"hinge"``: binary, one score).

  Raises:
    ValueError: a plan not from :func:`make_output_perturbation_plan`, the
      map's own key, or bad data (before any work).
    ConvergenceError: the solver's gap was not certified within
      ``plan.max_epochs`` (nothing is released).

  Privacy: neighbouring data sets differ by replacing one row (n public).
  The rows the solver sees are x̃ = [φ(x)/√2, 1]/√2 with ‖x̃‖ ≤ 1 for every
  x, because ‖φ(x)‖ ≤ √2 by construction (the map is cosines; no clip is
  active). The exact minimiser of ½‖w̃‖² + C Σ hinge then has L2
  sensitivity 2C, the solver's certified solution 2C(1 + ρ), and
  :func:`mechanisms.erm.output_perturbation.release` adds noise of
  density ∝ exp(−ε‖b‖/(2C(1 + ρ))): (w, bias) is ε-DP (pure) — the one
  entry :meth:`RFFOutputPerturbationPlan.record` makes. (ω, b) is public.
  """
  validation.check_key(key)
  if not isinstance(plan, RFFOutputPerturbationPlan):
    raise ValueError(f"plan must come from make_output_perturbation_plan, "
                     f"got {type(plan).__name__}.")
  _check_keys_differ(key, feature_map)
  x, y = _check_data(feature_map, x, y, loss=options.RFFLoss.HUBER_HINGE,
                     num_classes=2)
  linear = output_perturbation.release(
      key, plan.linear, unit_features(feature_map, x), y, tol=plan.tol,
      max_epochs=plan.max_epochs)
  # The release is linear in φ/√2; expressed on φ itself.
  weights = np.asarray(linear.w, np.float64)[:, None] / FEATURE_BOUND
  return RandomFeatureModel(feature_map, weights,
                            np.asarray([linear.b], np.float64), "hinge",
                            "output_perturbation")


__all__ = [
    "FEATURE_BOUND",
    "FeatureMap",
    "HUBER_H",
    "RFFDPSGDPlan",
    "RFFOutputPerturbationPlan",
    "RandomFeatureModel",
    "approximate_kernel",
    "check_loss",
    "exact_weights",
    "features",
    "fit_dpsgd",
    "huber_hinge",
    "initial_params",
    "layered_loss",
    "make_dpsgd_plan",
    "make_feature_map",
    "make_output_perturbation_plan",
    "release_dpsgd",
    "release_output_perturbation",
    "resolve_gamma",
    "unit_features",
]
