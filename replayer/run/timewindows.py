"""A replay's error per time window, beside the machine's wake-up floor then.

One figure for a whole replay hides where it went wrong: a stall of a few
hundred milliseconds in an hour-long replay barely moves the p99. `replay
fidelity` therefore cuts the original's timeline into windows (5 s by default)
and reports, per window, the requests, the per-second IOPS error and the
issue-time error (p50/p99/max), and beside them the wake-up floor that
`replay run` measured during the run (wakeup.py) over the same seconds: how
late a lone thread woke from 500 us sleeps. The goal for a replay is relative
to that floor, since no replayer issues more precisely than the machine wakes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from replayer.run import native

WINDOW_S = 5.0
# Goals relative to the floor (issue 23): the whole replay's p99 within 3x the
# floor's p99, and no window's p99 beyond 5x the floor's.
GOAL_OVERALL = 3.0
GOAL_WINDOW = 5.0


def floor_of(replay_metadata: dict) -> dict | None:
    """The wake-up probe's record of a run, from the recording's metadata."""
    where = replay_metadata.get("wakeup")
    if not where:
        return None
    try:
        return json.loads(Path(where).read_text())
    except (OSError, ValueError):
        return None


def _floor_window(seconds: list[dict], lo_s: float, hi_s: float) -> dict:
    """The floor over monotonic seconds [lo_s, hi_s): the median of the seconds'
    p99 and the worst wake-up."""
    sel = [s for s in seconds if lo_s <= s["mono_s"] < hi_s and s.get("wakeups")]
    if not sel:
        return {}
    return {
        "floor_p99_ms": round(float(np.median([s["p99_ms"] for s in sel])), 4),
        "floor_max_ms": round(max(s["max_ms"] for s in sel), 4),
    }


def windows(
    to_ns: np.ndarray,
    tr_ns: np.ndarray,
    pairs_o: np.ndarray,
    pairs_r: np.ndarray,
    duration_ns: int,
    floor: dict | None = None,
    mono_of_orig_ns: int | None = None,
    window_s: float = WINDOW_S,
) -> list[dict]:
    """Per window of the original's time: requests [original, replay], per-second
    IOPS error, issue-time error, and the floor where the run recorded one.
    `mono_of_orig_ns` is the monotonic time of the original's 0 in the replay."""
    w_ns = int(window_s * 1e9)
    n = max(1, -(-int(duration_ns) // w_ns))
    err = np.abs(tr_ns[pairs_r] - to_ns[pairs_o]).astype(np.float64)
    t_pair = to_ns[pairs_o]
    out = []
    for k in range(n):
        lo, hi = k * w_ns, (k + 1) * w_ns
        secs = np.arange(lo // 10**9, -(-hi // 10**9))
        io = np.bincount(
            np.clip(to_ns[(to_ns >= lo) & (to_ns < hi)] // 10**9 - secs[0], 0, len(secs) - 1),
            minlength=len(secs),
        )
        ir = np.bincount(
            np.clip(tr_ns[(tr_ns >= lo) & (tr_ns < hi)] // 10**9 - secs[0], 0, len(secs) - 1),
            minlength=len(secs),
        )
        out.append(
            _row(
                lo, hi, io, ir, _issue(err[(t_pair >= lo) & (t_pair < hi)]), floor, mono_of_orig_ns
            )
        )
    return out


def _issue(e: np.ndarray) -> dict[str, float]:
    """A window's issue-time error (ns, float64) as its row's figures."""
    if not len(e):
        return {}
    return {
        "issue_p50_ms": round(float(np.percentile(e, 50)) / 1e6, 4),
        "issue_p99_ms": round(float(np.percentile(e, 99)) / 1e6, 4),
        "issue_max_ms": round(float(e.max()) / 1e6, 4),
    }


def _row(
    lo: int,
    hi: int,
    io: np.ndarray,
    ir: np.ndarray,
    issue: dict,
    floor: dict | None,
    mono: int | None,
) -> dict[str, Any]:
    """One window's row from its per-second request counts and its issue-time error."""
    ok = io > 0
    row: dict[str, Any] = {
        "from_s": round(lo / 1e9, 3),
        "requests": [int(io.sum()), int(ir.sum())],
        "iops_mape_pct": round(float(np.mean(np.abs(ir[ok] - io[ok]) / io[ok]) * 100), 3)
        if ok.any()
        else None,
    }
    row |= issue
    if floor and mono is not None:
        base = mono / 1e9
        row |= _floor_window(floor.get("seconds", []), base + lo / 1e9, base + hi / 1e9)
        if row.get("floor_p99_ms") and "issue_p99_ms" in row:
            row["p99_over_floor"] = round(row["issue_p99_ms"] / row["floor_p99_ms"], 2)
    return row


class Windows:
    """`windows()` fed a batch at a time: request times of either trace in any order,
    paired requests in the original's time order (a window's errors are held until
    the next window's first pair comes, then only its figures)."""

    def __init__(self, duration_ns: int, window_s: float = WINDOW_S) -> None:
        self.w_ns = int(window_s * 1e9)
        self.n = max(1, -(-int(duration_ns) // self.w_ns))
        width = -(-self.w_ns // 10**9) + 1  # seconds a window touches, at most
        self.counts = np.zeros((2, self.n, width), np.int64)
        self.issue: dict[int, dict] = {}
        self._k = -1
        self._held: list[np.ndarray] = []

    def times(self, side: int, t_ns: np.ndarray) -> None:
        """Count requests of the original (side 0) or the aligned replay (side 1); in
        one pass in C (src/tally.c), this numpy where IOTAPE_POSTREPLAY_PURE=1."""
        lib = native.lib()
        if lib is not None and t_ns.dtype == np.int64:
            n, width = self.counts.shape[1:]
            lib.window_times(t_ns.ctypes.data, t_ns.strides[0], len(t_ns), self.w_ns, n, width,
                             self.counts[side].ctypes.data)  # fmt: skip
            return
        k = t_ns // self.w_ns
        ok = (t_ns >= 0) & (k < self.n)
        k, t = k[ok], t_ns[ok]
        sec = t // 10**9 - (k * self.w_ns) // 10**9
        flat = np.bincount(k * self.counts.shape[2] + sec, minlength=self.counts[side].size)
        self.counts[side] += flat.reshape(self.counts[side].shape)

    def pairs(self, t_orig_ns: np.ndarray, err_ns: np.ndarray) -> None:
        """Paired requests: the original's times (ascending) and |issue-time error| (ns)."""
        k = t_orig_ns // self.w_ns
        ok = (t_orig_ns >= 0) & (k < self.n)
        k, e = k[ok], err_ns[ok].astype(np.float64)
        for kk in np.unique(k).tolist():
            if kk != self._k:
                self._close()
                self._k = kk
            self._held.append(e[k == kk])

    def _close(self) -> None:
        if self._held:
            self.issue[self._k] = _issue(np.concatenate(self._held))
        self._held = []

    def rows(self, floor: dict | None = None, mono_of_orig_ns: int | None = None) -> list[dict]:
        self._close()
        out = []
        for k in range(self.n):
            lo, hi = k * self.w_ns, (k + 1) * self.w_ns
            m = -(-hi // 10**9) - lo // 10**9
            io, ir = self.counts[0, k, :m], self.counts[1, k, :m]
            out.append(_row(lo, hi, io, ir, self.issue.get(k, {}), floor, mono_of_orig_ns))
        return out


def verdict(issue_p99_ms: float | None, floor: dict | None, rows: list[dict]) -> dict:
    """The replay against the floor: overall p99 / floor p99 (goal <= 3), and the
    worst window's p99 / that window's floor p99 (goal <= 5)."""
    fl = (floor or {}).get("overall") or {}
    if not fl.get("p99_ms") or issue_p99_ms is None:
        return {}
    ratios = [r["p99_over_floor"] for r in rows if "p99_over_floor" in r]
    out = {
        "floor_p99_ms": fl["p99_ms"],
        "floor_p999_ms": fl.get("p999_ms"),
        "p99_over_floor": round(issue_p99_ms / fl["p99_ms"], 2),
        "worst_window_over_floor": max(ratios) if ratios else None,
    }
    out["meets_goal"] = out["p99_over_floor"] <= GOAL_OVERALL and (
        out["worst_window_over_floor"] is None or out["worst_window_over_floor"] <= GOAL_WINDOW
    )
    return out
