"""The trace's first chunks decompressed by `iotape ingest`'s store process (issue 36,
docs/benchmarks.md's tenth pass): forked at the command's start (forked.py), the child
has imported DuckDB and connected by ~80 ms, and then idles until the command, still
importing numpy and pyarrow on the other core, sends its first statement (~160 ms).
In that time it walks the trace and decompresses its chunks (zstd or lz4, the larger
half of the conversion's CPU) into memory shared with the command, whose reader then
finds each chunk's planes there instead of decompressing them itself.

The child only ever saves work; the command checks every chunk as before (its
header, CRCs and order: recorder/tracefile), and takes a chunk from the child only
where the child found the same chunk at the same offset with the same stored CRC.
Anything else (a chunk the child could not read, a walk that went another way, a
child that is slow or gone) and the command decompresses the chunk itself, with its
own errors. Each chunk is claimed once, by compare-and-swap on its slot
(recorder/planes.c): the child claims a slot before it decompresses into it, the
command claims it where the child has not; a slot the command claimed stops the
child. The command gives the pages back once a batch is built from them.

This module imports only the standard library (the child has no numpy); the
command's side (`Taker`) imports numpy where it takes a chunk.
`IOTAPE_INGEST_AHEAD=0` turns it off.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import struct
import zlib
from pathlib import Path
from typing import Any

SWITCH = "IOTAPE_INGEST_AHEAD"
# recorder/tracefile/planes.py's LIBRARY, and the trace's constants' file
# (schemas.SCHEMA_PATH): both of those modules import numpy.
LIBRARY = Path(__file__).resolve().parents[2] / "recorder" / "build" / "libplanes.so"
SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "trace_record.toml"

# The shared words (a map made before the fork): the stop word, the bytes of the ring
# the command has copied out, the ring's address in the child, then SLOTS slots of
# SLOT words: state, position of the chunk in the file, its planes' place in the
# ring (counted from the ring's start as if it did not wrap) and size, stored CRC.
SLOTS = 1024
SLOT = 5
WORDS = 3 + SLOTS * SLOT
# The child's ring of planes: its own memory, on huge pages where the system gives
# them (shared memory here would be 4 KiB pages faulted in by both processes: +90 ms
# of system time for 1 M events, measured), which the command copies each chunk out
# of (process_vm_readv: the child is its own). The ring also bounds how far ahead
# the child goes.
RING = 96 << 20
FREE, CHILD, DONE, FAILED, TAKEN = 0, 1, 2, 3, 4
# How long the command waits for a chunk the child is decompressing (~0.3 ms each)
# before it does the chunk itself and stops the child.
WAIT_S = 0.05

HEADER_FIXED = struct.Struct("<8sIIII")
ZCHUNK_HEAD = struct.Struct("<IIQIBBHII")
CHUNK_HEAD = struct.Struct("<IIQII")


def _library() -> ctypes.CDLL | None:
    """libplanes.so with its decompressor and shared words, or None (not built, or
    built before these; IOTAPE_PLANES_PURE: the reader's numpy path, nothing to save)."""
    if os.environ.get("IOTAPE_PLANES_PURE") or not LIBRARY.exists():
        return None
    try:
        so = ctypes.CDLL(str(LIBRARY))
    except OSError:
        return None
    if not all(hasattr(so, f) for f in ("iot_decompress", "iot_cas64", "iot_load64")):
        return None
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    so.iot_decompress.argtypes = [ctypes.c_int32, p, i64, p, i64, p, i64]
    so.iot_decompress.restype = i64
    so.iot_cas64.argtypes = [p, i64, i64]
    so.iot_cas64.restype = i64
    so.iot_load64.argtypes = [p]
    so.iot_load64.restype = i64
    so.iot_store64.argtypes = [p, i64]
    so.iot_store64.restype = None
    return so


class Shared:
    """The shared words, on either side of the fork (`pid`: the child's, once forked)."""

    def __init__(self, path: Path, so: ctypes.CDLL) -> None:
        self.path = path
        self.so = so
        self.pid = 0
        self.mm = mmap.mmap(-1, WORDS * 8)  # MAP_SHARED | MAP_ANONYMOUS: the child sees it
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))

    def word(self, slot: int, field: int) -> int:
        """The address of a slot's word (slot -1: field 0 the stop word, 1 the bytes
        copied out, 2 the ring's address)."""
        return self.base + (field if slot < 0 else 3 + slot * SLOT + field) * 8

    def load(self, slot: int, field: int = 0) -> int:
        return int(self.so.iot_load64(self.word(slot, field)))

    def store(self, slot: int, field: int, value: int) -> None:
        self.so.iot_store64(self.word(slot, field), value)

    def cas(self, slot: int, expect: int, want: int) -> int:
        return int(self.so.iot_cas64(self.word(slot, 0), expect, want))

    def stop(self) -> None:
        self.store(-1, 0, 1)


def share(path: Path) -> Shared | None:
    """The words for the child to decompress `path`'s chunks with, made before the
    fork; None where it is off or cannot help."""
    if os.environ.get(SWITCH, "1") == "0" or path.suffix.lower() in (".parquet", ".pq", ".json"):
        return None
    so = _library()
    if so is None:
        return None
    try:
        if not path.is_file():
            return None  # a rotated capture's name or glob: its files, read as one
        return Shared(path, so)
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- the child


class Unpacker:
    """The child's walk: one chunk a `step()`. Stops at the footer, at anything it
    does not take for a chunk it can decompress, and where the command took a slot."""

    def __init__(self, shared: Shared) -> None:
        import tomllib

        self.s = shared
        with SCHEMA.open("rb") as f:
            c = tomllib.load(f)["file"]
        self.zmagic, self.magic = int(c["zchunk_magic"]), int(c["chunk_magic"])
        self.codecs = {int(v) for v in c["codec"].values()}
        self.most = int(c["max_chunk_records"])
        with open(shared.path, "rb") as f:
            self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        self.file = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        head, _, self.record, json_len, _ = HEADER_FIXED.unpack_from(self.mm, 0)
        # Past the end where this is no trace: the first step ends the walk.
        magic = str(c["header_magic"]).encode("ascii")
        self.pos = _pad8(HEADER_FIXED.size + json_len) if head == magic else len(self.mm)
        self.ring = mmap.mmap(-1, RING, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        with contextlib.suppress(OSError, AttributeError):
            self.ring.madvise(mmap.MADV_HUGEPAGE)
        shared.store(-1, 2, ctypes.addressof(ctypes.c_char.from_buffer(self.ring)))
        self.slot = 0
        self.at = 0  # where the next chunk goes, counted as if the ring did not wrap
        self.why = ctypes.create_string_buffer(64)

    def step(self) -> bool | None:
        """One chunk: True done, None waiting for the command to copy chunks out,
        False the walk is over."""
        s, mm, pos = self.s, self.mm, self.pos
        if s.load(-1) or self.slot >= SLOTS or pos + ZCHUNK_HEAD.size > len(mm):
            return False
        magic = struct.unpack_from("<I", mm, pos)[0]
        if magic == self.magic:  # a plain chunk: nothing to decompress, no slot
            count = CHUNK_HEAD.unpack_from(mm, pos)[1]
            self.pos = pos + CHUNK_HEAD.size + count * self.record
            return True
        if magic != self.zmagic:
            return False
        _, count, _, stored, cid, _, zero, crc, head_crc = ZCHUNK_HEAD.unpack_from(mm, pos)
        start, size = pos + ZCHUNK_HEAD.size, count * self.record
        end = start + stored
        if (
            zlib.crc32(mm[pos : start - 4]) != head_crc
            or not 1 <= count <= self.most
            or zero
            or cid not in self.codecs
            or end > len(mm)
            or size > RING
        ):
            return False
        at = self.at
        if at % RING + size > RING:
            at += RING - at % RING  # a chunk's planes in one piece
        if at + size - s.load(-1, 1) > RING:
            return None
        # No CRC of the payload here: the command checks it before it takes the chunk
        # (and takes it only with the same stored CRC in its header).
        if s.cas(self.slot, FREE, CHILD) != FREE:
            return False  # the command is here already
        dst = s.load(-1, 2) + at % RING
        got = s.so.iot_decompress(cid, self.file + start, stored, dst, size,
                                  self.why, len(self.why))  # fmt: skip
        if got != size:
            s.store(self.slot, 0, FAILED)
            return False
        for field, value in ((1, pos), (2, at), (3, size), (4, crc)):
            s.store(self.slot, field, value)
        s.store(self.slot, 0, DONE)  # after its fields: the command reads them after it
        self.slot += 1
        self.at = at + size
        self.pos = start + _pad8(stored)
        return True


def _pad8(n: int) -> int:
    return (n + 7) // 8 * 8


# --------------------------------------------------------------------------- the command


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Taker:
    """The command's side: each compressed chunk its reader checks, in order, copied
    out of the child's ring where the child did it (`take`)."""

    def __init__(self, shared: Shared) -> None:
        self.s = shared
        self.slot = 0
        self.on = shared.pid > 0
        self.chunks = 0  # taken from the child (tests)
        libc = ctypes.CDLL(None, use_errno=True)
        self.readv = libc.process_vm_readv
        self.readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,
                               ctypes.c_ulong, ctypes.c_ulong]  # fmt: skip
        self.readv.restype = ctypes.c_ssize_t

    def take(self, pos: int, size: int, crc: int) -> Any:
        """The planes of the chunk at `pos` (`size` bytes once decompressed, stored
        CRC `crc`) as read-only uint8, or None: the caller decompresses it."""
        if not self.on:
            return None
        s, slot = self.s, self.slot
        if slot == 0:
            # From here on both cores are the command's (conversion, writers): a child
            # still walking would take CPU from them and add a copy. It finishes the
            # chunk it is on; what it did before is taken, the rest done here.
            s.stop()
        self.slot += 1
        if slot >= SLOTS:
            return self._off()
        state = s.cas(slot, FREE, TAKEN)
        if state == CHILD:
            state = self._wait(slot)
        if state != DONE:
            return self._off()
        if (s.load(slot, 1), s.load(slot, 3), s.load(slot, 4)) != (pos, size, crc):
            return self._off()  # the child's walk went another way
        import numpy as np

        at = s.load(slot, 2)
        data = np.empty(size, np.uint8)
        here = _Iovec(data.ctypes.data, size)
        there = _Iovec(s.load(-1, 2) + at % RING, size)
        got = self.readv(s.pid, ctypes.byref(here), 1, ctypes.byref(there), 1, 0)
        if got != size:
            return self._off()  # not allowed here (ptrace rules), or the child is gone
        s.store(-1, 1, at + size)  # copied: the child may write there again
        data.flags.writeable = False
        self.chunks += 1
        return data

    def _wait(self, slot: int) -> int:
        import time

        deadline = time.monotonic() + WAIT_S
        while True:
            state = self.s.load(slot)
            if state != CHILD or time.monotonic() > deadline:
                return state
            time.sleep(0.0002)

    def _off(self) -> None:
        self.on = False
        self.s.stop()

    def close(self) -> None:
        """Stop the child's walk (an ingest that failed, or did not read the trace)."""
        self.on = False
        with contextlib.suppress(ValueError):
            self.s.stop()
