"""`iotape record --backend bpftrace`: the same capture through a bpftrace script.

For hosts that cannot build the CO-RE program. It attaches to the block
tracepoints (block_io_start for the submitter, block_rq_issue, block_rq_complete),
keys in-flight requests by (device, sector), prints one line per completion and
writes the same trace format. It is slower (one formatted line per I/O) and
coarser: op filters run in user space, and bpftrace cannot count map-full drops,
so only its own "Lost N events" reports reach the footer.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import schemas
from base.errors import IotapeError
from devices import naming
from recorder.capture import procstat
from recorder.capture.model import Progress, RecordOptions, RecordResult, RecordSummary
from recorder.tracefile import TraceFooter, TraceHeader, TraceWriter, codec
from recorder.tracefile.streams import Extent, apply_streams

TRACEFS = Path("/sys/kernel/tracing")
MAP_KEYS = 262144
_KEY = "[args->dev, args->sector]"
_MAPS = ("q", "d", "p", "t", "c", "g")
_LOST = re.compile(r"Lost (\d+) events")
OP = schemas.enum("op")
FLAG = {k: 1 << v for k, v in schemas.bits("flag").items()}
_OP_CHAR = {"R": OP["read"], "W": OP["write"], "D": OP["discard"], "F": OP["flush"]}
_FLAG_CHAR = {"F": FLAG["fua"], "A": FLAG["readahead"], "S": FLAG["sync"], "M": FLAG["meta"]}


def parse_rwbs(rwbs: str) -> tuple[int, int]:
    """(op, flags) from the tracepoints' rwbs string (blk_fill_rwbs)."""
    flags = 0
    i = 0
    if len(rwbs) > 1 and rwbs[0] == "F" and rwbs[1] in "WRDFN":
        flags |= FLAG["preflush"]
        i = 1
    if rwbs[i : i + 2] == "DE":
        op, i = OP["other"], i + 2
    else:
        op, i = _OP_CHAR.get(rwbs[i : i + 1], OP["other"]), i + 1
    for ch in rwbs[i:]:
        flags |= _FLAG_CHAR.get(ch, 0)
    return op, flags


def script(devs: list[naming.Device], pids: list[int], cgroups: list[int], comms: list[str]) -> str:
    """The bpftrace program; filters are compiled into the start probe's predicate."""
    terms = [" || ".join(f"args->dev == {d.dev}" for d in devs)]
    if pids:
        terms.append(" || ".join(f"pid == {p}" for p in pids))
    if cgroups:
        terms.append(" || ".join(f"cgroup == {c}" for c in cgroups))
    if comms:
        terms.append(" || ".join(f'comm == "{c}"' for c in comms))
    pred = " && ".join(f"({t})" for t in terms)
    k = _KEY
    store = " ".join(
        f"@{m}{k} = {v};"
        for m, v in zip(_MAPS, ("nsecs", "0", "pid", "tid", "comm", "cgroup"), strict=True)
    )
    delete = " ".join(f"delete(@{m}{k});" for m in _MAPS)
    return f"""
BEGIN {{ printf("S %llu\\n", nsecs); }}
tracepoint:block:block_io_start /{pred}/ {{ {store} }}
tracepoint:block:block_rq_issue /@q{k}/ {{ @d{k} = nsecs; }}
tracepoint:block:block_rq_complete /@q{k}/ {{
  printf("E %llu %llu %llu %u %llu %u %s %d %u %u %llu %s\\n",
    @q{k}, @d{k}, nsecs, args->dev, args->sector, args->nr_sector, args->rwbs,
    args->error, @p{k}, @t{k}, @g{k}, @c{k});
  {delete}
}}
END {{ {" ".join(f"clear(@{m});" for m in _MAPS)} }}
"""


def _ensure_tracefs() -> None:
    # bpftrace reads tracepoint formats from tracefs; minimal hosts may not mount it.
    if not (TRACEFS / "events").exists():
        subprocess.run(
            ["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=False, capture_output=True
        )
    if not (TRACEFS / "events" / "block" / "block_io_start").exists():
        raise IotapeError(f"{TRACEFS}: no block_io_start tracepoint (kernel older than 6.5?)")


def _to_records(lines: list[str], start_ns: int, ops: set[int] | None) -> np.ndarray:
    """Parse a batch column by column: one split per line, the rest vectorised."""
    rows = [f for f in (line.split(" ", 12) for line in lines) if len(f) >= 12]
    recs = np.zeros(len(rows), dtype=schemas.record_dtype())
    if not rows:
        return recs
    cols = list(zip(*(f[:12] for f in rows), strict=True))
    num = {i: np.array(cols[i], dtype=np.int64) for i in (1, 2, 3, 4, 5, 6, 8, 9, 10)}
    for name, i in (("ts_queue_ns", 1), ("ts_issue_ns", 2), ("ts_complete_ns", 3)):
        t = num[i] - start_ns
        recs[name] = np.where(num[i] >= start_ns, t, 0)
    recs["dev"] = num[4]
    recs["offset"] = num[5] * 512
    recs["bytes"] = num[6] * 512
    op_flags = {w: parse_rwbs(w) for w in set(cols[7])}
    recs["op"] = [op_flags[w][0] for w in cols[7]]
    recs["flags"] = [op_flags[w][1] for w in cols[7]]
    # An fsync's empty PREFLUSH write completes as `WS`/`WFS` with no sectors (the
    # flush machinery clears PREFLUSH on the way): the application's flush, the
    # record the BPF backend writes for it. Its device flush never passes
    # block_io_start, so it is no record here, and its issue time stays unknown.
    empty = (recs["op"] == OP["write"]) & (recs["bytes"] == 0)
    recs["op"][empty] = OP["flush"]
    recs["flags"][empty] |= FLAG["preflush"]
    recs["error"] = num[8]
    recs["pid"], recs["tid"] = num[9], num[10]
    recs["cgroup_id"] = np.array(cols[11], dtype=np.uint64)
    recs["comm"] = [(f[12] if len(f) > 12 else "").encode()[:16] for f in rows]
    if ops is not None:
        recs = recs[np.isin(recs["op"], list(ops))]
    return recs


@dataclass
class _Bpftrace:
    """A running bpftrace and what its stderr and the stop watcher learned."""

    proc: subprocess.Popen[str]
    lost: int = 0
    errors: list[str] = field(default_factory=list)
    usage: dict = field(default_factory=dict)
    stop_reason: str = "signal"

    def read_stderr(self) -> None:
        assert self.proc.stderr
        for line in self.proc.stderr:
            m = _LOST.search(line)
            if m:
                self.lost += int(m.group(1))
            elif line.startswith("ERROR") and "RLIMIT_MEMLOCK" not in line:
                self.errors.append(line.strip())


def _launch(opts: RecordOptions, devs: list[naming.Device], cgroups: list[int]) -> _Bpftrace:
    if shutil.which("bpftrace") is None:
        raise IotapeError("bpftrace: not installed (apt-get install bpftrace)")
    _ensure_tracefs()
    env = {**os.environ, "BPFTRACE_MAP_KEYS_MAX": str(MAP_KEYS)}
    proc = subprocess.Popen(
        ["bpftrace", "-e", script(devs, opts.pids, cgroups, opts.comms)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    bt = _Bpftrace(proc)
    threading.Thread(target=bt.read_stderr, daemon=True).start()
    return bt


def _start_ns(bt: _Bpftrace) -> int:
    """The CLOCK_MONOTONIC time the BEGIN probe printed, once every probe is attached."""
    assert bt.proc.stdout
    for line in bt.proc.stdout:
        if line.startswith("S "):
            return int(line.split()[1])
    bt.proc.wait()
    raise IotapeError(f"bpftrace: {bt.errors[-1] if bt.errors else 'failed to attach'}")


def _stop_when_done(bt: _Bpftrace, child: subprocess.Popen | None, deadline: float | None) -> None:
    """Stop bpftrace when the command exits or the duration is over (a thread)."""
    while bt.proc.poll() is None:
        if child is not None and child.poll() is not None:
            bt.stop_reason = "command-exit"
            break
        if deadline and time.monotonic() >= deadline:
            bt.stop_reason = "duration"
            break
        time.sleep(0.05)
    time.sleep(0.2)  # let the last completions print
    bt.usage.update(procstat.cpu_and_rss(bt.proc.pid))
    if bt.proc.poll() is None:
        bt.proc.send_signal(signal.SIGINT)


def _copy_events(
    bt: _Bpftrace,
    writer: TraceWriter,
    mono_start: int,
    ops: set[int] | None,
    extents: list[Extent],
    progress: Progress | None,
) -> int:
    """Write bpftrace's completion lines as records until it exits; the event count."""
    assert bt.proc.stdout
    events = 0

    def flush(batch: list[str]) -> None:
        nonlocal events
        recs = _to_records(batch, mono_start, ops)
        apply_streams(recs, extents)
        writer.write(recs)
        events += len(recs)

    batch: list[str] = []
    last = time.monotonic()
    try:
        for line in bt.proc.stdout:
            if line.startswith("E "):
                batch.append(line.rstrip("\n"))
            if len(batch) >= 8192 or (batch and time.monotonic() - last > 1):
                flush(batch)
                batch, last = [], time.monotonic()
                if progress:
                    progress({"type": "progress", "events": events, "lost": bt.lost})
    except KeyboardInterrupt:
        bt.proc.send_signal(signal.SIGINT)
        for line in bt.proc.stdout:
            if line.startswith("E "):
                batch.append(line.rstrip("\n"))
    flush(batch)
    return events


def record(
    opts: RecordOptions,
    devs: list[naming.Device],
    meta: dict,
    extents: list[Extent],
    progress: Progress | None = None,
) -> RecordResult:
    bt = _launch(opts, devs, meta["filters"]["cgroups"])
    ops = {OP[o] for o in opts.ops} or None
    mono_start = _start_ns(bt)
    wall_start = time.time_ns() - (time.monotonic_ns() - mono_start)
    header: TraceHeader = {**meta, "mono_start_ns": mono_start, "wall_start_ns": wall_start}
    command_exit = None
    with TraceWriter(opts.output, header, compression=codec.resolve(opts.compress)) as writer:
        if progress:
            progress({"type": "ready", "mono_start_ns": mono_start})
        child = subprocess.Popen(opts.command) if opts.command else None
        deadline = time.monotonic() + opts.duration if opts.duration else None
        threading.Thread(target=_stop_when_done, args=(bt, child, deadline), daemon=True).start()
        events = _copy_events(bt, writer, mono_start, ops, extents, progress)
        bt.proc.wait()
        if child is not None:
            command_exit = child.wait()
        end_mono = time.monotonic_ns()
        footer: TraceFooter = {
            "lost": {"perf_buffer": bt.lost},
            "pre_start": 0,
            "end_mono_ns": end_mono,
            "end_wall_ns": time.time_ns(),
            "duration_ns": end_mono - mono_start,
            "stop_reason": bt.stop_reason,
            "cpu": {k: bt.usage[k] for k in ("user_s", "sys_s") if k in bt.usage},
            "repaired": False,
        }
        writer.close(footer)
    summary: RecordSummary = {**footer, "events": events, "process": bt.usage}
    return RecordResult(opts.output, summary, command_exit)
