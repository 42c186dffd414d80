"""`open_shards(pack, targets_only=True)`: any pair pack read as targets only, for a degradation to make the inputs
from. Each sample gives (key, high, high), its stored input never read (a damaged input member goes unnoticed); the
view survives pickling into a loader's workers; a mix is of one kind; a camera raw pack's packed target brings its
levels for both sides, a developed one leaves no sensor facts.

The pairs are conftest's: pair i's low pixel (y, x) is (i, y, x) mod 256 and its high 255 minus that."""

from __future__ import annotations

import pickle
import shutil

import numpy as np
import pytest

from conftest import pair_pixels
from pairload import open_shards
from pairload.errors import ShardError
from pairload.format.members import Member, Members
from pairload.read.shards import ShardDataset, ShardMix


def test_a_pair_pack_read_as_targets_only_gives_each_target_as_its_input(packed):
    pairs = open_shards(packed, "test")
    view = open_shards(packed, "test", targets_only=True)
    assert not pairs.targets_only and view.targets_only and len(view) == len(pairs) == 4
    for i in range(len(view)):
        key, low, high = view[i]
        want = pair_pixels(100 + i, 40, 56)[1]
        assert key == pairs.keys[i]
        np.testing.assert_array_equal(high, want)
        np.testing.assert_array_equal(low, want)
    np.testing.assert_array_equal(view.index.low, pairs.index.high)
    np.testing.assert_array_equal(view.index.crc, pairs.index.crc[:, [1, 1]])
    again = pickle.loads(pickle.dumps(view))  # as a loader's worker receives it (a version-5 index is mapped again)
    assert again.targets_only
    np.testing.assert_array_equal(again[3][1], pair_pixels(103, 40, 56)[1])


def test_the_stored_inputs_are_never_read(packed, tmp_path):
    copy = shutil.copytree(packed, tmp_path / "copy")
    pairs = open_shards(copy, "test")
    at = int(pairs.index.low[0])
    shard = copy / pairs.index.files[int(pairs.index.shard[0])]
    del pairs
    data = bytearray(shard.read_bytes())
    data[at - 20:at] = bytes(20)  # the input's .npy header: what a read of it checks first
    shard.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=r"key 00100: the .npy header of 00100.low.npy is not where the manifest says"):
        open_shards(copy, "test")[0]
    np.testing.assert_array_equal(open_shards(copy, "test", targets_only=True)[0][1], pair_pixels(100, 40, 56)[1])


def test_a_compressed_pair_pack_read_as_targets_only_decodes_each_target_for_both_sides(raw, tmp_path):
    pytest.importorskip("zstandard")
    from pairload.pack.writer import PackOptions, pack

    pack(raw, tmp_path / "z", PackOptions(workers=1, compress="zstd"))
    view = open_shards(tmp_path / "z", "test", targets_only=True)
    np.testing.assert_array_equal(view.index.low_bytes, view.index.high_bytes)
    for i in range(len(view)):  # the first decode of each checks its header and CRC-32 against the target's
        _, low, high = view[i]
        np.testing.assert_array_equal(low, pair_pixels(100 + i, 40, 56)[1])
        np.testing.assert_array_equal(high, low)


def test_a_mix_reads_the_named_sources_as_targets_only(packed):
    both = open_shards({"a": packed, "b": (packed, "test")}, targets_only=True)
    assert both.targets_only and len(both) == 12
    some = open_shards({"a": packed, "b": (packed, "test")}, targets_only=("a",))
    assert not some.targets_only and some.targets_only_sources == ("a",)
    for i in (0, 9):  # a's inputs are its targets, b's are its stored inputs (255 - target in this fixture)
        _, low, high = some[i]
        np.testing.assert_array_equal(low, high if i < 8 else 255 - high)
    mixed = ShardMix({"a": ShardDataset(packed, targets_only=True), "b": ShardDataset(packed)})
    assert mixed.targets_only_sources == ("a",)
    opened = open_shards(packed)
    view = open_shards(opened, targets_only=True)  # an opened source is viewed, not reopened
    assert view.targets_only and not opened.targets_only
    np.testing.assert_array_equal(view[0][1], view[0][2])
    assert open_shards(mixed, targets_only=("b",)).targets_only_sources == ("a", "b")


def test_a_camera_raw_pair_pack_read_as_targets_only(tmp_path):
    pytest.importorskip("rawpy")
    pytest.importorskip("tifffile")
    from test_pack_camera import sid_tree

    from pairload.pack.writer import PackOptions, pack

    sid_tree(tmp_path / "SID", scenes=range(1))  # two short exposures of one scene, sharing its 10 s target
    listing = f"train={tmp_path / 'SID' / 'Sony_train_list.txt'}"
    pack(tmp_path / "SID", tmp_path / "packed", PackOptions(workers=1, pairs_file=(listing,), raw_target="packed"))
    pairs = open_shards(tmp_path / "packed")
    view = open_shards(tmp_path / "packed", targets_only=True)
    assert view.members == Members(Member("uint16", 4), Member("uint16", 4))
    np.testing.assert_array_equal(view.sensor.levels, pairs.sensor.levels_high)
    np.testing.assert_array_equal(view.sensor.levels_high, pairs.sensor.levels_high)
    assert view.sensor.ratio.tolist() == [1, 1] and view.sensor.exposure.tolist() == [[10, 10], [10, 10]]
    assert pairs.sensor.ratio.tolist() != [1, 1]
    for i in range(2):
        np.testing.assert_array_equal(view[i][1], pairs[i][2])
        np.testing.assert_array_equal(view[i][2], pairs[i][2])
    pack(tmp_path / "SID", tmp_path / "developed", PackOptions(workers=1, pairs_file=(listing,)))
    pairs = open_shards(tmp_path / "developed")
    view = open_shards(tmp_path / "developed", targets_only=True)
    # a developed target is 16-bit RGB at twice the packed input's size, with no sensor counts to describe
    assert view.members == Members(Member("uint16", 3), Member("uint16", 3)) and view.sensor is None
    np.testing.assert_array_equal(view.sizes, 2 * pairs.sizes)
    np.testing.assert_array_equal(view[1][1], pairs[1][2])
