"""The chart of a report (`plot`): pairs/s per row on a log scale with the spread, the hardware bounds as lines,
optional targets, written atomically as a PNG."""

from __future__ import annotations

import os
import textwrap

from ..format.atomic import atomic_open
from .rows import BASELINES


def plot(report: dict, path: str | os.PathLike, targets: dict[str, float] | None = None, note: str = "") -> None:
    """A log-scale bar chart of pairs/s per loader with the hardware bounds drawn as lines (and, if given, a
    target per loader drawn as a black diamond, and a `note` under the title saying what the sizes mean)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in report["results"] if r["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(9, 0.6 * max(3, len(ok)) + 1.6))
    names = [r["loader"] + (" (cold)" if r.get("cold") else "") for r in ok]
    vals = [r["pairs_per_s"] for r in ok]
    errs = [[r["pairs_per_s"] - r["pairs_per_s_min"] for r in ok],
            [r["pairs_per_s_max"] - r["pairs_per_s"] for r in ok]]
    colors = ["#888888" if n in BASELINES else "#2a7ab9" for n in names]
    ax.barh(names, vals, xerr=errs, color=colors)
    for y, r in enumerate(ok):  # past the end of the error bar, not on it
        ax.text(max(r["pairs_per_s"], r["pairs_per_s_max"]) * 1.04, y, f"{r['pairs_per_s']:,.0f}", va="center",
                fontsize=8)
    lim = report["limits"]
    lines = [(lim["h2d"]["pairs_per_s"], lim["h2d"]["kind"] + " bound", "#d62728"),
             (lim["copy"]["pairs_per_s_per_core"], "one core copying crops", "#9467bd")]
    if lim.get("decode"):
        lines.append((lim["decode"]["pairs_per_s_all_cores"],
                      f"{lim['decode']['format']} decode, {lim['decode']['cores']} cores", "#ff7f0e"))
    if lim.get("disk"):
        lines.append((lim["disk"]["pairs_per_s"], f"disk, cold ({lim['disk'].get('streams', 1)} stream(s))",
                      "#8c564b"))
    if lim.get("train_step_pairs_per_s"):
        lines.append((lim["train_step_pairs_per_s"], "reference U-Net training step", "#2ca02c"))
    for x, label, color in lines:
        ax.axvline(x, color=color, linestyle="--", linewidth=1, label=f"{label}: {x:,.0f}")
    marked = [(y, targets[n]) for y, n in enumerate(names) if targets and n in targets]
    if marked:
        ax.scatter([t for _, t in marked], [y for y, _ in marked], marker="D", color="black", zorder=3, s=18,
                   label="target")
    ax.set_xscale("log")
    ax.set_xlabel("pairs/s delivered into device memory (log scale)")
    c = report["config"]
    title = (f"{report['device']}, {report['cpu_count']} cores; crop {c['crop']}, batch {c['batch_size']}, "
             f"{c['workers']} workers; {report['date']}")
    ax.set_title(title + ("\n" + "\n".join(textwrap.wrap(note, 110)) if note else ""), fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, frameon=False)
    fig.tight_layout()
    with atomic_open(path, "wb", fsync=False) as fh:
        fig.savefig(fh, dpi=120, format="png")
    plt.close(fig)
