"""`python -m pairload.workers.decode FD`: the JPEG decode process of a loader (`pairload.cut.memory.jpegproc`), on the
connection inherited as file descriptor FD. It maps the split's shards, checks each member asked for is a whole JPEG,
decodes them with nvImageCodec on a stream of its own, copies each image into the loader's device memory (opened from
its IPC handle) at the place asked, waits for that, and answers. Imports neither torch nor Triton: it starts in about
the time nvImageCodec takes to load.

Messages (pickled tuples), each answered in order:
- ("init", device ordinal, shard paths, evict, threads, first) → ("ready",) or ("error", why); evict: the split
  outgrows the memory that could cache it, and each call's members are unmapped here once decoded
  (`ShardMaps.let_go`); threads: the CPU threads nvImageCodec's decoder parses with (0: its default, one a core of the
  machine); first: (shard, start, length) of a JPEG member of the split, decoded before the answer (None: none), so
  that the engine's own start (about a second, at its first decode) is part of this process's start, which overlaps
  the loader's and the other decode processes', not of the loader's first call;
- ("ring", IPC handle) → ("ok",): the device memory images go to from now on;
- ("decode", shard, start, length, height, width, dest) (int64 arrays, one row a member) → ("done",), or ("bad", row,
  what) for the first member that is not a whole JPEG or does not decode to its height × width × 3 uint8;
- ("close",) → the process ends (as it does when the loader's end of the connection closes).
"""

from __future__ import annotations

import mmap
import sys
import traceback
from multiprocessing.connection import Connection

import numpy as np

from .. import interrupts
from .jpegs import JpegDecoders, JpegFault, decoded_face, member_bytes


class ShardMaps:
    """The split's shards, each mapped at its first use (`map`). `let_go` unmaps members' pages from this process: the
    kernel drops no page that some process maps, so a loader whose split outgrows the memory that could cache it
    (`evict`), which drops each call's pages once decoded (`ShardDataset.dontneed`), could not drop those mapped here;
    they would pile up and push out the pages read ahead for the coming calls (a cgroup limit then thrashes)."""

    def __init__(self, files: list[str]):
        self.files = files
        self._maps: dict[int, np.ndarray] = {}
        self._mmaps: dict[int, mmap.mmap] = {}

    def map(self, number: int) -> np.ndarray:
        mm = self._maps.get(number)
        if mm is None:
            with open(self.files[number], "rb") as fh:
                mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            self._mmaps[number] = mapped
            mm = self._maps[number] = np.frombuffer(mapped, dtype=np.uint8)
        return mm

    def let_go(self, shard: np.ndarray, start: np.ndarray, length: np.ndarray) -> None:
        """Unmap these members' pages here (shard, start, length: int64 arrays, one row a member); the page cache
        keeps them until the loader drops them. Advice only: an error is ignored."""
        page = mmap.PAGESIZE
        first = start // page * page
        for number, a, b in zip(shard.tolist(), first.tolist(), (start + length).tolist()):
            mapped = self._mmaps.get(number)
            if mapped is not None:
                try:
                    mapped.madvise(mmap.MADV_DONTNEED, a, b - a)
                except (OSError, ValueError):
                    return

    def close(self) -> None:
        """Let go of the maps; one a view still reads (a member's bytes still referenced) is closed with its last
        view, not here."""
        self._maps.clear()
        for mapped in self._mmaps.values():
            try:
                mapped.close()
            except BufferError:  # exported to a numpy view still alive
                pass
        self._mmaps.clear()


class Server:
    def __init__(self, ordinal: int, files: list[str], evict: bool = False, threads: int = 0,
                 first: tuple | None = None):
        from nvidia import nvimgcodec

        from .cudadrv import Device

        self.device = Device(ordinal)
        self.stream = self.device.stream()
        self.decoders = JpegDecoders(nvimgcodec, ordinal, threads)
        if not self.decoders:
            raise RuntimeError("nvImageCodec could make no JPEG decoder on this GPU")
        self.shards = ShardMaps(files)
        self.evict = evict
        self.ring = 0
        if first is not None:
            self.first(*first)

    def first(self, shard: int, start: int, length: int) -> None:
        """Decode one member and drop what it made: the engine starts at its first decode. A member that does not
        decode is said by the call that asks for it (by key), not here."""
        shard, start, length = (np.array([v], dtype=np.int64) for v in (shard, start, length))
        try:
            self.decoders.decode(member_bytes(shard, start, length, self.shards.map), self.stream)
        except Exception:  # noqa: BLE001 - a damaged member is refused by key by the call that reads it
            pass
        self.device.synchronize(self.stream)
        if self.evict:
            self.shards.let_go(shard, start, length)

    def set_ring(self, handle: bytes) -> tuple:
        if self.ring:
            self.device.close_ipc(self.ring)
        self.ring = self.device.open_ipc(handle)
        return ("ok",)

    def decode(self, shard, start, length, height, width, dest) -> tuple:
        try:
            data = member_bytes(shard, start, length, self.shards.map)
        except JpegFault as fault:
            return ("bad", fault.row, fault.what)
        images = self.decoders.decode(data, self.stream)
        with self.device:
            for i, image in enumerate(images):
                h, w = int(height[i]), int(width[i])
                try:
                    face = decoded_face(image, h, w)
                except JpegFault as fault:
                    return ("bad", i, fault.what)
                if face.get("strides") not in (None, (3 * w, 3, 1)):
                    return ("bad", i, f"decodes to rows of {face['strides'][0]} bytes, not {3 * w}")
                self.device.copy(self.ring + int(dest[i]), face["data"][0], h * w * 3, self.stream)
        self.device.synchronize(self.stream)  # copied: the images may go
        if self.evict:
            self.shards.let_go(shard, start, length)
        return ("done",)

    def close(self) -> None:
        if self.ring:
            self.device.close_ipc(self.ring)
            self.ring = 0
        self.shards.close()


def serve(conn: Connection) -> int:
    server = None
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the loader is gone
                return 0
            kind = msg[0]
            try:
                if kind == "init":
                    server = Server(*msg[1:])
                    reply: tuple = ("ready",)
                elif kind == "ring":
                    reply = server.set_ring(msg[1])
                elif kind == "decode":
                    reply = server.decode(*msg[1:])
                elif kind == "close":
                    return 0
                else:
                    reply = ("error", f"unknown request {kind!r}")
            except Exception as exc:  # noqa: BLE001 - told to the loader, which raises it with its context
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                reply = ("error", f"{type(exc).__name__}: {first}", traceback.format_exc())
            conn.send(reply)
    finally:
        if server is not None:
            server.close()


def main(argv: list[str]) -> int:
    # the loader decides when this process stops: Ctrl-C in a terminal reaches the whole process group, and the
    # loader's own handling (closing it) is what should answer it, not a traceback from here; SIGTERM too (a
    # scheduler signals every process of a job, torchrun a rank's group), while the run saves itself. It ends with
    # its connection, whichever way the loader ends.
    interrupts.set_aside()  # (started with SIGINT blocked: one that came meanwhile is dropped)
    return serve(Connection(int(argv[0])))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
