"""The loader's side of its JPEG decode processes (`pairload.workers.decode`): the processes started (`python -m`, so
they import neither torch nor the user's `__main__`), the device memory their images go to (SLOTS slots, each holding
one decode call's images, allocated here and opened there from its IPC handle), each call shared out between them and
their answers read in order.

Why a process and not a thread of the loader: nvImageCodec's Python binding takes the GIL back for each image of a
call (its arguments, each image's object), so a decode thread that shares the GIL with a busy loading thread gets it
once per switch interval, and a call of 128 photos takes as long as the loading thread's work between them; in a
process of its own the engine's calls overlap the loader's work whole (and the training step's launches, made by the
loading thread, never wait behind one).

Why PROCESSES of them: a process spends ~85 µs of CPU an image (nvImageCodec's parse and submit, then each image
checked and copied), so one makes at most ~11,500 600x400 photos a second on the core it gets, half of what the
hardware engine decodes (H200, 2026-11-30); each call's images are shared out between the processes, which decode
their parts at once.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from multiprocessing.connection import Connection

import numpy as np
import torch

from ... import interrupts
from ...errors import LoaderError, PairloadError
from ...forking import child_env, death
from ...format import imageformats
from ...workers.cudadrv import CudaError, Device

PROCESSES = 2  # decode processes of a loader whose split the page cache can keep: 15,200 photos/s against 12,100 with
# one (600x400, `ram` + lowlight, 2 cores, warm, H200, 2026-11-30). One where it cannot (a memory limit): each CUDA
# process holds host memory of its own (the driver, nvImageCodec) that the page cache would otherwise have; with one,
# `ram` and `wds` read a split twice the limit at 9,700-10,400 pairs/s (16 cores)
THREADS = 1  # CPU threads each process's decoder parses with. nvImageCodec's default, a thread a core of the machine
# whatever cores the process may use, spent more CPU an image in a process held to 2 cores (93 µs against 72) and
# decoded 11,500 photos/s against 13,900 (`benchmarks/decode_call_parts.py --pinned`); in the loader, one process
# gave the same either way (12,100-12,400 pairs/s). H200, 2026-11-30
CALLS_AHEAD = 2  # decode calls sent to the processes ahead of the one being cut: each process finds its next call
# waiting when it answers one (with one, it waited for the loading thread to read its answer and send the next: a cold
# epoch after its first batch 9,000-9,200 pairs/s against 12,000-12,200, H200, 2026-11-30)
SLOTS = CALLS_AHEAD + 2  # those, the call being cut, and the one before (its last kernels may still run)
ALIGN = 256  # bytes each image's place in a slot is aligned to
SLOT_BYTES = 1 << 30  # a slot holds a call's images at most: fewer batches a call where batches are larger (4K pairs)
START_S = 120.0  # the longest the process may take to start (nvImageCodec and the driver loaded from a cold disk)


def image_bytes(h, w) -> np.ndarray:
    """Bytes of h × w RGB uint8 images, each rounded up to ALIGN."""
    n = np.asarray(h, dtype=np.int64) * np.asarray(w, dtype=np.int64) * 3
    return -(-n // ALIGN) * ALIGN


class JpegProcess:
    """A decode process for `files` (a split's shards) on `device`, started at once (its start overlaps the
    loader's); `ready()` waits for it. `ring` tells it the device memory its images go to; calls: `submit` sends one,
    `collect` reads the oldest answer. `evict`: it unmaps each call's members once decoded (the loader drops their
    pages: `ShardMaps.let_go`); `threads`: its decoder's CPU threads; `first`: (shard, start, length) of a JPEG member
    it decodes as it starts (the engine starts at its first decode), or None."""

    def __init__(self, files, device: torch.device, evict: bool = False, threads: int = 0, first: tuple | None = None):
        self._why: str | None = None  # why it could not start (after `ready`)
        self._started = False
        self._closed = False
        mine, theirs = socket.socketpair()
        try:
            with interrupts.held():  # a Ctrl-C while it imports: this process's, not a traceback of its
                self._proc = subprocess.Popen([sys.executable, "-m", "pairload.workers.decode", str(theirs.fileno())],
                                              pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=child_env())
        finally:
            theirs.close()
        self._conn = Connection(mine.detach())
        self._conn.send(("init", device.index or 0, [str(f) for f in files], bool(evict), int(threads),
                         first))

    @property
    def pid(self) -> int:
        return self._proc.pid

    def ready(self) -> str | None:
        """Wait for the process to start: None, or why it could not (it is then closed)."""
        if not self._started and self._why is None:
            if not self._conn.poll(START_S):
                self._why = f"the JPEG decode process did not start in {START_S:g} s"
            else:
                try:
                    reply = self._answer()
                    self._why = None if reply[0] == "ready" else reply[1]
                except LoaderError as exc:  # it ended as it started (an import that crashed it)
                    self._why = str(exc)
            self._started = self._why is None
            if self._why is not None:
                self.close()
        return self._why

    def ring(self, handle: bytes) -> None:
        """Its images go to the device memory of this IPC handle from now on; no call may be in flight."""
        self._send(("ring", handle))
        reply = self._answer()
        if reply[0] != "ok":
            raise LoaderError(f"the JPEG decode process could not open the loader's device memory ({reply[1]})")

    def submit(self, shard, start, length, height, width, dest) -> None:
        """Decode these members (int64 arrays, one row a member), member i to `dest[i]` of its ring."""
        self._send(("decode", shard, start, length, height, width, dest))

    def collect(self) -> tuple:
        """The oldest call's answer: ("done",), ("bad", row, what) or ("error", why, traceback)."""
        return self._answer()

    def _send(self, msg: tuple) -> None:
        try:
            self._conn.send(msg)
        except OSError:
            raise self._gone() from None

    def _answer(self) -> tuple:
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            raise self._gone() from None

    def _gone(self) -> LoaderError:
        """The process's connection broke: how it ended."""
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        code = self._proc.poll()
        how = "closed its connection" if code is None else death(code)
        return LoaderError(f"the loader's JPEG decode process (pid {self._proc.pid}) {how}; restart the job"
                           + (" (often the out-of-memory killer: see `dmesg`)" if code == -9 else ""))

    def close(self) -> None:
        """End the process."""
        if self._closed:
            return
        self._closed = True
        try:
            self._conn.send(("close",))
        except OSError:
            pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=1)
        self._conn.close()


class JpegRequest:
    """A decode call's JPEG members as the decode processes are asked for them: side `k` of row `j` of the call,
    their shard, start and length there, their decoded height and width, and their place in the slot (`dest`, bytes);
    once sent, `parts`: (process, first member, end) of each part of it a process decodes."""

    __slots__ = ("k", "j", "shard", "start", "length", "height", "width", "dest", "parts")

    def __init__(self, k, j, shard, start, length, height, width, dest):
        self.k, self.j, self.shard, self.start, self.length = k, j, shard, start, length
        self.height, self.width, self.dest = height, width, dest
        self.parts: list = []


class ProcessDecode:
    """The JPEG members of `ds` (a split, or a mix of them) decoded by decode processes for the loader's decode stage
    (`memory.decoded.DecodedMemory`): PROCESSES of them started at once (one where `evict`); `ready` waits for them
    the first time; each call's members are asked for (`request`), shared out between the processes into the next
    free slot (`submit`), and their addresses read from their answers (`collect`); a slot is free again once the
    kernels that read its call are done (`released`); the loader sends `ahead` calls ahead of the one it cuts.
    `evict`: the loader drops each call's pages once its batches are cut, and the processes let go of their own
    mappings of them."""

    def __init__(self, ds, device: torch.device, evict: bool = False):
        self.ds = ds
        n = 1 if evict else max(1, PROCESSES)
        first = _first_jpeg(ds)  # each decodes it as it starts: their engines start at once, before the first call
        self.processes = [JpegProcess(ds.files, device, evict, THREADS, first) for _ in range(n)]
        self.ahead = CALLS_AHEAD  # calls the loader sends ahead
        self._drv = Device(device.index or 0)
        self.ring = 0  # the slots' device memory: SLOTS × slot_bytes
        self.slot_bytes = 0
        self.sample_bytes = _sample_bytes(ds)
        self._slot = 0  # the next slot a call goes to
        self._slot_done: dict[int, object] = {}  # slot → the event after the last kernel reading it
        self._why: str | None = None  # why it cannot decode, once `ready` has asked ('' : it can)
        self._closed = False

    @property
    def pid(self) -> int:
        """The first decode process's."""
        return self.processes[0].pid

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def ready(self) -> str | None:
        """Wait for the processes to start and open this process's device memory (the first time): None, or why they
        cannot (a GPU whose memory cannot be shared between processes: a MIG slice); they are then closed."""
        if self._why is None:
            why = next((w for w in (p.ready() for p in self.processes) if w is not None), None)
            if why is None:
                try:
                    self.reserve_samples(1)
                except PairloadError as exc:
                    why = str(exc)
            if why is not None:
                self.close()
            self._why = why or ""
        return self._why or None

    def reserve(self, plans, batches: int) -> int:
        """Slots that hold a call of `batches` batches of `plans` (a run), made shorter where a slot would pass
        SLOT_BYTES; returns the batches a call holds. No call may be in flight."""
        rows = _most_rows(plans)
        batches = max(1, min(batches, SLOT_BYTES // max(1, rows * self.sample_bytes)))
        self.reserve_samples(rows * batches)
        return batches

    def reserve_samples(self, n: int) -> None:
        """Slots that hold a call of `n` samples (the old memory goes once the processes have let go of it). No call
        may be in flight."""
        slot_bytes = max(1, n * self.sample_bytes)
        if slot_bytes <= self.slot_bytes:
            return
        old = self.ring
        self.ring = self._drv.alloc(SLOTS * slot_bytes)
        self.slot_bytes = slot_bytes
        handle = self._drv.ipc_handle(self.ring)
        for p in self.processes:
            p.ring(handle)
        if old:
            self._drv.free(old)

    def request(self, samples: np.ndarray, rows, k: np.ndarray, j: np.ndarray) -> JpegRequest:
        """The JPEG members (side k of row j of `rows`, the call's `samples`' stored members) as the processes are
        asked for them: where each is stored, its decoded size, its place in the slot."""
        hw = self.ds.sizes[samples[j]].astype(np.int64)
        scale = np.where(k == 1, self.ds.members.scale, 1)
        height, width = hw[:, 0] * scale, hw[:, 1] * scale
        size = image_bytes(height, width)
        dest = np.cumsum(size) - size
        need = int(dest[-1] + size[-1]) if len(size) else 0
        if need > self.slot_bytes:  # the slots are sized for the run's calls: never here
            raise LoaderError(f"a decode call of {len(size)} images needs {need} bytes, a slot holds "
                              f"{self.slot_bytes}")
        return JpegRequest(k, j, rows.shard[j].astype(np.int64), rows.offset[j, k].astype(np.int64),
                           rows.length[j, k].astype(np.int64), height, width, dest)

    def submit(self, r: JpegRequest) -> int:
        """Send the call into the next slot, once the kernels reading the call it held last are done, a part to each
        process (members in order, as many each); its slot."""
        s = self._slot
        self._slot = (s + 1) % SLOTS
        event = self._slot_done.pop(s, None)
        if event is not None:
            event.synchronize()
        cuts = np.linspace(0, len(r.dest), len(self.processes) + 1).round().astype(int).tolist()
        r.parts = [(p, a, b) for p, a, b in zip(self.processes, cuts, cuts[1:]) if b > a]
        for p, a, b in r.parts:
            p.submit(r.shard[a:b], r.start[a:b], r.length[a:b], r.height[a:b], r.width[a:b],
                     r.dest[a:b] + s * self.slot_bytes)
        return s

    def collect(self, r: JpegRequest, slot: int, ptr: np.ndarray, bad) -> None:
        """The processes' answers to the call `r` sent into `slot`: its images' addresses go to ptr[k, j]; a member
        that is not a whole JPEG, or does not decode to its size, raises `bad(row, side, shard, what)`. Every part's
        answer is read before one is raised (the next call's answers follow them)."""
        replies = [(p.collect(), a) for p, a, _ in r.parts]
        for reply, a in replies:
            if reply[0] == "bad":
                x = a + reply[1]
                raise bad(int(r.j[x]), int(r.k[x]), int(r.shard[x]), reply[2])
            if reply[0] != "done":
                raise LoaderError(f"the JPEG decode process failed: {reply[1]}")
        ptr[r.k, r.j] = self.ring + slot * self.slot_bytes + r.dest

    def drain(self, r: JpegRequest) -> None:
        """Read the answers to a call no batch will read (an error in it is not raised: its batches are not read)."""
        for p, _, _ in r.parts:
            p.collect()

    def released(self, slot: int, event) -> None:
        """The kernels reading the call in `slot` are done once `event` is."""
        self._slot_done[slot] = event

    def close(self) -> None:
        """End the processes, then free the slots (the kernels that read them must be done)."""
        if self._closed:
            return
        self._closed = True
        for p in self.processes:
            p.close()
        try:
            if self.ring:
                self._drv.free(self.ring)
            self._drv.release()
        except CudaError:  # the context already gone (the interpreter ending): so is the memory
            pass
        self.ring = 0


def _first_jpeg(ds) -> tuple | None:
    """(shard, start, length) of the first JPEG member of the split's first samples, or None."""
    rows = ds.stored_members(np.arange(min(len(ds.sizes), 8), dtype=np.int64))
    hit = np.argwhere(rows.format == imageformats.JPEG.code)
    if not len(hit):
        return None
    j, k = (int(v) for v in hit[0])
    return int(rows.shard[j]), int(rows.offset[j, k]), int(rows.length[j, k])


def _most_rows(plans) -> int:
    """Rows of a run's largest batch (clips: a clip's frames are rows)."""
    segments = getattr(plans, "segments", None)
    if segments:
        frames = plans.units.clips.frames if plans.units is not None else 1
        return max(s.rows for s in segments) * frames
    return max(len(bp) for bp in plans)


def _sample_bytes(ds) -> int:
    """The bytes a sample's decoded members take at most in a slot: its target, and its input unless the split holds
    targets only (each input is then its target, decoded once)."""
    hw = np.asarray(ds.sizes, dtype=np.int64)
    if not len(hw):
        return 0
    s = ds.members.scale
    target = int(image_bytes(hw[:, 0] * s, hw[:, 1] * s).max())
    return target + (0 if ds.targets_only else int(image_bytes(hw[:, 0], hw[:, 1]).max()))
