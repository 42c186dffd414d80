"""The CUDA driver calls torch does not expose (libcuda: register host memory with the device, read-only, and find
its device address), and the count of this process's registrations (one map may serve two loaders)."""

from __future__ import annotations

import ctypes
import threading

import torch

from ... import willneed

# cuMemHostRegister flags (cuda.h): PORTABLE, DEVICEMAP, READ_ONLY
_FLAGS = 1 | 2 | 8
_CAN_USE_HOST_POINTER = 91  # CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
_MADV_WILLNEED = 3


class Driver:
    """The CUDA driver calls torch does not expose (libcuda, present wherever a CUDA device is). ctypes releases the
    GIL around each call, so a registration that reads the disk does not stop the loading thread."""

    _lib = None
    _libc = None

    @classmethod
    def lib(cls):
        if cls._lib is None:
            cls._lib = ctypes.CDLL("libcuda.so.1")
        return cls._lib

    @classmethod
    def check(cls, code: int, what: str) -> None:
        if code:
            name = ctypes.c_char_p()
            cls.lib().cuGetErrorString(int(code), ctypes.byref(name))
            raise DriverError(f"{what} failed: CUDA driver error {code} ({(name.value or b'?').decode()})")

    @classmethod
    def current_context(cls) -> int:
        ctx = ctypes.c_void_p()
        cls.check(cls.lib().cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        return ctx.value or 0

    @classmethod
    def set_context(cls, ctx: int) -> None:
        cls.check(cls.lib().cuCtxSetCurrent(ctypes.c_void_p(ctx)), "cuCtxSetCurrent")

    @classmethod
    def push_context(cls, ctx: int) -> None:
        cls.check(cls.lib().cuCtxPushCurrent_v2(ctypes.c_void_p(ctx)), "cuCtxPushCurrent")

    @classmethod
    def pop_context(cls) -> None:
        out = ctypes.c_void_p()
        cls.lib().cuCtxPopCurrent_v2(ctypes.byref(out))

    @classmethod
    def host_pointers(cls, device: torch.device) -> bool:
        """Whether `device` reads registered host memory at its host address."""
        dev, value = ctypes.c_int(), ctypes.c_int()
        cls.check(cls.lib().cuDeviceGet(ctypes.byref(dev), ctypes.c_int(device.index or 0)), "cuDeviceGet")
        cls.check(cls.lib().cuDeviceGetAttribute(ctypes.byref(value), ctypes.c_int(_CAN_USE_HOST_POINTER), dev),
                  "cuDeviceGetAttribute")
        return bool(value.value)

    @classmethod
    def register(cls, ptr: int, nbytes: int) -> int:
        return int(cls.lib().cuMemHostRegister_v2(ctypes.c_void_p(ptr), ctypes.c_size_t(nbytes),
                                                  ctypes.c_uint(_FLAGS)))

    @classmethod
    def unregister(cls, ptr: int) -> None:
        cls.lib().cuMemHostUnregister(ctypes.c_void_p(ptr))

    @classmethod
    def device_pointer(cls, ptr: int) -> int:
        out = ctypes.c_uint64(0)
        cls.check(cls.lib().cuMemHostGetDevicePointer_v2(ctypes.byref(out), ctypes.c_void_p(ptr), ctypes.c_uint(0)),
                  "cuMemHostGetDevicePointer")
        return int(out.value)

    @classmethod
    def willneed(cls, ptr: int, nbytes: int) -> None:
        """Start reading these pages of a file map (`ptr` page-aligned; advice: errors ignored), a piece at a time
        (`pairload.willneed`: one larger request is read only in part)."""
        if cls._libc is None:
            cls._libc = ctypes.CDLL(None, use_errno=True)
        for a, n in willneed.pieces(ptr, nbytes):
            cls._libc.madvise(ctypes.c_void_p(a), ctypes.c_size_t(n), ctypes.c_int(_MADV_WILLNEED))


class DriverError(Exception):
    pass


# host address -> registrations in this process (one map may serve two loaders over one dataset)
_registered: dict[int, int] = {}
_lock = threading.Lock()


def register(ptr: int, nbytes: int) -> int:
    """Register [ptr, ptr + nbytes) (counted: a range registered already is only counted again); the driver's code."""
    with _lock:
        if _registered.get(ptr):
            _registered[ptr] += 1
            return 0
    code = Driver.register(ptr, nbytes)  # outside the lock: it may read the disk
    if code == 0:
        with _lock:
            _registered[ptr] = _registered.get(ptr, 0) + 1
    return code


def registered() -> dict[int, int]:
    """Host address -> registrations this process holds now (a copy)."""
    with _lock:
        return dict(_registered)


def unregister(ptr: int) -> None:
    with _lock:
        left = _registered.get(ptr, 0) - 1
        if left > 0:
            _registered[ptr] = left
            return
        _registered.pop(ptr, None)
    Driver.unregister(ptr)
