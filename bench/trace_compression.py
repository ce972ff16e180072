"""Chunk compression (issue #35): bytes per request, and the Python side's cost.

For each trace given (a recorded `.iot`, any format version), its records are written
again with each compression (none, zstd, lz4) by the Python writer, then read back
whole; prints and writes bytes per request, write and read time per request, and
checks that every copy reads back the same records. The C loader's own compression
CPU is in each recording's footer (`compression.cpu_ns`) and in
bench/record_overhead.py.

Run: `.venv/bin/python bench/trace_compression.py TRACE.iot [...]`
(traces/workload/reference-20mbx-5s.iot, and a fio recording: docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from recorder.tracefile import open_trace
from recorder.tracefile.writer import write_trace

ROOT = Path(__file__).resolve().parent.parent
CODECS = ("none", "zstd", "lz4")


def measure(path: Path, repeat: int) -> dict:
    with open_trace(path) as t:
        records = t.read_all()
        header = {k: v for k, v in t.header.items() if k not in ("format", "version", "record")}
        footer = dict(t.footer or {})
    n = len(records)
    out: dict = {"trace": str(path), "requests": n}
    with tempfile.TemporaryDirectory(prefix="iotape-zbench-") as tmp:
        for codec in CODECS:
            dst = Path(tmp) / f"{codec}.iot"
            w = r = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                write_trace(dst, header, records, footer, compression=codec)
                w = min(w, time.perf_counter() - t0)
                t0 = time.perf_counter()
                with open_trace(dst) as t:
                    back = t.read_all()
                r = min(r, time.perf_counter() - t0)
            if back.tobytes() != records.tobytes():
                raise SystemExit(f"{path}: {codec}: records differ after a round trip")
            out[codec] = {
                "bytes_per_request": round(dst.stat().st_size / n, 2),
                "write_ns_per_request": round(w / n * 1e9, 1),
                "read_ns_per_request": round(r / n * 1e9, 1),
                "read_mrequests_per_s": round(n / r / 1e6, 2),
            }
            print(f"{path.name:32s} {codec:5s} {json.dumps(out[codec])}", file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--output", type=Path, default=ROOT / "bench" / "results" / "trace_compression.json"
    )
    args = ap.parse_args()
    result = {
        "benchmark": "trace-compression",
        "traces": [measure(p, args.repeat) for p in args.traces],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
