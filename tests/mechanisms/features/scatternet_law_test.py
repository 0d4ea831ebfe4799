"""mechanisms.features.scatternet.release: the rows its DP-SGD uses follow
Poisson(q).

Issue #33: a law test at the call site, not only at the sampler. The
mechanism itself (:func:`mechanisms.features.scatternet.release`: the
softmax head from zero, momentum SGD, :func:`dpcore.trainer.train`) runs
one step with σ = 0 and a clip (1000) no gradient reaches, and the rows
it used are read back from the released bias.

Read-back. K = N classes, row i labelled i. At zero parameters every
row's softmax is uniform, so row i's bias gradient is 1/K − e_i; the
first momentum step is a plain SGD step, so after one step of rate η the
bias is η (s − |S|/K) / (qN), s_i = 1 iff row i was in the batch. The
(runs, N) table of uses is checked by ``tests/law.py`` (every row's rate,
the batch-size law Binomial(N, q), pairs) and must reject 0.8q and 1.25q.
"""

import jax
import jax.numpy as jnp
import numpy as np

from dpcore import trainer
from mechanisms.features import scatternet
from tests import law

N, Q, RUNS = 16, 0.2, 4000
CLIP = 1000.0  # ‖∇ℓ‖ ≤ ‖(x, 1)‖·‖p − e_y‖ < 10 for these rows


def test_one_step_uses_each_row_at_rate_q():
  plan = trainer.make_plan(N, sampling_rate=Q, steps=1, clip_norm=CLIP,
                           noise_multiplier=0.0)
  recipe = scatternet.Recipe(learning_rate=1.0, momentum=0.9)
  x = jax.random.normal(jax.random.key(7), (N, 3), jnp.float32)
  y = jnp.arange(N)
  keys = jax.random.split(jax.random.key(0), RUNS)
  params = jax.vmap(
      lambda k: scatternet.release(k, plan, recipe, x, y, N))(keys)
  bias = np.asarray(params["out"]["b"], np.float64)
  scaled = bias * Q * N / recipe.learning_rate  # s − |S|/K
  used = (scaled > 0).astype(np.int64)
  sizes = used.sum(axis=1, keepdims=True)
  # The read-back is exact to float rounding (a run using every row would
  # read as none; at q = 0.2 none of the 4000 runs uses all 16).
  np.testing.assert_allclose(scaled + sizes / N, used, atol=1e-4)
  law.assert_law(used, Q)
