"""Ingest reads a trace in memory that does not grow with the trace's length."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trace_helpers import header, random_records

from recorder.tracefile import TraceWriter

# The trace's own mapping at its largest while ingest's reader (the batches it
# converts, on its prefetch thread) walks the whole file.
PROBE = """
import sys
from pathlib import Path
from analyzer.store.ingest import open_trace_source

def mapped(path):
    total, name = 0, None
    for line in open("/proc/self/smaps"):
        parts = line.split()
        if not line[0].isupper() or ":" not in parts[0]:
            name = parts[-1] if len(parts) >= 6 else ""
        elif line.startswith("Rss:") and name == path:
            total += int(parts[1]) << 10
    return total

src = open_trace_source(Path(sys.argv[1]))
peak = 0
for _ in src.batches():
    peak = max(peak, mapped(sys.argv[1]))
src.close()
print(peak)
"""


def _trace(path: Path, parts: int) -> Path:
    with TraceWriter(path, header()) as w:
        for seed in range(parts):
            w.write(random_records(250_000, seed=seed))  # 20 MB each
        w.close({})
    return path


def _peak(path: Path) -> int:
    r = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True,
                       text=True, check=True)  # fmt: skip
    return int(r.stdout)


def test_the_trace_mapping_stays_flat_in_trace_length(tmp_path: Path) -> None:
    short = _peak(_trace(tmp_path / "short.iot", 10))
    long = _peak(_trace(tmp_path / "long.iot", 20))
    # Pages the reader had dropped, then faulted back in by a consumer still holding
    # views of them, stayed resident: 34 MiB for 200 MB, 53 for 400, 190 for 1.5 GB.
    assert long - short < 8 << 20, (short >> 20, long >> 20)
    assert long < 64 << 20, long >> 20
