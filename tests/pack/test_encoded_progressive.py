"""`pack --store encoded` keeps a progressive JPEG as its bytes (every decoder reads it, to the pixels a decoded pack
stores) and names it in its report and manifest: a GPU's hardware JPEG decoder takes baseline files only, so on a GPU
such files are decoded by nvImageCodec's slower CPU-assisted decoder, and a user should know which they are."""

from __future__ import annotations

import json

import cv2
import numpy as np

from pairload import open_shards
from pairload.format.imageformats import jpeg_frame
from pairload.pack import PackOptions, pack


def photo(i: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    base = cv2.resize(rng.integers(0, 256, (8, 12, 3), dtype=np.uint8), (96, 64), interpolation=cv2.INTER_CUBIC)
    return np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)


def test_progressive_jpegs_are_kept_as_they_are_and_named(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(5):
        progressive = i >= 3
        name = f"{'p' if progressive else 'b'}{i}.jpg"
        flags = [cv2.IMWRITE_JPEG_QUALITY, 90] + ([cv2.IMWRITE_JPEG_PROGRESSIVE, 1] if progressive else [])
        assert cv2.imwrite(str(folder / name), photo(i), flags)
        assert jpeg_frame((folder / name).read_bytes()).progressive == progressive
    options = PackOptions(workers=1, store="encoded", targets_only=True)
    report = pack(folder, tmp_path / "enc", options)
    kept = next(line for line in report.lines(options) if line.startswith("kept "))
    assert kept.startswith("kept 5 JPEG files as they are (2 progressive (p3.jpg, p4.jpg): a GPU's hardware JPEG "
                           "decoder takes baseline files only"), kept
    assert "`jpegtran -copy all IN > OUT` rewrites one as a baseline file, losslessly" in kept
    doc = json.loads((tmp_path / "enc" / "manifest.json").read_text())["report"]
    assert doc["kept_jpeg"] == 5 and doc["kept_jpeg_notes"] == {"progressive": ["p3.jpg", "p4.jpg"]}
    ds = open_shards(tmp_path / "enc")
    for i in range(len(ds)):
        member = ds.stored_member(i, 1)
        source = folder / f"{ds.keys[i]}.jpg"
        assert member.format == "jpeg" and bytes(member.data) == source.read_bytes()  # byte for byte
        want = cv2.cvtColor(cv2.imread(str(source)), cv2.COLOR_BGR2RGB)
        assert np.array_equal(ds.arrays(i)[1], want)  # read as a decoded pack stores it
    for p in folder.glob("p*.jpg"):
        p.unlink()
    plain = pack(folder, tmp_path / "baseline", options)
    assert "kept 3 JPEG files as they are" in plain.lines(options)
    assert "kept_jpeg_notes" not in json.loads((tmp_path / "baseline" / "manifest.json").read_text())["report"]


def test_each_kept_jpeg_is_read_and_decoded_once(tmp_path, monkeypatch):
    """The bytes kept are the bytes pack decoded (read once), so they are not decoded a second time to be checked: an
    encoded pack of a photo collection costs a decode a photo, as a decoded pack does."""
    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(4):
        assert cv2.imwrite(str(folder / f"b{i}.jpg"), photo(i), [cv2.IMWRITE_JPEG_QUALITY, 90])
    decodes = []
    real = cv2.imdecode
    monkeypatch.setattr(cv2, "imdecode", lambda *a: decodes.append(1) or real(*a))
    pack(folder, tmp_path / "enc", PackOptions(workers=1, store="encoded", targets_only=True))
    assert len(decodes) == 4
    ds = open_shards(tmp_path / "enc")
    assert all(bytes(ds.stored_member(i, 1).data) == (folder / f"{ds.keys[i]}.jpg").read_bytes() for i in range(4))
