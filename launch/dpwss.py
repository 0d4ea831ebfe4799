r"""DPWSS against LIBSVM's WSS2 (PeerJ CS 7:e799, 2021).

One setting (5 vmapped repeats, the paper's protocol)::

  python -m launch.dpwss                       # heart (bundled), DPWSS
  python -m launch.dpwss --dataset=heart --wss=dpwss --selection_epsilon=1 \
      --sigma=0.7 --shrinking

Table mode: the paper's Table 3 grid — WSS2, and DPWSS at σ ∈ {0.1, 0.3,
0.5, 0.7} with ε = 1 and ε ∈ {0.5, 0.1} with σ = 0.7, shrinking on and
off — on every dataset given (comma-separated), as JSON lines plus a
Markdown table shaped like the paper's (``--table_md``)::

  python -m launch.dpwss --table --dataset=heart,breast_cancer \
      --scaling=auto_minmax --out=results/dpwss_table3.jsonl \
      --table_md=results/dpwss_table3.md

The private selection (both indices drawn by the exponential mechanism,
exactly ``--max_iter`` iterations; ``--epsilon`` is then a real budget,
split evenly over the 2·max_iter draws)::

  python -m launch.dpwss --selection=private --epsilon=10 \
      --max_iter=2000 --sigma=0.5

Flags are spelt as the library's parameters (``mechanisms.svm.dpwss.
make_plan``'s ``selection_epsilon``, ``epsilon``, ``sigma``, ``delta``,
``max_iter``; the solver's ``c``, ``eps``, ``kernel``, ``gamma``, …), so
a refusal names the flag to change. ``--epsilon`` is a total budget, as
everywhere in the library; the ε of each draw is ``--selection_epsilon``.
Old spellings stay as aliases: ``--total_epsilon`` (``--epsilon``),
``--eps_stop`` (``--eps``), ``--total_epsilons`` (``--epsilons``).

Selection mode: WSS2, the paper's selection and the private one, side by
side (``results/dpwss_private_selection.jsonl`` in the README)::

  python -m launch.dpwss --selection_table --dataset=heart,breast_cancer \
      --scaling=auto_minmax --epsilons=1,10,100 \
      --out=results/dpwss_private_selection.jsonl \
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
the data and is outside any guarantee, so it has to be asked for by name
(the record's ``resolved.scaling`` says which rule ran).
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
``--out`` (same settings: a record's first fields, the flags of
``launch.experiments.dpwss.Setting``) are skipped (``skipping N finished
runs``), so an interrupted table resumes. Files keep their precision:
``svmlight:`` sets load as float64, so with ``--shrinking=false
--dtype=float64`` WSS2 follows LIBSVM's iterations on the same file.
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
_EVAL = flags.DEFINE_enum("eval", "train", list(vocabulary.EvalSplit),
                          "Evaluate on the training set (paper) or test.")
_WSS = flags.DEFINE_enum("wss", "dpwss", list(vocabulary.WorkingSet),
                         "Working-set selection: LIBSVM's WSS2 or DPWSS.")
_SELECTION = flags.DEFINE_enum(
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
_DELTA = flags.DEFINE_float("delta", 1e-5, "δ of the composed guarantee.")
_MAX_ITER = flags.DEFINE_integer("max_iter", None, "Iteration cap T.")
_KERNEL = flags.DEFINE_enum("kernel", "rbf", list(options.Kernel), "Kernel.")
_GAMMA = flags.DEFINE_float("gamma", None, "γ (default 1/num_features).")
_COEF0 = flags.DEFINE_float("coef0", 0.0, "coef0 (poly, sigmoid).")
_DEGREE = flags.DEFINE_integer("degree", 3, "degree (poly).")
_C = flags.DEFINE_float("c", 1.0, "C.")
_EPS = flags.DEFINE_float("eps", 1e-3, "Stopping tolerance (LIBSVM's -e).")
_SHRINKING = flags.DEFINE_bool("shrinking", False, "LIBSVM's shrinking.")
_DTYPE = flags.DEFINE_enum("dtype", "float64", list(vocabulary.SolverDtype),
                           "Solver precision.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Repeats (vmapped).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.")
_RELEASE = flags.DEFINE_enum(
    "release", "none", list(vocabulary.Release),
    "Private release of a linear (w, b); 'none' releases nothing private.")
_RELEASE_EPSILON = flags.DEFINE_float("release_epsilon", 1.0,
                                      "ε of the output perturbation.")
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
  if not out:
    raise ValueError("--out: give a JSON-lines file path.")
  common.check_output_path(out, "--out")
  if _TABLE_MD.value:
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
  setting = experiment.Setting(
      dataset=datasets[0] if datasets else "",
      classes=experiment.parse_classes(_CLASSES.value),
      scaling=_SCALING.value, eval=_EVAL.value, wss=_WSS.value,
      selection=_SELECTION.value, selection_epsilon=per_draw,
      epsilon=_EPSILON.value, sigma=_SIGMA.value, delta=_DELTA.value,
      max_iter=_MAX_ITER.value, kernel=_KERNEL.value, gamma=_GAMMA.value,
      coef0=_COEF0.value, degree=_DEGREE.value, c=_C.value, eps=_EPS.value,
      shrinking=_SHRINKING.value, dtype=_DTYPE.value, repeats=_REPEATS.value,
      seed=_SEED.value, release=_RELEASE.value,
      release_epsilon=_RELEASE_EPSILON.value)
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
