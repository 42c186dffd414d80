"""BasicSR-family repositories' own training, with their own loader and with `python -m pairload.basicsr`, for a
fixed number of iterations each, on a LOL-v1-shaped folder; their MessageLogger lines parsed into one JSON.

For a GPU host with no network (benchmarks/device_basicsr.sh runs it): the repositories' trees are given as folders
(`--repo retinexformer=PATH`, `--repo restormer=PATH`, `--repo nafnet=PATH`), the data as `--data DIR` holding
Train/input|target and Test/input|target (LOL-v1's layout; synthesized with numpy + cv2 when DIR has none: 485
training pairs of 600x400 and 15 test pairs). Each repository trains from a copy of one of its option files (never
its own file) with the dataroots pointed at DIR, total_iter = --iters, checkpoints and validation set beyond the
run, no tensorboard/wandb, and a fresh experiment name per run (Retinexformer and Restormer resume automatically
from experiments/<name>). Every run's log is kept under OUT/logs. `--dry`: the CPU (num_gpu: 0), a few iterations of
small crops on small synthesized images: the mechanics without a GPU.

What the repositories import that a machine with torch, torchvision, numpy, opencv-python-headless, scikit-image,
pyyaml and tqdm lacks is checked first (a subprocess imports their basicsr.train) and named in the JSON; with
`--wheels DIR` the missing ones are installed from there (pip --no-index). Their imports (read from the trees):
Retinexformer and Restormer need einops and lmdb; NAFNet needs lmdb (and addict, future, yapf only for its setup.py);
tensorboard (tb-nightly) only with use_tb_logger, which the copies turn off.

Usage: python benchmarks/device_basicsr.py --repo retinexformer=/src/Retinexformer --repo restormer=/src/Restormer
       --out $OUT [--data DIR] [--iters 300] [--dry] [--wheels DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]  # pairload's repository: on PYTHONPATH for the pairload runs
# the option file each repository trains from, relative to its root
BASE_YML = {"retinexformer": "Options/RetinexFormer_LOL_v1.yml",
            "restormer": "Motion_Deblurring/Options/Deblurring_Restormer.yml",
            "nafnet": "options/train/GoPro/NAFNet-width32.yml"}
NEEDS = ("einops", "lmdb")  # what their basicsr.train imports beyond torch, torchvision, cv2, skimage, yaml, tqdm
# "[Enhan..][epoch:  0, iter:     100, lr:(2.000e-04,)] [eta: 1:02:03, time (data): 0.123 (0.004)] l_pix: ..."
LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO: \[.*?\]\[epoch:\s*(\d+), iter:\s*([\d,]+), "
                  r"lr:\(.*?\)\] \[eta: .*?, time \(data\): ([\d.]+) \(([\d.]+)\)\]")


def synthesize(folder: Path, train: int, test: int, size: tuple[int, int], seed: int = 0) -> None:
    """LOL-v1's layout with smooth random scenes: target in [40, 255), input a dark, noisy copy (8-bit PNG)."""
    import cv2

    rng = np.random.default_rng(seed)
    w, h = size
    for split, n in (("Train", train), ("Test", test)):
        for side in ("input", "target"):
            (folder / split / side).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            base = cv2.resize(rng.random((h // 16, w // 16, 3), dtype=np.float32), (w, h),
                              interpolation=cv2.INTER_CUBIC)
            target = np.clip(40 + 215 * base, 0, 255)
            dark = target * rng.uniform(0.05, 0.2) + rng.normal(0, 2, target.shape)
            cv2.imwrite(str(folder / split / "target" / f"{i + 1}.png"), target.astype(np.uint8))
            cv2.imwrite(str(folder / split / "input" / f"{i + 1}.png"), np.clip(dark, 0, 255).astype(np.uint8))


def env_for(repo: Path) -> dict:
    """Their `basicsr` is found from the repository root (as `python setup.py develop` would), pairload from ROOT."""
    parts = [str(repo), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(parts)}


def missing_modules(repo: Path) -> list[str]:
    """The modules their basicsr.train cannot import here: one import attempt per missing module, each found one
    stood in for by an empty package (in the probe's environment only) to find the next."""
    missing: list[str] = []
    stubs = Path(os.environ.get("TMPDIR", "/tmp")) / "device_basicsr_probe"
    env = env_for(repo)
    env["PYTHONPATH"] += os.pathsep + str(stubs)
    for _ in range(12):
        done = subprocess.run([sys.executable, "-c", "import basicsr.train"], cwd=repo, env=env, capture_output=True,
                              text=True)
        found = re.search(r"No module named '([\w.]+)'", done.stderr)
        if done.returncode == 0 or not found:
            if done.returncode:
                missing.append("(import failed: " + done.stderr.strip().splitlines()[-1][:200] + ")")
            return missing
        name = found.group(1).split(".")[0]
        if name in missing:
            return missing
        missing.append(name)
        (stubs / name).mkdir(parents=True, exist_ok=True)
        (stubs / name / "__init__.py").write_text("")
    return missing


def opt_flag(repo: Path) -> str:
    """-opt (BasicSR, Restormer, NAFNet) or --opt (Retinexformer), as their parse_options declares it."""
    text = (repo / "basicsr" / "train.py").read_text(encoding="utf-8", errors="replace")
    return "--opt" if re.search(r"add_argument\(\s*'--opt'", text) else "-opt"


def option_copy(repo: Path, name: str, data: Path, iters: int, dry: bool, where: Path, base: str) -> Path:
    """A copy of the repository's option file with the run's overrides, named `name` (Retinexformer takes the
    experiment's name from the file's)."""
    opt = yaml.safe_load((repo / base).read_text(encoding="utf-8"))
    opt["name"] = name
    train, val = opt["datasets"]["train"], opt["datasets"].get("val")
    train.update(dataroot_lq=str(data / "Train" / "input"), dataroot_gt=str(data / "Train" / "target"),
                 io_backend={"type": "disk"}, filename_tmpl="{}")
    if val is not None:
        val.update(dataroot_lq=str(data / "Test" / "input"), dataroot_gt=str(data / "Test" / "target"),
                   io_backend={"type": "disk"})
    train.pop("meta_info_file", None)
    opt["num_gpu"] = 1  # one GPU, one process (Restormer's file says 8: DataParallel, 64 rows per iteration)
    if dry:
        opt["num_gpu"] = 0
        train.update(num_worker_per_gpu=2, batch_size_per_gpu=2, gt_size=64)
        if "gt_sizes" in train:
            train.update(gt_sizes=[min(g, 64) for g in train["gt_sizes"]],
                         mini_batch_sizes=[min(b, 2) for b in train["mini_batch_sizes"]])
    opt["train"]["total_iter"] = iters
    beyond = iters * 10 + 1000  # no checkpoint and no validation inside the run
    if opt.get("val") is not None:
        opt["val"]["val_freq"] = beyond
    opt["logger"].update(print_freq=1 if dry else 10, save_checkpoint_freq=beyond, use_tb_logger=False)
    opt["logger"].pop("wandb", None)
    opt.setdefault("path", {})["resume_state"] = None
    path = where / f"{name}.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(opt, sort_keys=False), encoding="utf-8")
    return path


def parse_log(text: str) -> dict:
    """it/s between the first and last MessageLogger lines (their timestamps), and the mean of their
    `time (data): a (b)` after the first line (warm-up)."""
    rows = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            stamp = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
            rows.append((stamp, int(m.group(4).replace(",", "")), float(m.group(5)), float(m.group(6))))
    out: dict = {"lines": len(rows)}
    if len(rows) >= 2:
        (t0, i0, _, _), (t1, i1, _, _) = rows[0], rows[-1]
        out["it_per_s"] = round((i1 - i0) / (t1 - t0), 3) if t1 > t0 else None
        steady = rows[1:]
        out["time_mean"] = round(sum(r[2] for r in steady) / len(steady), 4)
        out["data_mean"] = round(sum(r[3] for r in steady) / len(steady), 4)
        out["data_share"] = round(out["data_mean"] / out["time_mean"], 4) if out["time_mean"] else None
    facts = [line.split("INFO: ", 1)[1] for line in text.splitlines() if "INFO: pairload: training pairs" in line]
    if facts:
        out["pairload"] = facts[0]
    return out


def train_once(repo: Path, label: str, mode: str, yml: Path, shards: Path, logs: Path, timeout: int) -> dict:
    flag = opt_flag(repo)
    if mode == "own":
        cmd = [sys.executable, "basicsr/train.py", flag, str(yml)]
    else:
        cmd = [sys.executable, "-m", "pairload.basicsr", flag, str(yml), "--shards", str(shards)]
    start = time.time()
    try:
        done = subprocess.run(cmd, cwd=repo, env=env_for(repo), capture_output=True, text=True, timeout=timeout)
        rc, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, output = "timeout", (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(
            errors="replace")
    wall = time.time() - start
    (logs / f"{label}-{mode}.log").write_text(output, encoding="utf-8")
    row = {"repo": label, "mode": mode, "command": " ".join(cmd), "rc": rc, "wall_s": round(wall, 1),
           **parse_log(output)}
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", action="append", required=True, help="NAME=PATH (retinexformer, restormer, nafnet)")
    parser.add_argument("--out", default=os.environ.get("OUT", "out"))
    parser.add_argument("--data", help="LOL-v1-shaped folder (Train/input|target, Test/input|target)")
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1, help="own, pairload, own, pairload, ... per repository")
    parser.add_argument("--dry", action="store_true", help="CPU, small synthesized images, a few iterations")
    parser.add_argument("--wheels", help="a folder of wheels to install missing packages from (pip --no-index)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per training run")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    work, logs = out / "work", out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    iters = min(args.iters, 6) if args.dry else args.iters
    data = Path(args.data).resolve() if args.data else work / "LOLv1"
    if not (data / "Train" / "input").is_dir():
        train, test, size = (24, 3, (160, 120)) if args.dry else (485, 15, (600, 400))
        synthesize(data, train, test, size)
    shards = work / "shards"
    if not (shards / "manifest.json").is_file():
        subprocess.run([sys.executable, "-c", "from pairload.cli import entry; entry()", "pack",
                        str(data / "Train"), str(shards), "--low-dir", "input", "--high-dir", "target"],
                       check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
    report: dict = {"iters": iters, "dry": args.dry, "data": str(data), "shards": str(shards), "python": sys.version,
                    "missing": {}, "runs": []}
    try:
        import torch

        report["torch"] = torch.__version__
        report["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    except ImportError:
        report["torch"] = None
    for spec in args.repo:
        label, _, path = spec.partition("=")
        repo = Path(path).resolve()
        missing = missing_modules(repo)
        if missing and args.wheels:
            subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", args.wheels,
                            *[m for m in missing if not m.startswith("(")]], check=False)
            missing = missing_modules(repo)
        report["missing"][label] = missing
        if missing:
            print(f"{label}: cannot import its basicsr.train, missing {', '.join(missing)}", flush=True)
            continue
        stamp = time.strftime("%H%M%S")
        for round_ in range(args.rounds):
            for mode in ("own", "pairload"):
                name = f"bench_{label}_{mode}_{stamp}_{round_}"
                yml = option_copy(repo, name, data, iters, args.dry, work / "options", BASE_YML[label])
                report["runs"].append(train_once(repo, label, mode, yml, shards, logs, args.timeout))
        (out / "device_basicsr.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    (out / "device_basicsr.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0 if all(r["rc"] == 0 for r in report["runs"]) and report["runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
