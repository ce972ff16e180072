"""Trace records as Arrow: exactly `schemas.arrow_schema()`, task names as strings."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import schemas


def decode_comm(comm: np.ndarray) -> pa.StringArray:
    """char[16] names to Arrow strings, cut at the first NUL, without a per-row loop."""
    n = len(comm)
    raw = np.ascontiguousarray(comm).view(np.uint8).reshape(n, 16)
    is_nul = raw == 0
    lengths = np.where(is_nul.any(axis=1), is_nul.argmax(axis=1), 16)
    keep = np.arange(16) < lengths[:, None]
    data = raw[keep]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    arr = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
    if (data >= 0x80).any():
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid:
            # Rare: a task name that is not UTF-8. Keep its bytes visible, escaped.
            return pa.array(
                [
                    bytes(r[:k]).decode("utf-8", "backslashreplace")
                    for r, k in zip(raw, lengths, strict=True)
                ],
                type=pa.string(),
            )
    return arr


def records_to_arrow(records: np.ndarray) -> pa.RecordBatch:
    """Records to a RecordBatch with exactly `schemas.arrow_schema()`."""
    schema = schemas.arrow_schema()
    arrays = [
        decode_comm(records["comm"])
        if f.name == "comm"
        else pa.array(np.ascontiguousarray(records[f.name]), type=f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
