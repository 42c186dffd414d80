"""Where a sample's members lie in its shard: their names (`<key>.json`, then the input's and the target's image
member, named by the split's encoding and, in an encoded split, by each member's format), their order, and the
layouts `pack` writes: `layout_sample` (raw pixels, every offset planned before any pixel is decoded) and
`layout_compressed_sample` (members whose bytes are known once a worker has made them: zstd frames, or an encoded
split's JPEG files and .npy pixels). Part of the schema (`schema` re-exports it); imports neither torch nor DALI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .encoding import RAW, ZSTD, Encoding
from .imageformats import TILES, ImageFormat
from .members import DEFAULT, Members
from .tarblocks import header_size, padded, tar_header
from .tiles import tile_starts

# Member suffixes inside a sample; WebDataset groups members by the key before the first dot.
LOW = "low.npy"
HIGH = "high.npy"
META = "json"
MEMBER_ORDER = (META, LOW, HIGH)


def member_name(key: str, suffix: str) -> str:
    return f"{key}.{suffix}"


def image_suffix(suffix: str, encoding: Encoding = RAW, kind: ImageFormat | None = None) -> str:
    """The member suffix of an image (`low.npy`) as stored: `low.npy.zst` in a zstd split; in an encoded split, that
    of its format `kind` (`low.jpg`)."""
    return encoding.member_suffix(suffix, kind)


def member_order(encoding: Encoding = RAW, targets_only: bool = False,
                 kinds: tuple[ImageFormat, ImageFormat] | None = None) -> tuple[str, ...]:
    """The suffixes of one sample's members in shard order (`json`, then the low and the high image; a targets-only
    sample: `json` and the high image). An encoded split's: of the sample's formats `kinds` (low, high); without
    them, each image's possible suffixes joined by `|` (`low.jpg|low.npy`, as a manifest's "layout" says)."""
    def name(suffix: str, k: int) -> str:
        if suffix == META:
            return suffix
        if encoding.per_member and kinds is None:
            from .imageformats import FORMATS

            return "|".join(image_suffix(suffix, encoding, f) for f in FORMATS.values())
        return image_suffix(suffix, encoding, kinds[k] if kinds else None)

    return tuple(name(s, 0 if s == LOW else 1) for s in _order(False, targets_only))


def _order(shares_high: bool, targets_only: bool) -> tuple[str, ...]:
    """The members a sample stores: no target of its own when it shares another's, no input when targets only."""
    return (META, HIGH) if targets_only else (META, LOW) if shares_high else MEMBER_ORDER


def npy_header(height: int, width: int) -> bytes:
    """The .npy header of a default (uint8 H×W×3) image; `Member.npy_header` for any member."""
    return DEFAULT.low.npy_header(height, width)


def sample_end(key: str, height: int, width: int, meta_size: int, start: int, shares_high: bool = False,
               members: Members = DEFAULT, targets_only: bool = False) -> int:
    """Where the sample `layout_sample` lays out at `start` ends, computed without its bytes."""
    s = members.scale
    pos = start
    for suffix in _order(shares_high, targets_only):
        if suffix == META:
            size = meta_size
        elif suffix == LOW:
            size = len(members.low.npy_header(height, width)) + members.low.nbytes(height, width)
        else:
            size = len(members.high.npy_header(height * s, width * s)) + members.high.nbytes(height * s, width * s)
        pos += header_size(member_name(key, suffix), size) + padded(size)
    return pos


@dataclass(frozen=True)
class SampleLayout:
    """Where one sample's members lie in its shard; computed before any pixel is decoded."""

    key: str
    height: int
    width: int
    start: int  # offset of the first member's header
    meta_data: int  # offset of the JSON payload
    meta_size: int
    low_data: int  # offset of the low image's pixels (after the npy header); compressed: of its zstd frame
    high_data: int
    end: int  # offset just past the last member
    low_bytes: int = 0  # compressed: the length of the frame at low_data (0: raw pixels); encoded: of its data
    high_bytes: int = 0
    low_kind: int = 0  # encoded: the `imageformats` code of each image member
    high_kind: int = 0
    low_tiles: tuple = ()  # encoded, a tiles member: where each of its tiles starts (`tiles.tile_starts`); else ()
    high_tiles: tuple = ()


class StoredImage(NamedTuple):
    """An image member of an encoded split as `pack` hands it over: its format and its bytes (a `pixels` format's:
    its whole .npy file, whose pixels the index points at)."""

    format: ImageFormat
    data: bytes


def _npy_data_start(npy: bytes) -> int:
    """Where the pixels of a .npy file (format 1.0, as `members.npy_file` writes it) start: its header's length."""
    return 10 + int.from_bytes(npy[8:10], "little")


def layout_sample(key: str, height: int, width: int, meta: bytes, start: int,
                  shared_high: int | None = None, members: Members = DEFAULT, targets_only: bool = False
                  ) -> tuple[SampleLayout, list[tuple[int, bytes]]]:
    """Lay out one sample at `start`; returns the layout and the (offset, bytes) header pieces to write: two, one
    from `start` to the low image's pixels (the JSON member whole, its padding, the low member's tar and .npy
    headers) and the high member's headers (none when the target is shared), so that a pack writes them in two calls.

    `shared_high`: the pixel offset of another sample's target in the same shard (format version 2): this sample
    then has no `.high.npy` member of its own, and its `.json` names the sample whose target it uses. `members`:
    the split's element types and size relation (height, width: the input's). `targets_only` (format version 6): no
    input member; the layout's `low_data` is the target's."""
    pieces: list[tuple[int, bytes]] = []
    pos = start
    s = members.scale
    npys = {LOW: members.low.npy_header(height, width), HIGH: members.high.npy_header(height * s, width * s)}
    sizes = {LOW: members.low.nbytes(height, width), HIGH: members.high.nbytes(height * s, width * s)}
    offsets: dict[str, int] = {}
    if shared_high is not None:
        offsets[HIGH] = shared_high
    head, head_at = [], pos  # the bytes from head_at on, up to the next pixels
    for suffix in _order(shared_high is not None, targets_only):
        npy = npys.get(suffix, b"")
        size = len(meta) if suffix == META else len(npy) + sizes[suffix]
        hdr = tar_header(member_name(key, suffix), size)
        pos += len(hdr)
        if suffix == META:
            head += [hdr, meta, bytes(padded(size) - size)]
            offsets[suffix] = pos
        else:
            pieces.append((head_at, b"".join(head + [hdr, npy])))
            offsets[suffix] = pos + len(npy)
        pos += padded(size)
        head, head_at = ([], pos) if suffix != META else (head, head_at)
    offsets.setdefault(LOW, offsets[HIGH])  # targets only: the input is the stored target
    layout = SampleLayout(
        key=key, height=height, width=width, start=start, meta_data=offsets[META], meta_size=len(meta),
        low_data=offsets[LOW], high_data=offsets[HIGH], end=pos,
    )
    return layout, pieces


def layout_compressed_sample(key: str, height: int, width: int, meta: bytes, low, high, start: int,
                             shared_high: tuple[int, ...] | None = None, encoding: Encoding = ZSTD
                             ) -> tuple[SampleLayout, list[tuple[int, bytes]]]:
    """Lay out one sample of an encoding that is not plain at `start`: `<key>.json`, then the image members whose
    payloads are `low` and `high`: each a .npy file as `encoding` stores it (`<key>.low.npy.zst`: one zstd frame,
    format version 3), or in an encoded split (version 7) a `StoredImage` named by its format (`<key>.low.jpg`, its
    file's bytes; `<key>.low.npy`, a .npy file whose pixels the index points at). Returns the layout (low_data,
    high_data: where each member's stored data starts; their lengths and formats) and the (offset, bytes) pieces to
    write, in file order.

    `shared_high`: (offset, length) of another sample's target frame in the same shard (encoded: and its format's
    code); this sample then has no high member of its own (high must be None). `low` None: a targets-only sample
    (format version 6), whose input is its stored target."""
    pieces: list[tuple[int, bytes]] = []
    pos = start
    where: dict[str, tuple[int, ...]] = {}
    starts: dict[str, tuple] = {}  # a tiles member's tile starts, for the index
    if shared_high is not None:
        where[HIGH] = tuple(shared_high) + (0,) * (3 - len(shared_high))
    members = ((META, meta),) + (((LOW, low),) if low is not None else ()) + (
        ((HIGH, high),) if shared_high is None else ())
    for suffix, payload in members:
        kind, skip = None, 0
        if isinstance(payload, StoredImage):
            kind, payload = payload
            skip = _npy_data_start(payload) if kind.pixels else 0
        hdr = tar_header(member_name(key, suffix if suffix == META else image_suffix(suffix, encoding, kind)),
                         len(payload))
        pieces.append((pos, hdr))
        pos += len(hdr)
        pieces.append((pos, payload))
        where[suffix] = (pos + skip, len(payload) - skip, kind.code if kind else 0)
        if kind is TILES:
            starts[suffix] = tuple(tile_starts(payload).tolist())
        pos += padded(len(payload))
    where.setdefault(LOW, where[HIGH])
    starts.setdefault(LOW, starts.get(HIGH, ()) if low is None else ())  # targets only: the input is the target
    layout = SampleLayout(
        key=key, height=height, width=width, start=start, meta_data=where[META][0], meta_size=len(meta),
        low_data=where[LOW][0], high_data=where[HIGH][0], end=pos, low_bytes=where[LOW][1],
        high_bytes=where[HIGH][1], low_kind=where[LOW][2], high_kind=where[HIGH][2], low_tiles=starts[LOW],
        high_tiles=starts.get(HIGH, ()),
    )
    return layout, pieces


