"""`pairload pack`'s entry point: `pack` writes the shards of a dataset folder into a local folder (`local`) or a URL
(`upload`), and re-exports what the CLI imports from here (`PackOptions`, the option parsers). Imports neither torch
nor DALI (nor fsspec or zstandard until a pack needs them)."""

from __future__ import annotations

import os
from typing import Callable

from ..errors import ConfigError
from .local import finish, pack_folder
from .options import PackOptions, PackReport, parse_size, parse_split_names, parse_wxh
from .parts import Part

__all__ = ["Part", "PackOptions", "PackReport", "finish_parts", "pack", "parse_size", "parse_split_names", "parse_wxh"]


def pack(raw_dir: str | os.PathLike, shards_dir: str | os.PathLike, options: PackOptions = PackOptions(),
         on_progress: Callable[[int, int], None] | None = None, *, staging: str | os.PathLike | None = None,
         storage_options: dict | None = None, keep_staging: bool = True,
         on_upload: Callable[[str, str], None] | None = None, part: Part | None = None) -> PackReport:
    """Pack the pairs under `raw_dir` into `shards_dir`. Raises a PairloadError (and writes no manifest) on bad input.

    `shards_dir` may be a URL (s3://, gs://, az://, any writable fsspec URL): the shards are packed into the local
    `staging` folder, each uploaded once it is finished, and the manifest uploaded last (see `pack.upload`);
    `storage_options` go to the fsspec backend, `on_upload(event, name)` reports each "uploaded", "skipped" or
    "deleted" object in order.

    `part`: make only that part of the pack (see `parts`; a local or shared folder, or a URL: `bucketparts`): every
    part plans alike and writes its own shards, and the last one to finish writes the manifest; `finish_parts` does
    it by hand."""
    from ..remote.urls import is_url, local_path

    if is_url(shards_dir):
        if part is not None and part.count > 1:
            from .bucketparts import pack_part_to_url

            return pack_part_to_url(raw_dir, os.fspath(shards_dir), options, on_progress, part=part, staging=staging,
                                    storage_options=storage_options, keep_staging=keep_staging, on_upload=on_upload)
        from .upload import pack_to_url

        return pack_to_url(raw_dir, os.fspath(shards_dir), options, on_progress, staging=staging,
                           storage_options=storage_options, keep_staging=keep_staging, on_upload=on_upload)
    if staging is not None or storage_options:
        raise ConfigError(f"{shards_dir}: a local folder; staging and storage_options (--staging, --storage-option) "
                          "apply to URL destinations only (s3://, gs://, az://…): drop them")
    return pack_folder(raw_dir, local_path(shards_dir), options, on_progress, part=part)


def finish_parts(shards_dir: str | os.PathLike, count: int | None = None, *, storage_options: dict | None = None,
                 staging: str | os.PathLike | None = None) -> PackReport:
    """Write the manifest of a pack made with `part=` once every part's record is in `shards_dir` (a folder, or a
    URL with its `storage_options`; `staging`: a local folder for the records meanwhile); raises an OutputError
    naming the missing parts before."""
    from pathlib import Path

    from ..remote.urls import is_url, local_path

    if is_url(shards_dir):
        from .bucketparts import finish_url

        return finish_url(os.fspath(shards_dir), count, storage_options, staging)

    out = Path(local_path(shards_dir))
    return finish(out, count, PackReport(shards_dir=out))
