"""JPEG files whose three components are R, G and B, not YCbCr (Pillow's `keep_rgb`, some editors' exports): libjpeg
decodes them as RGB from their markers, GPU decoders may take them for YCbCr, so `pack --store encoded` keeps their
pixels as lossless tiles rather than their bytes, names them in its report, and every reader gives what the decoded
pack stores. The markers are read as libjpeg reads them: a JFIF marker says YCbCr, else an Adobe marker's transform,
else the components' identifiers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from pairload import make_loader, open_shards
from pairload.format.imageformats import jpeg_frame, jpeg_refusal
from pairload.pack.writer import PackOptions, pack

H, W = 48, 64


def picture(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return cv2.resize(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8), (W, H), interpolation=cv2.INTER_CUBIC)


def pillow_jpeg(rgb: np.ndarray, **kw) -> bytes:
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, "JPEG", quality=92, **kw)
    return out.getvalue()


def without_jfif_ids(data: bytes, ids: bytes) -> bytes:
    """OpenCV's JPEG of the same picture without its JFIF marker, its components renamed `ids`."""
    assert data[2:4] == b"\xff\xe0" and data[6:11] == b"JFIF\0"
    data = data[:2] + data[4 + (data[4] << 8 | data[5]):]
    sof, sos = data.index(b"\xff\xc0"), data.index(b"\xff\xda")
    out = bytearray(data)
    for k in range(3):  # the frame's components, and the scan's selectors of them
        out[sof + 10 + 3 * k] = ids[k]
        out[sos + 5 + 2 * k] = ids[k]
    return bytes(out)


def test_the_components_colour_is_read_as_libjpeg_reads_it():
    img = picture(0)
    ycc = cv2.imencode(".jpg", img[..., ::-1])[1].tobytes()  # JFIF, components 1, 2, 3
    cases = {"adobe-rgb": pillow_jpeg(img, keep_rgb=True), "pillow": pillow_jpeg(img), "opencv": ycc,
             "ids-rgb": without_jfif_ids(ycc, b"RGB"), "ids-123": without_jfif_ids(ycc, b"\1\2\3")}
    rgb = {name: jpeg_frame(data).rgb for name, data in cases.items()}
    assert rgb == {"adobe-rgb": True, "pillow": False, "opencv": False, "ids-rgb": True, "ids-123": False}
    ycbcr = cv2.cvtColor(img, cv2.COLOR_RGB2YCrCb)[..., [0, 2, 1]]
    for name, data in cases.items():  # and libjpeg decodes so: "ids-rgb" holds YCbCr, which it gives as R, G, B
        assert jpeg_refusal(data, (H, W)) == ("RGB-coded JPEG" if rgb[name] else None)
        decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)[..., ::-1]
        assert np.abs(decoded.astype(int) - (ycbcr if name == "ids-rgb" else img)).mean() < 3, name


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rgbjpeg") / "photos"
    root.mkdir()
    for i in range(3):
        (root / f"{i}.jpg").write_bytes(pillow_jpeg(picture(i)))
    (root / "rgb.jpg").write_bytes(pillow_jpeg(picture(9), keep_rgb=True))
    return root


def test_an_rgb_coded_jpeg_is_stored_as_tiles_and_read_as_the_decoded_pack_stores_it(photos, tmp_path):
    pack(photos, tmp_path / "enc", PackOptions(workers=1, targets_only=True, store="encoded"))
    pack(photos, tmp_path / "dec", PackOptions(workers=1, targets_only=True))
    assert json.loads((tmp_path / "enc" / "manifest.json").read_text())["report"]["stored_tiles"] == {
        "RGB-coded JPEG": ["rgb.jpg"]}
    a, b = open_shards(tmp_path / "enc"), open_shards(tmp_path / "dec")
    assert a.keys == b.keys
    assert all(np.array_equal(x, y) for i in range(len(a)) for x, y in zip(a.arrays(i), b.arrays(i)))
    with make_loader("ram", tmp_path / "enc", batch_size=2, crop=32, seed=1, degrade="lowlight") as ea, \
            make_loader("ram", tmp_path / "dec", batch_size=2, crop=32, seed=1, degrade="lowlight") as da:
        for x, y in zip(ea, da, strict=True):
            assert x.keys == y.keys and np.array_equal(x.high.numpy(), y.high.numpy())
            assert np.array_equal(x.low.numpy(), y.low.numpy())  # the same degradation of the same targets
