"""`iotape record --backend ftrace`: the kernel's ftrace `blk` tracer, for hosts
where neither BPF nor the blktrace tool works.

It enables the blk tracer on each recorded disk with the `blk_classic` output
(the same lines blkparse prints, with nanosecond times) and `trace_clock` mono,
reads `trace_pipe`, and pairs queue, issue and completion into records with the
blktrace importer's `Pairer`. Every tracing setting it touches is restored when
it stops, also on error. Coarser than the eBPF backend: pid, comm and op filters
run in user space, cgroups are not known, and ring-buffer overruns are the only
loss it can count.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import schemas
from base.errors import IotapeError
from devices import naming
from recorder.capture.model import Progress, RecordOptions, RecordResult, RecordSummary
from recorder.importers import blkpair, blkparse
from recorder.tracefile import TraceFooter, TraceHeader, TraceWriter, codec
from recorder.tracefile.streams import Extent, apply_streams

TRACEFS = Path("/sys/kernel/tracing")
BUFFER_KB = 16384
OP = schemas.enum("op")


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as e:
        raise IotapeError(f"{path}: cannot write {value.strip()!r}: {e.strerror}") from None


def _read(path: Path) -> str:
    return path.read_text().strip()


def ensure_tracefs() -> None:
    if not (TRACEFS / "current_tracer").exists():
        subprocess.run(
            ["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=False, capture_output=True
        )
    if not (TRACEFS / "current_tracer").exists():
        raise IotapeError(f"{TRACEFS}: tracefs is not mounted and cannot be mounted")
    if "blk" not in _read(TRACEFS / "available_tracers").split():
        raise IotapeError("the kernel has no ftrace blk tracer (CONFIG_BLK_DEV_IO_TRACE)")


def restorable(name: str, old: str) -> str:
    """What to write back to tracefs file `name` so that it reads as `old` did.

    A kernel whose trace buffer was never used shows `buffer_size_kb` as
    `7 (expanded: 1408)`: a minimal buffer that grows to 1408 KB the first time
    any tracer is set. Setting the blk tracer expands it for good (the kernel
    keeps no way back short of a reboot), and writing 7 would then leave the host
    a 7 KB buffer for its next tracing session. So the size it would have
    expanded to is restored: the buffer the host's next tracer gets is the same.
    """
    if name == "buffer_size_kb" and "(expanded:" in old:
        # Strip the newline too: a raw read of tracefs ends with one.
        return old.split("(expanded:")[1].strip().rstrip(")").strip()
    if name == "trace_clock":
        return next((w.strip("[]") for w in old.split() if w.startswith("[")), "local")
    return old


def _overruns() -> int:
    total = 0
    for stats in TRACEFS.glob("per_cpu/cpu*/stats"):
        for line in stats.read_text().splitlines():
            if line.startswith("overrun:"):
                total += int(line.split()[1])
    return total


@contextlib.contextmanager
def blk_tracer(devs: list[naming.Device]) -> Iterator[None]:
    """The blk tracer on for `devs`; every setting put back as it was on exit."""
    ensure_tracefs()
    saved: list[tuple[Path, str]] = []
    settings = [
        (TRACEFS / "trace_clock", "mono"),
        (TRACEFS / "options" / "blk_classic", "1"),
        (TRACEFS / "buffer_size_kb", str(BUFFER_KB)),
    ]
    settings += [(Path(f"/sys/block/{d.name}/trace/enable"), "1") for d in devs]
    try:
        for path, value in settings:
            saved.append((path, restorable(path.name, _read(path))))
            _write(path, value)
        saved.append((TRACEFS / "current_tracer", _read(TRACEFS / "current_tracer")))
        _write(TRACEFS / "trace", "")
        _write(TRACEFS / "current_tracer", "blk")
        yield
    finally:
        # The tracer first, so nothing is traced while the rest is put back.
        for path, old in reversed(saved):
            with contextlib.suppress(OSError):
                path.write_text(old)


class _Pipe:
    """trace_pipe read without blocking, so stopping never waits on the kernel."""

    def __init__(self) -> None:
        self.fd = os.open(TRACEFS / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
        self.rest = b""

    def lines(self, timeout: float) -> list[bytes]:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return []
        try:
            data = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return []
        data = self.rest + data
        cut = data.rfind(b"\n") + 1
        self.rest = data[cut:]
        return data[:cut].splitlines()

    def close(self) -> None:
        os.close(self.fd)


def _keep(recs: np.ndarray, opts: RecordOptions) -> np.ndarray:
    """The user-space filters: pid, comm, op."""
    mask = np.ones(len(recs), dtype=bool)
    if opts.pids:
        mask &= np.isin(recs["pid"], opts.pids)
    if opts.comms:
        mask &= np.isin(recs["comm"], [c.encode() for c in opts.comms])
    if opts.ops:
        mask &= np.isin(recs["op"], [OP[o] for o in opts.ops])
    return recs[mask]


@dataclass
class _Capture:
    """The trace pipe, the request pairer and the writer while a capture runs."""

    pipe: _Pipe
    writer: TraceWriter
    opts: RecordOptions
    wanted: set[int]
    extents: list[Extent]
    mono_start: int
    pairer: blkpair.Pairer = field(default_factory=blkpair.Pairer)
    events: int = 0

    def drain(self, timeout: float) -> int:
        """Feed the pairer what the pipe holds; the number of events taken."""
        got = 0
        for raw in self.pipe.lines(timeout):
            line = raw.decode(errors="replace")
            try:
                e = blkparse.parse_text_line(line)
            except blkparse.BadLine:
                continue  # ftrace's own notes ("CPU:1 [LOST 12 EVENTS]")
            if e is None or e.dev not in self.wanted:
                continue
            if e.act == "Q" and (named := blkparse.text_comm(line)):
                self.pairer.comms[named[0]] = named[1]
            self.pairer.add(e)
            got += 1
        return got

    def flush(self) -> None:
        recs = _keep(self.pairer.take(self.mono_start), self.opts)
        apply_streams(recs, self.extents)
        self.writer.write(recs)
        self.events += len(recs)


def _run(cap: _Capture, child: subprocess.Popen | None, progress: Progress | None) -> str:
    """Record until the command exits, the duration ends or SIGINT; the stop reason."""
    opts = cap.opts
    deadline = time.monotonic() + opts.duration if opts.duration else None
    stop_reason = "signal"
    try:
        while True:
            cap.drain(0.1)
            cap.flush()
            if progress:
                progress({"type": "progress", "events": cap.events, "lost": 0})
            if child is not None and child.poll() is not None:
                stop_reason = "command-exit"
                break
            if deadline and time.monotonic() >= deadline:
                stop_reason = "duration"
                break
    except KeyboardInterrupt:
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGINT)
    # The last completions: read until the pipe stays empty.
    while cap.drain(0.2):
        pass
    cap.flush()
    return stop_reason


def _start_command(command: list[str]) -> subprocess.Popen | None:
    if not command:
        return None
    try:
        return subprocess.Popen(command)
    except OSError as e:
        raise IotapeError(f"{command[0]}: cannot run: {e.strerror}") from None


def _footer(cap: _Capture, lost: int, stop_reason: str) -> TraceFooter:
    unpaired = cap.pairer.finish()
    end_mono = time.monotonic_ns()
    return {
        "lost": {"ring_overrun": lost},
        # A completion with nothing before it started before the capture.
        "pre_start": unpaired.get("complete_without_issue", 0),
        "in_flight_at_stop": unpaired.get("issued_never_completed", 0),
        "unpaired": unpaired,
        "device_flushes": dict(cap.pairer.device_flushes),
        "end_mono_ns": end_mono,
        "end_wall_ns": time.time_ns(),
        "duration_ns": end_mono - cap.mono_start,
        "stop_reason": stop_reason,
        "repaired": False,
    }


def record(
    opts: RecordOptions,
    devs: list[naming.Device],
    meta: dict,
    extents: list[Extent],
    progress: Progress | None = None,
) -> RecordResult:
    if opts.cgroups:
        raise IotapeError("--backend ftrace cannot filter by cgroup (the blk tracer has no cgroup)")
    command_exit = None
    with blk_tracer(devs):
        overrun0 = _overruns()
        pipe = _Pipe()
        mono_start = time.monotonic_ns()
        header: TraceHeader = {**meta, "mono_start_ns": mono_start, "wall_start_ns": time.time_ns()}
        child = None
        try:
            with TraceWriter(
                opts.output, header, compression=codec.resolve(opts.compress)
            ) as writer:
                cap = _Capture(pipe, writer, opts, {d.dev for d in devs}, extents, mono_start)
                if progress:
                    progress({"type": "ready", "mono_start_ns": mono_start})
                child = _start_command(opts.command)
                stop_reason = _run(cap, child, progress)
                if child is not None:
                    command_exit = child.wait()
                    child = None
                footer = _footer(cap, _overruns() - overrun0, stop_reason)
                writer.close(footer)
        finally:
            pipe.close()
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
    summary: RecordSummary = {**footer, "events": cap.events, "process": {}}
    return RecordResult(opts.output, summary, command_exit)
