"""Shards in object storage or over HTTP: fsspec filesystems (`urls`) and one node-local cache (`cache`)."""

from .urls import filesystem, is_url, join, local_path, storage_options, redact

__all__ = ["filesystem", "is_url", "join", "local_path", "storage_options", "redact"]
