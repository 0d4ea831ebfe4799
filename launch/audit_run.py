"""Collecting and running the audit specs, writing records and a page.

The body of ``python -m launch.audit`` (:mod:`launch.audit` holds only its
flags), importable without defining any flag.

The specs are found, not listed: :func:`audit_modules` walks the library
packages (:data:`PACKAGES`) and finds every module named ``*_audit`` (or
``audit``), each beside the mechanism it audits; :func:`specs` imports
them in sorted order and concatenates their ``specs()``. A new
mechanism's ``<module>_audit.py`` is audited without editing any list.

A record says what was audited and found: ``"claim"`` holds the audited
mechanism's reported ε at the audit's δ (None: no claim) and, where it
differs, the paper's nominal ε; ``"epsilon_lower"`` is the audit's 95 %
lower bound. The audit itself releases nothing, so its ``"privacy"`` is
:func:`dpcore.accounting.no_guarantee_record` (:data:`AUDIT_ONLY`).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import zlib

import jax

from dpcore import accounting, audit_spec, auditing, memory
from launch import common

PACKAGES = ("dpcore", "mechanisms", "federated")
"""The library packages searched for audit modules."""

AUDIT_ONLY = ("privacy audit: synthetic neighbouring data sets, nothing is "
              "released; the audited claim is under 'claim'")


def is_audit_module(name: str) -> bool:
  """Whether the dotted module ``name`` holds audit specs: its last part
  ends in ``_audit`` or is ``audit``."""
  leaf = name.rsplit(".", 1)[-1]
  return leaf == "audit" or leaf.endswith("_audit")


def _unimportable(name: str):
  """``walk_packages``' onerror: a sub-package that fails to import would
  otherwise be skipped in silence, and its audits with it."""
  raise ImportError(f"the audit runner cannot import the package {name} "
                    f"(its audit modules would be skipped); fix the "
                    f"import error first.")


def audit_modules() -> list[str]:
  """The dotted names of every audit module of :data:`PACKAGES`, sorted.

  Raises:
    ImportError: a sub-package cannot be imported.
  """
  names = []
  for package in PACKAGES:
    root = importlib.import_module(package)
    names.extend(info.name for info in
                 pkgutil.walk_packages(root.__path__, package + ".",
                                       onerror=_unimportable)
                 if not info.ispkg and is_audit_module(info.name))
  return sorted(names)


def specs(until=None) -> list[audit_spec.AuditSpec]:
  """Every audit spec of the library, broken variants included.

  Each module of :func:`audit_modules` in sorted order, and within a
  module the order of its ``specs()``. With ``until`` (spec names or
  groups), the modules after the one that completes them are not built
  (building every spec takes about 13 s of a 2-core CPU; ``--only``
  needs only its own).

  Raises:
    TypeError: an audit module has no ``specs()``.
    ValueError: two specs share a name (each spec's key is derived from
      its name, so two would draw the same noise).
  """
  out, seen = [], {}
  for name in audit_modules():
    module = importlib.import_module(name)
    if not callable(getattr(module, "specs", None)):
      raise TypeError(f"audit module {name} has no specs(): define "
                      f"specs() -> list[AuditSpec] (or rename the module "
                      f"so that it does not end in '_audit').")
    for spec in module.specs():
      if spec.name in seen:
        raise ValueError(f"audit spec {spec.name!r} is built by both "
                         f"{seen[spec.name]} and {name}; spec names must "
                         f"be unique.")
      seen[spec.name] = name
      out.append(spec)
    if until and set(until) <= set(seen) | {audit_spec.group(n)
                                            for n in seen}:
      break
  return out


def memory_budget(text: str | None) -> int | None:
  """``--memory_budget``: ``"auto"`` (3/4 of the memory available, None
  where the system does not say) or a size such as ``8G``."""
  if text is None or str(text).strip().lower() == "auto":
    return memory.default_budget()
  return common.parse_bytes(text, "--memory_budget")


def check_host_memory(selected, *, trials: int | None,
                      memory_budget: int | None) -> None:
  """Refuses, before any spec runs, trials whose statistics alone (held on
  the host, :data:`dpcore.auditing.HOST_BYTES_PER_TRIAL` bytes per trial
  of a side) exceed the budget; the rest is checked spec by spec."""
  if memory_budget is None:
    return
  for spec in selected:
    count = trials or spec.default_trials
    need = auditing.HOST_BYTES_PER_TRIAL * count
    if need > memory_budget:
      raise memory.MemoryBudgetError(
          f"spec {spec.name}: {count:,} trials per side need an estimated "
          f"{memory.size_text(need)} for their statistics alone, above the "
          f"memory budget of {memory.size_text(memory_budget)}; lower --trials "
          f"or raise --memory_budget.")


def run_one(spec: audit_spec.AuditSpec, *, seed: int, trials: int | None,
            chunk: int, memory_budget: int | None = None) -> dict:
  """Audits one spec and returns its JSON-ready record.

  ``memory_budget`` (bytes, None: no check) bounds the trials vmapped at
  once (:func:`dpcore.auditing.audit`); the record's ``batch`` is the
  batch chosen (None: a whole chunk at once).
  """
  key = jax.random.fold_in(jax.random.key(seed),
                           zlib.crc32(spec.name.encode()) & 0x7FFFFFFF)
  result = audit_spec.run(key, spec, trials=trials, chunk=chunk,
                          memory_budget=memory_budget)
  nominal = spec.nominal_epsilon
  if nominal is not None and spec.reported_epsilon is not None and abs(
      nominal - spec.reported_epsilon) <= 1e-9 * max(1.0, nominal):
    nominal = None  # shown only where it differs from the library's ε
  return {
      "name": spec.name, "relation": spec.relation,
      "settings": spec.settings, "broken": spec.broken,
      "claim": {"epsilon": spec.reported_epsilon, "delta": spec.delta,
                "epsilon_nominal": nominal},
      "epsilon_lower": result.epsilon_lower,
      "verdict": audit_spec.verdict(spec, result.epsilon_lower),
      "exceeds_nominal": (nominal is not None
                          and result.epsilon_lower > nominal),
      "threshold": result.threshold,
      "false_positive": result.false_positive,
      "false_negative": result.false_negative,
      "trials": result.trials, "seconds": result.seconds,
      "trials_per_second": result.trials_per_second,
      "chunk": chunk, "batch": result.batch,
      "memory_estimate": result.memory_estimate,
      "memory_budget": memory_budget,
      "seed": seed, "confidence": 0.95,
      "backend": jax.default_backend(),
      "privacy": accounting.no_guarantee_record(AUDIT_ONLY),
  }


def _fmt(value, digits: int = 3) -> str:
  if value is None:
    return "—"
  if isinstance(value, float):
    return f"{value:.{digits}g}" if abs(value) < 1e4 else f"{value:.3e}"
  return str(value)


def _settings(settings: dict) -> str:
  return ", ".join(f"{k}={_fmt(v)}" for k, v in settings.items())


def _result_cell(record: dict) -> str:
  cell = f"{record['epsilon_lower']:.3f}"
  v = record["verdict"]
  if v == "VIOLATION":
    cell += " **ABOVE THE REPORTED ε: privacy bug**"
  elif v == "NOT CAUGHT":
    cell += " **broken variant NOT caught**"
  elif v == "caught":
    cell += " (broken variant caught)"
  if record["exceeds_nominal"]:
    cell += " — finding: above the paper's nominal ε"
  return cell


def markdown_table(records: list[dict]) -> str:
  """The table: one row per audited spec (and canary position), then
  each spec's verdict over its positions."""
  lines = [
      "| mechanism | neighbouring relation | settings | reported ε (δ) "
      "| paper-nominal ε | audited 95 % lower bound | trials | seconds |",
      "|---|---|---|---|---|---|---|---|",
  ]
  for r in records:
    name = r["name"] + (" (broken)" if r["broken"] else "")
    claim = r["claim"]
    reported = ("no claim" if claim["epsilon"] is None else
                f"{claim['epsilon']:.3f} (δ={claim['delta']:g})")
    lines.append(
        f"| {name} | {r['relation']} | {_settings(r['settings'])} "
        f"| {reported} | {_fmt(claim['epsilon_nominal'])} "
        f"| {_result_cell(r)} | {r['trials']:,} | {r['seconds']:.1f} |")
  lines += ["", "Each spec's verdict over its canary positions (an unbroken "
            "spec holds only where every position holds; a broken one is "
            "caught where some position catches it):", "",
            "| spec | positions | verdict |", "|---|---|---|"]
  counts: dict[str, int] = {}
  for r in records:
    g = audit_spec.group(r["name"])
    counts[g] = counts.get(g, 0) + 1
  for g, v in audit_spec.group_verdicts(records).items():
    lines.append(f"| {g} | {counts[g]} | {v} |")
  return "\n".join(lines) + "\n"


_PAGE = """# Empirical privacy audit

Generated by `{command}` ({backend}, seed {seed}).{incomplete}

## What the table means

Each row audits one mechanism of the library on a worst-case pair of
neighbouring data sets (under the relation the library's accounting uses)
with a statistic of the released output chosen to tell them apart.
*reported ε* is the ε the library itself reports for that mechanism at the
audited δ (from `dpcore.accounting.PrivacyLedger` or the mechanism's
calibration); *paper-nominal ε* is a paper's figure, shown only where it
differs. *audited 95 % lower bound* is an ε that the mechanism provably
exceeds with probability at least 95 %, given the runs. Each bound holds
at 95 % on its own, not all of them together: over some ninety unbroken
rows a tight claim may be exceeded by chance. A bound above the reported
ε on an unbroken mechanism fails the script; run that spec again with
another `--seed` and more `--trials` (the keys are fixed, so the same
command gives the same bound): an excess that stays is a privacy bug. A
bound below the claim is what this test could demonstrate, not a proof
that the claim is tight. Rows marked *broken* are deliberately wrong
variants, one at least for every claim (σ or a scale halved, the DP-SGD
mask dropped, a clip or a box skipped, a sensitivity or a share sized
wrong), whose ε is still reported from the correct calibration: each must
be caught, i.e. its bound must exceed the reported ε, which shows that
the audits have the power to find such bugs.
Each mechanism's specs are built beside it, in the library modules named
`*_audit` (`dpcore.noise_audit`, `federated.fedsgd_audit`, …), and
collected by `launch.audit_run.specs`.
*trials* is the number of runs on each side; *seconds* the wall time
(compilation included). Each spec's default number of trials is set so
that the whole audit takes 7 to 12 minutes on a 2-core CPU (10⁶ for the
cheap scalar mechanisms, 1–5·10⁵ for DP-PCA, the fits and DP-SGD, 2·10⁴
for the broken DP-SGD variants, which are caught by far); pass `--trials`
for more power.

## Method

`dpcore.auditing.audit` runs the mechanism `trials` times on each data set
(vmapped over PRNG keys in chunks, jitted once per chunk shape), reduces
each output to the scalar statistic, and thresholds it. The threshold and
its direction are chosen on the first half of the runs; on the second half
the false-positive rate α and false-negative rate β of that fixed test get
one-sided Clopper–Pearson upper bounds α⁺, β⁺, each at level 97.5 %
(Bonferroni: both hold together with probability ≥ 95 %). Any (ε, δ)-DP
mechanism satisfies 1 − δ − β ≤ e^ε α and 1 − δ − α ≤ e^ε β, so

ε ≥ max(log((1 − δ − β⁺)/α⁺), log((1 − δ − α⁺)/β⁺), 0).

For the Gaussian mechanisms the claim is a whole privacy profile δ(ε);
the audits read it at δ = 1e-2, where a single threshold test comes close
to it.

## Results

{table}"""


def write_page(path: str, records: list[dict], *, command: str,
               seed: int, total: int | None = None) -> None:
  """Writes the Markdown page (directories created).

  With ``total`` specs selected and fewer records, the page says it is
  incomplete (a run still going, or one that stopped early), so that a
  page of finished rows is not read as the whole audit.
  """
  if not path:
    return
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  backend = records[0]["backend"] if records else jax.default_backend()
  incomplete = ""
  if total is not None and len(records) < total:
    incomplete = (f"\n\n**Incomplete: {len(records)} of {total} specs so "
                  f"far** (the run is still going, or it stopped early).")
  with open(path, "w", encoding="utf-8") as f:
    f.write(_PAGE.format(command=command, backend=backend, seed=seed,
                         incomplete=incomplete,
                         table=markdown_table(records)))


def run_audits(*, only=None, trials=None, seed=0, chunk=100_000,
               out=None, table=None, command="python -m launch.audit",
               memory_budget=None) -> list[dict]:
  """Runs the selected specs, writing records and the page as it goes.

  ``memory_budget`` (bytes, None: no check) is each spec's
  (:func:`run_one`).
  """
  selected = specs(until=only)
  if only:
    known = {s.name for s in selected} | {
        audit_spec.group(s.name) for s in selected}
    unknown = sorted(set(only) - known)
    if unknown:
      raise ValueError(f"--only names unknown specs {unknown}; known: "
                       f"{sorted(known)}.")
    selected = [s for s in selected if s.name in set(only)
                or audit_spec.group(s.name) in set(only)]
  check_host_memory(selected, trials=trials, memory_budget=memory_budget)
  records = []
  for i, spec in enumerate(selected):
    common.progress(f"[{i + 1}/{len(selected)}] {spec.name}: "
                    f"{trials or spec.default_trials:,} trials per side")
    record = run_one(spec, seed=seed, trials=trials, chunk=chunk,
                     memory_budget=memory_budget)
    if record["batch"] is not None:
      common.progress(
          f"    {record['batch']:,} trials vmapped at once (estimated "
          f"{memory.size_text(record['memory_estimate'])} of a "
          f"{memory.size_text(memory_budget)} memory budget; --memory_budget "
          f"to change)")
    records.append(record)
    common.append_jsonl(out, record)
    write_page(table, records, command=command, seed=seed,
               total=len(selected))
    reported = record["claim"]["epsilon"]
    common.progress(
        f"    lower bound {record['epsilon_lower']:.4f} vs reported "
        f"{reported if reported is None else round(reported, 4)} at "
        f"δ={record['claim']['delta']:g}: {record['verdict']} "
        f"({record['seconds']:.1f} s, "
        f"{record['trials_per_second']:,.0f} trials/s)")
    if audit_spec.failed(record):
      banner = "!" * 78
      what = ("lower bound ABOVE the reported ε: PRIVACY BUG"
              if record["verdict"] == "VIOLATION" else
              "deliberately broken variant NOT CAUGHT: the audit lacks power")
      print(f"{banner}\n{spec.name}: {what}\n{common.to_json(record)}\n"
            f"{banner}", file=sys.stderr, flush=True)
  return records


