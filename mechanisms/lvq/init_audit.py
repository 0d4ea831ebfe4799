"""Audit specs of DP-G(M)LVQ's private init (:mod:`mechanisms.lvq.init`).

The released prototypes, the noisy class means, for a canary row added to
one class (add/remove, the init's relation): ``lvq_init_laplace@first``,
``@middle``, ``@last`` (the paper's Laplace counts and sums) and
``lvq_init_gaussian@…`` (the Gaussian alternative), the canary at the
first, middle or last row of its data set. Each init's broken variant,
``lvq_init_laplace_box_skipped`` and ``lvq_init_gaussian_box_skipped``,
reported with its plan's ε, must be caught: the rows reach the class sums
without being clipped to the box [−1, 1]^d whose sensitivity (L1 d, or
L2 √(1 + d) with the counts) the noise is sized for.

Set-up (d = 1, two classes): 40 rows of value 0 in class 0 and 40 in
class 1; the canary, value 10, which the library clips to 1 (a corner of
the box; the audit also tests that clip), joins class 0. Class
0's prototype is (S + Z_S) / max(N + Z_N, 1), clipped to [−1, 1]: the
canary moves S by 1 and N by 1. The statistic is that prototype. Most of
what it can show is the sums' half of the budget (ε₁/2 for the Laplace
init; for the Gaussian, the sums' share of the joint sensitivity √(1 + d)),
so the audit's bound sits well under the claim: it tests that the release
spends no more than claimed, not that the claim is tight.

At d = 1 the L1 and L2 norms and the dimension factor are all 1, so a
noise scale that forgot d would pass there. ``lvq_init_laplace_d4@…`` and
``lvq_init_gaussian_d4@…`` (d = :data:`WIDE_DIM`) put the canary, 10 in
every coordinate, at the box's corner (1, …, 1), which moves class 0's
sum by d in L1 and √d in L2; their broken variants,
``lvq_init_laplace_d4_scale_as_d1`` and ``lvq_init_gaussian_d4_scale_as_d1``,
size the noise as for d = 1 (Laplace(2/ε₁) on the sums; σ_init·√2 on
counts and sums) and must be caught. The Laplace statistic is
Σⱼ clip(40·pⱼ, −½, 3/2) over class 0's prototype p (a bounded score per
coordinate, near the likelihood ratio of a Laplace shift; a plain sum is
swamped by the tails), the Gaussian one Σⱼ pⱼ.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import accounting, clipping, noise
from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  check_variant,
  claimed_epsilon,
  identity,
)
from mechanisms.lvq import init

ROWS_PER_CLASS = 40
EPSILON = 1.0
AUDIT_DELTA = 1e-2
BROKEN = ("box_skipped",)
WIDE_BROKEN = ("scale_as_d1",)
WIDE_DIM = 4
"""d of the wide specs (the dimension factor of the noise scale shows)."""
CANARY_OUTSIDE = 10.0
"""The canary's value: outside the box; the library clips it to 1, the
broken variant does not."""


def unclipped_laplace(key, plan: init.LaplacePlan, x, y, *,
                      num_classes: int) -> jax.Array:
  """``init.release_laplace`` without the clip to the box (broken).

  The same keys, noise scales (2/ε₁, 2d/ε₁) and post-processing
  (:func:`mechanisms.lvq.init.laplace_means`); only the clip is left out,
  so a row outside [−1, 1]^d moves its class sum by more than the
  sensitivity d the noise assumes.
  """
  count_key, sum_key, _ = jax.random.split(key, 3)
  return init.laplace_means(count_key, sum_key, plan, x, y,
                            num_classes=num_classes)


def unclipped_gaussian(key, plan: init.GaussianPlan, x, y, *,
                       num_classes: int) -> jax.Array:
  """``init.release_gaussian`` without the clip to the box (broken): the
  same keys, noise (:func:`mechanisms.lvq.init.gaussian_means`) and
  post-processing."""
  count_key, sum_key, _ = jax.random.split(key, 3)
  return init.gaussian_means(count_key, sum_key, plan, x, y,
                             num_classes=num_classes)


_UNCLIPPED = {"laplace": unclipped_laplace, "gaussian": unclipped_gaussian}


def scaled_as_d1(key, plan, x, y, *, num_classes: int) -> jax.Array:
  """The init of ``plan`` with its noise sized as for d = 1 (broken).

  The rows are clipped to the box as the library does, with the same keys
  and post-processing; only the noise scale leaves out the dimension:
  Laplace(2/ε₁) on the sums (L1 sensitivity 1, not d), or σ_init·√2 on
  every count and sum (L2 sensitivity √2, not √(1 + d)).
  """
  count_key, sum_key, _ = jax.random.split(key, 3)
  x = clipping.clip_to_box(x)
  if isinstance(plan, init.LaplacePlan):
    narrow = init.make_laplace_plan(epsilon=plan.epsilon, dim=1)
    return init.laplace_means(count_key, sum_key, narrow, x, y,
                              num_classes=num_classes)
  def gaussian(k, shape):
    return noise.gaussian_noise(k, shape, stddev=plan.noise_multiplier
                                * np.sqrt(2.0), dtype=x.dtype)
  return init._noisy_means(count_key, sum_key, x, y,  # noqa: SLF001
                           num_classes=num_classes, min_count=1.0,
                           count_noise=gaussian, sum_noise=gaussian)


def _data(position: str, canary: float, dim: int = 1):
  """(without, with) the canary: (x, y) pairs, the canary in class 0."""
  y_0 = np.repeat(np.arange(2, dtype=np.int32), ROWS_PER_CLASS)
  x_0 = np.zeros((len(y_0), dim), np.float32)
  at = canary_index(len(y_0) + 1, position)
  x_1 = np.insert(x_0, at, [[canary] * dim], axis=0)
  y_1 = np.insert(y_0, at, 0)
  return (x_0, y_0), (x_1, y_1), at


def init_spec(*, kind: str = "laplace", position: str = "first",
              broken: str | None = None, dim: int = 1) -> AuditSpec:
  """One private initialisation, a canary row in class 0 (add/remove).

  ``kind``: ``"laplace"`` (the paper's) or ``"gaussian"``. ``dim``: 1, or
  :data:`WIDE_DIM` (the ``_d4`` specs). ``broken``: None, or at d = 1
  ``"box_skipped"`` (:data:`BROKEN`), at d = :data:`WIDE_DIM`
  ``"scale_as_d1"`` (:data:`WIDE_BROKEN`); the canary first. The canary
  is :data:`CANARY_OUTSIDE` in every coordinate.
  """
  if kind not in ("laplace", "gaussian"):
    raise ValueError(f"kind must be 'laplace' or 'gaussian', got {kind!r}.")
  if dim not in (1, WIDE_DIM):
    raise ValueError(f"dim must be 1 or {WIDE_DIM}, got {dim!r}.")
  check_variant(broken, BROKEN if dim == 1 else WIDE_BROKEN)
  position = position if broken is None else "first"
  ledger = accounting.PrivacyLedger()
  if kind == "laplace":
    plan = init.make_laplace_plan(epsilon=EPSILON, dim=dim)
    release = init.release_laplace
    delta = 0.0
  else:
    plan = init.make_gaussian_plan(epsilon=EPSILON, delta=AUDIT_DELTA,
                                   dim=dim)
    release = init.release_gaussian
    delta = AUDIT_DELTA
  plan.record(ledger)
  canary = CANARY_OUTSIDE  # boxed to 1 unless the box is skipped
  data_0, data_1, at = _data(position, canary, dim)
  if broken == "box_skipped":
    release = _UNCLIPPED[kind]
  elif broken == "scale_as_d1":
    release = scaled_as_d1

  def mechanism(key, data):
    x, y = data
    return release(key, plan, x, y, num_classes=2)

  def statistic(prototypes):
    # class 0's noisy mean, which the canary raises in every coordinate
    if dim == 1:
      return prototypes[0, 0]
    if kind == "laplace":
      scaled = prototypes[0] * ROWS_PER_CLASS
      return jnp.sum(jnp.clip(scaled, -0.5, 1.5))
    return jnp.sum(prototypes[0])

  base = f"lvq_init_{kind}" + ("" if dim == 1 else f"_d{dim}")
  return AuditSpec(
      **identity(base, position=position, broken=broken,
                 trials=(200_000, 20_000 if dim == 1 else 200_000)),
      relation="add_remove",
      settings={"kind": kind, "epsilon": EPSILON, "dim": dim,
                "rows_per_class": ROWS_PER_CLASS, "canary": canary,
                "canary_row": at, "variant": broken or "library"},
      mechanism=mechanism, data_0=data_0, data_1=data_1,
      statistic=statistic, delta=delta,
      reported_epsilon=claimed_epsilon(ledger, "add_remove", delta or None))


def specs() -> list[AuditSpec]:
  """Both inits at every canary position, then each one's box-skipped
  variant; then the same at d = :data:`WIDE_DIM` with the variants whose
  noise forgets d."""
  kinds = ("laplace", "gaussian")
  return [*(init_spec(kind=k, position=p) for k in kinds for p in POSITIONS),
          *(init_spec(kind=k, broken="box_skipped") for k in kinds),
          *(init_spec(kind=k, position=p, dim=WIDE_DIM) for k in kinds
            for p in POSITIONS),
          *(init_spec(kind=k, broken="scale_as_d1", dim=WIDE_DIM)
            for k in kinds)]


__all__ = ["BROKEN", "WIDE_BROKEN", "WIDE_DIM", "init_spec", "scaled_as_d1",
           "specs", "unclipped_gaussian", "unclipped_laplace"]
