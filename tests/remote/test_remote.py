"""Shards read from URLs through a node-local cache: the same batches as local shards, one download per node,
and the faults a bucket or an HTTP server brings. Real servers on 127.0.0.1 (the standard library's HTTP server,
moto's S3 server), reached through fsspec's real clients."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import raw_and_shards
from pairload import make_loader
from pairload.bench.httpserver import StaticServer
from pairload.errors import ConfigError, ShardError
from pairload.read.shards import info, open_shards, verify
from pairload.remote.cache import FetchError, Retry, ShardCache, parse_bytes

FAST = Retry(attempts=3, backoff=0.05, timeout=5)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """24 training pairs of 40x56 in 6 shards of 4 (pixels encode the pair index), and 5 test pairs."""
    return raw_and_shards(tmp_path_factory.mktemp("remote"), 24, test=5) / "shards"


@pytest.fixture
def server(data):
    with StaticServer(data) as srv:
        yield srv


def epochs(loader, n=2):
    out = []
    for e in range(n):
        loader.set_epoch(e)
        out.append([(b.keys, b.low.clone(), b.high.clone(), b.source) for b in loader])
    return out


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(p[0] == q[0] and p[3] == q[3] and torch.equal(p[1], q[1]) and torch.equal(p[2], q[2])
                                 for p, q in zip(x, y)) for x, y in zip(a, b))


def shard_gets(srv) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in srv.gets(".tar"):
        counts[path] = counts.get(path, 0) + 1
    return counts


@pytest.mark.parametrize("kind,workers", [("wds", 0), ("wds", 2), ("ram", 0), ("ram", 2)])
def test_remote_batches_equal_local_and_each_shard_is_downloaded_once(data, server, tmp_path, kind, workers):
    opts = dict(batch_size=4, crop=24, seed=5, num_workers=workers)
    with make_loader(kind, data, **opts) as local, \
            make_loader(kind, server.url, cache_dir=tmp_path / "cache", **opts) as remote:
        assert same(epochs(local), epochs(remote))
    gets = shard_gets(server)
    # 2 epochs, one download each
    assert len(gets) == len(list(data.glob("train-*.tar"))) and set(gets.values()) == {1}, gets
    # a second loader on the node (another rank) finds everything cached
    with make_loader(kind, server.url, cache_dir=tmp_path / "cache", **opts) as again:
        assert sum(1 for _ in again) == len(again) > 0
    assert shard_gets(server) == gets


def test_mixing_a_local_and_a_remote_source(data, server, tmp_path):
    opts = dict(batch_size=4, crop=16, seed=2, weights={"a": 1, "b": 2}, epoch_size=24)
    with make_loader("ram", {"a": data, "b": data}, **opts) as local, \
            make_loader("ram", {"a": data, "b": server.url}, cache_dir=tmp_path / "c", **opts) as mixed:
        assert same(epochs(local), epochs(mixed))


def test_resume_on_another_world_size_reads_the_same_pixels_remote(data, server, tmp_path):
    opts = dict(batch_size=2, crop=16, seed=9)
    with make_loader("wds", data, **opts) as local:
        whole = [(b.keys, b.low.clone()) for b in local]
    with make_loader("wds", server.url, cache_dir=tmp_path / "c", **opts) as first:
        it = iter(first)
        seen = [next(it) for _ in range(3)]
        state = first.state_dict()
    rest = []
    for r in range(2):
        with make_loader("wds", server.url, cache_dir=tmp_path / "c", rank=r, world_size=2, **opts) as part:
            part.load_state_dict(state)
            rest += [k for b in part for k in b.keys]
    assert sorted(k for b in seen for k in b.keys) + sorted(rest) == \
        sorted(k for keys, _ in whole[:3] for k in keys) + sorted(k for keys, _ in whole[3:] for k in keys)


def test_a_url_needs_a_cache_dir_and_info_reads_only_the_manifest(data, server):
    with pytest.raises(ConfigError, match=r"http://127\.0\.0\.1:\d+: a remote source needs a node-local cache: "
                                          r"pass cache_dir="):
        make_loader("wds", server.url, batch_size=2, crop=16)
    assert info(server.url) == info(data)
    assert shard_gets(server) == {}


def test_verify_downloads_into_the_cache_and_checks_every_sample(data, server, tmp_path):
    report = verify(server.url, cache_dir=tmp_path / "c")
    assert (report.shards, report.samples) == (verify(data).shards, verify(data).samples)
    assert len(list((tmp_path / "c" / "shards").glob("*.tar"))) == report.shards


def test_cli_info_and_verify_on_a_url(data, server, tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}

    def run(*a):
        return subprocess.run([sys.executable, "-m", "pairload.cli", *a], capture_output=True, text=True, env=env,
                              timeout=120)

    out = run("info", server.url, "--json")
    assert out.returncode == 0 and '"samples": 24' in out.stdout
    out = run("verify", server.url)
    shards = len(list(data.glob("*.tar")))
    assert out.returncode == 0 and f"ok: {shards} shards, 29 samples" in out.stdout
    assert len(list((tmp_path / "xdg" / "pairload" / "shards").glob("*.tar"))) == shards
    server.stop()
    out = run("info", server.url)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"error: {server.url}/manifest.json: reading failed 4 times" in out.stderr


# ---------------------------------------------------------------------------------------------------- faults


def test_404_and_403_name_the_url_and_the_fix(data, server, tmp_path):
    first = sorted(p.name for p in data.glob("train-*.tar"))[0]
    server.faults.status[f"/{first}"] = 404
    with pytest.raises(FetchError, match=rf"{server.url}/{first}: not found \(404\); check the URL, and that the "
                                         "whole shard folder"):
        make_loader("ram", server.url, cache_dir=tmp_path / "c", batch_size=2, crop=16)
    server.faults.status[f"/{first}"] = 403
    with pytest.raises(FetchError, match=rf"{first}: access denied \(403\); check the credentials"):
        make_loader("ram", server.url, cache_dir=tmp_path / "c", batch_size=2, crop=16)
    server.faults.status["/manifest.json"] = 404
    with pytest.raises(FetchError, match=r"manifest\.json: not found \(404\)"):
        make_loader("wds", server.url, cache_dir=tmp_path / "c", batch_size=2, crop=16)


def test_changed_bytes_are_fetched_once_more_then_refused_by_name(data, server, tmp_path):
    name = sorted(p.name for p in data.glob("train-*.tar"))[1]
    server.faults.corrupt.add(f"/{name}")
    with pytest.raises(ShardError, match=rf"{name}: its bytes no longer match the manifest .*twice\); the shard was "
                                         "changed or replaced"):
        with make_loader("ram", server.url, cache_dir=tmp_path / "c", batch_size=2, crop=16):
            pass
    assert shard_gets(server)[f"/{name}"] == 2  # fetched again once
    assert not [p for p in (tmp_path / "c" / "shards").iterdir() if "partial" in p.name]


def test_a_connection_cut_mid_shard_is_retried(data, server, tmp_path):
    name = sorted(p.name for p in data.glob("train-*.tar"))[2]
    server.faults.cut_after[f"/{name}"] = 1000
    cache = ShardCache(tmp_path / "c", retry=FAST)
    entry = open_shards(data).shard_bytes[2]
    sha = hashlib.sha256((data / name).read_bytes()).hexdigest()

    def heal():
        server.faults.cut_after.clear()

    with pytest.raises(FetchError, match=rf"{name}: downloading failed 3 times"):
        cache.fetch(f"{server.url}/{name}", sha, entry)
    heal()
    assert cache.fetch(f"{server.url}/{name}", sha, entry).read_bytes() == (data / name).read_bytes()


def test_the_server_going_away_mid_epoch_is_a_named_error_not_a_hang(data, tmp_path):
    with StaticServer(data, rate=200_000) as server:  # 50 KB shards take 1/4 s each: the stop lands mid-epoch
        loader = make_loader("wds", server.url, cache_dir=tmp_path / "c", batch_size=2, crop=16, shuffle_buffer=1)
        start = time.monotonic()
        with pytest.raises(FetchError, match=rf"{server.url}/train-\d+\.tar: downloading failed 4 times, last "
                                             r"with .*is the server reachable"):
            for k, _ in enumerate(loader):
                if k == 0:
                    server.stop()
        assert time.monotonic() - start < 30
        loader.close()


def _fetch_script(url: str, sha: str, size: int, cache: Path, extra: str = "") -> str:
    return textwrap.dedent(f"""
        import signal, resource, sys
        {extra}
        from pairload.remote.cache import ShardCache
        c = ShardCache({str(cache)!r})
        c.fetch({url!r}, {sha!r}, {size})
        print("downloads", c.counters.downloads)
    """)


@pytest.fixture
def big_blob(tmp_path):
    """A 2 MB file served slowly (1 MB/s) to catch downloads in the act."""
    folder = tmp_path / "blob"
    folder.mkdir()
    blob = np.random.default_rng(0).integers(0, 256, 2 << 20, dtype=np.uint8).tobytes()
    (folder / "x.tar").write_bytes(blob)
    with StaticServer(folder, rate=1 << 20) as srv:
        yield srv, hashlib.sha256(blob).hexdigest(), len(blob)


def test_two_processes_asking_for_one_shard_download_it_once(big_blob, tmp_path):
    srv, sha, size = big_blob
    script = _fetch_script(f"{srv.url}/x.tar", sha, size, tmp_path / "c")
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(outs) == ["downloads 0\n", "downloads 1\n"]
    assert srv.gets("x.tar") == ["/x.tar"]  # one download, counted by the server


def test_a_process_queued_for_a_download_gets_the_shard_while_the_downloader_keeps_using_it(big_blob, tmp_path):
    """Two ranks of a node both find a shard missing and both queue for the download: the one that downloads it
    goes on holding it (shared) for as long as it trains on it, so the other must take the finished file instead
    of waiting for the download lock (a two-node CI run hung so until its wait ran out)."""
    import fcntl
    import select

    srv, sha, size = big_blob
    cache = tmp_path / "c"
    (cache / "locks").mkdir(parents=True)
    lock = cache / "locks" / f"{sha}.lock"
    gate = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(gate, fcntl.LOCK_SH)  # a third process checking the cache: both below find the shard missing and
    # wait for the download lock until it lets go
    hold = "sys.stdout.flush(); sys.stdin.read()"  # keeps its hold on the shard until stdin closes
    script = _fetch_script(f"{srv.url}/x.tar", sha, size, cache) + hold
    procs = [subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    try:
        deadline = time.monotonic() + 60
        while not all(any(os.path.realpath(f"/proc/{p.pid}/fd/{fd}") == str(lock)
                          for fd in os.listdir(f"/proc/{p.pid}/fd")) for p in procs):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
            time.sleep(0.02)
        time.sleep(0.3)  # both past their first look (shared, shard missing)
        os.close(gate)
        outs, deadline = {}, time.monotonic() + 30  # the download takes 2 s at 1 MB/s
        while len(outs) < 2 and time.monotonic() < deadline:
            for p in procs:
                if p.pid not in outs and select.select([p.stdout], [], [], 0.05)[0]:
                    outs[p.pid] = p.stdout.readline()
        assert sorted(outs.values()) == ["downloads 0\n", "downloads 1\n"], outs
        assert srv.gets("x.tar") == ["/x.tar"]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_kill_9_during_a_download_leaves_nothing_the_next_start_uses(big_blob, tmp_path):
    srv, sha, size = big_blob
    script = _fetch_script(f"{srv.url}/x.tar", sha, size, tmp_path / "c")
    proc = subprocess.Popen([sys.executable, "-c", script])
    shards = tmp_path / "c" / "shards"
    deadline = time.monotonic() + 30
    while not [p for p in shards.glob("*partial*") if p.stat().st_size > 0] and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert [p.name for p in shards.iterdir()] == [f"{sha}.tar.partial-{proc.pid}"]  # half-written, never renamed
    cache = ShardCache(tmp_path / "c")
    assert hashlib.sha256(cache.fetch(f"{srv.url}/x.tar", sha, size).read_bytes()).hexdigest() == sha
    assert [p.name for p in shards.iterdir()] == [f"{sha}.tar"]  # the partial file was removed


def test_a_full_cache_disk_is_a_clear_error_and_leaves_nothing_corrupt(big_blob, tmp_path):
    srv, sha, size = big_blob
    limit = ("signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
             "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))")
    out = subprocess.run([sys.executable, "-c", _fetch_script(f"{srv.url}/x.tar", sha, size, tmp_path / "c", limit)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "the cache's disk is full while downloading" in out.stderr and "the partial file was removed" in out.stderr
    assert list((tmp_path / "c" / "shards").iterdir()) == []


def test_cache_limit_streams_wds_within_it_and_ram_refuses_a_larger_split(data, server, tmp_path):
    ds = open_shards(data)
    shard = max(ds.shard_bytes)
    with pytest.raises(ConfigError, match=r"the ram loader needs the split cached whole: raise cache_limit, or use "
                                          r"the wds loader"):
        make_loader("ram", server.url, cache_dir=tmp_path / "c", cache_limit=3 * shard, batch_size=2, crop=16)
    with pytest.raises(ConfigError, match=r"cannot hold one shuffle buffer of shards \(8 samples\)"):
        make_loader("wds", server.url, cache_dir=tmp_path / "c", cache_limit=2 * shard, batch_size=2, crop=16,
                    shuffle_buffer=8)
    opts = dict(batch_size=2, crop=16, seed=1, shuffle_buffer=4)
    with make_loader("wds", data, **opts) as local, \
            make_loader("wds", server.url, cache_dir=tmp_path / "c", cache_limit=4 * shard, **opts) as remote:
        assert same(epochs(local), epochs(remote))
        cache = remote.ds.node_cache
        assert cache.counters.evicted > 0 and cache.used() <= 4 * shard


@pytest.mark.gpu
def test_wds_zero_copy_streams_remote_shards_through_a_small_node_cache(data, server, tmp_path):
    """On a GPU the kernel cuts a remote split's windows from the node cache's pages: each shard held (and pinned)
    only while its batches are cut, so a cache of 4 shards streams 6; batches equal the local worker path's."""
    shard = max(open_shards(data).shard_bytes)
    opts = dict(batch_size=2, crop=16, seed=1, shuffle_buffer=4, device="cuda")
    with make_loader("wds", data, zero_copy=False, **opts) as local, \
            make_loader("wds", server.url, cache_dir=tmp_path / "c", cache_limit=4 * shard, zero_copy=True,
                        **opts) as remote:
        assert remote.path == "zero-copy" and remote.cutter.memory.streaming
        got = epochs(remote, 3)
        assert same(epochs(local, 3), got)
        cache = remote.ds.node_cache
        assert cache.counters.evicted > 0 and cache.used() <= 4 * shard


def test_parse_bytes():
    assert parse_bytes("500GB") == 500 << 30 and parse_bytes("1.5k") == 1536 and parse_bytes("4096") == 4096
    with pytest.raises(ConfigError, match=r"--cache-limit 'lots': expected a size such as 500GB"):
        parse_bytes("lots")


# ---------------------------------------------------------------------------------------------------- S3


@pytest.fixture(scope="module")
def s3_shards(data, s3):
    """The shards uploaded through boto3 to a new bucket of the session's S3 server: (URL, storage_options)."""
    bucket = s3.bucket("shards")
    client = s3.client()
    for f in sorted(data.iterdir()):
        client.upload_file(str(f), bucket, f"lol/{f.name}")
    return f"s3://{bucket}/lol", s3.storage_options


def test_s3_source_through_s3fs(data, s3_shards, tmp_path):
    url, s3 = s3_shards
    opts = dict(batch_size=4, crop=24, seed=4, num_workers=2)
    with make_loader("wds", data, **opts) as local, \
            make_loader("wds", url, cache_dir=tmp_path / "c", storage_options=s3, **opts) as remote:
        assert same(epochs(local), epochs(remote))
    missing = url.rsplit("/", 1)[0] + "/nothing-here"
    with pytest.raises(FetchError, match=re.escape(missing) + r"/manifest\.json: not found \(404\)"):
        make_loader("wds", missing, cache_dir=tmp_path / "c", storage_options=s3, batch_size=2, crop=16)


def test_bench_remote_reports_the_bound_the_cold_and_the_cached_epoch(data):
    from pairload.bench.remote import RemoteBenchConfig, run_remote

    report = run_remote(RemoteBenchConfig(shards=str(data), rate=2_000_000, crop=16, batch_size=4, workers=0,
                                          local_epochs=2))
    assert report["shard_downloads"] == len(list(data.glob("train-*.tar")))  # the loader's own, each once
    assert 0 < report["network_bound"]["bytes_per_s"] <= 2_000_000 * 1.1
    assert report["cold_epoch"]["pairs"] == report["cached_epoch"]["pairs"] == 24
    assert 0.3 < report["cold_epoch"]["of_bound"] < 1.2  # the throttle, not the loader, sets the pace
    assert report["cached_epoch"]["pairs_per_s"] > 3 * report["cold_epoch"]["pairs_per_s"]
