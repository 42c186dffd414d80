"""Tar headers as a pack writes them: deterministic (fixed mtime, owner and mode, so the same input gives the same
bytes), a short ASCII name's block made without tarfile, and the sizes a planner needs without building them. What
`schema` lays samples out with; it re-exports these names."""

from __future__ import annotations

import tarfile

BLOCK = 512
RECORD = 20 * BLOCK  # tar pads the archive to a multiple of this, as GNU tar and Python's tarfile do
TAR_MTIME = 0
TAR_MODE = 0o644


def tar_header(name: str, size: int) -> bytes:
    """A deterministic tar header: fixed mtime, owner and mode, so the same input gives the same bytes. A short
    ASCII name takes one ustar block, made from tarfile's own block for another name (a pack writes three headers a
    pair, and tarfile's are most of the parent's work per pair besides hashing); any other name goes through
    tarfile, which adds the pax header it needs."""
    if len(name) < 100 and name.isascii() and size < 0o77777777777 and "\0" not in name:
        return _ustar_block(name, size)
    return _tarfile_header(name, size)


def _tarfile_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = TAR_MTIME
    info.mode = TAR_MODE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


_TEMPLATE: list[bytearray] = []  # tarfile's block for a one-letter name of size 0, with its checksum blanked


def _ustar_block(name: str, size: int) -> bytes:
    """`_tarfile_header(name, size)` for a short ASCII name: the name (NUL-padded to 100 bytes), the size (11 octal
    digits and a NUL) and the checksum (six octal digits, NUL, space: the sum of the block's bytes with the checksum
    field read as spaces) written into tarfile's block for another name, so every other field is tarfile's."""
    if not _TEMPLATE:
        block = bytearray(_tarfile_header("x", 0))
        block[0:100] = bytes(100)
        block[148:156] = b" " * 8
        _TEMPLATE.append(block)
    block = bytearray(_TEMPLATE[0])
    raw = name.encode("ascii")
    block[0:len(raw)] = raw
    block[124:136] = b"%011o\0" % size
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def header_size(name: str, size: int) -> int:
    """`len(tar_header(name, size))` without building it: one block for a short ASCII name (a planner lays out a
    million samples before it writes one)."""
    if len(name) < 100 and name.isascii() and size < 0o77777777777:
        return BLOCK
    return len(tar_header(name, size))


def padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def archive_end(offset: int) -> int:
    """Total file size of an archive whose last member ends at `offset` (two zero blocks, then record padding)."""
    end = offset + 2 * BLOCK
    return -(-end // RECORD) * RECORD
