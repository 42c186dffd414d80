"""Shards hashed while they fill (`pack.shardhash`): the digest is the finished file's sha256 however the pieces
arrive, each shard's hook runs once, and a shard that cannot be read back is a named error."""

import hashlib
import os

import numpy as np
import pytest

from pairload.errors import OutputError
from pairload.pack.shardhash import STEP, ShardHasher


def test_digest_is_the_whole_files_however_the_pieces_come(tmp_path):
    size = 2 * STEP + 12345  # more than one step of hashing
    data = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8).tobytes()
    paths = [tmp_path / f"s{n}.tar.partial" for n in range(3)]
    for p in paths:
        with open(p, "wb") as fh:
            fh.truncate(size)  # created at its final size, as pack creates a shard
    done = []
    hasher = ShardHasher(2, lambda number, digest: done.append((number, digest)))
    try:
        for n, p in enumerate(paths):
            hasher.open(n, str(p), size)
        fds = [os.open(p, os.O_WRONLY) for p in paths]
        cuts = sorted(np.random.default_rng(2).integers(1, size, 40).tolist()) + [size]
        start = 0
        for k, cut in enumerate(cuts):  # the shards fill side by side, piece by piece, as the workers write them
            for n, fd in enumerate(fds):
                os.pwrite(fd, data[start:cut], start)
                hasher.ready(n, cut if k % 5 else max(0, start - 7))  # a late, smaller mark changes nothing
            start = cut
        for n, fd in enumerate(fds):
            os.close(fd)
            hasher.ready(n, size, final=True)
        want = hashlib.sha256(data).hexdigest()
        assert [hasher.digest(n).result(timeout=30) for n in range(3)] == [want] * 3
    finally:
        hasher.close()
    assert done == [(n, want) for n in range(3)]  # once each, in shard order


def test_a_shard_that_cannot_be_read_back_names_it(tmp_path):
    gone = tmp_path / "train-000000.tar.partial"
    hasher = ShardHasher(1)
    try:
        hasher.open(0, str(gone), 4096)
        hasher.ready(0, 4096, final=True)
        with pytest.raises(OutputError, match="train-000000.tar.partial"):
            hasher.digest(0).result(timeout=30)
    finally:
        hasher.close()
