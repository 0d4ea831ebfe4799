"""Tables and figures of ``launch.compare``, drawn from its records.

:func:`markdown_tables` writes one Markdown table per data set (rows: the
methods; columns: ε; cells: accuracy mean ± sd and the ε that holds) and
:func:`write_figures` one PNG per data set (accuracy against the ε that
holds). Both read every matching record of the run's JSON lines
(:func:`launch.experiments.compare.select`), so a table can be redrawn
from the file at any time. A method has a row per variant found: its own
rows, on scattering features (an image set), and tuned (the setting's
``tune``).
"""

from __future__ import annotations

import os

import numpy as np

from launch.experiments import compare

__all__ = ["markdown_tables", "rows", "write_figures"]

_FOOTNOTE = (
    "Test accuracy (%), mean ± sd over {seeds} seed(s); in brackets the ε "
    "that holds for one run (the method's ledger, δ = {delta:g}). A "
    "non-private row is run once (one fit where it is deterministic) and "
    "repeated across the columns; the DPWSS paper's ε is its nominal "
    "per-selection figure and carries no guarantee.")
_TUNED_NOTE = (
    "A tuned row includes private hyperparameter selection over {n} "
    "candidate recipes (K ~ {distribution}, E[K] = {expected:g}, one "
    "independent tuning per seed; each trial's score is a Laplace-noised "
    "validation accuracy at ε = {score:g} on rows held out of the training "
    "rows): its column is each trial's target ε, its bracket the ε that "
    "holds for the whole tuning (the released model included). The number "
    "of trials run is not released (the guarantee holds with it hidden).")
_FEATURES_NOTE = (
    "A row marked \"scattering features\" trains on the scattering "
    "transform of each image (J = {J}, L = {L}, group normalisation over "
    "{num_groups} groups, rows scaled to norm 1: {dim} features) instead "
    "of its pixels; the map reads each image alone and costs no ε.")


def rows(s: compare.Setting, dataset: str, method: str
         ) -> list[tuple[str, str, dict]]:
  """(label, guarantee text, key variant) of every row a method can have."""
  m = compare.METHODS[method]
  text = compare.GUARANTEE_TEXT[m.guarantee]
  out = [(m.label, text, {"tuning_id": None, "features": None})]
  if dataset in compare.IMAGE_FEATURES:
    out += [(f"{m.label}, {f} features", text,
             {"tuning_id": None, "features": f}) for f in compare.FEATURES]
  if s.tunes(dataset, method):
    c = s.count
    out.append((f"{m.label} (tuned, K ~ {c.distribution} "
                f"E[K]={c.expected:g})", "(ε, δ) of the whole tuning",
                {"tuning_id": s.tuning_id}))
  return out


def _found(records, s, dataset, method, variant) -> list[dict | None]:
  """The row's record at each ε column (None where there is none)."""
  flat = compare.METHODS[method].guarantee == "none"
  return [compare.select(records, s.key(compare.Run(
      dataset, method, None if flat else float(e)), **variant))
          for e in s.epsilons]


def _cell(r, kind: str) -> str:
  if r is None:
    return "–"
  cell = f"{100 * r['accuracy_mean']:.1f} ± {100 * r['accuracy_sd']:.1f}"
  return cell + (f" ({r['privacy']['epsilon']:.3g})" if kind == "dp" else "")


def markdown_tables(records, s: compare.Setting) -> str:
  """One table per data set of ``s``: rows = methods (and their variants),
  columns = ε, cells "mean ± sd (ε that holds)" in %, with the guarantee
  of each row and the notes its rows need."""
  parts = []
  head = ["method", "guarantee"] + [f"ε = {e:g}" for e in s.epsilons]
  for dataset, methods in s.plan.items():
    lines = [f"### {dataset}", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    seen = []
    for method in methods:
      kind = compare.METHODS[method].guarantee
      for label, text, variant in rows(s, dataset, method):
        found = _found(records, s, dataset, method, variant)
        if any(found):
          seen += [r for r in found if r]
          lines.append(f"| {label} | {text} | "
                       + " | ".join(_cell(r, kind) for r in found) + " |")
    lines += ["", _FOOTNOTE.format(seeds=s.seeds, delta=s.delta)]
    tuned = [r["tuning"] for r in seen if r.get("tuning")]
    if tuned:
      t = tuned[0]
      lines.append(_TUNED_NOTE.format(
          n=len(t["candidates"]), distribution=t["distribution"],
          expected=t["expected_trials"], score=t["score_epsilon"]))
    features = [r["settings"]["features"] for r in seen if r.get("features")]
    if features:
      lines.append(_FEATURES_NOTE.format(**features[0]))
    if any(r.get("scaling_reads_data") for r in seen):
      lines.append("Scaling read the data (min/max): no ε covers that "
                   "step.")
    parts.append("\n".join(lines))
  return "\n\n".join(parts) + "\n"


def write_figures(records, s: compare.Setting, directory: str) -> list[str]:
  """One PNG per data set of ``s``: accuracy against the ε that holds.

  Private rows are drawn at the ε of their privacy record (filled
  markers, solid lines, dash-dotted with squares on scattering features;
  a tuned row at the ε of its whole tuning), a
  nominal one at its nominal ε (open markers, dashed, "nominal, no DP"),
  a non-private one as a dotted horizontal line ("no DP").
  """
  import matplotlib  # noqa: PLC0415
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # noqa: PLC0415
  from matplotlib import ticker  # noqa: PLC0415

  os.makedirs(directory, exist_ok=True)
  paths = []
  for dataset, methods in s.plan.items():
    fig, ax = plt.subplots(figsize=(9.0, 4.2))
    drawn, reads = 0, False
    series = [(m, label, variant) for m in methods
              for label, _, variant in rows(s, dataset, m)]
    for method, label, variant in series:
      found = [r for r in _found(records, s, dataset, method, variant) if r]
      if not found:
        continue
      kind, color = compare.METHODS[method].guarantee, f"C{drawn % 10}"
      drawn += 1
      reads = reads or any(r.get("scaling_reads_data") for r in found)
      if kind == "none":
        ax.axhline(found[0]["accuracy_mean"], ls=":", lw=1.2,
                   label=f"{label} (no DP)", color=color)
        continue
      pts = sorted((r["privacy"]["epsilon"] if kind == "dp"
                    else r["epsilon"], r["accuracy_mean"], r["accuracy_sd"])
                   for r in found)
      e, m, sd = map(np.asarray, zip(*pts, strict=True))
      nominal = kind == "nominal"
      ax.errorbar(e, m, yerr=sd, ms=4, capsize=2, color=color,
                  label=label + (" (nominal ε, no DP)" if nominal
                                 else " (ε that holds)"),
                  fmt="o--" if nominal else (
                      "s-." if variant.get("features") else "o-"),
                  mfc="none" if nominal else None)
    if not drawn:
      plt.close(fig)
      continue
    ax.set_xscale("log")
    ax.set_xticks([float(e) for e in s.epsilons])
    ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel(f"ε (δ = {s.delta:g}): the ε that holds, from each "
                  f"method's ledger")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"{dataset}: accuracy against ε, mean ± sd over "
                 f"{s.seeds} seed(s)" + (
                     "\nthe min/max scaling read the data: no ε covers it"
                     if reads else ""), fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = os.path.join(directory, f"compare_{dataset}.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    paths.append(path)
  return paths
