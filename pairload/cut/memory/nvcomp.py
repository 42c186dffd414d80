"""nvCOMP's C library (`libnvcomp.so.5`: the `nvidia-libnvcomp-cu12`/`-cu13` wheel, which DALI also installs),
loaded with ctypes for the batched zstd decompression the decode path runs (`memory.tiles`). Imports neither torch nor
Triton, so that whether it is here can be asked anywhere."""

from __future__ import annotations

import ctypes
import functools

SONAMES = ("libnvcomp.so.5",)  # the C API this module declares (nvCOMP 5: decompression options by value)
INSTALL = "pip install nvidia-libnvcomp-cu13 (or -cu12, as your CUDA)"


class DecompressOpts(ctypes.Structure):
    """nvcompBatchedZstdDecompressOpts_t: a backend (0: nvCOMP's choice), then zeros."""

    _fields_ = [("backend", ctypes.c_int), ("reserved", ctypes.c_char * 60)]


def nvcomp_missing() -> str | None:
    """Why nvCOMP's library cannot be loaded here (None: it can)."""
    try:
        library()
    except OSError as exc:
        return (f"nvCOMP's library ({SONAMES[0]}) cannot be loaded ({exc}); `{INSTALL}` decodes the lossless "
                "members on the GPU")
    return None


@functools.lru_cache(maxsize=1)
def library():
    """The loaded library, its zstd decompression's argument types declared; OSError where it cannot be loaded."""
    lib = None
    try:
        from nvidia.libnvcomp.load import load_library  # the wheel's own loader finds its copy

        lib = load_library()
    except ImportError:
        pass
    lib = lib or ctypes.CDLL(SONAMES[0], ctypes.RTLD_LOCAL)
    size_t, ptr = ctypes.c_size_t, ctypes.c_void_p
    lib.nvcompBatchedZstdDecompressGetTempSizeAsync.argtypes = [size_t, size_t, DecompressOpts,
                                                                ctypes.POINTER(size_t), size_t]
    lib.nvcompBatchedZstdDecompressAsync.argtypes = [ptr, ptr, ptr, ptr, size_t, ptr, size_t, ptr, DecompressOpts,
                                                     ptr, ptr]
    return lib
