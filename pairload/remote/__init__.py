"""Shards in object storage or over HTTP: URLs and their fsspec filesystems (`urls`), what differs per scheme
(`schemes`), one node-local cache (`cache`) and the downloads ahead of use (`feed`)."""

from .urls import filesystem, is_url, join, local_path, redact, redact_text, storage_options

__all__ = ["filesystem", "is_url", "join", "local_path", "storage_options", "redact", "redact_text"]
