import json
import subprocess
import sys

import pytest

pytest.importorskip("skimage")


def test_demo_runs_the_main_job_end_to_end(tmp_path):
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "demo", str(tmp_path / "demo"), "--device", "cpu"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    demo = tmp_path / "demo"
    summary = json.loads((demo / "demo.json").read_text())
    assert summary["metrics"]["val_samples"] == 8 and summary["metrics"]["epoch"] == 1
    bench = json.loads((demo / "bench.json").read_text())
    assert {r["loader"] for r in bench["results"] if r["status"] == "ok"} >= {"ram", "wds", "naive-pil", "cv2-disk"}
    assert (demo / "bench.png").exists() and (demo / "run" / "last.pt").exists()
    assert (demo / "shards" / "manifest.json").exists()
    assert "done in" in res.stdout and "loader benchmark" in res.stdout
