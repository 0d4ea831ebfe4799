"""Federated DP-SGD on FedDPDR's participants (no flags; importable anywhere).

The rows ``Fed DP-SGD`` of ``launch.feddpdr``'s table, and the runner
``launch.compare`` uses: one softmax model for all classes
(:mod:`federated.fedsgd`), trained on the same partition of the same seed
as :func:`launch.experiments.feddpdr.run_one`, under a public
:class:`FedSGDRecipe` fixed before any test result was seen. The library
calibrates and trains; this module keeps σ and the traced program beside
JAX's persistent cache (so a second run neither calibrates nor traces),
times the run and builds its record.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import json
import os

import jax
import numpy as np

from dpcore import accounting, dpsgd, options
from federated import fedsgd, partition
from launch import programs
from launch.experiments import feddpdr as single
from mechanisms.erm import softmax

__all__ = [
    "FedSGDRecipe", "calibrated_sigma", "fedsgd_program", "make_plan", "run",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class FedSGDRecipe:
  """The public recipe of the federated DP-SGD rows.

  Chosen before looking at any test result, from the DP-SGD literature's
  usual settings for softmax regression on unit-norm rows: q =
  min(0.05, 256/N) (an expected batch of at most 256 rows), 30 epochs,
  C = 1, plain SGD at learning rate 2 (the noisy mean gradient is an
  average over qN rows), zero initial weights. ``sampling_rate`` 0 means
  that rule.

  Attributes:
    trust: who adds the noise (:class:`dpcore.options.Trust`; ``"server"``
      assumes secure aggregation, ``"distributed"`` simulates it with
      discrete Gaussian shares, docs/fedsgd.md).
    sampling_rate: q per row (per participant for ``"participant"``); 0:
      min(0.05, 256/N).
    epochs: E (T = E/q steps).
    clip_norm: C.
    learning_rate: the server's SGD step size.
  """
  trust: options.Trust = options.Trust.SERVER
  sampling_rate: float = 0.0
  epochs: float = 30.0
  clip_norm: float = 1.0
  learning_rate: float = 2.0

  def rate(self, num_examples: int) -> float:
    """q for N rows: ``sampling_rate``, or min(0.05, 256/N) for 0."""
    if self.sampling_rate > 0:
      return self.sampling_rate
    return min(0.05, 256.0 / num_examples)

  def steps(self, num_examples: int) -> int:
    """T = E/q for N rows (:func:`dpcore.dpsgd.num_steps`)."""
    return dpsgd.num_steps(epochs=self.epochs,
                           sampling_rate=self.rate(num_examples))

  def check(self) -> FedSGDRecipe:
    """One-line ValueErrors naming the field, before any work."""
    trust = options.parse(options.Trust, self.trust, "fedsgd trust")
    if not 0.0 <= self.sampling_rate <= 1.0:
      raise ValueError(f"fedsgd sampling_rate must be in [0, 1] (0: "
                       f"min(0.05, 256/N)), got {self.sampling_rate}.")
    for field in ("epochs", "clip_norm", "learning_rate"):
      value = getattr(self, field)
      if not (np.isfinite(value) and value > 0):
        raise ValueError(f"fedsgd {field} must be a finite number > 0, "
                         f"got {value}.")
    return dataclasses.replace(self, trust=trust)


def calibrated_sigma(*, epsilon: float, delta: float, sampling_rate: float,
                     steps: int) -> float:
  """:func:`dpcore.accounting.calibrate_dpsgd_noise`, kept beside JAX's cache.

  The calibration is a deterministic bisection over RDP curves (about
  0.6 s of a 2-core CPU per ε); with the persistent cache on, its result
  is stored in ``dpsgd_sigma.json`` there, keyed by the arguments and the
  dp_accounting version, so a second run reads it. Nothing rests on the
  file being right: the ledger computes the guarantee of the σ actually
  used, afresh, and that is what the record reports.
  """
  cache = jax.config.jax_compilation_cache_dir
  key = json.dumps([float(epsilon), float(delta), float(sampling_rate),
                    int(steps),
                    importlib.metadata.version("dp-accounting")])
  path = os.path.join(os.path.expanduser(cache), "dpsgd_sigma.json") if (
      cache) else None
  table = {}
  if path and os.path.exists(path):
    try:
      with open(path, encoding="utf-8") as f:
        table = json.load(f)
    except (OSError, ValueError):
      table = {}
  value = table.get(key) if isinstance(table, dict) else None
  if isinstance(value, float) and value > 0:
    return value
  sigma = accounting.calibrate_dpsgd_noise(
      epsilon=epsilon, delta=delta, sampling_rate=sampling_rate,
      steps=steps)
  if path:
    table = table if isinstance(table, dict) else {}
    table[key] = sigma
    try:
      partial = f"{path}.{os.getpid()}.tmp"
      with open(partial, "w", encoding="utf-8") as f:
        json.dump(table, f)
      os.replace(partial, path)
    except OSError:
      pass  # a read-only cache only costs the calibration next time
  return sigma


def make_plan(recipe: FedSGDRecipe, sizes, *, epsilon: float, delta: float,
              model_size: int) -> fedsgd.FedSGDPlan:
  """The recipe's :func:`federated.fedsgd.make_plan` at ``epsilon``.

  σ is calibrated for (ε, δ) at the recipe's q and T: for the Gaussian
  trust models by :func:`calibrated_sigma` (the same σ as the library's
  calibration, kept beside JAX's cache), for ``"distributed"`` by the
  library's own calibration of the discrete shares, with
  ``model_size`` the number of model parameters summed.
  """
  total = int(np.sum(sizes))
  q, steps = recipe.rate(total), recipe.steps(total)
  common = dict(trust=recipe.trust, sampling_rate=q, steps=steps,
                clip_norm=recipe.clip_norm, delta=delta)
  if recipe.trust == options.Trust.DISTRIBUTED:
    return fedsgd.make_plan(sizes, epsilon=epsilon, model_size=model_size,
                            **common)
  sigma = calibrated_sigma(epsilon=epsilon, delta=delta, sampling_rate=q,
                           steps=steps)
  return fedsgd.make_plan(sizes, noise_multiplier=sigma, **common)


def _as_traced(leaf) -> np.ndarray:
  """A plan's leaf as jit traces it: a Python number as float32."""
  value = np.asarray(leaf)
  return value.astype(np.float32) if isinstance(leaf, float) else value


@functools.lru_cache(maxsize=8)
def _program(learning_rate: float, dim: int, num_classes: int,
             chunk: int | None):
  """The seed-vmapped run ``(keys, plan, x, y, mask) -> params`` (not
  jitted: :func:`fedsgd_program` does)."""
  import optax  # pylint: disable=g-import-not-at-top

  def run(keys, plan, x, y, mask):
    def one(key):
      return fedsgd.release(key, plan, softmax.loss,
                            softmax.initial_params(dim, num_classes), x, y,
                            mask, optax.sgd(learning_rate),
                            chunk=chunk).params
    return jax.vmap(one)(keys)

  return run


def fedsgd_program(args, *, learning_rate: float, dim: int,
                   num_classes: int, chunk: int | None):
  """The seed-vmapped federated DP-SGD run as a function of ``args``
  ``(keys, plan, x, y, mask)``: one jit for every ε of a run shape (the
  plan's numbers are traced leaves; its static facts are in the
  arguments' structure), its trace kept beside JAX's persistent cache
  when that is on (:mod:`launch.programs`), so a second run neither
  traces nor compiles it."""
  run = _program(learning_rate, dim, num_classes, chunk)
  cache = jax.config.jax_compilation_cache_dir
  if not cache or jax.process_count() > 1:
    return jax.jit(run)
  treedef = jax.tree.structure(jax.eval_shape(run, *args))
  stored = programs.load_or_export(
      lambda *a: tuple(jax.tree.leaves(run(*a))), args, name="fedsgd_train",
      cache_dir=cache, settings=(learning_rate, dim, num_classes, chunk),
      compiler_options=single.compiler_options())
  return lambda *a: jax.tree.unflatten(treedef, stored(*a))


def run(prepared: single.Prepared, *, sizes, seed: int, seeds: int,
        epsilon: float, delta: float, recipe: FedSGDRecipe,
        participant_chunk: int | None = None,
        extra: dict | None = None) -> dict:
  """Federated DP-SGD (:mod:`federated.fedsgd`) on FedDPDR's participants.

  The same partition as :func:`launch.experiments.feddpdr.run_one` (the
  rows of ``seed``), one softmax model for all classes, σ calibrated for
  ``epsilon`` at ``delta`` over the recipe's q and T (:func:`make_plan`);
  ``seeds`` repeats vmapped over keys. The record has
  :func:`launch.experiments.feddpdr.make_record`'s core fields, the
  recipe and the plan's settings under ``fedsgd``, and the ledger's
  privacy record (what holds, no nominal figure: the target ε is a
  setting).
  """
  key = jax.random.key(seed)
  parts = partition.partition_auto(
      jax.random.fold_in(key, 0), prepared.x_train, prepared.y_train,
      sizes=sizes, buckets=False)
  dim, num_classes = prepared.x_train.shape[1], len(prepared.classes)
  plan = make_plan(recipe, parts.sizes, epsilon=epsilon, delta=delta,
                   model_size=(dim + 1) * num_classes)
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  keys = jax.random.split(jax.random.fold_in(key, 3), seeds)
  # The plan's leaves enter the program as the arrays a jit would trace
  # them as (its numbers C, σ, ε, δ as float32; the distributed grid's
  # integer words as they are), so its stored trace is keyed by their
  # shapes.
  traced = jax.tree.map(_as_traced, plan)
  args = (keys, traced, parts.x, parts.y.astype(np.int32), parts.mask)
  program = fedsgd_program(args, learning_rate=recipe.learning_rate,
                           dim=dim, num_classes=num_classes,
                           chunk=participant_chunk)
  params, timing = single.timed_training(lambda: program(*args), 0,
                                         participants=len(sizes),
                                         seeds=seeds)
  unit = "participant" if recipe.trust == options.Trust.PARTICIPANT else "row"
  accs = np.asarray(jax.vmap(lambda p: softmax.accuracy(
      p, prepared.x_test, prepared.y_test))(params))
  record = {
      "dataset": prepared.name, "mechanism": "fedsgd", "epsilon": epsilon,
      "delta": delta, "k": None, "participants": len(sizes),
      "sizes": list(map(int, sizes)), "accuracy": float(accs.mean()),
      "accuracy_std": float(accs.std()),
      "accuracy_per_seed": accs.tolist(),
      "privacy": ledger.report(delta),
      "seconds": timing["seconds"],
      "first_call_seconds": timing["first_call_seconds"],
      "fedsgd": {**dataclasses.asdict(recipe), **plan.settings()},
      "seed": seed, "seeds": seeds, "test_rows": len(prepared.y_test),
      "num_classes": num_classes, "chunk": participant_chunk,
      "participants_per_second": timing["participants_per_second"],
      "device": jax.devices()[0].platform,
      "privacy_scope": (f"one run (one seed): one {unit} added or "
                        f"removed, {plan.assumption}; each seed is its own "
                        f"run on the same participants; the partition, "
                        f"the sizes and the row bounds are public"),
  }
  record.update(extra or {})
  return record
