"""The JPEG decode process's parts that run without a GPU: the check that a member is a whole JPEG (shared with the
loading process's decode thread), its shards' maps closing while a view still reads one, and the process itself
refusing to start with the reason, then ending when the loader's end of its connection closes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection

import numpy as np

from pairload.forking import child_env
from pairload.workers.decode import ShardMaps
from pairload.workers.jpegs import first_cut_short


def test_a_member_cut_short_or_overwritten_is_found_with_its_bytes():
    data = np.zeros(64, dtype=np.uint8)
    for start, length in ((0, 10), (20, 12), (40, 16)):
        data[start:start + 2] = (0xFF, 0xD8)
        data[start + length - 2:start + length] = (0xFF, 0xD9)
    start, length = np.array([0, 20, 40]), np.array([10, 12, 16])
    assert first_cut_short(data, start, length) is None
    assert first_cut_short(data, start, np.array([10, 11, 16])) == (
        1, "is not a whole JPEG (it starts with ff d8 and ends with 00 ff, not ff d8 … ff d9)")
    data[40] = 0x00
    x, what = first_cut_short(data, start, length)
    assert x == 2 and "starts with 00 d8" in what


def test_the_shards_maps_close_while_a_members_bytes_are_still_held(tmp_path):
    shard = tmp_path / "a.tar"
    shard.write_bytes(bytes(range(256)) * 64)
    maps = ShardMaps([str(shard)])
    held = maps.map(0)[1000:1024]  # a member's bytes, a view of the map as `member_bytes` gives them
    maps.let_go(np.array([0]), np.array([1000]), np.array([24]))  # advice: the bytes are read again from the cache
    maps.close()  # a view is still alive: its map closes with it, no BufferError
    assert bytes(held) == bytes((1000 + i) % 256 for i in range(24))
    again = ShardMaps([str(shard)])  # and the file maps anew
    assert int(again.map(0)[300]) == 300 % 256
    again.close()


def test_the_decode_process_says_why_it_cannot_start_and_ends_with_the_loader():
    mine, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-m", "pairload.workers.decode", str(theirs.fileno())],
                            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=child_env())
    theirs.close()
    conn = Connection(mine.detach())
    conn.send(("init", 999, []))  # no nvImageCodec here, or no device 999 where there is
    assert conn.poll(60)
    reply = conn.recv()
    assert reply[0] == "error" and reply[1]
    os.kill(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group: the loader answers it, not this
    conn.send(("ping",))
    assert conn.poll(30) and conn.recv()[0] == "error"  # still serving
    conn.close()  # the loader is gone: the process ends
    assert proc.wait(timeout=30) == 0
