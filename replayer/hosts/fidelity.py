"""Per-host start and fidelity of a multi-host replay, from fio's own per-I/O logs.

No recording exists of a remote host's replay (hosts/run.py), so the measure is what
fio logged there: every read, write and trim, its completion time, latency, size
and offset (write_lat_log, log_offset=1). The host job files set log_unix_epoch=1,
so times are Unix milliseconds, the clock all hosts share (as well as their clocks
agree: NTP keeps them within a millisecond or so; here the hosts are one kernel).
fio 3.33 logs whole milliseconds, so a request's issue time is known to ~1 ms:
completion (ms, truncated) minus its latency (ns).

Each logged request is paired with its plan entry: the k-th of the same op and
size in the job's iolog, in order (fidelity.match with offsets left out: the host
logs carry none, hosts.jobfile says why). A synchronous job issues its requests
one at a time in the iolog's order, so its k-th logged read of 4 KiB is its k-th
planned one. An iolog entry's time is
microseconds after fio's start on its host, so issue time minus plan time is, per
request, the host's start plus that request's lateness; its median over the host
is the host's start (`zero`). A host's offset is its start against the earliest
host's: how far the hosts' replays are apart, the error a host adds to every
request of its part.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from base.errors import IotapeError
from replayer.plan.model import HostEntry, Manifest
from replayer.plan.source import OP
from replayer.run import fidelity as fid
from replayer.run.results import HostStart

ACT = {"read": OP["read"], "write": OP["write"], "trim": OP["discard"]}
DDIR = np.array([OP["read"], OP["write"], OP["discard"]], np.int64)
DTYPE = [("op", "u1"), ("offset", "u8"), ("bytes", "u4")]


def _planned(log: Path) -> tuple[np.ndarray, np.ndarray]:
    """(requests, plan time in us after fio's start) of one iolog, reads/writes/trims."""
    rows = []
    for line in log.read_text().splitlines()[1:]:
        f = line.split()
        if len(f) == 5 and f[2] in ACT:
            rows.append((int(f[0]), ACT[f[2]], int(f[3]), int(f[4])))
    a = np.zeros(len(rows), DTYPE)
    t = np.zeros(len(rows), np.int64)
    if rows:
        c = np.array(rows, np.int64)
        t, a["op"], a["offset"], a["bytes"] = c[:, 0], c[:, 1], c[:, 2], c[:, 3]
    return a, t


def _logged(log: Path) -> tuple[np.ndarray, np.ndarray]:
    """(requests, estimated issue time in Unix ns) of one fio latency log."""
    if not log.exists() or log.stat().st_size == 0:
        return np.zeros(0, DTYPE), np.zeros(0, np.int64)
    c = np.loadtxt(log, delimiter=",", dtype=np.int64, ndmin=2)
    keep = c[:, 2] < len(DDIR)
    c = c[keep]
    a = np.zeros(len(c), DTYPE)
    a["op"] = DDIR[c[:, 2]]
    a["bytes"] = c[:, 3]
    a["offset"] = c[:, 4] if c.shape[1] >= 6 else 0  # log_offset=1 adds a column
    return a, c[:, 0] * 1_000_000 - c[:, 1]


def host_pairs(jobdir: Path, host: HostEntry) -> dict[str, Any]:
    """Planned, logged and paired requests of one host, with their times."""
    planned = logged = paired = 0
    gaps: list[np.ndarray] = []
    plan_t: list[np.ndarray] = []
    for n, job in enumerate(host.jobs, start=1):
        iolog = jobdir / "iologs" / f"{job}.log"
        lat = jobdir / "results" / host.name / f"lat_lat.{n}.log"
        a, t = _logged(lat)
        logged += len(a)
        if not iolog.exists():
            continue
        p, tp = _planned(iolog)
        if not (a["offset"] != 0).any():
            p["offset"] = 0  # the host logs carry no offsets (hosts.jobfile)
        planned += len(p)
        io, ir = fid.match(p, a)
        paired += len(io)
        gaps.append(t[ir] - tp[io] * 1000)
        plan_t.append(tp[io])
    return {
        "planned": planned,
        "logged": logged,
        "paired": paired,
        "gap_ns": np.concatenate(gaps) if gaps else np.zeros(0, np.int64),
        "plan_us": np.concatenate(plan_t) if plan_t else np.zeros(0, np.int64),
    }


def _ms(x: float) -> float:
    return round(x / 1e6, 3)


def jobdir_starts(jobdir: Path, man: Manifest) -> dict[str, HostStart]:
    """`replay fidelity` of a multi-host JOBDIR (its plan `man`): each host's start,
    from fio's logs."""
    if not man.hosts:
        raise IotapeError(f"{jobdir}: a job directory of one host; give the recorded replay")
    return starts(jobdir, man)


def starts(jobdir: Path, man: Manifest, launch_ns: int | None = None) -> dict[str, HostStart]:
    """Per host: its start (Unix ns), offset from the earliest host, and issue error
    against its own start; from fio's logs."""
    out: dict[str, HostStart] = {}
    for host in man.hosts:
        pr = host_pairs(Path(jobdir), host)
        g = pr["gap_ns"]
        row = HostStart(planned=pr["planned"], logged=pr["logged"], paired=pr["paired"])
        row.source = "fio per-I/O logs (log_unix_epoch, ms resolution)"
        if len(g):
            zero = int(np.median(g))
            err = np.abs(g - zero).astype(np.float64)
            row.start_epoch_ns = zero
            row.issue_error_ms = {
                "p50": _ms(float(np.percentile(err, 50))),
                "p99": _ms(float(np.percentile(err, 99))),
                "max": _ms(float(err.max())),
            }
            if launch_ns is not None:
                row.start_after_launch_ms = _ms(zero - launch_ns)
        out[host.name] = row
    zeros = [r.start_epoch_ns for r in out.values() if r.start_epoch_ns is not None]
    for r in out.values():
        if r.start_epoch_ns is not None:
            r.offset_ms = _ms(r.start_epoch_ns - min(zeros))
    return out
