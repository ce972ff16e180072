"""Trace to Parquet or CSV, chunk by chunk, with exactly the schema's columns.

The output is written beside the target and renamed into place, so a failure
(a damaged trace, a full disk) leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

import schemas
from base.atomic import replacing
from base.errors import IotapeError
from recorder.tracefile.arrow import records_to_arrow
from recorder.tracefile.reader import Trace
from recorder.tracefile.sequence import open_trace

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}
# Rows per Parquet row group: large enough to compress well, small enough to stay bounded.
ROW_GROUP_ROWS = 262_144


def output_format(out: Path) -> str:
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        raise IotapeError(f"{out}: unknown output type {out.suffix!r}; use .parquet or .csv")
    return fmt


def partition_map(header: dict) -> list[tuple[int, int, int, int]]:
    """(disk dev, partition dev, start_bytes, size_bytes) for each partition the header names."""
    out = []
    for d in header.get("devices") or []:
        part = d.get("partition") if isinstance(d, dict) else None
        if not isinstance(part, dict):
            continue
        try:
            out.append(
                (int(d["dev"]), int(part["dev"]), int(part["start_bytes"]), int(part["size_bytes"]))
            )
        except (KeyError, TypeError, ValueError):
            raise IotapeError(f"device {d.get('name')!r}: partition entry is incomplete") from None
    return out


def to_partition_relative(
    records: np.ndarray, parts: list[tuple[int, int, int, int]]
) -> tuple[np.ndarray, int]:
    """Records on a partitioned disk become (partition dev, partition offset).

    Requests outside the partition are left out (and counted); requests of zero
    bytes (flushes) have no position and are kept at offset 0.
    """
    if not parts:
        return records, 0
    dev, offset, size = records["dev"], records["offset"], records["bytes"].astype(np.uint64)
    keep = np.ones(len(records), dtype=bool)
    new_dev = dev.copy()
    new_offset = offset.copy()
    for disk, pdev, start, length in parts:
        on_disk = dev == disk
        inside = on_disk & (offset >= start) & (offset + size <= start + length)
        positionless = on_disk & (size == 0)
        keep &= ~on_disk | inside | positionless
        new_dev[on_disk] = pdev
        new_offset[inside] -= np.uint64(start)
        new_offset[positionless & ~inside] = 0
    out = records[keep]
    out["dev"] = new_dev[keep]
    out["offset"] = new_offset[keep]
    return out, int(len(records) - len(out))


class ConvertResult(TypedDict):
    """What `convert` wrote (`iotape trace convert --json`)."""

    path: str
    format: str
    rows: int
    outside_partition: int  # records outside the partition, left out


def convert(
    path: str | os.PathLike,
    out: str | os.PathLike,
    partition_relative: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ConvertResult:
    """Write the trace's records to `out` (.parquet or .csv). Returns what was written.

    The trace must be complete and valid (run `iotape trace check --repair` first
    on a damaged one). Parquet keeps the trace header and footer as JSON in the file
    metadata ("iotape.header", "iotape.footer"), so converting loses nothing.
    """
    out = Path(out)
    fmt = output_format(out)
    result: ConvertResult = {"path": str(out), "format": fmt, "rows": 0, "outside_partition": 0}
    with open_trace(path) as t:
        parts = partition_map(t.header) if partition_relative else []

        def batches() -> Iterator[pa.RecordBatch]:
            for info, chunk in t._walk():
                # the requests: a --wakes capture's wake and sched records are none
                records, dropped = to_partition_relative(t.requests_of(chunk), parts)
                result["outside_partition"] += dropped
                result["rows"] += len(records)
                if progress:
                    progress(info.end, t.file_size)
                if len(records):
                    yield records_to_arrow(records)

        with replacing(out) as tmp:
            if fmt == "parquet":
                _write_parquet(tmp, batches(), _metadata(t, partition_relative))
            else:
                _write_csv(tmp, batches())
    return result


def _metadata(t: Trace, partition_relative: bool) -> dict[str, str]:
    meta = {
        "iotape.header": json.dumps(t.header, ensure_ascii=False),
        "iotape.partition_relative": "true" if partition_relative else "false",
    }
    if t.footer is not None:
        meta["iotape.footer"] = json.dumps(t.footer, ensure_ascii=False)
    return meta


def _write_parquet(tmp: str, batches: Iterator[pa.RecordBatch], metadata: dict[str, str]) -> None:
    base = schemas.arrow_schema()
    schema = base.with_metadata({**(base.metadata or {}), **metadata})
    pending: list[pa.RecordBatch] = []
    rows = 0
    with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
        for batch in batches:
            pending.append(batch)
            rows += batch.num_rows
            # Chunks are small; gather them so that row groups compress well.
            if rows >= ROW_GROUP_ROWS:
                writer.write_table(
                    pa.Table.from_batches(pending).replace_schema_metadata(schema.metadata)
                )
                pending, rows = [], 0
        if pending:
            writer.write_table(
                pa.Table.from_batches(pending).replace_schema_metadata(schema.metadata)
            )


def _write_csv(tmp: str, batches: Iterator[pa.RecordBatch]) -> None:
    with pacsv.CSVWriter(tmp, schemas.arrow_schema()) as writer:
        for batch in batches:
            writer.write_batch(batch)
