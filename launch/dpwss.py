r"""DPWSS against LIBSVM's WSS2 (PeerJ CS 7:e799, 2021).

One setting (5 vmapped repeats, the paper's protocol)::

  python -m launch.dpwss                       # heart (bundled), DPWSS
  python -m launch.dpwss --dataset=heart --wss=dpwss --selection_epsilon=1 \
      --sigma=0.7 --shrinking

The paper's Table 3 grid, on every data set given::

  python -m launch.dpwss --table --dataset=heart,breast_cancer \
      --scaling=auto_minmax --out=results/dpwss_table3.jsonl \
      --table_md=results/dpwss_table3.md

The private selection (``--epsilon``: a total budget over the 2·max_iter
draws)::

  python -m launch.dpwss --selection=private --epsilon=10 \
      --max_iter=2000 --sigma=0.5

WSS2, the paper's selection and the private one, side by side::

  python -m launch.dpwss --selection_table --dataset=heart,breast_cancer \
      --scaling=auto_minmax --epsilons=1,10,100 \
      --out=results/dpwss_private_selection.jsonl \
      --table_md=results/dpwss_private_selection.md

The protocol, the flags, scaling (``--scaling``) and the privacy of every
record: docs/dpwss.md.
"""

from __future__ import annotations

from absl import flags

from dpcore import options
from launch import common, vocabulary

_DATASET = flags.DEFINE_string(
    "dataset", "heart", "Name(s) for launch.data.loaders.load_dataset "
    "(heart, breast_cancer, digits, svmlight:PATH, ...); comma-separated in "
    "--table / --selection_table mode.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Where the files are.")
_CLASSES = flags.DEFINE_string(
    "classes", None, "For multi-class sets: 'POS,NEG', two class ids "
    "(e.g. 3,8); the SVM is binary.")
flags.DEFINE_enum(
    "scaling", "auto", list(vocabulary.Scaling),
    "Feature scaling (docs/dpwss.md, Scaling).")
flags.DEFINE_enum("eval", "train", list(vocabulary.EvalSplit),
                  "Evaluate on the training set (paper) or test.")
flags.DEFINE_enum("wss", "dpwss", list(vocabulary.WorkingSet),
                  "Working-set selection: LIBSVM's WSS2 or DPWSS.")
flags.DEFINE_enum(
    "selection", "paper", list(options.Selection),
    "DPWSS selection: 'paper' (the paper's algorithm; no DP guarantee) or "
    "'private' (i and j by the exponential mechanism, exactly --max_iter "
    "iterations; the transcript is (ε, δ)-DP).")
_SELECTION_EPSILON = flags.DEFINE_float(
    "selection_epsilon", 1.0, "ε of each exponential-mechanism draw (the "
    "paper's ε; nominal for --selection=paper). Not with --epsilon.")
_EPSILON = flags.DEFINE_float(
    "epsilon", None, "A total ε at --delta (with --max_iter): the ε of each "
    "draw is derived so that the draws of max_iter iterations (1 each for "
    "paper, nominal; 2 each for private) cost this (zCDP/RDP bisection).")
_SIGMA = flags.DEFINE_float("sigma", 0.5, "Constant factor σ ∈ (0, 1).")
flags.DEFINE_float("delta", 1e-5, "δ of the composed guarantee.")
flags.DEFINE_integer("max_iter", None, "Iteration cap T.")
flags.DEFINE_enum("kernel", "rbf", list(options.Kernel), "Kernel.")
flags.DEFINE_float("gamma", None, "γ (default 1/num_features).")
flags.DEFINE_float("coef0", 0.0, "coef0 (poly, sigmoid).")
flags.DEFINE_integer("degree", 3, "degree (poly).")
flags.DEFINE_float("c", 1.0, "C.")
flags.DEFINE_float("eps", 1e-3, "Stopping tolerance (LIBSVM's -e).")
flags.DEFINE_bool("shrinking", False, "LIBSVM's shrinking.")
flags.DEFINE_enum("dtype", "float64", list(vocabulary.SolverDtype),
                  "Solver precision.")
flags.DEFINE_integer("repeats", 5, "Repeats (vmapped).")
flags.DEFINE_integer("seed", 0, "Seed.")
flags.DEFINE_enum(
    "release", "none", list(vocabulary.Release),
    "Private release of a linear (w, b); 'none' releases nothing private.")
flags.DEFINE_float("release_epsilon", 1.0, "ε of the output perturbation.")
_MEMORY_BUDGET = flags.DEFINE_string(
    "memory_budget", "auto",
    "the training's memory budget, e.g. 8G or 512M; auto: 3/4 of the "
    "memory the system reports available. The repeats run in the largest "
    "chunk that fits (printed), Q is cached only where it fits, and a "
    "setting whose estimate exceeds it even one repeat at a time is "
    "refused before training")
_TABLE = flags.DEFINE_bool("table", False, "Table-3 grid mode.")
_SELECTION_TABLE = flags.DEFINE_bool(
    "selection_table", False, "Private-selection comparison mode: WSS2, "
    "the paper's selection and the private one on every dataset.")
_EPSILONS = flags.DEFINE_list(
    "epsilons", ["1", "10", "100"],
    "--selection_table: total ε of the private runs.")
_ITERATIONS = flags.DEFINE_list(
    "iterations", ["500", "2000"],
    "--selection_table: iteration counts T of the private runs.")
_TABLE_MD = flags.DEFINE_string("table_md", None, "Markdown table path.")
_OUT = flags.DEFINE_string("out", "results/dpwss.jsonl", "JSON lines.")
# The spellings used before the flags took the library's names. (The old
# --epsilon, ε per draw, is now --selection_epsilon: --epsilon is the total
# budget, as everywhere in the library.)
for _old, _new in (("total_epsilon", "epsilon"), ("eps_stop", "eps"),
                   ("total_epsilons", "epsilons")):
  flags.DEFINE_alias(_old, _new)


def main(argv):
  del argv
  # Heavy imports here, so --help and flag errors stay fast.
  with common.heavy_imports():
    from launch.experiments import (  # pylint: disable=g-import-not-at-top
        dpwss as experiment,
    )

  out = _OUT.value
  common.check_output_path(out, "--out", required=True)
  common.check_output_path(_TABLE_MD.value, "--table_md")
  if _TABLE.value and _SELECTION_TABLE.value:
    raise ValueError("--table and --selection_table are two modes; give "
                     "one of them.")
  datasets = [d.strip() for d in _DATASET.value.split(",") if d.strip()]
  if len(datasets) > 1 and not (_TABLE.value or _SELECTION_TABLE.value):
    raise ValueError(f"--dataset={_DATASET.value!r}: a list of data sets "
                     f"needs --table or --selection_table; give one name "
                     f"for a single run.")
  memory_budget = (_MEMORY_BUDGET.value if _MEMORY_BUDGET.value == "auto"
                   else common.parse_bytes(_MEMORY_BUDGET.value,
                                           "--memory_budget"))
  # A total --epsilon takes the place of the per-draw default.
  per_draw = None if _EPSILON.value is not None and not flags.FLAGS[
      "selection_epsilon"].present else _SELECTION_EPSILON.value
  setting = common.setting_from_flags(
      experiment.Setting, dataset=datasets[0] if datasets else "",
      classes=experiment.parse_classes(_CLASSES.value),
      selection_epsilon=per_draw)
  where = dict(data_dir=_DATA_DIR.value, memory_budget=memory_budget)
  if _SELECTION_TABLE.value:
    records = experiment.run_selection_comparison(
        setting, datasets, out=out, table_md=_TABLE_MD.value,
        epsilons=common.parse_floats(_EPSILONS.value, "--epsilons"),
        iterations=common.parse_ints(_ITERATIONS.value, "--iterations"),
        sigma=_SIGMA.value, **where)
  elif _TABLE.value:
    records = experiment.run_table(setting, datasets, out=out,
                                   table_md=_TABLE_MD.value, **where)
  else:
    setting.check()
    experiment.check_datasets(datasets, data_dir=_DATA_DIR.value,
                              scaling=setting.scaling)
    warning = setting.warning()
    if warning:  # said before any work (issue #32)
      common.progress(warning)
    if experiment.key(setting) in common.done_keys(out,
                                                   experiment.KEY_FIELDS):
      common.progress(f"skipping 1 finished run: this setting is already "
                      f"in {out} (remove its line, or give another --out, "
                      f"to run it again)")
      return
    common.progress(f"{setting.dataset}: loading")
    common.emit_record(experiment.run(setting, progress=common.progress,
                                      **where), out)
    return
  mode = "selection_table" if _SELECTION_TABLE.value else "table"
  print(common.to_json({mode: True, "records": len(records), "out": out,
                        "table_md": _TABLE_MD.value}))


if __name__ == "__main__":
  common.run_cli(main)
