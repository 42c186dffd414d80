"""The reference loop on shards at a URL: credentials given only as --storage-option (a real S3-compatible server
that checks signatures), a wrong secret refused in one line that does not show it, and each manifest fetched once
per process (counted on a real HTTP server)."""

from __future__ import annotations

import json

import pytest

from conftest import raw_and_shards
from pairload.recipes.train import main

TINY = ["--device", "cpu", "--crop", "16", "--batch-size", "4", "--width", "4", "--depth", "1", "--workers", "0",
        "--warmup-steps", "1", "--epochs", "1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return raw_and_shards(tmp_path_factory.mktemp("train-remote"), 16, test=3, size=(24, 32)) / "shards"


@pytest.fixture
def no_ambient_credentials(monkeypatch, tmp_path):
    """Nothing but --storage-option can reach the server: no AWS variables, no config or credentials file."""
    import os

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="module")
def bucket_user(data, s3):
    """The shards in a new bucket, and an IAM user's access key allowed to read it: (URL, key id, secret)."""
    boto3 = pytest.importorskip("boto3")
    bucket = s3.bucket("train")
    for f in sorted(data.iterdir()):
        s3.client().upload_file(str(f), bucket, f"lol/{f.name}")
    iam = boto3.client("iam", endpoint_url=s3.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    name = f"trainer-{bucket}"
    iam.create_user(UserName=name)
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    iam.put_user_policy(UserName=name, PolicyName="read", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return f"s3://{bucket}/lol", key["AccessKeyId"], key["SecretAccessKey"]


@pytest.fixture
def signed_requests():
    """The server checks every request's signature against its IAM users while the test runs."""
    from moto.core.authorization import enable_iam_authentication

    with enable_iam_authentication():
        yield


def test_credentials_only_from_storage_options_train_an_epoch_and_a_wrong_secret_is_one_line(
        bucket_user, s3, tmp_path, capsys, no_ambient_credentials, signed_requests):
    url, key, secret = bucket_user
    opts = ["--storage-option", f"key={key}", "--storage-option", f"endpoint_url={s3.endpoint}",
            "--storage-option", "region_name=us-east-1"]
    out = tmp_path / "run"
    assert main(["--shards", url, "--cache-dir", str(tmp_path / "cache"), *TINY, "--out", str(out), *opts,
                 "--storage-option", f"secret={secret}"]) == 0, capsys.readouterr().err
    row = json.loads((out / "metrics.jsonl").read_text())
    assert row["epoch"] == 1 and row["data_samples"] == 16 and row["val_samples"] == 3
    # the run folder keeps which options were given, never their values
    config = (out / "config.json").read_text()
    assert secret not in config and key not in config
    assert json.loads(config)["storage_option"][:2] == ["key=<hidden>", "endpoint_url=<hidden>"]

    capsys.readouterr()
    wrong = "not-the-secret-" + secret[:8]
    assert main(["--shards", url, "--cache-dir", str(tmp_path / "cache2"), *TINY, *opts,
                 "--storage-option", f"secret={wrong}"]) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and url in lines[0], err
    assert "403" in lines[0] or "denied" in lines[0].lower() or "forbidden" in lines[0].lower(), err
    assert wrong not in err and secret[:8] not in err and "Traceback" not in err


def test_storage_options_need_a_url_and_are_refused_without_echoing_them(data, capsys):
    assert main(["--shards", str(data), *TINY, "--storage-option", "secret=hunter2"]) == 1
    err = capsys.readouterr().err
    assert f"--storage-option: {data} is not a URL" in err and "hunter2" not in err
    assert main(["--shards", "s3://bucket/x", *TINY, "--storage-option", "hunter2"]) == 1
    err = capsys.readouterr().err
    assert "--storage-option number 1: expected KEY=VALUE" in err and "hunter2" not in err


def test_a_url_manifest_is_fetched_once_per_process(data, tmp_path):
    pytest.importorskip("aiohttp")
    from pairload.bench.httpserver import StaticServer

    with StaticServer(data) as srv:
        assert main(["--shards", srv.url, "--cache-dir", str(tmp_path / "cache"), *TINY,
                     "--out", str(tmp_path / "run")]) == 0
        manifests = [entry for entry in srv.log if entry[1].endswith("/manifest.json")]
        # one process: its fingerprint, training loader and validation loader all read the one fetched copy
        assert [(method, status) for method, _, status in manifests] == [("GET", 200)], srv.log
        # a mix naming the same URL twice still fetches it once
        srv.log.clear()
        assert main(["--shards", srv.url, "--mix", f"a={srv.url}:1,b={srv.url}:1", "--cache-dir",
                     str(tmp_path / "cache"), *TINY, "--out", str(tmp_path / "mix")]) == 0
        assert len([entry for entry in srv.log if entry[1].endswith("/manifest.json")]) == 1, srv.log
