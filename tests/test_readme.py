"""Every Python code block of the README runs as written, in a folder laid out as the README assumes (`shards/`,
`shards/lol`, `shards/synth`), each in a fresh interpreter with no main guard."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import has_module, make_raw

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from pairload.pack import PackOptions, pack

    root = tmp_path_factory.mktemp("readme")
    make_raw(root / "raw", 36, split="train", size=(260, 264))  # crop 256, batch 32
    pack(root / "raw", root / "shards", PackOptions(workers=1))
    for name in ("lol", "synth"):
        shutil.copytree(root / "shards", root / "shards" / name, ignore=shutil.ignore_patterns("lol", "synth"))
    if has_module("rawpy") and has_module("tifffile"):  # shards/sid: 8 SID-style pairs, crops of 512 fit
        from test_pack_camera import sid_tree

        sid_tree(root / "SID", sensor=(1040, 1040))
        pack(root / "SID" / "Sony", root / "shards" / "sid", PackOptions(workers=2))  # one split: train
    return root


def test_the_readme_has_its_examples():
    assert len(BLOCKS) >= 4 and any("make_loader" in b for b in BLOCKS)


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_every_readme_python_block_runs_as_written(workdir, number):
    block = BLOCKS[number]
    if "nvidia.dali" in block and not has_module("nvidia.dali"):
        pytest.skip("needs nvidia-dali")
    if "shards/sid" in block and not (workdir / "shards" / "sid").is_dir():
        pytest.skip("needs rawpy and tifffile (pip install 'pairload[raw]' tifffile)")
    res = subprocess.run([sys.executable, "-c", block], cwd=workdir, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"README block {number} failed:\n{block}\n{res.stderr[-3000:]}"
