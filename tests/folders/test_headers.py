"""`headers.read_header` against Pillow: for real files written by Pillow and OpenCV (and hand-built ones where
neither writes the variant), the direct read gives exactly the Header Pillow's path gives, or passes the file on to
Pillow (None); `decode.probe` then answers as `decode.probe_image` does, messages included. Truncations and flipped
bytes through the headers check that the direct read never accepts a file Pillow refuses."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from pairload.errors import ImageError
from pairload.folders.decode import probe, probe_image
from pairload.folders.headers import Header, read_header

H, W = 12, 20  # never square: a swapped width and height shows


def outcome(fn, path: Path):
    """What `fn(path)` gives: its Header, or the text of what it raised."""
    try:
        return fn(path)
    except ImageError as exc:
        return f"ImageError: {exc}"
    except Exception as exc:  # noqa: BLE001 - Pillow's own crashes (a ValueError) must stay what they were
        return f"{type(exc).__name__}: {exc}"


def check(path: Path) -> Header | None:
    """The direct read agrees with Pillow (or passes the file on), and so does `probe`; returns the direct read."""
    fast, slow = read_header(path), outcome(probe_image, path)
    if fast is not None:  # Pillow opened it too, with this answer (an image OpenCV cannot decode is refused after)
        assert fast == slow or (isinstance(slow, str) and ": image is too large: " in slow), (path.name, fast, slow)
    assert outcome(probe, path) == slow, path.name
    return fast


def pixels(channels: int, dtype=np.uint8) -> np.ndarray:
    top = 65535 if dtype == np.uint16 else 255
    img = (np.arange(H * W * channels).reshape(H, W, channels) * 997 % top).astype(dtype)
    return img[..., 0] if channels == 1 else img


def pil_bytes(img: Image.Image, fmt: str, **params) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **params)
    return buf.getvalue()


def cv2_bytes(ext: str, img: np.ndarray, params=()) -> bytes:
    ok, buf = cv2.imencode(ext, img, list(params))
    assert ok
    return buf.tobytes()


# ------------------------------------------------------------------------------------------------ hand-built files

def png_chunk(kind: bytes, data: bytes, crc: int | None = None) -> bytes:
    crc = zlib.crc32(kind + data) if crc is None else crc
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def png(depth: int = 8, colour: int = 2, *, interlace: int = 0, before: tuple[bytes, ...] = (),
        ihdr_crc: int | None = None, compression: int = 0) -> bytes:
    """A PNG whose header says W×H at this depth and colour type; its IDAT is not a valid image (never decoded)."""
    ihdr = struct.pack(">IIBBBBB", W, H, depth, colour, compression, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr, ihdr_crc) + b"".join(before)
            + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + png_chunk(b"IEND", b""))


def segment(code: int, payload: bytes, length: int | None = None) -> bytes:
    return bytes([0xFF, code]) + struct.pack(">H", len(payload) + 2 if length is None else length) + payload


def after_soi(jpeg: bytes, extra: bytes) -> bytes:
    return jpeg[:2] + extra + jpeg[2:]


def sof_at(jpeg: bytes) -> int:
    """Offset of the first SOF0/SOF2 marker of a Pillow/OpenCV JPEG (their headers hold no such bytes elsewhere)."""
    return min(i for i in (jpeg.find(b"\xff\xc0"), jpeg.find(b"\xff\xc2")) if i >= 0)


def patched(data: bytes, at: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + len(new):]


def bmp(bits: int, *, compression: int = 0, height: int = H, info_size: int = 40, colors: int = 0) -> bytes:
    """A BMP file header and info header saying W×height at `bits` (pixel rows left out: never decoded)."""
    info = struct.pack("<IiiHHIIiiII", info_size, W, height, 1, bits, compression, 0, 2835, 2835, colors, 0)
    info += b"\0" * (info_size - len(info))
    palette = b"\x10\x20\x30\x00" * (colors or (1 << bits)) if bits <= 8 else b""
    offset = 14 + len(info) + len(palette)
    return b"BM" + struct.pack("<IHHI", offset + 64, 0, 0, offset) + info + palette + b"\0" * 64


def jpeg_photo(**params) -> bytes:
    return pil_bytes(Image.fromarray(pixels(3)), "JPEG", quality=90, **params)


def exif_bytes(orientation: int = 1, description: str = "") -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    if description:
        exif[0x010E] = description
    exif[0x011A] = exif[0x011B] = 300.0
    exif[0x0128] = 2
    return exif.tobytes()


def exif_segment(x_resolution_type: int) -> bytes:
    """An APP1 Exif segment whose IFD0 holds ResolutionUnit (SHORT 2) and XResolution of this type, count 1."""
    entries = [struct.pack(">HHII", 0x0128, 3, 1, 2 << 16),
               struct.pack(">HHII", 0x011A, x_resolution_type, 1, 38 if x_resolution_type == 5 else 72 << 24)]
    tiff = b"MM\0*" + struct.pack(">IH", 8, len(entries)) + b"".join(entries) + bytes(4) + struct.pack(">II", 72, 1)
    return segment(0xE1, b"Exif\0\0" + tiff)


def common_files() -> dict[str, bytes]:
    """Files the direct read must answer itself (None would be a regression to Pillow's cost)."""
    rgb, rgba, gray = pixels(3), pixels(4), pixels(1)
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", "pairload test")
    files = {
        # PNG: OpenCV's and Pillow's, every bit depth and colour type, and the chunks that come before IDAT
        "cv2-rgb8.png": cv2_bytes(".png", rgb),
        "cv2-rgb16.png": cv2_bytes(".png", pixels(3, np.uint16)),
        "cv2-rgba8.png": cv2_bytes(".png", rgba),
        "cv2-rgba16.png": cv2_bytes(".png", pixels(4, np.uint16)),
        "cv2-gray8.png": cv2_bytes(".png", gray),
        "cv2-gray16.png": cv2_bytes(".png", pixels(1, np.uint16)),
        "pil-gray-alpha.png": pil_bytes(Image.fromarray(pixels(2), "LA"), "PNG"),
        "pil-palette.png": pil_bytes(Image.fromarray(rgb).quantize(16), "PNG"),
        "pil-palette-trns.png": pil_bytes(Image.fromarray(rgb).quantize(16), "PNG", transparency=3),
        "pil-1bit.png": pil_bytes(Image.fromarray(gray).convert("1"), "PNG"),
        "pil-gray16.png": pil_bytes(Image.fromarray(pixels(1, np.uint16)), "PNG"),
        "pil-chunks.png": pil_bytes(Image.fromarray(rgb), "PNG", pnginfo=info, dpi=(300, 300),
                                    icc_profile=zlib.compress(b"profile" * 50), exif=exif_bytes(6)),
        "pil-rgb-trns.png": pil_bytes(Image.fromarray(rgb), "PNG", transparency=(1, 2, 3)),
        "interlaced.png": png(8, 2, interlace=1),
        "gray-alpha16.png": png(16, 4),
        "gray2bit.png": png(2, 0),
        "palette4bit.png": png(4, 3, before=(png_chunk(b"PLTE", b"\x10\x20\x30" * 16),)),
        "iccp-broken-stream.png": png(before=(png_chunk(b"iCCP", b"icc\0\0not zlib"),)),  # Pillow ignores it
        "gama-chrm-srgb-bkgd.png": png(before=(png_chunk(b"gAMA", struct.pack(">I", 45455)),
                                               png_chunk(b"cHRM", bytes(32)), png_chunk(b"sRGB", b"\0"),
                                               png_chunk(b"bKGD", bytes(6)), png_chunk(b"tIME", bytes(7)))),
        # JPEG: baseline, progressive, gray, CMYK, restart markers, EXIF rotations, a big APP1, a split ICC profile
        "cv2-baseline.jpg": cv2_bytes(".jpg", rgb),
        "cv2-progressive.jpg": cv2_bytes(".jpg", rgb, (cv2.IMWRITE_JPEG_PROGRESSIVE, 1)),
        "cv2-restarts.jpg": cv2_bytes(".jpg", rgb, (cv2.IMWRITE_JPEG_RST_INTERVAL, 1)),
        "cv2-gray.jpg": cv2_bytes(".jpg", gray),
        "pil-baseline.jpg": jpeg_photo(),
        "pil-progressive.jpg": jpeg_photo(progressive=True),
        "pil-gray.jpg": pil_bytes(Image.fromarray(gray), "JPEG"),
        "pil-cmyk.jpg": pil_bytes(Image.fromarray(rgb).convert("CMYK"), "JPEG"),
        "pil-exif-rot90.jpg": jpeg_photo(exif=exif_bytes(6)),
        "pil-exif-rot270.jpg": jpeg_photo(exif=exif_bytes(8)),
        "pil-big-app1.jpg": jpeg_photo(exif=exif_bytes(6, "x" * 60000)),
        "pil-icc-split.jpg": jpeg_photo(icc_profile=bytes(range(256)) * 600, comment=b"a comment", dpi=(72, 72)),
        "pil-subsampled.jpg": jpeg_photo(subsampling=2, qtables="web_high"),
        # BMP and PNM
        "cv2-24bit.bmp": cv2_bytes(".bmp", rgb),
        "pil-32bit.bmp": pil_bytes(Image.fromarray(rgba), "BMP"),
        "pil-gray.bmp": pil_bytes(Image.fromarray(gray), "BMP"),
        "pil-palette.bmp": pil_bytes(Image.fromarray(rgb).quantize(16), "BMP"),
        "pil-1bit.bmp": pil_bytes(Image.fromarray(gray).convert("1"), "BMP"),
        "top-down.bmp": bmp(24, height=-H),
        "v5-header.bmp": bmp(24, info_size=124),
        "cv2-rgb8.ppm": cv2_bytes(".ppm", rgb),
        "cv2-rgb16.ppm": cv2_bytes(".ppm", pixels(3, np.uint16)),
        "cv2-gray8.pgm": cv2_bytes(".pgm", gray),
        "cv2-gray16.pgm": cv2_bytes(".pgm", pixels(1, np.uint16)),
        "pil-1bit.pbm": pil_bytes(Image.fromarray(gray).convert("1"), "PPM"),
        "comments.pgm": f"P5\n# a comment\n{W} #width\n{H}\n# maxval next\n1000\n".encode() + bytes(2 * H * W),
        "plain.ppm": f"P3 {W} {H} 255\n".encode() + b"0 " * (3 * H * W),
        "plain-bits.pbm": f"P1\n{W} {H}\n".encode() + b"0" * (H * W),
    }
    # JPEG oddities Pillow reads past: fill bytes, junk and RST/stuffed markers between segments
    base = jpeg_photo()
    files["fill-bytes.jpg"] = after_soi(base, b"\xff\xff\xff")[:2] + base[2:3] + b"\xff\xff" + base[3:]
    files["junk-rst-stuffed.jpg"] = after_soi(base, segment(0xFE, b"note") + b"junk\x00" + b"\xff\xd0\xff\x00zz")
    files["exif-rational-dpi.jpg"] = after_soi(cv2_bytes(".jpg", rgb), exif_segment(5))  # JFIF gives no dpi
    files["truncated-in-scan.jpg"] = base[:base.find(b"\xff\xda") + 16]
    files["truncated-in-idat.png"] = files["cv2-rgb8.png"][:60]
    return files


def odd_files() -> dict[str, bytes]:
    """Files the direct read must leave to Pillow: refused ones (so that the message stays Pillow's) and variants
    whose parsing in Pillow can fail or differ."""
    rgb = pixels(3)
    base, png8 = jpeg_photo(), cv2_bytes(".png", rgb)
    sof = sof_at(base)
    info = PngImagePlugin.PngInfo()
    info.add_text("comment", "compressed", zip=True)
    apng = io.BytesIO()
    Image.fromarray(rgb).save(apng, "PNG", save_all=True, append_images=[Image.fromarray(255 - rgb)])
    mpo = io.BytesIO()
    Image.fromarray(rgb).save(mpo, "MPO", save_all=True, append_images=[Image.fromarray(255 - rgb)])
    return {
        "empty.png": b"",
        "text.png": b"this is not an image\n",
        "signature-only.png": png8[:8],
        "truncated-ihdr.png": png8[:20],
        "bad-ihdr-crc.png": png(ihdr_crc=0),
        "bad-chunk-crc.png": png(before=(png_chunk(b"gAMA", struct.pack(">I", 45455), crc=1),)),
        "short-gama.png": png(before=(png_chunk(b"gAMA", b"\0\0"),)),
        "short-trns.png": png(before=(png_chunk(b"tRNS", b"\0\0"),)),
        "bad-mode.png": png(16, 3),
        "odd-compression.png": png(compression=1),
        "adam7-and-more.png": png(interlace=2),
        "iccp-method.png": png(before=(png_chunk(b"iCCP", b"icc\0\x01" + zlib.compress(b"profile")),)),
        "iccp-too-large.png": png(before=(png_chunk(b"iCCP", b"icc\0\0" + zlib.compress(bytes(2 << 20))),)),
        "ztxt.png": pil_bytes(Image.fromarray(rgb), "PNG", pnginfo=info),
        "apng.png": apng.getvalue(),
        "no-idat.png": png8[:33] + png_chunk(b"IEND", b""),
        "twelve-bit.jpg": patched(base, sof + 4, b"\x0c"),
        "two-layers.jpg": patched(base, sof + 9, b"\x02"),
        "no-sof.jpg": patched(base, sof + 1, b"\xfe"),
        "bad-marker.jpg": after_soi(base, b"\xff\x10"),
        "short-dqt.jpg": after_soi(base, segment(0xDB, bytes(10))),
        "short-jfif.jpg": base[:2] + segment(0xE0, b"JFIF\0") + base[2:],
        "short-icc.jpg": after_soi(base, segment(0xE2, b"ICC_PROFILE\0\x01")),
        "exif-byte-dpi.jpg": after_soi(cv2_bytes(".jpg", rgb), exif_segment(1)),  # Pillow's dpi read fails
        "two-exif.jpg": after_soi(base, exif_segment(5) + exif_segment(5)),
        "photoshop.jpg": after_soi(base, segment(0xED, b"Photoshop 3.0\x008BIM\x04\x04\0\0\0\0\0\0")),
        "mpo.jpg": mpo.getvalue(),
        "truncated-segment.jpg": base[:sof + 6],
        "truncated-before-sos.jpg": base[:base.find(b"\xff\xda") + 4],
        "no-scan.jpg": base[:base.find(b"\xff\xda")],
        "sixteen-bit.bmp": bmp(16),
        "rle.bmp": bmp(8, compression=1),
        "bitfields.bmp": bmp(32, compression=3),
        "os2.bmp": bmp(24, info_size=12)[:30],
        "too-many-colors.bmp": bmp(8, colors=70000)[:54],
        "zero-maxval.pgm": f"P5 {W} {H} 0\n".encode() + bytes(H * W),
        "huge-maxval.pgm": f"P5 {W} {H} 70000\n".encode() + bytes(H * W),
        "signed-width.pgm": f"P5 +{W} {H} 255\n".encode() + bytes(H * W),
        "long-token.pgm": f"P5 000000000{W} {H} 255\n".encode() + bytes(H * W),
        "float.pfm": f"Pf\n{W} {H}\n-1.0\n".encode() + bytes(4 * H * W),
        "tiff16.tif": cv2_bytes(".tiff", pixels(3, np.uint16)),
        "webp.webp": pil_bytes(Image.fromarray(rgb), "WEBP"),
    }


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("headers")
    for name, data in {**common_files(), **odd_files()}.items():
        (root / name).write_bytes(data)
    return root


@pytest.mark.parametrize("name", sorted(common_files()))
def test_common_files_are_read_directly_with_pillows_answer(folder, name):
    fast = check(folder / name)
    assert fast is not None, f"{name}: passed on to Pillow"


@pytest.mark.parametrize("name", sorted(odd_files()))
def test_odd_files_are_left_to_pillow_and_its_message_stays(folder, name):
    assert check(folder / name) is None


def test_sixteen_bits_three_channels_and_the_stored_orientation(folder):
    assert read_header(folder / "cv2-rgb16.png") == Header(H, W, "uint16", 3)
    assert read_header(folder / "cv2-gray16.pgm") == Header(H, W, "uint16", 3)
    assert read_header(folder / "comments.pgm") == Header(H, W, "uint16", 3)  # maxval 1000
    assert read_header(folder / "pil-palette.png") == Header(H, W, "uint8", 3)
    assert read_header(folder / "pil-exif-rot90.jpg") == Header(H, W, "uint8", 3)  # as stored, not as shown
    assert read_header(folder / "top-down.bmp") == Header(H, W, "uint8", 3)


def test_a_missing_file_and_a_folder_are_left_to_pillow(tmp_path):
    for path in (tmp_path / "missing.png", tmp_path):
        assert read_header(path) is None
        assert outcome(probe, path) == outcome(probe_image, path)


def test_an_image_beyond_pillows_bomb_limit_is_left_to_pillow(tmp_path):
    path = tmp_path / "big.png"
    ihdr = struct.pack(">IIBBBBB", 20000, 10000, 16, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", b""))
    assert read_header(path) is None
    assert probe(path) == Header(10000, 20000, "uint16", 3)


def sweep_sources() -> dict[str, bytes]:
    files = common_files()
    return {name: files[name] for name in ("pil-chunks.png", "palette4bit.png", "pil-exif-rot90.jpg",
                                           "pil-icc-split.jpg", "junk-rst-stuffed.jpg", "cv2-progressive.jpg",
                                           "pil-palette.bmp", "comments.pgm")}


def header_end(data: bytes) -> int:
    """Where the header stops: a PNG's first IDAT, a JPEG's first SOS segment, else the first 80 bytes."""
    idat, sos = data.find(b"IDAT"), data.find(b"\xff\xda")
    return (idat + 4 if data.startswith(b"\x89PNG") else sos + 16 if data.startswith(b"\xff\xd8") else 80)


@pytest.mark.parametrize("name", sorted(sweep_sources()))
def test_truncations_and_flipped_bytes_never_make_it_disagree_with_pillow(tmp_path, name):
    data = sweep_sources()[name]
    end = header_end(data)
    path = tmp_path / name
    cuts = sorted(set(range(0, min(end, 400))) | set(range(400, end, 997)) | {end, end + 1})
    for cut in cuts:
        path.write_bytes(data[:cut])
        check(path)
    answered = 0
    for at in sorted(set(range(0, min(end, 300))) | set(range(300, end, 1499))):
        for flip, tail in ((0xFF, b""), (0x01, bytes(8192))):  # a longer file: the header is read on, not whole
            path.write_bytes(data[:at] + bytes([data[at] ^ flip]) + data[at + 1:] + tail)
            answered += check(path) is not None
    assert answered > 0  # most single-byte changes leave a readable header; the direct read must still answer
