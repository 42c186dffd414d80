"""Which sources are remote, URLs as text (`join`; `redact`, `redact_text`: the one way a URL enters a message),
and the fsspec filesystem that reads one. Every remote read and write in pairload goes through fsspec and its
backends (s3fs, gcsfs, adlfs, aiohttp for http); none of this is home-made protocol code. Credentials come from each
backend's usual places (environment, config files, instance metadata) or from `storage_options`; pairload never
logs them."""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote

from ..errors import ConfigError
from . import schemes

_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
# query parameters that carry a secret: signed URLs (S3, GCS, Azure SAS), bearer tokens, API keys
_SECRET_PARAMS = frozenset({"x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature",
                            "x-goog-credential", "awsaccesskeyid", "signature", "sig", "token", "access_token",
                            "key", "apikey", "api_key", "password", "secret", "code"})
_SECRET_PARTS = ("sig", "token", "secret", "credential", "password", "key")
_SHORTEST_SECRET = 4  # a shorter value is not replaced inside free text (it would garble every word holding it)


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


def _secret_param(name: str) -> bool:
    low = name.lower()
    return low in _SECRET_PARAMS or any(part in low for part in _SECRET_PARTS)


def _split(url: str) -> tuple[str, str, str, str, str | None]:
    """(scheme://, userinfo, rest of the authority and path, query, fragment or None); userinfo '' if none."""
    m = _SCHEME.match(url)
    head = m.group(0) if m else ""
    text = url[len(head):]
    text, hash_, fragment = text.partition("#")
    text, _, query = text.partition("?")
    end = len(text) if "/" not in text else text.index("/")
    userinfo, at, host = text[:end].rpartition("@")
    return head, userinfo + at, host + text[end:], query, fragment if hash_ else None


def _secrets(url: str) -> list[str]:
    """The secret values in `url`: its password and the values of secret query parameters (as written and
    percent-decoded)."""
    _, userinfo, _, query, fragment = _split(url)
    found = []
    if ":" in userinfo:
        found.append(userinfo[:-1].split(":", 1)[1])
    for item in (query + "&" + (fragment or "")).split("&"):
        name, eq, value = item.partition("=")
        if eq and _secret_param(unquote(name)):
            found.append(value)
    return [v for s in found for v in {s, unquote(s)} if len(v) >= _SHORTEST_SECRET]


def redact(url: str) -> str:
    """`url` fit for a message: a password becomes '***' (the user name stays), query parameters that carry a
    secret (signatures, credentials, tokens, keys) and any fragment are left out, '…' marking where:
    'https://u:pw@host/x?X-Amz-Date=1&X-Amz-Signature=ab' -> 'https://u:***@host/x?X-Amz-Date=1&…'."""
    head, userinfo, rest, query, fragment = _split(url)
    if ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***@"
    out = head + userinfo + rest
    if query or "?" in url.partition("#")[0]:
        kept = [item for item in query.split("&") if item and "=" in item and not _secret_param(
            unquote(item.partition("=")[0]))]
        dropped = len([item for item in query.split("&") if item]) > len(kept)
        out += "?" + "&".join(kept + ["…"] * dropped)
    if fragment is not None:
        out += "#…"
    return out


def redact_text(text: str, *urls: str) -> str:
    """`text` (a backend's exception message, say) with every URL in it redacted, and the secrets of `urls` (the
    URLs the failing call was given) removed wherever else they appear, decoded or not."""
    text = _URL_IN_TEXT.sub(lambda m: redact(m.group(0)), str(text))
    for secret in sorted({s for url in urls for s in _secrets(url)}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


def scheme(url: str) -> str:
    m = _SCHEME.match(url)
    return m.group("scheme").lower() if m else "file"


def filesystem(url: str, storage_options: dict | None = None, *, timeout: float | None = None):
    """(fsspec filesystem, path within it) for `url`; `timeout`: seconds allowed to connect and per read, given to
    the backends that take one (`schemes`) unless `storage_options` set one. A scheme whose backend is not
    installed is a ConfigError naming the extra to install."""
    import fsspec

    kind = scheme(url)
    options = dict(storage_options or {}) if timeout is None else schemes.with_timeouts(kind, storage_options, timeout)
    try:
        return fsspec.core.url_to_fs(url, **options)
    except (ImportError, ValueError) as exc:
        extra = schemes.lookup(kind).extra
        fix = f"pip install 'pairload[{extra}]'" if extra else "install the fsspec backend for this scheme"
        raise ConfigError(f"{redact(url)}: no filesystem for {kind}:// URLs ({redact_text(str(exc), url)}); "
                          f"{fix}") from None


def storage_options(items, url: str | None = None) -> dict:
    """Command-line KEY=VALUE items -> fsspec storage options. `true`/`false` become booleans; the keys a backend
    reads from `client_kwargs` (`schemes`: for s3://, or no URL, `endpoint_url` and `region_name`, as s3fs expects
    for MinIO, Ceph, R2…) go there; every other key goes to the backend as it is. A malformed item is refused
    without echoing it (it may hold a secret)."""
    out: dict = {}
    nested = schemes.lookup("s3" if url is None else scheme(url)).nested
    for number, item in enumerate(items or (), 1):
        key, sep, value = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--storage-option number {number}: expected KEY=VALUE, e.g. "
                              "endpoint_url=http://127.0.0.1:9000 (the value is not shown: it may be a secret)")
        parsed = {"true": True, "false": False}.get(value.strip().lower(), value)
        if key in nested:
            out.setdefault("client_kwargs", {})[key] = parsed
        else:
            out[key] = parsed
    return out


def default_cache_dir() -> str:
    """The command lines' default cache folder: $XDG_CACHE_HOME/pairload or ~/.cache/pairload (the library's
    loaders read no environment: they take cache_dir explicitly)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pairload")
