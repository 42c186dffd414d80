"""Every Python code block of the README and of the documentation site (`docs/*.md`) runs as written, in a folder
laid out as they assume (`raw/`, `shards/`, `shards/lol`, `shards/made`, `shards/sid`, `shards/video` (frames
packed as sequences), `targets/`: the training
targets packed targets-only; `LOLdataset/`: LOL-v1 as downloaded, fewer and synthetic pairs, which the tutorial packs
into `shards/lol`), each in a fresh interpreter
with no main guard; so do their `pairload verify`/`pairload info` lines whose folder exists there."""

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import has_module, make_raw

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def fenced(lang: str) -> list[tuple[str, str]]:
    """(where, text) of every ```lang block: where is "README.md:2" (the page and the block's number on it)."""
    out = []
    for page in PAGES:
        blocks = re.findall(rf"^```{lang}\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)
        out += [(f"{page.relative_to(ROOT).as_posix()}:{n}", block) for n, block in enumerate(blocks)]
    return out


BLOCKS = fenced("python")
# a `pairload verify DIR` or `pairload info DIR` in a shell block: cheap, and its inputs may exist in the folder
COMMANDS = sorted({part.strip() for _, block in fenced("bash") for line in block.splitlines()
                   for part in line.split("#")[0].split("&&")
                   if re.fullmatch(r"pairload (verify|info) [\w./-]+", part.strip())})


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from pairload.pack import PackOptions, pack

    root = tmp_path_factory.mktemp("readme")
    make_raw(root / "raw", 36, split="train", size=(260, 264))  # crop 256, batch 32
    pack(root / "raw", root / "shards", PackOptions(workers=1))
    shutil.copytree(root / "shards", root / "shards" / "made", ignore=shutil.ignore_patterns("lol", "made"))
    make_raw(root / "LOLdataset", 40, split="our485", size=(400, 600))  # LOL-v1's folders and image size
    make_raw(root / "LOLdataset", 4, split="eval15", start=200, size=(400, 600))
    pack(root / "LOLdataset", root / "shards" / "lol", PackOptions(workers=1))  # the tutorial's `pairload pack`
    pack(root / "raw" / "train" / "high", root / "targets", PackOptions(workers=1, targets_only=True))
    from clipdata import make_video_raw

    make_video_raw(root / "video", [8, 7, 6], size=(72, 80))  # shards/video: three sequences, clips of 5 fit
    pack(root / "video", root / "shards" / "video", PackOptions(workers=1, sequences=True))
    if has_module("rawpy") and has_module("tifffile"):  # shards/sid: 8 SID-style pairs, crops of 512 fit
        from test_pack_camera import sid_tree

        sid_tree(root / "SID", sensor=(1040, 1040))
        pack(root / "SID" / "Sony", root / "shards" / "sid", PackOptions(workers=2))  # one split: train
    return root


def test_the_readme_and_the_docs_have_their_examples():
    readme = [b for where, b in BLOCKS if where.startswith("README.md:")]
    assert readme and all("make_loader" in b for b in readme)  # pack → load → train, in Python
    docs = [b for where, b in BLOCKS if where.startswith("docs/")]
    assert len(docs) >= 5 and any("paired_inputs" in b for b in docs) and any("load_state_dict" in b for b in docs)
    assert "pairload verify shards/" in COMMANDS


@pytest.mark.parametrize("where, block", BLOCKS, ids=[where for where, _ in BLOCKS])
def test_every_python_block_runs_as_written(workdir, where, block):
    if "nvidia.dali" in block and not has_module("nvidia.dali"):
        pytest.skip("needs nvidia-dali")
    if "shards/sid" in block and not (workdir / "shards" / "sid").is_dir():
        pytest.skip("needs rawpy and tifffile (pip install 'pairload[raw]' tifffile)")
    res = subprocess.run([sys.executable, "-c", block], cwd=workdir, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{where} failed:\n{block}\n{res.stderr[-3000:]}"


@pytest.mark.parametrize("command", COMMANDS)
def test_shell_lines_whose_folder_exists_run(workdir, command):
    argv = shlex.split(command)
    if not (workdir / argv[2]).exists():
        pytest.skip(f"{argv[2]} is not in the prepared folder")
    res = subprocess.run([sys.executable, "-m", "pairload.cli", *argv[1:]], cwd=workdir, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, f"{command} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
