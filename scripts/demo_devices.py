"""`make demo`'s two replay targets: the recorded trace replayed closed loop
(`--timing dependent`) on an SSD-like and an HDD-like device, each replay recorded
at the device, and the two side by side (`replay fidelity` of each).

The devices are analyzer/lab/devices.py's: SSD-like = a loop device over /dev/shm;
HDD-like = the project's disk model (analyzer/lab/hdd.py: a 10K rpm disk's seek,
rotation and transfer per request, served over FUSE), under a direct-I/O loop
device. A dependent replay issues each request when the ones it waits for have
completed plus its think time, so on the HDD-like device the application slows
down as it would have, instead of queueing without bound (an open-loop replay of
this trace fell 151 ms per second behind it there).

Everything made here (loop devices, the FUSE server and its mount, image files and
anything still running) is released on exit, also on an error, Ctrl-C or SIGTERM.

Usage: demo_devices.py TRACE OUTDIR [--spindles N]
writes OUTDIR/replay-{hdd,ssd}/ (plans and results) and OUTDIR/replay-{hdd,ssd}.iot.
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

from analyzer.lab.hdd import HddModel  # noqa: E402

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


def fidelity(trace: Path, jobs: Path) -> dict:
    """The closed-loop replay in `jobs` against the trace (iotape replay fidelity)."""
    out = subprocess.run(
        [IOTAPE, "replay", "fidelity", str(trace), str(jobs), "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def replay(name: str, dev: str, trace: Path, out: Path) -> dict:
    jobs, rec = out / name, out / f"{name}.iot"
    subprocess.run(
        [IOTAPE, "replay", "plan", str(trace), "-o", str(jobs), "--timing", "dependent",
         "--target", f"all={dev}"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    argv = [IOTAPE, "replay", "run", str(jobs), "--record", str(rec), "--json"]
    argv += ["--destroy-data-on", dev]
    t0 = time.monotonic()
    # A session of its own, so that an interrupted demo can end the replay's
    # iotape-lanes and recorder by their group, not only `iotape replay run`.
    p = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _, err = p.communicate()
    except BaseException:
        stop_group(p)
        raise
    if p.returncode != 0:
        raise SystemExit(f"demo: replay on {dev} failed:\n{err}")
    print(f"{name}: replayed on {dev} in {time.monotonic() - t0:.1f} s (wall), recorded to {rec}")
    return fidelity(trace, jobs)


STREAMS = ("db-read", "db-write", "log-write", "bdm-read")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def side_by_side(ssd: dict, hdd: dict) -> None:
    """Per stream: the original's IOPS and p50, each device's and its speed-up."""
    print(
        f"  {'stream':10s} {'requests':>8s}  {'original IOPS':>13s} {'p50 ms':>7s}  "
        f"{'SSD-like IOPS':>13s} {'p50 ms':>7s} {'speed-up':>8s}  "
        f"{'HDD-like IOPS':>13s} {'p50 ms':>7s} {'speed-up':>8s}"
    )
    for name in ("overall", *STREAMS):
        s = ssd["overall"] if name == "overall" else ssd["streams"].get(name)
        h = hdd["overall"] if name == "overall" else hdd["streams"].get(name)
        if not s or not h:
            continue
        o = s["original"]
        cells = [f"  {name:10s} {o['requests']:8d}  {o['iops'] or 0:13.1f} "
                 f"{_ms(o['latency']['p50_ms']):>7s}"]  # fmt: skip
        for f in (s, h):
            r = f["replay"]
            cells.append(
                f"{r['iops'] or 0:13.1f} {_ms(r['latency']['p50_ms']):>7s} "
                f"{'x' + format(f['speed_up'], '.2f') if f['speed_up'] else '-':>8s}"
            )
        print("  ".join(cells))
    for label, f in (("SSD-like", ssd), ("HDD-like", hdd)):
        print(
            f"  {label}: {f['issued_before_predecessor']} requests issued before one they "
            "waited for had completed"
        )
    print(
        "  (speed-up: the replay's requests per second over the original's; latency: the\n"
        "   trace's from the block layer's entry, the replay's from iotape-lanes' calls)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--spindles", type=int, default=1, help="the HDD-like model's disks")
    ap.add_argument("--size-mb", type=int, default=512)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, _sigterm)
    model = HddModel(spindles=a.spindles)
    try:
        with HybridLab(size_mb=a.size_mb, memory_disk=True, hdd=model) as lab:
            print(
                f"SSD-like: {lab.fast} (loop over /dev/shm)\n"
                f"HDD-like: {lab.slow} (the disk model over FUSE: {a.spindles} x "
                f"{model.rpm:g} rpm, {model.mean_random_ms(8192):.1f} ms a random 8 KiB "
                "request, analyzer/lab/hdd.py)"
            )
            ssd = replay("replay-ssd", lab.fast, a.trace, a.outdir)
            hdd = replay("replay-hdd", lab.slow, a.trace, a.outdir)
    except LabError as e:
        print(f"demo: cannot build the HDD-like device: {e}", file=sys.stderr)
        return 1
    print("the trace replayed closed loop: how the workload would have run on each device")
    side_by_side(ssd, hdd)
    (a.outdir / "fidelity.json").write_text(json.dumps({"ssd": ssd, "hdd": hdd}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
