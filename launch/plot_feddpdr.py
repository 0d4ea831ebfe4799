"""Plots of FedDPDR-DPML sweeps, drawn from their JSON-lines files.

``python -m launch.plot_feddpdr runs/feddpdr_mnist.jsonl`` writes one PNG
per (data set, figure) beside the file, e.g.
``feddpdr_mnist_mnist_fig3.png``: accuracy against the swept parameter, one
curve per mechanism, the mean over the vmapped repeats with a band of ±1
standard deviation. ``table3`` records become a Markdown table of training
seconds (compile excluded) printed and written as ``..._table3.md``.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from launch import common  # noqa: E402

LABELS = {"nonpriv": "Non-Priv", "dpml": "DPML", "dpdr_dpml": "DPDR-DPML",
          "feddpdr": "FedDPDR-DPML"}
ORDER = ("nonpriv", "feddpdr", "dpdr_dpml", "dpml")
AXES = {"fig2": ("k", "target dimension k"),
        "fig3": ("epsilon", "privacy parameter ε"),
        "fig4": ("n", "rows per participant n"),
        "fig5": ("sizes", "uneven size set")}


def _x_value(record, param):
  if param == "n":
    return record["sizes"][0]
  if param == "sizes":
    return "/".join(str(s // 1000) if s >= 1000 else f"{s / 1000:g}"
                    for s in record["sizes"])
  return record[param]


def _curves(records, param):
  curves = defaultdict(dict)
  for r in records:
    if r.get("accuracy") is None:
      continue  # a failed run (its record says why)
    accs = np.asarray(r.get("accuracy_per_seed", [r["accuracy"]]), float)
    curves[r["mechanism"]][_x_value(r, param)] = accs
  return curves


def plot_figure(records, figure: str, path: str, title: str) -> str:
  """One accuracy plot (mean ± std over repeats) per mechanism."""
  param, label = AXES[figure]
  curves = _curves(records, param)
  xs_all = []
  for c in curves.values():
    # DPML has no k (None): it is drawn flat across the others' k values.
    xs_all += [x for x in c if x not in xs_all and x is not None]
  categorical = param == "sizes"
  if not categorical:
    xs_all = sorted(xs_all)
  fig, ax = plt.subplots(figsize=(5.5, 4))
  for mech in ORDER:
    if mech not in curves:
      continue
    c = curves[mech]
    if list(c) == [None]:
      # A setting the mechanism does not use (DPML has no k, Non-Priv no
      # ε; recorded as null): one value, drawn flat across the others'.
      acc = c[None]
      xs = xs_all
      mean = np.full(len(xs), acc.mean())
      std = np.full(len(xs), acc.std())
    else:
      xs = [x for x in xs_all if x in c]
      mean = np.array([c[x].mean() for x in xs])
      std = np.array([c[x].std() for x in xs])
    pos = [xs_all.index(x) for x in xs] if categorical else xs
    ax.plot(pos, mean, marker="o", label=LABELS.get(mech, mech))
    ax.fill_between(pos, mean - std, mean + std, alpha=0.2)
  if categorical:
    ax.set_xticks(range(len(xs_all)))
    ax.set_xticklabels(xs_all, rotation=15, fontsize=7)
    label += " (×10³ rows)"
  elif param in ("epsilon", "n"):
    ax.set_xscale("log")
  ax.set_xlabel(label)
  ax.set_ylabel("test accuracy")
  ax.set_title(title, fontsize=9)
  ax.set_ylim(0, 1)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def table3(records) -> str:
  """Markdown table of training seconds per mechanism and data set."""
  rows = defaultdict(dict)
  for r in records:
    if r.get("accuracy") is not None:
      rows[r["dataset"]][r["mechanism"]] = r["seconds"]
  mechs = [m for m in ORDER if any(m in v for v in rows.values())]
  lines = ["| dataset | " + " | ".join(LABELS[m] for m in mechs) + " |",
           "|---|" + "---|" * len(mechs)]
  for ds, v in rows.items():
    cells = [f"{v[m]:.3f} s" if m in v else "-" for m in mechs]
    lines.append(f"| {ds} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def plot_file(path: str) -> list[str]:
  """All plots (and the Table 3 file) of one sweep's JSON lines."""
  records = [r for r in common.read_jsonl(path) if r.get("sweep")]
  base = os.path.splitext(path)[0]
  groups = defaultdict(list)
  for r in records:
    groups[(r["dataset"], r["sweep"])].append(r)
  written = []
  for (dataset, figure), recs in sorted(groups.items()):
    if figure == "table3":
      text = table3(recs)
      out = f"{base}_{dataset}_table3.md"
      with open(out, "w", encoding="utf-8") as f:
        f.write(text + "\n")
      print(text, file=sys.stderr)
      written.append(out)
      continue
    r0 = recs[0]
    title = (f"{dataset}: {figure}, δ={r0['delta']}, λ={r0['lam']}, "
             f"{r0['loss']}, {r0['aggregation']} agg., "
             f"{r0.get('seeds', 1)} seeds")
    written.append(plot_figure(recs, figure,
                               f"{base}_{dataset}_{figure}.png", title))
  return written


if __name__ == "__main__":
  for p in sys.argv[1:]:
    for w in plot_file(p):
      print(w)
