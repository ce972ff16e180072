"""`iotape record`: parse options, call recorder.record.record, print the outcome."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from iotape.cliopts import AsJson, Force
from iotape.cliutil import key_values
from recorder.capture import flight
from recorder.capture.flight import Flight
from recorder.capture.record import RecordOptions, RecordResult
from recorder.capture.record import record as run_record
from recorder.capture.rotation import Rotation

err = Console(stderr=True)


class Compress(StrEnum):
    auto = "auto"
    zstd = "zstd"
    lz4 = "lz4"
    none = "none"


class _LiveStatus:
    """One status line, rewritten in place: events/s, MB written, lost."""

    def __init__(self) -> None:
        self.status = err.status("attaching probes…") if err.is_terminal else None
        if self.status:
            self.status.start()

    def __call__(self, msg: dict) -> None:
        kind = msg.get("type")
        if kind == "ready":
            text = "recording"
        elif kind == "progress":
            lost = msg.get("lost", 0)
            text = (
                f"{msg.get('events', 0):,} events  {msg.get('events_per_s', 0):,.0f}/s  "
                f"{msg.get('bytes_written', 0) / 1e6:,.1f} MB written  "
                + (f"[bold red]{lost:,} lost[/]" if lost else "0 lost")
                + f"  recorder {msg.get('cpu_s', 0):.1f} s CPU, "
                f"{msg.get('rss_kb', 0) / 1024:.0f} MiB"
            )
        elif kind in ("snapshot", "snapshot-done"):
            err.print(_snapshot_line(msg), highlight=False, markup=False, soft_wrap=True)
            return
        else:
            return
        if self.status:
            self.status.update(text)
        elif kind == "progress":
            err.print(text, highlight=False)

    def close(self) -> None:
        if self.status:
            self.status.stop()


Many = list[str] | None


def _snapshot_line(msg: dict) -> str:
    if msg["type"] == "snapshot-done":
        return f"snapshot complete: {msg['dir']} ({msg['files']} files)"
    return (
        f"snapshot ({msg['reason']}): {msg['dir']}, the window before saved "
        f"{msg['latency_ns'] / 1e6:.0f} ms after the request; the window after follows"
    )


def _control(output: Path, what: str, json_out: bool) -> None:
    """`record --snapshot` / `--status`: ask the recorder writing OUTPUT."""
    answer = flight.request(output, what)
    if json_out:
        print(json.dumps(answer))
    elif what == "snapshot":
        print(answer["snapshot"])
        err.print(
            ("a snapshot was already being taken: " if answer["already"] else "")
            + f"complete in {answer['complete_in_ns'] / 1e9:.0f} s (snapshot.json says when)",
            highlight=False,
        )
    else:
        print(
            f"{answer['file']}: {answer['events']:,} events, {answer['lost']:,} lost, "
            f"{answer['files_on_disk']} files "
            f"({answer['bytes_on_disk'] / 2**20:,.1f} MiB) on disk, "
            f"{answer['snapshots']} snapshots; recorder CPU {answer['cpu_s']:.2f} s, "
            f"RSS {answer['rss_kb'] / 1024:.1f} MiB (peak {answer['peak_rss_kb'] / 1024:.1f})"
        )


def _outcome(result: RecordResult) -> str:
    """The one-line account of a capture: events, losses, what was left out, its cost."""
    s = result.summary
    lost = s.get("lost", {})
    lost_total = sum(lost.values()) if isinstance(lost, dict) else int(lost)
    cpu = s.get("cpu", {})
    proc = s.get("process", {})
    left = s.get("in_flight_at_stop", 0)
    return (
        f"{result.output}: {s.get('events', 0):,} events in {s.get('duration_ns', 0) / 1e9:.1f} s, "
        f"{lost_total:,} lost"
        + (f" ({', '.join(f'{k} {v}' for k, v in lost.items() if v)})" if lost_total else "")
        + f", {s.get('pre_start', 0):,} already in flight at start (left out)"
        + (f", {left:,} still in flight at stop (not recorded)" if left else "")
        + (
            f", {s['completion_unseen']:,} whose completion the kernel never reported "
            "(kept, flagged complete_unseen)"
            if s.get("completion_unseen")
            else ""
        )
        + f"; recorder CPU {cpu.get('user_s', 0) + cpu.get('sys_s', 0):.2f} s"
        + (f", BPF {cpu['bpf_ns'] / 1e9:.2f} s" if "bpf_ns" in cpu else "")
        + (f", peak RSS {proc['max_rss_kb'] / 1024:.1f} MiB" if "max_rss_kb" in proc else "")
        + _files(s)
    )


def _files(s: Mapping[str, Any]) -> str:
    """What a rotated or bounded capture adds: its files, the ring, the --max-bytes stop."""
    out = ""
    files = s.get("files")
    if isinstance(files, dict):
        n = files["last"] - files["first"] + 1
        out += f"; {files['last'] + 1} files, {n} on disk (read them as one trace by this name)" + (
            f", {files['deleted']} oldest deleted (the ring)" if files.get("deleted") else ""
        )
    if s.get("stop_reason") == "max-bytes":
        out += "; stopped at --max-bytes (a command still running was ended)"
    return out


def record(
    command: Annotated[
        Many, typer.Argument(help="Command to run while recording (after --).")
    ] = None,
    device: Annotated[
        Many, typer.Option("--device", "-d", help="Block device (repeatable).")
    ] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="Trace file to write.")] = Path(
        "trace.iot"
    ),
    duration: Annotated[
        float | None, typer.Option(help="Stop after SEC seconds (also ends the command).")
    ] = None,
    pid: Annotated[
        list[int] | None, typer.Option(help="Only I/O submitted by this process.")
    ] = None,
    cgroup: Annotated[Many, typer.Option(help="Only I/O from this cgroup (v2 path or id).")] = None,
    comm: Annotated[Many, typer.Option(help="Only I/O from threads of this name.")] = None,
    op: Annotated[Many, typer.Option(help="Only this op: read, write, flush, ….")] = None,
    label: Annotated[
        Many, typer.Option(help="NAME=GLOB: label I/O to these files' extents (db, log, a stream).")
    ] = None,
    meta: Annotated[Many, typer.Option(help="KEY=VALUE stored in the trace header.")] = None,
    backend: Annotated[str, typer.Option(help="bpf (libbpf CO-RE), bpftrace or ftrace.")] = "bpf",
    force: Force = False,
    bpf_stats: Annotated[
        bool, typer.Option(help="Measure the BPF programs' own run time (costs ~5 %).")
    ] = False,
    chunk_records: Annotated[int, typer.Option(help="Records per file chunk.")] = 8192,
    ring_mb: Annotated[
        int,
        typer.Option(
            help="BPF rings, MiB: the per-CPU completion rings in all (--wakes: the ring buffer)."
        ),
    ] = 32,
    wakes: Annotated[
        bool,
        typer.Option(
            help="Also record which I/O thread woke which (exact cross-thread waits for "
            "`replay plan --timing dependent`) and, per request, its thread's run-queue "
            "wait and CPU time (a format version 4 file)."
        ),
    ] = False,
    compress: Annotated[
        Compress,
        typer.Option(
            help="Chunk compression: auto (zstd at low rates, lz4 at high ones), zstd, "
            "lz4 or none (none: a format "
            "version 1 file, which iotape before compression reads too)."
        ),
    ] = Compress.auto,
    rotate: Annotated[
        str | None,
        typer.Option(help="SIZE|DURATION (1GiB, 10m): a new file OUT-000001.iot, … when reached."),
    ] = None,
    keep: Annotated[
        int | None, typer.Option(help="With --rotate: keep the N newest files, delete older.")
    ] = None,
    keep_bytes: Annotated[
        str | None, typer.Option(help="With --rotate: delete the oldest files beyond SIZE.")
    ] = None,
    max_bytes: Annotated[
        str | None, typer.Option(help="Stop the capture when its files reach SIZE.")
    ] = None,
    ring: Annotated[
        str | None,
        typer.Option(help="DURATION (30m): a flight recorder, the last DURATION kept on disk."),
    ] = None,
    snapshot_after: Annotated[
        str | None,
        typer.Option(help="With --ring: a snapshot holds this long after its request (2m)."),
    ] = None,
    trigger: Annotated[
        Many, typer.Option(help="With --ring: snapshot when EXPR holds ('p99 > 50ms over 10s').")
    ] = None,
    snapshot: Annotated[
        bool, typer.Option("--snapshot", help="Ask the ring capture writing -o OUT for a snapshot.")
    ] = False,
    status_of: Annotated[
        bool, typer.Option("--status", help="Show the status of the capture writing -o OUT.")
    ] = False,
    json_out: AsJson = False,
) -> None:
    """Record every block request on the given devices into a trace file.

    Example: iotape record -d /dev/nvme0n1 -o run.iot -- fio job.fio
    """
    if snapshot or status_of:
        _control(output, "snapshot" if snapshot else "status", json_out)
        return
    rotation = Rotation.parse(rotate, keep, keep_bytes, max_bytes, ring)
    opts = RecordOptions(
        devices=device or [],
        output=output,
        command=list(command or []),
        duration=duration,
        pids=pid or [],
        cgroups=cgroup or [],
        comms=comm or [],
        ops=op or [],
        labels=label or [],
        metadata=key_values("--meta", meta or []),
        force=force,
        backend=backend,
        chunk_records=chunk_records,
        ring_mb=ring_mb,
        bpf_stats=bpf_stats,
        wakes=wakes,
        compress=compress.value,
        rotation=rotation,
        flight=Flight.parse(rotation, snapshot_after, trigger or []),
        argv=list(sys.argv),
    )
    status = _LiveStatus()
    try:
        result = run_record(opts, progress=status)
    finally:
        status.close()
    if json_out:
        print(json.dumps(result.summary))
    # One line whatever the width (rich wraps at 80 columns off a terminal, which
    # split the line that scripts and tests grep), and a path's brackets are not markup.
    err.print(_outcome(result), highlight=False, markup=False, soft_wrap=True)
    # At --max-bytes the capture ended the command: that stop is the one asked for.
    if result.command_exit and result.summary.get("stop_reason") != "max-bytes":
        raise typer.Exit(result.command_exit)
