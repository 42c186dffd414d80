"""Summarise `tools/interleaved_bench.sh` results: per loader, the old and new trees' pairs/s of every run, their
medians, and whether the new median lies within the runs' spread of the old. Usage:
    python tools/summarize_interleaved.py RESULTS_DIR OUT.json [--note TEXT]"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pairload.format.atomic import write_json_atomic  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("out")
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    runs: dict[str, dict[str, list[float]]] = {}
    meta = {}
    for path in sorted(glob.glob(os.path.join(a.results, "interleaved-*-*.json"))):
        tag = os.path.basename(path).split("-")[1]
        doc = json.load(open(path))
        meta = {k: doc.get(k) for k in ("device", "cpu_count", "crop", "batch_size", "limits")}
        for row in doc["results"]:
            if row.get("status", "ok") == "ok":
                runs.setdefault(row["loader"], {}).setdefault(tag, []).append(round(row["pairs_per_s"]))
    summary = {}
    for loader, tags in runs.items():
        old, new = tags.get("old", []), tags.get("new", [])
        if not old or not new:
            continue
        m_old, m_new = statistics.median(old), statistics.median(new)
        summary[loader] = {"old": old, "new": new, "median_old": m_old, "median_new": m_new,
                           "new_over_old": round(m_new / m_old, 3),
                           "within_spread": m_new >= min(old)}  # not slower than the slowest old run
    doc = {"what": "bench-loaders on two trees in turn (tools/interleaved_bench.sh)", "note": a.note, **meta,
           "loaders": summary}
    write_json_atomic(a.out, doc)
    for loader, row in summary.items():
        print(f"{loader:14s} old {row['median_old']:>9,.0f}  new {row['median_new']:>9,.0f}  "
              f"x{row['new_over_old']:.3f}  runs old {row['old']} new {row['new']}")


if __name__ == "__main__":
    main()
