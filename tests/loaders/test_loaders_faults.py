"""Faults a real job meets around the loader worker processes: death, signals, errors in a worker, scripts with
no main guard, and what a worker costs."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pairload import make_loader
from pairload.errors import LoaderError


def _workers(pid: int | None = None) -> list[psutil.Process]:
    """The loader worker processes under `pid` (default: this process)."""
    out = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "pairload.workers" in " ".join(child.cmdline()):
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


def _shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def test_a_killed_worker_is_an_error_naming_it_within_seconds(packed):
    others = {p.pid for p in _workers()}  # workers of loaders earlier tests left to the garbage collector
    loader = make_loader("ram", packed, batch_size=2, crop=16, num_workers=2)
    next(iter(loader))
    victims = [p for p in _workers() if p.pid not in others]
    assert len(victims) == 2
    os.kill(victims[1].pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(LoaderError, match=rf"worker pairload-ram-\d \(pid {victims[1].pid}\) was killed by SIGKILL"):
        for epoch in range(1000):  # batches already in the ring may still come out first
            loader.set_epoch(epoch)
            for _ in loader:
                pass
    assert time.monotonic() - start < 10
    psutil.wait_procs(victims, timeout=10)
    assert not [p for p in victims if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    # the loader closed itself; iterating again starts fresh workers and works
    assert len(list(loader)) == len(loader)
    loader.close()


VICTIM = """
import sys, time
import pairload
if __name__ == "__main__":
    loader = pairload.make_loader("ram", sys.argv[1], batch_size=2, crop=16, num_workers=2)
    next(iter(loader))
    print("ready", flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_loading_process_leaves_no_worker_and_nothing_in_dev_shm(packed, tmp_path, sig):
    script = tmp_path / "victim.py"
    script.write_text(VICTIM)
    before = _shm()
    proc = subprocess.Popen([sys.executable, str(script), str(packed)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(_workers(proc.pid)) == 2 and _shm() - before
        proc.send_signal(sig)
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(children, timeout=10)  # workers and the resource tracker
        assert not alive, [p.cmdline() for p in alive]
        deadline = time.monotonic() + 10
        while _shm() - before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _shm() - before, "shared memory or semaphores left in /dev/shm"
    finally:
        proc.kill()


NO_GUARD = """
import time, torch, pairload
t0 = time.monotonic()
loader = pairload.make_loader("ram", SHARDS, batch_size=2, crop=16, num_workers=2)
loader.start_workers()
started = time.monotonic() - t0
import psutil
uss = [psutil.Process(p).memory_full_info().uss for p in loader.worker_pids()]
n = sum(len(b) for b in loader)
print(n, started, max(uss), flush=True)
"""


@pytest.mark.parametrize("how", ["script", "-c"])
def test_a_script_without_a_main_guard_works_and_its_workers_stay_small(packed, tmp_path, how):
    # the workers start as `python -m pairload.workers`: they never import the script (nor torch, which it does)
    code = NO_GUARD.replace("SHARDS", repr(str(packed)))
    script = tmp_path / "noguard.py"
    script.write_text(code)
    res = subprocess.run([sys.executable, *((str(script),) if how == "script" else ("-c", code))],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    n, started, uss = res.stdout.split()
    assert int(n) == len(make_loader("ram", packed, batch_size=2, crop=16)) * 2
    assert float(started) < 2.0, f"workers took {float(started):.2f} s to start"
    assert int(uss) < 40 * 2**20, f"a worker holds {int(uss) / 2**20:.0f} MB of its own memory"


def test_workers_import_neither_torch_nor_the_loaders():
    code = "import sys, pairload.workers.serve; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "torch" not in loaded and not [m for m in loaded if m.startswith(("pairload.loaders", "pairload.plan"))]


def test_a_worker_error_keeps_its_type_name_and_traceback(packed):
    from pairload.errors import WorkerError

    loader = make_loader("ram", packed, batch_size=2, crop=16, num_workers=1)
    loader.ds.arrays = None  # pickled into the worker: calling it there raises TypeError
    with pytest.raises(WorkerError,
                       match=r"loader worker pairload-ram-0 \(pid \d+\) raised TypeError: 'NoneType'") as got:
        next(iter(loader))
    assert got.value.type_name == "TypeError"
    assert "run_window" in got.value.remote_traceback and "fill" in str(got.value.__cause__)
    loader.close()


def test_a_shard_truncated_between_epochs_is_named(packed):
    loader = make_loader("ram", packed, batch_size=2, crop=16)
    assert len(list(loader)) == len(loader)
    shard = sorted(Path(packed).glob("train-*.tar"))[0]
    os.truncate(shard, shard.stat().st_size // 2)
    with pytest.raises(Exception, match=rf"{shard.name}: \d+ bytes, the manifest says \d+; the shard is truncated"):
        list(loader)


def test_a_shard_truncated_under_running_workers_is_named(tmp_path):
    from conftest import make_raw
    from pairload.pack.writer import PackOptions, pack

    make_raw(tmp_path / "raw", 64, size=(64, 64))
    pack(tmp_path / "raw", tmp_path / "shards", PackOptions(workers=1, shard_size=64 * 1024 * 8))
    loader = make_loader("ram", tmp_path / "shards", batch_size=2, crop=32, num_workers=2, shuffle=False)
    it = iter(loader)
    next(it)
    shard = sorted((tmp_path / "shards").glob("train-*.tar"))[-1]
    os.truncate(shard, 4096)  # what a re-pack or a full disk does to a file being read
    with pytest.raises(Exception, match=rf"{shard.name}"):
        for epoch in range(50):
            for _ in it:
                pass
            loader.set_epoch(epoch + 1)
            it = iter(loader)
    loader.close()


def _repack_in_place(shards: Path) -> None:
    """What a re-pack into the same folder does to a running loader's files: each shard replaced by rename with a
    file of the same name and size whose pixel bytes differ."""
    for path in sorted(shards.glob("*.tar")):
        data = bytearray(path.read_bytes())
        data[-2048:-1024] = bytes(255 - b for b in data[-2048:-1024])  # inside the last sample's pixels or padding
        tmp = path.with_name(path.name + ".new")
        tmp.write_bytes(bytes(data))
        os.replace(tmp, path)


@pytest.mark.parametrize("kind, workers", [("ram", 0), ("ram", 2), ("wds", 2),
                                           pytest.param("dali-external", 0, marks=pytest.mark.dali)])
def test_shards_replaced_under_a_loader_are_an_error_not_a_mix_of_two_packs(packed, tmp_path, kind, workers):
    if kind.startswith("dali"):
        pytest.importorskip("nvidia.dali")
    import shutil

    shards = tmp_path / "copy"
    shutil.copytree(packed, shards)
    loader = make_loader(kind, shards, batch_size=2, crop=16, num_workers=workers)
    assert len(list(loader)) == len(loader)
    _repack_in_place(shards)
    loader.set_epoch(1)
    with pytest.raises(LoaderError,
                       match=r"\.tar: replaced or rewritten since the loader opened .*would mix two packs"):
        for _ in loader:
            pass
    loader.close()
    fresh = make_loader(kind, shards, batch_size=2, crop=16)  # a new loader over the new pack is fine
    assert len(list(fresh)) == len(fresh)


TRUNCATE_INLINE = """
import os, sys
import pairload
loader = pairload.make_loader("ram", sys.argv[1], batch_size=2, crop=16, num_workers=0, shuffle=False)
it = iter(loader)
next(it)
victim = loader.ds.files[-1]
os.truncate(victim, 4096)
for _ in it:
    pass
"""


def test_a_shard_truncated_under_a_loader_without_workers_is_named_not_a_sigbus(packed, tmp_path):
    import shutil

    shards = tmp_path / "copy"
    shutil.copytree(packed, shards)
    res = subprocess.run([sys.executable, "-c", TRUNCATE_INLINE, str(shards)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 1, (res.returncode, res.stderr[-500:])  # an exception, not death by SIGBUS (-7)
    assert "ShardError" in res.stderr and "the shard is truncated or was replaced" in res.stderr
    assert sorted(shards.glob("*.tar"))[-1].name in res.stderr


@pytest.mark.slow
def test_a_stopped_worker_is_named_after_the_timeout_instead_of_hanging(packed):
    others = {p.pid for p in _workers()}
    loader = make_loader("ram", packed, batch_size=2, crop=16, num_workers=1, timeout=2)
    next(iter(loader))
    (victim,) = [p for p in _workers() if p.pid not in others]
    os.kill(victim.pid, signal.SIGSTOP)
    start = time.monotonic()
    try:
        with pytest.raises(LoaderError, match=rf"no batch from the loader workers in 2 s: loader worker pairload-ram-0 "
                                              rf"\(pid {victim.pid}\) is stopped \(SIGSTOP or a debugger"):
            for epoch in range(1000):
                loader.set_epoch(epoch)
                for _ in loader:
                    pass
        assert time.monotonic() - start < 30
    finally:
        try:
            os.kill(victim.pid, signal.SIGCONT)
        except ProcessLookupError:  # the loader already ended it when it gave up
            pass
        loader.close()


def test_a_shm_too_small_for_the_ring_says_how_to_fix_it(packed, monkeypatch):
    import pairload.cut.workers as ring

    real = os.statvfs

    class Small:
        f_bavail, f_frsize = 64 * 2**20 // 4096, 4096  # Docker's default /dev/shm: 64 MB

    monkeypatch.setattr(ring.os, "statvfs", lambda p: Small() if p == "/dev/shm" else real(p))
    loader = make_loader("ram", packed, batch_size=1024, crop=40, num_workers=8, last_batch="pad")  # a 137 MB ring
    with pytest.raises(pairload_errors().ConfigError, match=r"the loader's ring needs \d+ MB of shared memory .* but "
                                                            r"/dev/shm has 64 MB free; .*--shm-size"):
        next(iter(loader))


def pairload_errors():
    import pairload.errors

    return pairload.errors
