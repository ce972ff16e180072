"""A run's reads and writes as numpy arrays, from trace or store columns or a trace file."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

READ, WRITE = 0, 1
# The columns Events are built from, in events_from_columns' order; the store's
# tiering query (analyzer.store.queries.TIERING_COLUMNS) selects the same, which a
# test holds it to. Spelled out here so that the replayer reads a trace file without
# importing the store.
COLUMNS = ("ts_issue_ns", "ts_complete_ns", "dev", "offset", "bytes", "op")


@dataclass
class Events:
    """A run's reads and writes in issue order, as numpy arrays (one row per request)."""

    t_ns: np.ndarray  # issue time (completion time where the issue time is unknown)
    dev: np.ndarray
    offset: np.ndarray
    nbytes: np.ndarray
    op: np.ndarray  # READ or WRITE
    lat_ns: np.ndarray  # device time; -1 where unknown

    def __len__(self) -> int:
        return len(self.t_ns)


def event_rows(op: np.ndarray, ts_issue_ns: np.ndarray, ts_complete_ns: np.ndarray) -> np.ndarray:
    """Which rows of a trace or store table become Events, in Events' order: the reads
    and writes, ordered by issue time (completion where the issue time is unknown)."""
    keep = np.flatnonzero(np.asarray(op) <= WRITE)
    issue = np.asarray(ts_issue_ns, dtype=np.int64)[keep]
    t = np.where(issue > 0, issue, np.asarray(ts_complete_ns, dtype=np.int64)[keep])
    return keep[np.argsort(t, kind="stable")]


def events_from_columns(
    ts_issue_ns: np.ndarray,
    ts_complete_ns: np.ndarray,
    dev: np.ndarray,
    offset: np.ndarray,
    nbytes: np.ndarray,
    op: np.ndarray,
) -> Events:
    """Events from trace or store columns: reads and writes only, ordered by issue time."""
    rows = event_rows(op, ts_issue_ns, ts_complete_ns)
    issue = np.asarray(ts_issue_ns, dtype=np.int64)[rows]
    done = np.asarray(ts_complete_ns, dtype=np.int64)[rows]
    return Events(
        t_ns=np.where(issue > 0, issue, done),
        dev=np.asarray(dev, dtype=np.int64)[rows],
        offset=np.asarray(offset, dtype=np.int64)[rows],
        nbytes=np.asarray(nbytes, dtype=np.int64)[rows],
        op=np.asarray(op, dtype=np.int8)[rows],
        lat_ns=np.where((issue > 0) & (done >= issue), done - issue, -1),
    )


def load_trace(path: str) -> Events:
    """A trace file's reads and writes, without a store (the benchmark, scripts)."""
    from recorder.tracefile import open_trace

    with open_trace(path) as tr:
        r = tr.read_all()
    return events_from_columns(*(r[c] for c in COLUMNS))
