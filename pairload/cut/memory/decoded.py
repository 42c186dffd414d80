"""The decode stage of an encoded split (`pack --store encoded`) on a CUDA device: the `Memory` the kernel cuts from
when the shards hold encoded images. Batch by batch, as the cutter asks for them (`wait`), the images the batch reads
are decoded on the cutter's stream, each into an H×W×C image of its own: JPEG files by nvImageCodec (the GPU's
hardware JPEG engine where it has one, which takes no SMs from training), lossless `tiles` members by nvCOMP and a
kernel (`memory.tiles`), only the tiles the batch's windows read; the address tables point at them, and the kernel
cuts and orients the windows exactly as from the page cache. The page cache holds only the encoded bytes (2-14×
fewer than decoded pixels), read through the shards' memory maps; nothing is pinned. A member stored as pixels
(`npy`) is copied over as it is.

A batch's images go back once the kernel that reads them is done (`done`); a streamed split's shards are only
mapped. While a call's batches are cut, the next call is decoded. A split's JPEG files are decoded by processes of
the loader's own (`jpegproc`, each call shared out between them), into slots of device memory this process
allocated: nvImageCodec's binding takes the GIL back for each image, so a decode thread here would get it only
between the loading thread's work. Lossless tiles (and JPEG files where those processes cannot start) are decoded
by a thread here (made in the loading thread, the engine's call, about 10 ms for 128 photos, would stop the training
step's launches meanwhile: the reference loop's data wait 10% against 0.05%); it makes only the engines' calls, the
host's part of a call (its members found and checked, its addresses gathered) is done by the loading thread before
and after. A caller that reads faster than that thread decodes finds its calls not done: after LATE_CALLS of them the
calls are made in the loading thread for a while (`INLINE_CALLS`). In the first run (every run, for a split the page
cache cannot keep) a reader thread asks the kernel for the coming batches' bytes (`read.ahead`); a run of such a
split that reads its shards a few at a time (wds) has its shards read whole and dropped whole (`read.streamed`).
Which decoders a split needs, and how far a JPEG's decode may differ, is `decoders`'.

JPEG decoders differ by their IDCT and chroma rounding: the GPU gives libjpeg-turbo's pixels (OpenCV's decode,
which `pack` checks and the CPU workers deliver) within JPEG_TOLERANCE levels. (torchvision's GPU `decode_jpeg`,
also measured, was as fast but differs by up to 31 levels: another chroma upsampling.)
"""

from __future__ import annotations

import os
import time
import warnings
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from ...devices import loader_stream
from ...errors import LoaderError, ShardError
from ...format import imageformats
from ...hooks import Hooks
from ...hostmemory import host_memory, outgrows_cache
from ...read.ahead import ReadAhead, batches_within
from ...read.drops import Drops
from ...read.streamed import MOST, ShardStream
from ...workers.jpegs import JpegFault, decoded_face, member_bytes
from .decoders import formats_in, gpu_decoders
from .pages import CHECK_S
from .tileplan import TileReads, TileTable, plan, windows_read

AHEAD = 4  # batches whose images are decoded in one call (JPEG files)
AHEAD_TILES = 8  # the same for a split with lossless tiles: nvCOMP decodes 16,000 images/s in calls of 256 and
# 19,800 in calls of 512 (600x400, crop 256, H200, 2026-11-28)
AHEAD_TILES_TIGHT = 2  # and for a split bigger than the memory that could cache it (a memory limit): a call's bytes
# are staged in pinned memory, which nothing reclaims (~140 MB a call of 256 600x400 pairs, kept by torch's pinned
# allocator in blocks of the next power of two: with three calls in flight, 768 MB of a 2 GB limit, and every page
# read ahead was pushed out before its call, 80 pairs/s); such a split is read at the disk's speed, far below decoding
# a call decoded ahead that was not done when its batches were asked for, this many calls in a row: the caller reads
# faster than the decode (a loop that only reads the loader, or a model much faster), and decoding in the loading
# thread, without the hop between threads, is faster (13,000 pairs/s against 10,000 on 2 cores); the next INLINE_CALLS
# calls are made there, then the thread again. A training step longer than a call finds each done and keeps it.
LATE_CALLS = 3
INLINE_CALLS = 16
PROCESS = True  # a split's JPEG files are decoded by processes of its own (`jpegproc`); False: by a thread here
READ_AHEAD_BYTES = 512 << 20  # read ahead of the batch being decoded at most (or half the memory available): ~0.3 s
# of a 1.7 GB/s disk. Lossless tiles read under a memory limit: 0.80-1.06 of the disk with 512 MB, 0.66-0.93 256 MB


class DecodedMemory:
    """The images of `ds` (an encoded split) decoded on `device` batch by batch; `inputs` False: targets only (the
    degrade stage makes every input). `low`/`high`: each sample's device address while a batch reading it is in
    flight, `width`: its width in pixels."""

    streaming = True  # batch by batch: a batch's images go back once it is cut

    def __init__(self, ds, device: torch.device, *, inputs: bool = True, read_ahead: bool = True,
                 background: bool = True, evict: bool | None = None, process: bool | None = None,
                 hooks: Hooks | None = None):
        self.ds, self.device, self.inputs = ds, device, inputs
        self.hooks = hooks or Hooks()  # the loader's: "prepare" (bytes read, staged) and "decoded" (thread waited)
        # the next decode call runs in a thread of its own while a call's batches are cut (a remote split's shards
        # are fetched and held by the loading thread, as before)
        self.background = background and not ds.remote
        self.calls_ahead = 0  # decode calls made in the decode thread
        self.calls_inline = 0  # and in the loading thread, the caller having waited for the thread (`LATE_CALLS`)
        self._late = 0  # calls in a row not done when their batches were asked for
        self._inline_left = 0  # calls still to make in the loading thread
        self._inline_next = False  # the next call is one of them
        self._pool: ThreadPoolExecutor | None = None
        self._stream: torch.cuda.Stream | None = None
        self._next: deque = deque()  # (first batch, end, future) of each call decoding ahead, in order
        # a thread asks the kernel for the coming batches' bytes: the decoder's reads find them in the page cache
        self.read_ahead = read_ahead and hasattr(os, "posix_fadvise") and not ds.remote
        self._reader: ReadAhead | None = None
        # or this run's shards read whole (a by-shard run beyond memory): its `ShardStream`, in a list a finalizer
        # reaches without this object, so that a loader dropped unclosed stops its threads too
        self._streams: list[ShardStream] = []
        weakref.finalize(self, _close_all, self._streams)
        self._reading = False  # this run is read ahead
        self._outgrows = outgrows_cache(sum(ds.shard_bytes))  # every run reads the split from disk
        # and so a call's pages are dropped once its images are decoded: kept, they would push out the pages read
        # ahead for the coming calls (read twice, or 10x slower under a memory limit: `ReadAhead`, `dontneed`)
        self.evict = self._outgrows and not ds.remote if evict is None else evict
        self._drops = Drops(ds)  # and dropped by a thread of their own (the loading thread's time is the cuts')
        self.formats = formats_in(ds)  # the image formats of its members
        # a split of JPEG files (and pixels) on local disk: its JPEG files decoded by processes of its own
        # (`jpegproc`), started now, their start overlapping this one's; tiles, a remote split, or where they cannot
        # start: in this one
        self.process = PROCESS if process is None else process
        self.proc = None
        if self.process and imageformats.JPEG in self.formats and imageformats.TILES not in self.formats \
                and not ds.remote:
            from .jpegproc import ProcessDecode

            self.proc = ProcessDecode(ds, device, evict=self.evict)
            weakref.finalize(self, self.proc.close)  # a loader dropped unclosed ends its decode process too
        self.decoders = gpu_decoders(device) if imageformats.JPEG in self.formats and self.proc is None else None
        self.tiles = None
        self.call = AHEAD  # batches decoded in one call
        if imageformats.TILES in self.formats:
            from .tiles import TileDecoder

            self.tiles = TileDecoder(device)
            self.call = AHEAD_TILES_TIGHT if self.evict else AHEAD_TILES
        n = len(ds.sizes)
        self.low = torch.zeros(n, dtype=torch.int64, device=device)
        self.high = torch.zeros(n, dtype=torch.int64, device=device)
        self.width = torch.from_numpy(np.ascontiguousarray(ds.sizes[:, 1], dtype=np.int64)).to(device)
        self._plans: list = []
        self._held: dict[int, Decoded | None] = {}  # batch -> the call whose images its kernel reads (its last)
        self._releasing: deque = deque()  # (event, the call or None) to let go of once the event is done
        self._checked = time.monotonic()
        self._closed = False
        # the tiles members' tables, each read once (the shards' files are watched: `check`), and the memo of their
        # tiles whose CRC-32 was checked
        self._table = TileTable(n) if self.tiles is not None else None

    # -- the Memory protocol
    @property
    def together(self) -> int:
        """Batches one launch may cut: those of one decode call (its images are held until its last batch is cut)."""
        return self.call

    @property
    def pids(self) -> list[int]:
        """The JPEG decode processes now running."""
        return [] if self.proc is None or self._closed else self.proc.pids

    def begin(self, plans, after=None) -> None:
        self._forget_all()
        self.reap(block=True)
        self._plans = plans
        if len(plans) and self._use_proc():  # the decode process's slots hold a call of this run
            self.call = self.proc.reserve(plans, AHEAD)
        if self.ds.remote and len(plans):
            self.ds.want(plans.all_index())
        # the first run reads the split from disk; later ones only if the page cache cannot keep it: a by-shard run
        # whose pages are dropped as it goes reads its shards whole (`ShardStream`), any other its batches' members
        # a window ahead (`ReadAhead`: READ_AHEAD_BYTES, or half of the memory available, at least two calls). Where
        # every run reads from disk, each goes on into the run expected next (`after`) once its own is all asked for
        reading = self.read_ahead and len(plans) and (self._reader is None or self._outgrows)
        after = after if self._outgrows else None
        stream = self._shards
        if stream is not None and reading and (spans := stream.rebase(plans, after)) is not None:
            for span in spans:  # the run before's last stretches (those the stream went on past)
                self._drops.span(*span)
        else:
            _close_all(self._streams)
            stream = None
            if reading and self.evict and self.proc is None:
                stream = ShardStream.of(self.ds, plans, min(MOST, host_memory().available // 2), after)
            if stream is not None:
                self._streams.append(stream)
        if reading and self._shards is None and self._reader is None:
            rows = max(len(bp) for bp in plans.block_at(0).plans)
            # of a tiled member only the tiles the windows touch are read ahead, with its header where the index says
            # where its tiles start (while this stage's table does not hold it), else after the reader read it itself
            ranges = None if self.tiles is None else TileReads(self.ds, self.inputs, self.ds.members.scale,
                                                                self._table)
            self._reader = ReadAhead(self.ds, max(2 * self.call, batches_within(self.ds, rows, READ_AHEAD_BYTES)),
                                     ranges)
            weakref.finalize(self, self._reader.close)  # a loader dropped unclosed stops the thread too
        if self._reader is not None:
            self._reader.reset(plans, after if self._shards is None else None)
        self._reading = bool(reading)

    def wait(self, b: int) -> None:
        """Decode what batch b reads and point the tables at it, on the current stream: with the next `call` - 1
        batches' images, in one call (the engine decodes larger batches faster), held until the last of them is
        cut. The call after it starts at once in the decode thread (`background`), on a stream of its own, while these
        batches are cut: the engine's call, GIL released while it waits, overlaps the loader's and the training
        step's work. The decode processes are sent `proc.ahead` calls ahead: each finds its next call waiting."""
        if self._reading:
            self.reader.follow(b)
        if b in self._held:
            return
        ahead = self._next.popleft() if self._next else None
        if ahead is not None and ahead[0] == b:
            _, end, future = ahead
            self._late = 0 if future.done() else self._late + 1
            with self.hooks.timed("decoded"):
                out = future.result()
            if out.event is not None:  # decoded by the decode thread, on its stream
                torch.cuda.current_stream(self.device).wait_event(out.event)
            got = self.finish(out)
        else:
            self._forget(ahead)
            self._forget_all()
            end = self._end(b)
            got = self.finish(self.launch(self._prepare_for(self._plans[b:end])))
            self.calls_inline += ahead is None and self._inline_next
        self._point(got)
        self._held.update({k: None for k in range(b, end - 1)})
        self._held[end - 1] = got
        more = self.background and end < len(self._plans)
        self._inline_next = more and self._inline()
        if more and not self._inline_next:
            at = self._next[-1][1] if self._next else end
            while at < len(self._plans) and len(self._next) < (self.proc.ahead if self.proc is not None else 1):
                later = self._end(at)
                self._next.append((at, later, self._launch_ahead(self._plans[at:later])))
                at = later

    def _inline(self) -> bool:
        """Whether the next call is made in the loading thread (`LATE_CALLS`)."""
        if self._inline_left > 0:
            self._inline_left -= 1
            return True
        if self._late >= LATE_CALLS:
            self._late, self._inline_left = 0, INLINE_CALLS - 1
            return True
        return False

    def _end(self, b: int) -> int:
        return min(len(self._plans), b + self.call)

    def _prepare_for(self, plans) -> "Prepared":
        """`prepare` of the samples `plans` read (the windows they read, for tiled members)."""
        with self.hooks.timed("prepare"):
            samples = np.unique(np.concatenate([bp.index for bp in plans]))
            windows = windows_read(plans, samples, self.ds.sizes) if self.tiles is not None else None
            return self.prepare(samples, windows)

    def _launch_ahead(self, plans) -> Future:
        """The call decoding `plans`: prepared here, its engines' calls made in the decode thread on its stream (the
        event marks them done), or sent to the decode process (`proc`) at once. An error in either is raised by the
        future, at the batch that reads the call."""
        try:
            out = self._prepare_for(plans)
            if self.proc is not None:
                self.calls_ahead += 1
                sent: Future = Future()
                sent.set_result(self.launch(out))
                return sent
        except Exception as exc:  # noqa: BLE001 - raised where the batches that read it are asked for
            failed: Future = Future()
            failed.set_exception(exc)
            return failed

        def run() -> Prepared:
            with torch.cuda.device(self.device), torch.cuda.stream(self._stream):
                self.launch(out)
                out.event = torch.cuda.Event()
                out.event.record(self._stream)
            return out

        self.calls_ahead += 1
        return self._thread().submit(run)

    def _thread(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="pairload-decode")
            self._stream = loader_stream(self.device)
            weakref.finalize(self, self._pool.shutdown, wait=False)  # a loader dropped unclosed: the thread ends
        return self._pool

    def _forget(self, ahead) -> None:
        """A call decoded ahead that no batch will read (the loader went elsewhere in the plan, or closes): wait for
        it to end (the decode process's answer read); an error in it is the error of batches not delivered, so it is
        not raised."""
        if ahead is None:
            return
        try:
            out = ahead[2].result()
            if out.event is not None:
                out.event.synchronize()
            if out.slot is not None:
                self.proc.drain(out.request)
        except Exception:  # noqa: BLE001 - the batches that would raise it are not read
            pass

    def _forget_all(self) -> None:
        """`_forget` the calls decoding ahead, in the order they were made (the processes answer in order)."""
        while self._next:
            self._forget(self._next.popleft())

    def done(self, b: int, event) -> None:
        got = self._held.pop(b, None)
        if got is not None and got.slot is not None:
            self.proc.released(got.slot, event)  # its slot is free again once this batch's kernels are
        self._releasing.append((event, got, b))
        self.reap()

    def reap(self, block: bool = False) -> None:
        while self._releasing and (block or self._releasing[0][0] is None or self._releasing[0][0].query()):
            event, got, b = self._releasing.popleft()
            if event is not None and block:
                event.synchronize()
            if not self.evict or self._closed:  # else its bytes are on the device: drop their pages
                continue
            if self._shards is not None and b is not None:  # whole shards, once their last batch is cut
                for span in self._shards.done(b):
                    self._drops.span(*span)
            elif got is not None and self._shards is None:
                self._drops.drop(got.samples)

    def check(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._checked >= CHECK_S:
            self._checked = now
            self.ds.check_files()

    def warm(self, samples) -> None:
        """Decode both sides of these samples now (the self-test cuts both, and waits for its kernel), keeping
        them until the next batch is done."""
        inputs, self.inputs = self.inputs, True
        try:
            samples = np.unique(np.asarray(samples, dtype=np.int64))
            if self._use_proc():
                self.proc.reserve_samples(len(samples))
            self._releasing.append((None, self._decode(samples), None))
        finally:
            self.inputs = inputs

    def reopen(self) -> "DecodedMemory":
        return DecodedMemory(self.ds, self.device, inputs=self.inputs, read_ahead=self.read_ahead,
                             background=self.background, evict=self.evict, process=self.process, hooks=self.hooks)

    @property
    def reader(self) -> ShardStream | ReadAhead | None:
        """What reads this run ahead of its batches (None before the first run, or without read-ahead)."""
        return self._shards or self._reader

    @property
    def _shards(self) -> ShardStream | None:
        return self._streams[0] if self._streams else None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._forget_all()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.reap(block=True)
        self._drops.close()  # every call's pages dropped before the loader is closed
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        _close_all(self._streams)
        if self.tiles is not None:
            self.tiles.close()
        if self.proc is not None:
            self.proc.close()
        self._held.clear()
        self._closed = True

    # -- decoding
    def _decode(self, samples: np.ndarray, windows: np.ndarray | None = None) -> "Decoded":
        """Decode these samples' members (both sides, or the targets only) and point the tables at them; returns
        the call, which must stay alive until the kernel reading it is done. `windows`: per sample the (top, left,
        bottom, right) of the input's pixels its windows read, of which a tiled member decodes only the tiles they
        touch (None: whole images)."""
        got = self.finish(self.launch(self.prepare(samples, windows)))
        self._point(got)
        return got

    def _point(self, got: "Decoded") -> None:
        """Point the tables at a decode call's images, on the current stream (the stream that cuts them)."""
        if self.inputs:
            self.low.index_copy_(0, got.index, got.table[0])
        self.high.index_copy_(0, got.index, got.table[1])

    def prepare(self, samples: np.ndarray, windows: np.ndarray | None) -> "Prepared":
        """The host's part of `_decode`, touching no device: each member's bytes found and checked, the tiled members'
        wanted tiles planned from the split's table (`tileplan`: numpy over all of them, a member's tables read at its
        first use) and staged."""
        rows = self.ds.stored_members(samples)
        sides = (0, 1) if self.inputs else (1,)
        once = rows.offset[:, 0] == rows.offset[:, 1]  # a targets-only split: one member for both sides
        out = Prepared(samples, rows, sides, once)
        # the members decoded, side by side: an input that is its target is decoded once, as the target
        k = np.concatenate([np.full(len(samples), s, dtype=np.int64) for s in sides])
        j = np.concatenate([np.arange(len(samples)) for _ in sides])
        keep = ~((k == 0) & once[j]) if 1 in sides else np.ones(len(k), dtype=bool)
        k, j = k[keep], j[keep]
        code = rows.format[j, k]
        tiled = code == imageformats.TILES.code
        jpeg = code == imageformats.JPEG.code
        if jpeg.any() and self._use_proc():
            out.request = self.proc.request(samples, rows, k[jpeg], j[jpeg])
        elif jpeg.any():
            out.jpegs = self._jpeg_members(samples, rows, k[jpeg], j[jpeg])
        for kk, jj in zip(k[~tiled & ~jpeg].tolist(), j[~tiled & ~jpeg].tolist()):  # pixels: copied over as stored
            out.pixels.append((kk, jj, self._stored(rows, jj, kk)))
        if tiled.any():
            out.tiled = tk, tj = k[tiled], j[tiled]
            out.staged = self._stage_tiles(samples, rows, tk, tj, windows)
        return out

    def _stage_tiles(self, samples: np.ndarray, rows, k: np.ndarray, j: np.ndarray, windows) -> object:
        """Plan and stage the tiled members (side k of row j): the tiles of each that `windows` touch (None: every
        tile). A member's header and tables are checked at its first use (`_header`), its tiles' CRC-32s as they are
        staged the first time (`TileDecoder.stage`), before the GPU sees them (nvCOMP decodes what it is given). The
        shards' files are watched (`check`): bytes checked once stay as they were."""
        table_rows = self._table.rows(samples[j], k,
                                      lambda m: self._header(int(samples[j[m]]), rows, int(j[m]), int(k[m])))
        shards, source = np.unique(rows.shard[j], return_inverse=True)
        wanted = np.full((len(j), 4), -1, dtype=np.int64) if windows is None else windows[j]
        scale = np.where(k == 1, self.ds.members.scale, 1)
        member, tile = self._table.windows(table_rows, wanted, scale)
        p = plan(self._table, table_rows, source, rows.offset[j, k], member, tile)

        def bad(m: int, what: str) -> ShardError:
            return self._bad(samples[j[m]], int(k[m]), rows.shard[j[m]], what)

        return self.tiles.stage(p, [self.ds.shard_map(int(s)) for s in shards], bad, self._table)

    def launch(self, out: "Prepared") -> "Prepared":
        """The engines' part of `_decode`, on the current stream: the pixel members copied over, the JPEG files
        decoded, the tiled members' tiles decoded; what they made is kept in `out` for `finish`."""
        out.copied = [torch.from_numpy(np.array(data, copy=True)).to(self.device) for _, _, data in out.pixels]
        if out.request is not None:
            out.slot = self.proc.submit(out.request)
        if out.jpegs:
            out.images = self._decode_jpegs([data for _, _, data in out.jpegs])
        if out.staged is not None:
            out.tiles_made = self.tiles.submit(out.staged)
        return out

    def finish(self, out: "Prepared") -> "Decoded":
        """The rest of `_decode`, on the current stream once `launch`'s work is done there: each image checked and
        its address gathered, the tables copied over (not pointed yet: `_point`)."""
        samples, rows = out.samples, out.rows
        ptr = np.zeros((2, len(samples)), dtype=np.int64)
        held: list = list(out.copied)
        for (k, j, _), pixels in zip(out.pixels, out.copied):
            ptr[k, j] = pixels.data_ptr()
        if out.jpegs:
            held.extend(self._jpegs(out.jpegs, out.images, samples, rows, ptr))
        if out.request is not None:
            self.proc.collect(out.request, out.slot, ptr, lambda j, k, shard, what: self._bad(samples[j], k, shard,
                                                                                                 what))
        if out.staged is not None:
            addresses, _, keep = out.tiles_made
            ptr[out.tiled] = addresses
            held.extend(keep)
        if 1 in out.sides:
            ptr[0, out.once] = ptr[1, out.once]
        table = torch.from_numpy(ptr).pin_memory().to(self.device, non_blocking=True)
        index = torch.from_numpy(samples).pin_memory().to(self.device, non_blocking=True)
        held.append((table, index))
        return Decoded(held, table, index, samples, out.slot)

    # -- the decode process (`proc`)
    def _use_proc(self) -> bool:
        """Whether the decode process decodes the JPEG members (waited for at the first call). Where it cannot, this
        process decodes them from then on, and says why once."""
        if self.proc is None:
            return False
        why = self.proc.ready()
        if why is not None:
            self.proc = None
            warnings.warn(f"the JPEG decode process could not start ({why}); the loading process decodes the JPEG "
                          "members itself, slower on few cores", stacklevel=2)
            self.decoders = gpu_decoders(self.device)
            if not self.decoders:
                raise LoaderError("nvImageCodec could make no JPEG decoder on this GPU")
            return False
        return True

    def _stored(self, rows, j: int, k: int) -> np.ndarray:
        start = int(rows.offset[j, k])
        return self.ds.shard_map(int(rows.shard[j]))[start:start + int(rows.length[j, k])]

    def _header(self, i: int, rows, j: int, k: int):
        """The checked header and tables of sample i's `tiles` member on side k, row j of `rows` (`format.tiles.
        read_tiled`; its tiles' CRC-32s are checked as they are staged)."""
        from ...format.tiles import read_tiled

        h, w = (int(v) * (self.ds.members.scale if k else 1) for v in self.ds.sizes[i])
        try:
            return read_tiled(self._stored(rows, j, k), self.ds.members.side(k), h, w, check_crc=False)
        except imageformats.MemberError as exc:
            raise self._bad(i, k, rows.shard[j], str(exc)) from None

    def _jpeg_members(self, samples: np.ndarray, rows, k: np.ndarray, j: np.ndarray) -> list:
        """The JPEG members (side k of row j) as (side, row, bytes), their ends checked with numpy, shard by shard:
        a member cut short or overwritten is refused before the decoder sees it (a decoder fills a cut-short JPEG
        with grey and says nothing)."""
        shard = rows.shard[j]
        try:
            data = member_bytes(shard, rows.offset[j, k], rows.length[j, k], self.ds.shard_map)
        except JpegFault as fault:
            x = fault.row
            raise self._bad(samples[j[x]], int(k[x]), int(shard[x]), fault.what) from None
        return list(zip(k.tolist(), j.tolist(), data))

    def _jpegs(self, jpegs, images: list, samples: np.ndarray, rows, ptr: np.ndarray) -> list:
        """The JPEG members' decoded images checked; their addresses go to `ptr`."""
        scale = self.ds.members.scale
        held = []
        for (k, j, _), image in zip(jpegs, images):
            h, w = (int(v) * (scale if k else 1) for v in self.ds.sizes[samples[j]])
            try:
                face = decoded_face(image, h, w)
            except JpegFault as fault:
                raise self._bad(samples[j], k, rows.shard[j], fault.what) from None
            if face.get("strides") not in (None, (3 * w, 3, 1)):  # rows padded: the kernel reads rows of w pixels
                t = torch.as_tensor(image, device=self.device).contiguous()
                held.append(t)
                ptr[k, j] = t.data_ptr()
            else:
                ptr[k, j] = face["data"][0]
            held.append(image)
        return held

    def _decode_jpegs(self, data: list) -> list:
        """Each JPEG decoded on the current stream by the first decoder that can (None: none could)."""
        return self.decoders.decode(data, torch.cuda.current_stream(self.device).cuda_stream)

    def _bad(self, i: int, k: int, shard: int, what: str) -> ShardError:
        return ShardError(f"{self.ds.name(int(shard))}: key {self.ds.keys[int(i)]}: its {('low', 'high')[k]} member "
                          f"{what}; the shard is damaged: run `pairload verify` on the split to find every damaged "
                          "sample, and repack (or restore the shard from a copy)")


def _close_all(streams: list) -> None:
    """Close and forget these `ShardStream`s (a run's, at the next run, at `close`, or when the loader is dropped)."""
    for stream in streams:
        stream.close()
    streams.clear()


class Decoded:
    """A decode call done (`DecodedMemory.finish`): what must stay alive until the kernel reading it is done
    (`held`), each sample's (input, target) address (`table`, 2×n on the device) for the samples `index` (on the
    device; `samples`: the same on the host)."""

    __slots__ = ("held", "table", "index", "samples", "slot")

    def __init__(self, held: list, table: torch.Tensor, index: torch.Tensor, samples: np.ndarray,
                 slot: int | None = None):
        self.held, self.table, self.index, self.samples, self.slot = held, table, index, samples, slot


class Prepared:
    """A decode call: its host part (`DecodedMemory.prepare`: its samples, their stored members' rows, the sides
    decoded, which samples' input is their target; the JPEG files and pixel members ((side, row, bytes)), the
    tiled members ((sides, rows): two arrays) and their staged bytes (`TileDecoder.stage`)), then what the engines
    made of them (`launch`: the pixel members' copies, the JPEG images, the tiles' addresses and buffers) and, from the
    decode thread, the event after which they are there."""

    def __init__(self, samples: np.ndarray, rows, sides: tuple, once: np.ndarray):
        self.samples, self.rows, self.sides, self.once = samples, rows, sides, once
        self.jpegs: list = []
        self.pixels: list = []
        self.tiled: tuple = ()
        self.staged = None
        self.copied: list = []
        self.images: list = []
        self.tiles_made = None
        self.event = None
        self.request = None  # the JPEG members asked of the decode process (`jpegproc.JpegRequest`)
        self.slot: int | None = None  # and the slot of its memory they go to
