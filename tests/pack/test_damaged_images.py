"""A damaged or mislabelled image stops `pairload pack` with one line on stderr, naming the file (#60): what libpng,
libtiff or OpenCV's logger write to the process's stderr while the file fails to decode never shows, with one worker
process or several, in pair packs and targets-only packs. Real files in tmp_path: PNG (8 and 16 bits), JPEG and TIFF
cut in half, an empty file, and text under a .png name."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from conftest import pair_pixels
from pairload.cli import main
from pairload.folders.decode import quiet_stderr

TRUNCATED = "does not decode (truncated or not an image); replace or remove it"


def write(path: Path, rgb: np.ndarray) -> None:
    """`rgb` as the file its extension names; `.tif` through Pillow, which puts the header before the pixels (so the
    header still reads once the file is cut)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".tif":
        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, format="TIFF")
        path.write_bytes(buf.getvalue())
    else:
        assert cv2.imwrite(str(path), np.ascontiguousarray(rgb[..., ::-1]))


def cut(keep: float):
    """Cut a file to its first `keep` fraction."""
    def damage(path: Path) -> None:
        data = path.read_bytes()
        path.write_bytes(data[:int(len(data) * keep)])
    return damage


# (extension, bits, how file 00001 of low/ is damaged, the refusal after its path)
DAMAGED = {
    "truncated PNG": (".png", 8, cut(0.5), TRUNCATED),
    "truncated 16-bit PNG": (".png", 16, cut(0.5), TRUNCATED),
    "truncated JPEG": (".jpg", 8, cut(0.8), TRUNCATED),  # past its tables: its header reads, its pixels do not
    "JPEG cut in its header": (".jpg", 8, cut(0.5), "cannot read the image header (Truncated File Read); replace or "
                                                    "remove it"),
    "truncated TIFF": (".tif", 8, cut(0.5), TRUNCATED),
    "empty file": (".png", 8, lambda p: p.write_bytes(b""), "file is empty (0 bytes); replace or remove it"),
    "text named .png": (".png", 8, lambda p: p.write_text("not an image\n"),
                        "not a readable image (expected PNG, JPEG, BMP, TIFF or WebP); replace or remove it"),
}


def damaged_tree(root: Path, kind: str) -> tuple[Path, str]:
    """root/{low,high}/ with three 48x64 pairs of `kind`'s format, low/00001 damaged; (that file, its refusal)."""
    ext, bits, damage, message = DAMAGED[kind]
    for i in range(3):
        for side, rgb in zip(("low", "high"), pair_pixels(i, 48, 64)):
            write(root / side / f"{i:05d}{ext}", rgb.astype(np.uint16) * 257 if bits == 16 else rgb)
    bad = root / "low" / f"00001{ext}"
    damage(bad)
    return bad, message


def pack_args(root: Path, out: Path, targets_only: bool, workers: int) -> list[str]:
    source = [str(root / "low"), str(out), "--targets-only"] if targets_only else [str(root), str(out)]
    return ["pack", *source, "--workers", str(workers)]


@pytest.mark.parametrize("kind, targets_only, workers", [
    ("truncated PNG", False, 1), ("truncated PNG", True, 1),  # as reported (#60)
    ("truncated 16-bit PNG", True, 2),  # libpng wrote its error from the worker processes too
])
def test_the_real_cli_prints_one_line(tmp_path, kind, targets_only, workers):
    bad, message = damaged_tree(tmp_path / "raw", kind)
    done = subprocess.run([sys.executable, "-m", "pairload.cli", *pack_args(tmp_path / "raw", tmp_path / "out",
                                                                            targets_only, workers)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr == f"error: {bad}: {message}\n"
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("targets_only", [False, True], ids=["pairs", "targets-only"])
@pytest.mark.parametrize("kind", list(DAMAGED))
def test_every_damaged_image_is_one_line_on_stderr(tmp_path, capfd, kind, targets_only):
    """capfd reads file descriptor 2 itself, where the C libraries write."""
    bad, message = damaged_tree(tmp_path / "raw", kind)
    assert main(pack_args(tmp_path / "raw", tmp_path / "out", targets_only, 1)) == 1
    assert capfd.readouterr().err == f"error: {bad}: {message}\n"


def test_stderr_is_quiet_only_while_a_decoder_runs(capfd):
    """Nested (as threads share it), fd 2 comes back when the outermost one ends, and what Python held for it before
    is written first."""
    sys.stderr.write("before ")
    with quiet_stderr:
        os.write(2, b"libpng warning: chatter\n")
        with quiet_stderr:
            os.write(2, b"more chatter\n")
        os.write(2, b"still quiet\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "before after\n"
