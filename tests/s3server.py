"""A real S3-compatible server for tests: moto's threaded server on a free local port, one per test session.

Tests reach it only through what users pass: an s3:// URL and storage_options (key, secret, client_kwargs with the
endpoint), never through patched clients. Buckets are made with boto3 (s3fs's mkdir asks moto for a location
constraint it refuses)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

_numbers = itertools.count()


@dataclass
class S3Server:
    endpoint: str

    @property
    def storage_options(self) -> dict:
        """What a user passes to reach this server; fresh instances (no fsspec cache) and no retry waits."""
        return {"key": "testing", "secret": "testing", "skip_instance_cache": True,
                "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
                "config_kwargs": {"retries": {"max_attempts": 1}}}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                            aws_secret_access_key="testing")

    def bucket(self, prefix: str = "pairload-test") -> str:
        """A new empty bucket; returns its name."""
        name = f"{prefix}-{next(_numbers)}"
        self.client().create_bucket(Bucket=name)
        return name

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object under `prefix`, name (after the prefix) -> bytes."""
        s3 = self.client()
        keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                for o in page.get("Contents", [])]
        return {k[len(prefix):].lstrip("/"): s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def start_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, S3Server(f"http://{host}:{port}")


@pytest.fixture(scope="session")
def s3():
    """An S3Server for the whole test session (moto keeps its buckets in this process)."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    server, handle = start_server()
    try:
        yield handle
    finally:
        server.stop()
