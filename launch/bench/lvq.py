r"""Benchmark: one DP-SGD step of G(M)LVQ against a non-private step.

Times, for GLVQ and full-rank GMLVQ on MNIST-sized inputs (batch 140,
d = 784, 10 prototypes, random data in [−1, 1]^d):

* ``plain``: gradient of the batch cost (``jax.grad``) + SGD update;
* ``dp_vmap``: per-example gradients by ``vmap(grad)``, joint clipping, sum,
  Gaussian noise (``dpcore.dpsgd.dp_aggregate``) + SGD update;
* ``dp_ghost``: closed-form per-example norms and one weighted backward
  pass (``mechanisms.lvq.clip.clipped_gradient_sum``), noise + update;
* breakdown: ``ghost_clip_only`` (dp_ghost without the noise) and
  ``noise_only`` (the Gaussian draw over all parameters alone).

Each step is jitted and compiled first; the paths are then timed
round-robin (so load from other processes hits all alike) and the median of
``--repeats`` calls is reported (``--slow_repeats`` for the vmap path,
which is far slower for GMLVQ), with the ratio to ``plain``. One JSON record
per (model, path); nothing is released, so each record's ``"privacy"``
claims no guarantee::

  python -m launch.bench.lvq --repeats=50
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import flags

from dpcore import accounting, dpsgd
from launch import common
from mechanisms.lvq import clip as lvq_clip
from mechanisms.lvq import init as lvq_init
from mechanisms.lvq import model as lvq

_BATCH = flags.DEFINE_integer("batch", 140, "Batch size.")
_DIM = flags.DEFINE_integer("dim", 784, "Input dimension d.")
_CLASSES = flags.DEFINE_integer("classes", 10, "Classes (= prototypes).")
_REPEATS = flags.DEFINE_integer("repeats", 30, "Timed calls per path.")
_SLOW_REPEATS = flags.DEFINE_integer("slow_repeats", 5,
                                    "Timed calls of the dp_vmap path.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.")
_OUT = flags.DEFINE_string("out", "results/bench_lvq.jsonl", "JSON lines.")

TIMING_ONLY = "timing benchmark: steps on random data, nothing released"


def make_steps(key, *, batch, dim, classes, model):
  """The three jitted steps and their common inputs."""
  kx, ky, kw, kn = jax.random.split(key, 4)
  x = jax.random.uniform(kx, (batch, dim), minval=-1.0, maxval=1.0)
  y = jax.random.randint(ky, (batch,), 0, classes)
  labels = lvq_init.prototype_labels(classes)
  params = {"prototypes": jax.random.uniform(kw, (classes, dim),
                                             minval=-0.5, maxval=0.5)}
  if model == "gmlvq":
    params["omega"] = lvq.init_omega(dim)
  mask = jnp.ones((batch,), jnp.float32)
  sgd = optax.sgd(0.05)

  def plain(params, opt_state):
    g = jax.grad(lvq.cost)(params, x, y, labels)
    g = jax.tree.map(lambda t: t / batch, g)
    u, opt_state = sgd.update(g, opt_state, params)
    return optax.apply_updates(params, u), opt_state

  agg_v = optax.chain(dpsgd.dp_aggregate(
      kn, clip_norm=0.5, noise_multiplier=1.0,
      expected_batch_size=float(batch)), sgd)
  agg_g = optax.chain(dpsgd.dp_aggregate(
      kn, clip_norm=0.5, noise_multiplier=1.0,
      expected_batch_size=float(batch), presummed=True), sgd)

  def dp_vmap(params, opt_state):
    g = lvq_clip.per_example_gradients(params, x, y, labels)
    u, opt_state = agg_v.update(g, opt_state, params, mask=mask)
    return optax.apply_updates(params, u), opt_state

  def dp_ghost(params, opt_state):
    g, _ = lvq_clip.clipped_gradient_sum(params, x, y, labels,
                                         clip_norm=0.5, mask=mask)
    u, opt_state = agg_g.update(g, opt_state, params)
    return optax.apply_updates(params, u), opt_state

  def ghost_clip_only(params, opt_state):
    # Breakdown: the clipping of dp_ghost without the noise draw.
    g, _ = lvq_clip.clipped_gradient_sum(params, x, y, labels,
                                         clip_norm=0.5, mask=mask)
    g = jax.tree.map(lambda t: t / batch, g)
    u, opt_state = sgd.update(g, opt_state, params)
    return optax.apply_updates(params, u), opt_state

  def noise_only(params, opt_state):
    # Breakdown: the noise draw of dp_aggregate alone (no gradient).
    zeros = jax.tree.map(jnp.zeros_like, params)
    u, opt_state = agg_g.update(zeros, opt_state, params)
    return optax.apply_updates(params, u), opt_state

  return params, {
      "plain": (jax.jit(plain), sgd.init(params)),
      "dp_vmap": (jax.jit(dp_vmap), agg_v.init(params)),
      "dp_ghost": (jax.jit(dp_ghost), agg_g.init(params)),
      "ghost_clip_only": (jax.jit(ghost_clip_only), sgd.init(params)),
      "noise_only": (jax.jit(noise_only), agg_g.init(params)),
  }


def main(argv):
  del argv
  key = jax.random.key(_SEED.value)
  for model in ("glvq", "gmlvq"):
    params, steps = make_steps(
        jax.random.fold_in(key, model == "gmlvq"), batch=_BATCH.value,
        dim=_DIM.value, classes=_CLASSES.value, model=model)
    timed = common.round_robin(
        {path: lambda _, fn=fn, s=state, p=params: fn(p, s)
         for path, (fn, state) in steps.items()},
        repeats=_REPEATS.value, most={"dp_vmap": _SLOW_REPEATS.value})
    compile_s, times = timed.first_call, timed.wall
    base = float(np.median(times["plain"]))
    for path in steps:
      secs = float(np.median(times[path]))
      record = {"model": model, "path": path, "batch": _BATCH.value,
                "dim": _DIM.value, "prototypes": _CLASSES.value,
                "seconds": secs, "compile_seconds": compile_s[path],
                "ratio_to_plain": secs / base, "repeats": len(times[path]),
                "platform": jax.default_backend(),
                "device": str(jax.devices()[0]), "seed": _SEED.value,
                "privacy": accounting.no_guarantee_record(TIMING_ONLY)}
      common.emit_record(record, _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
