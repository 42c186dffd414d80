"""`open_shards`, the one way in: a folder or URL becomes a `ShardDataset`, a `{name: folder}` dict a `ShardMix`,
checked readable before any loader worker starts. Also re-exports the read side's public names, which the rest of
pairload and its users import from here."""

from __future__ import annotations

import os

from ..remote import urls
from .dataset import ShardDataset
from .info import info, read_manifest_at
from .mix import ShardMix
from .source import ShardSource
from .verify import VerifyReport, verify

__all__ = ["ShardDataset", "ShardMix", "ShardSource", "VerifyReport", "info", "open_shards", "read_manifest_at",
           "verify"]


def open_shards(path, split: str = "train", *, cache_dir: str | os.PathLike | None = None,
                cache_limit: int | None = None, storage_options: dict | None = None,
                targets_only: bool | tuple[str, ...] = False) -> ShardSource:
    """Random access over one split of a folder written by `pairload pack`; or, for mixing, several named ones as
    one index space: `{name: folder or (folder, split)}` (`ShardMix`; keys become "name/key"). A `ShardSource`
    (dataset or mix) is returned as it is. A folder may be a URL (s3://bucket/shards, https://host/shards, any
    fsspec URL): its shards are cached in `cache_dir`, at most `cache_limit` bytes of them, shared by every process
    of the node that uses the same folder; `storage_options` go to the fsspec backend (credentials, endpoint_url,
    ...).

    `targets_only`: read every split as targets only, for a degradation to make the inputs from: each sample's
    input is its stored target (`ds[i]` gives (key, high, high); members, offsets and checksums the target's, a packed
    raw target's levels for both), and a pair pack's stored inputs are never read. A targets-only pack (`pairload
    pack --targets-only`) reads so either way; `ShardSource.targets_only` says which a source is. For a mix,
    a tuple of source names reads those sources as targets only and the others as pairs."""
    if isinstance(path, ShardSource):
        if targets_only and not path.targets_only:
            return path.as_targets(targets_only if isinstance(targets_only, tuple) else None)
        return path
    cache = None
    places = [where[0] if isinstance(where, tuple) else where for where in path.values()] \
        if isinstance(path, dict) else [path]
    if any(urls.is_url(p) for p in places) and cache_dir is not None:
        from ..remote.cache import ShardCache

        cache = ShardCache(cache_dir, cache_limit, storage_options=storage_options)
    if isinstance(path, dict):
        parts = {}
        for name, where in path.items():
            folder, part_split = where if isinstance(where, tuple) else (where, split)
            only = str(name) in targets_only if isinstance(targets_only, tuple) else bool(targets_only)
            parts[str(name)] = _readable(ShardDataset(folder, part_split, cache=cache, targets_only=only))
        return ShardMix(parts)
    return _readable(ShardDataset(path, split, cache=cache, targets_only=bool(targets_only)))


def _readable(ds: ShardDataset) -> ShardDataset:
    """`ds`, once the package its encoding needs is known to be installed (before any loader worker starts)."""
    ds.index.encoding.require_for(ds.where, ds.split, "reading it")
    return ds
