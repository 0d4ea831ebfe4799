r"""Private kernel SVMs against LIBSVM's RBF SVM (docs/random_features.md).

The comparison of docs/random_features.md (3 seeds, ε ∈ {0.5, 1, 2, 4, 8},
δ = 1e-5, a fixed 70/30 split, the DPWSS harness's scaling)::

  python -m launch.kernel_compare \
      --datasets=heart,breast_cancer,digits --classes=3,8 \
      --out=results/kernel_compare.jsonl \
      --table_md=results/kernel_compare.md

Methods (``--methods``, default all): ``libsvm`` (LIBSVM's C-SVC, RBF,
C = 1, γ = 1/d; non-private), ``wss2`` (the library's SMO, same problem),
``dpwss_paper`` (the paper's DPWSS at a nominal per-selection ε: no
guarantee), ``linear_output_perturbation`` (the DPWSS harness's private
release: a linear C-SVC on unit-ball rows with output perturbation),
``rff_dpsgd`` and ``rff_output_perturbation`` (random Fourier features of
the RBF kernel, then DP-SGD or output perturbation:
``mechanisms.svm.random_features``). Each method's settings are fixed in
``launch.experiments.kernel_compare.RECIPE``.

Privacy, plainly. Every record's ``privacy`` has the fields of
``dpcore.accounting.PRIVACY_FIELDS``: a private method's comes from its
ledger at ``--delta`` (``neighbouring`` says for which relation: add/remove
for DP-SGD, replace-one for output perturbation); the non-private
baselines and the paper's DPWSS (``epsilon_nominal``) claim nothing. The
default ``--scaling=auto_minmax`` min/max-scales breast_cancer from its
training rows (no public bounds): that step reads the data, and the
record says so (``scaling_reads_data``); pass ``--scaling=unit_rows`` for
a data-independent rule (breast_cancer then sits at its majority class).

Every flag is checked, and every data set found, before any data is read;
a mistake ends with one ``error:`` line and exit status 2. Records are
printed, then appended to ``--out``; runs already there are skipped.
"""

from __future__ import annotations

from absl import flags

from launch import common, vocabulary

_DATASETS = flags.DEFINE_list(
    "datasets", ["heart", "breast_cancer", "digits"],
    "Data sets (launch.data.loaders names or svmlight:PATH).")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Where the files are.")
_CLASSES = flags.DEFINE_string(
    "classes", "3,8", "POS,NEG: the two classes kept of a multi-class set.")
_SCALING = flags.DEFINE_enum(
    "scaling", "auto_minmax", list(vocabulary.Scaling), "Feature scaling, as "
    "launch.dpwss (fitted on the training rows).")
_METHODS = flags.DEFINE_list(
    "methods", ["libsvm", "wss2", "dpwss_paper",
                "linear_output_perturbation", "rff_dpsgd",
                "rff_output_perturbation"], "Methods to run.")
_EPSILONS = flags.DEFINE_list("epsilons", ["0.5", "1", "2", "4", "8"],
                              "Target ε of the private methods.")
_DELTA = flags.DEFINE_float("delta", 1e-5, "δ.")
_SEEDS = flags.DEFINE_integer("seeds", 3, "Seeds per (set, method, ε).")
_TEST_FRACTION = flags.DEFINE_float("test_fraction", 0.3,
                                    "Fraction of rows held out for test.")
_SPLIT_SEED = flags.DEFINE_integer("split_seed", 0,
                                   "Seed of the fixed train/test split.")
_TABLE_MD = flags.DEFINE_string("table_md", None, "Markdown table path.")
_OUT = flags.DEFINE_string("out", "runs/kernel_compare.jsonl",
                           "JSON lines.")


def main(argv):
  del argv
  with common.heavy_imports():
    # pylint: disable=g-import-not-at-top
    from launch.experiments import dpwss
    from launch.experiments import kernel_compare as experiment
  out = _OUT.value
  if not out:
    raise ValueError("--out: give a JSON-lines file path.")
  common.check_output_path(out, "--out")
  if _TABLE_MD.value:
    common.check_output_path(_TABLE_MD.value, "--table_md")
  setting = experiment.Setting(
      datasets=tuple(d.strip() for d in _DATASETS.value if d.strip()),
      methods=tuple(m.strip() for m in _METHODS.value if m.strip()),
      epsilons=tuple(common.parse_floats(_EPSILONS.value, "--epsilons")),
      delta=_DELTA.value, seeds=_SEEDS.value,
      test_fraction=_TEST_FRACTION.value, split_seed=_SPLIT_SEED.value,
      scaling=_SCALING.value,
      classes=(dpwss.parse_classes(_CLASSES.value)
               or experiment.DEFAULT_CLASSES))
  records = experiment.run(setting, data_dir=_DATA_DIR.value, out=out,
                           table_md=_TABLE_MD.value)
  common.progress(f"{len(records)} records written to {out}")


if __name__ == "__main__":
  common.run_cli(main)
