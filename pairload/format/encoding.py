"""How a split's image members are stored, in one table (`ENCODINGS`): raw pixels, each .npy file as one zstd
frame (`pairload pack --compress zstd`, shard format version 3), or each member in a format of its own
(`pairload pack --store encoded`, version 7: a JPEG file's own bytes, lossless tiles, or raw pixels;
`imageformats`). Every choice that depends on it — the members' names, whether the index records each member's
stored length (and its format), how a member is encoded and decoded, the package that needs, whether a reader (a GPU
kernel, a view of the page cache) may take the stored bytes as the pixels — asks the split's `Encoding`
(`SplitIndex.encoding`, `Members.encoding`, `PackOptions.encoding`). A new encoding is one entry.

A split's manifest entry names its encoding by one field (`Encoding.field`): `"compression": "zstd"`, `"store":
"encoded"`, or nothing for raw pixels (`Encoding.stored`). Imports neither torch nor DALI, and an encoding's package
only when a member is encoded or decoded (or `require` checks it is installed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ConfigError, ShardError
from . import codec
from .codec import FrameError  # noqa: F401 - what `decode` raises, named here with the table

FIELD = "compression"  # the split field naming a compressing encoding; absent for raw members
STORE = "store"  # the split field naming a store of per-member formats ("encoded", format version 7)
STORES = ("decoded", "encoded")  # what `pack --store` takes: the pixels (raw or compressed), or per-member formats


def _as_is(npy: Any, level: int) -> bytes:
    """A raw member stored: its .npy file as it is."""
    return bytes(npy)


def _as_stored(data: Any, size: int) -> bytes:
    """A raw member decoded: its bytes as they are (`size` of them)."""
    out = bytes(data)
    if len(out) != size:
        raise FrameError(f"it holds {len(out)} bytes, expected {size}")
    return out


def _nothing(what: str) -> None:
    return None


@dataclass(frozen=True)
class Encoding:
    """One way of storing an image member. `name`: what `--compress` and messages call it. `plain`: the stored
    bytes at the index's offsets are the pixels themselves (behind the .npy header), so a GPU kernel or a view of the
    page cache reads them as they are; otherwise a member is decoded by `decode` first and the index records each
    member's stored length (`sized`). `suffix`: added to an image member's name (`low.npy` -> `low.npy.zst`).
    `encode(npy, level)`: a member's stored bytes from its .npy file (header + pixels, `members.npy_file`);
    `decode(stored, size)`: the .npy file of `size` bytes back (raises FrameError saying what is wrong).
    `needs(what)`: imports the package encode and decode need, or raises a ConfigError naming the extra that installs
    it. `levels`: the levels `encode` takes (empty: none), `default_level` among them. `offsets_doc`: what the
    index's offsets point at, as a manifest's "layout" says. `per_member`: each image member is stored in a format
    of its own (`imageformats.FORMATS`: the members' names end in it, the index's `low_kind`/`high_kind` columns
    give it) instead of by `encode`/`decode`. `field`: the split field of the manifest that names the encoding."""

    name: str
    plain: bool
    suffix: str = ""
    encode: Callable[[Any, int], bytes] = _as_is
    decode: Callable[[Any, int], bytes] = _as_stored
    needs: Callable[[str], Any] = _nothing
    levels: range = range(0)
    default_level: int | None = None
    offsets_doc: str = "byte offset of each array's pixels in its tar"
    per_member: bool = False
    field: str = FIELD

    def __post_init__(self) -> None:
        if not self.name or not self.name.isidentifier():
            raise ValueError(f"Encoding.name {self.name!r}: expected a short identifier (raw, zstd)")
        if not (callable(self.encode) and callable(self.decode) and callable(self.needs)):
            raise TypeError(f"encoding {self.name}: encode, decode and needs must be callable")
        if (self.plain or self.suffix) if self.per_member else self.plain == bool(self.suffix):
            raise ValueError(f"encoding {self.name}: a plain encoding keeps the members' names (no suffix), one of "
                             "per-member formats names each member by its format, any other adds a suffix of its own")
        if (self.default_level is not None) != bool(self.levels) or (self.levels and
                                                                    self.default_level not in self.levels):
            raise ValueError(f"encoding {self.name}: default_level {self.default_level!r} must be one of its levels")

    def __reduce__(self):  # pickled by name: a worker gets the table's own entry back
        return _named, (self.name,)

    @property
    def sized(self) -> bool:
        """The index records each member's stored length (`low_bytes`/`high_bytes` in the manifest or index file)."""
        return not self.plain

    @property
    def stored(self) -> str | None:
        """The value of its manifest `field` in a split of this encoding ("zstd", "encoded"; None: left out)."""
        return None if self.plain else self.name

    def member_suffix(self, suffix: str, kind=None) -> str:
        """An image member's suffix (`low.npy`) as stored in a split of this encoding (`low.npy.zst`); per-member
        formats: as stored in `kind` (an `imageformats.ImageFormat`: `low.jpg`)."""
        if self.per_member:
            return kind.member_suffix(suffix.split(".")[0])
        return suffix + self.suffix

    def require(self, what: str):
        """The package this encoding needs (None if it needs none); a ConfigError naming the extra that installs it
        if it is missing (`what` needs it: "reading …", "--compress zstd")."""
        return self.needs(what)

    def require_for(self, where: str, split: str, doing: str):
        """`require` for a split of this encoding: "<where>: split 'train' is compressed with zstd; reading it needs
        the zstandard package, …"."""
        return self.require(f"{where}: split {split!r} is compressed with {self.name}; {doing}")


RAW = Encoding("raw", plain=True)
ZSTD = Encoding("zstd", plain=False, suffix=".zst", encode=codec.compress, decode=codec.decompress,
                needs=codec.zstandard, levels=codec.LEVELS, default_level=codec.DEFAULT_LEVEL,
                offsets_doc="byte offset of each image member's data (one zstd frame holding the .npy file) in its "
                            "tar; index.low_bytes/high_bytes: the frame's length")
ENCODED = Encoding("encoded", plain=False, per_member=True, field=STORE,
                   offsets_doc="byte offset of each image member's stored data in its tar: an npy member's pixels "
                               "(after its .npy header), a jpeg member's file bytes, a tiles member's bytes; "
                               "index.low_bytes/high_bytes: its stored length, index.low_kind/high_kind: its format "
                               "(0: npy, 1: jpeg, 2: tiles)")
ENCODINGS: dict[str, Encoding] = {e.name: e for e in (RAW, ZSTD, ENCODED)}
# "compression" value -> encoding (None: raw pixels)
STORED: dict[str | None, Encoding] = {e.stored: e for e in ENCODINGS.values() if e.field == FIELD}
COMPRESSIONS = tuple(value for value in STORED if value is not None)  # what `--compress` takes and manifests say


def _named(name: str) -> Encoding:
    return ENCODINGS[name]


def from_option(value: str | None) -> Encoding:
    """The encoding of `--compress value` (None: raw); a ConfigError for any other value."""
    if value not in STORED:
        raise ConfigError(f"--compress {value}: expected {' or '.join(COMPRESSIONS)} (leave it out for raw members)")
    return STORED[value]


def from_store(store: str, compress: str | None) -> Encoding:
    """The encoding of `--store store` with `--compress compress` (None: none); a ConfigError for any other store,
    and for zstd over an encoded store (its JPEG members are compressed already: zstd would gain little and cost a
    decode)."""
    if store not in STORES:
        raise ConfigError(f"--store {store}: expected {' or '.join(STORES)} (decoded: every image's pixels; encoded: "
                          "JPEG files kept as they are, other images lossless as tiles)")
    if store == ENCODED.name and compress is not None:
        raise ConfigError(f"--store encoded with --compress {compress}: an encoded pack keeps JPEG files as they are "
                          "and stores its other images decoded into lossless tiles, zstd frames already; leave out "
                          f"--compress (or pack --store decoded --compress {compress})")
    return ENCODED if store == ENCODED.name else from_option(compress)


def of_entry(entry: dict, where: str, split: str) -> Encoding:
    """The encoding of a split from its manifest entry; an unknown value is a ShardError naming the split."""
    store = entry.get(STORE)
    if store is not None:
        if store != ENCODED.stored or entry.get(FIELD) is not None:
            beside = f" beside \"{FIELD}\": {entry.get(FIELD)!r}" if entry.get(FIELD) is not None else ""
            raise ShardError(f"{where}: split {split!r}: \"{STORE}\" is {store!r}{beside}, this pairload reads "
                             f"{ENCODED.stored!r} alone; repack with this version of `pairload pack`")
        return ENCODED
    value = entry.get(FIELD)
    try:
        return STORED[value]
    except (KeyError, TypeError):  # TypeError: an unhashable value (a list) in an edited manifest
        raise ShardError(f"{where}: split {split!r}: \"{FIELD}\" is {value!r}, this pairload reads "
                         f"{', '.join(map(repr, COMPRESSIONS))} or none; repack with this version of `pairload pack`"
                         ) from None
