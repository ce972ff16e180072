"""Run a windowed exact plan: one fio process per window, all on one clock.

`iotape replay run` starts this (under the recorder, when recording) for a plan
whose trace needs more pieces than one fio process holds (plan/exact.py, MAX_JOBS).
It picks the monotonic microsecond at which the trace's 0 replays, stamps every
iolog with it (iolog.stamp: each job's first wait becomes absolute), and
launches each window's fio at its `launch_us`, its set-up time before its first
piece. A late launch only eats into that set-up time: the requests keep their
absolute times. Each window's JSON goes to results/fio.wNNNN.json.

    python -m replayer.run.launch JOBDIR
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import sys
import time
from pathlib import Path

from replayer.plan import iolog
from schemas.documents import plan as plan_document

# Stamping opens every log once (~20-50 us each here); the base is chosen this
# long after that is expected to end, and chosen again if stamping overran it.
STAMP_US_PER_LOG = 100
STAMP_SLACK_US = 500_000


def window_output(index: int) -> str:
    return f"results/fio.w{index:04d}.json"


def _now_us() -> int:
    return time.monotonic_ns() // 1000


def stamp_all(jobdir: Path, man: plan_document.ReplayPlan) -> int:
    """Stamp every log; returns the base (monotonic us of the trace's 0), chosen so
    that window 0 launches after stamping ended."""
    logs = [jobdir / "iologs" / f"{j.name}.log" for j in man.jobs]
    assert man.windows, "a plan of one window has no launcher"
    lead = -int(man.windows[0].launch_us)
    budget = STAMP_US_PER_LOG * len(logs) + STAMP_SLACK_US
    while True:
        base = _now_us() + budget + lead
        for log in logs:
            iolog.stamp(log, base)
        if _now_us() < base - lead:
            return base
        budget *= 2


def _fio(jobdir: Path, jobfile: str, output: str) -> subprocess.Popen:
    err = str(Path(output).with_suffix(".err"))
    inner = (
        f"cd {shlex.quote(str(jobdir))} && exec fio --output-format=json --eta=never "
        f"{shlex.quote(jobfile)} >{shlex.quote(output)} 2>{shlex.quote(err)}"
    )
    return subprocess.Popen(["sh", "-c", inner])


def launch(jobdir: Path) -> int:
    """Run every window; the exit status is the first failing fio's, else 0."""
    man = plan_document.load(jobdir / "plan.json")
    # fio sleeps before every iolog entry; the default 50 us timer slack made
    # each sleep end 50 us late. Children inherit it.
    with contextlib.suppress(OSError):
        Path("/proc/self/timerslack_ns").write_text("1")
    base = stamp_all(jobdir, man)
    (jobdir / "results" / "base_us").write_text(f"{base}\n")
    procs = []
    for k, w in enumerate(man.windows or []):
        at = base + int(w.launch_us)
        wait = at - _now_us()
        if wait > 0:
            time.sleep(wait / 1e6)
        procs.append(_fio(jobdir, w.jobfile, window_output(k)))
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c), 0)


if __name__ == "__main__":
    sys.exit(launch(Path(sys.argv[1]).resolve()))
