"""The host's part of the GPU decode of lossless tiles (`cut.memory.tileplan`), on the CPU: a call's plan and staged
bytes give every wanted tile's very pixels (its frames decompressed where the plan says, as nvCOMP does), a window
plans the tiles it touches, a damaged tile is found by member and tile, and a tile is checked once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from pairload.format.codec import zstandard
from pairload.format.members import Member
from pairload.format.tiles import encode_tiles, read_tiled, tile_pixels
from pairload.cut.memory.tileplan import TileTable, bucket, plan, stage


def member(seed: int, h: int, w: int, c: int, dtype) -> np.ndarray:
    rng = np.random.default_rng(seed)
    top = np.iinfo(dtype).max
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(y * 5 + x * 3 + 50 * k) % (top + 1) for k in range(c)], axis=-1).astype(np.float64)
    return np.clip(base + rng.normal(0, top / 50, base.shape) * (x[..., None] > w // 2), 0, top).astype(dtype)


@pytest.fixture(scope="module")
def members():
    images = [member(0, 400, 600, 3, np.uint8), member(1, 37, 301, 1, np.uint16), member(2, 300, 513, 4, np.uint16),
              member(3, 5, 7, 3, np.uint8)]
    out = []
    for img in images:
        data = np.frombuffer(encode_tiles(img, tile=128), np.uint8)
        out.append((data, read_tiled(data, Member(img.dtype.name, img.shape[2]), *img.shape[:2])))
    return out


def staged_call(members, wanted, table=None, threads=3):
    """(plan, staged bytes, stage's result, table) of one call of `wanted` tiles per member, each member's bytes
    after a few bytes of padding in a source of its own, the sources in reverse order."""
    table = table or TileTable.of([t for _, t in members])
    pad = [np.concatenate([np.full(32 * (m + 1), 7, np.uint8), data]) for m, (data, _) in enumerate(members)]
    tile = np.concatenate([np.asarray(w, dtype=np.int64) for w in wanted])
    which = np.repeat(np.arange(len(members)), [len(w) for w in wanted])
    start = 32 * (np.arange(len(members)) + 1)
    p = plan(table, np.arange(len(members)), np.arange(len(members))[::-1], start, which, tile)
    out = np.zeros(p.staged, np.uint8)
    with ThreadPoolExecutor(threads) as pool:
        found = stage(p, pad[::-1], out, pool, threads, table)
    return p, out, found, table


def test_the_staged_frames_are_every_wanted_tiles_frames(members):
    wanted = [[0, 1, 3, 4, 5, 10], [2], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [0]]
    p, out, found, _ = staged_call(members, wanted)
    assert found is None
    zstd = zstandard("test")
    dctx = zstd.ZstdDecompressor()
    frames = iter(range(len(p.frame_offset)))
    for m, ((data, t), tiles) in enumerate(zip(members, wanted)):
        for tile in tiles:
            _, _, th, tw = t.tile_box(tile)
            at = [next(frames) for _ in range(t.planes)]
            planes = [np.frombuffer(dctx.decompress(bytes(out[p.frame_offset[f]:][:p.frame_length[f]])),
                                    np.uint8) for f in at]
            assert [len(x) for x in planes] == [th * tw] * t.planes
            stored = [data[t.offsets[f]:t.offsets[f] + t.lengths[f]] for f in range(tile * t.planes,
                                                                                   (tile + 1) * t.planes)]
            want = [np.frombuffer(dctx.decompress(bytes(s)), np.uint8) for s in stored]
            assert all(np.array_equal(a, b) for a, b in zip(planes, want)), (m, tile)
    assert next(frames, None) is None  # no frame more than the wanted tiles'
    assert tile_pixels(*members[0], wanted[0][0]).shape[:2] == (p.tile_h[0], p.tile_w[0])


def test_a_window_plans_the_tiles_it_touches(members):
    _, t = members[0]
    table = TileTable.of([t, t])
    windows = np.array([[100, 200, 356, 456], [-1, -1, -1, -1]])
    which, tile = table.windows(np.array([0, 1]), windows, np.array([1, 1]))
    assert tile[which == 0].tolist() == t.touched(100, 200, 256, 256).tolist()
    assert tile[which == 1].tolist() == list(range(len(t.modes)))
    which, tile = table.windows(np.array([0]), np.array([[50, 100, 178, 228]]), np.array([2]))
    assert tile.tolist() == t.touched(100, 200, 256, 256).tolist()


def test_a_damaged_tile_is_named_and_a_checked_tile_is_not_checked_again(members):
    data, t = members[0]
    damaged = data.copy()
    lo, hi = t.span(4)
    damaged[lo + 5] ^= 0xFF
    table = TileTable.of([t])
    _, _, found, _ = staged_call([(damaged, t)], [[3, 4, 5]], table)
    assert found == (0, 4)
    assert not table.checked.any()  # a call with a damaged tile marks nothing
    p, _, found, _ = staged_call([(data, t)], [[3, 4, 5]], table)
    assert found is None and table.checked[[3, 4, 5]].all() and table.checked.sum() == 3
    p, _, found, _ = staged_call([(damaged, t)], [[4]], table)  # checked once in this process: not again
    assert found is None and len(p.check_run) == 0


def test_each_image_holds_the_rows_its_tiles_cover_and_is_addressed_as_a_whole_image(members):
    """The kernel's placement done with numpy: each wanted tile's pixels written where the plan puts them, then every
    wanted tile read back through its member's `image_base` as a whole image's pixel (y, x) would be. A member holds
    only the rows its wanted tiles cover; nothing is written outside the buffer or over another member."""
    wanted = [[4, 5, 9], [2], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], []]  # tiles of 128, 5 across member 0
    rows = [256, 37, 300, 0]  # the rows they cover: member 0's first two rows of tiles, none of member 3
    p, _, found, _ = staged_call(members, wanted)
    assert found is None
    buffer = np.zeros(int(p.image_at[-1]), np.uint8)
    i = 0
    for m, ((data, t), tiles) in enumerate(zip(members, wanted)):
        for tile in tiles:
            got = tile_pixels(data, t, tile)
            raw = np.ascontiguousarray(got).view(np.uint8).reshape(got.shape[0], -1)
            for r in range(raw.shape[0]):
                at = int(p.out_at[i] + r * p.row_bytes[i])
                assert p.image_at[m] <= at and at + raw.shape[1] <= p.image_at[m + 1]  # within its own image
                buffer[at:at + raw.shape[1]] = raw[r]
            i += 1
    sizes = [(n * t.w * t.channels * t.itemsize + 255) // 256 * 256 for n, (_, t) in zip(rows, members)]
    assert np.diff(p.image_at).tolist() == sizes
    for m, ((data, t), tiles) in enumerate(zip(members, wanted)):
        pixel = t.channels * t.itemsize
        for tile in tiles:
            y, x, th, tw = t.tile_box(tile)
            got = [buffer[int(p.image_base[m] + ((y + r) * t.w + x) * pixel):][:tw * pixel] for r in range(th)]
            want = np.ascontiguousarray(tile_pixels(data, t, tile)).view(np.uint8).reshape(th, -1)
            assert np.array_equal(np.stack(got), want), (m, tile)


def test_device_buffers_come_in_four_sizes_an_octave_each_at_most_a_quarter_larger():
    """A decode call's buffers are rounded (`bucket`) so that a freed one fits a later call of about its size."""
    sizes = np.arange(1, 1 << 16)
    got = np.array([bucket(int(n)) for n in sizes])
    assert (got >= sizes).all() and (got <= np.ceil(sizes * 1.25)).all()
    for k in range(4, 16):  # the sizes (2^(k-1), 2^k] round to four
        octave = got[(sizes > 1 << (k - 1)) & (sizes <= 1 << k)]
        assert len(np.unique(octave)) == 4 and octave.max() == 1 << k
    assert bucket(25_000_000 + 1) == 25_165_824  # 3 × 2^23: a 3840x2160 RGB image's bytes and one


@pytest.fixture(scope="module")
def tiled_split(tmp_path_factory):
    """(dataset, a run's batch plans, its stored members, `tiled(i, k)`: sample i's side k read whole) of an encoded
    split of 300x560 pairs (2x3 tiles of 256) whose index keeps no tile starts (as a pack made before it did)."""
    return _tiled(tmp_path_factory, starts=False)


@pytest.fixture(scope="module")
def indexed_split(tmp_path_factory):
    """`tiled_split`, its index keeping each member's tile starts (as pack writes it)."""
    return _tiled(tmp_path_factory, starts=True)


def _tiled(tmp_path_factory, starts: bool):
    from pairload import make_loader
    from pairload.pack import shardwrite
    from pairload.pack.writer import PackOptions, pack
    from pairload.read.shards import ShardDataset

    from conftest import make_raw

    root = tmp_path_factory.mktemp("tiled")
    make_raw(root / "raw", 6, split="train", size=(300, 560))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shardwrite, "STARTS_MAX", shardwrite.STARTS_MAX if starts else 0)
        pack(root / "raw", root / "shards", PackOptions(workers=1, store="encoded"))
    ds = ShardDataset(root / "shards", "train")
    plans = list(make_loader("ram", root / "shards", batch_size=2, crop=96, seed=5).plan_for(0))
    rows = ds.stored_members(np.arange(len(ds)))

    def tiled(i: int, k: int):
        data = np.asarray(ds.shard_map(int(rows.shard[i])))[rows.offset[i, k]:][:rows.length[i, k]]
        return read_tiled(data, ds.members.side(k), *(int(v) for v in ds.sizes[i]))

    return ds, plans, rows, tiled


def test_reading_ahead_asks_for_the_tiles_the_windows_touch_of_members_read_before_and_whole_members_else(
        tiled_split):
    # what a split beyond memory reads ahead of its decode calls (`read_ranges`): a tiled member whose tables are
    # known, only the bytes of the tiles its crop touches (each tile's frames, as the staging copies them); a member
    # whose tables are not, its stored bytes whole
    from pairload.cut.memory.tileplan import read_ranges

    ds, plans, rows, tiled = tiled_split
    table = TileTable(len(ds))
    known = np.array([0, 1, 2])  # samples whose members were decoded before: their tables are kept
    table.rows(np.tile(known, 2), np.repeat([0, 1], len(known)), lambda m: tiled(int(known[m % 3]), m // 3))
    batch, shard, start, end = read_ranges(ds, table, plans, True, 1)
    assert (end > start).all() and len(batch) == len(shard)
    for b, bp in enumerate(plans):
        got = [(s, a, e) for bb, s, a, e in zip(batch, shard, start, end) if bb == b]
        want = 0
        for i, y, x in zip(bp.index.tolist(), bp.y.tolist(), bp.x.tolist()):
            for k in (0, 1):
                base, length = int(rows.offset[i, k]), int(rows.length[i, k])
                if i not in known:  # whole
                    assert (int(rows.shard[i]), base, base + length) in got
                    want += length
                    continue
                t = tiled(i, k)
                touched = [q for q in range(len(t.modes)) if (lambda ty, tx, th, tw: ty < y + 96 and y < ty + th
                                                              and tx < x + 96 and x < tx + tw)(*t.tile_box(q))]
                assert 0 < len(touched) < len(t.modes)  # a crop of 96 in 300x560: 1 to 4 of the 6 tiles
                for q in touched:  # each touched tile's bytes inside a range of the batch
                    a, e = t.span(q)
                    assert any(s == rows.shard[i] and r0 <= base + a and base + e <= r1 for s, r0, r1 in got)
                    # consecutive tiles read in one range, from the first's start to the last's end
                    want += e - (t.span(q - 1)[1] if q - 1 in touched else a)
        assert sum(e - a for _, a, e in got) == want  # and nothing more
    whole = sum(int(rows.length[i].sum()) for bp in plans for i in bp.index.tolist())
    assert (end - start).sum() < whole  # less than reading every member whole


def test_the_reader_reads_each_members_header_once_and_asks_for_the_touched_tiles_from_the_first_epoch(tiled_split):
    # `TileReads`, the reader's `ranges`: it knows no member's tables at first; it asks for each member's start
    # (`heads`), reads its header and tables there itself, and asks for the tiles the windows touch, the very ranges
    # of a reader that knew every member's tables; a member whose start is not a tiled member's header is read whole
    from pairload.cut.memory.tileplan import TileReads, read_ranges

    ds, plans, rows, tiled = tiled_split
    everything = TileTable(len(ds))
    n = len(ds)
    everything.rows(np.tile(np.arange(n), 2), np.repeat([0, 1], n), lambda m: tiled(m % n, m // n))
    used = np.unique(np.concatenate([bp.index for bp in plans]))
    sizes = {(int(rows.shard[i]), int(rows.offset[i, k])): int(rows.length[i, k]) for i in used.tolist()
             for k in (0, 1)}
    starts = set(sizes)

    reads = TileReads(ds, True, 1, TileTable(len(ds)))
    shard, start, end = reads.heads(plans)
    assert {(s, a): e - a for s, a, e in zip(shard.tolist(), start.tolist(), end.tolist())} == {
        key: min(TileReads.HEAD, size) for key, size in sizes.items()}  # each member's start, at most a page
    seen = []

    def read(s: int, a: int, size: int, damaged: tuple = ()) -> np.ndarray:
        seen.append((s, a))
        data = np.asarray(ds.shard_map(s))[a:a + size].copy()
        data[:4] = 0 if (s, a) in damaged else data[:4]
        return data

    got = reads(plans, read)
    want = read_ranges(ds, everything, plans, True, 1)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert sorted(seen) == sorted(starts)  # each member's start read once
    assert len(reads.heads(plans)[0]) == 0
    seen.clear()
    assert all(np.array_equal(g, w) for g, w in zip(reads(plans, read), want)) and not seen  # known from then on

    short = TileReads(ds, True, 1, TileTable(len(ds)))
    short.HEAD = 40  # tables longer than the first read (those of a 3840x2160 16-bit member): read on to their end
    seen.clear()
    assert all(np.array_equal(g, w) for g, w in zip(short(plans, read), want))
    assert sorted(seen) == sorted(list(starts) * 2)  # twice each

    bad = (int(rows.shard[used[0]]), int(rows.offset[used[0], 1]))  # its target's header overwritten
    fresh = TileReads(ds, True, 1, TileTable(len(ds)))
    batch, shard, start, end = fresh(plans, lambda s, a, size: read(s, a, size, damaged=(bad,)))
    whole = (shard == bad[0]) & (start == bad[1])
    assert whole.sum() == sum(int(used[0]) in bp.index.tolist() for bp in plans)  # whole, in each batch reading it
    assert (end[whole] - start[whole] == rows.length[used[0], 1]).all()
    assert len(fresh.heads(plans)[0]) == 1  # and tried again next time


def test_the_index_keeps_where_each_members_tiles_start_and_the_reader_reads_no_header(indexed_split):
    # pack keeps, in the split's index, where each tile of a tiles member starts: a reader asks for a crop's tiles
    # from the first epoch without reading the member's header itself (no wait for it): the runs of a reader that
    # knew every member's tables, each ending where the next tile starts (its last frame's end, rounded up to 16
    # bytes) or at the member's end, and, in the first batch that reads it, each member's header and tables (from its
    # start to its first tile) while the decode stage's table does not hold them: the decode stage parses them there,
    # and a page it faulted in alone would bring the file's read-ahead with it
    from pairload.cut.memory.tileplan import TileReads, read_ranges

    ds, plans, rows, tiled = indexed_split
    n = len(ds)
    starts = ds.tile_starts(np.arange(n))
    assert starts.shape == (n, 2, 6)  # 2x3 tiles a member
    for i in range(n):
        for k in (0, 1):
            t = tiled(i, k)
            assert starts[i, k].tolist() == [t.span(x)[0] for x in range(len(t.modes))]
    everything = TileTable(n)
    everything.rows(np.tile(np.arange(n), 2), np.repeat([0, 1], n), lambda m: tiled(m % n, m // n))

    decoding = TileTable(n)
    reads = TileReads(ds, True, 1, decoding)
    assert len(reads.heads(plans)[0]) == 0
    seen = []
    got = reads(plans, lambda s, a, size: seen.append((s, a)))
    assert not seen and reads.table.members == 0
    first = {}  # each member's (shard, start) -> (its first batch, where its first tile starts)
    for b, bp in enumerate(plans):
        for i in bp.index.tolist():
            for k in (0, 1):
                key = (int(rows.shard[i]), int(rows.offset[i, k]))
                first.setdefault(key, (b, key[1] + int(starts[i, k, 0])))
    heads = sorted((b, s, a, e) for (s, a), (b, e) in first.items())
    got = sorted(zip(*(x.tolist() for x in got)))
    assert [r for r in got if r in heads] == heads  # each header once, in its member's first batch
    got = [r for r in got if r not in heads]
    want = sorted(zip(*(x.tolist() for x in read_ranges(ds, everything, plans, True, 1))))
    assert len(got) == len(want) > 0
    for (gb, gs, ga, ge), (wb, ws, wa, we) in zip(got, want):
        assert (gb, gs, ga) == (wb, ws, wa) and we <= ge < we + 16
    decoding.rows(np.tile(np.arange(n), 2), np.repeat([0, 1], n), lambda m: tiled(m % n, m // n))  # all parsed
    again = reads(plans, lambda s, a, size: seen.append((s, a)))
    assert not seen and sorted(zip(*(x.tolist() for x in again))) == got  # then no header asked for
    decoding.slot[:] = -1  # the decode stage's table started afresh (full): each header asked for again
    assert sorted(zip(*(x.tolist() for x in reads(plans, None)))) == sorted(got + heads)


def test_the_runs_of_tiles_a_window_touches_from_where_the_tiles_start():
    from pairload.cut.memory.tileplan import index_runs

    hw = np.array([[400, 600]] * 4)  # 2x3 tiles of 256
    starts = np.array([[224, 1000, 2000, 3000, 4000, 5000, 0, 0]] * 4, dtype=np.uint32)
    windows = np.array([[-1, -1, -1, -1], [100, 300, 356, 556], [0, 0, 256, 256], [0, 520, 10, 600]])
    member, lo, hi = index_runs(hw, windows, starts, np.full(4, 6000))
    assert list(zip(member.tolist(), lo.tolist(), hi.tolist())) == [
        (0, 224, 3000), (0, 3000, 6000),  # the whole image: a run a row of tiles
        (1, 1000, 3000), (1, 4000, 6000),  # columns 1-2 of both rows
        (2, 224, 1000),  # the first tile alone
        (3, 2000, 3000)]  # the last tile of the first row: it ends where the next row starts


def test_a_mix_gives_each_sources_tile_starts(indexed_split, tiled_split):
    # a mix of a split whose index keeps tile starts and one whose index keeps none: the first's rows as its own,
    # zeros for the other's (its headers are read); none at all where no source keeps any
    from pairload.read.shards import ShardMix

    kept, none = indexed_split[0], tiled_split[0]
    mix = ShardMix({"a": none, "b": kept})
    n = len(none)
    got = mix.tile_starts(np.arange(2 * n)[::-1])
    assert np.array_equal(got[:n], kept.tile_starts(np.arange(n)[::-1])) and not got[n:].any()
    assert ShardMix({"a": none}).tile_starts([0, 1]) is None
