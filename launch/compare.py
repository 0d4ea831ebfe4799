r"""Every method beside the best proven-private one: accuracy against ε.

The full comparison (docs/compare.md)::

  python -m launch.compare --data_dir=DIR --out=results/compare.jsonl \
      --table_md=results/compare.md --plots=results

runs, on each data set of ``--datasets`` (digits, mnist, fashion_mnist,
heart, breast_cancer, digits38 = digits 3 vs 8, segment), every method of
its family at every ε of ``--epsilons`` with ``--seeds`` seeds:

* digits, mnist, fashion_mnist: ``nonpriv``, ``feddpdr``, ``dpml``
  (launch.feddpdr's runner) and ``fedsgd_server``, ``fedsgd_local``
  (federated DP-SGD on the same participants);
* heart, breast_cancer, digits38: ``libsvm``, ``wss2``, ``dpwss_paper``,
  ``linear_output_perturbation``, ``rff_dpsgd``,
  ``rff_output_perturbation`` (launch.kernel_compare's runner);
* segment: ``dp_glvq``, ``dp_gmlvq`` (launch.dplvq's runner),
  ``dpsgd_softmax`` (central DP-SGD) and ``softmax_nonpriv``.

Each method keeps one fixed public recipe
(``launch.experiments.compare.recipe``). One JSON line per (data set,
method, ε): accuracy mean ± sd over seeds and per seed, the privacy record
of one run (``privacy``: the ε that holds, from the method's ledger), the
recipe, the settings and the seconds. Records already in ``--out`` (same
data set, method, ε, δ and seeds) are skipped, so an interrupted sweep
resumes. ``--table_md`` gets one Markdown table per data set and
``--plots`` one PNG per data set, both from every matching record in
``--out``.

``--tune=candidates.json`` (with ``--tune_expected_trials``,
``--tune_distribution``, ``--tune_score_epsilon``) selects the recipe of
``fedsgd_server`` privately (:mod:`dpcore.tuning`): at each ε (each
trial's target) K ~ the law trials train a candidate drawn at random on
the participants' rows less a held-out share, score it by a noisy
validation accuracy, and release the best; the record's ε covers the
whole tuning, and the table marks the row "(tuned, K ~ …)".

``--data_dir``: where data files are looked for first (e.g. the directory
a ``weka`` package was extracted to, for segment); a set whose files are
not there is looked for where its loader looks by default. Every flag, and
every data set's files, are checked before any work (a mistake ends with
one ``error: …`` line and exit status 2).
"""

from __future__ import annotations

import os

from absl import flags

from launch import common

_DEFAULT_DATASETS = ["digits", "mnist", "fashion_mnist", "heart",
                     "breast_cancer", "digits38", "segment"]

_DATASETS = flags.DEFINE_list(
    "datasets", _DEFAULT_DATASETS,
    "Data sets: digits, mnist, fashion_mnist (FedDPDR family); heart, "
    "breast_cancer, digits38 (DPWSS sets; digits38 = digits 3 vs 8); "
    "segment (DP-LVQ).")
_EPSILONS = flags.DEFINE_list("epsilons", ["0.5", "1", "2", "4", "8"],
                              "Target ε of the private methods.")
_SEEDS = flags.DEFINE_integer("seeds", 3, "Seeds per (data set, method, ε).")
_DELTA = flags.DEFINE_float("delta", 1e-5, "δ of every private method.")
_METHODS = flags.DEFINE_list(
    "methods", None,
    "Only these methods (default: every method of each set's family).")
_DATA_DIR = flags.DEFINE_string(
    "data_dir", None,
    "Where data files are looked for first; sets not found there use the "
    "loaders' default lookup.")
_OUT = flags.DEFINE_string("out", "runs/compare.jsonl", "JSON lines.")
_TABLE_MD = flags.DEFINE_string(
    "table_md", "runs/compare.md", "Markdown tables ('' for none).")
_PLOTS = flags.DEFINE_string(
    "plots", "runs", "Directory of the PNGs, compare_<set>.png ('' for "
    "none).")
_TUNE = flags.DEFINE_string(
    "tune", None,
    "JSON file: a list of candidate recipes for fedsgd_server (objects over "
    "sampling_rate, epochs, clip_norm, learning_rate). Its figure at each "
    "ε then comes from a private selection, ε being each trial's target.")
_TUNE_EXPECTED_TRIALS = flags.DEFINE_float(
    "tune_expected_trials", 10.0, "E[K], the expected number of trials.")
_TUNE_DISTRIBUTION = flags.DEFINE_string(
    "tune_distribution", "geometric",
    "Law of K: poisson, geometric or logarithmic.")
_TUNE_SCORE_EPSILON = flags.DEFINE_float(
    "tune_score_epsilon", 0.5,
    "ε of each trial's noisy validation accuracy.")
_JAX_CACHE_DIR = flags.DEFINE_string(
    "jax_cache_dir", os.path.join("~", ".cache", "dpjax", "jax"),
    "JAX's persistent compilation cache ('' to turn it off).")


def _epsilons() -> list[float]:
  values = []
  for text in _EPSILONS.value:
    try:
      eps = float(text)
    except ValueError:
      raise ValueError(f"--epsilons: {text!r} is not a number; give ε > 0, "
                       f"e.g. --epsilons=0.5,1,2,4,8.") from None
    values.append(eps)
  return values


def _plots_dir(path: str) -> None:
  if path and os.path.exists(path) and not os.path.isdir(path):
    raise ValueError(f"--plots={path!r} is a file; give a directory for "
                     f"the PNGs, or '' for none.")


def main(argv):
  del argv
  datasets = [d.strip() for d in _DATASETS.value if d.strip()]
  methods = (None if _METHODS.value is None
             else [m.strip() for m in _METHODS.value if m.strip()])
  epsilons = _epsilons()
  out = _OUT.value
  if not out:
    raise ValueError("--out: give a JSON-lines file path.")
  with common.heavy_imports():
    from launch.experiments import (  # pylint: disable=g-import-not-at-top
        compare as experiment,
    )
  plan = experiment.check_settings(datasets=datasets, methods=methods,
                                   epsilons=epsilons, delta=_DELTA.value,
                                   seeds=_SEEDS.value)
  tune = None
  if _TUNE.value is not None:
    if not _TUNE.value:
      raise ValueError("--tune is empty; give a JSON file of candidate "
                       "recipes, or leave it out.")
    tune = experiment.check_tuning(
        _TUNE.value, expected_trials=_TUNE_EXPECTED_TRIALS.value,
        distribution=_TUNE_DISTRIBUTION.value,
        score_epsilon=_TUNE_SCORE_EPSILON.value, plan=plan)
  data_dir = _DATA_DIR.value
  if data_dir is not None and not os.path.isdir(os.path.expanduser(
      data_dir)):
    raise ValueError(f"--data_dir={data_dir!r} is not a directory; give "
                     f"the directory holding the data files, or leave it "
                     f"out.")
  _plots_dir(_PLOTS.value)
  common.check_output_path(out, "--out")
  if _TABLE_MD.value:
    common.check_output_path(_TABLE_MD.value, "--table_md")
  data_dirs = {d: experiment.resolve_data_dir(d, data_dir)
               for d, m in plan.items() if m}
  with common.heavy_imports():
    from launch.experiments import (  # pylint: disable=g-import-not-at-top
        feddpdr as feddpdr_experiment,
    )
  feddpdr_experiment.enable_compilation_cache(_JAX_CACHE_DIR.value)
  settings = dict(epsilons=epsilons, delta=_DELTA.value, seeds=_SEEDS.value)
  records = experiment.run_all(plan=plan, data_dirs=data_dirs, out=out,
                               tune=tune, **settings)
  every = common.read_jsonl(out)
  if _TABLE_MD.value:
    with open(_TABLE_MD.value, "w", encoding="utf-8") as f:
      f.write(experiment.markdown_tables(every, plan=plan, tune=tune,
                                         **settings))
    common.progress(f"wrote {_TABLE_MD.value}")
  if _PLOTS.value:
    for path in experiment.write_figures(every, plan=plan,
                                         directory=_PLOTS.value, tune=tune,
                                         **settings):
      common.progress(f"wrote {path}")
  common.progress(f"{len(records)} new record(s) written to {out}")


if __name__ == "__main__":
  common.run_cli(main)
