"""mechanisms.lvq.train: the rows DP-SGD of G(M)LVQ uses follow Poisson(q).

Issue #33: a law test at the call site, not only at the sampler. The
mechanism itself (:func:`mechanisms.lvq.train.release`: private init, then
:func:`dpcore.trainer.train` with G(M)LVQ's closed-form or ``vmap(grad)``
clipped sums) is run with σ = 0 and a clip (1000) no gradient reaches,
and the rows it used are read back from the released prototypes.

Read-back. G(M)LVQ's loss is fixed, so the data do the work: N = 16
one-hot rows x_j = e_j, two classes of 8 (rows 0–7 class 0, 8–15 class
1), one prototype per class, Ω = I (GMLVQ). The init's ε is huge (its
Laplace noise ~1e-7), so the prototypes start at the class means:
w_c = Σ_{j ∈ c} e_j / 8, zero on the other class's coordinates. Row j of
class c has d⁺ = ‖e_j − w_c‖² = 7/8 and d⁻ = ‖e_j − w_c′‖² = 9/8, and the
gradient of μ = (d⁺ − d⁻)/(d⁺ + d⁻) with respect to its wrong prototype
w_c′ is 4d⁺/(d⁺ + d⁻)² · (e_j − w_c′) = (7/8)(e_j − w_c′). Coordinate j of
w_c′ is 0, and no other row's gradient moves it (theirs is a multiple of
e_k − w, whose coordinate j is −w[j] = 0). So after one SGD step of rate
η, w_c′[j] = −(7/8) η s_j / (qN), s_j = 1 iff row j was in the batch.

The plan's steps are T = round(E / q) with E ≥ 1 an integer (the config
must agree with the plan), so one step needs q ≥ 2/3:
:func:`test_one_step_uses_each_row_at_rate_q` runs q = 0.7 and checks
every row's rate, the batch size Binomial(16, q) and pairs. At a small
rate, :func:`test_steps_use_each_row_at_rate_q` runs q = 0.2, E = 1
(T = 5) with η = 10⁻³: the prototypes then move by O(η) per step, the
per-use increment stays (7/8)η/(qN) to within O(Tη), and w_c′[j] counts
row j's uses over the T steps, checked against Binomial(T, q). Both
check that 0.8q and 1.25q are rejected (``tests/law.py``).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechanisms.lvq import init as lvq_init
from mechanisms.lvq import train as lvq_train
from tests import law

N, CLASSES, RUNS = 16, 2, 4000
CLIP = 1000.0  # every row's joint gradient norm is below 2
INCREMENT = 7 / 8  # 4d⁺/(d⁺ + d⁻)² at d⁺ = 7/8, d⁻ = 9/8


def _data():
  x = jnp.eye(N, dtype=jnp.float32)
  y = jnp.repeat(jnp.arange(CLASSES), N // CLASSES)
  return x, y


def _plan_and_config(q, *, model, ghost_clipping, learning_rate):
  plan = lvq_train.make_plan(
      N, epsilon=8.0, delta=1e-5, sampling_rate=q, epochs=1,
      clip_norm=CLIP, dim=N, sigma_rule="paper",  # the paper's σ: no search
      max_batch=N)  # no truncation: the paper's σ here holds only at ε ≈ 16
  # No noise: an init of ε₁ = 1e9 (Laplace noise ~1e-8) and σ = 0.
  plan = dataclasses.replace(
      plan, init=lvq_init.make_laplace_plan(epsilon=1e9, dim=N),
      dpsgd=dataclasses.replace(plan.dpsgd, noise_multiplier=0.0))
  config = lvq_train.TrainConfig(
      model=model, num_classes=CLASSES, epochs=1, sampling_rate=q,
      learning_rate=learning_rate, max_batch=plan.dpsgd.max_batch,
      ghost_clipping=ghost_clipping)
  return plan, config


def _used(q, *, model="glvq", ghost_clipping=True, learning_rate=1.0,
          runs=RUNS, seed=0):
  """(runs, N) counts of the steps that used each row, and T."""
  plan, config = _plan_and_config(q, model=model,
                                  ghost_clipping=ghost_clipping,
                                  learning_rate=learning_rate)
  x, y = _data()

  def run(key):
    out = lvq_train.release(key, plan, x, y, config)
    return out.params["prototypes"], out.overflow_steps

  keys = jax.random.split(jax.random.key(seed), runs)
  protos, overflow = jax.jit(jax.vmap(run))(keys)
  assert int(overflow.sum()) == 0
  protos = np.asarray(protos)
  # Row j's use is read on the other class's prototype, coordinate j.
  other = 1 - np.asarray(y)
  values = protos[:, other, np.arange(N)]
  unit = -INCREMENT * learning_rate / plan.dpsgd.expected_batch_size
  return law.counts(values, unit), plan.steps


@pytest.mark.parametrize("model,ghost_clipping", [
    pytest.param("glvq", True, marks=pytest.mark.slow), ("glvq", False),
    ("gmlvq", True)])
def test_one_step_uses_each_row_at_rate_q(model, ghost_clipping):
  q = 0.7  # the smallest rates with round(1/q) = 1 are ≥ 2/3
  table, steps = _used(q, model=model, ghost_clipping=ghost_clipping)
  assert steps == 1
  law.assert_law(table, q)


def test_steps_use_each_row_at_rate_q():
  q = 0.2
  table, steps = _used(q, learning_rate=1e-3, runs=2000)
  assert steps == 5
  law.assert_law(table, q, steps=steps)
