"""`pairload pack RAW URL` against a real S3-compatible server (moto, see s3server.py) and fsspec's memory://."""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pairload import OutputError
from pairload.errors import ConfigError
from pairload.pack.upload import LEDGER, Destination, backend_error, default_staging, refuse_read_only
from pairload.remote import schemes
from pairload.pack.writer import PackOptions, pack
from pairload.remote.urls import storage_options, redact
from pairload.format.binindex import VERIFIED

from conftest import make_raw
from s3server import start_server

OPTS = PackOptions(workers=1, shard_size=64 * 1024)


def local_pack(raw: Path, out: Path, options: PackOptions = OPTS) -> dict[str, bytes]:
    """What a local pack of `raw` writes: its shards and manifest, by name."""
    pack(raw, out, options)
    return {p.name: p.read_bytes() for p in out.iterdir()  # not the records of its index files found whole
            if not p.name.startswith(".") and not p.name.endswith(VERIFIED)}


def to_s3(raw, url, s3, staging, events=None, **kw):
    """pack into `url` on the server `s3`; `events` collects (kind, name) of each upload event, or is the callback."""
    record = events if callable(events) or events is None else (lambda kind, name: events.append((kind, name)))
    return pack(raw, url, kw.pop("options", OPTS), staging=staging, storage_options=s3.storage_options,
                on_upload=record, **kw)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "pairload.cli", *map(str, args)], capture_output=True, text=True)


def s3_flags(s3):
    return ["--storage-option", "key=testing", "--storage-option", "secret=testing",
            "--storage-option", f"endpoint_url={s3.endpoint}"]


def test_a_pack_into_s3_equals_a_local_pack_and_its_manifest_comes_last(raw, tmp_path, s3):
    bucket, events = s3.bucket(), []
    report = to_s3(raw, f"s3://{bucket}/lol/", s3, tmp_path / "staging", events)
    expected = local_pack(raw, tmp_path / "local")
    assert s3.objects(bucket, "lol/") == expected  # every object byte for byte, and nothing else
    shards = sorted(n for n in expected if n.endswith((".tar", ".index")))
    assert events[-1] == ("uploaded", "manifest.json")
    assert sorted(name for kind, name in events[:-1]) == shards and {kind for kind, _ in events[:-1]} == {"uploaded"}
    up = report.upload
    assert up.uploaded[-1] == "manifest.json" and not up.skipped and not up.deleted and up.kept and not up.reused
    assert up.bytes_uploaded == sum(map(len, expected.values())) and report.url == f"s3://{bucket}/lol"
    assert report.pairs == 12 and report.shards_dir == tmp_path / "staging"
    staged = {p.name: p.read_bytes() for p in (tmp_path / "staging").iterdir()
              if not p.name.startswith(".") and not p.name.endswith(VERIFIED)}
    assert staged == expected  # the staging folder is a valid local pack

    events.clear()  # the same command again: nothing decoded, nothing uploaded
    report = to_s3(raw, f"s3://{bucket}/lol", s3, tmp_path / "staging", events)
    assert report.upload.reused and not report.upload.uploaded
    assert events == [("skipped", name) for name in shards] + [("skipped", "manifest.json")]


def test_an_upload_cut_by_a_dead_server_resumes_skipping_what_arrived(raw, tmp_path):
    server, s3 = start_server()  # its own server: this test stops it
    port = int(s3.endpoint.rsplit(":", 1)[1])
    bucket, events = s3.bucket(), []

    def stop_after_the_first_shard(kind, name):
        events.append((kind, name))
        if len(events) == 1:
            server.stop()  # a real fault: the next request finds no server

    try:
        with pytest.raises(OutputError, match=rf"^s3://{bucket}/ds/\S+\.tar: cannot reach the storage service while "
                                              r"uploading it .*run the same command again to resume$"):
            to_s3(raw, f"s3://{bucket}/ds", s3, tmp_path / "staging", stop_after_the_first_shard)
        first = events[0][1]
        assert events == [("uploaded", first)]
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)  # the same endpoint again
        server.start()
        assert list(s3.objects(bucket, "ds/")) == [first]  # no manifest: readers see nothing
        events.clear()
        report = to_s3(raw, f"s3://{bucket}/ds", s3, tmp_path / "staging", events)
        assert s3.objects(bucket, "ds/") == local_pack(raw, tmp_path / "local")
    finally:
        server.stop()
    assert report.upload.reused  # the staging pack was complete: nothing decoded again
    assert report.upload.skipped == [first] and first not in report.upload.uploaded
    assert report.upload.uploaded[-1] == "manifest.json" and events[-1] == ("uploaded", "manifest.json")


def test_a_cli_pack_killed_mid_upload_resumes_and_ends_byte_identical(tmp_path, s3):
    raw = make_raw(tmp_path / "raw", 48, size=(200, 300))
    bucket = s3.bucket()
    url, staging = f"s3://{bucket}/ds", tmp_path / "staging"
    cmd = [sys.executable, "-m", "pairload.cli", "pack", str(raw), url, "--shard-size", "1MB", "--workers", "2",
           "--staging", str(staging), *s3_flags(s3)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client, deadline = s3.client(), time.time() + 60
    while time.time() < deadline and proc.poll() is None and not client.list_objects_v2(Bucket=bucket).get("KeyCount"):
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    there = s3.objects(bucket, "ds/")
    assert there and "manifest.json" not in there  # killed after a shard arrived, before the manifest
    known = sorted(json.loads((staging / LEDGER).read_text())["remote"])  # uploads the killed run saw complete

    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    expected = local_pack(raw, tmp_path / "local", PackOptions(workers=1, shard_size=1024 * 1024))
    shards = sum(n.endswith((".tar", ".index")) for n in expected)
    assert f"uploaded {shards - len(known)} shards" in res.stdout and "and manifest.json (last)" in res.stdout
    assert f"skipped {len(known)} shards already there" in res.stdout
    assert f"staging folder kept at {staging}" in res.stdout
    assert s3.objects(bucket, "ds/") == expected


def test_another_packs_manifest_is_refused_then_replaced_with_overwrite_deleting_it_first(raw, tmp_path, s3):
    other = make_raw(tmp_path / "other", 20)
    bucket = s3.bucket()
    url = f"s3://{bucket}/ds"
    to_s3(other, url, s3, tmp_path / "other-staging")
    before = s3.objects(bucket, "ds/")
    with pytest.raises(OutputError) as err:
        to_s3(raw, url, s3, tmp_path / "staging")
    assert str(err.value) == (f"{url}/manifest.json: the manifest of a pack of {other}, not of {raw}; pack into "
                              "another URL, or pass --overwrite to replace those shards")
    assert s3.objects(bucket, "ds/") == before and not list((tmp_path / "staging").glob("*.tar*"))

    events = []
    to_s3(raw, url, s3, tmp_path / "staging", events, options=PackOptions(workers=1, shard_size=64 * 1024,
                                                                           overwrite=True))
    assert events[0] == ("deleted", "manifest.json")  # before any shard is replaced
    assert events[-1] == ("uploaded", "manifest.json")
    gone = {n for n in before if n.endswith((".tar", ".index"))} - set(local_pack(raw, tmp_path / "local"))
    assert gone and {("deleted", n) for n in gone} <= set(events)  # the other pack's shards no longer listed
    assert s3.objects(bucket, "ds/") == local_pack(raw, tmp_path / "local")


def test_a_manifest_json_that_is_not_pairloads_is_refused_unless_overwrite(raw, tmp_path, s3):
    bucket = s3.bucket()
    s3.client().put_object(Bucket=bucket, Key="ds/manifest.json", Body=b'{"experiment": "notes"}')
    with pytest.raises(OutputError, match=rf"^s3://{bucket}/ds/manifest.json: not a pairload manifest .* move it away "
                                          r"or pack into another URL, or pass --overwrite to replace it$"):
        to_s3(raw, f"s3://{bucket}/ds", s3, tmp_path / "staging")
    to_s3(raw, f"s3://{bucket}/ds", s3, tmp_path / "staging",
          options=PackOptions(workers=1, shard_size=64 * 1024, overwrite=True))
    assert s3.objects(bucket, "ds/") == local_pack(raw, tmp_path / "local")


def test_a_missing_bucket_is_named_before_anything_is_decoded(raw, tmp_path, s3):
    with pytest.raises(OutputError, match=r"^s3://no-such-bucket/ds: the bucket 'no-such-bucket' does not exist \(or "
                                          r"these credentials cannot see it\); create it first, or fix the URL$"):
        to_s3(raw, "s3://no-such-bucket/ds", s3, tmp_path / "staging")
    assert not list((tmp_path / "staging").glob("*.tar*"))


def test_an_unreachable_endpoint_is_named(raw, tmp_path, s3):
    client = {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"}
    options = {**s3.storage_options, "client_kwargs": client}
    with pytest.raises(OutputError, match=r"^s3://bucket/ds: cannot reach the storage service while looking up the "
                                          r"bucket 'bucket' \(.*\); check the network and the endpoint"):
        pack(raw, "s3://bucket/ds", OPTS, staging=tmp_path / "staging", storage_options=options)


def test_http_destinations_are_refused_without_showing_a_signature(raw, tmp_path):
    with pytest.raises(OutputError) as err:
        pack(raw, "https://example.com/shards?X-Amz-Signature=SECRET", OPTS, staging=tmp_path / "staging")
    assert str(err.value) == ("https://example.com/shards?…: an HTTP(S) URL is read-only, `pairload pack` cannot write "
                              "there; pack into a local folder or a bucket and serve that folder")
    assert not (tmp_path / "staging").exists()


def test_no_keep_staging_removes_it_and_a_repack_skips_what_the_remote_manifest_lists(raw, tmp_path, s3):
    bucket = s3.bucket()
    report = to_s3(raw, f"s3://{bucket}/ds", s3, tmp_path / "staging", keep_staging=False)
    assert not report.upload.kept and not (tmp_path / "staging").exists()
    report = to_s3(raw, f"s3://{bucket}/ds", s3, tmp_path / "staging2")  # decodes again; the bucket has it all
    assert not report.upload.reused and not report.upload.uploaded and "manifest.json" in report.upload.skipped
    assert s3.objects(bucket, "ds/") == local_pack(raw, tmp_path / "local")


def test_a_changed_raw_folder_is_repacked_and_its_changed_shards_replace_the_old(raw, tmp_path, s3):
    bucket, events = s3.bucket(), []
    to_s3(raw, f"s3://{bucket}/ds", s3, tmp_path / "staging")
    make_raw(raw, 1, split="test", start=150)  # one more test pair: same sizes elsewhere, another test shard
    report = to_s3(raw, f"s3://{bucket}/ds", s3, tmp_path / "staging", events)
    assert not report.upload.reused and report.upload.skipped  # the train shards did not change
    assert events[0][0] == "skipped" and ("deleted", "manifest.json") in events and events[-1][1] == "manifest.json"
    assert s3.objects(bucket, "ds/") == local_pack(raw, tmp_path / "local")


def test_a_backend_without_atomic_puts_gets_temporary_names_then_a_move(raw, tmp_path):
    import fsspec

    url = f"memory://pairload-{tmp_path.name}/ds"
    report = pack(raw, url, OPTS, staging=tmp_path / "staging")
    fs, root = fsspec.core.url_to_fs(url)
    there = {p.rsplit("/", 1)[-1]: fs.cat_file(p) for p in fs.ls(root, detail=False)}
    assert there == local_pack(raw, tmp_path / "local") and report.upload.uploaded[-1] == "manifest.json"


def test_the_cli_refuses_in_one_line_without_echoing_secrets(raw, tmp_path, s3):
    res = cli("pack", raw, "s3://no-such-bucket/ds", "--staging", tmp_path / "st", "--storage-option", "key=testing",
              "--storage-option", "secret=TOPSECRET", "--storage-option", f"endpoint_url={s3.endpoint}")
    assert res.returncode == 1 and "Traceback" not in res.stderr and "TOPSECRET" not in res.stderr + res.stdout
    assert res.stderr.strip().splitlines() == ["error: s3://no-such-bucket/ds: the bucket 'no-such-bucket' does not "
                                               "exist (or these credentials cannot see it); create it first, or fix "
                                               "the URL"]
    res = cli("pack", raw, "http://host/shards")
    assert res.returncode == 1 and res.stderr.strip().splitlines() == [
        "error: http://host/shards: an HTTP(S) URL is read-only, `pairload pack` cannot write there; pack into a "
        "local folder or a bucket and serve that folder"]
    res = cli("pack", raw, tmp_path / "local", "--staging", tmp_path / "st")
    assert res.returncode == 1 and "apply to URL destinations only" in res.stderr
    res = cli("pack", raw, "s3://b/ds", "--storage-option", "TOPSECRET")
    assert res.returncode == 1 and "expected KEY=VALUE" in res.stderr and "TOPSECRET" not in res.stderr


def test_storage_options_from_the_command_line():
    assert storage_options(["endpoint_url=http://h:9000", "anon=true", "key=k"], "s3://b/x") == {
        "client_kwargs": {"endpoint_url": "http://h:9000"}, "anon": True, "key": "k"}
    assert storage_options(["endpoint_url=http://h"], "gs://b/x") == {"endpoint_url": "http://h"}
    assert storage_options(None, "s3://b") == {}
    with pytest.raises(ConfigError, match=r"--storage-option number 2: expected KEY=VALUE"):
        storage_options(["a=1", "oops"], "s3://b")


def test_messages_name_the_url_and_what_to_check_never_the_credentials():
    assert redact("s3://user:pw@bucket/x?sig=1") == "s3://user:***@bucket/x?…"
    assert redact("s3://bucket/x") == "s3://bucket/x"
    msg = backend_error("s3://b/ds/train-000000.tar", "uploading it", PermissionError("Access Denied"))
    assert msg.startswith("s3://b/ds/train-000000.tar: permission denied while uploading it (Access Denied); check "
                          "the credentials")
    assert "not found" in backend_error("s3://b/ds", "reading it", FileNotFoundError("NoSuchBucket"))
    assert default_staging("s3://b/ds/") == default_staging("s3://b/ds") != default_staging("s3://b/other")


def test_uploading_imports_neither_torch_nor_dali():
    code = ("import sys, pairload.pack.upload\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or 'dali' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_full_disk_under_the_default_staging_folder_says_to_pick_another(raw, tmp_path, monkeypatch):
    import shutil
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=100 * 1024))
    url = f"memory://pairload-{tmp_path.name}/ds"
    staging = default_staging(url)
    with pytest.raises(OutputError, match=rf"^{re.escape(str(staging))}: the shards would take about .* free; .* "
                                          rf"\(this is the staging folder of {url}; pick one on a larger disk with "
                                          r"--staging DIR\)$"):
        pack(raw, url, OPTS)
    assert staging.parent == tmp_path


def test_a_compressed_pack_into_s3_uploads_every_shard_as_it_is_finished(raw, tmp_path, s3):
    pytest.importorskip("zstandard")
    import dataclasses

    options = dataclasses.replace(OPTS, compress="zstd")
    bucket, events = s3.bucket(), []
    to_s3(raw, f"s3://{bucket}/z", s3, tmp_path / "staging", events, options=options)
    expected = local_pack(raw, tmp_path / "local", options)
    assert s3.objects(bucket, "z/") == expected and sum(n.endswith(".tar") for n in expected) > 1
    assert events[-1] == ("uploaded", "manifest.json") and len(events) == len(expected)


def test_how_a_url_is_written_comes_from_the_scheme_table():
    # object stores put each file in place; file systems (adl:// is Data Lake Gen1, memory://) go through a temp name
    assert [schemes.lookup(s).object_store for s in ("s3", "S3A", "gs", "gcs", "az", "abfs", "abfss")] == [True] * 7
    assert not any(schemes.lookup(s).object_store for s in ("adl", "memory", "sftp", "file", "hdfs"))
    assert schemes.lookup("adl").extra == "azure" and not schemes.lookup("https").writable
    assert not Destination("memory://pairload-table/ds", None).atomic
    with pytest.raises(OutputError, match=r"^https://h/x: an HTTP\(S\) URL is read-only"):
        refuse_read_only("https://h/x")
    refuse_read_only("adl://store/ds")  # writable: nothing raised
