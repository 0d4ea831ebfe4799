r"""Every method beside the best proven-private one: accuracy against ε.

The full comparison (one JSON line per data set, method and ε; resumes)::

  python -m launch.compare --data_dir=DIR --out=results/compare.jsonl \
      --table_md=results/compare.md --plots=results

The methods, the flags (``--features``, ``--tune``), what each record
holds and the results: docs/compare.md.
"""

from __future__ import annotations

import os

from absl import flags

from dpcore import options
from launch import common
from launch.experiments import compare as experiment

_DATASETS = flags.DEFINE_list(
    "datasets", list(experiment.DATASETS),
    "Data sets: digits, mnist, fashion_mnist (FedDPDR family); heart, "
    "breast_cancer, digits38 (DPWSS sets; digits38 = digits 3 vs 8); "
    "segment (DP-LVQ).")
_METHODS = flags.DEFINE_list(
    "methods", None,
    "Only these methods (default: every method of each set's family).")
_EPSILONS = flags.DEFINE_list(
    "epsilons", [f"{e:g}" for e in experiment.EPSILONS],
    "Target ε of the private methods.")
flags.DEFINE_float("delta", 1e-5, "δ of every private method.")
flags.DEFINE_integer("seeds", 3, "Seeds per (data set, method, ε).")
flags.DEFINE_enum(
    "features", None, list(experiment.FEATURES),
    "Map the image sets' rows first (no privacy cost); unset: their own "
    "rows.")
flags.DEFINE_string(
    "data_dir", None,
    "Where data files are looked for first; sets not found there use the "
    "loaders' default lookup.")
flags.DEFINE_string(
    "tune", None,
    "JSON file: a list of candidate recipes for fedsgd_server (objects over "
    "sampling_rate, epochs, clip_norm, learning_rate). Its figure at each "
    "ε then comes from a private selection, ε being each trial's target.")
flags.DEFINE_float(
    "expected_trials", 10.0, "--tune: E[K], the expected number of trials.")
flags.DEFINE_string(
    "distribution", options.TrialDistribution.GEOMETRIC,
    "--tune: the law of K, one of "
    f"{', '.join(options.TrialDistribution)}.")
flags.DEFINE_float(
    "score_epsilon", 0.5, "--tune: ε of each trial's noisy validation "
    "accuracy.")
_OUT = flags.DEFINE_string("out", "runs/compare.jsonl", "JSON lines.")
_TABLE_MD = flags.DEFINE_string(
    "table_md", "runs/compare.md", "Markdown tables ('' for none).")
_PLOTS = flags.DEFINE_string(
    "plots", "runs", "Directory of the PNGs, compare_<set>.png ('' for "
    "none).")
_JAX_CACHE_DIR = flags.DEFINE_string(
    "jax_cache_dir", os.path.join("~", ".cache", "dpjax", "jax"),
    "JAX's persistent compilation cache ('' to turn it off).")
for _old, _new in (("tune_expected_trials", "expected_trials"),
                   ("tune_distribution", "distribution"),
                   ("tune_score_epsilon", "score_epsilon")):
  flags.DEFINE_alias(_old, _new)


def _names(values) -> tuple[str, ...]:
  return tuple(v.strip() for v in values if v.strip())


def main(argv):
  del argv
  setting = common.setting_from_flags(
      experiment.Setting, datasets=_names(_DATASETS.value),
      methods=None if _METHODS.value is None else _names(_METHODS.value),
      epsilons=tuple(common.parse_floats(_EPSILONS.value, "--epsilons",
                                         example="0.5,1,2,4,8"))).check()
  out, table_md, plots = _OUT.value, _TABLE_MD.value, _PLOTS.value
  if plots and os.path.exists(plots) and not os.path.isdir(plots):
    raise ValueError(f"--plots={plots!r} is a file; give a directory for "
                     f"the PNGs, or '' for none.")
  common.check_output_path(out, "--out", required=True)
  common.check_output_path(table_md, "--table_md")
  with common.heavy_imports():
    from launch import plot_compare  # pylint: disable=g-import-not-at-top
    from launch.experiments import (  # pylint: disable=g-import-not-at-top
        feddpdr as feddpdr_experiment,
    )
  feddpdr_experiment.enable_compilation_cache(_JAX_CACHE_DIR.value)
  records = experiment.run(setting, out=out)
  every = common.read_jsonl(out)
  if table_md:
    with open(table_md, "w", encoding="utf-8") as f:
      f.write(plot_compare.markdown_tables(every, setting))
    common.progress(f"wrote {table_md}")
  if plots:
    for path in plot_compare.write_figures(every, setting, plots):
      common.progress(f"wrote {path}")
  common.progress(f"{len(records)} new record(s) written to {out}")


if __name__ == "__main__":
  common.run_cli(main)
