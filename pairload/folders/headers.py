"""What an image file's header says (`Header`: size, element type, channels), and `read_header`: that header read
straight from the first bytes of a PNG, JPEG, BMP or PNM file, without Pillow. stdlib only.

`read_header` answers only where Pillow's `Image.open` would open the file and give the same answer; for any other
format, and anything odd (a bad CRC, a truncated header, a chunk or segment Pillow parses in ways that can fail),
it returns None and `decode.probe` asks Pillow, so that every refusal keeps Pillow's wording
(tests/folders/test_headers.py holds the two side by side). Accepted files are those that reach the image data: a PNG's
first IDAT, a JPEG's first SOS.

Why: pack probes every file before it decodes any, and one read of the first bytes parsed here costs a fraction of
opening the file through Pillow's `Image.open` (`decode.probe_image`).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass

from ..errors import ImageError

ARRAY_DTYPES = ("uint8", "uint16")  # what a .npy image may hold; stored as it is
ARRAY_CHANNELS = range(1, 5)


@dataclass(frozen=True)
class Header:
    """What a file's header says of the pixels pack stores from it: size, element type (`uint8` or `uint16`, the
    file's own) and channels (3 for an image: gray is replicated and alpha dropped; a `.npy`'s own)."""

    height: int
    width: int
    dtype: str = "uint8"
    channels: int = 3
    raw: object = None  # a camera raw file: its `camera.RawInfo` (the fields above are then the packed mosaic's)

    def __post_init__(self) -> None:
        if self.dtype not in ARRAY_DTYPES or self.channels not in ARRAY_CHANNELS:
            raise ImageError(f"header of {self.height}x{self.width}: {self.dtype} ×{self.channels} is not a pixel type "
                             f"pack stores (expected {' or '.join(ARRAY_DTYPES)} with 1 to 4 channels)")

    @property
    def hw(self) -> tuple[int, int]:
        return self.height, self.width

    def stored(self, to_8bit: bool) -> tuple[str, int]:
        """(dtype, channels) of the array pack stores from this file (`to_8bit`: 16 bits become 8)."""
        return ("uint8" if to_8bit else self.dtype), self.channels


FIRST_READ = 4096  # one read covers most headers; a longer one (a big Exif APP1) is read on, doubling
MAX_WALK = 1 << 20  # header bytes walked before giving up (a PNG's text, a JPEG's ICC profile split over APP2s)
# Pillow's default decompression-bomb limit: images beyond it take Pillow's path, whose answer for them is its own
# (it reads their size with the limit lifted, and their bit depth from a PNG's IHDR only)
PILLOW_SAFE_PIXELS = 89_478_485
MAX_TEXT_CHUNK = 1 << 20  # Pillow refuses a PNG whose iCCP profile inflates beyond this (PngImagePlugin)

_U16, _U32 = struct.Struct(">H"), struct.Struct(">I")
_U16LE, _U32LE = struct.Struct("<H"), struct.Struct("<I")


class _File:
    """The first bytes of an open file (`data`), read further on demand, doubling, up to MAX_WALK."""

    __slots__ = ("fd", "data", "whole")

    def __init__(self, fd: int):
        self.fd = fd
        self.data = os.read(fd, FIRST_READ)
        self.whole = len(self.data) < FIRST_READ  # `data` is the whole file

    def has(self, end: int) -> bool:
        """Whether the file holds `end` bytes, which `data` then holds (False past MAX_WALK)."""
        if end <= len(self.data):
            return True
        if self.whole or end > MAX_WALK:
            return False
        want = min(max(end, 2 * len(self.data)), MAX_WALK) - len(self.data)
        more = os.pread(self.fd, want, len(self.data))
        self.data += more
        self.whole = len(more) < want
        return end <= len(self.data)

    def find_ff(self, off: int) -> int | None:
        """The offset of the next 0xFF at or after `off`; None at EOF or past MAX_WALK."""
        while True:
            at = self.data.find(b"\xff", off)
            if at >= 0:
                return at
            off = max(off, len(self.data))
            if not self.has(off + 1):
                return None


def read_header(path) -> Header | None:
    """The `Header` of a PNG, JPEG, BMP or PNM image read from its first bytes, or None where Pillow must be asked
    (another format, anything odd, a file that cannot be opened, an image beyond Pillow's decompression-bomb limit)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        f = _File(fd)
        head = f.data
        if head.startswith(b"\x89PNG\r\n\x1a\n"):
            found = _png(f)
        elif head.startswith(b"\xff\xd8\xff"):
            found = _jpeg(f)
        elif head.startswith(b"BM"):
            found = _bmp(f)
        elif head[:1] == b"P" and head[1:2] in (b"1", b"2", b"3", b"4", b"5", b"6"):
            found = _pnm(f)
        else:
            found = None
    except OSError:
        return None
    finally:
        os.close(fd)
    if found is None:
        return None
    height, width, bits = found
    if not (0 < height and 0 < width and height * width <= PILLOW_SAFE_PIXELS):
        return None
    return Header(height, width, "uint16" if bits > 8 else "uint8", 3)


# ---------------------------------------------------------------------------------------------------------- PNG
# (bit depth, colour type) pairs Pillow opens; any other is "not a readable image"
_PNG_MODES = frozenset({(1, 0), (2, 0), (4, 0), (8, 0), (16, 0), (8, 2), (16, 2), (1, 3), (2, 3), (4, 3), (8, 3),
                        (8, 4), (16, 4), (8, 6), (16, 6)})
# chunks before IDAT whose parsing in Pillow cannot fail once the CRC holds and the length is at least this much
# (tRNS: per colour type, below); any other chunk (zTXt, iTXt, APNG's, one Pillow may learn to parse) goes to Pillow
_PNG_MIN_LENGTH = {b"PLTE": 0, b"tRNS": 0, b"gAMA": 4, b"cHRM": 32, b"sRGB": 1, b"pHYs": 9, b"tEXt": 0, b"eXIf": 0,
                   b"iCCP": 0, b"bKGD": 0, b"sBIT": 0, b"tIME": 0, b"hIST": 0, b"sPLT": 0}
_TRNS_MIN = {0: 2, 2: 6}  # gray needs one 16-bit value, truecolour three


def _png(f: _File) -> tuple[int, int, int] | None:
    if not f.has(33) or f.data[8:16] != b"\x00\x00\x00\x0dIHDR":
        return None
    ihdr = f.data[16:29]
    width, height = _U32.unpack_from(ihdr, 0)[0], _U32.unpack_from(ihdr, 4)[0]
    depth, colour, compression, filtering, interlace = ihdr[8:13]
    if (depth, colour) not in _PNG_MODES or compression or filtering or interlace > 1:
        return None
    if zlib.crc32(f.data[12:29]) != _U32.unpack_from(f.data, 29)[0]:
        return None
    pos = 33
    while True:
        if not f.has(pos + 8):
            return None
        length, kind = _U32.unpack_from(f.data, pos)[0], f.data[pos + 4:pos + 8]
        if kind == b"IDAT":
            return height, width, depth
        least = _TRNS_MIN.get(colour, 0) if kind == b"tRNS" else _PNG_MIN_LENGTH.get(kind)
        end = pos + 8 + length
        if least is None or length < least or not f.has(end + 4):
            return None
        body = f.data[pos + 8:end]
        if zlib.crc32(body, zlib.crc32(kind)) != _U32.unpack_from(f.data, end)[0]:
            return None
        if kind == b"iCCP" and not _iccp_ok(body):
            return None
        pos = end + 4


def _iccp_ok(data: bytes) -> bool:
    """Whether Pillow reads this iCCP chunk without raising: a named profile, compression method 0, and a profile
    that inflates to at most MAX_TEXT_CHUNK (a broken zlib stream Pillow ignores)."""
    nul = data.find(b"\0")
    if nul < 1 or nul + 1 >= len(data) or data[nul + 1] != 0:
        return False
    inflate = zlib.decompressobj()
    try:
        inflate.decompress(data[nul + 2:], MAX_TEXT_CHUNK)
    except zlib.error:
        return True
    return not inflate.unconsumed_tail


# --------------------------------------------------------------------------------------------------------- JPEG
# Markers followed by no length (RSTn, SOI, EOI, JPG, JPGn): Pillow reads the next byte; every other marker from
# 0xC0 on has a segment. SOFn (and DHP, which Pillow reads as one) give the size.
_NO_SEGMENT = frozenset(range(0xD0, 0xDA)) | {0xC8} | frozenset(range(0xF0, 0xFE))
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF, 0xDE})
_SOS, _DQT, _APP0, _APP1, _APP2, _APP13, _APP14, _APP15 = 0xDA, 0xDB, 0xE0, 0xE1, 0xE2, 0xED, 0xEE, 0xEF


def _jpeg(f: _File) -> tuple[int, int, int] | None:
    """Walk the markers as Pillow's JpegImageFile does, up to the first SOS: fill bytes (0xFF 0xFF), stuffed zeros
    and junk between segments are skipped the same way, and every segment Pillow reads must be whole and parse."""
    pos, size, icc_short = 3, None, False  # pos: the byte after the 0xFF of the first marker after SOI
    exif, jfif_dpi = None, False
    data = f.data  # what has been read so far; read on only where a segment runs past it (f.has)
    while True:
        if pos >= len(data):
            if not f.has(pos + 1):
                return None
            data = f.data
        code = data[pos]
        pos += 1
        if code == 0xFF:  # a fill byte: the next byte is the marker
            continue
        if code < 0xC0:  # a stuffed zero is skipped; another code is "no marker found"
            if code:
                return None
            pos = f.find_ff(pos)
            if pos is None:
                return None
            data, pos = f.data, pos + 1
            continue
        if code not in _NO_SEGMENT:
            if pos + 2 > len(data):
                if not f.has(pos + 2):
                    return None
                data = f.data
            n = max((data[pos] << 8 | data[pos + 1]) - 2, 0)
            start, pos = pos + 2, pos + 2 + n
            if pos > len(data):  # Pillow reads every segment whole
                if not f.has(pos):
                    return None
                data = f.data
            if code in _SOF:
                size = None if icc_short else _jpeg_sof(data[start:pos])
                if size is None:
                    return None
            elif code == _SOS:
                if size is None or (exif is not None and not jfif_dpi and not _exif_dpi_ok(exif)):
                    return None
                return (*size, 8)
            elif code == _DQT:
                if not _dqt_ok(data[start:pos]):
                    return None
            elif _APP0 <= code <= _APP15:
                body = data[start:min(pos, start + 32)]
                if not _app_ok(code, body, n):
                    return None
                icc_short |= code == _APP2 and body.startswith(b"ICC_PROFILE\0") and n < 14
                jfif_dpi |= code == _APP0 and body.startswith(b"JFIF") and n >= 12 and body[7] in (1, 2)
                if code == _APP1 and body.startswith(b"Exif\0\0"):
                    if exif is not None:  # Pillow joins a second one to the first
                        return None
                    exif = data[start:pos]
        # Pillow reads one byte after a marker and skips anything up to the next 0xFF
        if pos >= len(data) or data[pos] != 0xFF:
            pos = f.find_ff(pos)
            if pos is None:
                return None
            data = f.data
        pos += 1


def _jpeg_sof(body: bytes) -> tuple[int, int] | None:
    """(height, width) of a SOFn segment Pillow accepts: 8-bit samples, 1, 3 or 4 components, whole component
    entries."""
    if len(body) < 6 or body[0] != 8 or body[5] not in (1, 3, 4) or (len(body) - 6) % 3:
        return None
    return _U16.unpack_from(body, 1)[0], _U16.unpack_from(body, 3)[0]


def _exif_dpi_ok(exif: bytes) -> bool:
    """Whether Pillow reads the dpi from this Exif segment without raising (it does, without a JFIF density): IFD0
    lacks ResolutionUnit or XResolution, or holds them as one SHORT and one RATIONAL inside the block. Anything
    else (another type, a count over 1, an offset out of the block, a second Exif prefix) goes to Pillow."""
    tiff = exif[6:]
    if len(tiff) < 8 or tiff[:4] not in (b"II*\0", b"MM\0*"):
        return False
    u16, u32 = (_U16LE, _U32LE) if tiff[0] == 0x49 else (_U16, _U32)
    ifd = u32.unpack_from(tiff, 4)[0]
    if ifd + 2 > len(tiff):
        return False
    count = u16.unpack_from(tiff, ifd)[0]
    if ifd + 2 + 12 * count > len(tiff):
        return False
    found: dict[int, tuple[int, int, int]] = {}
    for at in range(ifd + 2, ifd + 2 + 12 * count, 12):
        tag, kind = u16.unpack_from(tiff, at)[0], u16.unpack_from(tiff, at + 2)[0]
        if tag in (_RESOLUTION_UNIT, _X_RESOLUTION):
            if tag in found:
                return False
            found[tag] = (kind, u32.unpack_from(tiff, at + 4)[0], u32.unpack_from(tiff, at + 8)[0])
    if len(found) < 2:
        return True  # Pillow's KeyError: 72 dpi
    unit, x = found[_RESOLUTION_UNIT], found[_X_RESOLUTION]
    return unit[:2] == (3, 1) and x[:2] == (5, 1) and x[2] + 8 <= len(tiff)


_RESOLUTION_UNIT, _X_RESOLUTION = 0x0128, 0x011A


def _dqt_ok(body: bytes) -> bool:
    """Whether every quantization table of a DQT segment is whole (Pillow refuses one that is not)."""
    at = 0
    while at < len(body):
        at += 65 if body[at] < 16 else 129
        if at > len(body):
            return False
    return True


def _app_ok(code: int, body: bytes, n: int) -> bool:
    """Whether Pillow parses this APPn segment without raising: JFIF and Adobe segments hold their version; MPF
    (a multi-picture file Pillow opens as MPO) and Photoshop resource blocks are left to Pillow."""
    if code == _APP0 and body.startswith(b"JFIF"):
        return n >= 7
    if code == _APP14 and body.startswith(b"Adobe"):
        return n >= 7
    if code == _APP2 and body.startswith(b"MPF\0"):
        return False
    return not (code == _APP13 and body.startswith(b"Photoshop 3.0\0"))


# ---------------------------------------------------------------------------------------------------------- BMP
_BMP_INFO_SIZES = frozenset({40, 52, 56, 64, 108, 124})  # BITMAPINFOHEADER to BITMAPV5HEADER


def _bmp(f: _File) -> tuple[int, int, int] | None:
    """Uncompressed BMP of 24 or 32 bits, or 1, 4 or 8 bits with a palette Pillow accepts. Others (16 bits, which
    Pillow reads as `BGR;15`, bitfields, RLE, OS/2 headers) go to Pillow."""
    if not f.has(18):
        return None
    info_size = _U32LE.unpack_from(f.data, 14)[0]
    if info_size not in _BMP_INFO_SIZES or not f.has(14 + info_size):
        return None
    hd = f.data[18:54]
    width, raw_height = _U32LE.unpack_from(hd, 0)[0], _U32LE.unpack_from(hd, 4)[0]
    height = 2**32 - raw_height if hd[7] == 0xFF else raw_height  # top-down rows: a negative height
    bits, compression = _U16LE.unpack_from(hd, 10)[0], _U32LE.unpack_from(hd, 12)[0]
    colors = _U32LE.unpack_from(hd, 28)[0] or (1 << bits)
    if compression != 0 or bits not in (1, 4, 8, 24, 32) or (bits <= 8 and not 0 < colors <= 65536):
        return None
    return height, width, 8


# ---------------------------------------------------------------------------------------------------------- PNM
_PNM_SPACE = b" \t\n\x0b\x0c\r"


def _pnm(f: _File) -> tuple[int, int, int] | None:
    """P1 to P6, tokenized as Pillow's PpmImageFile does (comments from '#' to the end of the line, even inside a
    token; tokens of at most 10 characters); its header must lie within the first read. 16 bits: a maxval over 255."""
    data = f.data
    if len(data) < 3 or data[2] not in _PNM_SPACE:
        return None
    pos, values = 3, []
    for _ in range(2 if data[1] in b"14" else 3):
        token, pos = _pnm_token(data, pos, f.whole)
        if token is None or not token.isdigit():
            return None
        values.append(int(token))
    if len(values) == 3 and not 0 < values[2] < 65536:
        return None
    return values[1], values[0], 16 if len(values) == 3 and values[2] > 255 else 8


def _pnm_token(data: bytes, pos: int, whole: bool) -> tuple[bytes | None, int]:
    token = bytearray()
    while len(token) <= 10:
        if pos >= len(data):
            if not whole:
                return None, pos  # the header goes on past the first read
            break
        c = data[pos]
        pos += 1
        if c in _PNM_SPACE:
            if token:
                break
        elif c == 0x23:  # '#': skip to the end of the line
            ends = [i for i in (data.find(b"\r", pos), data.find(b"\n", pos)) if i >= 0]
            if not ends and not whole:
                return None, pos
            pos = min(ends) + 1 if ends else len(data)
        else:
            token.append(c)
    if not token or len(token) > 10:
        return None, pos
    return bytes(token), pos
