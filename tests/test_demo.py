import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("skimage")


@pytest.mark.slow
def test_demo_runs_the_main_job_end_to_end(tmp_path):
    # a long path, no COLUMNS, output piped: nothing may depend on how a terminal would wrap it
    demo = tmp_path / ("a-rather-long-folder-name-" * 4) / "demo"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "demo", str(demo), "--device", "cpu"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((demo / "demo.json").read_text())
    assert summary["metrics"]["val_samples"] == 8 and summary["metrics"]["epoch"] == 1
    bench = json.loads((demo / "bench.json").read_text())
    rate = {r["loader"]: r["pairs_per_s"] for r in bench["results"] if r["status"] == "ok"}
    assert set(rate) >= {"ram", "wds", "naive-pil", "cv2-disk"}
    assert rate["ram"] > rate["naive-pil"]  # the loader beats the baseline it exists to replace, even on a CPU
    assert (demo / "bench.png").exists() and (demo / "run" / "last.pt").exists()
    assert (demo / "shards" / "manifest.json").exists()
    assert f"loader benchmark: {demo / 'bench.png'}" in res.stdout and "done in" in res.stdout
    assert "degrade: make_loader(..., degrade='lowlight') made the input of pair " in res.stdout


def test_demo_refuses_an_unusable_device_before_doing_any_work(tmp_path):
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "demo", str(tmp_path / "demo"), "--device", "gpu"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip() == "error: device 'gpu': expected auto, cpu, cuda or cuda:K"
    assert not (tmp_path / "demo").exists()
