"""No read-side error shows a secret of the URL it names: a real HTTP server on 127.0.0.1 reached with a password
in the URL and a signed-style query, through fsspec's real client, made to fail every way a reader meets (manifest
missing, shard 404, bytes changed, cached copy truncated, server gone)."""

from __future__ import annotations

import hashlib

import pytest

from conftest import raw_and_shards
from pairload.bench.httpserver import StaticServer
from pairload.errors import PairloadError, ShardError
from pairload.read.shards import info, open_shards, verify
from pairload.remote.cache import FetchError, Retry, ShardCache
from pairload.remote.urls import redact, redact_text

SECRET = "s3cr3t-Pa55"
SIGNED = f"X-Amz-Date=20260101T000000Z&X-Amz-Credential=AKIA{SECRET}&X-Amz-Signature={SECRET}ab&sv=2024&sig={SECRET}"
FAST = Retry(attempts=2, backoff=0.01, timeout=2)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """8 training pairs in 2 shards."""
    return raw_and_shards(tmp_path_factory.mktemp("redact"), 8) / "shards"


@pytest.fixture
def server(data):
    with StaticServer(data) as srv:
        yield srv


def secret_url(srv) -> str:
    return srv.url.replace("http://", f"http://reader:{SECRET}@")


def first_shard(data) -> tuple[str, str, int]:
    path = sorted(data.glob("train-*.tar"))[0]
    return path.name, hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_size


def shown(exc: BaseException) -> str:
    """The message, checked to name the redacted URL (else the test would pass on a message naming nothing)."""
    text = str(exc)
    assert "reader:***@127.0.0.1" in text, text
    assert SECRET not in text and SECRET.lower() not in text.lower(), text
    return text


def test_redact_keeps_what_helps_and_drops_what_authorizes():
    assert redact(f"https://reader:{SECRET}@host/shards/a.tar?{SIGNED}") == \
        "https://reader:***@host/shards/a.tar?X-Amz-Date=20260101T000000Z&sv=2024&…"
    # an Azure container@account is not a credential; a SAS signature is
    assert redact(f"az://box@acct.blob.core.windows.net/s?sv=2024&sp=r&sig={SECRET}") == \
        "az://box@acct.blob.core.windows.net/s?sv=2024&sp=r&…"
    assert redact(f"https://host/s#access_token={SECRET}") == "https://host/s#…"
    assert redact("s3://bucket/shards") == "s3://bucket/shards"
    assert redact(f"https://host/a?token={SECRET}&page=2") == "https://host/a?page=2&…"
    # a backend's own text: URLs in it redacted, and the given URL's secrets wherever else they appear
    url = f"https://reader:{SECRET}@host/a?X-Amz-Signature={SECRET}"
    text = redact_text(f"403 for URL('{url}'): bad signature {SECRET}", url)
    assert SECRET not in text and "URL('https://reader:***@host/a?…')" in text


def test_manifest_missing_and_server_gone_name_the_url_without_its_secret(server, tmp_path):
    with pytest.raises(FetchError, match=r"manifest\.json: not found \(404\)") as exc:
        open_shards(secret_url(server) + "/nothing", cache_dir=tmp_path / "c")
    shown(exc.value)
    with pytest.raises(FetchError) as exc:
        verify(f"{secret_url(server)}/nothing?{SIGNED}", cache_dir=tmp_path / "c")
    assert SECRET not in str(exc.value) and "reader:***@" in str(exc.value)
    url = secret_url(server)
    server.stop()
    with pytest.raises(FetchError, match=r"reading failed 2 times") as exc:
        ShardCache(tmp_path / "c", retry=FAST).read_small(f"{url}/manifest.json?{SIGNED}")
    shown(exc.value)
    with pytest.raises(FetchError) as exc:
        info(url)
    shown(exc.value)


def test_shard_404_and_changed_bytes_name_the_url_without_its_secret(data, server, tmp_path):
    name, sha, size = first_shard(data)
    cache = ShardCache(tmp_path / "c", retry=FAST)
    signed = f"{secret_url(server)}/{name}?{SIGNED}"
    with pytest.raises(ShardError, match=r"its bytes no longer match the manifest") as exc:
        cache.fetch(signed, "0" * 64, size)  # the manifest's sha256 of other bytes
    assert shown(exc.value).startswith(f"{server.url.replace('http://', 'http://reader:***@')}/{name}?X-Amz-Date=")
    server.faults.status[f"/{name}"] = 404
    with pytest.raises(FetchError, match=r"not found \(404\)") as exc:
        cache.fetch(signed, sha, size)
    shown(exc.value)
    server.faults.status[f"/{name}"] = 403
    with pytest.raises(FetchError, match=r"access denied \(403\)") as exc:
        open_shards(secret_url(server), cache_dir=tmp_path / "d").fetch_all()
    shown(exc.value)


def test_a_truncated_cached_shard_and_a_bad_split_name_the_url_without_its_secret(server, tmp_path):
    ds = open_shards(secret_url(server), cache_dir=tmp_path / "c")
    assert SECRET not in ds.where and ds.where.startswith("http://reader:***@")
    ds.fetch_all()
    try:
        cached = ds.files[0]
        cached.chmod(0o644)
        with open(cached, "r+b") as fh:
            fh.truncate(100)
        with pytest.raises(ShardError, match=r"100 bytes, the manifest says \d+; the shard is truncated") as exc:
            ds.check_files()
        shown(exc.value)
    finally:
        ds.close_remote()
    with pytest.raises(PairloadError, match=r"manifest\.json: no split 'nope'") as exc:
        open_shards(secret_url(server), "nope", cache_dir=tmp_path / "c")
    shown(exc.value)
