"""A torchrun agent killed with SIGKILL takes its ranks with it: each rank asked the kernel for SIGTERM on its
parent's death (PR_SET_PDEATHSIG), so none trains on orphaned. Real torchrun, 2 CPU ranks on gloo."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import kill_tree, raw_and_shards

psutil = pytest.importorskip("psutil")


def gone(proc) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE  # dead, waiting for a reaper that may be slow in a container
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_ranks_exit_promptly_when_torchrun_is_killed(tmp_path):
    shards = raw_and_shards(tmp_path, 16, test=2, size=(24, 32)) / "shards"
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "pairload.train",
           "--shards", str(shards), "--device", "cpu", "--crop", "16", "--batch-size", "2", "--width", "4", "--depth",
           "1", "--workers", "1", "--epochs", "100000", "--out", str(out)]
    agent = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").is_file():  # both ranks train, with their loader workers
            assert time.monotonic() < deadline and agent.poll() is None, "the run did not start"
            time.sleep(0.1)
        ranks = psutil.Process(agent.pid).children()
        assert len(ranks) == 2
        workers = [w for r in ranks for w in r.children(recursive=True)]
        assert len(workers) >= 2  # loader workers: they go when their rank goes
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        killed = time.monotonic()
        while not all(gone(p) for p in ranks + workers) and time.monotonic() - killed < 10:
            time.sleep(0.05)
        left = [p.pid for p in ranks + workers if not gone(p)]
        assert not left, f"still running {time.monotonic() - killed:.1f} s after torchrun was killed: {left}"
    finally:
        kill_tree(agent.pid)
        for p in psutil.process_iter(["cmdline"]):  # anything of this run the kill did not take
            if str(out) in " ".join(p.info["cmdline"] or []):
                p.kill()
