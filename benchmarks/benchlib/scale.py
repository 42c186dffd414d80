"""The scale benchmark (issue #33, `benchmarks/bench_scale.py`): how each cost grows with the number of pairs. Per
size: synth, pack in 1 and in P parts, verify, the index's bytes per pair, the loader's start-up and private memory on
1..R ranks. Every step is a child process measured from outside; the report is written after every step."""

# One cohesive thing of ~650 lines: the steps, the child processes they measure and the report they fill share one
# config and one report layout, and the loader step's child (`probe_loader`) must be importable by name.

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

import pairload
from pairload.errors import ConfigError
from pairload.format.atomic import atomic_open

STEPS = ("synth", "pack", "verify", "index", "loader")
MANIFEST = "manifest.json"
NOT_SUPPORTED = "parts: not supported by this pairload"
PAIRLOAD_TREE = Path(pairload.__file__).resolve().parents[1]  # the pairload measured: the children import it too
BENCHMARKS = Path(__file__).resolve().parents[1]  # the children import `benchlib` from here
_STATUS_KEYS = ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")


@dataclass(frozen=True, kw_only=True)
class ScaleConfig:
    sizes: tuple[int, ...]
    work: Path
    parts: tuple[int, ...] = (1,)
    ranks: tuple[int, ...] = (1,)
    image: tuple[int, int] = (16, 16)  # (width, height)
    steps: tuple[str, ...] = STEPS
    workers: int = os.cpu_count() or 1
    shard_size: str | None = None  # passed to every pack; None: pairload's default
    loader: str = "ram"
    batch_size: int = 32
    timeout: float = 3600.0  # seconds one step's children may run before they are killed
    out: Path | None = None
    plot: Path | None = None
    fresh: bool = False  # ignore an existing report at `out` instead of adding to it

    def __post_init__(self) -> None:
        for name in ("sizes", "parts", "ranks"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                raise ConfigError(f"--{name} {','.join(map(str, values))}: expected a comma-separated list of whole "
                                  "numbers of 1 or more, e.g. 1,4")
        unknown = sorted(set(self.steps) - set(STEPS))
        if unknown or not self.steps:
            raise ConfigError(f"--steps {','.join(self.steps)}: expected some of {','.join(STEPS)}")
        if self.workers < 1 or self.batch_size < 1 or self.timeout <= 0:
            raise ConfigError(f"--workers {self.workers} --batch-size {self.batch_size} --timeout {self.timeout}: "
                              "expected 1 or more workers, a batch of 1 or more and a positive timeout")

    @property
    def crop(self) -> int:
        return min(self.image)

    def raw(self, n: int) -> Path:
        return self.work / f"raw-{n}"

    def shards(self, n: int, parts: int) -> Path:
        return self.work / f"shards-{n}-p{parts}"

    def reference(self, n: int) -> Path:
        """The pack the later steps read: the one made in the fewest parts."""
        return self.shards(n, min(self.parts))


# --- memory as the kernel counts it ------------------------------------------------------------------------------

def proc_status(pid: int | str = "self") -> dict[str, int]:
    """VmHWM (peak resident), VmRSS, RssAnon (private), RssFile, RssShmem of a process, in bytes; {} once it has
    ended (a zombie has no memory left to report)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in _STATUS_KEYS:
            found[key] = int(value.split()[0]) * 1024
    return found


def private_bytes() -> int:
    return proc_status().get("RssAnon", 0)


def _tail(path: Path, lines: int = 15, chars: int = 1500) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.strip().splitlines()[-lines:])[-chars:]


# A child's exact peak comes from a small wrapper process: ru_maxrss counts the memory a process had before it
# exec'd, which for a child of this (possibly large) process is this process's whole RSS; the wrapper's is ~10 MB.
_WRAPPER = ("import json, resource, subprocess, sys, time\n"
            "t = time.perf_counter()\n"
            "rc = subprocess.call(sys.argv[2:])\n"
            "doc = {'wall_s': time.perf_counter() - t,\n"
            "       'max_rss_bytes': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}\n"
            "open(sys.argv[1], 'w').write(json.dumps(doc))\n"
            "sys.exit(rc if rc >= 0 else 128 - rc)\n")


class Children:
    """Child processes started together, each in its own session (so a timeout kills its workers too) under a small
    wrapper, measured from outside: wall time, the peak resident memory (VmHWM, sampled every 50 ms) of the main
    process and of the largest of its descendants (its workers), the peak of their summed RSS, and the exact peak
    over the whole tree (the wrapper's RUSAGE_CHILDREN). `hold`: each child gets a pipe as stdin and may wait for
    its end (`release`), so that the parent can measure them all alive at once."""

    def __init__(self, argvs: list[list[str]], timeout: float, hold: bool = False, interval: float = 0.05):
        self.argvs, self.timeout, self.hold, self.interval = argvs, timeout, hold, interval
        self.dir = Path(tempfile.mkdtemp(prefix="pairload-scale-"))
        self.procs: list[subprocess.Popen] = []  # the wrappers
        self.ends: list[float | None] = [None] * len(argvs)
        self.main: list[int | None] = [None] * len(argvs)  # each wrapper's child: the command itself
        self.main_peak = [0] * len(argvs)
        self.worker_peak = [0] * len(argvs)
        self.workers_seen: list[set[int]] = [set() for _ in argvs]
        self.tree_peak = [0] * len(argvs)
        self.killed: set[int] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> "Children":
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(PAIRLOAD_TREE), str(BENCHMARKS), *filter(None, [os.environ.get("PYTHONPATH")])]))
        self.start = time.perf_counter()
        for i, argv in enumerate(self.argvs):
            with open(self.dir / f"{i}.out", "wb") as out, open(self.dir / f"{i}.err", "wb") as err:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-c", _WRAPPER, str(self.dir / f"{i}.rusage"), *argv], env=env,
                    start_new_session=True, stdout=out, stderr=err,
                    stdin=subprocess.PIPE if self.hold else subprocess.DEVNULL))
        for i in range(len(self.procs)):
            self._threads.append(threading.Thread(target=self._reap, args=(i,), daemon=True))
        self._threads.append(threading.Thread(target=self._sample, daemon=True))
        for t in self._threads:
            t.start()
        return self

    def _reap(self, i: int) -> None:
        self.procs[i].wait()
        self.ends[i] = time.perf_counter()

    def _sample(self) -> None:
        while not self._stop.is_set():
            children: dict[int, list[int]] = {}
            for proc in psutil.process_iter(["ppid"]):  # one pass over the process table a sample
                children.setdefault(proc.info["ppid"], []).append(proc.pid)
            for i, p in enumerate(self.procs):
                if self.ends[i] is not None:
                    continue
                if self.main[i] is None and children.get(p.pid):
                    self.main[i] = children[p.pid][0]
                main = proc_status(self.main[i]) if self.main[i] else {}
                self.main_peak[i] = max(self.main_peak[i], main.get("VmHWM", 0))
                total, todo = main.get("VmRSS", 0), list(children.get(self.main[i], ()))
                while todo:
                    pid = todo.pop()
                    todo.extend(children.get(pid, ()))
                    st = proc_status(pid)
                    if st:
                        self.workers_seen[i].add(pid)
                        self.worker_peak[i] = max(self.worker_peak[i], st.get("VmHWM", 0))
                        total += st.get("VmRSS", 0)
                self.tree_peak[i] = max(self.tree_peak[i], total)
            self._stop.wait(self.interval)

    def alive(self, i: int) -> bool:
        return self.ends[i] is None

    def release(self) -> None:
        for p in self.procs:
            if p.stdin and not p.stdin.closed:
                p.stdin.close()

    def kill(self) -> None:
        for i, p in enumerate(self.procs):
            if self.alive(i):
                self.killed.add(i)
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass

    def wait(self) -> list[dict]:
        """Every child's row, once all have ended (killed, and marked so, past the timeout)."""
        deadline = self.start + self.timeout
        for t in self._threads[:-1]:
            t.join(max(0.0, deadline - time.perf_counter()))
            if t.is_alive():
                self.kill()
                t.join()
        self._stop.set()
        self._threads[-1].join()
        return [self._row(i) for i in range(len(self.procs))]

    def _row(self, i: int) -> dict:
        try:
            exact = json.loads((self.dir / f"{i}.rusage").read_text())
        except (OSError, ValueError):  # killed with its wrapper
            exact = {"wall_s": self.ends[i] - self.start, "max_rss_bytes": None}
        row = {"wall_s": round(exact["wall_s"], 4), "peak_rss_bytes": self.main_peak[i],
               "workers": len(self.workers_seen[i]), "peak_worker_rss_bytes": self.worker_peak[i],
               "peak_tree_rss_bytes": self.tree_peak[i], "max_rss_bytes": exact["max_rss_bytes"]}
        rc = self.procs[i].returncode
        if rc == 0:
            return {"status": "ok", **row}
        why = f"killed after the {self.timeout:.0f} s timeout" if i in self.killed else f"exit code {rc}"
        return {"status": "failed", "reason": f"{why}: {_tail(self.dir / f'{i}.err') or '(no stderr)'}", **row}

    def stdout(self, i: int) -> str:
        return (self.dir / f"{i}.out").read_text(errors="replace")

    def __exit__(self, *exc) -> None:
        self.release()
        self.kill()
        self._stop.set()
        shutil.rmtree(self.dir, ignore_errors=True)


def run_one(argv: list[str], timeout: float) -> tuple[dict, str]:
    """One child's row and its stdout."""
    with Children([argv], timeout) as ch:
        row = ch.wait()[0]
        return row, ch.stdout(0)


def cli(*args) -> list[str]:
    """`pairload ARGS` run by this interpreter, on this copy of pairload (the children's PYTHONPATH says so)."""
    return [sys.executable, "-m", "pairload.cli", *map(str, args)]


# --- the steps --------------------------------------------------------------------------------------------------

def synth_complete(raw: Path, n: int, image: tuple[int, int]) -> bool:
    """Whether `raw` holds a finished synth of exactly `n` training pairs (no test pairs) of `image`: synth.json
    says complete and the size (its first bytes suffice: a million pairs' file is not parsed), and the files are
    there."""
    try:
        with open(raw / "synth.json", encoding="utf-8") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    size = re.search(r'"size"\s*:\s*\[\s*(\d+)\s*,\s*(\d+)\s*\]', head)
    if not re.search(r'"complete"\s*:\s*true', head) or not size or tuple(map(int, size.groups())) != tuple(image):
        return False

    def count(folder: Path) -> int:
        try:
            with os.scandir(folder) as it:
                return sum(1 for e in it if not e.name.startswith("."))
        except OSError:
            return 0
    return count(raw / "train" / "low") == n == count(raw / "train" / "high") and count(raw / "test" / "low") == 0


def step_synth(cfg: ScaleConfig, n: int) -> dict:
    raw = cfg.raw(n)
    if synth_complete(raw, n, cfg.image):
        return {"status": "ok", "reused": True, "path": str(raw)}
    w, h = cfg.image
    row, _ = run_one(cli("make-pairs", raw, "--pairs", n, "--test", 0, "--size", f"{w}x{h}", "--workers", cfg.workers),
                     cfg.timeout)
    return {**row, "reused": False, "path": str(raw), "pairs_per_s": round(n / row["wall_s"], 1)}


def pack_features(timeout: float) -> tuple[dict, dict]:
    """What this pairload's `pack` offers ({"parts": bool}) and the cost of starting its CLI at all (`pack
    --help`: wall and peak memory, the floor under every step)."""
    row, out = run_one(cli("pack", "--help"), timeout)
    return {"parts": bool(re.search(r"(?<![\w-])--part(?![\w-])", out))}, row


def _shard_facts(out: Path) -> dict:
    tars = sorted(out.glob("*.tar"))
    return {"shards": len(tars), "shard_bytes": sum(p.stat().st_size for p in tars)}


def _shard_hashes(out: Path) -> list | None:
    try:
        doc = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return [(name, [s.get("sha256") for s in split.get("shards", [])], (split.get("index") or {}).get("sha256"))
            for name, split in sorted(doc.get("splits", {}).items())]


def step_pack(cfg: ScaleConfig, n: int, parts: int, supported: bool) -> dict:
    raw, out = cfg.raw(n), cfg.shards(n, parts)
    if parts > 1 and not supported:
        return {"status": "skipped", "reason": NOT_SUPPORTED}
    if not synth_complete(raw, n, cfg.image):
        return {"status": "skipped", "reason": f"no complete synth of {n} pairs at {raw}: run the synth step first"}
    shutil.rmtree(out, ignore_errors=True)  # an existing pack of RAW would be resumed, not packed
    extra = ["--shard-size", cfg.shard_size] if cfg.shard_size else []
    workers = max(1, cfg.workers // parts)
    argvs = [cli("pack", raw, out, "--workers", workers, *extra) if parts == 1 else
             cli("pack", raw, out, "--part", f"{i}/{parts}", "--workers", workers, *extra) for i in range(parts)]
    with Children(argvs, cfg.timeout) as ch:
        rows = ch.wait()
    if parts == 1:
        row = rows[0]
    else:
        bad = [r for r in rows if r["status"] != "ok"]
        row = {"status": "failed" if bad else "ok", **({"reason": bad[0]["reason"]} if bad else {}),
               "wall_s": max(r["wall_s"] for r in rows),
               **{k: max(r[k] or 0 for r in rows) for k in ("peak_rss_bytes", "peak_worker_rss_bytes",
                                                             "max_rss_bytes")},
               "peak_rss_bytes_sum": sum(r["peak_rss_bytes"] for r in rows), "parts": rows}
    row.update(workers_per_part=workers, pairs_per_s=round(n / row["wall_s"], 1))
    if row["status"] == "ok":
        if not (out / MANIFEST).exists():
            row.update(status="failed", reason=f"{out / MANIFEST}: missing after every part ended with exit code 0")
        row.update(_shard_facts(out))
        if parts > 1 and cfg.shards(n, 1).is_dir():
            row["same_shards_as_p1"] = _shard_hashes(out) == _shard_hashes(cfg.shards(n, 1))
    return row


def _need_pack(cfg: ScaleConfig, n: int) -> dict | None:
    out = cfg.reference(n)
    if (out / MANIFEST).exists():
        return None
    return {"status": "skipped", "reason": f"no pack at {out} ({MANIFEST} missing): run the pack step first"}


def step_verify(cfg: ScaleConfig, n: int) -> dict:
    if (skip := _need_pack(cfg, n)):
        return skip
    row, out = run_one(cli("verify", cfg.reference(n)), cfg.timeout)
    m = re.search(r"([\d,]+) samples", out)
    if m:
        row["samples"] = int(m.group(1).replace(",", ""))
    return row


def step_index(cfg: ScaleConfig, n: int) -> dict:
    """Bytes of what a reader parses or maps to find every sample: manifest.json and any `<split>.index`."""
    if (skip := _need_pack(cfg, n)):
        return skip
    out = cfg.reference(n)
    files = {p.name: p.stat().st_size for p in sorted(out.iterdir())
             if p.is_file() and (p.name == MANIFEST or p.suffix == ".index")}
    doc = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    samples = sum(s.get("samples", 0) for s in doc.get("splits", {}).values())
    total = sum(files.values())
    return {"status": "ok", "files": files, "index_bytes": total, "samples": samples,
            "format_version": doc.get("version"), "index_bytes_per_pair": round(total / max(1, samples), 2)}


def probe_loader(spec: str) -> None:
    """The loader step's child (`spec`: JSON of shards, rank, ranks, kind, batch, crop, result): private memory
    (RssAnon) before and after `make_loader` and the first batch, with torch and the loader's module imported before
    the first reading, so the growth is the loader's own (its index, mostly). Writes `result`, then holds everything
    until its stdin ends, so the parent sees all ranks alive at once."""
    import gc

    a = json.loads(spec)
    t0 = time.perf_counter()
    import torch  # noqa: F401 - imported before the baseline on purpose

    from pairload.kinds import KINDS
    from pairload.loaders import make_loader

    KINDS[a["kind"]].load()
    gc.collect()
    doc = {"rank": a["rank"], "ranks": a["ranks"], "import_s": round(time.perf_counter() - t0, 4),
           "private_start": private_bytes()}
    t0 = time.perf_counter()
    loader = make_loader(a["kind"], a["shards"], batch_size=a["batch"], crop=a["crop"], rank=a["rank"],
                         world_size=a["ranks"], device="cpu", num_workers=0)
    doc.update(make_loader_s=round(time.perf_counter() - t0, 6), private_loader=private_bytes())
    loader.set_epoch(0)
    t0 = time.perf_counter()
    first = next(iter(loader))
    doc.update(first_batch_s=round(time.perf_counter() - t0, 6), private_first_batch=private_bytes(),
               batch_rows=len(first), batches=len(loader), samples=loader.state_dict().get("samples"))
    with atomic_open(a["result"], "w", fsync=False) as fh:
        json.dump(doc, fh)
    sys.stdin.read()
    loader.close()


def step_loader(cfg: ScaleConfig, n: int, ranks: int) -> dict:
    if (skip := _need_pack(cfg, n)):
        return skip
    results = Path(tempfile.mkdtemp(prefix="pairload-scale-loader-"))
    try:
        code = "import sys; from benchlib.scale import probe_loader; probe_loader(sys.argv[1])"
        argvs = [[sys.executable, "-c", code, json.dumps(
            {"shards": str(cfg.reference(n)), "rank": r, "ranks": ranks, "kind": cfg.loader, "batch": cfg.batch_size,
             "crop": cfg.crop, "result": str(results / f"{r}.json")})] for r in range(ranks)]
        with Children(argvs, cfg.timeout, hold=True) as ch:
            deadline = time.perf_counter() + cfg.timeout
            while time.perf_counter() < deadline and any(
                    ch.alive(r) and not (results / f"{r}.json").exists() for r in range(ranks)):
                time.sleep(0.02)
            shared = []  # every rank alive at once: PSS splits the shared pages (the page cache) between them
            for p in ch.procs:
                try:
                    full = psutil.Process(p.pid).children()[0].memory_full_info()
                    shared.append({"pss_bytes": full.pss, "uss_bytes": full.uss})
                except (psutil.Error, AttributeError, IndexError):  # a rank that has ended
                    shared.append({})
            ch.release()
            rows = ch.wait()
        per_rank = []
        for r, row in enumerate(rows):
            try:
                probe = json.loads((results / f"{r}.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                probe = {}
            if row["status"] == "ok" and not probe:
                row.update(status="failed", reason="ended without writing its result")
            per_rank.append({**row, **shared[r], **probe})
    finally:
        shutil.rmtree(results, ignore_errors=True)
    bad = [r for r in per_rank if r["status"] != "ok"]
    if bad:
        return {"status": "failed", "reason": f"rank {per_rank.index(bad[0])}: {bad[0]['reason']}",
                "per_rank": per_rank}
    index = max(r["private_loader"] - r["private_start"] for r in per_rank)
    return {"status": "ok", "ranks": ranks, "make_loader_s": max(r["make_loader_s"] for r in per_rank),
            "first_batch_s": max(r["first_batch_s"] for r in per_rank),
            "loader_private_bytes": index, "loader_private_bytes_per_pair": round(index / n, 2),
            "first_batch_private_bytes": max(r["private_first_batch"] - r["private_start"] for r in per_rank),
            "per_rank": per_rank}


# --- the report -------------------------------------------------------------------------------------------------

def _git_commit(root: Path) -> dict:
    def git(*args) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    return {"commit": commit, "dirty": bool(git("status", "--porcelain")) if commit else None}


def _disk(path: Path) -> dict:
    usage = shutil.disk_usage(path)
    best = ("", "", "")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mount, fs = line.split()[:3]
            if str(path.resolve()).startswith(mount.rstrip("/") + "/") and len(mount) >= len(best[1]):
                best = (dev, mount, fs)
    except OSError:
        pass
    return {"path": str(path), "total_bytes": usage.total, "free_bytes": usage.free, "device": best[0],
            "mount": best[1], "filesystem": best[2]}


def machine(cfg: ScaleConfig) -> dict:
    cpu = ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    except OSError:
        pass
    return {"node": platform.node(), "cpu_count": os.cpu_count(), "cpu_model": cpu or platform.processor(),
            "memory_bytes": psutil.virtual_memory().total, "python": platform.python_version(),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "disk": _disk(cfg.work),
            "pairload": {"version": pairload.__version__, "path": str(PAIRLOAD_TREE / "pairload"),
                         **_git_commit(PAIRLOAD_TREE)}}


def series(report: dict) -> dict[str, list[tuple[int, float]]]:
    """Every measure that can grow with N, as (N, value) points in size order: the report's growth and chart."""
    out: dict[str, list[tuple[int, float]]] = {}

    def add(name: str, n: int, row: dict | None, key: str) -> None:
        if row and row.get("status") == "ok" and row.get(key):
            out.setdefault(name, []).append((n, float(row[key])))

    for n in sorted(report["sizes"], key=int):
        size = report["sizes"][n]
        if not (size.get("synth") or {}).get("reused"):
            add("synth wall s", int(n), size.get("synth"), "wall_s")
        for p, row in sorted((size.get("pack") or {}).items(), key=lambda kv: int(kv[0])):
            add(f"pack p{p} wall s", int(n), row, "wall_s")
            add(f"pack p{p} main peak bytes", int(n), row, "peak_rss_bytes")
            add(f"pack p{p} worker peak bytes", int(n), row, "peak_worker_rss_bytes")
        add("verify wall s", int(n), size.get("verify"), "wall_s")
        add("verify peak bytes", int(n), size.get("verify"), "peak_rss_bytes")
        add("index bytes/pair", int(n), size.get("index"), "index_bytes_per_pair")
        for r, row in sorted((size.get("loader") or {}).items(), key=lambda kv: int(kv[0])):
            add(f"make_loader r{r} s", int(n), row, "make_loader_s")
            add(f"first batch r{r} s", int(n), row, "first_batch_s")
            add(f"loader r{r} private bytes", int(n), row, "loader_private_bytes")
    return out


def growth(points: list[tuple[int, float]]) -> float | None:
    """The log-log slope of a measure against N (least squares): 1 is linear, 0 flat."""
    import numpy as np

    if len({n for n, _ in points}) < 2:
        return None
    x, y = np.log([n for n, _ in points]), np.log([v for _, v in points])
    return round(float(np.polyfit(x, y, 1)[0]), 3)


def save(report: dict, path: Path | None) -> None:
    report["growth"] = {name: growth(points) for name, points in series(report).items()}
    if path:
        with atomic_open(path, "w") as fh:
            json.dump(report, fh, indent=1)
            fh.write("\n")


def _panel(name: str) -> str:
    if name.startswith(("make_loader", "first batch")):
        return "loader"
    if name.startswith("index"):
        return "index"
    return "memory" if name.endswith(" bytes") else "time"


def plot(report: dict, path: Path) -> None:
    """Four log-log panels against N (time, peak memory, index bytes/pair, loader start-up), each line labelled
    with its slope, written atomically as a PNG in the style of `pairload.bench.chart.plot`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 100 else f"{v:.3g}")
    panels = {"time": "wall time (s)", "memory": "peak or private memory (MB)", "index": "index bytes per pair",
              "loader": "loader start-up (s)"}
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    drawn = dict(zip(panels, axes.flat))
    lines = series(report)
    for name, points in lines.items():
        ax = drawn[_panel(name)]
        scale = 2**20 if name.endswith(" bytes") else 1
        slope = growth(points)
        ax.plot([n for n, _ in points], [v / scale for _, v in points], marker="o", linewidth=1.2,
                label=name.removesuffix(" bytes").removesuffix(" s") + (f" (slope {slope})" if slope is not None
                                                                         else ""))
    sizes = sorted({n for points in lines.values() for n, _ in points})
    for panel, ax in drawn.items():
        ax.set_ylabel(panels[panel])
        ax.set_xscale("log")
        ax.set_xticks(sizes)  # the measured sizes only, in plain numbers: 100,000, not 1e+05
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("pairs (log scale)")
        if panel == "index":  # flat is the point: a linear axis from 0, not a zoom into a few hundredths
            ax.set_ylim(0, max([*ax.get_ylim(), 1]) * 1.3)
        else:
            ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # plain numbers: 2,000 and 56.6, not 2×10³ and 5.66×10¹
            axis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="both", linewidth=0.3, color="#cccccc")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, frameon=False)
    m, c = report["machine"], report["config"]
    fig.suptitle(f"pairload at scale: {m['node']}, {m['cpu_count']} cores, {m['memory_bytes'] / 2**30:.0f} GiB; "
                 f"{c['image']} pairs, {c['workers']} workers, {c['loader']} loader; {m['date'][:10]}", fontsize=9)
    fig.tight_layout()
    with atomic_open(path, "wb", fsync=False) as fh:
        fig.savefig(fh, dpi=120, format="png")
    plt.close(fig)


def _summary(n: int, step: str, key: str, row: dict) -> str:
    head = f"[{n} pairs] {step}{' ' + key if key else ''}:"
    if row.get("status") != "ok":
        return f"{head} {row.get('status')}: {row.get('reason', '')}"
    bits = [f"{row['wall_s']:.2f} s" if "wall_s" in row else "",
            f"peak {row['peak_rss_bytes'] / 2**20:.0f} MB" if row.get("peak_rss_bytes") else "",
            f"{row['index_bytes_per_pair']} B/pair" if "index_bytes_per_pair" in row else "",
            f"make_loader {row['make_loader_s']:.3f} s, {row['loader_private_bytes_per_pair']} private B/pair"
            if "make_loader_s" in row else "", "reused" if row.get("reused") else ""]
    return f"{head} " + ", ".join(b for b in bits if b)


def _start(cfg: ScaleConfig) -> dict:
    """The report to fill: the one at `out` when it was measured here on the same images (so that several commands
    under a time limit add up to one report), else a new one."""
    config = {"image": f"{cfg.image[0]}x{cfg.image[1]}", "workers": cfg.workers, "shard_size": cfg.shard_size,
              "loader": cfg.loader, "batch_size": cfg.batch_size, "crop": cfg.crop, "work": str(cfg.work)}
    mach = machine(cfg)
    fresh = {"benchmark": "scale", "config": config, "machine": mach, "sizes": {}}
    if not cfg.out or not cfg.out.exists() or cfg.fresh:
        return fresh
    try:
        old = json.loads(cfg.out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = None
    if not (isinstance(old, dict) and old.get("benchmark") == "scale" and old.get("config") == config
            and old.get("machine", {}).get("node") == mach["node"]):
        raise ConfigError(f"--out {cfg.out}: holds something other than a scale report of this machine with "
                          f"{json.dumps(config)}; pass --fresh to replace it, or choose another --out")
    old["machine"] = mach
    return old


def run(cfg: ScaleConfig, log=print) -> dict:
    """Measure every selected step for every size (smallest first), saving the report after each step."""
    cfg.work.mkdir(parents=True, exist_ok=True)
    report = _start(cfg)
    features, start = pack_features(cfg.timeout)
    report.update(pack_features=features, cli_start=start)
    if start["status"] != "ok":
        raise ConfigError(f"`{' '.join(cli('pack', '--help'))}` failed: {start['reason']}; the benchmark runs "
                          "pairload through this interpreter, so it must run there")
    save(report, cfg.out)
    for n in sorted(set(cfg.sizes)):
        size = report["sizes"].setdefault(str(n), {"pairs": n})
        for step in STEPS:
            if step not in cfg.steps:
                continue
            keys = {"pack": cfg.parts, "loader": cfg.ranks}.get(step, [None])
            for key in sorted(set(keys)):
                if step == "synth":
                    row = step_synth(cfg, n)
                elif step == "pack":
                    row = step_pack(cfg, n, key, features["parts"])
                elif step == "verify":
                    row = step_verify(cfg, n)
                elif step == "index":
                    row = step_index(cfg, n)
                else:
                    row = step_loader(cfg, n, key)
                row["measured_at"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
                if key is None:
                    size[step] = row
                else:
                    size.setdefault(step, {})[str(key)] = row
                save(report, cfg.out)
                log(_summary(n, step, f"p{key}" if step == "pack" else f"r{key}" if key else "", row))
    if cfg.plot:
        try:
            plot(report, cfg.plot)
        except ImportError:
            log("plot: matplotlib is not installed (pip install matplotlib); the report has every number")
    return report
