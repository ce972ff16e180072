"""The cost of a day of always-on recording, compressed into minutes (issue #35).

Goal: 24 h at 5,000 IOPS (432 M requests) with `--rotate 1GiB --keep-bytes 10GiB`
stays under 10 GiB on disk and loses no request between files. Here fio reads a
loop device over /dev/shm at RATE IOPS for RUNTIME seconds, and the rotation and
ring sizes are scaled by the same factor as the requests (requests run / 432 M):
the files turn over as often per request as a day's would. Measured, per codec
(auto, the default, and none, 80 bytes a request, which makes the ring delete):
the most bytes on disk at any time (the output directory listed every 20 ms),
events against the kernel's completions (/sys/block/DEV/stat), every file
`trace check` clean, bytes a request, the loader's CPU (wait4) and peak RSS. A
capture with no I/O gives the recorder's fixed CPU a second. The peer, in the same
run: the same fio untraced (IOPS ratio). Extrapolated to a day at 5,000 IOPS:
bytes = bytes a request x 432 M (against the ring's 10 GiB); CPU = idle CPU a
second x 86,400 + CPU a request x 432 M; a capture at 5,000 IOPS itself
(--check-runtime seconds) checks that CPU model.

Then the flight recorder: `--ring` with `--trigger 'iops > 2*RATE/4 over 500ms'`
fired by a step from a slow to a fast fio, several times: the loader's
latency_ns (the last evaluation at which the condition was false, to the window
before's files linked and snapshot.json written), and SIGUSR1 to snapshot.json
seen from outside (polled every millisecond).

Run as root, under the shared lock:
  flock /tmp/iotape-bench.lock .venv/bin/python bench/record_day.py [--runtime 60 --rate 30000]
Writes JSON to bench/results/record_day.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from recorder.tracefile import open_trace, segments_of

ROOT = Path(__file__).resolve().parent.parent
IOTAPE = [sys.executable, "-m", "iotape"]
DAY_REQUESTS = 5000 * 86400
DAY_ROTATE, DAY_KEEP = 1 << 30, 10 << 30


def fio(dev: str, rate: int, seconds: float, out: Path | None = None) -> list[str]:
    return [
        "fio",
        "--name=day",
        f"--filename={dev}",
        "--direct=1",
        "--rw=randread",
        "--bs=4k",
        "--ioengine=io_uring",
        "--iodepth=16",
        f"--rate_iops={rate}",
        "--time_based",
        f"--runtime={seconds:g}",
        "--randseed=35",
        "--output-format=json",
        f"--output={out or os.devnull}",
    ]


def completed(dev: str) -> int:
    fields = Path(f"/sys/block/{Path(dev).name}/stat").read_text().split()
    return int(fields[0]) + int(fields[4])


@contextlib.contextmanager
def loop_device(size_mb: int = 512) -> Iterator[str]:
    backing = Path(tempfile.mkstemp(dir="/dev/shm", prefix="iotape-bench-day-")[1])
    os.truncate(backing, size_mb << 20)
    dev = subprocess.run(
        ["losetup", "--find", "--show", str(backing)], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        dd = ["dd", "if=/dev/zero", f"of={dev}", "bs=1M", f"count={size_mb}", "oflag=direct"]
        subprocess.run([*dd, "status=none"], check=True)
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
        backing.unlink(missing_ok=True)


class DiskSampler:
    """The bytes of every file in a directory, listed every 20 ms; the most seen."""

    def __init__(self, where: Path) -> None:
        self.where, self.peak, self.samples = where, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            total = 0
            with contextlib.suppress(FileNotFoundError), os.scandir(self.where) as it:
                for e in it:
                    with contextlib.suppress(FileNotFoundError):
                        if e.is_file(follow_symlinks=False):
                            total += e.stat(follow_symlinks=False).st_size
            self.peak, self.samples = max(self.peak, total), self.samples + 1

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def untraced(dev: str, args: argparse.Namespace, tmp: Path) -> dict:
    out = tmp / "fio.json"
    subprocess.run(fio(dev, args.rate, args.runtime, out), check=True)
    job = json.loads(out.read_text())["jobs"][0]["read"]
    return {"iops": job["iops"], "requests": job["total_ios"]}


def day_capture(dev: str, rate: int, runtime: float, tmp: Path, codec: str, name: str = "") -> dict:
    """One capture at RATE for RUNTIME with the day's rotation scaled to its requests."""
    scale = rate * runtime / DAY_REQUESTS
    rotate, keep = max(4096, int(DAY_ROTATE * scale)), int(DAY_KEEP * scale)
    where = tmp / f"day-{codec}{name}"
    where.mkdir()
    out, fio_out = where / "day.iot", tmp / f"fio-{codec}.json"
    cmd = [*IOTAPE, "record", "-d", dev, "-o", str(out), "--json", "--compress", codec]
    cmd += ["--rotate", str(rotate), "--keep-bytes", str(keep), "--"]
    before = completed(dev)
    sampler = DiskSampler(where)
    t0 = time.monotonic()
    res = subprocess.run([*cmd, *fio(dev, rate, runtime, fio_out)], capture_output=True)
    wall = time.monotonic() - t0
    peak = sampler.stop()
    if res.returncode:
        raise SystemExit(f"iotape record: {res.stderr.decode().strip()}")
    kernel = completed(dev) - before
    done = json.loads(res.stdout.decode().strip().splitlines()[-1])
    files = segments_of(out)
    bad = [
        f.name
        for f in files
        if subprocess.run([*IOTAPE, "trace", "check", str(f)], capture_output=True).returncode
    ]
    proc = done["process"]
    cpu = proc["user_s"] + proc["sys_s"]
    written = done["files"]["bytes_written"]
    return {
        "codec": codec,
        "scale": scale,
        "rotate_bytes": rotate,
        "keep_bytes": keep,
        "events": done["events"],
        "kernel_completions": kernel,
        "missing_events": kernel - done["events"],
        "lost": sum(done["lost"].values()),
        "files_written": done["files"]["last"] + 1,
        "files_deleted": done["files"]["deleted"],
        "files_bad": bad,
        "peak_bytes_on_disk": peak,
        "peak_over_keep": peak / keep,
        "disk_samples": sampler.samples,
        "bytes_written": written,
        "bytes_per_request": written / max(1, done["events"]),
        "output_mb_per_s": written / 1e6 / (done["duration_ns"] / 1e9),
        "iops": done["events"] / (done["duration_ns"] / 1e9),
        "recorder_cpu_s": cpu,
        "recorder_cpu_per_request_us": cpu / max(1, done["events"]) * 1e6,
        "recorder_peak_rss_kb": proc["max_rss_kb"],
        "wall_s": wall,
    }


def idle_capture(dev: str, seconds: float, tmp: Path) -> dict:
    out = tmp / "idle" / "idle.iot"
    out.parent.mkdir()
    cmd = [*IOTAPE, "record", "-d", dev, "-o", str(out), "--json", "--rotate", "1GiB"]
    res = subprocess.run([*cmd, "--duration", f"{seconds:g}"], capture_output=True, check=True)
    done = json.loads(res.stdout.decode().strip().splitlines()[-1])
    cpu = done["process"]["user_s"] + done["process"]["sys_s"]
    return {
        "seconds": done["duration_ns"] / 1e9,
        "cpu_s": cpu,
        "cpu_per_s": cpu * 1e9 / done["duration_ns"],
    }


def _wait_file(path: Path, timeout: float) -> float:
    """Polls every millisecond for PATH; the monotonic time it was first seen."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{path}: not there after {timeout:g} s")
        time.sleep(0.001)
    return time.monotonic()


def condition_to_file_ms(snap: Path, threshold: int) -> float:
    """From the completion at which the snapshot's own records came to hold more than
    THRESHOLD/2 completions in the half second before it (the trigger's condition,
    exact, where the loader's window is 49 to 50 steps of 10 ms: it can only turn
    true later) to the window before's files linked (saved_mono_ns)."""
    manifest = json.loads((snap / "snapshot.json").read_text())
    with open_trace(snap) as t:
        start, done = t.header["mono_start_ns"], np.sort(t.read_all()["ts_complete_ns"])
    asked = manifest["requested_mono_ns"] - start
    done = done[done <= asked]
    in_window = np.arange(done.size) - np.searchsorted(done, done - 500_000_000, side="right") + 1
    # The fast phase that fired it: the first completion after the last one at
    # which the condition was false (an earlier phase may be in the window before).
    last_false = np.nonzero(in_window <= threshold // 2)[0][-1]
    first = done[last_false + 1]
    return (manifest["saved_mono_ns"] - start - first) / 1e6


def snapshot_latency(dev: str, args: argparse.Namespace, tmp: Path) -> dict:
    """Trigger-to-file (the loader's latency_ns) and SIGUSR1-to-file (from outside)."""
    where = tmp / "ring"
    where.mkdir()
    out = where / "ring.iot"
    threshold = args.rate // 4
    trig = f"iops > {threshold} over 500ms"
    cmd = [*IOTAPE, "record", "-d", dev, "-o", str(out), "--ring", "10s", "--snapshot-after", "1s"]
    rec = subprocess.Popen(
        [*cmd, "--trigger", trig], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    snaps = out.with_suffix(".snapshots")
    trig_ms, sig_ms = [], []
    try:
        time.sleep(3)
        for i in range(args.snapshots):
            # Slow, then fast: the condition turns true during the fast phase.
            slow = shlex.join(fio(dev, threshold // 10, 1.5))
            subprocess.run(["sh", "-c", f"{slow} && {shlex.join(fio(dev, args.rate, 1.5))}"])
            deadline = time.monotonic() + 10
            while len(list(snaps.glob("*-trigger/snapshot.json"))) <= i:
                if time.monotonic() > deadline:
                    raise SystemExit("the trigger did not fire")
                time.sleep(0.01)
            time.sleep(1.5)  # its window after, so that the next one can fire
        for _ in range(args.snapshots):
            seen = set(snaps.iterdir())
            t0 = time.monotonic()
            rec.send_signal(signal.SIGUSR1)
            while not (new := set(snaps.iterdir()) - seen):
                if time.monotonic() - t0 > 10:
                    raise SystemExit("SIGUSR1 made no snapshot")
                time.sleep(0.001)
            sig_ms.append((_wait_file(new.pop() / "snapshot.json", 10) - t0) * 1e3)
            time.sleep(1.5)
    finally:
        rec.send_signal(signal.SIGTERM)
        rec.wait(timeout=60)
    cond_ms = []
    for m in sorted(snaps.glob("*-trigger/snapshot.json")):
        trig_ms.append(json.loads(m.read_text())["latency_ns"] / 1e6)
        cond_ms.append(condition_to_file_ms(m.parent, threshold))
    return {
        "trigger": trig,
        "trigger_latency_ms": trig_ms,
        "trigger_latency_max_ms": max(trig_ms),
        "condition_to_file_ms": cond_ms,
        "condition_to_file_max_ms": max(cond_ms),
        "sigusr1_to_file_ms": sig_ms,
        "sigusr1_to_file_max_ms": max(sig_ms),
    }


def extrapolate(day: dict, idle: dict) -> dict:
    """A day at 5,000 IOPS from the measured rates (the model in the docstring). On
    disk: what a day writes, or the ring's 10 GiB times the peak-to-keep ratio
    measured at scale when a day writes more."""
    written = day["bytes_per_request"] * DAY_REQUESTS
    cpu = idle["cpu_per_s"] * 86400 + day["recorder_cpu_per_request_us"] * 1e-6 * DAY_REQUESTS
    on_disk = written if written <= DAY_KEEP else DAY_KEEP * max(1.0, day["peak_over_keep"])
    return {
        "requests": DAY_REQUESTS,
        "bytes_written": written,
        "peak_bytes_on_disk": on_disk,
        "recorder_cpu_s": cpu,
        "recorder_cpu_share_of_one_cpu": cpu / 86400,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", type=float, default=60)
    ap.add_argument("--rate", type=int, default=30000, help="fio's IOPS")
    ap.add_argument("--idle", type=float, default=20, help="seconds of the no-I/O capture")
    ap.add_argument("--check-runtime", type=float, default=30, help="seconds at 5,000 IOPS")
    ap.add_argument("--snapshots", type=int, default=3, help="trigger and SIGUSR1 snapshots each")
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "record_day.json")
    args = ap.parse_args()
    with loop_device() as dev, tempfile.TemporaryDirectory(prefix="iotape-day-") as t:
        tmp = Path(t)
        peer = untraced(dev, args, tmp)
        captures = {c: day_capture(dev, args.rate, args.runtime, tmp, c) for c in ("auto", "none")}
        # The CPU model checked where it is used: a capture at the day's own rate.
        at_day_rate = day_capture(dev, 5000, args.check_runtime, tmp, "auto", "-5000")
        idle = idle_capture(dev, args.idle, tmp)
        latency = snapshot_latency(dev, args, tmp)
    result = {
        "bench": "record_day",
        "host": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "untraced": peer,
        "captures": captures,
        "iops_ratio_to_untraced": {c: v["iops"] / peer["iops"] for c, v in captures.items()},
        "idle": idle,
        "day_at_5000_iops": {c: extrapolate(v, idle) for c, v in captures.items()},
        "cpu_model_check_at_5000_iops": {
            "runtime_s": args.check_runtime,
            "measured_cpu_per_s": at_day_rate["recorder_cpu_s"] / args.check_runtime,
            "model_cpu_per_s": extrapolate(captures["auto"], idle)["recorder_cpu_s"] / 86400,
            "bytes_per_request": at_day_rate["bytes_per_request"],
            "missing_events": at_day_rate["missing_events"],
            "lost": at_day_rate["lost"],
        },
        "snapshots": latency,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
