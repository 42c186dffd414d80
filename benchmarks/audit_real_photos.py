#!/usr/bin/env python3
"""The audit on real photographs, through the command line as a user runs it (#58): one pack's test pairs appear,
renamed and changed as datasets change them, among another pack's training pairs, with as many distinct photographs.

From a folder of photographs (e.g. the 500 of BSDS500), the first half become pack A's `test` pairs (target: the
photo, input: the photo darkened with noise); pack B's `train` split holds the second half, distinct photographs,
and each test photo changed one way (in turn: re-encoded as JPEG q75 under another name, resized to 0.5x, to 0.75x,
cropped by up to 5% a side, brightened, all of these at once), as a pair of its own (its input darkened again, with
other noise). Then `pairload audit A B --out findings.json`. Reports the recall of each change (a test pair whose
changed copy the audit lists as a leak) and every leak that pairs two distinct photographs (false pairs).

    python benchmarks/audit_real_photos.py --photos PHOTOS --work W [--rotate 250] [--seed 1] [--out result.json]

No GPU; a few minutes on 2 cores for 500 photographs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np

CHANGES = ("jpeg75-renamed", "resized-0.5", "resized-0.75", "cropped-5pct", "brightened", "all-at-once")


def darken(img: np.ndarray, rng) -> np.ndarray:
    """A low-light input: a tone curve, a scale of 0.05-0.2, shot-like and read noise."""
    x = (img / 255.0) ** 1.6 * rng.uniform(0.05, 0.2)
    x = x + rng.normal(0, 0.004, x.shape) + rng.normal(0, 0.01, x.shape) * np.sqrt(x)
    return np.clip(x * 255 + 0.5, 0, 255).astype(np.uint8)


def cropped(img: np.ndarray, rng, most: float = 0.05) -> np.ndarray:
    h, w = img.shape[:2]
    t, b, lf, r = (int(rng.uniform(0, most) * n) for n in (h, h, w, w))
    return np.ascontiguousarray(img[t:h - b, lf:w - r])


def resized(img: np.ndarray, f: float) -> np.ndarray:
    h, w = img.shape[:2]
    return cv2.resize(img, (round(w * f), round(h * f)), interpolation=cv2.INTER_AREA)


def brightened(img: np.ndarray, rng) -> np.ndarray:
    return np.clip(img.astype(np.float32) * rng.uniform(1.2, 1.5) + rng.uniform(5, 20), 0, 255).astype(np.uint8)


def jpeg(img: np.ndarray, quality: int = 75) -> np.ndarray:
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    return cv2.imdecode(buf, cv2.IMREAD_COLOR)


def changed(img: np.ndarray, how: str, rng) -> np.ndarray:
    if how == "jpeg75-renamed":
        return jpeg(img)
    if how.startswith("resized-"):
        return resized(img, float(how.split("-")[1]))
    if how == "cropped-5pct":
        return cropped(img, rng)
    if how == "brightened":
        return brightened(img, rng)
    return jpeg(brightened(resized(cropped(img, rng, 0.03), 0.6), rng))


def write_pair(folder: Path, name: str, high: np.ndarray, rng, ext: str = ".png") -> None:
    for side, img in (("low", darken(high, rng)), ("high", high)):
        (folder / side).mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(folder / side / f"{name}{ext}"), img)  # BGR in, BGR out: the photo's own colours


def pairload(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pairload.cli", *args], capture_output=True, text=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", type=Path, required=True, help="folder of photographs (searched recursively)")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rotate", type=int, default=0, help="start the list of photographs this far in (other test ones)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    files = sorted(p for p in args.photos.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    files = files[args.rotate:] + files[:args.rotate]
    half = len(files) // 2
    rng = np.random.default_rng(args.seed)
    raw_a, raw_b = args.work / "raw-a" / "test", args.work / "raw-b" / "train"
    truth: dict[str, tuple[str, str]] = {}  # test key -> (its copy's key in B, how it was changed)
    if not raw_b.is_dir():
        for i, path in enumerate(files):
            photo = cv2.imread(str(path))
            if i < half:
                write_pair(raw_a, f"t{i:04d}", photo, rng)
                how = CHANGES[i % len(CHANGES)]
                write_pair(raw_b, f"copy{i:04d}", changed(photo, how, rng), rng,
                           ".jpg" if how in ("jpeg75-renamed", "all-at-once") else ".png")
            else:
                write_pair(raw_b, f"other{i:04d}", photo, rng)
    for i in range(half):
        truth[f"t{i:04d}"] = (f"copy{i:04d}", CHANGES[i % len(CHANGES)])
    shards = {}
    for name, raw in (("a", raw_a.parent), ("b", raw_b.parent)):
        shards[name] = args.work / f"shards-{name}"
        if not (shards[name] / "manifest.json").is_file():
            res = pairload("pack", str(raw), str(shards[name]))
            if res.returncode:
                sys.exit(f"pack {raw} failed: {res.stderr.strip()[-2000:]}")
    findings = args.work / "findings.json"
    t0 = time.perf_counter()
    res = pairload("audit", str(shards["a"]), str(shards["b"]), "--out", str(findings))
    seconds = time.perf_counter() - t0
    if res.returncode not in (0, 1):
        sys.exit(f"audit failed: {res.stderr.strip()[-2000:]}")
    doc = json.loads(findings.read_text())
    leaks = [f for f in doc["findings"] if f["kind"] == "leak"]
    found: dict[str, set] = {}
    false_pairs = []
    for f in leaks:
        key, other = f["key"], f["other_key"]
        if key in truth and truth[key][0] == other:
            found.setdefault(key, set()).add(f.get("sides"))
        else:
            false_pairs.append(f)
    recall = {how: {"found": sum(1 for k, (_, h) in truth.items() if h == how and k in found),
                    "of": sum(1 for _, h in truth.values() if h == how)} for how in CHANGES}
    report = {"date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} cores, {platform.machine()}",
              "photos": len(files), "folder": str(args.photos),
              "rotate": args.rotate, "seed": args.seed,
              "test_pairs": half, "distinct_train_pairs": len(files) - half,
              "audit_seconds": round(seconds, 2), "recall": recall,
              "recall_all": round(len(found) / max(1, half), 4), "leaks": len(leaks),
              "false_pairs": false_pairs, "missed": sorted(k for k in truth if k not in found),
              "other_findings": {kind: sum(1 for f in doc["findings"] if f["kind"] == kind)
                                 for kind in sorted({f["kind"] for f in doc["findings"]} - {"leak"})}}
    print(json.dumps(report, indent=2))
    if args.out:
        from pairload.format.atomic import write_json_atomic

        write_json_atomic(args.out, report)


if __name__ == "__main__":
    main()
