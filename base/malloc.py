"""Freed memory kept for reuse in the process of a command that streams a trace.

glibc's malloc serves a block above M_MMAP_THRESHOLD (128 KiB, raised to the
largest block freed so far) with a mapping of its own, unmapped when freed, and
gives the top of its heap back to the kernel past M_TRIM_THRESHOLD. A command
that goes through a trace a batch at a time allocates arrays of a few MB, each a
little larger than the last freed, again and again: every one is a fresh
mapping whose pages the kernel faults in and zeroes. `replay fidelity` of a
2.5 M-request replay took ~110k page faults and ~0.6 s of system time so
(zeroing pages was the largest single item of its profile); with both raised,
~76k and ~0.46 s, its CPU time 2.57 -> 2.47 s and its peak RSS the same
(docs/benchmarks.md). Called by such a command for its own process; a library
caller keeps its allocator as it is.

Its threads (reading ahead, summing behind: replayer/run/ahead.py) each took a
heap (an arena) of their own, each keeping its freed blocks: two are shared
instead (M_ARENA_MAX). `replay fidelity` of a 5.2 M-request capture peaked at
470 MiB against 501 (8 M synthetic requests: 497 against 567), with the same
time (paired wall 0.94 and 0.97, 6 runs each; docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # glibc's malloc.h
MMAP_MAX = 32 << 20  # the largest M_MMAP_THRESHOLD glibc takes on 64-bit
ARENAS = 2  # heaps the process's threads share


def keep_freed_memory() -> bool:
    """Blocks up to MMAP_MAX from the heap, and freed ones kept there for the next
    (up to twice that at its top), in ARENAS heaps shared by every thread. Whether
    it took: False where the C library is not glibc (nothing changes there)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return (
        bool(mallopt(M_MMAP_THRESHOLD, MMAP_MAX))
        and bool(mallopt(M_TRIM_THRESHOLD, 2 * MMAP_MAX))
        and bool(mallopt(M_ARENA_MAX, ARENAS))
    )
