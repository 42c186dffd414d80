"""`python -m pairload.basicsr` where the repository's torchvision does not import beside the installed torch (a
CUDA build of torchvision beside a CPU torch, or one made for another torch): one line naming both versions and the
install command, instead of their 30-line traceback.

The torchvision here is a stand-in on PYTHONPATH that fails at import as a CUDA torchvision 0.28.0 does beside torch
2.13.0+cpu (its `_meta_registrations` raising `operator torchvision::nms does not exist`), with the metadata of that
release (`Requires-Dist: torch (==2.13.0)`); the repository is `basicsr_repo`'s, whose arch file imports it."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from pairload.basicsr.versions import PYTORCH_INDEX, torchvision_import_failed

from basicsr_repo import options, write_repo

ROOT = Path(__file__).resolve().parents[1]
NMS = "operator torchvision::nms does not exist"


def stand_in_torchvision(site: Path) -> Path:
    """A torchvision 0.28.0 whose import fails in its top level, as the CUDA build's does beside a CPU torch."""
    package = site / "torchvision"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from torchvision import _meta_registrations  # noqa: F401\n")
    (package / "_meta_registrations.py").write_text(f"raise RuntimeError({NMS!r})\n")
    info = site / "torchvision-0.28.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\nRequires-Dist: numpy\n"
                                   "Requires-Dist: torch (==2.13.0)\n")
    return site


def test_a_torchvision_that_does_not_import_beside_torch_is_one_line(tmp_path):
    repo = write_repo(tmp_path / "repo", options(tmp_path / "raw"))
    (repo / "basicsr/models/archs").mkdir()
    (repo / "basicsr/models/archs/__init__.py").write_text("")
    (repo / "basicsr/models/archs/tiny_arch.py").write_text(
        "from torchvision.transforms.functional import normalize  # noqa: F401\n")
    models = repo / "basicsr/models/__init__.py"
    models.write_text("from basicsr.models.archs import tiny_arch  # noqa: F401\n" + models.read_text())
    site = stand_in_torchvision(tmp_path / "site")
    path = os.pathsep.join([str(site), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-m", "pairload.basicsr", "-opt", "Options/Tiny.yml", "--shards", "s"],
                          cwd=repo, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": path})
    torch = metadata.version("torch")
    label = torch.partition("+")[2]
    index = f" --index-url {PYTORCH_INDEX}/{label}" if label else ""
    assert done.returncode == 1 and done.stderr == (
        f"pairload.basicsr: {repo.resolve()}/basicsr/train.py: importing torchvision failed: torchvision 0.28.0 (made "
        f"for torch==2.13.0) does not import beside torch {torch} (RuntimeError: {NMS}); torchvision must be the "
        f"build made for this torch, from the same index: pip uninstall -y torchvision && pip install "
        f"'torch=={torch}' torchvision{index} (docs/basicsr.md, \"CPU or a pinned torch\")\n")


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - to give it a traceback
        return caught


@pytest.mark.parametrize("exc, expected", [
    (ModuleNotFoundError("No module named 'torchvision'", name="torchvision"), True),
    (ModuleNotFoundError("No module named 'torchvision.ops'", name="torchvision.ops"), True),
    (ModuleNotFoundError("No module named 'einops'", name="einops"), False),
    (RuntimeError(NMS), False),  # raised here, not by torchvision's import: their own error, theirs to show
])
def test_only_failures_of_torchvisions_import_are_taken_for_one(exc, expected):
    assert torchvision_import_failed(raised(exc)) is expected
