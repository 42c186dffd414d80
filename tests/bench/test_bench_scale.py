"""The scale benchmark (`benchlib.scale`, run by benchmarks/bench_scale.py): a child's peak memory is its own;
on the smallest path (200 synthetic pairs, one part, the loader on 1 and 2 ranks, real child processes) the report's
numbers agree with each other and with N, a failing child is reported by its stderr, and later commands add to it."""

import json
import shutil
import sys

import pytest

from benchlib.scale import NOT_SUPPORTED, ScaleConfig, run, run_one
from pairload.errors import ConfigError

N = 200
MB = 2**20


def test_a_childs_peak_memory_is_its_own_not_the_parents():
    # ru_maxrss counts what a process held before exec: a child forked straight from this process would report
    # this process's 300 MB of ballast as its own peak
    ballast = b"x" * (300 * MB)
    row, _ = run_one([sys.executable, "-c", "import time; x = b'y' * (60 * 2**20); time.sleep(0.3)"], 60)
    assert row["status"] == "ok" and 60 * MB < row["max_rss_bytes"] < 200 * MB
    assert 60 * MB < row["peak_rss_bytes"] <= row["max_rss_bytes"] * 1.05  # sampled while it slept
    assert row["workers"] == 0 and row["wall_s"] >= 0.3 and len(ballast) == 300 * MB
    row, _ = run_one([sys.executable, "-c", "import sys; sys.stderr.write('first\\nlast words\\n'); sys.exit(3)"], 60)
    assert row["status"] == "failed" and row["reason"] == "exit code 3: first\nlast words"


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    cfg = ScaleConfig(sizes=(N,), work=root / "work", parts=(1, 2), ranks=(1, 2), workers=2, out=root / "report.json",
                      plot=root / "report.png")
    lines = []
    run(cfg, log=lines.append)
    return cfg, json.loads(cfg.out.read_text(encoding="utf-8")), lines


@pytest.mark.slow
def test_every_step_is_measured_and_its_numbers_agree_with_n(measured):
    cfg, report, lines = measured
    size = report["sizes"][str(N)]
    assert report["machine"]["cpu_count"] >= 1 and report["machine"]["memory_bytes"] > 0
    assert report["machine"]["disk"]["total_bytes"] > 0 and report["cli_start"]["status"] == "ok"
    assert size["synth"]["status"] == "ok" and size["synth"]["reused"] is False and size["synth"]["wall_s"] > 0
    one = size["pack"]["1"]
    assert one["status"] == "ok" and one["wall_s"] > 0 and one["shards"] >= 1 and one["shard_bytes"] > 0
    assert one["peak_rss_bytes"] > 0 and one["max_rss_bytes"] > 0 and one["workers"] >= 2  # a pool of 2
    assert one["peak_worker_rss_bytes"] > 0 and one["peak_tree_rss_bytes"] >= one["peak_rss_bytes"]
    two = size["pack"]["2"]  # before `pack --part` exists: skipped, saying so; after: the same shards as one part
    if report["pack_features"]["parts"]:
        assert two["status"] == "ok" and len(two["parts"]) == 2 and two["same_shards_as_p1"] is True
    else:
        assert two == {"status": "skipped", "reason": NOT_SUPPORTED, "measured_at": two["measured_at"]}
    assert size["verify"]["status"] == "ok" and size["verify"]["samples"] == N and size["verify"]["wall_s"] > 0
    index = size["index"]
    assert index["samples"] == N and "manifest.json" in index["files"]
    assert index["index_bytes"] == sum(index["files"].values()) > 0
    assert index["index_bytes_per_pair"] == pytest.approx(index["index_bytes"] / N, abs=0.01)
    for ranks in (1, 2):
        loader = size["loader"][str(ranks)]
        assert loader["status"] == "ok" and len(loader["per_rank"]) == ranks
        assert [r["rank"] for r in loader["per_rank"]] == list(range(ranks))
        for r in loader["per_rank"]:
            assert r["samples"] == N and r["batch_rows"] == cfg.batch_size and r["make_loader_s"] > 0
            assert r["batches"] == N // ranks // cfg.batch_size  # each rank its share, whole batches only
            assert r["private_start"] > 0 and r["uss_bytes"] > 0 and r["pss_bytes"] > 0
        assert loader["make_loader_s"] == max(r["make_loader_s"] for r in loader["per_rank"])
        assert loader["loader_private_bytes_per_pair"] == pytest.approx(loader["loader_private_bytes"] / N, abs=0.01)
    assert set(report["growth"]) >= {"pack p1 wall s", "index bytes/pair", "make_loader r2 s"}
    assert cfg.plot.stat().st_size > 10_000
    assert any(line.startswith(f"[{N} pairs] pack p1: ") for line in lines)


@pytest.mark.slow
def test_a_later_command_adds_to_the_report_and_a_failing_child_is_reported_by_its_stderr(measured):
    cfg, first, _ = measured
    shard = sorted(cfg.shards(N, 1).glob("*.tar"))[0]
    saved = shard.read_bytes()
    data = bytearray(saved)
    data[len(data) // 2] ^= 0xFF
    try:
        shard.write_bytes(bytes(data))
        again = ScaleConfig(sizes=(N,), work=cfg.work, parts=(1, 2), ranks=(1, 2), workers=2, out=cfg.out,
                            steps=("synth", "verify"))
        report = run(again, log=lambda line: None)
    finally:
        shard.write_bytes(saved)
    size = report["sizes"][str(N)]
    assert size["synth"]["status"] == "ok" and size["synth"]["reused"] is True  # raw-200 is complete: not made again
    verify = size["verify"]
    assert verify["status"] == "failed" and verify["reason"].startswith("exit code 1: error: ")
    assert shard.name in verify["reason"] and "Traceback" not in verify["reason"]
    assert size["pack"] == first["sizes"][str(N)]["pack"] and size["loader"] == first["sizes"][str(N)]["loader"]
    assert json.loads(cfg.out.read_text(encoding="utf-8"))["sizes"][str(N)]["verify"] == verify  # saved, too


@pytest.mark.slow
def test_a_report_of_another_config_is_not_overwritten_and_bad_options_are_refused(measured, tmp_path):
    cfg, _, _ = measured
    out = tmp_path / "report.json"
    shutil.copy(cfg.out, out)
    other = ScaleConfig(sizes=(N,), work=cfg.work, workers=1, out=out, steps=("index",))
    with pytest.raises(ConfigError, match=r"report\.json: holds something other than a scale report of this machine "
                       r"with .*\"workers\": 1.*; pass --fresh to replace it, or choose another --out"):
        run(other)
    with pytest.raises(ConfigError, match=r"--sizes 0: expected a comma-separated list of whole numbers of 1 or more"):
        ScaleConfig(sizes=(0,), work=tmp_path)
    with pytest.raises(ConfigError, match=r"--steps pack,train: expected some of synth,pack,verify,index,loader"):
        ScaleConfig(sizes=(N,), work=tmp_path, steps=("pack", "train"))
