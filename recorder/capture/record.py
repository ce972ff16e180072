"""`iotape record`: resolve devices and labels, run the capture backend, report.

The eBPF capture itself is the C loader (recorder/iotape-rec.c); this module
prepares what it needs (device numbers, the header's metadata, label extents),
starts it, waits until it is attached, runs the user's command, stops it and
summarises. Nothing here touches the hot path.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import cast

import schemas
from base import __version__
from base.errors import IotapeError
from devices import naming
from recorder.capture import flight, labels, rotation
from recorder.capture.flight import LOADER as LOADER  # named here for its callers
from recorder.capture.flight import loader_path
from recorder.capture.model import Progress, RecordOptions, RecordResult, RecordSummary
from recorder.tracefile import codec
from recorder.tracefile.streams import Extent

READY_TIMEOUT_S = 60.0
PR_SET_PDEATHSIG = 1
OPS = tuple(schemas.enum("op"))


def cgroup_id(spec: str) -> int:
    """A cgroup v2 id from a number or a path in the unified hierarchy."""
    if spec.isdigit():
        return int(spec)
    for root in ("", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        path = Path(root + spec) if root and spec.startswith("/") else Path(spec)
        if path.is_dir() and (path / "cgroup.procs").exists():
            return path.stat().st_ino
    raise IotapeError(f"--cgroup {spec}: not a cgroup id or a cgroup v2 directory")


def check_output(path: Path, force: bool) -> None:
    if path.is_dir():
        raise IotapeError(f"{path}: is a directory")
    if path.exists() and not force:
        raise IotapeError(f"{path}: exists; pass --force to overwrite it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise IotapeError(f"{path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise IotapeError(f"{path}: directory {parent} is not writable")


def validate(opts: RecordOptions) -> list[naming.Device]:
    if not opts.devices:
        raise IotapeError("no device to record: give at least one -d DEV")
    for op in opts.ops:
        if op not in OPS:
            raise IotapeError(f"--op {op}: unknown op; one of {', '.join(OPS)}")
    for comm in opts.comms:
        if not comm or len(comm.encode()) > 15:
            raise IotapeError(f"--comm {comm!r}: a thread name is 1 to 15 bytes")
    if opts.duration is not None and opts.duration <= 0:
        raise IotapeError(f"--duration {opts.duration}: must be positive")
    devs = [naming.resolve(d) for d in opts.devices]
    seen: set[int] = set()
    for d in devs:
        key = d.partition.dev if d.partition else d.dev
        if key in seen:
            raise IotapeError(f"-d {d.path}: named twice")
        seen.add(key)
    check_output(opts.output, opts.force)
    if (opts.rotation.rotates or opts.rotation.max_bytes) and opts.backend != "bpf":
        raise IotapeError(f"--rotate, --max-bytes: not with --backend {opts.backend}")
    if opts.wakes and opts.backend != "bpf":
        raise IotapeError(f"--wakes: not with --backend {opts.backend} (bpf only)")
    if opts.rotation.keep_s and (kept := flight.keep_previous(opts.output)):
        print(f"{kept}: the earlier capture's files, kept as a snapshot", file=sys.stderr)
    if opts.rotation.rotates:
        rotation.clear_outputs(opts.output, opts.force)
    return devs


def build_meta(
    opts: RecordOptions,
    devs: list[naming.Device],
    cgroups: list[int],
    streams: dict[int, str],
    label_summary: list[dict],
) -> dict:
    uname = platform.uname()
    return {
        "host": uname.node,
        "kernel": uname.release,
        "command_line": opts.argv,
        "recorder": {"backend": opts.backend, "version": __version__},
        "devices": [d.to_json() for d in devs],
        "filters": {
            "pids": opts.pids,
            "cgroups": cgroups,
            "comms": opts.comms,
            "ops": opts.ops,
        },
        "streams": {str(k): v for k, v in sorted(streams.items())},
        "labels": label_summary,
        "metadata": opts.metadata,
    }


def loader_argv(
    opts: RecordOptions,
    devs: list[naming.Device],
    cgroups: list[int],
    meta_path: str,
    extents_path: str | None,
) -> list[str]:
    argv = [str(loader_path()), "-o", str(opts.output), "--meta", meta_path]
    for d in devs:
        p = d.partition
        argv += ["--dev", f"{p.major}:{p.minor}:part" if p else f"{d.major}:{d.minor}"]
    for pid in opts.pids:
        argv += ["--pid", str(pid)]
    for cg in cgroups:
        argv += ["--cgroup", str(cg)]
    for comm in opts.comms:
        argv += ["--comm", comm]
    for op in opts.ops:
        argv += ["--op", op]
    for rule in labels.thread_rule_args():
        argv += ["--rule", rule]
    if extents_path:
        argv += ["--extents", extents_path]
    if opts.duration is not None and not opts.command:
        argv += ["--duration", f"{opts.duration:g}"]
    argv += ["--chunk-records", str(opts.chunk_records), "--ring-mb", str(opts.ring_mb)]
    if opts.bpf_stats:
        argv.append("--bpf-stats")
    if opts.wakes:
        argv.append("--wakes")
    # The loader's own "auto" picks per chunk; the name is checked here all the same.
    codec.resolve(opts.compress)
    argv += ["--compress", opts.compress]
    return argv + opts.rotation.loader_args() + opts.flight.loader_args(opts.rotation)


def _write_extents(extents: list[Extent], tmpdir: str) -> str | None:
    if not extents:
        return None
    path = os.path.join(tmpdir, "extents.txt")
    with open(path, "w") as f:
        for e in extents:
            f.write(f"{e.dev} {e.start} {e.end} {e.read_stream} {e.write_stream}\n")
    return path


def _die_with_parent() -> None:
    """In the loader's child process: a SIGTERM when we die, even by SIGKILL, so the
    loader finishes its file instead of recording forever as an orphan."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class _Loader:
    """The running loader: its JSON status lines read on a thread, its stderr kept."""

    def __init__(self, argv: list[str], progress: Progress | None) -> None:
        self.proc = subprocess.Popen(
            argv,
            preexec_fn=_die_with_parent,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.ready = threading.Event()
        self.done: dict | None = None
        self.stderr: list[str] = []
        self.usage: dict = {}
        self._progress = progress
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = msg.get("type")
            if kind == "ready":
                self.ready.set()
            elif kind == "done":
                self.done = msg
            if self._progress:
                self._progress(msg)
        self.ready.set()

    def _read_stderr(self) -> None:
        assert self.proc.stderr
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def error_line(self) -> str:
        for line in reversed(self.stderr):
            if line.strip():
                return line.removeprefix("iotape-rec: ").removeprefix("error: ")
        return f"the loader exited with status {self.proc.returncode}"

    def stop(self, command_exited: bool = False) -> None:
        # SIGUSR2 tells the loader why it stops ("command-exit" in the footer).
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR2 if command_exited else signal.SIGINT)

    def forward(self, sig: int) -> None:
        """SIGUSR1 (a snapshot) and SIGHUP (the next file) go on to the loader."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self) -> int:
        while True:
            try:
                rc = self._reap()
                break
            except KeyboardInterrupt:
                # Ctrl-C again while stopping: the loader is still finishing the file.
                continue
        for t in self._threads:
            t.join(timeout=5)
        return rc

    def _reap(self) -> int:
        """Wait with wait4 to learn the loader's peak memory and CPU from the outside."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.usage = {
            "max_rss_kb": usage.ru_maxrss,
            "user_s": round(usage.ru_utime, 3),
            "sys_s": round(usage.ru_stime, 3),
        }
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _run_command(command: list[str], loader: _Loader, duration: float | None) -> tuple[int, bool]:
    """Run the user's command while recording: (its exit status, whether we were interrupted)."""
    try:
        child = subprocess.Popen(command)
    except OSError as e:
        raise IotapeError(f"{command[0]}: cannot run: {e.strerror}") from None
    try:
        deadline = time.monotonic() + duration if duration else None
        while child.poll() is None:
            if loader.proc.poll() is not None:
                # The capture died (full disk, say): the command's I/O is no longer recorded.
                child.terminate()
                break
            if deadline and time.monotonic() >= deadline:
                child.terminate()
                break
            time.sleep(0.05)
        return child.wait(), False
    except KeyboardInterrupt:
        child.send_signal(signal.SIGINT)
        return child.wait(), True
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _wait_idle(loader: _Loader) -> None:
    """Record until --duration ends (the loader stops itself) or Ctrl-C."""
    try:
        # Not poll(): it would reap the loader, and wait4 its CPU and peak memory with it.
        while not os.waitid(os.P_PID, loader.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
            time.sleep(0.1)
    except KeyboardInterrupt:
        loader.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# The loader of the capture running in this process, for the signal handlers.
_running: list[_Loader] = []


def _forward(signum: int, frame: object) -> None:
    for loader in _running:
        loader.forward(signum)


def record(opts: RecordOptions, progress: Progress | None = None) -> RecordResult:
    """Validate, capture until the command exits, --duration passes or a signal
    (SIGINT, SIGTERM; SIGHUP unless the capture rotates) arrives, then return the
    loader's summary. A rotated capture's next file starts on SIGHUP (as a service
    manager's reload expects); a ring capture saves a snapshot on SIGUSR1."""
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        # SIGINT too, for callers of the library: a shell starts background jobs with
        # SIGINT ignored, and `kill -INT` must still stop the capture.
        stops = [signal.SIGINT, signal.SIGTERM]
        forwarded = [signal.SIGUSR1] if opts.flight.enabled else []
        (forwarded if opts.rotation.rotates else stops).append(signal.SIGHUP)
        for sig in stops:
            handlers[sig] = signal.signal(sig, _interrupt)
        for sig in forwarded:
            handlers[sig] = signal.signal(sig, _forward)
    try:
        return _record(opts, progress)
    finally:
        for sig, old in handlers.items():
            signal.signal(sig, old)


def _record(opts: RecordOptions, progress: Progress | None = None) -> RecordResult:
    devs = validate(opts)
    cgroups = [cgroup_id(c) for c in opts.cgroups]
    extents, streams, label_summary = labels.label_extents(opts.labels, devs)
    meta = build_meta(opts, devs, cgroups, streams, label_summary)
    if opts.backend == "bpftrace":
        from recorder.capture import bpftrace_backend

        return bpftrace_backend.record(opts, devs, meta, extents, progress)
    if opts.backend == "ftrace":
        from recorder.capture import ftrace_backend

        return ftrace_backend.record(opts, devs, meta, extents, progress)
    if opts.backend != "bpf":
        raise IotapeError(f"--backend {opts.backend}: unknown; one of bpf, bpftrace, ftrace")
    with tempfile.TemporaryDirectory(prefix="iotape-rec-") as tmp:
        meta_path = os.path.join(tmp, "meta.json")
        with open(meta_path, "w") as f:
            json.dump(meta, f)
        argv = loader_argv(opts, devs, cgroups, meta_path, _write_extents(extents, tmp))
        loader = _Loader(argv, progress)
        _running.append(loader)
        command_exit = None
        try:
            loader.ready.wait(READY_TIMEOUT_S)
            if loader.proc.poll() is not None or not loader.ready.is_set():
                loader.kill()
                loader.wait()
                raise IotapeError(loader.error_line())
            if opts.command:
                command_exit, interrupted = _run_command(opts.command, loader, opts.duration)
                loader.stop(command_exited=not interrupted)
            else:
                _wait_idle(loader)
            rc = loader.wait()
        except BaseException:
            loader.kill()
            raise
        finally:
            _running.remove(loader)
    if rc != 0 or loader.done is None:
        raise IotapeError(f"{opts.output}: {loader.error_line()}")
    # The loader's "done" line is its footer JSON (iotape-rec.c, footer_json).
    summary = cast(RecordSummary, {**loader.done, "process": loader.usage})
    return RecordResult(opts.output, summary, command_exit)
