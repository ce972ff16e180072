"""What every runner makes of fio's JSON: one row of figures per job, and
JOBDIR/results/summary.json (schemas/documents/summary.py).

Both runners (interface.py) write fio's JSON shape: fio itself, iotape-lanes (its
"fio version" naming it, runner.py) and fio's client (one document per host,
hosts/run.py), so one summary serves them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from replayer.run.results import IoStats, JobRow, RunSummary

DIRECTIONS: tuple[Literal["read", "write", "trim", "sync"], ...] = ("read", "write", "trim", "sync")


def summarize(fio_json: dict) -> list[JobRow]:
    rows = []
    for j in fio_json.get("jobs", []):
        row = JobRow(job=j["jobname"], runtime_ms=j.get("job_runtime"))
        for d in DIRECTIONS:
            s = j.get(d) or {}
            if s.get("total_ios"):
                lat = s.get("lat_ns") or s.get("clat_ns") or {}
                stats = IoStats(
                    ios=s["total_ios"],
                    iops=round(s.get("iops", 0.0), 1),
                    mean_ms=round(lat.get("mean", 0.0) / 1e6, 3),
                    p99_ms=round((lat.get("percentile") or {}).get("99.000000", 0) / 1e6, 3),
                )
                setattr(row, d, stats)
        rows.append(row)
    return rows


def write_summary(jobdir: Path, summary: RunSummary) -> None:
    """JOBDIR/results/summary.json: what `replay run` returned."""
    summary.write(jobdir / "results" / "summary.json")
