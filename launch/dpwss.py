r"""DPWSS against LIBSVM's WSS2 (PeerJ CS 7:e799, 2021).

One setting (5 vmapped repeats, the paper's protocol)::

  python -m launch.dpwss                       # heart (bundled), DPWSS
  python -m launch.dpwss --dataset=heart --wss=dpwss --epsilon=1 \
      --sigma=0.7 --shrinking

Table mode: the paper's Table 3 grid — WSS2, and DPWSS at σ ∈ {0.1, 0.3,
0.5, 0.7} with ε = 1 and ε ∈ {0.5, 0.1} with σ = 0.7, shrinking on and
off — on every dataset given (comma-separated), as JSON lines plus a
Markdown table shaped like the paper's (``--table_md``)::

  python -m launch.dpwss --table --dataset=heart,breast_cancer \
      --scaling=auto_minmax --out=results/dpwss_table3.jsonl \
      --table_md=results/dpwss_table3.md

The private selection (both indices drawn by the exponential mechanism,
exactly ``--max_iter`` iterations; ``--total_epsilon`` is then a real
budget, split evenly over the 2·max_iter draws)::

  python -m launch.dpwss --selection=private --total_epsilon=10 \
      --max_iter=2000 --sigma=0.5

Selection mode: WSS2, the paper's selection and the private one, side by
side (``results/dpwss_private_selection.jsonl`` in the README)::

  python -m launch.dpwss --selection_table --dataset=heart,breast_cancer \
      --scaling=auto_minmax --out=results/dpwss_private_selection.jsonl \
      --table_md=results/dpwss_private_selection.md

Protocol. The paper trains with LIBSVM's defaults (C = 1, RBF, γ = 1/d,
eps = 1e-3) and, judging from its confusion counts (e.g. heart: recall
98/120 on 270 rows), evaluates on the training set; ``--eval=train`` does
the same (default) and ``--eval=test`` uses the dataset's own test split.
Metrics are averaged over the repeats; objError = |obj_DPWSS − obj_WSS2|
and iterationRatio = #iter_DPWSS / #iter_WSS2 use a WSS2 run with the same
settings.

Scaling (``--scaling``): ``auto`` maps public bounds to [−1, 1] (``box``:
heart's published [−1, 1], digits' pixel range 0..16), keeps other LIBSVM
files as published (``none``) and refuses tabular sets without public
bounds (breast_cancer). ``auto_minmax`` does the same but applies
``minmax`` to those sets: per-feature min/max of the training data to
[−1, 1], what LIBSVM's ``svm-scale`` did to the paper's datasets. That reads
the data and is outside any guarantee, so it has to be asked for by name.
``unit_rows`` (per-row norm 1) and ``unit_ball`` (x/max(1, ‖x‖)) are
data-independent.
``--release=output_perturbation`` requires a data-independent scaling and
projects rows onto the unit ball.

Privacy, plainly. Every record's ``privacy`` has the fields of
``dpcore.accounting.PRIVACY_FIELDS``; DPWSS-specific figures are under
``dpwss``. ``--selection=paper`` (default, the paper's algorithm)
has no DP guarantee: the record's ``privacy.epsilon`` is null, and the
paper's figure is ``privacy.epsilon_nominal`` (with
``dpwss.epsilon_nominal_basic``/``_composed``: what composing the paper's
per-selection claim would give, were it true; it is not — see
``mechanisms/svm/dpwss.py``). ``--selection=private`` reports the ledger's
composition of its 2T draws at ``--delta`` in ``privacy.epsilon``; it
covers the transcript only. In both, the trained SMO model is NOT
differentially private (``model_is_private`` is false) unless
``--release=output_perturbation`` (linear kernel only): the released noisy
(w, b), under ``released_model``, is ε_release-DP on its own, and one more
entry in the same ledger. The SMO model's metrics, objective and iteration
counts in the record are diagnostics computed on non-private outputs.

Every flag is checked, and every data set of a list found, before any data
is read or code compiled; a mistake ends with one ``error:`` line and exit
status 2. Records are printed, then appended to ``--out``; runs already in
``--out`` are skipped (``skipping N finished runs``), so an interrupted
table resumes. Files keep their precision: ``svmlight:`` sets load as
float64, so with ``--shrinking=false --dtype=float64`` WSS2 follows
LIBSVM's iterations on the same file.
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
_SCALING = flags.DEFINE_enum(
    "scaling", "auto", list(vocabulary.Scaling),
    "Feature scaling (see module docstring).")
_WSS = flags.DEFINE_enum("wss", "dpwss", list(vocabulary.WorkingSet),
                         "Selection.")
_SELECTION = flags.DEFINE_enum(
    "selection", "paper", list(options.Selection),
    "DPWSS selection: 'paper' (the paper's algorithm; no DP guarantee) or "
    "'private' (i and j by the exponential mechanism, exactly --max_iter "
    "iterations; the transcript is (ε, δ)-DP).")
_EPSILON = flags.DEFINE_float(
    "epsilon", 1.0, "ε per exponential-mechanism draw (paper's ε; nominal "
    "for --selection=paper).")
_TOTAL_EPSILON = flags.DEFINE_float(
    "total_epsilon", None, "If set (with --max_iter), the per-draw ε is "
    "derived so that the draws of max_iter iterations (1 each for paper, "
    "nominal; 2 each for private) cost this ε at --delta (zCDP/RDP "
    "bisection); overrides --epsilon.")
_SIGMA = flags.DEFINE_float("sigma", 0.5, "Constant factor σ ∈ (0, 1).")
_C = flags.DEFINE_float("c", 1.0, "C.")
_KERNEL = flags.DEFINE_enum("kernel", "rbf", list(options.Kernel), "Kernel.")
_GAMMA = flags.DEFINE_float("gamma", None, "γ (default 1/num_features).")
_COEF0 = flags.DEFINE_float("coef0", 0.0, "coef0 (poly, sigmoid).")
_DEGREE = flags.DEFINE_integer("degree", 3, "degree (poly).")
_EPS_STOP = flags.DEFINE_float("eps_stop", 1e-3, "Stopping tolerance.")
_SHRINKING = flags.DEFINE_bool("shrinking", False, "LIBSVM's shrinking.")
_MAX_ITER = flags.DEFINE_integer("max_iter", None, "Iteration cap.")
_RELEASE = flags.DEFINE_enum(
    "release", "none", list(vocabulary.Release),
    "Private release of a linear (w, b); 'none' releases nothing private.")
_RELEASE_EPSILON = flags.DEFINE_float("release_epsilon", 1.0,
                                      "ε of the output perturbation.")
_DELTA = flags.DEFINE_float("delta", 1e-5, "δ of the composed guarantee.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Repeats (vmapped).")
_MEMORY_BUDGET = flags.DEFINE_string(
    "memory_budget", "auto",
    "the training's memory budget, e.g. 8G or 512M; auto: 3/4 of the "
    "memory the system reports available. The repeats run in the largest "
    "chunk that fits (printed), Q is cached only where it fits, and a "
    "setting whose estimate exceeds it even one repeat at a time is "
    "refused before training")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.")
_DTYPE = flags.DEFINE_enum("dtype", "float64", list(vocabulary.SolverDtype),
                           "Solver precision.")
_EVAL = flags.DEFINE_enum("eval", "train", list(vocabulary.EvalSplit),
                          "Evaluate on the training set (paper) or test.")
_TABLE = flags.DEFINE_bool("table", False, "Table-3 grid mode.")
_SELECTION_TABLE = flags.DEFINE_bool(
    "selection_table", False, "Private-selection comparison mode: WSS2, "
    "the paper's selection and the private one on every dataset.")
_TOTAL_EPSILONS = flags.DEFINE_list(
    "total_epsilons", ["1", "10", "100"],
    "--selection_table: total ε of the private runs.")
_ITERATIONS = flags.DEFINE_list(
    "iterations", ["500", "2000"],
    "--selection_table: iteration counts T of the private runs.")
_TABLE_MD = flags.DEFINE_string("table_md", None, "Markdown table path.")
_OUT = flags.DEFINE_string("out", "results/dpwss.jsonl", "JSON lines.")


def _numbers(flag, values, kind):
  try:
    return tuple(kind(v) for v in values)
  except ValueError:
    raise ValueError(f"{flag}={','.join(values)!r}: expected a "
                     f"comma-separated list of "
                     f"{'integers' if kind is int else 'numbers'}.") from None


def main(argv):
  del argv
  # Heavy imports here, so --help and flag errors stay fast.
  with common.heavy_imports():
    from dpcore import memory  # pylint: disable=g-import-not-at-top
    from launch.data import loaders  # pylint: disable=g-import-not-at-top
    from launch.experiments import (  # pylint: disable=g-import-not-at-top
        dpwss as experiment,
    )

  out = _OUT.value
  if not out:
    raise ValueError("--out: give a JSON-lines file path.")
  common.check_output_path(out, "--out")
  if _TABLE_MD.value:
    common.check_output_path(_TABLE_MD.value, "--table_md")
  if _TABLE.value and _SELECTION_TABLE.value:
    raise ValueError("--table and --selection_table are two modes; give "
                     "one of them.")
  datasets = [d.strip() for d in _DATASET.value.split(",") if d.strip()]
  table_mode = _TABLE.value or _SELECTION_TABLE.value
  if not datasets:
    raise ValueError(f"--dataset={_DATASET.value!r}: give a name "
                     f"(e.g. heart).")
  if len(datasets) > 1 and not table_mode:
    raise ValueError(f"--dataset={_DATASET.value!r}: a list of data sets "
                     f"needs --table or --selection_table; give one name "
                     f"for a single run.")
  classes = experiment.parse_classes(_CLASSES.value)
  if _MEMORY_BUDGET.value == "auto":
    memory_budget = memory.default_budget()
  else:
    memory_budget = common.parse_bytes(_MEMORY_BUDGET.value,
                                       "--memory_budget")
  settings = dict(
      data_dir=_DATA_DIR.value, classes=classes, scaling=_SCALING.value,
      c=_C.value, kernel=_KERNEL.value, gamma=_GAMMA.value,
      coef0=_COEF0.value, degree=_DEGREE.value, eps_stop=_EPS_STOP.value,
      max_iter=_MAX_ITER.value, delta=_DELTA.value, repeats=_REPEATS.value,
      seed=_SEED.value, dtype=_DTYPE.value, evaluate=_EVAL.value,
      memory_budget=memory_budget)
  single = dict(
      wss=_WSS.value, epsilon=_EPSILON.value, sigma=_SIGMA.value,
      shrinking=_SHRINKING.value, release=_RELEASE.value,
      release_epsilon=_RELEASE_EPSILON.value,
      total_epsilon=_TOTAL_EPSILON.value, selection=_SELECTION.value)
  if _SELECTION_TABLE.value:
    totals = _numbers("--total_epsilons", _TOTAL_EPSILONS.value, float)
    steps = _numbers("--iterations", _ITERATIONS.value, int)
    experiment.check_setting(**settings, sigma=_SIGMA.value)
  else:
    experiment.check_setting(**settings, **(
        {} if table_mode else single))
    if not table_mode:  # said before any work (issue #32)
      warning = experiment.setting_warning(**settings, **single)
      if warning:
        common.progress(warning)
  experiment.check_datasets(datasets, settings)
  for name in datasets:  # no data read: public bounds are known by name
    if not name.startswith(("svmlight:", "arff:")):
      experiment.resolve_scaling(name, _SCALING.value,
                                 loaders.public_bounds(name))
  if _SELECTION_TABLE.value:
    settings.pop("max_iter")
    records = experiment.run_selection_comparison(
        datasets=datasets, out=out, table_md=_TABLE_MD.value,
        sigma=_SIGMA.value, total_epsilons=totals, iterations=steps,
        **settings)
    print(common.to_json({"selection_table": True, "records": len(records),
                          "out": out, "table_md": _TABLE_MD.value}))
    return
  if _TABLE.value:
    records = experiment.run_table(datasets=datasets, out=out,
                                   table_md=_TABLE_MD.value, **settings)
    print(common.to_json({"table": True, "records": len(records),
                          "out": out, "table_md": _TABLE_MD.value}))
    return
  (name,) = datasets
  common.progress(f"{name}: loading")
  prepared = experiment.prepare(
      name, data_dir=settings["data_dir"], classes=classes,
      scaling=settings["scaling"], evaluate=settings["evaluate"],
      release=single["release"])
  args = {k: v for k, v in settings.items() if k != "data_dir"}
  args.update(single, dataset=name, prepared=prepared)
  if experiment.run_setting_key(args) in common.done_keys(
      out, experiment.KEY_FIELDS):
    common.progress(f"skipping 1 finished run: this setting is already in "
                    f"{out} (remove its line, or give another --out, to "
                    f"run it again)")
    return
  record = experiment.run_setting(progress=common.progress, **args)
  common.emit_record(record, out)


if __name__ == "__main__":
  common.run_cli(main)
