"""Experiment logic of ``launch.kernel_compare`` (no flags; importable).

Private kernel SVMs against non-private RBF SVMs on the DPWSS paper's data
sets that the loaders have. See ``launch/kernel_compare.py`` for the
command line and ``docs/random_features.md`` for the protocol, fixed before
any test accuracy was looked at (the split, the scaling, the methods of
:data:`METHODS` and their :data:`RECIPE`), the records and the results.
"""

from __future__ import annotations

import dataclasses
import time
import zlib

import jax
import numpy as np

from dpcore import accounting, options, validation
from launch import common, vocabulary
from launch.data import loaders
from launch.experiments import dpwss as dpwss_experiment
from mechanisms.erm import output_perturbation
from mechanisms.svm import dpwss, kernels, random_features, smo_train

METHODS = ("libsvm", "wss2", "dpwss_paper", "linear_output_perturbation",
           "rff_dpsgd", "rff_output_perturbation")
PRIVATE_METHODS = ("linear_output_perturbation", "rff_dpsgd",
                   "rff_output_perturbation")
NON_PRIVATE_METHODS = ("libsvm", "wss2")
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DELTA = 1e-5
SEEDS = 3
TEST_FRACTION = 0.3
SPLIT_SEED = 0
DATASETS = ("heart", "breast_cancer", "digits")
DEFAULT_CLASSES = (3, 8)

# One public recipe per method, fixed before the test results were seen
# (chosen on heart's training rows only; see docs/random_features.md).
RECIPE = {
    "libsvm": {"c": 1.0, "gamma": "1/d", "eps": 1e-3},
    "wss2": {"c": 1.0, "gamma": "1/d", "eps": 1e-3, "shrinking": False},
    "dpwss_paper": {"c": 1.0, "gamma": "1/d", "sigma": 0.5, "eps": 1e-3},
    "linear_output_perturbation": {"c": 0.3, "rows": "unit_ball"},
    "rff_dpsgd": {"num_features": 256, "gamma": "1/d",
                  "loss": "huber_hinge", "sampling_rate": 0.25,
                  "epochs": 40, "clip_norm": 1.0, "learning_rate": 0.5,
                  "weight_decay": 0.0},
    "rff_output_perturbation": {"num_features": 16, "gamma": "1/d",
                                "c": 0.3},
}

RECIPE_CHOSEN_ON = {"heart": ("linear_output_perturbation", "rff_dpsgd",
                              "rff_output_perturbation")}
"""The private recipes above that were chosen, without a privacy
mechanism, on the training rows of a set they then run on: their records
there say that the choice is not covered by ε."""

KEY_FIELDS = ("dataset", "classes", "scaling", "method", "epsilon", "delta",
              "seeds", "test_fraction", "split_seed", "recipe")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setting:
  """One comparison: which sets, methods and budgets, and the fixed split.

  The fields are ``launch.kernel_compare``'s flags; :meth:`check` refuses
  a bad one before any data is read, naming it.
  """
  datasets: tuple[str, ...] = DATASETS
  methods: tuple[str, ...] = METHODS
  epsilons: tuple[float, ...] = EPSILONS
  delta: float = DELTA
  seeds: int = SEEDS
  test_fraction: float = TEST_FRACTION
  split_seed: int = SPLIT_SEED
  scaling: str = vocabulary.Scaling.AUTO_MINMAX
  classes: tuple[int, int] = DEFAULT_CLASSES

  def check(self, data_dir=None) -> Setting:
    """Refuses bad settings before any data is read (one-line messages);
    finds every data set's files in ``data_dir`` (reading none)."""
    unknown = [m for m in self.methods if m not in METHODS]
    if unknown or not self.methods:
      raise ValueError(f"methods={','.join(self.methods)!r}: choose from "
                       f"{', '.join(METHODS)}.")
    if not self.epsilons:
      raise ValueError("epsilons: give at least one ε (e.g. 1,4).")
    for eps in self.epsilons:
      validation.check_epsilon(eps, "epsilons")
    validation.check_delta(self.delta, "delta")
    validation.check_positive_int(self.seeds, "seeds")
    if not (isinstance(self.test_fraction, float)
            and 0.0 < self.test_fraction < 1.0):
      raise ValueError(f"test_fraction={self.test_fraction!r}: must lie in "
                       f"(0, 1), e.g. 0.3.")
    options.parse(vocabulary.Scaling, self.scaling, "scaling")
    dpwss_experiment.parse_classes(self.classes)
    dpwss_experiment.check_datasets(self.datasets, data_dir=data_dir,
                                    scaling=self.scaling)
    return self


# -- data ----------------------------------------------------------------------


def split_indices(n: int, *, test_fraction: float = TEST_FRACTION,
                  split_seed: int = SPLIT_SEED):
  """(train, test) row indices: a fixed permutation, the first part test."""
  perm = np.asarray(jax.random.permutation(jax.random.key(split_seed), n))
  test = int(round(test_fraction * n))
  if test < 1 or n - test < 2:
    raise ValueError(f"a {test_fraction:g} test split of {n} rows leaves "
                     f"{n - test} training and {test} test rows; use a "
                     f"larger data set.")
  return perm[test:], perm[:test]


def prepare(name, *, classes=DEFAULT_CLASSES, scaling="auto_minmax",
            test_fraction=TEST_FRACTION, split_seed=SPLIT_SEED,
            data_dir=None) -> dict:
  """The fixed split of one data set, scaled, labels ±1 (float64 rows)."""
  ds = loaders.load_dataset(name, data_dir=data_dir)
  if ds.x_test is not None:  # one pool, then the fixed split
    x_all = np.concatenate([ds.x_train, ds.x_test])
    y_all = np.concatenate([ds.y_train, ds.y_test])
  else:
    x_all, y_all = ds.x_train, ds.y_train
  two = len(np.unique(y_all)) == 2  # a binary set keeps its two classes
  keep, y = dpwss_experiment.binary_labels(y_all, None if two else classes,
                                           name)
  x = np.asarray(x_all, np.float64)[keep]
  rule = dpwss_experiment.resolve_scaling(name, scaling, ds.bounds)
  train, test = split_indices(len(y), test_fraction=test_fraction,
                              split_seed=split_seed)
  if len(np.unique(y[train])) < 2 or len(np.unique(y[test])) < 2:
    raise ValueError(f"{name!r}: the fixed split leaves one class out of "
                     f"a part; use another split_seed.")
  x_train = dpwss_experiment.scale_rows(x[train], ds.bounds, rule,
                                        x[train])
  x_test = dpwss_experiment.scale_rows(x[test], ds.bounds, rule, x[train])
  return {"x_train": x_train, "y_train": y[train], "x_test": x_test,
          "y_test": y[test], "scaling": rule,
          "classes": None if two else list(classes)}


# -- the methods ---------------------------------------------------------------


def _accuracy(y, predicted) -> float:
  return float(np.mean(np.asarray(predicted) == np.asarray(y)))


def _keys(seed: int, dataset: str, method: str):
  """(public feature key, training key) of one seed: distinct streams."""
  root = jax.random.fold_in(jax.random.key(seed),
                            zlib.crc32(f"{dataset}/{method}".encode()))
  feature_key, train_key = jax.random.split(root)
  return feature_key, train_key


def _libsvm(data, recipe) -> float:
  from libsvm import svmutil  # pylint: disable=g-import-not-at-top
  x, y = data["x_train"], data["y_train"]
  gamma = 1.0 / x.shape[1]
  model = svmutil.svm_train(
      y.tolist(), x, f"-s 0 -t 2 -c {recipe['c']} -g {gamma!r} "
      f"-e {recipe['eps']} -q")
  labels, _, _ = svmutil.svm_predict(data["y_test"].tolist(),
                                     data["x_test"], model, "-q")
  return _accuracy(data["y_test"], labels)


def _rbf(data):
  return kernels.KernelSpec(options.Kernel.RBF).resolve(
      data["x_train"].shape[1])


def _wss2(data, recipe) -> float:
  model = smo_train.wss2_train(data["x_train"], data["y_train"],
                               kernel=_rbf(data), c=recipe["c"],
                               eps=recipe["eps"], shrinking=False)
  return _accuracy(data["y_test"], model.predict(data["x_test"]))


def run_method(method, data, *, epsilon, delta, seeds, dataset) -> dict:
  """Test accuracies of ``seeds`` runs and the privacy of one run."""
  recipe = RECIPE[method]
  x, y = data["x_train"], data["y_train"]
  x_test, y_test = data["x_test"], data["y_test"]
  ledger = accounting.PrivacyLedger()
  extra = {}
  if method in NON_PRIVATE_METHODS:
    fn = _libsvm if method == "libsvm" else _wss2
    accuracy = fn(data, recipe)  # deterministic: one run
    return {"accuracy": [accuracy], "privacy": accounting.no_guarantee_record(
        accounting.NON_PRIVATE), "neighbouring": None,
        "model_is_private": False}
  if method == "dpwss_paper":
    _, key = _keys(0, dataset, method)
    plan = dpwss.make_plan(selection_epsilon=epsilon, sigma=recipe["sigma"],
                           delta=delta, selection="paper")
    fits = dpwss.release(key, plan, x, y, kernel=_rbf(data), c=recipe["c"],
                         eps=recipe["eps"], repeats=seeds)
    accuracies = [_accuracy(y_test, m.predict(x_test)) for m in fits.models]
    return {"accuracy": accuracies, "privacy": plan.report(),
            "neighbouring": None, "model_is_private": False,
            "iterations": [int(i) for i in fits.iterations]}
  # One plan for every seed (a seed changes the keys, not the public facts).
  if method == "linear_output_perturbation":
    plan = output_perturbation.make_plan(epsilon=epsilon, c=recipe["c"])
  elif method == "rff_dpsgd":
    plan = random_features.make_dpsgd_plan(
        x.shape[0], epsilon=epsilon, delta=delta,
        sampling_rate=recipe["sampling_rate"], epochs=recipe["epochs"],
        learning_rate=recipe["learning_rate"], clip_norm=recipe["clip_norm"],
        loss=recipe["loss"], weight_decay=recipe["weight_decay"])
    extra = {"noise_multiplier": plan.noise_multiplier, "steps": plan.steps}
  else:
    plan = random_features.make_output_perturbation_plan(c=recipe["c"],
                                                         epsilon=epsilon)
  accuracies = []
  for seed in range(seeds):
    feature_key, key = _keys(seed, dataset, method)
    if method == "linear_output_perturbation":
      release = output_perturbation.release(
          key, plan, dpwss_experiment.release_rows(x), y)
      scores = release.decision_function(
          dpwss_experiment.release_rows(x_test))
      predicted = np.where(scores > 0, 1.0, -1.0)
    else:
      fmap = random_features.make_feature_map(
          feature_key, dim=x.shape[1], num_features=recipe["num_features"])
      learn = (random_features.fit_dpsgd if method == "rff_dpsgd"
               else random_features.release_output_perturbation)
      predicted = learn(key, plan, fmap, x, y).predict(x_test)
    accuracies.append(_accuracy(y_test, predicted))
  if method == "linear_output_perturbation":
    plan.record(ledger, label="linear_output_perturbation")
  else:
    plan.record(ledger)
  return {"accuracy": accuracies, "privacy": ledger.report(delta),
          "neighbouring": ledger.relation.value, "model_is_private": True,
          **extra}


def run_one(*, dataset, data, method, epsilon, delta, seeds, test_fraction,
            split_seed) -> dict:
  """One record: (data set, method, ε), every seed."""
  start = time.perf_counter()
  out = run_method(method, data, epsilon=epsilon, delta=delta, seeds=seeds,
                   dataset=dataset)
  acc = np.asarray(out.pop("accuracy"))
  reads = data["scaling"] == "minmax"
  scope = ("one run (one seed) of the method on the training rows given "
           "the split and scaling; each seed is its own run")
  if reads:
    scope += ("; the min/max scaling read the training data and is NOT "
              "covered by epsilon")
  if method in RECIPE_CHOSEN_ON.get(dataset, ()):
    scope += ("; the recipe was chosen on these training rows without a "
              "privacy mechanism (docs/random_features.md) and is NOT "
              "covered by epsilon")
  return {
      "dataset": dataset, "classes": data["classes"],
      "scaling": data["scaling"], "scaling_reads_data": reads,
      "method": method,
      "epsilon": None if method in NON_PRIVATE_METHODS else epsilon,
      "delta": delta, "seeds": seeds, "test_fraction": test_fraction,
      "split_seed": split_seed, "n_train": int(len(data["y_train"])),
      "n_test": int(len(data["y_test"])), "recipe": RECIPE[method],
      "accuracy_mean": float(acc.mean()),
      "accuracy_sd": float(acc.std(ddof=1)) if acc.size > 1 else 0.0,
      "accuracy_per_seed": acc.tolist(),
      "privacy": out.pop("privacy"), "privacy_scope": scope, **out,
      "seconds": time.perf_counter() - start,
  }


def run_key(**fields) -> tuple:
  return common.record_key(fields, KEY_FIELDS)


def run(setting: Setting, *, data_dir=None, out=None, table_md=None,
        emit=None, progress=common.progress) -> list[dict]:
  """Every (data set, method, ε) record; non-private methods once per set.

  Records already in ``out`` (same settings) are skipped; ``emit`` (default
  :func:`launch.common.emit_record`) writes each new one.
  """
  s = setting.check(data_dir)
  emit = emit or common.emit_record
  done = common.done_keys(out, KEY_FIELDS) if out else set()
  records = []
  for name in s.datasets:
    progress(f"{name}: loading")
    data = prepare(name, classes=s.classes, scaling=s.scaling,
                   test_fraction=s.test_fraction, split_seed=s.split_seed,
                   data_dir=data_dir)
    for method in s.methods:
      grid = [None] if method in NON_PRIVATE_METHODS else list(s.epsilons)
      for eps in grid:
        probe = {"dataset": name, "classes": data["classes"],
                 "scaling": data["scaling"], "method": method,
                 "epsilon": eps, "delta": s.delta, "seeds": s.seeds,
                 "test_fraction": s.test_fraction,
                 "split_seed": s.split_seed, "recipe": RECIPE[method]}
        if run_key(**probe) in done:
          progress(f"{name}: skipping 1 finished run ({method}, ε={eps})")
          continue
        progress(f"{name}: {method}" + (f", ε={eps:g}" if eps else ""))
        rec = run_one(dataset=name, data=data, method=method,
                      epsilon=eps if eps is not None else 0.0,
                      delta=s.delta, seeds=s.seeds,
                      test_fraction=s.test_fraction,
                      split_seed=s.split_seed)
        emit(rec, out)
        records.append(rec)
  if table_md:
    with open(table_md, "w", encoding="utf-8") as f:
      f.write(markdown_table(common.read_jsonl(out) if out else records,
                             s.datasets, s.epsilons))
  return records


LABELS = {
    "libsvm": "LIBSVM RBF (non-private)",
    "wss2": "WSS2 SMO, RBF (non-private)",
    "dpwss_paper": "DPWSS, paper (nominal ε, no guarantee)",
    "linear_output_perturbation": "linear SVM, output perturbation (ε-DP)",
    "rff_dpsgd": "RFF + DP-SGD (ε, δ)",
    "rff_output_perturbation": "RFF + output perturbation (ε-DP)",
}


def markdown_table(records, datasets, epsilons) -> str:
  """Test accuracy mean ± sd: one row per (set, method), one column per ε."""
  head = ["set", "method"] + [f"ε = {e:g}" for e in epsilons]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for name in datasets:
    for method in METHODS:
      cells, seen = [], False
      for eps in epsilons:
        want = None if method in NON_PRIVATE_METHODS else eps
        match = [r for r in records if r["dataset"] == name
                 and r["method"] == method and r["epsilon"] == want]
        if match:
          seen = True
          r = match[-1]
          cells.append(f"{100 * r['accuracy_mean']:.1f} ± "
                       f"{100 * r['accuracy_sd']:.1f}")
        else:
          cells.append("–")
      if seen:
        lines.append(f"| {name} | {LABELS[method]} | " + " | ".join(cells)
                     + " |")
  return "\n".join(lines) + "\n"


__all__ = [
    "DATASETS", "DEFAULT_CLASSES", "DELTA", "EPSILONS", "KEY_FIELDS",
    "LABELS", "METHODS", "NON_PRIVATE_METHODS", "PRIVATE_METHODS", "RECIPE",
    "RECIPE_CHOSEN_ON",
    "SEEDS", "SPLIT_SEED", "Setting", "TEST_FRACTION", "markdown_table",
    "prepare", "run", "run_key", "run_method", "run_one", "split_indices",
]
