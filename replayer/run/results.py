"""What `replay run` returns and writes to JOBDIR/results/summary.json: its one
definition is schemas/documents/summary.py."""

from __future__ import annotations

from schemas.documents.summary import (
    AnchorRun,
    HostRun,
    HostStart,
    IoStats,
    JobRow,
    Relabel,
    ReplaySummary,
)

RunSummary = ReplaySummary

__all__ = ["AnchorRun", "HostRun", "HostStart", "IoStats", "JobRow", "Relabel", "RunSummary"]
