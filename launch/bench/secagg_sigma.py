r"""The σ each trust model needs: ``distributed`` against ``server``.

For each setting (participants × rows, q, T, ε, d, b) both plans are
calibrated for ε at ``--delta`` by ``fedsgd.make_plan(epsilon=…)``: the
server's σ by dp_accounting's RDP accountant, the distributed one by the
distributed discrete Gaussian's accounting (:mod:`dpcore.ddg_accounting`);
with ``--old_bound`` also the σ that Zhu & Wang's general subsampling
bound (``general_subsampled_rdp``, the bound used before) would need.
One JSON line per setting to ``--out``; host-side only::

  python -m launch.bench.secagg_sigma
"""

from __future__ import annotations

import sys
import time

from absl import flags

from launch import common

_DELTA = flags.DEFINE_float("delta", 1e-5, "δ.")
_OLD = flags.DEFINE_bool("old_bound", True,
                         "Also calibrate with the general (factor-3) bound.")
_OUT = flags.DEFINE_string("out", "results/bench_secagg_sigma.jsonl",
                           "JSON lines.")

SETTINGS = (
    # label, participants, rows, q, T, ε, model size, bits
    ("q=0.05 T=300", 2, 600, 0.05, 300, 2.0, 650, 16),
    ("digits recipe", 2, 600, 0.05, 600, 2.0, 650, 16),
    ("mnist 5x10000 recipe", 5, 10_000, 256 / 50_000, 5859, 1.0, 7850, 16),
    ("mnist 5x10000 recipe", 5, 10_000, 256 / 50_000, 5859, 1.0, 7850, 20),
    ("mnist 1000x60 recipe", 1000, 60, 256 / 60_000, 7031, 1.0, 7850, 16),
    ("mnist 1000x60 recipe", 1000, 60, 256 / 60_000, 7031, 1.0, 7850, 20),
)
"""The settings of docs/secure_aggregation.md (the recipes: q =
min(0.05, 256/N), T = 30/q)."""


def one(label, count, rows, q, steps, epsilon, size, bits) -> dict:
  from dpcore import accounting, ddg_accounting
  from federated import fedsgd

  kw = dict(sampling_rate=q, clip_norm=1.0, steps=steps, epsilon=epsilon,
            delta=_DELTA.value)
  t0 = time.perf_counter()
  dist = fedsgd.make_plan([rows] * count, trust="distributed",
                          model_size=size, bits=bits, **kw)
  seconds = time.perf_counter() - t0
  server = fedsgd.make_plan([rows] * count, trust="server", **kw)
  ledger = accounting.PrivacyLedger()
  dist.record(ledger)
  s = dist.settings()
  old = None
  if _OLD.value:
    symmetric = ddg_accounting.subsampled_rdp
    ddg_accounting.subsampled_rdp = ddg_accounting.general_subsampled_rdp
    try:
      old = fedsgd.make_plan([rows] * count, trust="distributed",
                             model_size=size, bits=bits,
                             **kw).noise_multiplier
    except ValueError:  # the general bound may not reach ε at all
      old = None
    finally:
      ddg_accounting.subsampled_rdp = symmetric
  return {
      "command": "python -m launch.bench.secagg_sigma "
                 + " ".join(sys.argv[1:]),
      "setting": label, "participants": count, "rows": rows,
      "sampling_rate": q, "steps": steps, "epsilon": epsilon,
      "delta": _DELTA.value, "model_size": size, "bits": bits,
      "sigma_distributed": dist.noise_multiplier,
      "sigma_server": server.noise_multiplier,
      "ratio": dist.noise_multiplier / server.noise_multiplier,
      "sigma_distributed_general_bound": old,
      "grid_norm": dist.ddg_params.norm,
      "rounded_sensitivity_over_c": s["rounded_sensitivity"]
                                    / dist.ddg_params.norm,
      "sigma_share": s["sigma_share"], "padded_dim": s["padded_dim"],
      "wrap_probability": s["wrap_probability"],
      "own_epsilon": s["own_epsilon"],
      "ledger_epsilon": ledger.guarantee(_DELTA.value).epsilon,
      "calibration_seconds": seconds,
      "privacy": accounting.no_guarantee_record(
          "calibration only: nothing is released")}


def main(argv):
  del argv
  common.check_output_path(_OUT.value)
  for setting in SETTINGS:
    common.emit_record(one(*setting), _OUT.value)


if __name__ == "__main__":
  common.run_cli(main)
