"""What both places that decode a split's JPEG files on the GPU share (the decode process, `workers.decode`, and the
loading process's decode thread, `pairload.cut.memory.decoded`): nvImageCodec's decoders (`JpegDecoders`) and the
check that each member is a whole JPEG before a decoder sees it (`member_bytes`), and the check of what it decoded to
(`decoded_face`). Numpy and nvImageCodec only."""

from __future__ import annotations

import numpy as np


class JpegDecoders:
    """The hardware JPEG engine (its own silicon: no SMs taken from training), then, for what it cannot decode (or a
    GPU without one), the hybrid CPU+CUDA decoder, made at its first use (it starts threads of its own). Not one
    decoder given both: it shares a batch out between them, and the hybrid one, on the few cores a loader has, is then
    the bottleneck (1,000 images/s against 13,000)."""

    KINDS = ("HW_GPU_ONLY", "HYBRID_CPU_GPU")

    def __init__(self, nvimgcodec, device_id: int, threads: int = 0):
        # threads: the CPU threads each decoder parses with (nvImageCodec's max_num_cpu_threads; 0: its default, one
        # a core of the machine, whatever cores the process may use)
        self._codec, self._device_id, self._threads = nvimgcodec, device_id, threads
        self._made: list = []  # (kind, decoder or None: it could not be made here)
        # the pixels as stored, as OpenCV's decode gives them to the CPU readers and to a decoded pack: nvImageCodec
        # applies a file's EXIF orientation unless told not to (a phone photo's 90° tag would give a W×H image)
        self._params = nvimgcodec.DecodeParams(apply_exif_orientation=False)
        self._next()

    def _next(self) -> bool:
        """Make the next kind's decoder; False: none left."""
        while len(self._made) < len(self.KINDS):
            kind = self.KINDS[len(self._made)]
            codec = self._codec
            try:
                decoder = codec.Decoder(device_id=self._device_id, max_num_cpu_threads=self._threads, backends=[
                    codec.Backend(getattr(codec.BackendKind, kind), load_hint=1.0)])
            except Exception:  # noqa: BLE001 - e.g. a GPU without the hardware engine: the next kind serves
                decoder = None
            self._made.append((kind, decoder))
            if decoder is not None:
                return True
        return False

    def __bool__(self) -> bool:
        """Some decoder could be made here."""
        return any(d is not None for _, d in self._made) or self._next()

    def decode(self, data: list, stream: int) -> list:
        """Each JPEG decoded on CUDA stream `stream` by the first decoder that can (None: none could)."""
        images = [None] * len(data)
        todo = list(range(len(data)))
        k = 0
        while todo and (k < len(self._made) or self._next()):
            decoder = self._made[k][1]
            k += 1
            if decoder is None:
                continue
            got = decoder.decode([data[j] for j in todo], params=self._params, cuda_stream=stream)
            for j, image in zip(todo, got):
                images[j] = image
            todo = [j for j in todo if images[j] is None]
        return images


def first_cut_short(mm: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[int, str] | None:
    """The first of the members mm[start:start+length] that is not a whole JPEG (a decoder fills a cut-short JPEG
    with grey and says nothing), as (its position, what it is), or None."""
    end = start + length
    ok = (length >= 4) & (mm[start] == 0xFF) & (mm[start + 1] == 0xD8) & (mm[end - 2] == 0xFF) & (mm[end - 1] == 0xD9)
    if ok.all():
        return None
    x = int(np.flatnonzero(~ok)[0])
    a, b = int(start[x]), int(end[x])
    head, tail = bytes(mm[a:a + 2]), bytes(mm[max(a, b - 2):b])
    return x, f"is not a whole JPEG (it starts with {head.hex(' ')} and ends with {tail.hex(' ')}, not ff d8 … ff d9)"


class JpegFault(Exception):
    """A JPEG member refused: `what` it is (the tail of the message its caller makes, naming shard and key), `row`
    its place in the members asked for (-1: the caller knows it)."""

    def __init__(self, what: str, row: int = -1):
        super().__init__(what)
        self.what, self.row = what, row


def member_bytes(shard: np.ndarray, start: np.ndarray, length: np.ndarray, shard_map) -> list:
    """Each member's bytes, a view of its shard's map (`shard_map(number)`), its ends checked with numpy shard by
    shard; the first not a whole JPEG raises JpegFault with its row."""
    data: list = [None] * len(shard)
    for s in np.unique(shard).tolist():
        m = np.flatnonzero(shard == s)
        mm = shard_map(s)
        a = start[m]
        bad = first_cut_short(mm, a, length[m])
        if bad is not None:
            raise JpegFault(bad[1], int(m[bad[0]]))
        for x, lo, hi in zip(m.tolist(), a.tolist(), (a + length[m]).tolist()):
            data[x] = mm[lo:hi]
    return data


def decoded_face(image, h: int, w: int) -> dict:
    """The `__cuda_array_interface__` of a decoded image (None: the decoder refused it), which must be h × w × 3
    uint8; else JpegFault."""
    if image is None:
        raise JpegFault("does not decode on the GPU (nvImageCodec refused it)")
    face = image.__cuda_array_interface__
    if tuple(face["shape"]) != (h, w, 3) or face["typestr"] != "|u1":
        raise JpegFault(f"decodes to {face['typestr']} {tuple(face['shape'])}, the index says uint8 {(h, w, 3)}")
    return face
