"""The pod's C allocator: glibc's malloc told to keep the memory it frees, for the next
Fetch.

A Fetch reads Redis's replies into buffers of megabytes and answers with a response as
large. By default glibc maps a large block afresh each time and gives the top of its heap
back to the system as soon as a few megabytes are free there, so a fetching pod faulted the
same pages in again for every Fetch: perf counted about a fifth of its CPU in page faults
under memmove (docs/performance.md, "The pod's allocator"). ``keep_freed_memory`` fixes
both thresholds instead: blocks below ``MMAP_THRESHOLD_BYTES`` come from the heap, and up to
``TRIM_THRESHOLD_BYTES`` free at its top stay with the process. Nothing changes where the
operator set glibc's own ``MALLOC_TRIM_THRESHOLD_`` or ``MALLOC_MMAP_THRESHOLD_`` (glibc
read them at start), or where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import os

# mallopt's parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD_BYTES = 64 << 20
MMAP_THRESHOLD_BYTES = 16 << 20
OPERATOR_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):  # not a POSIX system, or not glibc
        return False


def keep_freed_memory() -> bool:
    """Sets glibc's thresholds (above) in this process; whether it did."""
    if not _glibc():
        return False
    if any(name in os.environ for name in OPERATOR_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(None)  # the process's own C library
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt answers 1 when it took the value
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
