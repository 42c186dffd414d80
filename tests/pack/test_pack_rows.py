"""A shard's index rows filled a block at a time and spilled (`pack.rows.RowsBuilder` with a `Spill`) are the rows
kept whole in memory, whatever order the results come in and wherever a shared target's lead lies; and the
per-pair structures that keep a pack's memory small (`pack.coded.Coded`, `pack.shardplan.shared_targets`)."""

from types import SimpleNamespace

import numpy as np
import pytest

from pairload.folders.model import Pair, PairTable
from pairload.pack.coded import Coded
from pairload.pack.jobs import JobResult
from pairload.pack.rows import RowsBuilder, joined_keys
from pairload.pack.shardplan import shared_targets
from pairload.pack.spill import Spill, column_spec, joined_column

N = 23
LEADS = {3: 1, 4: 1, 5: 1, 9: 8, 12: 8, 13: 8, 22: 20}  # sample -> the earlier sample storing its target


def pairs(n: int = N) -> list[Pair]:
    return [Pair("train", f"{k:03d}", f"/r/low/{k:03d}.png", f"/r/high/{LEADS.get(k, k):03d}.png",
                 f"low/{k:03d}.png", f"high/{LEADS.get(k, k):03d}.png") for k in range(n)]


def fill(builder: RowsBuilder, order: list[int]) -> None:
    for i in range(N):
        lay = SimpleNamespace(height=4 + i, width=6, low_data=1000 * i, high_data=1000 * LEADS.get(i, i) + 500,
                              low_bytes=7 * i, high_bytes=9 * i, low_kind=1, high_kind=2)
        builder.laid(i, lay, LEADS.get(i, -1))
    for i in order:
        own = i not in LEADS
        builder.result(i, JobResult(i, notes=("low:gray",) if i == 7 else (), crc_low=10 + i,
                                    crc_high=20 + i if own else None))


@pytest.mark.parametrize("block", [1, 4, 8, N])
def test_spilled_blocks_are_the_rows_kept_whole(tmp_path, block):
    order = list(np.random.default_rng(block).permutation(N))
    whole = RowsBuilder("train", "s", pairs(), 0, N, sized=True, kinds=True)
    fill(whole, order)
    spill = Spill(tmp_path)
    blocks = RowsBuilder("train", "s", pairs(), 0, N, sized=True, kinds=True, spill=spill, block=block)
    fill(blocks, order)
    a, b = whole.finish(10, "x"), blocks.finish(10, "x")
    assert list(a.columns) == list(b.columns) and a.notes == b.notes == [("low/007.png", "gray")]
    for name in a.columns:
        assert column_spec(b.columns, name) == (a.columns[name].dtype, a.columns[name].shape)
        np.testing.assert_array_equal(b.columns[name], a.columns[name], err_msg=name)
    crc = a.columns["crc32"]
    assert crc[4, 1] == crc[1, 1] == 21 and crc[22, 1] == 40  # a shared target's CRC is its lead's
    spill.close()


def test_rows_finished_before_every_result_are_refused(tmp_path):
    builder = RowsBuilder("train", "s", pairs(), 0, N, sized=False, spill=Spill(tmp_path), block=4)
    fill(builder, list(range(N - 1)))
    with pytest.raises(AssertionError, match="without their results"):
        builder.finish(10, "x")


def test_coded_values_widen_their_codes_and_read_as_a_list():
    values = [(k % 300, 7) for k in range(1000)]
    coded = Coded(values)
    assert coded == values and coded[5:9] == values[5:9] and coded[-1] == values[-1] and len(coded) == 1000
    assert len(coded.distinct()) == 300 and coded[0] is coded[300]  # equal values: one object


def test_shared_targets_of_a_table_and_of_a_list_agree():
    listed = pairs() + [Pair("test", "001", "/r/a.png", "/r/high/001.png", "a.png", "high/001.png")]
    expected = [k in LEADS or k in LEADS.values() for k in range(N)] + [False]
    assert shared_targets(listed).tolist() == expected
    assert shared_targets(PairTable(listed)).tolist() == expected


def test_shards_joined_in_their_spill_are_the_concatenated_columns(tmp_path):
    spill = Spill(tmp_path)
    rows = []
    for first, n in ((0, 9), (9, 5), (14, 9)):
        builder = RowsBuilder("train", f"s{first}", pairs(), first, n, sized=False, spill=spill, block=4)
        for i in range(n):
            lay = SimpleNamespace(height=i, width=first, low_data=i, high_data=i)
            builder.laid(i, lay, -1)
            builder.result(i, JobResult(i, crc_low=first + i, crc_high=i))
        rows.append(builder.finish(10, "x"))
    in_memory = [{name: np.array(r.columns[name]) for name in r.columns} for r in rows]
    for name in ("hw", "crc32", "luma"):
        np.testing.assert_array_equal(joined_column([r.columns for r in rows], name),
                                      joined_column(in_memory, name), err_msg=name)
    keys = joined_keys(rows)
    assert list(keys) == [f"{k:03d}" for k in range(N)] and keys.ends.dtype == np.int64
    spill.close()
