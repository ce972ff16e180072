"""The host's part of a request's time on the emulated array: a recording of a run on
the array set beside the array server's own debug trace of the same run
(IOTAPE_ARRAY_TRACE=DIR in the server's environment: one line per reply,
src/arraymodel.h `host_trace`). Both clocks are CLOCK_MONOTONIC (a recording's times
are relative to its header's `mono_start_ns`), so each block-layer request is paired
with the server's line of the same op, offset and size received after its issue, and
its block-layer time splits exactly into

    before  issue -> the server reads it off /dev/fuse (loop worker, FUSE queue)
    queued  received -> the model's arrival (the model's clock ahead of it)
    model   the model's own service (what the array would take)
    late    the model's completion -> the reply started (the model's thread late)
    reply   the reply written to /dev/fuse
    after   reply written -> the block layer's completion (FUSE, loop, blk-mq)

The host's share of a request is its block-layer time less `model`.
bench/array_host_path.py runs and reports it; docs/hybrid.md, "The host's path"."""

from __future__ import annotations

from collections import defaultdict, deque
from pathlib import Path
from typing import Any

import numpy as np

from recorder.tracefile.reader import open_trace

PARTS = ("before", "queued", "model", "late", "reply", "after")
OPS = {0: "read", 1: "write"}


def load_server(path: Path) -> np.ndarray:
    """A server trace's lines as rows: op off len recv submit take m_arr m_done r0 r1
    (a line cut short where the server ended mid-write is left out)."""
    rows = [f for f in (ln.split() for ln in path.read_text().splitlines()) if len(f) == 10]
    return np.array(rows, dtype=np.float64).reshape(-1, 10)


def load_recording(path: Path) -> dict[str, np.ndarray]:
    cols: dict[str, list[np.ndarray]] = defaultdict(list)
    with open_trace(path, strict=False) as t:
        base = int(t.header["mono_start_ns"])
        for c in t.iter_columns(rows=1 << 16):
            for k in ("ts_issue_ns", "ts_complete_ns", "offset", "bytes", "op", "stream"):
                cols[k].append(c[k])
    out = {k: np.concatenate(v) for k, v in cols.items()}
    out["issue"] = (out["ts_issue_ns"].astype(np.int64) + base) / 1e9
    out["complete"] = (out["ts_complete_ns"].astype(np.int64) + base) / 1e9
    return out


def pair(rec: dict[str, np.ndarray], srv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indices into rec, rows of srv) of the requests paired: same op, offset and size,
    the server's first unused line received no earlier than 1 ms before the issue."""
    lines: dict[tuple[int, int, int], deque[int]] = defaultdict(deque)
    for i in np.argsort(srv[:, 3], kind="stable"):
        lines[(int(srv[i, 0]), int(srv[i, 1]), int(srv[i, 2]))].append(int(i))
    got_rec, got_srv = [], []
    for i in np.argsort(rec["issue"], kind="stable"):
        q = lines.get((int(rec["op"][i]), int(rec["offset"][i]), int(rec["bytes"][i])))
        while q and srv[q[0], 3] < rec["issue"][i] - 1e-3:
            q.popleft()  # a line nothing recorded asked for (before the recording)
        # The reply's start: its end may come after the completion it caused.
        if q and srv[q[0], 8] <= rec["complete"][i] + 1e-3:
            got_rec.append(int(i))
            got_srv.append(q.popleft())
    return np.array(got_rec, dtype=np.int64), np.array(got_srv, dtype=np.int64)


def parts_of(rec: dict[str, np.ndarray], ri: np.ndarray, s: np.ndarray) -> dict[str, np.ndarray]:
    issue, complete = rec["issue"][ri], rec["complete"][ri]
    return {
        "before": s[:, 3] - issue,
        "queued": s[:, 6] - s[:, 3],
        "model": s[:, 7] - s[:, 6],
        "late": s[:, 8] - s[:, 7],
        "reply": s[:, 9] - s[:, 8],
        "after": complete - s[:, 9],
    }


def analyse(recording: Path, traces: list[Path], worst: int = 8) -> dict[str, Any] | None:
    rec = load_recording(recording)
    if not len(rec["issue"]):
        return None
    lo, hi = rec["issue"].min(), rec["complete"].max()
    # The server(s) of this run: lines inside the recording's span.
    srvs = [a[(a[:, 3] >= lo - 1) & (a[:, 3] <= hi + 1)] for a in map(load_server, traces)]
    srvs = [a for a in srvs if len(a)]
    if not srvs:
        return None
    srv = np.concatenate(srvs)
    ri, si = pair(rec, srv)
    s = srv[si]
    p = parts_of(rec, ri, s)
    block = rec["complete"][ri] - rec["issue"][ri]
    host = block - p["model"]
    reads = s[:, 0] == 0
    model_max_read = float(p["model"][reads].max()) if reads.any() else 0.0
    over = host > 0.020
    top = np.argsort(-host)[:worst]
    return {
        "recording": str(recording),
        "requests": len(rec["issue"]),
        "paired": len(ri),
        "model_max_read_ms": round(model_max_read * 1e3, 2),
        "block_max_read_ms": round(float(block[reads].max()) * 1e3, 2) if reads.any() else 0,
        "reads_over_2x_model_max": int((block[reads] > 2 * model_max_read).sum()),
        "reads_over_100ms": int((block[reads] > 0.1).sum()),
        "host_over_ms": {str(ms): int((host > ms / 1e3).sum()) for ms in (20, 50, 100)},
        "host_max_ms": round(float(host.max()) * 1e3, 2),
        # Negative only if the pairing or the clocks were wrong: the model's time lies
        # inside the block layer's.
        "host_min_ms": round(float(host.min()) * 1e3, 3),
        "host_p999_ms": round(float(np.quantile(host, 0.999)) * 1e3, 3),
        "host_p50_ms": round(float(np.quantile(host, 0.5)) * 1e3, 3),
        "host_ms_by_part_over_20ms": {k: round(float(v[over].sum()) * 1e3, 1) for k, v in p.items()
                                      if k != "model"},
        "worst": [
            {"t_s": round(float(rec["issue"][ri[j]] - lo), 3), "op": OPS.get(int(s[j, 0]), "?"),
             "bytes": int(s[j, 2]), "stream": int(rec["stream"][ri[j]]),
             "block_ms": round(float(block[j]) * 1e3, 2),
             **{f"{k}_ms": round(float(p[k][j]) * 1e3, 2) for k in PARTS}}
            for j in top
        ],
    }  # fmt: skip
