"""The host's part of decoding lossless `tiles` members on the GPU (`memory.tiles`), numpy only: every tiles member
read so far as rows of flat arrays (`TileTable`: its geometry, each tile's predictor, CRC-32 and whether this process
checked it, each frame's offset and length), so that a decode call's plan (`plan`) is numpy over all its members'
wanted tiles at once, and its staging (`stage`) a few contiguous copies per thread.
"""

from __future__ import annotations

from concurrent.futures import Executor

import numpy as np

from ...format import imageformats
from ...format.crc import crc32
from ...format.tiles import TILE, TiledImage, read_tiled, tables_size

FRAMES_KEPT = 1 << 22  # frames whose tables a TileTable keeps (16 bytes each: 64 MB; 600x400 RGB members have 18,
# so 233,000 of them); past that it starts again, empty
GEOMETRY = ("h", "w", "channels", "itemsize", "tile", "across", "planes", "tiles", "tile0", "frame0")
TILES_CODE = imageformats.TILES.code


class TileTable:
    """The tables of the tiles members of `n` samples (per sample an input and a target), rows of flat arrays filled
    at each member's first use (`rows`): per member its GEOMETRY (height, width, channels, bytes per value, tile
    side, tiles across, frames per tile, tiles, and where its tiles and frames start in the flat arrays); per tile its
    predictor (`modes`), CRC-32 (`crcs`) and whether its bytes were checked in this process (`checked`, the memo
    `stage` updates); per frame its offset from the member's start and its length."""

    def __init__(self, n: int):
        self.slot = np.full((2, n), -1, dtype=np.int64)  # (side, sample) -> row
        self.geometry = np.zeros((0, len(GEOMETRY)), dtype=np.int64)
        self.modes = np.zeros(0, dtype=np.int64)
        self.crcs = np.zeros(0, dtype=np.int64)
        self.checked = np.zeros(0, dtype=bool)
        self.offsets = np.zeros(0, dtype=np.int64)
        self.lengths = np.zeros(0, dtype=np.int64)
        self.members = self.tiles = self.frames = 0  # rows, tiles and frames in use

    @classmethod
    def of(cls, images: list[TiledImage]) -> "TileTable":
        """A table of these members, as the inputs of samples 0..n-1."""
        table = cls(len(images))
        table.rows(np.arange(len(images)), np.zeros(len(images), dtype=np.int64), lambda m: images[m])
        return table

    def column(self, name: str, rows: np.ndarray) -> np.ndarray:
        """GEOMETRY column `name` of these rows."""
        return self.geometry[rows, GEOMETRY.index(name)]

    def rows(self, samples: np.ndarray, sides: np.ndarray, read) -> np.ndarray:
        """The rows of these members (sample, side), reading `read(m)` (member m's `TiledImage`, checked) for those
        not in the table yet: per-member Python only at a member's first use."""
        row = self.slot[sides, samples]
        new = np.flatnonzero(row < 0)
        if not len(new):
            return row
        images = [read(int(m)) for m in new]
        frames = sum(len(t.offsets) for t in images)
        if self.frames + frames > FRAMES_KEPT:  # full: start again with this call's members
            self.slot[:] = -1
            self.members = self.tiles = self.frames = 0
            new = np.arange(len(samples))
            images = [read(int(m)) for m in new]
            frames = sum(len(t.offsets) for t in images)
        tiles = sum(len(t.modes) for t in images)
        geometry = np.array([(t.h, t.w, t.channels, t.itemsize, t.tile, t.grid[1], t.planes, len(t.modes), 0, 0)
                             for t in images], dtype=np.int64).reshape(len(images), len(GEOMETRY))
        geometry[:, 8] = self.tiles + _starts(geometry[:, 7])
        geometry[:, 9] = self.frames + _starts(geometry[:, 6] * geometry[:, 7])
        self.geometry = _put(self.geometry, self.members, geometry)
        self.modes = _put(self.modes, self.tiles, np.concatenate([t.modes for t in images]))
        self.crcs = _put(self.crcs, self.tiles, np.concatenate([t.crcs for t in images]))
        self.checked = _put(self.checked, self.tiles, np.zeros(tiles, dtype=bool))
        self.offsets = _put(self.offsets, self.frames, np.concatenate([t.offsets for t in images]))
        self.lengths = _put(self.lengths, self.frames, np.concatenate([t.lengths for t in images]))
        self.slot[sides[new], samples[new]] = self.members + np.arange(len(new))
        self.members, self.tiles, self.frames = self.members + len(new), self.tiles + tiles, self.frames + frames
        return self.slot[sides, samples]

    def windows(self, rows: np.ndarray, windows: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(each wanted tile's member, the tile) of members `rows` reading `windows` ((top, left, bottom, right) of
        the input's pixels per member, a negative top: the whole image; `scale`: each member's pixels per input
        pixel), each member's tiles in order."""
        side, across, tiles = (self.column(k, rows) for k in ("tile", "across", "tiles"))
        whole = windows[:, 0] < 0
        top, left, bottom, right = (windows[:, k] * scale for k in range(4))
        r0 = np.where(whole, 0, top // side)
        c0 = np.where(whole, 0, left // side)
        nr = np.where(whole, tiles // np.maximum(across, 1), (bottom - 1) // side - r0 + 1)
        nc = np.where(whole, across, (right - 1) // side - c0 + 1)
        member = np.repeat(np.arange(len(rows)), nr * nc)
        q = np.arange(len(member)) - _starts(nr * nc)[member]
        r, c = np.divmod(q, nc[member])
        return member, (r0[member] + r) * across[member] + c0[member] + c


class TilePlan:
    """What a decode call does. Staging, per run of consecutive wanted tiles of one member: its bytes' `source`
    (among the call's byte arrays), where they start and end there (`lo`, `hi`) and where they go (`at`, `staged`
    bytes in all); per tile to check (`check_*`: those not checked before): its run, its staged start and end, its
    CRC-32, its member and tile, and its row among the table's tiles. Then per frame its offset and length in the
    staged bytes, its decoded size, where it is decoded to in the scratch buffer, and its member; per tile its first
    frame's scratch offset, size, predictor, channels and value size, the byte offset of its top-left pixel in the
    images' buffer and its image's row length in bytes; per member where its image starts in that buffer
    (`image_at`, with the buffer's size last: an image holds only the rows its wanted tiles cover) and where its row 0
    would be (`image_base`: the offset its pixel (y, x) is addressed from, as for a whole image)."""

    def __init__(self, **columns):
        self.__dict__.update(columns)


def plan(table: TileTable, rows: np.ndarray, source: np.ndarray, start: np.ndarray, member: np.ndarray,
         tile: np.ndarray) -> TilePlan:
    """The `TilePlan` of decoding tiles `tile` of members `member` (indices into `rows`, each member's tiles in
    order): member m is table row `rows[m]`, its bytes start at `start[m]` of byte array `source[m]`. Numpy over
    every wanted tile and frame at once."""
    geo = table.geometry[rows]
    mt, tile = np.asarray(member, dtype=np.int64), np.asarray(tile, dtype=np.int64)
    h, w, c, item, side, across, planes = (geo[mt, k] for k in range(7))
    gy, gx = np.divmod(tile, np.maximum(across, 1))
    # each member's image holds the rows its wanted tiles cover, not all of them (a 256-pixel crop of a 3840x2160
    # member: at most 512 of its 2160 rows); `image_base` is where its row 0 would be, as the kernels address it
    row0 = np.full(len(rows), np.iinfo(np.int64).max, dtype=np.int64)
    row1 = np.zeros(len(rows), dtype=np.int64)
    np.minimum.at(row0, mt, gy * side)
    np.maximum.at(row1, mt, np.minimum(h, (gy + 1) * side))
    row0 = np.minimum(row0, row1)
    member_row = geo[:, 1] * geo[:, 2] * geo[:, 3]  # each member's row, in bytes
    image_at = np.concatenate([[0], np.cumsum(((row1 - row0) * member_row + 255) // 256 * 256)])
    of_all = geo[mt, 8] + tile  # each wanted tile's row among the table's tiles
    frame_tile = np.repeat(np.arange(len(tile)), planes)
    first = _starts(planes)  # each wanted tile's first frame in the plan
    global_frame = (geo[mt, 9] + tile * planes)[frame_tile] + np.arange(len(frame_tile)) - first[frame_tile]
    member_offset = table.offsets[global_frame]
    length = table.lengths[global_frame]
    run, run_first, run_last = tile_runs(mt, tile)
    lo = member_offset[first[run_first]]
    last_frame = first[run_last] + planes[run_last] - 1
    hi = member_offset[last_frame] + length[last_frame]
    at = np.concatenate([[0], np.cumsum((hi - lo + 15) // 16 * 16)])
    frame_offset = (at[:-1] - lo)[run][frame_tile] + member_offset
    th, tw = np.minimum(side, h - gy * side), np.minimum(side, w - gx * side)
    frame_bytes = np.repeat(th * tw, planes)
    pixel = c * item
    scratch_at = _starts(frame_bytes)
    # the tiles whose CRC-32 is checked as they are staged: those not checked before in this process
    need = np.flatnonzero(~table.checked[of_all])
    last_of_tile = (first + planes - 1)[need]
    run_member = mt[run_first]
    return TilePlan(source=np.asarray(source, dtype=np.int64)[run_member], lo=lo + start[run_member],
                    hi=hi + start[run_member], at=at[:-1], staged=max(int(at[-1]), 16),
                    check_run=run[need], check_lo=frame_offset[first[need]],
                    check_hi=frame_offset[last_of_tile] + length[last_of_tile], check_crc=table.crcs[of_all[need]],
                    check_member=mt[need], check_tile=tile[need], check_row=of_all[need],
                    frame_offset=frame_offset, frame_length=length, frame_bytes=frame_bytes,
                    frame_member=mt[frame_tile], scratch_at=scratch_at, tile_at=scratch_at[first], tile_h=th,
                    tile_w=tw, mode=table.modes[of_all],
                    out_at=image_at[:-1][mt] + ((gy * side - row0[mt]) * w + gx * side) * pixel, row_bytes=w * pixel,
                    channels=c, itemsize=item, image_at=image_at, image_base=image_at[:-1] - row0 * member_row)


def stage(p: TilePlan, sources: list[np.ndarray], out: np.ndarray, pool: Executor, threads: int,
          table: TileTable) -> tuple[int, int] | None:
    """Copy the plan's runs from `sources` into `out` (`p.staged` bytes), on `threads` threads of `pool`, each a
    stretch of consecutive runs of about as many bytes, checking the CRC-32 of each tile the plan checks as its run
    is copied (while its bytes are in the cache); (member, tile) of the first damaged one in the plan's order, or
    None, and then every checked tile marked in the table's memo."""
    n = len(p.lo)
    size = p.hi - p.lo
    cut = np.searchsorted(np.cumsum(size), np.arange(1, threads) * (int(size.sum()) / threads), side="right")
    edges = [0, *np.minimum(cut + 1, n).tolist(), n]
    src, lo, hi, at = (a.tolist() for a in (p.source, p.lo, p.hi, p.at))
    checks = np.searchsorted(p.check_run, np.arange(n + 1)).tolist()  # each run's checks: checks[r]..checks[r+1]
    check_lo, check_hi, check_crc = (a.tolist() for a in (p.check_lo, p.check_hi, p.check_crc))

    def copy(a: int, b: int) -> int | None:
        if checks[a] == checks[b]:  # nothing to check (every tile checked before): the copies alone
            for r in range(a, b):
                out[at[r]:at[r] + hi[r] - lo[r]] = sources[src[r]][lo[r]:hi[r]]
            return None
        for r in range(a, b):
            out[at[r]:at[r] + hi[r] - lo[r]] = sources[src[r]][lo[r]:hi[r]]
            for k in range(checks[r], checks[r + 1]):
                if crc32(out[check_lo[k]:check_hi[k]]) != check_crc[k]:
                    return k
        return None

    parts = [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    found = [k for k in pool.map(lambda ab: copy(*ab), parts) if k is not None]
    if found:
        k = min(found)
        return int(p.check_member[k]), int(p.check_tile[k])
    table.checked[p.check_row] = True
    return None


def _put(column: np.ndarray, at: int, values: np.ndarray) -> np.ndarray:
    """`column` with `values` written from `at` on, grown (doubled) where it is too short."""
    end = at + len(values)
    if end > len(column):
        grown = np.zeros((max(end, 2 * len(column)), *column.shape[1:]), dtype=column.dtype)
        grown[:at] = column[:at]
        column = grown
    column[at:end] = values
    return column


def _starts(counts: np.ndarray) -> np.ndarray:
    """Where each of consecutive runs of `counts` starts."""
    counts = np.asarray(counts, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts


def windows_read(plans, samples: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per sample of `samples` (sorted), the (top, left, bottom, right) of the input's pixels the windows of `plans`
    read, within the image; -1 everywhere for a sample some plan reads whole."""
    out = np.full((len(samples), 4), -1, dtype=np.int64)
    out[:, :2] = np.iinfo(np.int64).max
    out[:, 2:] = 0
    whole = np.zeros(len(samples), dtype=bool)
    for bp in plans:
        at = np.searchsorted(samples, bp.index)
        if bp.crop is None:
            whole[at] = True
            continue
        h, w = bp.out_hw(sizes)
        y, x = np.asarray(bp.y, dtype=np.int64), np.asarray(bp.x, dtype=np.int64)
        np.minimum.at(out[:, 0], at, y)
        np.minimum.at(out[:, 1], at, x)
        np.maximum.at(out[:, 2], at, y + h)
        np.maximum.at(out[:, 3], at, x + w)
    hw = sizes[samples]
    out[:, 0:2] = np.maximum(out[:, 0:2], 0)
    out[:, 2] = np.minimum(out[:, 2], hw[:, 0])
    out[:, 3] = np.minimum(out[:, 3], hw[:, 1])
    whole |= (out[:, 2] <= out[:, 0]) | (out[:, 3] <= out[:, 1])
    out[whole] = -1
    return out


def read_ranges(source, table: TileTable, plans: list, inputs: bool, scale: int, sides: tuple | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(batch, shard, start, end) of the bytes the batches `plans` make a decode call read of `source`, a batch's
    ranges numbered from 0: of a tiled member whose tables `table` holds, or whose tile starts the index keeps
    (`ShardSource.tile_starts`), only the tiles its windows touch, in runs of consecutive tiles (a 256-pixel crop of a
    600x400 member: 4 of its 6 tiles; of a 3840x2160 one, 4 of 135); of any other member (another format, or a tiled
    one whose tables are not known: they are in it) its stored bytes. `inputs` False: the targets only; `scale`: the
    target's pixels per input pixel; `sides`: `_sides` of these, where the caller has them. Numpy only."""
    index, batch, rows, j, k, starts = _sides(source, plans, inputs) if sides is None else sides
    samples = np.unique(index)  # the windows as the decode call plans them (`windows_read`)
    windows = windows_read(plans, samples, source.sizes)[np.searchsorted(samples, index)]
    slot = table.slot[k, index[j]]
    tiles = rows.format[j, k] == TILES_CODE
    tiled = tiles & (slot >= 0)
    member, tile = table.windows(slot[tiled], windows[j[tiled]], np.where(k[tiled] == 1, scale, 1))
    geo = table.geometry[slot[tiled]]
    planes = geo[member, 6]
    first = geo[member, 9] + tile * planes  # each wanted tile's first frame, and its last
    last = first + planes - 1
    _, run_first, run_last = tile_runs(member, tile)  # their frames lie one after another in the member's bytes
    lo = table.offsets[first[run_first]]
    hi = table.offsets[last[run_last]] + table.lengths[last[run_last]]
    tj, tk = j[tiled][member[run_first]], k[tiled][member[run_first]]
    indexed = tiles & ~tiled & _indexed(starts, j, k)  # where the index says where its tiles start
    ij, ik = j[indexed], k[indexed]
    ilo = ihi = np.zeros(0, np.int64)
    if len(ij):
        s = np.where(ik == 1, scale, 1)[:, None]
        at, ilo, ihi = index_runs(source.sizes[index[ij]] * s, windows[ij] * np.where(windows[ij] < 0, 1, s),
                                  starts[ij, ik], rows.length[ij, ik])
        ij, ik = ij[at], ik[at]
    other = ~tiled & ~indexed
    oj, ok = j[other], k[other]
    return (np.concatenate([batch[tj], batch[ij], batch[oj]]),
            np.concatenate([rows.shard[tj], rows.shard[ij], rows.shard[oj]]),
            np.concatenate([rows.offset[tj, tk] + lo, rows.offset[ij, ik] + ilo, rows.offset[oj, ok]]),
            np.concatenate([rows.offset[tj, tk] + hi, rows.offset[ij, ik] + ihi,
                            rows.offset[oj, ok] + rows.length[oj, ok]]))


def index_runs(hw: np.ndarray, windows: np.ndarray, starts: np.ndarray, length: np.ndarray, tile: int = TILE
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runs of tiles that windows touch, from tile starts: per member its size `hw` (m, 2), the window it reads
    ((m, 4): top, left, bottom, right; a negative top: the whole image), where each of its tiles starts (`starts`,
    (m, W): `ShardSource.tile_starts`) and its stored bytes (`length`); (member, lo, hi) of each run, one a row of
    tiles, a run ending where the tile after it starts (or at the member's end)."""
    h, w = hw[:, 0], hw[:, 1]
    across, down = -(-w // tile), -(-h // tile)
    whole = windows[:, 0] < 0
    r0, c0 = np.where(whole, 0, windows[:, 0] // tile), np.where(whole, 0, windows[:, 1] // tile)
    r1 = np.where(whole, down - 1, (windows[:, 2] - 1) // tile)
    c1 = np.where(whole, across - 1, (windows[:, 3] - 1) // tile)
    rows = np.maximum(r1 - r0 + 1, 0)
    member = np.repeat(np.arange(len(hw)), rows)
    r = r0[member] + np.arange(len(member)) - _starts(rows)[member]
    first = r * across[member] + c0[member]
    after = r * across[member] + c1[member] + 1
    last = starts.shape[1] - 1
    end = length[member].astype(np.int64)
    lo = np.minimum(starts[member, np.clip(first, 0, last)].astype(np.int64), end)  # advice: never past the member
    hi = np.where(after < (across * down)[member], starts[member, np.clip(after, 0, last)].astype(np.int64), end)
    return member, lo, np.clip(hi, lo, end)


def _indexed(starts: np.ndarray | None, j: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Per member (row j, side k) whether the index keeps where its tiles start (`starts`: `_sides`')."""
    return np.zeros(len(j), dtype=bool) if starts is None else starts[j, k, 0] > 0


class TileReads:
    """What a decode stage's `ReadAhead` reads of its split's members (its `ranges`): of a tiled member, only the tiles
    the batches' windows touch (`read_ranges`), from the first epoch on. Where its tiles start is in the split's index
    (pack keeps it for members of up to `tiles.STARTS_MAX` tiles) or in the member's header and tables; where the
    index does not say, the reader reads a member's header itself, at its first use (the page at its start, asked
    for a block of batches ahead: `heads`), into a table of its own (the decode stage's is its own thread's). A member
    whose header cannot be read is read whole (its batch reports what is wrong with it). `inputs` False: the targets
    only; `scale`: the target's pixels per input pixel; `decoding`: the decode stage's table, read (never written)
    here: a member whose tile starts the index keeps has its header and tables asked for with its tiles while that
    table does not hold them (the decode stage parses them at the member's first use, and again after its table starts
    afresh: a page faulted in alone would bring the file's whole read-ahead window with it)."""

    HEAD = 4096  # what is read of a member's start: the header and tables of up to 3840x2160 RGB 8-bit (3,947 bytes)

    def __init__(self, source, inputs: bool, scale: int, decoding: TileTable):
        self.source, self.inputs, self.scale = source, inputs, scale
        self.table = TileTable(len(source.sizes))
        self.decoding = decoding

    def heads(self, plans: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shard, start, end) of the start of each tiled member of `plans` whose tables are not known yet (neither
        read before nor kept by the index)."""
        _, rows, j, k = self._unknown(_sides(self.source, plans, self.inputs))
        start = rows.offset[j, k]
        return rows.shard[j], start, start + np.minimum(rows.length[j, k], self.HEAD)

    def __call__(self, plans: list, read) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`read_ranges` of `plans`, the tables of its tiled members not known yet read first (`learn`)."""
        sides = self.learn(plans, read)  # the plans' members, gathered once for all steps
        batch, shard, start, end = read_ranges(self.source, self.table, plans, self.inputs, self.scale, sides)
        hb, hs, h0, h1 = self._indexed_heads(sides)
        return (np.concatenate([batch, hb]), np.concatenate([shard, hs]), np.concatenate([start, h0]),
                np.concatenate([end, h1]))

    def _indexed_heads(self, sides: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(batch, shard, start, end) of the header and tables (up to where its first tile starts) of each member among
        `sides` whose tile starts the index keeps and whose tables the decode stage does not hold, in the first batch
        of `sides` that reads it."""
        index, batch, rows, j, k, starts = sides
        if starts is None:
            return (np.zeros(0, np.int64),) * 4
        pick = (rows.format[j, k] == TILES_CODE) & _indexed(starts, j, k)
        pick[pick] = self.decoding.slot[k[pick], index[j[pick]]] < 0  # not parsed by the decode stage (yet)
        j, k = j[pick], k[pick]
        first = _first_uses(index, j, k)
        j, k = j[first], k[first]
        start = rows.offset[j, k]
        return batch[j], rows.shard[j], start, start + np.minimum(starts[j, k, 0].astype(np.int64), rows.length[j, k])

    def learn(self, plans: list, read) -> tuple:
        """Read the tables of the tiled members of `plans` (a sequence of what has `index` and a length) not known
        yet (`read(shard, start, size)`: those bytes of a shard, a uint8 array); the plans' members (`_sides`)."""
        sides = _sides(self.source, plans, self.inputs)
        index, rows, j, k = self._unknown(sides)
        first = _first_uses(index, j, k)
        images, got = [], []
        for m in first.tolist():
            i, jm, km = int(index[j[m]]), int(j[m]), int(k[m])
            shard, at, length = int(rows.shard[jm]), int(rows.offset[jm, km]), int(rows.length[jm, km])
            h, w = (int(v) * (self.scale if km else 1) for v in self.source.sizes[i])
            try:
                data = read(shard, at, min(length, self.HEAD))
                if (need := tables_size(data)) > len(data):
                    data = read(shard, at, min(length, need))
                images.append(read_tiled(data, self.source.members.side(km), h, w, check_crc=False, size=length))
            except (imageformats.MemberError, OSError):  # read whole: its decode reports it
                continue
            got.append(m)
        if got:
            got = np.asarray(got, dtype=np.int64)
            self.table.rows(index[j[got]], k[got], lambda n: images[n])
        return sides

    def _unknown(self, sides: tuple) -> tuple:
        """The tiled members among `sides` (`_sides` of some plans) whose tables are not known nor kept by the index:
        (the plans' samples, their stored members, and per member its row among them and its side)."""
        index, _, rows, j, k, starts = sides
        keep = (rows.format[j, k] == TILES_CODE) & (self.table.slot[k, index[j]] < 0) & ~_indexed(starts, j, k)
        return index, rows, j[keep], k[keep]


def _first_uses(index: np.ndarray, j: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Of members (row j of samples `index`, side k) in the order the plans read them, where each distinct member is
    first read (its first batch)."""
    return np.unique(np.stack([k, index[j]]), axis=1, return_index=True)[1]


def _sides(source, plans: list, inputs: bool) -> tuple:
    """The members the batches `plans` read of `source`: (their samples in order, each one's batch, their stored
    members, per member its row among them and its side, and where their tiles start as the index keeps it: None, or
    (samples, 2, W)): both sides, or the targets only (`inputs` False, or a targets-only split: one member for both)."""
    index = np.concatenate([bp.index for bp in plans]) if len(plans) else np.zeros(0, np.int64)
    batch = np.repeat(np.arange(len(plans)), [len(bp) for bp in plans])
    rows = source.stored_members(index)
    once = rows.offset[:, 0] == rows.offset[:, 1]  # a targets-only split: one member for both sides
    k = np.repeat(np.arange(2), len(index))
    j = np.tile(np.arange(len(index)), 2)
    keep = (k == 1) | (~once[j] & inputs)
    return index, batch, rows, j[keep], k[keep], source.tile_starts(index)


def tile_runs(member: np.ndarray, tile: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of consecutive wanted tiles of one member (`member`, `tile`: each member's tiles in order): each tile's
    run, and each run's first and last tile."""
    new = np.ones(len(tile), dtype=bool)
    new[1:] = (member[1:] != member[:-1]) | (tile[1:] != tile[:-1] + 1)
    first = np.flatnonzero(new)
    return np.cumsum(new) - 1, first, np.append(first[1:] - 1, len(tile) - 1)[:len(first)]


def bucket(n: int) -> int:
    """n rounded up to a multiple of an eighth of the next power of two at least n: four sizes an octave, at most a
    quarter more than n."""
    if n <= 8:
        return max(1, n)
    step = 1 << max(0, (n - 1).bit_length() - 3)
    return -(-n // step) * step
