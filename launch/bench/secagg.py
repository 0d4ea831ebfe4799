r"""Benchmark: a ``trust="distributed"`` step against a server-noise step.

:func:`federated.fedsgd.release` on softmax regression 784 → 10 (MNIST's
shape, d = 7,850 parameters, D = 8,192 after padding), rows of unit norm,
expected batch 256 rows a step (q = 256/N), for each participant count
of ``--participants`` (rows per participant: ``--rows``). Paths:

* ``server``: the server-noise step (the participants' sampled rows
  gathered, clipped per row, summed; one float Gaussian noise);
* ``distributed``: the distributed discrete Gaussian step: per
  participant, per-example gradients, then :func:`dpcore.ddg.encode`
  (clip, scale, rotate, conditional rounding of every real row, the noise
  share of D exact discrete Gaussian draws, mod 2^b) and
  :func:`federated.secagg.mask_message`; server side the unmasking,
  :func:`federated.secagg.server_sum` and :func:`dpcore.ddg.decode`;
* its parts, each alone: ``encode_no_noise`` (gradients and
  :func:`dpcore.ddg.encode_many` without the shares, as the step runs
  it), ``noise_only`` (the P·D share draws), ``masks_only`` (masking
  every message, the unmasking vector and the server's sum),
  ``decode_only``.

Each path runs ``--steps_per_call`` steps (one ``lax.scan`` for the two
whole steps) and is timed after a first, compiling call; the record has
the median seconds per step over ``--repeats`` calls, the ratio to
``server``, the bits each participant sends per step beside 32-bit
floats, and the 1/5/15-minute load averages after the timed calls. One
JSON line per (participants, path) to ``--out``. Nothing is released
(the records say so)::

  python -m launch.bench.secagg
  python -m launch.bench.secagg --participants=5 --rows=10000
"""

from __future__ import annotations

import os

from absl import flags

from launch import common

_PARTICIPANTS = flags.DEFINE_list(
    "participants", ["5", "1000"], "Participant counts, one run each.")
_ROWS = flags.DEFINE_list(
    "rows", ["10000", "60"], "Rows per participant, one per count.")
_BITS = flags.DEFINE_list("bits", ["16", "20"],
                          "b per participant count (see the docs: 1,000 "
                          "participants need 20 bits for a fine grid).")
_DIM = flags.DEFINE_integer("dim", 784, "Input dimension d_in.")
_CLASSES = flags.DEFINE_integer("classes", 10, "Classes.")
_BATCH = flags.DEFINE_integer("batch", 256, "Expected rows a step, qN.")
_STEPS = flags.DEFINE_list(
    "steps_per_call", ["4", "1"],
    "Steps per timed call, one per participant count.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed calls per path.")
_SIGMA = flags.DEFINE_float("noise_multiplier", 1.0, "σ (both paths).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.")
_OUT = flags.DEFINE_string("out", "results/bench_secagg.jsonl",
                           "JSON lines.")

TIMING_ONLY = "timing benchmark: nothing trained here is released"
PATHS = ("server", "distributed", "encode_no_noise", "noise_only",
         "masks_only", "decode_only")


def _settings():
  counts = common.parse_ints(_PARTICIPANTS.value)
  rows = common.parse_ints(_ROWS.value)
  bits = common.parse_ints(_BITS.value)
  steps = common.parse_ints(_STEPS.value)
  for flag, values in (("--rows", rows), ("--bits", bits),
                       ("--steps_per_call", steps)):
    if len(values) != len(counts):
      raise ValueError(f"{flag} needs one value per --participants "
                       f"({len(counts)}), got {len(values)}.")
  for flag, values in (("--participants", counts), ("--rows", rows),
                       ("--steps_per_call", steps),
                       ("--repeats", [_REPEATS.value]),
                       ("--dim", [_DIM.value]), ("--batch", [_BATCH.value])):
    if min(values) < 1:
      raise ValueError(f"{flag} must be ≥ 1, got {values}.")
  if not _SIGMA.value > 0:
    raise ValueError(f"--noise_multiplier must be > 0, got {_SIGMA.value}.")
  return list(zip(counts, rows, bits, steps, strict=True))


def make_paths(key, *, count, rows, bits, steps, dim, classes, batch,
               sigma):
  """Jitted ``() -> result`` per path, and the two plans."""
  import dataclasses

  import jax
  import jax.numpy as jnp
  import optax
  from jax.flatten_util import ravel_pytree

  from dpcore import ddg, discrete, dpsgd
  from federated import fedsgd, secagg
  from mechanisms.erm import softmax

  q = min(1.0, batch / (count * rows))
  kx, ky, kr = jax.random.split(jax.random.fold_in(key, 1), 3)
  x = jax.random.normal(kx, (count, rows, dim), jnp.float32)
  x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
  y = jax.random.randint(ky, (count, rows), 0, classes)
  mask = jnp.ones((count, rows), jnp.float32)
  params = softmax.initial_params(dim, classes)
  size = ravel_pytree(params)[0].size
  common_kw = dict(sampling_rate=q, clip_norm=1.0, steps=steps,
                   noise_multiplier=sigma, delta=1e-5)
  server = fedsgd.make_plan([rows] * count, trust="server", **common_kw)
  dist = fedsgd.make_plan([rows] * count, trust="distributed",
                          model_size=size, bits=bits, **common_kw)
  p = dist.ddg_params
  sgd = optax.sgd(1.0)

  def run(plan):
    return jax.jit(lambda k: fedsgd.release(
        k, plan, softmax.loss, params, x, y, mask, sgd).params)

  def encode_no_noise(k):
    quiet = dataclasses.replace(p, sigma_share=None)

    def one(t, k):
      def participant(i, xp, yp, mp):
        b = dpsgd.poisson_batch(jax.random.fold_in(jax.random.fold_in(
            k, i), t), rows, sampling_rate=q,
            max_batch=dist.row_plan.max_batch, method=dist.row_plan.sampler)
        g = jax.vmap(jax.grad(softmax.loss), in_axes=(None, 0))(
            params, (xp[b.indices], yp[b.indices]))
        flat = jax.vmap(lambda v: ravel_pytree(v)[0])(g)
        return flat, b.slot_mask * mp[b.indices]
      ids = jnp.arange(count)
      flat, weight = jax.vmap(participant)(ids, x, y, mask)
      keys = jax.vmap(lambda i: jax.random.fold_in(k, i))(ids)
      return jnp.sum(ddg.encode_many(keys, kr, flat, weight, params=quiet),
                     axis=0, dtype=jnp.uint32)
    return jax.lax.map(lambda t: one(t, k), jnp.arange(steps))

  def noise_only(k):
    return jax.lax.map(lambda t: discrete.discrete_gaussian(
        jax.random.fold_in(k, t), (count, p.padded), sigma=p.sigma_share),
        jnp.arange(steps))

  def masks_only(k):
    messages = jnp.zeros((count, p.padded), jnp.uint32)
    alive = jnp.ones((count,), bool)

    def one(t):
      masked = jax.vmap(lambda i, m: secagg.mask_message(
          k, t, i, m, count=count, bits=bits))(jnp.arange(count), messages)
      fix = secagg.unmasking(k, t, alive, count=count, padded=p.padded,
                             bits=bits)
      return secagg.server_sum(masked, alive, fix, bits=bits,
                               threshold=count)[0]
    return jax.lax.map(one, jnp.arange(steps))

  def decode_only(k):
    total = jax.random.bits(k, (steps, p.padded), jnp.uint32)
    return jax.vmap(lambda v: ddg.decode(v, kr, params=p))(total)

  paths = {"server": run(server), "distributed": run(dist),
           "encode_no_noise": jax.jit(encode_no_noise),
           "noise_only": jax.jit(noise_only),
           "masks_only": jax.jit(masks_only),
           "decode_only": jax.jit(decode_only)}
  return paths, server, dist, q


def bench(key, *, count, rows, bits, steps, repeats) -> list[dict]:
  """The records of one participant count (module docstring)."""
  import jax
  import numpy as np

  from dpcore import accounting

  paths, server, dist, q = make_paths(
      key, count=count, rows=rows, bits=bits, steps=steps, dim=_DIM.value,
      classes=_CLASSES.value, batch=_BATCH.value, sigma=_SIGMA.value)
  timed = common.round_robin(
      {name: lambda r, fn=fn: fn(jax.random.fold_in(key, 99 if r is None
                                                     else r))
       for name, fn in paths.items()}, repeats=repeats, label=f"P={count}")
  compile_s = timed.first_call
  times = {name: [s / steps for s in timed.wall[name]] for name in paths}
  load = list(os.getloadavg())  # other jobs share the CPU: read beside
  base = float(np.median(times["server"]))
  p = dist.ddg_params
  settings = dist.settings()
  out = []
  for name in paths:
    per_step = float(np.median(times[name]))
    out.append({
        "path": name, "participants": count, "rows_per_participant": rows,
        "model_parameters": p.dim, "padded_dim": p.padded, "bits": bits,
        "sampling_rate": q, "expected_rows_per_step": q * count * rows,
        "max_batch": dist.row_plan.max_batch,
        "server_batch": server.server_batch,
        "sigma_share": float(p.sigma_share), "granularity": p.gamma,
        "noise_multiplier": _SIGMA.value,
        "seconds_per_step": per_step,
        "seconds_per_step_all": times[name],
        "ratio_to_server": per_step / base,
        "first_call_seconds": compile_s[name],
        "steps_per_call": steps, "calls": repeats,
        "bits_per_participant_step": settings["bits_per_participant_step"],
        "float32_bits_per_participant_step":
            settings["float32_bits_per_participant_step"],
        "platform": jax.default_backend(),
        "device": str(jax.devices()[0]), "jax_version": jax.__version__,
        "seed": _SEED.value, "load_average_1_5_15": load,
        "privacy": accounting.no_guarantee_record(TIMING_ONLY)})
  return out


def main(argv):
  del argv
  settings = _settings()
  common.check_output_path(_OUT.value)
  import jax
  key = jax.random.key(_SEED.value)
  for count, rows, bits, steps in settings:
    for record in bench(jax.random.fold_in(key, count), count=count,
                        rows=rows, bits=bits, steps=steps,
                        repeats=_REPEATS.value):
      common.emit_record(record, _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
