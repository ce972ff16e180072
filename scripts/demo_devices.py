"""`make demo`'s two replay targets: the same trace replayed on an HDD-like and an
SSD-like device, each replay recorded at the device.

The devices are bench/hybrid_lab.py's: SSD-like = a loop device over /dev/shm;
HDD-like = a direct-I/O loop device over a file on the real disk, run in a cgroup v1
blkio group that caps the disk's read and write IOPS. Loop workers charge their I/O
to the submitter's cgroup, so the cap's waits land inside the loop device's request
time, which is what the recorder measures and the Jetstress verdict judges.

Everything made here (loop devices, image files, the cgroup and anything still
running in it) is released on exit, also on an error, Ctrl-C or SIGTERM.

Usage: demo_devices.py TRACE OUTDIR --iops N
writes OUTDIR/replay-{hdd,ssd}/ (plans and fio results) and OUTDIR/replay-{hdd,ssd}.iot.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from hybrid_lab import HybridLab, LabError  # noqa: E402

IOTAPE = str(ROOT / ".venv" / "bin" / "iotape")


def _sigterm(signum: int, frame: object) -> None:
    # SystemExit unwinds through HybridLab's context manager, which releases everything.
    raise SystemExit(128 + signum)


def stop_group(p: subprocess.Popen) -> None:
    """End the replay's whole process group: a polite stop, then whatever is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def timing(trace: Path, replayed: Path) -> dict:
    """How closely the replay kept the trace's issue times (iotape replay fidelity)."""
    out = subprocess.run(
        [IOTAPE, "replay", "fidelity", str(trace), str(replayed), "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)["iotape"]


def show_timing(fid: dict) -> None:
    orig, rep = fid["duration_s"]
    drift = fid["overall"].get("drift_ms_per_s")
    print(
        f"  replay took {rep:.1f} s for a {orig:.1f} s trace"
        + (f", falling behind it by {drift:.1f} ms per s" if drift is not None else "")
    )
    print("  issue time off the trace's (|replay - trace|, the two aligned at the median):")
    for name in ("db-read", "db-write", "log-write", "bdm-read"):
        s = fid["streams"].get(name)
        if not s or not s.get("issue_error"):
            continue
        e = s["issue_error"]
        print(
            f"    {name:10s} p50 {e['p50_ms']:8.2f} ms   p99 {e['p99_ms']:8.2f} ms"
            f"   max {e['max_ms']:8.2f} ms"
        )


def replay(lab: HybridLab, name: str, dev: str, trace: Path, out: Path, throttled: bool) -> None:
    jobs, rec = out / name, out / f"{name}.iot"
    subprocess.run(
        [IOTAPE, "replay", "plan", str(trace), "-o", str(jobs), "--mode", "exact",
         "--target", f"all={dev}"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    argv = [IOTAPE, "replay", "run", str(jobs), "--record", str(rec), "--json"]
    argv += ["--destroy-data-on", dev]
    t0 = time.monotonic()
    # Only the HDD-like replay runs in the throttled cgroup: the cap is on the real
    # disk, and the SSD-like device never reaches it anyway.
    start = lab.popen if throttled else subprocess.Popen
    # A session of its own, so that an interrupted demo can end the replay's fio and
    # recorder by their group, not only the `iotape replay run` that started them.
    p = start(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
              text=True)  # fmt: skip
    try:
        _, err = p.communicate()
    except BaseException:
        stop_group(p)
        raise
    if p.returncode != 0:
        raise SystemExit(f"demo: replay on {dev} failed:\n{err}")
    print(f"{name}: replayed on {dev} in {time.monotonic() - t0:.1f} s (wall), recorded to {rec}")
    show_timing(timing(trace, rec))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--iops", type=int, required=True, help="HDD-like read and write IOPS cap")
    ap.add_argument("--size-mb", type=int, default=512)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        with HybridLab(size_mb=a.size_mb, slow_iops=a.iops) as lab:
            disk = "{}:{}".format(*lab.disk)
            print(
                f"SSD-like: {lab.fast} (loop over /dev/shm)\n"
                f"HDD-like: {lab.slow} (direct-I/O loop over a file on disk {disk}), "
                f"blkio cap {a.iops} read + {a.iops} write IOPS on that disk\n"
                f"  expected service time once the cap is reached: {1000 / a.iops:.1f} ms"
                f" per request; below it requests pass at the disk's own speed\n"
                f"  (the cap is a budget per time slice, not a seek model: a request waits,"
                f" for up to a slice or more, only after a burst has used the budget up)"
            )
            replay(lab, "replay-ssd", lab.fast, a.trace, a.outdir, throttled=False)
            replay(lab, "replay-hdd", lab.slow, a.trace, a.outdir, throttled=True)
    except LabError as e:
        print(f"demo: cannot build the HDD-like device: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
