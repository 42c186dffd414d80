"""The few CUDA driver calls (`libcuda.so.1`, through ctypes) that the JPEG decode process and the loader share
device memory with (`pairload.cut.memory.jpegproc`): memory allocated by the loader in its device's primary context
(the context torch and nvImageCodec run in), handed to the decode process as an IPC handle, written there on a stream
of the process's own. Imports neither torch nor Triton: the decode process starts without them."""

from __future__ import annotations

import ctypes
import functools

from ..errors import LoaderError

IPC_HANDLE_BYTES = 64
LAZY_ENABLE_PEER_ACCESS = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
STREAM_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING


class CudaError(LoaderError):
    """A CUDA driver call failed."""


class IpcHandle(ctypes.Structure):
    """CUipcMemHandle: 64 opaque bytes, passed by value."""

    _fields_ = [("reserved", ctypes.c_ubyte * IPC_HANDLE_BYTES)]


@functools.lru_cache(maxsize=1)
def _lib():
    lib = ctypes.CDLL("libcuda.so.1")
    _check(lib, lib.cuInit(0), "cuInit")
    return lib


def _fn(lib, *names):
    """The first of `names` the driver has (versioned entry points first)."""
    for name in names:
        if hasattr(lib, name):
            return getattr(lib, name)
    raise CudaError(f"the CUDA driver has none of {', '.join(names)}: update the NVIDIA driver")


def _check(lib, status: int, what: str) -> None:
    if status:
        text = ctypes.c_char_p()
        lib.cuGetErrorString(status, ctypes.byref(text))
        raise CudaError(f"CUDA driver call {what} failed: {(text.value or b'').decode()} (error {status})")


class Device:
    """One device's primary context, made current around each call (`with device:` for a sequence of them)."""

    def __init__(self, ordinal: int):
        lib = self.lib = _lib()
        dev = ctypes.c_int()
        _check(lib, lib.cuDeviceGet(ctypes.byref(dev), int(ordinal)), "cuDeviceGet")
        ctx = ctypes.c_void_p()
        _check(lib, lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self.ordinal, self._dev, self._ctx = int(ordinal), dev, ctx
        self._released = False

    def __enter__(self) -> "Device":
        _check(self.lib, _fn(self.lib, "cuCtxPushCurrent_v2", "cuCtxPushCurrent")(self._ctx), "cuCtxPushCurrent")
        return self

    def __exit__(self, *exc) -> None:
        popped = ctypes.c_void_p()
        _fn(self.lib, "cuCtxPopCurrent_v2", "cuCtxPopCurrent")(ctypes.byref(popped))

    def call(self, what: str, *args) -> None:
        """Call the driver's `what` (its versioned name where it has one) with the context current."""
        with self:
            _check(self.lib, _fn(self.lib, f"{what}_v2", what)(*args), what)

    def alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        self.call("cuMemAlloc", ctypes.byref(ptr), ctypes.c_size_t(int(nbytes)))
        return ptr.value

    def free(self, ptr: int) -> None:
        self.call("cuMemFree", ctypes.c_uint64(ptr))

    def ipc_handle(self, ptr: int) -> bytes:
        """The IPC handle of memory `alloc` made, for another process to open (`open_ipc`)."""
        handle = IpcHandle()
        with self:
            _check(self.lib, self.lib.cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(ptr)),
                   "cuIpcGetMemHandle")
        return bytes(handle.reserved)

    def open_ipc(self, handle: bytes) -> int:
        """Another process's memory, from its IPC handle: its address here."""
        raw = IpcHandle()
        raw.reserved[:] = handle
        ptr = ctypes.c_uint64()
        self.call("cuIpcOpenMemHandle", ctypes.byref(ptr), raw, ctypes.c_uint(LAZY_ENABLE_PEER_ACCESS))
        return ptr.value

    def close_ipc(self, ptr: int) -> None:
        self.call("cuIpcCloseMemHandle", ctypes.c_uint64(ptr))

    def stream(self) -> int:
        """A new non-blocking stream at the device's highest priority (as the loader's streams are)."""
        least, greatest = ctypes.c_int(), ctypes.c_int()
        stream = ctypes.c_void_p()
        with self:
            _check(self.lib, self.lib.cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)),
                   "cuCtxGetStreamPriorityRange")
            _check(self.lib, self.lib.cuStreamCreateWithPriority(ctypes.byref(stream), STREAM_NON_BLOCKING,
                                                                 greatest), "cuStreamCreateWithPriority")
        return stream.value or 0

    def copy(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """Device to device, queued on `stream` (the context must be current: inside `with device:`)."""
        _check(self.lib, _fn(self.lib, "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync")(
            ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_size_t(nbytes), ctypes.c_void_p(stream)),
            "cuMemcpyDtoDAsync")

    def synchronize(self, stream: int) -> None:
        self.call("cuStreamSynchronize", ctypes.c_void_p(stream))

    def release(self) -> None:
        if not self._released:
            self._released = True
            _fn(self.lib, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease")(self._dev)
