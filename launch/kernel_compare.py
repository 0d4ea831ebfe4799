r"""Private kernel SVMs against LIBSVM's RBF SVM (docs/random_features.md).

The comparison of docs/random_features.md (3 seeds, ε ∈ {0.5, 1, 2, 4, 8},
δ = 1e-5, a fixed 70/30 split, the DPWSS harness's scaling)::

  python -m launch.kernel_compare \
      --datasets=heart,breast_cancer,digits --classes=3,8 \
      --out=results/kernel_compare.jsonl \
      --table_md=results/kernel_compare.md

The methods (``--methods``), their recipes, the scaling, the privacy of
every record and the results: docs/random_features.md.
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
flags.DEFINE_enum(
    "scaling", "auto_minmax", list(vocabulary.Scaling), "Feature scaling, as "
    "launch.dpwss (fitted on the training rows).")
_METHODS = flags.DEFINE_list(
    "methods", ["libsvm", "wss2", "dpwss_paper",
                "linear_output_perturbation", "rff_dpsgd",
                "rff_output_perturbation"], "Methods to run.")
_EPSILONS = flags.DEFINE_list("epsilons", ["0.5", "1", "2", "4", "8"],
                              "Target ε of the private methods.")
flags.DEFINE_float("delta", 1e-5, "δ.")
flags.DEFINE_integer("seeds", 3, "Seeds per (set, method, ε).")
flags.DEFINE_float("test_fraction", 0.3, "Fraction of rows held out for test.")
flags.DEFINE_integer("split_seed", 0, "Seed of the fixed train/test split.")
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
  common.check_output_path(out, "--out", required=True)
  common.check_output_path(_TABLE_MD.value, "--table_md")
  setting = common.setting_from_flags(
      experiment.Setting,
      datasets=tuple(d.strip() for d in _DATASETS.value if d.strip()),
      methods=tuple(m.strip() for m in _METHODS.value if m.strip()),
      epsilons=tuple(common.parse_floats(_EPSILONS.value, "--epsilons")),
      classes=(dpwss.parse_classes(_CLASSES.value)
               or experiment.DEFAULT_CLASSES))
  records = experiment.run(setting, data_dir=_DATA_DIR.value, out=out,
                           table_md=_TABLE_MD.value)
  common.progress(f"{len(records)} records written to {out}")


if __name__ == "__main__":
  common.run_cli(main)
