"""The law of Poisson subsampling, checked on what a mechanism really used.

Shared by the law tests of every call site that subsamples
(``tests/dpcore/trainer_law_test.py``, ``tests/federated/
fedsgd_law_test.py``, ``tests/mechanisms/lvq/train_law_test.py``,
``tests/mechanisms/features/scatternet_law_test.py``,
``tests/mechanisms/svm/random_features_law_test.py``). Each test runs the
mechanism itself many times (σ = 0, a clip that never binds, a loss whose
gradient puts every unit on its own coordinate), reads back from the
released model which units each run used, and hands the (runs, units)
table to :func:`failures`. The sampler's own tests cannot see a caller
that reads the sampler's output wrongly: federated DP-SGD once took a
compacted batch's slot mask for a per-participant mask, so participant 0
was included with probability 1 − (1 − q)^P and the last almost never,
while every sampler test passed.

Under Poisson sampling at rate q, run r includes unit u independently
with probability q, so for R runs of U units, each over T steps:

* unit u's total over the runs is Binomial(R·T, q) (a two-sided band,
  Bonferroni over the units);
* a run's total over the units (one step: the batch size) is
  Binomial(U·T, q) (a chi-square goodness-of-fit test);
* any two units are used together in a step with probability q² (a band
  per pair, Bonferroni over the pairs; one step only);
* over T > 1 steps, each (run, unit) count is Binomial(T, q) (chi-square;
  a key reused across steps gives counts 0 or T).

Every check has false-alarm probability at most ``alpha`` / 4 (1e-6 in
all), and the tests use fixed keys, so a pass is deterministic; each test
also asserts that the same table fails the checks at a wrong q.
"""

from __future__ import annotations

import ast
import pathlib

import numpy as np
from scipy import stats

ALPHA = 1e-6
"""Family-wise false-alarm probability of one :func:`failures` call."""

ROOT = pathlib.Path(__file__).resolve().parents[1]

SITES = {
    "dpcore/dpsgd_audit.py": "tests/dpcore/dpsgd_audit_test.py",
    "dpcore/trainer.py": "tests/dpcore/trainer_law_test.py",
    "dpcore/trainer_audit.py": "tests/dpcore/trainer_audit_test.py",
    "federated/fedsgd_audit.py": "tests/federated/fedsgd_audit_test.py",
    "federated/fedsgd.py": "tests/federated/fedsgd_law_test.py",
    "federated/ddgsgd.py": "tests/federated/fedsgd_law_test.py",
    "mechanisms/features/scatternet.py":
        "tests/mechanisms/features/scatternet_law_test.py",
    "mechanisms/lvq/train.py": "tests/mechanisms/lvq/train_law_test.py",
    "mechanisms/svm/random_features.py":
        "tests/mechanisms/svm/random_features_law_test.py",
}
"""Every library module that subsamples, and the law test that runs it.

``dpcore/dpsgd.py`` (the samplers themselves) is tested in
``tests/dpcore/dpsgd_test.py``."""

SAMPLING_CALLS = frozenset({"poisson_batch", "poisson_inclusion",
                            "clipped_batch_sum", "trainer.train"})


def sampling_calls(path) -> set[str]:
  """The Poisson samplers and DP-SGD entry points a module calls.

  Read from the module's syntax tree (calls only, not docstrings):
  ``*.poisson_batch(…)``, ``*.poisson_inclusion(…)``,
  ``*.clipped_batch_sum(…)`` and ``trainer.train(…)``.
  """
  tree = ast.parse(pathlib.Path(path).read_text(encoding="utf-8"))
  found = set()
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call):
      continue
    func = node.func
    if isinstance(func, ast.Attribute):
      name = func.attr
      if name == "train" and isinstance(func.value, ast.Name):
        name = f"{func.value.id}.train"
    else:
      name = getattr(func, "id", None)
    if name in SAMPLING_CALLS:
      found.add(name)
  return found


def counts(values, unit: float, *, tolerance: float = 0.05) -> np.ndarray:
  """Read-back: ``values / unit`` as integers, checked to be integers.

  ``values`` is what a mechanism released (e.g. the weight after one SGD
  step), ``unit`` what one use of one unit adds to it. A departure of more
  than ``tolerance`` from an integer means the read-back itself is wrong
  (a clip that bound, noise left on), not the sampling.
  """
  scaled = np.asarray(values, np.float64) / unit
  rounded = np.round(scaled)
  worst = float(np.max(np.abs(scaled - rounded), initial=0.0))
  assert worst <= tolerance, (
      f"read-back is not integral (worst departure {worst:.3g} units): "
      f"the released values are not a count of the units used")
  return rounded.astype(np.int64)


def _binomial_chi2_pvalue(samples, n: int, q: float) -> float:
  """p-value of the chi-square fit of integer ``samples`` to Binomial(n, q).

  Neighbouring values are pooled (from each end) until every bin expects at
  least 5 samples.
  """
  samples = np.asarray(samples, np.int64).ravel()
  if np.any((samples < 0) | (samples > n)):
    return 0.0
  observed = np.bincount(samples, minlength=n + 1).astype(np.float64)
  expected = stats.binom.pmf(np.arange(n + 1), n, q) * samples.size
  obs_bins, exp_bins = [], []
  obs_acc = exp_acc = 0.0
  for o, e in zip(observed, expected, strict=True):
    obs_acc, exp_acc = obs_acc + o, exp_acc + e
    if exp_acc >= 5.0:
      obs_bins.append(obs_acc)
      exp_bins.append(exp_acc)
      obs_acc = exp_acc = 0.0
  if obs_bins:  # the remainder joins the last bin
    obs_bins[-1] += obs_acc
    exp_bins[-1] += exp_acc
  else:
    obs_bins, exp_bins = [obs_acc], [exp_acc]
  if len(obs_bins) < 2:
    return 1.0  # one bin: nothing to compare
  obs_bins, exp_bins = np.array(obs_bins), np.array(exp_bins)
  chi2 = float(np.sum((obs_bins - exp_bins) ** 2 / exp_bins))
  return float(stats.chi2.sf(chi2, len(obs_bins) - 1))


def _band(trials: int, q: float, alpha: float) -> tuple[int, int]:
  """The two-sided (1 − alpha) acceptance band of Binomial(trials, q)."""
  lo = int(stats.binom.ppf(alpha / 2, trials, q))
  hi = int(stats.binom.isf(alpha / 2, trials, q))
  return lo, hi


def failures(table, q: float, *, steps: int = 1,
             alpha: float = ALPHA) -> list[str]:
  """The Poisson(q) law checks that ``table`` fails (empty: all pass).

  Args:
    table: (runs, units) integers: how many of the ``steps`` steps of
      run r used unit u (0/1 for one step).
    q: the sampling rate the mechanism was given.
    steps: T, the steps each run took.
    alpha: the family-wise false-alarm probability of all the checks.

  Returns:
    One line per failed check, naming the units and the numbers.
  """
  table = np.asarray(table, np.int64)
  assert table.ndim == 2, table.shape
  runs, units = table.shape
  each = alpha / 4  # four checks
  out = []
  if np.any((table < 0) | (table > steps)):
    return [f"counts outside [0, {steps}]: {np.unique(table)}"]
  # Each unit's inclusion rate.
  lo, hi = _band(runs * steps, q, each / units)
  totals = table.sum(axis=0)
  bad = np.flatnonzero((totals < lo) | (totals > hi))
  if bad.size:
    shown = ", ".join(f"unit {u}: {totals[u] / (runs * steps):.4f}"
                      for u in bad[:8])
    out.append(f"inclusion rate outside [{lo / (runs * steps):.4f}, "
               f"{hi / (runs * steps):.4f}] (q = {q:g}) for {bad.size} of "
               f"{units} units: {shown}")
  # The batch size (one step) or a run's total (T steps).
  sizes = table.sum(axis=1)
  p = _binomial_chi2_pvalue(sizes, units * steps, q)
  if p < each:
    out.append(f"batch-size law: chi-square p = {p:.3g} against "
               f"Binomial({units * steps}, {q:g}) (mean {sizes.mean():.3f}"
               f" vs {units * steps * q:.3f}, variance {sizes.var():.3f} vs "
               f"{units * steps * q * (1 - q):.3f})")
  if steps == 1:
    # Pairs: independent coins are used together at rate q².
    pairs = units * (units - 1) // 2
    if pairs:
      lo, hi = _band(runs, q * q, each / pairs)
      together = table.T @ table
      i, j = np.triu_indices(units, 1)
      co = together[i, j]
      bad = np.flatnonzero((co < lo) | (co > hi))
      if bad.size:
        shown = ", ".join(f"({i[b]}, {j[b]}): {co[b] / runs:.4f}"
                          for b in bad[:8])
        out.append(f"pairs used together outside [{lo / runs:.4f}, "
                   f"{hi / runs:.4f}] (q² = {q * q:g}) for {bad.size} of "
                   f"{pairs} pairs: {shown}")
  else:
    # Each (run, unit) count over T steps: Binomial(T, q) if the steps draw
    # independent coins.
    p = _binomial_chi2_pvalue(table, steps, q)
    if p < each:
      out.append(f"per-unit count over {steps} steps: chi-square p = "
                 f"{p:.3g} against Binomial({steps}, {q:g})")
  return out


def assert_law(table, q: float, *, steps: int = 1,
               wrong: tuple[float, ...] = (0.8, 1.25)) -> None:
  """Asserts ``table`` follows Poisson(q) and rejects each ``wrong`` × q.

  The second half is what makes the first worth anything: the same read
  back table, checked at 0.8q and 1.25q, must fail.
  """
  found = failures(table, q, steps=steps)
  assert not found, "\n".join(found)
  for factor in wrong:
    assert failures(table, factor * q, steps=steps), (
        f"the law check accepts q × {factor:g}: it has no power")
