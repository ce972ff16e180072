"""The machine's wake-up floor, measured while a replay runs.

A replayer cannot issue a request more precisely than a thread wakes from a
short sleep on the same machine at the same time. `iotape replay run` starts
this probe beside fio: a lone thread sleeping to 500 us marks (timer slack
1 ns, as fio's threads get), noting how late each wake-up is, summarised per
second of CLOCK_MONOTONIC (the recorder's clock) so that `replay fidelity` can
put each time window's floor beside its error. It stops on SIGTERM and writes
its JSON then; memory stays one second of samples.

    python -m replayer.run.wakeup OUT.json
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import signal
import sys
import time
from pathlib import Path

import numpy as np

PERIOD_US = 500
PR_SET_TIMERSLACK = 29


def _slack_1ns() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)


def summarize(late_ns: np.ndarray) -> dict:
    x = np.asarray(late_ns, dtype=np.float64) / 1e6
    if not len(x):
        return {"wakeups": 0}
    return {
        "wakeups": len(x),
        "p50_ms": round(float(np.percentile(x, 50)), 4),
        "p99_ms": round(float(np.percentile(x, 99)), 4),
        "p999_ms": round(float(np.percentile(x, 99.9)), 4),
        "max_ms": round(float(x.max()), 4),
        "late_over_1ms_pct": round(float((x > 1).mean() * 100), 3),
    }


def probe(stop: list[bool], period_us: int = PERIOD_US) -> dict:
    """Sleep to period marks until stop[0]; per monotonic second, the wake-up
    lateness percentiles, and over the whole run a histogram for the total."""
    _slack_1ns()
    seconds: list[dict] = []
    # Overall percentiles from a 10 us histogram up to 100 ms (bounded memory).
    hist = np.zeros(10_001, np.int64)
    cur: list[int] = []
    cur_sec = None
    t0 = time.monotonic_ns()
    k = 0
    while not stop[0]:
        k += 1
        target = t0 + k * period_us * 1000
        d = target - time.monotonic_ns()
        if d > 0:
            time.sleep(d / 1e9)
        now = time.monotonic_ns()
        if d <= -period_us * 1000:
            # Fell behind by a whole period (a stall): resynchronise, count it once.
            k = (now - t0) // (period_us * 1000)
        sec = now // 1_000_000_000
        if sec != cur_sec:
            if cur:
                seconds.append({"mono_s": cur_sec, **summarize(np.array(cur))})
            cur, cur_sec = [], sec
        late = now - target
        cur.append(late)
        hist[min(late // 10_000, len(hist) - 1)] += 1
    if cur:
        seconds.append({"mono_s": cur_sec, **summarize(np.array(cur))})
    return {"period_us": period_us, "overall": _from_hist(hist), "seconds": seconds}


def _from_hist(hist: np.ndarray) -> dict:
    n = int(hist.sum())
    if not n:
        return {"wakeups": 0}
    c = np.cumsum(hist)
    q = lambda p: round(float(np.searchsorted(c, p * n) + 1) * 0.01, 3)  # noqa: E731
    return {
        "wakeups": n,
        "p50_ms": q(0.5),
        "p99_ms": q(0.99),
        "p999_ms": q(0.999),
        "late_over_1ms_pct": round(float(hist[100:].sum() / n * 100), 3),
        "resolution_ms": 0.01,
    }


def main(out: Path) -> None:
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    signal.signal(signal.SIGINT, lambda *_: stop.__setitem__(0, True))
    res = probe(stop)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(res) + "\n")
    tmp.replace(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
