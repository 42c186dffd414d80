"""The registry of loader kinds: every kind loads its class, `make_loader` reads it (presets included), and the
benchmark rows and the CLI's kinds come from it."""

from __future__ import annotations

import pytest

from pairload import ConfigError, make_loader
from pairload.bench.rows import BASELINES, BENCH_ENTRIES
from pairload.kinds import KINDS, RAW, SHARDS, Kind, kind_help, kinds_that, lookup

from conftest import raw_and_shards


def test_every_kind_names_a_class_and_the_bench_has_a_row_for_each():
    from pairload.bench.entries import ENTRIES

    for kind in KINDS.values():
        assert callable(kind.load()) and kind.name in BENCH_ENTRIES and kind.name in kind_help()
        assert set(kind.preset) <= set(__import__("inspect").signature(kind.load().__init__).parameters)
    assert set(BENCH_ENTRIES) == set(ENTRIES) and set(BASELINES) <= set(BENCH_ENTRIES)


def test_make_loader_applies_a_kinds_preset(tmp_path):
    shards = raw_and_shards(tmp_path, 12) / "shards"
    ram = make_loader("ram", shards, batch_size=2, crop=16)
    wds = make_loader("wds", shards, batch_size=2, crop=16)
    assert (ram.DEAL, wds.DEAL) == ("strided", "by_shard") and type(ram) is type(wds)
    with pytest.raises(ConfigError, match=r"loader kind 'mmap': expected one of ram, wds, dali-external, dali-file"):
        make_loader("mmap", shards, batch_size=2, crop=16)


def test_what_differs_between_kinds_is_in_their_entries():
    assert kinds_that(reads=RAW) == ("dali-file",) and kinds_that(mixes=True) == ("ram", "wds", "dali-external")
    assert all(k.reads == SHARDS for k in KINDS.values() if k.mixes)
    assert {k.name for k in KINDS.values() if k.requires == "pairload.dali"} == {"dali-external", "dali-file"}
    assert lookup("wds") is KINDS["wds"]
    with pytest.raises(ConfigError, match=r"loader kind 'mmap': expected one of ram, wds, dali-external, dali-file"):
        lookup("mmap")
    with pytest.raises(ValueError, match="only a kind that reads shards mixes"):
        Kind("x", "m:C", "s", reads=RAW)
    with pytest.raises(ValueError, match="reads='folder'"):
        Kind("x", "m:C", "s", reads="folder", mixes=False)


def test_the_reference_loop_asks_the_kinds_entry_not_its_name(monkeypatch, tmp_path):
    from pairload.recipes.config import TrainConfig

    monkeypatch.setitem(KINDS, "raw-b", Kind("raw-b", "m:C", "another kind over the raw folders", reads=RAW,
                                             mixes=False))
    with pytest.raises(ConfigError, match=r"^--loader raw-b reads the dataset's image folders: pass --raw FOLDER$"):
        TrainConfig(loader="raw-b", shards=str(tmp_path))
    with pytest.raises(ConfigError, match=r"^--mix reads shard folders: use --loader ram, wds or dali-external, not "
                                          r"raw-b$"):
        TrainConfig(loader="raw-b", raw=str(tmp_path), mix=f"a={tmp_path}:1")
    cfg = TrainConfig(loader="raw-b", raw=str(tmp_path))
    assert cfg.kind is KINDS["raw-b"] and cfg.folders() == []
    with pytest.raises(ConfigError, match=r"^--loader wds reads packed shards: pass --shards SHARDS_DIR"):
        TrainConfig(loader="wds", raw=str(tmp_path))
