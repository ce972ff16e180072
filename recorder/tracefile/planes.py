"""The decoder of compressed chunks in C (recorder/planes.c, built as
build/libplanes.so by `make native`), loaded with ctypes: their codecs (zstd,
lz4: libzstd and liblz4, as the C loader) and their columns.

Without the library (a checkout not built yet) `lib()` is None: pyarrow's codecs
decompress, and codec.decode_columns undoes the transform in numpy: the same
values, about 0.15 s more per 2.4 M records. IOTAPE_PLANES_PURE=1 takes the numpy path always (the
reference the tests hold the C code to).
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from pathlib import Path

import numpy as np

LIBRARY = Path(__file__).resolve().parents[1] / "build" / "libplanes.so"
# The fields whose deltas the transform takes, and the size that the offset's follows.
DELTA_FIELDS = ("ts_queue_ns", "ts_issue_ns", "ts_complete_ns", "offset", "bytes")


@cache
def lib() -> ctypes.CDLL | None:
    if os.environ.get("IOTAPE_PLANES_PURE") or not LIBRARY.exists():
        return None
    try:
        so = ctypes.CDLL(str(LIBRARY))
    except OSError:
        return None
    p = ctypes.c_void_p
    i64 = ctypes.c_int64
    so.iot_decode_columns.argtypes = [p, i64, i64, p, p, i64, p]
    so.iot_decode_columns.restype = ctypes.c_int
    so.iot_decode_records.argtypes = [p, i64, i64, p, p]
    so.iot_decode_records.restype = ctypes.c_int
    if has_codecs(so):
        so.iot_decompress.argtypes = [ctypes.c_int32, p, i64, p, i64, p, i64]
        so.iot_decompress.restype = i64
    return so


def has_codecs(so: ctypes.CDLL) -> bool:
    """Whether the library decompresses chunks (one built before it did not)."""
    return hasattr(so, "iot_decompress")


def decompress(so: ctypes.CDLL, codec: int, stored: np.ndarray, out: np.ndarray) -> int | str:
    """A chunk's payload `stored` (codec `codec`, known) decompressed into `out`:
    the bytes written, or why it does not decompress."""
    why = ctypes.create_string_buffer(200)
    got = so.iot_decompress(codec, stored.ctypes.data, len(stored), out.ctypes.data, len(out),
                            why, len(why))  # fmt: skip
    return int(got) if got >= 0 else why.value.decode(errors="replace")


class Layout:
    """A record dtype as the C decoder takes it: each field's offset and size, and
    the indexes of the delta fields."""

    def __init__(self, dtype: np.dtype) -> None:
        fields = dtype.fields
        assert fields is not None  # a record dtype
        self.names = list(fields)
        self.dtypes = [fields[n][0] for n in self.names]
        self.fields = np.array(
            [(fields[n][1], fields[n][0].itemsize) for n in self.names], dtype=np.int64
        )
        self.delta = np.array([self.names.index(n) for n in DELTA_FIELDS], dtype=np.int64)
        self.delta_offsets = np.array([fields[n][1] for n in DELTA_FIELDS], dtype=np.int64)
        self.itemsize = dtype.itemsize


def decode_into(
    so: ctypes.CDLL, layout: Layout, planes: np.ndarray, count: int, cols: list[np.ndarray], at: int
) -> None:
    """Decode `count` records' planes into `cols` (one contiguous array per field of
    `layout`, each with room from `at` on)."""
    ptrs = (ctypes.c_void_p * len(cols))(*[c.ctypes.data for c in cols])
    rc = so.iot_decode_columns(
        planes.ctypes.data,
        count,
        len(cols),
        layout.fields.ctypes.data,
        ptrs,
        at,
        layout.delta.ctypes.data,
    )
    if rc != 0:
        raise ValueError("a record field of a size the column decoder does not gather")


def decode_records_into(
    so: ctypes.CDLL, layout: Layout, planes: np.ndarray, out: np.ndarray
) -> None:
    """Decode the planes of len(`out`) records into `out` (contiguous records of
    `layout`'s dtype)."""
    so.iot_decode_records(
        planes.ctypes.data, len(out), layout.itemsize, out.ctypes.data,
        layout.delta_offsets.ctypes.data,
    )  # fmt: skip
