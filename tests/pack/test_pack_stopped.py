"""A `pairload pack` stopped from outside while it writes its shards. Killed with SIGKILL, its workers end with it and
print nothing (they used to print ~60 lines of BrokenPipeError tracebacks); interrupted by Ctrl-C (SIGINT to its
process group, as a terminal sends it), it exits non-zero with one line at most, no traceback from it or its
workers, and no shard left under a name that looks complete.

The pack is a subprocess with 2 workers over 400 pairs of 1000x1500 PNGs, hard links of one pair: each is decoded
for real (about 50 ms), so the pack is still writing when it is stopped (with 100, a CI machine under load once let
the test process wait until the pack had finished), and the fixture costs one pair."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import pair_pixels, write_rgb

ROOT = Path(__file__).resolve().parents[2]
PAIRS = 400

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel ends orphaned workers "
                                "on Linux (PR_SET_PDEATHSIG); elsewhere they end at their next result")


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stopped") / "raw"
    low, high = pair_pixels(1, 1000, 1500)
    write_rgb(root / "low" / "00000.png", low)
    write_rgb(root / "high" / "00000.png", high)
    for side in ("low", "high"):
        for i in range(1, PAIRS):
            os.link(root / side / "00000.png", root / side / f"{i:05d}.png")
    return root


def written(out: Path) -> bool:
    """Whether the workers have written a pair's pixels into a partial shard (sparse: its blocks are those
    written), so that they are busy with the next ones."""
    try:
        return any(p.stat().st_blocks * 512 >= 2 * 1000 * 1500 * 3 for p in out.glob("*.tar.partial"))
    except FileNotFoundError:
        return False


# the pack's CLI in a process that runs a second thread (a user's script, a library's): its workers are spawned
# (`pairload.forking`), and their queues' semaphores are named ones that multiprocessing's resource tracker removes
SPAWNING = ["-c", "import threading, time; threading.Thread(target=time.sleep, args=(600,), daemon=True).start(); "
            "import sys; from pairload.cli import entry; sys.argv[0] = 'pairload'; entry()"]
CLI = ["-m", "pairload.cli"]


def writing_pack(raw: Path, out: Path, how: list[str] = CLI) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """A pack of `raw` into `out` in a session of its own, once it is `written`; and its workers."""
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    # Ctrl-C's default action, as in a terminal, whatever this test runs under (a job started with `&` by a shell
    # without job control ignores SIGINT, and so would the pack it starts)
    proc = subprocess.Popen([sys.executable, *how, "pack", str(raw), str(out), "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": path},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not written(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    workers = psutil.Process(proc.pid).children()
    assert proc.poll() is None and workers, f"the pack ended before it could be stopped: {proc.communicate()}"
    return proc, workers


def ended(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE  # dead, waiting for whoever adopted it to reap it
    except psutil.NoSuchProcess:
        return True


def wait_ended(workers: list[psutil.Process], timeout: float = 5.0) -> list[psutil.Process]:
    """The workers still running after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(map(ended, workers)):
        time.sleep(0.02)
    return [p for p in workers if not ended(p)]


def looks_complete(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name == "manifest.json" or p.name.endswith((".tar", ".index")))


@pytest.mark.parametrize("how", [CLI, SPAWNING], ids=["cli", "spawning"])
def test_a_killed_pack_takes_its_workers_with_it_quietly(raw, tmp_path, how):
    out = tmp_path / "shards"
    before = semaphores()
    proc, workers = writing_pack(raw, out, how)
    spawned = any("resource_tracker" in " ".join(p.cmdline()) for p in workers)
    proc.send_signal(signal.SIGKILL)  # the pack alone, not its process group
    _, err = proc.communicate(timeout=30)
    left = wait_ended(workers)
    for p in left:
        p.kill()
    assert proc.returncode == -signal.SIGKILL and not left
    assert "Traceback" not in err and len(err.splitlines()) <= 1, err
    assert not looks_complete(out) and list(out.glob("*.tar.partial"))  # under their temporary names
    assert spawned or how is not SPAWNING  # (the CLI alone forks where it can: `pairload.forking`)
    assert semaphores() <= before, "the pool's named semaphores were left behind"


def semaphores() -> set[str]:
    """multiprocessing's named semaphores on this machine (Linux keeps them in /dev/shm)."""
    return {p.name for p in Path("/dev/shm").glob("sem.mp-*")}


@pytest.mark.parametrize("how", [CLI, SPAWNING], ids=["cli", "spawning"])
def test_ctrl_c_stops_a_pack_in_one_line_and_deletes_its_partial_shards(raw, tmp_path, how):
    out = tmp_path / "shards"
    proc, workers = writing_pack(raw, out, how)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the pack and its workers
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0, err[-2000:]  # what it printed, if it ran on to its end
    assert not wait_ended(workers)
    assert "Traceback" not in err and len(err.splitlines()) <= 1, err
    assert not looks_complete(out) and not list(out.glob("*.partial"))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV], ids=["oom-killer", "decoder-crash"])
def test_a_pack_whose_worker_dies_stops_naming_the_signal_and_the_files(raw, tmp_path, sig):
    """multiprocessing's pool waits forever for a dead worker's task; the pack must stop, in one line that says how
    the worker ended, the files it was on and what to do, and leave no shard behind."""
    out = tmp_path / "shards"
    proc, workers = writing_pack(raw, out)
    victim = next(p for p in workers if "resource_tracker" not in " ".join(p.cmdline()))
    victim.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"worker process {victim.pid} was killed by {sig.name} while it read {raw}" in err, err
    if sig == signal.SIGKILL:
        assert "out-of-memory killer: run it with fewer --workers" in err, err
    else:
        assert "a decoder crashed on a file" in err, err
    assert not wait_ended(workers) and not looks_complete(out) and not list(out.glob("*.partial"))
