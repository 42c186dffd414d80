"""The formats an image member of an encoded split is stored in (`pack --store encoded`, shard format version 7), in
one table (`FORMATS`): each format's name, its code in the index's `low_kind`/`high_kind` columns, its tar member
suffix (`<key>.low.jpg`, `<key>.low.npy`: the shards stay WebDataset-readable) and its CPU decode, the one every
reader and `pack` itself use.

`npy`: the pixels themselves, H×W×C of the member's dtype in C order behind their .npy header (the index's offset is
the pixels', as in a decoded split). `jpeg`: a JPEG file's own bytes, never re-encoded, which `decode_jpeg` turns
into exactly the pixels `pack --store decoded` stores from that file (OpenCV, `IMREAD_UNCHANGED`: EXIF orientation
ignored, BGR to RGB); `jpeg_refusal` says which JPEG files may be kept so. `tiles`: any other image, lossless, in
tiles of zstd frames of filtered planes (`format.tiles`), which a GPU decodes too, tile by tile. Numpy here,
OpenCV when a JPEG is decoded; never torch or DALI.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .members import Member, MemberError  # noqa: F401 - MemberError is this table's error too

SOI, EOI = b"\xff\xd8", b"\xff\xd9"  # a JPEG stream's first and last two bytes


def decode_npy(data: np.ndarray, member: Member, h: int, w: int) -> np.ndarray:
    """The pixels of an `npy` member as they lie (a view of `data`, no copy)."""
    if len(data) != member.nbytes(h, w):
        raise MemberError(f"holds {len(data)} bytes of pixels, the index says {member.nbytes(h, w)} ({member.dtype} "
                          f"{h}x{w}x{member.channels})")
    pixels = data if member.dtype == "uint8" else data.view(member.np_dtype)
    return pixels.reshape(h, w, member.channels)


def decode_jpeg(data: np.ndarray, member: Member, h: int, w: int) -> np.ndarray:
    """The RGB pixels of a `jpeg` member (a fresh array), exactly as `pack` decodes the file: checked to start with
    SOI and end with EOI (libjpeg decodes a cut-short file with a grey tail and only a warning) and to decode to the
    index's h×w×3 uint8."""
    import cv2

    head, tail = bytes(data[:2]), bytes(data[-2:])
    if head != SOI:
        raise MemberError(f"is not a JPEG: it starts with bytes {head.hex(' ') or 'none'}, not the SOI marker ff d8")
    if tail != EOI:
        raise MemberError(f"is cut short: it ends with bytes {tail.hex(' ')}, not the EOI marker ff d9 that ends a "
                          f"JPEG ({len(data)} bytes stored)")
    try:
        img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    except cv2.error as exc:  # OpenCV 5 raises where 4 returned None
        raise MemberError(f"does not decode ({' '.join(str(exc).split())[:160]})") from None
    if img is None:
        raise MemberError("does not decode (libjpeg refused its data)")
    want = (h, w, member.channels)
    if img.shape != want or img.dtype != member.np_dtype:
        raise MemberError(f"decodes to {img.dtype} {'x'.join(map(str, img.shape))}, the index says {member.dtype} "
                          f"{'x'.join(map(str, want))}")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def decoder() -> str:
    """The JPEG decoder `decode_jpeg` runs in this process, in words: "OpenCV 5.0.0 (libjpeg-turbo 3.1.2-70)"."""
    import cv2

    found = re.search(r"^\s*JPEG:\s*(.*)$", cv2.getBuildInformation(), re.M)
    return f"OpenCV {cv2.__version__}" + (f" ({found.group(1).strip()})" if found else "")


@dataclass(frozen=True)
class ImageFormat:
    """One format of stored image member. `name`: what messages, `info` and readers call it; `code`: its value in
    the index's `low_kind`/`high_kind` columns (uint8); `suffix`: its tar member's extension after the side
    (`low.jpg`); `decode(data, member, h, w)`: its pixels, H×W×C of `member`'s type, from its stored bytes (a view of
    the shard), or a MemberError saying what is wrong; `pixels`: the stored bytes are the pixels themselves (a
    reader may view or copy them as they are, with no decode)."""

    name: str
    code: int
    suffix: str
    decode: Callable[[np.ndarray, Member, int, int], np.ndarray]
    pixels: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.code <= 255 or not self.suffix.isalnum():
            raise ValueError(f"image format {self.name}: code {self.code} must fit a uint8 and suffix {self.suffix!r} "
                             "must be letters and digits")

    def __reduce__(self):  # pickled by name: a worker gets the table's own entry back
        return _named, (self.name,)

    def member_suffix(self, side: str) -> str:
        """The tar member suffix of this format on `side` ("low", "high"): `low.jpg`."""
        return f"{side}.{self.suffix}"


def decode_tiles(data: np.ndarray, member: Member, h: int, w: int) -> np.ndarray:
    """The pixels of a `tiles` member (lossless: `format.tiles`), a fresh array."""
    from .tiles import decode_tiles as decode

    return decode(data, member, h, w)


NPY = ImageFormat("npy", 0, "npy", decode_npy, pixels=True)
JPEG = ImageFormat("jpeg", 1, "jpg", decode_jpeg)
TILES = ImageFormat("tiles", 2, "tiles", decode_tiles)
FORMATS: dict[str, ImageFormat] = {f.name: f for f in (NPY, JPEG, TILES)}
BY_CODE: dict[int, ImageFormat] = {f.code: f for f in FORMATS.values()}


def _named(name: str) -> ImageFormat:
    return FORMATS[name]


def of_code(code: int) -> ImageFormat:
    """The format of an index code; a MemberError for a code no entry has (a damaged index)."""
    try:
        return BY_CODE[int(code)]
    except KeyError:
        raise MemberError(f"has format code {int(code)}, which this pairload does not know (it knows "
                          f"{', '.join(f'{f.code}: {f.name}' for f in FORMATS.values())})") from None


# ------------------------------------------------------------------------------------------ which JPEGs are kept

_HUFFMAN_DCT = {0xC0, 0xC1, 0xC2}  # baseline, extended sequential and progressive: what every JPEG decoder reads
_FRAMES = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # SOFn (C4: DHT, C8: JPG, CC: DAC are no frames)


@dataclass(frozen=True)
class JpegFrame:
    """A JPEG's frame header (its SOFn segment): the coding process (marker), sample precision, size and number of
    components; and whether its three components are R, G and B rather than YCbCr (`rgb`), as libjpeg decides it
    from the markers before the first scan: a JFIF marker says YCbCr; else an Adobe marker's transform 0 says RGB;
    else component identifiers 'R', 'G', 'B' do."""

    marker: int
    precision: int
    height: int
    width: int
    components: int
    rgb: bool = False

    @property
    def progressive(self) -> bool:
        """Progressive coding (SOF2): every decoder reads it, but GPUs' hardware JPEG decoders take baseline files
        only (nvJPEG's batched hardware path), so nvImageCodec decodes it on its slower CPU-assisted decoder."""
        return self.marker == 0xC2


def jpeg_frame(data: bytes) -> JpegFrame | None:
    """The frame header of a JPEG file's bytes, found by walking its segments from SOI to the first scan; None where
    there is none before it (not a JPEG, or a damaged one)."""
    if data[:2] != SOI:
        return None
    pos, n = 2, len(data)
    sof, jfif, adobe = None, False, None  # (marker, body); a JFIF marker seen; the Adobe marker's transform
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            break
        marker = data[pos + 1]
        if marker == 0xFF:  # a fill byte
            pos += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # no segment follows these
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # the end, or the first scan
            break
        length = data[pos + 2] << 8 | data[pos + 3]
        body = data[pos + 4:pos + 2 + length]
        if marker in _FRAMES and sof is None:
            sof = (marker, body)
        elif marker == 0xE0 and body[:5] == b"JFIF\0":
            jfif = True
        elif marker == 0xEE and body[:5] == b"Adobe" and len(body) >= 12:
            adobe = body[11]
        pos += 2 + length
    if sof is None or len(sof[1]) < 6:
        return None
    marker, body = sof
    ids = tuple(body[6 + 3 * k] for k in range(3)) if body[5] == 3 and len(body) >= 15 else ()
    rgb = not jfif and (adobe == 0 if adobe is not None else ids == (82, 71, 66))
    return JpegFrame(marker, body[0], body[1] << 8 | body[2], body[3] << 8 | body[4], body[5], rgb)


def jpeg_refusal(data: bytes, hw: tuple[int, int], frame: JpegFrame | None = None) -> str | None:
    """Why a JPEG file's bytes cannot be kept as a `jpeg` member whose image is hw (height, width), in a few words
    for pack's report ("CMYK JPEG"); None when they can: a Huffman-coded 8-bit YCbCr JPEG of that size, ending with
    its EOI marker, which every JPEG decoder (libjpeg, nvJPEG, DALI's) reads to h×w×3. `frame`: its frame header,
    where the caller has read it (`jpeg_frame(data)`).
    """
    frame = jpeg_frame(data) if frame is None else frame
    if frame is None:
        return "JPEG without a frame header"
    if frame.components == 1:
        return "grey JPEG"
    if frame.components == 4:
        return "CMYK JPEG"
    if frame.components != 3:
        return f"{frame.components}-channel JPEG"
    if frame.precision != 8:
        return f"{frame.precision}-bit JPEG"
    if frame.marker not in _HUFFMAN_DCT:
        return "lossless, hierarchical or arithmetic-coded JPEG"
    if frame.rgb:  # (nvImageCodec's parser takes any three components for YCbCr: the GPU would decode other colours)
        return "RGB-coded JPEG"
    if (frame.height, frame.width) != tuple(hw):
        return "JPEG whose frame size differs from its header's"
    if data[-2:] != EOI:
        return "JPEG with bytes after its end marker"
    return None
