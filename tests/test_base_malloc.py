"""base/malloc.py: freed blocks stay in the heap for the next, where glibc would
map and fault in each anew (a command streaming a trace in batches)."""

from __future__ import annotations

import platform
import subprocess
import sys

# Arrays of a few MB, each a little larger than the last freed (as a trace's
# batches are): glibc maps each anew, so its pages fault in every time.
PROBE = """
import resource, sys
import numpy as np
from base.malloc import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "keep" else None
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(40):
    a = np.ones((3 << 20) // 8 + i * 1000)
    b = np.ones((1 << 20) // 8)
    del a, b
print(took, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def _faults(mode: str) -> tuple[str, int]:
    p = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                       timeout=120, check=True)  # fmt: skip
    took, faults = p.stdout.split()
    return took, int(faults)


def test_freed_blocks_are_reused_not_faulted_in_again() -> None:
    assert platform.libc_ver()[0] == "glibc"  # the machines iotape runs on
    plain, keep = _faults("plain"), _faults("keep")
    assert keep[0] == "True"
    # ~40 x 1024 pages faulted in by default (here: 32,763); once each when kept
    # (~1,100).
    assert plain[1] > 4_000 and keep[1] < plain[1] / 4, (plain, keep)


# Threads that each allocate and free heap blocks (as the reading threads do),
# then glibc's own account of its heaps: one "Arena N:" each.
ARENAS_PROBE = """
import ctypes, sys, threading
import numpy as np
from base.malloc import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "keep" else None
start = threading.Barrier(6)
def work():
    start.wait()  # all at once: each takes a heap where they may
    for i in range(20):
        a = np.ones((1 << 20) // 8 + i)
        del a
threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads: t.start()
for t in threads: t.join()
print(took)
sys.stdout.flush()
ctypes.CDLL(None).malloc_stats()  # (to stderr)
"""


def _arenas(mode: str) -> tuple[str, int]:
    p = subprocess.run([sys.executable, "-c", ARENAS_PROBE, mode], capture_output=True,
                       text=True, timeout=120, check=True)  # fmt: skip
    return p.stdout.strip(), sum(1 for line in p.stderr.splitlines() if line.startswith("Arena "))


def test_threads_share_two_heaps() -> None:
    plain, keep = _arenas("plain"), _arenas("keep")
    assert keep[0] == "True"
    assert plain[1] > 2 and 1 <= keep[1] <= 2, (plain, keep)
