"""Which sources are remote, and the fsspec filesystem that reads one. Every remote read and write in pairload goes
through fsspec and its backends (s3fs, gcsfs, adlfs, aiohttp for http); none of this is home-made protocol code.
Credentials come from each backend's usual places (environment, config files, instance metadata) or from
`storage_options`; pairload never logs them."""

from __future__ import annotations

import os
import re
from typing import Any

from ..errors import ConfigError

_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
# the pip extra that brings each scheme's fsspec backend
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure",
          "http": "http", "https": "http"}


def is_url(source: Any) -> bool:
    """A remote location: a string with a scheme other than file:// (local paths and file:// stay local)."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    m = _SCHEME.match(os.fspath(source))
    return m is not None and m.group("scheme").lower() != "file"


def local_path(source: str | os.PathLike) -> str:
    """A local source as a path (file:// URLs included)."""
    text = os.fspath(source)
    return text[len("file://"):] if text.lower().startswith("file://") else text


def redact(url: str) -> str:
    """`url` fit for a message: a password in it becomes '***' and a query string (a signed URL's signature) '?…'."""
    text = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/@:]*):[^/@]*@", r"\1:***@", url)
    return text.split("?", 1)[0] + ("?…" if "?" in text else "")


def join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


def scheme(url: str) -> str:
    m = _SCHEME.match(url)
    return m.group("scheme").lower() if m else "file"


def filesystem(url: str, storage_options: dict | None = None):
    """(fsspec filesystem, path within it) for `url`; a scheme whose backend is not installed is a ConfigError
    naming the extra to install."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(url, **(storage_options or {}))
    except (ImportError, ValueError) as exc:
        extra = EXTRAS.get(scheme(url))
        fix = f"pip install 'pairload[{extra}]'" if extra else "install the fsspec backend for this scheme"
        raise ConfigError(f"{url}: no filesystem for {scheme(url)}:// URLs ({exc}); {fix}") from None


def storage_options(items, url: str | None = None) -> dict:
    """Command-line KEY=VALUE items -> fsspec storage options. `true`/`false` become booleans; for s3:// (or no URL)
    `endpoint_url` and `region_name` go into `client_kwargs`, where s3fs expects them (MinIO, Ceph, R2…); every
    other key goes to the backend as it is. A malformed item is refused without echoing it (it may hold a secret)."""
    out: dict = {}
    nested = url is None or scheme(url) in ("s3", "s3a")
    for number, item in enumerate(items or (), 1):
        key, sep, value = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--storage-option number {number}: expected KEY=VALUE, e.g. "
                              "endpoint_url=http://127.0.0.1:9000 (the value is not shown: it may be a secret)")
        parsed = {"true": True, "false": False}.get(value.strip().lower(), value)
        if nested and key in ("endpoint_url", "region_name"):
            out.setdefault("client_kwargs", {})[key] = parsed
        else:
            out[key] = parsed
    return out


def default_cache_dir() -> str:
    """The command lines' default cache folder: $XDG_CACHE_HOME/pairload or ~/.cache/pairload (the library's
    loaders read no environment: they take cache_dir explicitly)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pairload")
