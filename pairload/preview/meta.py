"""The source files of chosen samples: each sample's `<key>.json` member (the low and high paths relative to the
packed folder; a targets-only sample's low is None), read from its shard's tar headers; no pixel is read. A sheet
labels each pair with their folders.
"""

from __future__ import annotations

import json
import posixpath
import tarfile
from collections import defaultdict

from ..format import schema


def source_paths(ds, indices) -> dict[int, tuple[str | None, str]]:
    """{sample index: (low path, high path)} for `indices` of `ds` (a `ShardDataset`); a sample whose `.json`
    member cannot be read is left out (the sheet then shows no folder for it)."""
    wanted: dict[int, dict[str, int]] = defaultdict(dict)
    for i in indices:
        wanted[int(ds.index.shard[i])][schema.member_name(ds.keys[i], schema.META)] = int(i)
    found: dict[int, tuple[str | None, str]] = {}
    token = ds.acquire(list(indices))  # a remote split's shards made local (and held) while they are read
    try:
        for number, names in wanted.items():
            found.update(_read(ds.files[number], names))
    finally:
        ds.release(token)
    return found


def _read(path, names: dict[str, int]) -> dict[int, tuple[str | None, str]]:
    """The (low, high) paths of the members `names` of one shard, scanning its tar headers until all are seen."""
    out, left = {}, dict(names)
    try:
        with tarfile.open(path, "r:") as tf:
            for member in tf:
                i = left.pop(member.name, None)
                if i is None:
                    continue
                doc = json.loads(tf.extractfile(member).read())
                out[i] = (None if doc["low"] is None else str(doc["low"]), str(doc["high"]))
                if not left:
                    break
    except (OSError, tarfile.TarError, ValueError, KeyError, TypeError):
        pass  # labels only: a damaged shard is `pairload verify`'s to name
    return out


def folders(paths: tuple[str | None, str] | None) -> str:
    """'train/low | train/high': the folders of a pair's two files ('.' for the packed folder itself); of a stored
    target alone (no input file), its folder."""
    if paths is None:
        return ""
    shown = [posixpath.dirname(p.replace("\\", "/")) or "." for p in paths if p is not None]
    return " | ".join(shown)
