"""Exchange 2000 under LoadSim MMB2: a run scaled to this machine, and its shape
measured from the kernel trace in steady state.

The published MMB2 figures are server totals over 4 hours of steady state, so
they are compared as ratios (db reads per write, log writes per db I/O, db I/O
per user per second). A scaled run keeps the per-user rate, cache, mailbox size
and checkpoint depth (profiles.MMB2_*). Its first seconds are no steady state:
nothing is written until a dirty page is a checkpoint depth of log old, and the
clean shutdown writes every dirty page at the end. The shape is therefore taken
over a window of the trace: from `warm_s` after the first log write to the last
log write (the load's end; the final flush writes no log).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import schemas
from recorder.tracefile import open_trace
from schemas import streams
from workload import engine, profiles

STREAM_CODES = schemas.enum("stream")
STREAM_NAMES = {v: k for k, v in STREAM_CODES.items()}
OPS = schemas.enum("op")
# The log-write stream marks the load's start and end in the trace.
LOG_WRITE = "log-write"


def scaled_config(
    users: int,
    db_paths: list[str],
    log_paths: list[str],
    duration: float,
    databases: int = 1,
    **kw: Any,
) -> engine.WorkloadConfig:
    """The exchange2000 preset for `users` users at the published per-user rate,
    cache and checkpoint depth per user of a storage group (the preset's 2
    groups, at most one per database, unless `storage_groups` is given)."""
    overrides = dict(kw.pop("overrides", {}))
    cfg = engine.WorkloadConfig(
        db_paths=db_paths,
        log_paths=log_paths,
        profile="exchange2000",
        mode="performance",
        mailboxes=users,
        iops_per_mailbox=profiles.mmb2_shape()["db_iops_per_user"] or 0.0,
        mailbox_size_mb=profiles.MMB2_MAILBOX_MB,
        databases=databases,
        duration=duration,
        cache_max_mb=users * profiles.MMB2_CACHE_KB_PER_USER / 1024,
        **{**profiles.RUN_DEFAULTS["exchange2000"], **kw},
    )
    depth = profiles.MMB2_CKPT_MB_PER_USER * users / cfg.groups()
    cfg.overrides = {"checkpoint-depth-mb": f"{depth:.3f}", **overrides}
    return cfg


def window_counts(path: Path, warm_s: float) -> tuple[dict[str, tuple[int, int]], float]:
    """Per stream (count, bytes) of the trace's reads and writes in steady state,
    and the window's seconds: from `warm_s` after the first log write to the last."""
    recs = open_trace(path).read_all()
    recs = recs[np.isin(recs["op"], [OPS["read"], OPS["write"]])]
    ts = recs["ts_queue_ns"].astype(np.float64) / 1e9
    log = recs["stream"] == STREAM_CODES[LOG_WRITE]
    if not log.any():
        return {}, 0.0
    start, end = float(ts[log].min()) + warm_s, float(ts[log].max())
    recs = recs[(ts >= start) & (ts <= end)]
    out = {}
    for code in np.unique(recs["stream"]):
        sel = recs[recs["stream"] == code]
        out[STREAM_NAMES[int(code)]] = (len(sel), int(sel["bytes"].sum()))
    return out, max(0.0, end - start)


def shape(counts: dict[str, tuple[int, int]], users: int, seconds: float) -> dict:
    """The MMB2 figures of a window's counts (profiles.mmb2_shape's keys)."""
    out = profiles.shape_from_counts(counts, copies=1)
    tx = sum(counts.get(s, (0, 0))[0] for s in streams.TRANSACTIONAL)
    out["db_iops_per_user"] = tx / seconds / users if seconds > 0 and users else None
    return out


def compared(measured: dict) -> list[dict]:
    """Rows of measured against published for the three MMB2 ratios."""
    pub = profiles.mmb2_shape()
    return [
        {
            "figure": k,
            "published": pub[k],
            "measured": measured.get(k),
            "deviation": profiles.deviation(measured.get(k), pub[k]),
        }
        for k in RATIOS
    ]


RATIOS = ("db_read_write_ratio", "log_writes_per_tx_io", "db_iops_per_user")


def calibrate(
    target: str, users: int, duration: float, warm_s: float, tmp: Path, **kw: Any
) -> dict:
    """One scaled run on `target` (a block device whose data may be destroyed),
    recorded; the steady window's shape from the trace against the published."""
    cfg = scaled_config(users, [target], [target], duration, destroy_data_on=[target], **kw)
    out = tmp / "mmb2.iot"
    result, summary = engine.run_recorded(cfg, out, force=True)
    try:
        counts, secs = window_counts(out, warm_s)
    finally:
        out.unlink(missing_ok=True)
    measured = shape(counts, users, secs)
    return {
        "published": profiles.MMB2_ID,
        "config": dict(cfg.metadata()),
        "warm_s": warm_s,
        "window_s": secs,
        "trace_events": summary.get("events"),
        "window_counts": counts,
        "achieved_tx_iops": sum(d["tx_ios_load"] for d in result["databases"])
        / (result.get("load_s") or result["elapsed_s"]),
        "rows": compared(measured),
    }


def device_mb(users: int, databases: int = 1) -> int:
    """Loop device size for a scaled run: the databases and a log region each."""
    probe = scaled_config(users, ["/"], ["/"], 1.0, databases=databases)
    return probe.db_bytes() * databases // 2**20 + 72 * databases + 8
