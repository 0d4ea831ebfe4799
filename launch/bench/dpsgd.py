r"""Benchmark: a DP-SGD step of ``dpcore.trainer`` against a plain SGD step.

For softmax regression 784 → 10 and an MLP 784 → 256 → 10 on MNIST's
60,000 training rows (pixels / 255, rows scaled to unit norm), expected
batch 256, times per step:

* ``plain``: minibatch SGD on a fixed-size batch of 256 rows cut from a
  shuffled copy of the data (the usual non-private loop): ``jax.grad`` of
  the mean loss and an update;
* ``dp_ghost``: :func:`dpcore.trainer.train` with a layered loss
  (:mod:`dpcore.ghost`): Poisson batch padded to B, per-example norms from
  layer inputs and output gradients, the clipped sum as one weighted
  product per layer, float-safe Gaussian noise, update;
* ``dp_vmap``: the same trainer on the ``vmap(grad)`` path (per-example
  gradients materialised; few steps, it is slow for the MLP);
* breakdown: ``sampling_only`` (the Poisson batch alone) and ``noise_only``
  (the noise for every parameter alone).

Every path runs ``--steps_per_call`` steps inside one jitted ``lax.scan``;
the paths are compiled first and then timed round-robin (load from other
processes hits them alike); a record gives the median seconds per step,
steps per second, one epoch's seconds (1/q steps) and the ratio to
``plain``. Nothing trained here is released (records say so)::

  python -m launch.bench.dpsgd
  python -m launch.bench.dpsgd --dataset=synthetic:rows=60000,d=784
"""

from __future__ import annotations

import math

from absl import flags

from launch import common

_DATASET = flags.DEFINE_string(
    "dataset", "mnist", "mnist, fashion_mnist or synthetic:rows=N,d=D.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Where the data files are.")
_MODELS = flags.DEFINE_list("models", ["softmax", "mlp"],
                            "softmax and/or mlp.")
_BATCH = flags.DEFINE_integer("batch", 256, "Expected batch size qN.")
_HIDDEN = flags.DEFINE_integer("hidden", 256, "The MLP's hidden units.")
_STEPS = flags.DEFINE_integer("steps_per_call", 50,
                              "Steps per timed call (one lax.scan).")
_REPEATS = flags.DEFINE_integer("repeats", 7, "Timed calls per path.")
_VMAP_STEPS = flags.DEFINE_integer(
    "vmap_steps", 5, "Steps per call of the dp_vmap path (0: skip it).")
_SIGMA = flags.DEFINE_float("noise_multiplier", 1.0, "σ.")
_CLIP = flags.DEFINE_float("clip_norm", 1.0, "C.")
_LR = flags.DEFINE_float("learning_rate", 0.5, "SGD learning rate.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.")
_OUT = flags.DEFINE_string("out", "results/bench_dpsgd.jsonl", "JSON lines.")

TIMING_ONLY = "timing benchmark: nothing trained here is released"
PATHS = ("plain", "dp_ghost", "dp_vmap", "sampling_only", "noise_only")


def _validate():
  for model in _MODELS.value:
    if model not in ("softmax", "mlp"):
      raise ValueError(f"--models takes softmax and/or mlp, got {model!r}.")
  for flag, value in (("--batch", _BATCH.value), ("--hidden", _HIDDEN.value),
                      ("--steps_per_call", _STEPS.value),
                      ("--repeats", _REPEATS.value)):
    if value < 1:
      raise ValueError(f"{flag} must be ≥ 1, got {value}.")
  if _VMAP_STEPS.value < 0:
    raise ValueError(f"--vmap_steps must be ≥ 0, got {_VMAP_STEPS.value}.")
  if not (_SIGMA.value > 0 and _CLIP.value > 0 and _LR.value > 0):
    raise ValueError("--noise_multiplier, --clip_norm and --learning_rate "
                     "must be > 0.")


def load_rows(name: str, data_dir: str | None):
  """Training rows scaled by the public pixel bound, then to unit norm."""
  import numpy as np

  from dpcore import clipping
  from launch.data import loaders
  data = loaders.load_dataset(name, data_dir=data_dir)
  x = np.asarray(clipping.unit_rows(data.x_train.astype(np.float32),
                                    data.bounds), np.float32)
  return x, data.y_train.astype(np.int32), len(data.classes)


def model_loss(model: str):
  """The per-example layered loss of ``model`` (see :mod:`dpcore.ghost`)."""
  import jax
  import optax

  def softmax(layers, example):
    x, y = example
    return optax.softmax_cross_entropy_with_integer_labels(
        layers.dense("out", x), y)

  def mlp(layers, example):
    x, y = example
    h = jax.nn.relu(layers.dense("hidden", x))
    return optax.softmax_cross_entropy_with_integer_labels(
        layers.dense("out", h), y)

  return {"softmax": softmax, "mlp": mlp}[model]


def model_params(key, model: str, dim: int, classes: int, hidden: int):
  import jax

  from dpcore import ghost
  k1, k2 = jax.random.split(key)
  if model == "softmax":
    return {"out": ghost.init_dense(k1, dim, classes, scale=0.0)}
  return {"hidden": ghost.init_dense(k1, dim, hidden),
          "out": ghost.init_dense(k2, hidden, classes)}


def make_paths(key, x, y, params, loss, *, batch, steps, vmap_steps, sigma,
               clip_norm, learning_rate):
  """Jitted ``(params) -> params`` for every path, and the plan."""
  import jax
  import jax.numpy as jnp
  import optax

  from dpcore import dpsgd, ghost, noise, trainer

  n = x.shape[0]
  q = batch / n
  fast = ghost.layered(loss)
  sgd = optax.sgd(learning_rate)
  plan = trainer.make_plan(n, sampling_rate=q, steps=steps,
                           clip_norm=clip_norm, noise_multiplier=sigma)
  vmap_plan = trainer.make_plan(n, sampling_rate=q, steps=max(vmap_steps, 1),
                                clip_norm=clip_norm, noise_multiplier=sigma)
  order = jax.random.permutation(jax.random.fold_in(key, 1), n)
  xs, ys = x[order], y[order]
  per_batch = jax.vmap(fast, in_axes=(None, 0))
  sample_key, noise_key = jax.random.split(key)

  def plain(params, x, y):
    del x, y  # the shuffled copy is cut into fixed-size batches

    def step(carry, t):
      params, state = carry
      start = (t * batch) % (n - batch + 1)
      xb = jax.lax.dynamic_slice_in_dim(xs, start, batch)
      yb = jax.lax.dynamic_slice_in_dim(ys, start, batch)
      g = jax.grad(lambda p: jnp.mean(per_batch(p, (xb, yb))))(params)
      u, state = sgd.update(g, state, params)
      return (optax.apply_updates(params, u), state), None

    (params, _), _ = jax.lax.scan(step, (params, sgd.init(params)),
                                  jnp.arange(steps))
    return params

  def dp_ghost(params, x, y):
    return trainer.train(key, plan, fast, params, (x, y), sgd).params

  def dp_vmap(params, x, y):
    return trainer.train(key, vmap_plan, None, params, (x, y), sgd,
                         clipped_sum=trainer.per_example_clipped_sum(fast)
                         ).params

  def sampling_only(params, x, y):
    del x, y

    def step(total, t):
      b = dpsgd.poisson_batch(jax.random.fold_in(sample_key, t), n,
                              sampling_rate=q, max_batch=plan.max_batch,
                              method=plan.sampler)
      return total + jnp.sum(b.indices) + b.size, None

    total, _ = jax.lax.scan(step, jnp.zeros((), jnp.int32),
                            jnp.arange(steps))
    return params, total

  def noise_only(params, x, y):
    del x, y
    leaves, treedef = jax.tree.flatten(params)

    def step(acc, t):
      keys = jax.random.split(jax.random.fold_in(noise_key, t), len(leaves))
      return [a + noise.gaussian_noise(k, a.shape, stddev=sigma * clip_norm)
              for a, k in zip(acc, keys, strict=True)], None

    acc, _ = jax.lax.scan(step, leaves, jnp.arange(steps))
    return jax.tree.unflatten(treedef, acc)

  fns = {"plain": plain, "dp_ghost": dp_ghost, "dp_vmap": dp_vmap,
         "sampling_only": sampling_only, "noise_only": noise_only}
  steps_of = {p: steps for p in fns}
  steps_of["dp_vmap"] = vmap_steps
  if vmap_steps == 0:
    del fns["dp_vmap"]
  return {p: jax.jit(f) for p, f in fns.items()}, steps_of, plan


def run(model: str, x, y, classes: int) -> list[dict]:
  """Times every path for one model; returns the records."""
  import jax
  import numpy as np

  key = jax.random.fold_in(jax.random.key(_SEED.value), len(model))
  loss = model_loss(model)
  params = model_params(jax.random.fold_in(key, 7), model, x.shape[1],
                        classes, _HIDDEN.value)
  fns, steps_of, plan = make_paths(
      key, x, y, params, loss, batch=_BATCH.value, steps=_STEPS.value,
      vmap_steps=_VMAP_STEPS.value, sigma=_SIGMA.value,
      clip_norm=_CLIP.value, learning_rate=_LR.value)
  # dp_vmap takes minutes per call for the MLP: two calls suffice.
  timed = common.round_robin(
      {path: lambda _, fn=fn: fn(params, x, y) for path, fn in fns.items()},
      repeats=_REPEATS.value, most={"dp_vmap": 2}, label=model)
  compile_s = timed.first_call
  times = {path: [s / steps_of[path] for s in timed.wall[path]]
           for path in fns}
  base = float(np.median(times["plain"]))
  steps_per_epoch = math.ceil(x.shape[0] / _BATCH.value)
  records = []
  for path in fns:
    per_step = float(np.median(times[path]))
    records.append({
        "model": model, "path": path, "dataset": _DATASET.value,
        "num_examples": int(x.shape[0]), "dim": int(x.shape[1]),
        "hidden": _HIDDEN.value if model == "mlp" else None,
        "parameters": int(sum(a.size for a in jax.tree.leaves(params))),
        "expected_batch": _BATCH.value, "max_batch": plan.max_batch,
        "sampler": plan.sampler, "noise_multiplier": _SIGMA.value,
        "clip_norm": _CLIP.value, "seconds_per_step": per_step,
        "steps_per_second": 1.0 / per_step,
        "epoch_seconds": per_step * steps_per_epoch,
        "ratio_to_plain": per_step / base, "steps_per_call": steps_of[path],
        "calls": len(times[path]), "compile_seconds": compile_s[path],
        "platform": jax.default_backend(), "device": str(jax.devices()[0]),
        "jax_version": jax.__version__, "seed": _SEED.value,
        "privacy": _no_guarantee()})
  return records


def _no_guarantee():
  from dpcore import accounting
  return accounting.no_guarantee_record(TIMING_ONLY)


def main(argv):
  del argv
  _validate()
  common.check_output_path(_OUT.value)
  with common.heavy_imports():
    import jax  # noqa: F401
  x, y, classes = load_rows(_DATASET.value, _DATA_DIR.value)
  if _BATCH.value >= x.shape[0]:
    raise ValueError(f"--batch={_BATCH.value} must be below the "
                     f"{x.shape[0]} rows.")
  for model in _MODELS.value:
    for record in run(model, x, y, classes):
      common.emit_record(record, _OUT.value)
      common.progress(
          f"{model} {record['path']}: {1e3 * record['seconds_per_step']:.3f}"
          f" ms/step, {record['ratio_to_plain']:.2f}× plain")


if __name__ == "__main__":
  common.run_cli(main)
