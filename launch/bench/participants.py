r"""Benchmark: FedDPDR participants per second, vmapped against a loop.

End to end (each participant's noisy XᵀX and top-k, the server's basis
aggregation, the projection, each participant's one-vs-rest fits, the
model average), timed two ways in one run on the same data and keys: the
library's pipeline and a Python loop over jitted per-participant calls,
with the utility beside the speed. One JSON line per (d, top-k solver, ε)::

  python -m launch.bench.participants --bench_dims=784,64 \
      --bench_participants=200 --bench_rows=60 --bench_k=20

How each side is timed, the data, what the record holds (the captured
variance, the privacy record) and ``--bench_aggregation=moments``:
docs/benchmarks.md (Many participants).
"""

from __future__ import annotations

import os
from functools import cache, partial

import numpy as np
from absl import flags

from launch import common

_DIMS = flags.DEFINE_list("bench_dims", ["784", "64"], "dimensions d")
_PARTICIPANTS = flags.DEFINE_integer("bench_participants", 200,
                                     "participants P")
_ROWS = flags.DEFINE_integer("bench_rows", 60, "rows per participant n")
_K = flags.DEFINE_integer("bench_k", 20, "components k")
_EPSILON = flags.DEFINE_list("bench_epsilon", ["2"],
                             "total ε per participant (one record each)")
_DELTA = flags.DEFINE_float("bench_delta", 1e-4, "δ")
_LAM = flags.DEFINE_float("bench_lam", 0.01, "regularisation λ")
_CHUNK = flags.DEFINE_integer("bench_chunk", None,
                              "participants mapped at a time (vmapped)")
_TOPK = flags.DEFINE_list("bench_topk", ["eigh", "subspace"],
                          "top-k solvers (federated.feddpdr.Config.topk)")
_AGGREGATION = flags.DEFINE_list(
    "bench_aggregation", ["subspace"],
    "server aggregations (federated.feddpdr.Config.aggregation): subspace "
    "(the participants' bases) or moments (their noisy second moments)")
_LOOP = flags.DEFINE_bool("bench_loop", True, "also time the Python loop")
_REPEATS = flags.DEFINE_integer("bench_repeats", 1,
                                "timed calls of the vmapped pipeline")
_SEED = flags.DEFINE_integer("bench_seed", 0, "seed of partition and noise")
_OUT = flags.DEFINE_string("bench_out", "runs/bench_participants.jsonl",
                           "JSON lines output ('' for none)")


def dataset_for(d: int, rows_needed: int) -> str:
  """MNIST at d = 784 when it is here and large enough, else synthetic."""
  from launch.data import loaders  # pylint: disable=g-import-not-at-top
  if d == 784 and rows_needed <= 60_000:
    try:
      loaders.check_dataset("mnist")
      return "mnist"
    except FileNotFoundError:
      pass
  return f"synthetic:rows={rows_needed},d={d},test=2000"


@cache
def _loop_functions():
  """The jitted per-participant calls of the loop (built once, on first
  use, so the warm-up and the timed loop share their compiled programs)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from dpcore import clipping  # pylint: disable=g-import-not-at-top
  from federated import aggregation, feddpdr  # pylint: disable=g-import-not-at-top
  from mechanisms.erm import objective_perturbation as op  # pylint: disable=g-import-not-at-top
  from mechanisms.pca import dp_pca  # pylint: disable=g-import-not-at-top

  def keys(key, i):  # participant i's (DP-PCA, fit) keys, as participant_keys
    pair = jax.random.split(jax.random.fold_in(key, i))
    return pair[0], pair[1]

  @partial(jax.jit, static_argnames=("static",))
  def basis(key, i, x, mask, sigma, *, static):
    return dp_pca.noisy_basis(keys(key, i)[0], x, mask, k=static.k,
                              sigma=sigma, topk=static.topk).components

  @partial(jax.jit, static_argnames=("static", "num_classes"))
  def fit(key, i, x, labels, mask, n, p, theta, epsilon_gap, global_basis, *,
          static, num_classes):
    z = clipping.clip_rows((x @ global_basis).astype(jnp.float64))
    return op.one_vs_rest(
        keys(key, i)[1], z, labels, mask.astype(jnp.float64),
        num_classes=num_classes, num_examples=n, p=p, theta=theta,
        epsilon_gap=epsilon_gap, lam=static.lam, loss=static.loss,
        h=static.huber_h, tol=static.tol, max_iter=static.max_iter,
        private=True)

  @partial(jax.jit, static_argnames=("topk",))
  def aggregate(bases, weights, key, *, topk):
    # As the library's server: a subspace start block from server_key.
    if topk == "subspace":
      return aggregation.subspace_aggregate(
          bases, weights, topk=topk, key=feddpdr.server_key(key))
    return aggregation.subspace_aggregate(bases, weights)

  @partial(jax.jit, static_argnames=("static",))
  def moment(key, i, x, mask, sigma, *, static):
    del static
    return dp_pca.noisy_second_moment(keys(key, i)[0], x, mask, sigma=sigma)

  @partial(jax.jit, static_argnames=("k", "topk"))
  def moments_basis(total, key, *, k, topk):
    if topk == "subspace":
      return aggregation.moments_aggregate(total, k, topk=topk,
                                           key=feddpdr.server_key(key))
    return aggregation.moments_aggregate(total, k)

  average = jax.jit(aggregation.model_aggregate, static_argnames=("paper",))
  return basis, fit, aggregate, average, moment, moments_basis


def loop_train(key, x, labels, mask, sigma, n, p, theta, epsilon_gap, *,
               static, num_classes: int):
  """One repeat of FedDPDR by a Python loop over participants.

  Args: the leaves of one repeat of :func:`federated.feddpdr.train`'s
  arguments (host arrays; the key is the repeat's). Returns its
  :class:`TrainOutput` without the seed axis.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from federated import aggregation, feddpdr  # pylint: disable=g-import-not-at-top

  basis, fit, aggregate, average, moment, moments_basis = _loop_functions()
  count = x.shape[0]
  index = np.arange(count, dtype=np.uint32)
  weights = aggregation.size_weights(n)
  if static.aggregation == "moments":
    total = moment(key, index[0], x[0], mask[0], sigma[0], static=static)
    for i in range(1, count):
      total = total + moment(key, index[i], x[i], mask[i], sigma[i],
                             static=static)
    bases = jnp.zeros((count, 0, 0), x.dtype)
    global_basis = moments_basis(total, key, k=static.k, topk=static.topk)
  else:
    bases = jnp.stack([basis(key, index[i], x[i], mask[i], sigma[i],
                             static=static) for i in range(count)])
    global_basis = aggregate(bases, weights, key, topk=static.topk)
  fits = [fit(key, index[i], x[i], labels[i], mask[i], n[i], p[i], theta[i],
              epsilon_gap[i], global_basis, static=static,
              num_classes=num_classes)
          for i in range(count)]
  fits = jax.tree.map(lambda *a: jnp.stack(a), *fits)
  global_betas = average(fits.beta, weights,
                         paper=static.model_aggregation == "paper")
  return feddpdr.TrainOutput(bases, fits.beta, global_basis, global_betas,
                             fits.grad_norm, fits.iterations, fits.converged)


def captured(x, mask, bases, global_basis, k: int) -> dict:
  """Noise-free variance captured by the bases (docs/benchmarks.md).

  Args:
    x, mask: (P, n, d) rows and (P, n) mask.
    bases: (P, d, k) each participant's noisy-top-k basis, or (P, 0, 0)
      where there is none (``aggregation="moments"``): the local
      fractions are then None.
    global_basis: (d, k).
    k: components.
  """
  rows = (x * mask[..., None]).astype(np.float64)
  pooled = np.einsum("pnd,pne->de", rows, rows)
  best = np.sum(np.linalg.eigvalsh(pooled)[-k:])
  g = np.asarray(global_basis, np.float64)
  global_fraction = float(np.sum(g * (pooled @ g)) / best)
  if np.size(bases) == 0:
    return {"global_captured_fraction": global_fraction,
            "local_captured_fraction_mean": None,
            "local_captured_fraction_median": None,
            "local_random_fraction_mean": None}
  singular = np.linalg.svd(rows, compute_uv=False)  # (P, min(n, d))
  local_best = np.sum(singular[:, :k] ** 2, axis=1)
  projected = np.einsum("pnd,pdk->pnk", rows, np.asarray(bases, np.float64))
  local = np.sum(projected ** 2, axis=(1, 2)) / local_best
  d = x.shape[-1]
  random = (k / d) * np.sum(rows ** 2, axis=(1, 2)) / local_best
  return {"global_captured_fraction": global_fraction,
          "local_captured_fraction_mean": float(np.mean(local)),
          "local_captured_fraction_median": float(np.median(local)),
          "local_random_fraction_mean": float(np.mean(random))}


def benchmark(*, d: int, participants: int, rows: int, k: int,
              epsilon: float, delta: float, lam: float, chunk: int | None,
              topk: str, loop: bool, repeats: int, seed: int,
              aggregation: str = "subspace", prepared=None) -> dict:
  """Times the vmapped pipeline and the loop; measures the utility.

  ``prepared`` (a ``launch.experiments.feddpdr.Prepared``) replaces the
  data set :func:`dataset_for` picks.
  """
  import jax  # pylint: disable=g-import-not-at-top

  from dpcore import linalg  # pylint: disable=g-import-not-at-top
  from federated import feddpdr, partition  # pylint: disable=g-import-not-at-top
  from launch.experiments import feddpdr as ex  # pylint: disable=g-import-not-at-top

  if prepared is None:
    prepared = ex.prepare_data(dataset_for(d, participants * rows),
                               data_dir=None, seed=seed)
  if prepared.x_train.shape[1] != d:
    raise ValueError(f"the data has d={prepared.x_train.shape[1]}, not {d}.")
  config = feddpdr.Config(mechanism="feddpdr", epsilon=epsilon, delta=delta,
                          k=k, lam=lam, topk=topk,
                          aggregation=aggregation).check(dim=d)
  num_classes = len(prepared.classes)
  key = jax.random.key(seed)
  parts = partition.partition(jax.random.fold_in(key, 0), prepared.x_train,
                              prepared.y_train, sizes=(rows,) * participants)
  plan = feddpdr.make_plan(parts.sizes, dim=d, num_classes=num_classes,
                         config=config)
  feddpdr.check_data(parts, prepared.x_test, prepared.y_test,
                     num_classes=num_classes)
  load_before = os.getloadavg()
  with jax.enable_x64(True):
    args = feddpdr.train_arguments(jax.random.fold_in(key, 1), parts, plan,
                                   seeds=1)
    out, first, seconds = common.timed(
        lambda: feddpdr.train(*args, config=config, num_classes=num_classes,
                              chunk=chunk), repeats=repeats)
    acc, per = feddpdr.evaluate(out, prepared.x_test, prepared.y_test,
                                config=config, num_classes=num_classes)
    vmapped = feddpdr.summarise(plan, out, acc, per, config=config)
    record_loop = None
    if loop:
      host = [np.asarray(a) for a in jax.tree.leaves(args[1:])]
      run = partial(loop_train, args[0][0], *host, static=config.static,
                    num_classes=num_classes)
      # A first full run compiles every call (and the eager stacking).
      loop_out, loop_first, loop_seconds = common.timed(run, repeats=1)
      loop_batched = jax.tree.map(lambda a: a[None], loop_out)
      loop_acc, loop_per = feddpdr.evaluate(
          loop_batched, prepared.x_test, prepared.y_test, config=config,
          num_classes=num_classes)
      looped = feddpdr.summarise(plan, loop_batched, loop_acc, loop_per,
                                 config=config)
      record_loop = {
          "seconds": loop_seconds, "first_run_seconds": loop_first,
          "participants_per_second": participants / loop_seconds,
          "accuracy": looped.accuracy,
          **captured(parts.x, parts.mask, loop_out.bases,
                     loop_out.global_basis, k),
          "global_basis_distance_to_vmapped": float(
              linalg.subspace_distance(loop_out.global_basis,
                                       out.global_basis[0])),
          "local_basis_distance_to_vmapped_max": (
              None if np.size(out.bases) == 0 else float(np.max(
                  linalg.subspace_distance(loop_out.bases, out.bases[0])))),
          "global_betas_max_abs_diff": float(np.max(np.abs(
              np.asarray(loop_out.global_betas)
              - np.asarray(out.global_betas[0])))),
      }
  load_after = os.getloadavg()
  rate = participants / seconds
  return {
      "dataset": prepared.name, "d": d, "k": k, "rows": rows,
      "participants": participants, "num_classes": num_classes,
      "chunk": chunk, "topk": ex.topk_record(config, dim=d),
      "aggregation": aggregation,
      "epsilon": epsilon, "delta": delta, "lam": lam,
      "sigma_pca": float(plan.sigma[0]),
      "vmapped": {
          "seconds": seconds, "first_call_seconds": first,
          "participants_per_second": rate,
          "accuracy": vmapped.accuracy,
          **captured(parts.x, parts.mask, out.bases[0],
                     out.global_basis[0], k),
      },
      "loop": record_loop,
      "speedup": (None if record_loop is None
                  else rate / record_loop["participants_per_second"]),
      "repeats": repeats, "seed": seed,
      "loadavg_before": list(load_before), "loadavg_after": list(load_after),
      "cpu_count": os.cpu_count(), "platform": jax.default_backend(),
      "device": str(jax.devices()[0]), "jax": jax.__version__,
      "processes": jax.process_count(),
      "peak_host_memory_bytes": ex.peak_host_memory_bytes(),
      "peak_device_memory_bytes": ex.peak_device_memory_bytes(),
      "privacy": plan.privacy,
  }


def main(argv):
  del argv
  common.check_output_path(_OUT.value, "--bench_out")
  dims = common.parse_ints(_DIMS.value, "--bench_dims", example="784,64")
  epsilons = common.parse_floats(_EPSILON.value, "--bench_epsilon",
                                 example="2")
  for value, name in ((_PARTICIPANTS.value, "bench_participants"),
                      (_ROWS.value, "bench_rows"), (_K.value, "bench_k"),
                      (_REPEATS.value, "bench_repeats"), *(
                          (v, "bench_dims") for v in dims)):
    if value < 1:
      raise ValueError(f"--{name}={value} must be >= 1.")
  if _K.value > min(dims):
    raise ValueError(f"--bench_k={_K.value} exceeds d={min(dims)}.")
  if any(not e > 0 for e in epsilons):
    raise ValueError("--bench_epsilon: every ε must be > 0.")
  topks = list(_TOPK.value)
  for name in topks:
    if name not in ("eigh", "subspace"):
      raise ValueError(f"--bench_topk: unknown {name!r}; eigh or subspace.")
  aggregations = list(_AGGREGATION.value)
  for name in aggregations:
    if name not in ("subspace", "moments"):
      raise ValueError(f"--bench_aggregation: unknown {name!r}; subspace "
                       f"or moments.")
  for d in dims:
    for aggregation in aggregations:
      for topk in topks:
        for i, eps in enumerate(epsilons):
          common.progress(f"d={d} aggregation={aggregation} topk={topk} "
                          f"eps={eps:g}: {_PARTICIPANTS.value} participants "
                          f"x {_ROWS.value} rows")
          common.emit_record(benchmark(
              d=d, participants=_PARTICIPANTS.value, rows=_ROWS.value,
              k=_K.value, epsilon=eps, delta=_DELTA.value, lam=_LAM.value,
              chunk=_CHUNK.value, topk=topk, loop=_LOOP.value and i == 0,
              repeats=_REPEATS.value, seed=_SEED.value,
              aggregation=aggregation), _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
