"""What differs between URL schemes, in one table: the pip extra that brings each fsspec backend, the storage
options the backend expects nested, how a timeout is given to it, how a shard is streamed from it, and how
`pairload pack` writes there (read-only, an object store, or a file system). Every scheme-specific choice of the
read side and of the write side (`pairload.pack.upload`) looks its scheme up here. Imports neither torch nor any
fsspec backend (aiohttp only when an HTTP timeout is made)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

CHUNK = 8 << 20  # bytes per read of a streamed shard


def _aiohttp_timeout(seconds: float):
    """Connecting, and each read, may take `seconds`; a whole download has no total limit (a large shard on a slow
    link is not a stall)."""
    import aiohttp

    return aiohttp.ClientTimeout(total=None, sock_connect=seconds, sock_read=seconds)


def _http_timeouts(seconds: float) -> dict:
    return {"client_kwargs": {"timeout": _aiohttp_timeout(seconds)}}


def _s3_timeouts(seconds: float) -> dict:
    return {"config_kwargs": {"connect_timeout": seconds, "read_timeout": seconds}}


def _gcs_timeouts(seconds: float) -> dict:
    # gcsfs hands requests_timeout to every aiohttp request (None there would lift a session-wide timeout)
    return {"requests_timeout": _aiohttp_timeout(seconds)}


def _azure_timeouts(seconds: float) -> dict:
    whole = max(1, math.ceil(seconds))  # adlfs documents integer seconds
    return {"connection_timeout": whole, "read_timeout": whole}


def _no_timeouts(seconds: float) -> dict:
    return {}


@dataclass(frozen=True)
class Scheme:
    """One kind of URL. `extra`: `pip install 'pairload[extra]'` installs its backend ('' if none is known).
    `nested`: storage options the backend reads from `client_kwargs` (the CLI's KEY=VALUE items are put there).
    `timeouts(seconds)`: the backend's options that bound connecting and each read. `whole_get`: a shard is
    streamed by one GET of its whole body (HTTP: no HEAD first, so a 403 is reported as such) instead of large
    ranged blocks.

    The write side (`pairload pack RAW URL`): `writable`: pack may write there (HTTP(S) is read-only).
    `object_store`: an object appears only once its upload completes (one PUT, or the final call of a multipart
    upload; a failed upload leaves the previous object, or none), so pack puts each file under its own name, and the
    first part of a path is a bucket, which must exist. Any other backend (a file system: sftp://, hdfs://, adl://,
    memory://…) may show a half-written file: there pack uploads to a temporary name and moves it into place, and
    makes the folder."""

    extra: str = ""
    nested: tuple[str, ...] = ()
    timeouts: Callable[[float], dict] = _no_timeouts
    whole_get: bool = False
    timeout_keys: tuple[str, ...] = ()  # top-level options by which a user already sets the timeout
    writable: bool = True
    object_store: bool = False

    def __post_init__(self) -> None:
        if not callable(self.timeouts):
            raise TypeError(f"Scheme.timeouts must be callable, not {self.timeouts!r}")
        if self.object_store and not self.writable:
            raise ValueError("Scheme: an object store pack cannot write to is not one; set writable=True or "
                             "object_store=False")


_HTTP = Scheme(extra="http", timeouts=_http_timeouts, whole_get=True, timeout_keys=("timeout",), writable=False)
_S3 = Scheme(extra="s3", nested=("endpoint_url", "region_name"), timeouts=_s3_timeouts, object_store=True)
_GCS = Scheme(extra="gcs", timeouts=_gcs_timeouts, object_store=True)
_AZURE = Scheme(extra="azure", timeouts=_azure_timeouts, object_store=True)  # Blob storage and Data Lake Gen2
# Azure Data Lake Gen1 (adlfs' AzureDatalakeFileSystem): a hierarchical file system whose files are written block by
# block (not an object store), and whose backend takes none of the blob timeouts above
_ADL = Scheme(extra="azure")

SCHEMES: dict[str, Scheme] = {"http": _HTTP, "https": _HTTP, "s3": _S3, "s3a": _S3, "gs": _GCS, "gcs": _GCS,
                              "az": _AZURE, "abfs": _AZURE, "abfss": _AZURE, "adl": _ADL}
OTHER = Scheme()  # any other fsspec scheme: its backend's own defaults, written as a file system


def lookup(scheme: str) -> Scheme:
    return SCHEMES.get(scheme.lower(), OTHER)


def with_timeouts(scheme: str, options: dict | None, seconds: float) -> dict:
    """`options` with the scheme's timeouts of `seconds` added where the user set none (a value given in
    `options` always wins, also inside a nested dict such as s3fs's `config_kwargs`)."""
    out = dict(options or {})
    spec = lookup(scheme)
    if any(key in out for key in spec.timeout_keys):
        return out
    return _merge_defaults(out, spec.timeouts(seconds))


def _merge_defaults(given: dict, defaults: dict) -> dict:
    out = dict(given)
    for key, value in defaults.items():
        if key not in out:
            out[key] = value
        elif isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = _merge_defaults(out[key], value)
    return out


def stream_kwargs(scheme: str, size: int) -> dict:
    """`fs.open` arguments that read a `size`-byte shard once, front to back."""
    if lookup(scheme).whole_get:
        return {"block_size": 0, "size": size}
    return {"block_size": CHUNK, "cache_type": "none"}
