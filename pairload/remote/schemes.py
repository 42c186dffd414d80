"""What differs between URL schemes, in one table: the pip extra that brings each fsspec backend, the storage
options the backend expects nested, how a timeout is given to it, and how a shard is streamed from it. Every
scheme-specific choice of the read side looks its scheme up here."""

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
    ranged blocks."""

    extra: str = ""
    nested: tuple[str, ...] = ()
    timeouts: Callable[[float], dict] = _no_timeouts
    whole_get: bool = False
    timeout_keys: tuple[str, ...] = ()  # top-level options by which a user already sets the timeout

    def __post_init__(self) -> None:
        if not callable(self.timeouts):
            raise TypeError(f"Scheme.timeouts must be callable, not {self.timeouts!r}")


_HTTP = Scheme(extra="http", timeouts=_http_timeouts, whole_get=True, timeout_keys=("timeout",))
_S3 = Scheme(extra="s3", nested=("endpoint_url", "region_name"), timeouts=_s3_timeouts)
_GCS = Scheme(extra="gcs", timeouts=_gcs_timeouts)
_AZURE = Scheme(extra="azure", timeouts=_azure_timeouts)

SCHEMES: dict[str, Scheme] = {"http": _HTTP, "https": _HTTP, "s3": _S3, "s3a": _S3, "gs": _GCS, "gcs": _GCS,
                              "az": _AZURE, "abfs": _AZURE, "abfss": _AZURE}
OTHER = Scheme()  # any other fsspec scheme: its backend's own defaults


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
