"""`iotape export RUN -o OUT.parquet`: a run's events back out as a trace Parquet file.

The file has exactly the trace record's columns and keeps the run's trace header
in the metadata ("iotape.header"), like `iotape trace convert`, so tools that
read one read the other. It is written beside the target and renamed into place.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import schemas
from analyzer.store import catalog, queries
from analyzer.store.interface import Store
from base.atomic import replacing
from base.errors import IotapeError

ROW_GROUP_ROWS = 262_144


def export_run(
    store: Store,
    ref: str,
    out: str | os.PathLike,
    progress: Callable[[int, int | None], None] | None = None,
) -> dict:
    """Write run `ref`'s events to `out` (.parquet); returns the run id, path and rows."""
    out = Path(out)
    if out.suffix.lower() not in (".parquet", ".pq"):
        raise IotapeError(f"{out}: the export is Parquet; name it .parquet")
    if out.is_dir():
        raise IotapeError(f"{out}: is a directory")
    run = catalog.resolve(store, ref)
    base = schemas.arrow_schema()
    meta = {
        **(base.metadata or {}),
        b"iotape.header": json.dumps(run["header"], ensure_ascii=False).encode(),
        b"iotape.footer": json.dumps(run["parameters"].get("footer", {})).encode(),
        b"iotape.run": json.dumps(
            {k: run[k] for k in ("id", "name", "kind", "tags", "source_sha256")}
        ).encode(),
    }
    schema = base.with_metadata(meta)
    sql = queries.QUERIES["export_events"].sql(store.dialect)
    rows = 0
    with replacing(out) as tmp, pq.ParquetWriter(tmp, schema, compression="zstd") as w:
        for b in store.stream(sql, {"run_id": run["id"]}):
            # Engines hand strings back as views or dictionaries: cast to the schema.
            t = pa.Table.from_batches([b]).cast(base.with_metadata(None))
            w.write_table(t.replace_schema_metadata(meta), row_group_size=ROW_GROUP_ROWS)
            rows += b.num_rows
            if progress:
                progress(rows, int(run["events"]))
    return {"run_id": run["id"], "name": run["name"], "path": str(out), "rows": rows}
