#!/usr/bin/env python3
"""Re-encode every image of a raw pair folder into another format, keeping the layout and names.

Example (JPEG copies of a PNG dataset, to measure DALI's hardware JPEG decoding):
    python tools/convert_format.py raw/ raw-jpeg/ --ext .jpg --quality 95 --workers 16
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
from pathlib import Path

import cv2

from pairload.folders.discover import IMAGE_EXTS


def _convert(job: tuple[Path, Path, str, int]) -> None:
    src, dst, ext, quality = job
    img = cv2.imread(str(src), cv2.IMREAD_UNCHANGED)
    dst.parent.mkdir(parents=True, exist_ok=True)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if ext in (".jpg", ".jpeg") else []
    ok, buf = cv2.imencode(ext, img, params)
    if not ok:
        raise SystemExit(f"{src}: could not encode as {ext}")
    tmp = dst.with_name(f".{dst.name}.partial")
    tmp.write_bytes(buf.tobytes())
    os.replace(tmp, dst)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--ext", default=".jpg")
    ap.add_argument("--quality", type=int, default=95)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    args = ap.parse_args()
    jobs = [(p, args.dst / p.relative_to(args.src).with_suffix(args.ext), args.ext, args.quality)
            for p in sorted(args.src.rglob("*")) if p.suffix.lower() in IMAGE_EXTS]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        pool.map(_convert, jobs, chunksize=8)
    print(f"converted {len(jobs)} images into {args.dst}")


if __name__ == "__main__":
    main()
