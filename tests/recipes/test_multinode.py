"""Multi-node for real: two torchrun "nodes" of 2 ranks each on this host, joined by a c10d rendezvous, gloo on CPU,
training with the reference loop from shards served over HTTP, each node with its own --cache-dir.

Checked: every sample is seen once per epoch across the 4 ranks and the data (digest of the keys per epoch, in
(step, rank, row) order) is a one-node 4-rank run's; each node downloads each shard it needs once (ram: every shard
exactly twice in all, once per node cache, though 4 ranks read it); a node killed with SIGKILL mid-run makes the
other one exit with an error within --dist-timeout, and both restarted with --resume end where an uninterrupted run
ends. One host cannot show what separate hosts or NCCL across nodes would add (see docs/multinode.md).

Every launch of 4 ranks costs 10-20 s on a 2-core machine, so all three tests are marked slow: the one-node
reference run (once per module) 13-19 s, the ram test 17-22 s, the wds test 15-25 s, the kill and resume test
35-45 s (measured with other jobs loading the machine)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import kill_tree, raw_and_shards

pytest.importorskip("aiohttp")  # fsspec's HTTP backend (pip install 'pairload[http]')

REPO = Path(__file__).resolve().parents[2]
TRAIN, TEST, EPOCHS = 32, 2, 3  # 8 train shards of 4 pairs and 1 test shard; 2 pairs per rank: 4 steps per epoch
TINY = ("--device", "cpu", "--crop", "32", "--batch-size", "2", "--width", "4", "--depth", "1", "--workers", "0",
        "--warmup-steps", "1", "--epochs", str(EPOCHS))
WAIT = 240  # seconds any one launch may take before it is killed and the test fails


def env() -> dict:
    """The subprocesses import this checkout's pairload (not another one installed in the environment)."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    # unbuffered, and torchrun's agent logging its steps (LOGLEVEL): a node that hangs shows in its log how far it got;
    # gloo on the loopback interface, not on whatever address the host name resolves to
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "LOGLEVEL": "INFO",
            "PYTHONFAULTHANDLER": "1", "GLOO_SOCKET_IFNAME": "lo"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def shard_files(shards: Path) -> list[str]:
    doc = json.loads((shards / "manifest.json").read_text())
    return sorted(sh["file"] for entry in doc["splits"].values() for sh in entry["shards"])


class TwoNodes:
    """Two torchrun agents (the "nodes") of 2 ranks each, started together, joined by a c10d rendezvous on a free
    port; node i caches shards in root/cache{i} and logs to root/node{i}-{tag}.log; both write root/run (the shared
    storage --out needs: global rank 0 writes it and every rank reads last.pt on --resume). With c10d torchrun
    assigns the node ranks itself (a --node-rank would be ignored). Node 0 hosts the rendezvous store (`is_host`):
    both agents see 127.0.0.1 as their own address, and left to infer it both may try to host it. Each agent's
    address is 127.0.0.1 (`--local-addr`): left out, torchrun publishes `socket.getfqdn()` as the ranks' master
    address, a reverse-DNS lookup that may be slow or unresolvable on a machine without DNS (CI runs sat 240 s with
    both nodes silent). A launch that runs past its time has every process's stack printed into its log before it
    is killed. Leaving the `with` block kills whatever of both nodes still runs, ranks included."""

    def __init__(self, root: Path, url: str, *extra: str, tag: str):
        port = free_port()
        self.logs = [root / f"node{i}-{tag}.log" for i in (0, 1)]
        self.procs: list[subprocess.Popen] = []
        try:
            self._start(root, url, port, extra, tag)
        except BaseException:
            self.__exit__()
            raise

    def _start(self, root: Path, url: str, port: int, extra: tuple[str, ...], tag: str) -> None:
        for i in (0, 1):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
                   "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={tag}",
                   f"--rdzv-conf=is_host={int(i == 0)}", "--local-addr=127.0.0.1", "-m",
                   "pairload.train", "--shards", url, "--cache-dir", str(root / f"cache{i}"), *TINY,
                   "--out", str(root / "run"), *extra]
            with open(self.logs[i], "w") as log:
                self.procs.append(subprocess.Popen(cmd, env=env(), stdout=log, stderr=subprocess.STDOUT))

    def wait(self, node: int | None = None, timeout: float = WAIT) -> list[int]:
        deadline = time.monotonic() + timeout
        procs = self.procs if node is None else [self.procs[node]]
        try:
            return [p.wait(timeout=max(0.1, deadline - time.monotonic())) for p in procs]
        except subprocess.TimeoutExpired:
            self.dump_stacks()
            pytest.fail(f"still running after {timeout:.0f} s\n{self.tails(8000)}")

    def dump_stacks(self) -> None:
        """Every thread's stack of each rank (SIGUSR1, `pairload.train` prints them) and then of each agent (SIGABRT
        with PYTHONFAULTHANDLER), into the node logs."""
        import psutil

        agents = [psutil.Process(p.pid) for p in self.procs if p.poll() is None]
        for sig, procs in ((signal.SIGUSR1, [c for a in agents for c in a.children(recursive=True)]),
                           (signal.SIGABRT, agents)):
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(sig)
            time.sleep(2)

    def kill(self, node: int) -> None:
        kill_tree(self.procs[node].pid)
        self.procs[node].wait()

    def tails(self, chars: int = 3000) -> str:
        return "\n".join(f"--- node {i} ---\n{log.read_text()[-chars:] if log.exists() else ''}"
                         for i, log in enumerate(self.logs))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for i, p in enumerate(self.procs):
            if p.poll() is None:
                self.kill(i)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return raw_and_shards(tmp_path_factory.mktemp("multinode"), TRAIN, test=TEST, size=(40, 48)) / "shards"


@pytest.fixture
def server(data):
    from pairload.bench.httpserver import StaticServer

    srv = StaticServer(data)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def one_node(data, tmp_path_factory) -> list[dict]:
    """The reference: one node of 4 ranks on the local shard folder, same options."""
    out = tmp_path_factory.mktemp("one-node") / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4", "-m", "pairload.train",
           "--shards", str(data), *TINY, "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=WAIT)
    # a rank's own last words (a fault handler's stack, a C++ terminate) come before torchrun's report of it, which
    # alone fills 3,000 characters
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-12000:]
    rows = metrics(out)
    assert [r["world_size"] for r in rows] == [4] * EPOCHS
    return rows


def same_training(rows: list[dict], reference: list[dict]) -> None:
    assert [r["epoch"] for r in rows] == list(range(1, EPOCHS + 1))
    assert all(r["world_size"] == 4 and r["val_samples"] == TEST for r in rows)
    # every train pair exactly once per epoch across the 4 ranks
    assert all(r["data_samples"] == TRAIN and r["data_repeats"] == 0 for r in rows)
    assert [r["data_digest"] for r in rows] == [r["data_digest"] for r in reference]
    assert [r["steps"] for r in rows] == [r["steps"] for r in reference] == [TRAIN // 8] * EPOCHS
    for a, b in zip(rows, reference):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-3, abs=1e-5)
        assert a["val_psnr"] == pytest.approx(b["val_psnr"], abs=0.02)


@pytest.mark.slow
def test_two_nodes_over_http_train_like_one_node_and_download_each_shard_once_per_node(data, server, one_node,
                                                                                      tmp_path):
    with TwoNodes(tmp_path, server.url, tag="ram") as nodes:
        assert nodes.wait() == [0, 0], nodes.tails()
    same_training(metrics(tmp_path / "run"), one_node)
    # ram needs the whole split on each node: every shard (train and test) once per node cache, not once per rank
    files = shard_files(data)
    assert Counter(server.gets(".tar")) == {f"/{name}": 2 for name in files}
    assert not [entry for entry in server.log if entry[2] != 200]
    for i in (0, 1):
        assert len(list((tmp_path / f"cache{i}" / "shards").glob("*.tar"))) == len(files)


@pytest.mark.slow
def test_two_nodes_streaming_with_wds_download_no_shard_more_than_once_per_node(data, server, tmp_path):
    with TwoNodes(tmp_path, server.url, "--loader", "wds", tag="wds") as nodes:
        assert nodes.wait() == [0, 0], nodes.tails()
    rows = metrics(tmp_path / "run")
    assert [r["epoch"] for r in rows] == list(range(1, EPOCHS + 1))
    assert all(r["data_samples"] == TRAIN and r["data_repeats"] == 0 and r["loader"] == "wds" for r in rows)
    gets = Counter(server.gets(".tar"))
    assert gets and max(gets.values()) <= 2, gets
    assert set(gets) <= {f"/{name}" for name in shard_files(data)}


@pytest.mark.slow
def test_a_node_killed_mid_run_stops_the_other_and_both_resume_to_the_uninterrupted_result(data, server, one_node,
                                                                                          tmp_path):
    import torch

    run = tmp_path / "run"
    args = ("--save-every-steps", "1", "--dist-timeout", "30")  # 10 s timed out on a loaded 2-core CI machine
    # before step 1 (4 ranks and 2 agents on 2 cores); a lost peer is still noticed in seconds
    with TwoNodes(tmp_path, server.url, *args, tag="cut") as nodes:
        deadline = time.monotonic() + WAIT
        while not (run / "last.pt").exists():  # the first checkpoint: after step 1 of epoch 1
            assert time.monotonic() < deadline and all(p.poll() is None for p in nodes.procs), nodes.tails()
            time.sleep(0.005)
        nodes.kill(1)  # torchrun and its ranks, all at once, like a node that loses power
        killed = time.monotonic()
        assert nodes.wait(0, timeout=60) != [0], nodes.tails()
        assert time.monotonic() - killed < 90  # 3 x --dist-timeout; a lost peer is noticed at once (about 2 s here)
    state = torch.load(run / "last.pt", weights_only=False)
    assert state["epoch"] < EPOCHS, "the kill came after the run ended; nothing was interrupted"
    log = nodes.logs[0].read_text()
    assert "a collective got no answer from the other ranks within --dist-timeout 30 s" in log, nodes.tails()

    with TwoNodes(tmp_path, server.url, *args, "--resume", tag="resume") as nodes:
        assert nodes.wait() == [0, 0], nodes.tails()
    rows = metrics(run)
    same_training(rows, one_node)
    # a node restarted on its own disk downloads nothing again
    assert Counter(server.gets(".tar")) == {f"/{name}": 2 for name in shard_files(data)}
