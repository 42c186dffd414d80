import json
import subprocess
import sys

import numpy as np

import pytest

from pairload.bench.loaders import BenchConfig, plot, run_bench
from pairload.errors import ConfigError
from pairload.bench.rows import BENCH_ENTRIES as ALL
from pairload.pack.writer import PackOptions, pack
from pairload.read.shards import ShardDataset

from conftest import has_module, make_raw


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    make_raw(root / "raw", 12, size=(48, 64))
    pack(root / "raw", root / "shards", PackOptions(workers=1, shard_size=64 * 1024))
    return root


@pytest.mark.slow
def test_every_loader_and_baseline_runs_side_by_side(tiny, tmp_path):
    cfg = BenchConfig(shards=str(tiny / "shards"), raw=str(tiny / "raw"), crop=32, batch_size=4, workers=1,
                      seconds=0.4, repeats=2, device="cpu")
    report = run_bench(cfg)
    by = {r["loader"]: r for r in report["results"]}
    assert list(by) == list(ALL)
    for name, r in by.items():
        if name.startswith("dali") and not has_module("nvidia.dali"):
            assert r["status"] == "skipped" and "pip install" in r["reason"]
            continue
        assert r["status"] == "ok", (name, r["reason"])
        assert r["pairs_per_s"] > 0 and len(r["repeats"]) == 2
        assert r["pairs_per_s_min"] <= r["pairs_per_s"] <= r["pairs_per_s_max"]
        assert r["mb_per_s"] == pytest.approx(r["pairs_per_s"] * 2 * 32 * 32 * 3 / 1e6)
        assert r["peak_host_rss_mb"] > 0
    assert report["limits"]["h2d"]["pairs_per_s"] > 0 and report["limits"]["decode"]["images_per_s_per_core"] > 0
    assert report["limits"]["copy"]["pairs_per_s_per_core"] > 0
    plot(report, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_loaders_without_their_inputs_are_skipped_with_the_reason(tiny):
    cfg = BenchConfig(shards=str(tiny / "shards"), loaders=("ram", "dali-file", "naive-pil"), crop=32, batch_size=4,
                      workers=1, seconds=0.2, repeats=1, device="cpu", consumer="unet")
    report = run_bench(cfg)
    by = {r["loader"]: r for r in report["results"]}
    assert by["ram"]["status"] == "ok" and 0 <= by["ram"]["data_wait_frac"] <= 1
    assert by["naive-pil"]["status"] == "skipped" and "needs --raw" in by["naive-pil"]["reason"]
    assert by["dali-file"]["status"] == "skipped"
    with pytest.raises(ConfigError, match="--loaders fast: unknown"):
        BenchConfig(shards="x", loaders=("fast",))


@pytest.mark.slow
def test_cli_writes_json_and_chart(tiny, tmp_path):
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "bench-loaders", str(tiny / "shards"), "--raw",
                          str(tiny / "raw"), "--loaders", "ram,wds,cv2-disk", "--crop", "32", "--batch-size", "4",
                          "--workers", "1", "--seconds", "0.3", "--repeats", "1", "--device", "cpu", "--out",
                          str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert {"device", "cpu_count", "config", "limits", "results"} <= set(doc)
    assert [r["loader"] for r in doc["results"]] == ["ram", "wds", "cv2-disk"]
    assert "pairs/s" in res.stdout and (tmp_path / "r.png").exists()


@pytest.mark.parametrize("args, match", [
    (["--crop", "512"], r"error: crop 512 is larger than sample '\d+' of split 'train', which is 64x48"),
    (["--batch-size", "0"], r"error: --batch-size 0: expected at least 1"),  # the flag, not the API's name
])
def test_bench_cli_mistakes_are_one_line_errors(tiny, args, match):
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "bench-loaders", str(tiny / "shards"), *args],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert __import__("re").match(match, res.stderr)


@pytest.mark.slow
def test_cold_runs_evict_the_shards_and_report_the_disk_bound(tiny, tmp_path):
    import importlib.util

    kinds = ("ram", "wds") + (("dali-external",) if importlib.util.find_spec("nvidia.dali") else ())
    cfg = BenchConfig(shards=str(tiny / "shards"), raw=None, loaders=kinds, crop=32, batch_size=4, workers=1,
                      seconds=0.4, repeats=2, device="cpu", cold=True)
    report = run_bench(cfg)
    cold = [r for r in report["results"] if r["cold"]]
    assert tuple(r["loader"] for r in cold) == kinds and all(r["status"] == "ok" for r in cold), cold
    assert all(r["pairs_per_s"] > 0 and "of the disk bound" in r["reason"] for r in cold)
    disk = report["limits"]["disk"]
    assert disk["gb_per_s"] > 0 and disk["pairs_per_s"] > 0 and disk["bytes_read"] > 0
    assert disk["resident_before"] <= 0.02
    # the bound is the better of one stream and several (the loaders' workers read several shards at once)
    assert disk["gb_per_s"] == pytest.approx(max(disk["sequential_gb_per_s"], disk["parallel_gb_per_s"]))
    assert disk["streams"] in (1, disk["parallel_streams"]) and disk["parallel_streams"] >= 2
    for r in cold:  # each repeat checked cold, timed from the loader's construction, its first batch within it
        assert len(r["resident_before"]) == 2 and max(r["resident_before"]) <= 0.02 and not r["invalid"]
        assert len(r["first_batch_s"]) == 2 and "first batch" in r["reason"]
        epoch_s = [12 / rate for rate in r["repeats"]]  # the whole split (12 pairs) per repeat
        assert all(0 < f <= e for f, e in zip(r["first_batch_s"], epoch_s))
    plot(report, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").stat().st_size > 0


@pytest.mark.slow
def test_a_split_that_stays_cached_is_reported_not_cold_instead_of_timed(tiny):
    """Pages another process (here: this one) maps and has read survive eviction: no repeat is cold, and the rows
    say so instead of reporting a rate far above the disk's."""
    from pairload.read.shards import ShardDataset

    files = ShardDataset(str(tiny / "shards"), "train").files
    held = [np.memmap(f, dtype=np.uint8, mode="r") for f in files]
    assert all(int(m.sum()) >= 0 for m in held)  # every page read, and mapped until the end
    cfg = BenchConfig(shards=str(tiny / "shards"), raw=None, loaders=("ram", "wds"), crop=32, batch_size=4, workers=1,
                      seconds=0.4, repeats=2, device="cpu", cold=True)
    report = run_bench(cfg)
    del held
    assert report["limits"]["disk"]["resident_before"] > 0.9
    cold = [r for r in report["results"] if r["cold"]]
    assert [r["status"] for r in cold] == ["invalid", "invalid"]
    assert all(r["reason"].startswith("not cold: every repeat found the split in the page cache") for r in cold)
    assert all(len(r["invalid"]) == 2 and not r["repeats"] and r["pairs_per_s"] == 0 for r in cold)


def test_evict_really_empties_the_page_cache_of_a_shard(tiny):
    import ctypes
    import mmap
    import os

    from pairload.bench.loaders import evict

    shard = sorted((tiny / "shards").glob("train-*.tar"))[0]
    shard.read_bytes()  # now cached
    evict([shard])
    size = shard.stat().st_size
    mm = np.memmap(shard, dtype=np.uint8, mode="r")  # mapping does not read: mincore tells what is cached
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    libc = ctypes.CDLL(None, use_errno=True)
    ok = libc.mincore(ctypes.c_void_p(mm.ctypes.data), ctypes.c_size_t(size), vec)
    assert ok == 0, os.strerror(ctypes.get_errno())
    resident = sum(v & 1 for v in vec)
    del mm
    assert resident < pages / 2, f"{resident} of {pages} pages still cached"
    from pairload.bench.bounds import resident_fraction  # the bench's own check agrees with this one

    assert resident_fraction([shard]) == pytest.approx(resident / pages)
    shard.read_bytes()
    assert resident_fraction([shard]) == 1.0


@pytest.mark.slow
def test_ranks_run_concurrent_loaders_and_report_the_node_total(tmp_path):
    from pairload.bench.loaders import BenchConfig, run_bench

    make_raw(tmp_path / "raw", 16, size=(64, 96))
    pack(tmp_path / "raw", tmp_path / "s", PackOptions(workers=1))
    cfg = BenchConfig(shards=str(tmp_path / "s"), loaders=("ram", "naive-pil"), crop=32, batch_size=4, workers=1,
                      seconds=0.6, repeats=1, device="cpu", ranks=2, raw=str(tmp_path / "raw"))
    ram, pil = run_bench(cfg)["results"]
    assert ram["status"] == "ok" and ram["ranks"] == 2 and len(ram["per_rank"]) == 2
    assert ram["pairs_per_s"] == pytest.approx(sum(ram["per_rank"])) and min(ram["per_rank"]) > 0
    assert pil["status"] == "skipped" and "baseline" in pil["reason"]
    with pytest.raises(ConfigError, match="--ranks measures warm loaders alone"):
        BenchConfig(shards="x", ranks=2, cold=True)


def test_chart_values_sit_past_their_error_bars_and_toy_sizes_are_named(tmp_path, monkeypatch):
    import matplotlib.axes

    from pairload.demo import CPU, GPU, sizes_note

    report = {"device": "cpu", "cpu_count": 2, "date": "2026-11-23",
              "config": {"crop": 64, "batch_size": 8, "workers": 2},
              "limits": {"h2d": {"kind": "host copy", "pairs_per_s": 1e5}, "copy": {"pairs_per_s_per_core": 5e3}},
              "results": [{"loader": "ram", "status": "ok", "pairs_per_s": 1000.0, "pairs_per_s_min": 800.0,
                           "pairs_per_s_max": 1500.0}]}
    texts, titles = [], []
    real_text, real_title = matplotlib.axes.Axes.text, matplotlib.axes.Axes.set_title
    monkeypatch.setattr(matplotlib.axes.Axes, "text", lambda ax, x, y, s, **kw: (texts.append((x, s)),
                                                                                real_text(ax, x, y, s, **kw))[1])
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title", lambda ax, t, **kw: (titles.append(t),
                                                                               real_title(ax, t, **kw))[1])
    plot(report, tmp_path / "chart.png", note=sizes_note(CPU))
    (x, label), = texts
    assert label == "1,000" and x > 1500.0  # past the end of the error bar, not on it
    title = " ".join(titles[0].split())  # the note is wrapped to the chart's width
    assert "toy sizes (crop 64, batch 8" in title and "rank differently than at crop 256" in title
    assert max(len(line) for line in titles[0].splitlines()) <= 110
    assert "toy" not in sizes_note(GPU)


def test_every_entry_is_built_from_its_row_of_the_table(tiny):
    import torch

    from pairload.bench.baselines import TorchBaseline
    from pairload.bench.entries import ENTRIES, Entry, Skip, build_loader, cut_path
    from pairload.bench.rows import BASELINES

    assert list(ENTRIES) and set(ENTRIES) == set(ALL)
    assert {n for n, e in ENTRIES.items() if e.kind is None} == set(BASELINES)
    cfg = BenchConfig(shards=str(tiny / "shards"), raw=str(tiny / "raw"), crop=32, batch_size=4, workers=12,
                      device="cpu")
    cpu = torch.device("cpu")
    with build_loader("ram-resident", cfg, cpu, 12) as resident, build_loader("ram-workers", cfg, cpu, 12) as ram:
        assert resident.resident and not ram.resident and ram.zero_copy is False
        assert ram.opts.num_workers == 8 and cut_path("ram-workers", ram).startswith("workers")
    with build_loader("wds", cfg, cpu, 12) as wds:
        assert wds.opts.num_workers == 12 and cut_path("wds", wds) == "workers"  # a CPU: no reason to give
    with build_loader("wds-workers", cfg, cpu, 12) as wds:
        assert wds.path == "workers" and cut_path("wds-workers", wds) == "workers"
    baseline = build_loader("cv2-disk", cfg, cpu, 0)
    assert isinstance(baseline, TorchBaseline)
    with pytest.raises(Skip, match="needs --raw"):
        build_loader("naive-pil", BenchConfig(shards=cfg.shards, device="cpu"), cpu, 1)
    with pytest.raises(Skip, match="no rank share"):
        build_loader("naive-pil", cfg, cpu, 1, rank=1, world_size=2)
    with pytest.raises(ConfigError, match="bench entry kind 'fast': expected one of ram"):
        Entry("fast")


def test_samples_count_the_workers_the_loaders_name(tiny):
    import os

    import psutil
    import torch

    from pairload.bench.entries import build_loader
    from pairload.bench.sampling import processes_of

    cfg = BenchConfig(shards=str(tiny / "shards"), raw=str(tiny / "raw"), crop=32, batch_size=4, workers=1,
                      device="cpu")
    for name in ("ram", "cv2-disk"):
        loader = build_loader(name, cfg, torch.device("cpu"), 1)
        try:
            loader.start_workers()
            next(iter(loader))
            me, *workers = processes_of(loader)
            assert me == os.getpid() and len(workers) == 1, (name, workers)
            assert psutil.Process(workers[0]).ppid() == os.getpid()
        finally:
            loader.close()
        assert processes_of(loader) == [os.getpid()], name


def test_an_encoded_pack_reports_its_bytes_and_decode_rate(tmp_path):
    make_raw(tmp_path / "raw", 6, size=(48, 64), ext=".jpg")
    pack(tmp_path / "raw", tmp_path / "shards", PackOptions(workers=1, store="encoded"))
    cfg = BenchConfig(shards=str(tmp_path / "shards"), loaders=("ram",), crop=32, batch_size=2, workers=1,
                      seconds=0.2, repeats=1, device="cpu")
    report = run_bench(cfg)
    stored = report["limits"]["stored"]
    ds = ShardDataset(tmp_path / "shards", "train")
    assert stored["store"] == "encoded" and stored["bytes_per_pair"] == sum(ds.shard_bytes) / len(ds)
    assert stored["cpu_images_per_s_per_core"] > 0 and stored["gpu_images_per_s"] is None  # no GPU asked for
    assert report["results"][0]["status"] == "ok"
