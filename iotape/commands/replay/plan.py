"""`iotape replay plan`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from base.errors import IotapeError
from iotape.cliopts import AsJson, Force
from iotape.commands.replay.options import DestroyDataOn
from replayer.plan import build as planmod
from replayer.plan import fromtarget, thinkcal
from replayer.plan.model import PlanResult
from replayer.plan.options import PlanOptions
from replayer.run import predict


def plan(
    trace: Annotated[Path, typer.Argument(help="Trace file (.iot).", show_default=False)],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Job directory to write.")
    ] = None,
    mode: Annotated[
        str, typer.Option(help="exact (iologs), synthetic (fitted knobs) or auto.")
    ] = "auto",
    mailboxes: Annotated[float | None, typer.Option(help="Scale to N mailboxes.")] = None,
    databases: Annotated[int | None, typer.Option(help="Scale to K databases (K targets).")] = None,
    copies: Annotated[int | None, typer.Option(help="Scale to C database copies.")] = None,
    storage_groups: Annotated[
        int | None,
        typer.Option(
            help="Scale to G storage groups, each one log for its databases (default: "
            "the trace's databases per group kept).",
        ),
    ] = None,
    from_mailboxes: Annotated[
        float | None, typer.Option(help="The trace's mailboxes, if its metadata lacks them.")
    ] = None,
    from_databases: Annotated[
        int | None, typer.Option(help="The trace's databases, if its metadata lacks them.")
    ] = None,
    from_copies: Annotated[
        int | None, typer.Option(help="The trace's copies, if its metadata lacks them.")
    ] = None,
    from_storage_groups: Annotated[
        int | None, typer.Option(help="The trace's storage groups, if its metadata lacks them.")
    ] = None,
    time_scale: Annotated[
        float, typer.Option(help="Multiply every duration by F (0.5 = twice as fast).")
    ] = 1.0,
    remap: Annotated[
        str,
        typer.Option(
            help="Offsets into the target: fit, wrap, scale, or compact (the touched 1 MiB "
            "extents packed in offset order: needs a target of at least the footprint)."
        ),
    ] = "fit",
    remap_unit: Annotated[
        str,
        typer.Option(
            "--remap-unit",
            help="--remap compact: the granule the touched extents are kept in (a power "
            "of two of at least 4K; smaller packs tighter, larger keeps more of each region).",
        ),
    ] = "1M",
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target",
            help="NAME=PATH: dbK[:STREAM], sgJ[:STREAM] (storage group J's log), a stream, "
            "a source device, or all.",
        ),
    ] = None,
    create_file: Annotated[
        str | None,
        typer.Option(
            "--create-file",
            metavar="SIZE",
            help="Create each target file that does not exist, SIZE bytes (64M, 2G); "
            "never under /dev, /proc or /sys.",
        ),
    ] = None,
    destroy_data_on: DestroyDataOn = None,
    window: Annotated[float, typer.Option(help="Synthetic mode: window length in seconds.")] = 1.0,
    locality: Annotated[
        str,
        typer.Option(help="synthetic: zipf, zoned (zoned_abs) or auto (the closer LRU curve)."),
    ] = "auto",
    exact_limit: Annotated[
        int,
        typer.Option(help="auto: exact up to this many requests (past it too for a lanes plan)."),
    ] = 2_000_000,
    engine: Annotated[
        str,
        typer.Option(help="fio ioengine for the replay jobs (an async one: 4 in flight a lane)."),
    ] = "psync",
    segment: Annotated[
        int,
        typer.Option(help="Exact mode: requests per fio job (0: one job per stream and lane)."),
    ] = PlanOptions.segment,
    windows: Annotated[
        bool,
        typer.Option(
            "--windows",
            help="Exact mode: past 2,000 pieces, keep them short and run windows of fio "
            "processes on one clock (bounded fio memory) instead of one fio process.",
        ),
    ] = False,
    layout: Annotated[
        str,
        typer.Option(
            help="Exact mode: pieces (short jobs started at absolute times), lanes (a job "
            "per lane whose every request waits for an absolute millisecond; bounded jobs "
            "and fio memory) or auto (lanes where pieces would pass 2,000 jobs).",
        ),
    ] = "auto",
    lanes: Annotated[
        str,
        typer.Option(
            help="Lanes: auto (a submitter that kept several requests in flight, past "
            "2,000 IOPS, to one async lane: io_uring at its depth; the rest to "
            "synchronous lanes), sync or async.",
        ),
    ] = "auto",
    timing: Annotated[
        str,
        typer.Option(
            help="recorded (each request at its time: open loop), dependent (when its "
            "predecessors completed, plus think time: closed loop) or afap (no think time).",
        ),
    ] = "recorded",
    think_scale: Annotated[
        float, typer.Option(help="dependent: multiply every think time by F.")
    ] = 1.0,
    long_thinks: Annotated[
        str,
        typer.Option(
            help="dependent: demand (a long think that ended on a timer or poll, not a "
            "wake, goes when its demand is there plus the thread's short think) or "
            "recorded (as the trace has it).",
        ),
    ] = "demand",
    run_queue: Annotated[
        str,
        typer.Option(
            help="dependent: net (each think time less the thread's run-queue wait "
            "inside it, from the sched records of a trace recorded with --wakes) or "
            "recorded (as the trace has it).",
        ),
    ] = "net",
    group_commit: Annotated[
        str,
        typer.Option(
            help="dependent: join (a log writer's write may take the writes after it "
            "whose committers have already committed in the replay: fewer, larger log "
            "writes on a faster device, as its group commit would make) or recorded "
            "(each write as the trace has it).",
        ),
    ] = "join",
    think_calibrate: Annotated[
        Path | None,
        typer.Option(
            help="dependent: TRACE, a short recording (with --wakes) of the same "
            "application on the target: each synchronous thread's short thinks (under "
            "200 us: its CPU) are replayed at that trace's CPU per cycle for its role "
            "(stream and thread name); long thinks stay as recorded.",
        ),
    ] = None,
    timer_writes: Annotated[
        str,
        typer.Option(
            help="dependent, with --think-calibrate: target (a log writer that wrote by "
            "its own timer in that recording, and not in the trace, writes its next full "
            "segment each time the recording's rest has passed while its next write "
            "waits) or recorded (only the trace's writes).",
        ),
    ] = "target",
    clock_jobs: Annotated[
        str,
        typer.Option(
            help="dependent, with --think-calibrate: target (a thread on its own clock in "
            "that recording, reading or writing on sequentially, goes on at its period "
            "after its last request until the others finish) or recorded (only the "
            "trace's requests).",
        ),
    ] = "target",
    cycle_cpu: Annotated[
        str,
        typer.Option(
            help="dependent, with --think-calibrate: target (each synchronous thread "
            "spends its role's CPU a cycle in that recording before each request, and "
            "its thinks keep only their sleep; both traces need --wakes) or recorded "
            "(thinks replayed as times).",
        ),
    ] = "recorded",
    host: Annotated[
        list[str] | None,
        typer.Option(
            "--host",
            help="NAME=ADDRESS[:PORT]: a host running `fio --server`; targets then read "
            "NAME:PATH (docs/replay-hosts.md).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan; write nothing.")
    ] = False,
    force: Force = False,
    as_json: AsJson = False,
) -> None:
    """Turn a trace into fio job files (one iolog per stream and target, or fitted jobs).

    A target must exist: a block device, or a regular file (a missing file is made
    only with --create-file). Devices are checked for data and use as `replay run` does.

    Example: iotape replay plan run.iot -o jobs/ --databases 4 --target all=/dev/sdb
    """
    opts = _options(locals())
    _print(planmod.plan(opts, predict.predict), output, as_json, dry_run)


def _size(value: str | None, option: str = "--create-file") -> int | None:
    if value is None:
        return None
    from analyzer.tiering.params import TieringError, parse_size

    try:
        return parse_size(value)
    except TieringError:
        raise IotapeError(
            f"{option} {value}: not a size (a number with an optional K/M/G/T)"
        ) from None


# The command's parameters that PlanOptions names otherwise.
_RENAMED = {
    "output": "jobdir",
    "target": "targets",
    "window": "window_s",
    "destroy_data_on": "destroy",
    "host": "hosts",
}


def _options(args: dict[str, Any]) -> PlanOptions:
    kw = {_RENAMED.get(k, k): v for k, v in args.items() if k != "as_json"}
    kw["create_file"] = _size(kw["create_file"])
    kw["remap_unit"] = _size(kw["remap_unit"], "--remap-unit")
    if kw["layout"] not in ("auto", "pieces", "lanes"):
        raise IotapeError(f"--layout {kw['layout']}: not auto, pieces or lanes")
    kw["lane_io"] = kw.pop("lanes")
    if kw["lane_io"] not in ("auto", "sync", "async"):
        raise IotapeError(f"--lanes {kw['lane_io']}: not auto, sync or async")
    for k in ("targets", "destroy", "hosts"):
        kw[k] = kw[k] or []
    return PlanOptions(**kw)


def _print(man: PlanResult, output: Path | None, as_json: bool, dry_run: bool) -> None:
    if man["mode_reason"]:
        # On stderr, so --json and --dry-run output stay what they were.
        print(man["mode_reason"], file=sys.stderr)
    if as_json:
        print(json.dumps({k: v for k, v in man.items() if k != "jobfile_text"}, indent=2))
    elif dry_run:
        print(man["jobfile_text"], end="")
    else:
        print(
            f"{output}: {man['mode']} plan, {len(man['jobs'])} jobs, "
            f"{len(man['targets'])} target(s), "
            f"about {man['duration_s']:.1f} s"
            + (f", timing {man['timing']} (runs with iotape-lanes)" if "timing" in man else "")
        )
        _print_prediction(man.get("prediction"))
        for d in man.get("dependencies") or []:
            t = d["think_us"]
            print(
                f"  {d['stream']}: {d['with_predecessor']}/{d['requests']} requests after a "
                f"predecessor ({d['submitters']} submitter(s) by {d['submitter']}), depth "
                f"{d['depth']}, think us p10/p50/p90/p99 "
                + "/".join(str(t.get(k, "-")) for k in ("p10", "p50", "p90", "p99"))
                + f", {d['flush_orderings']} flush/FUA orderings, "
                f"{d['cross_candidates']} cross-thread candidates (by chance "
                f"{d.get('cross_by_chance')}, in mirror {d.get('cross_mirror')}) and "
                f"{d.get('other_stream_predecessors', 0)} other-stream predecessors (not kept); "
                f"{d.get('cross_edges', 0)} wait for another thread's request "
                f"({d.get('wake_edges', 0)} of them from recorded wakes, "
                f"{d.get('long_think_edges', 0)} after a long think)"
                + _demand_line(d)
                + _run_queue_line(d)
                + _group_commit_line(d)
                + thinkcal.note(d)
                + fromtarget.note(d)
            )


def _demand_line(d: dict[str, Any]) -> str:
    """What `--long-thinks demand` replaced in a stream (replayer/plan/demand.py)."""
    what = (
        f"{d.get('demand_thinks', 0)} long thinks on demand ({d.get('demand_woken', 0)} "
        "after a demand wake)"
    )
    return _replaced(d, ("long_thinks", "demand"), "wakes_recorded",
                     "long thinks as recorded (no wake records to tell a timer from a wake)",
                     "demand_think_s", what, "--long-thinks recorded")  # fmt: skip


def _run_queue_line(d: dict[str, Any]) -> str:
    """What `--run-queue net` took off a stream's thinks (replayer/plan/schedsplit.py)."""
    what = f"{d.get('run_queue_thinks', 0)} thinks less their run-queue wait"
    return _replaced(d, ("run_queue", "net"), "sched_recorded",
                     "thinks as recorded (no sched records to tell the run-queue wait)",
                     "run_queue_think_s", what, "--run-queue recorded")  # fmt: skip


def _group_commit_line(d: dict[str, Any]) -> str:
    """How many of a stream's writes may join the write before them (groupcommit.py)."""
    if d.get("group_commit") != "join" or not d.get("group_commit_writes"):
        return ""
    return (
        f"; {d['group_commit_writes']} writes may join the write before them (group commit; "
        "--group-commit recorded keeps each)"
    )


def _replaced(
    d: dict[str, Any], mode: tuple[str, str], recorded: str, without: str, seconds: str,
    what: str, off: str,
) -> str:  # fmt: skip
    """A stream's thinks that a plan's `mode` replaced: `what`, their think time
    before and after (`seconds`); `without` where the trace lacked the records
    (`recorded`) it needs."""
    if d.get(mode[0]) != mode[1]:
        return ""
    if not d.get(recorded):
        return f"; {without}"
    was, now = d.get(seconds) or (0.0, 0.0)
    return f"; {what}: {was:.3f} s of think time -> {now:.3f} s ({off} keeps them)"


def _print_prediction(pr: dict[str, Any] | None) -> None:
    """What the remap keeps: the remapped trace's locality beside the original's."""
    if not pr:
        return
    fp, seq = pr["footprint_bytes"], pr["sequential_share"]
    curve = ", ".join(
        f"{f * 100:g} % {o * 100:.1f}->{r * 100:.1f}"
        for f, o, r in zip(pr["lru_fractions"], *pr["lru_hit_ratio"], strict=True)
        if f >= 0.01
    )
    why = pr["why_not"]
    verdict = (
        "yes"
        if pr["faithful"]
        else f"NO: {why[0]}" + (f" (and {len(why) - 1} more)" * (len(why) > 1))
    )
    mib = lambda n: f"{n / 2**20:.1f} MiB" if n < 10 << 30 else f"{n / 2**30:.2f} GiB"  # noqa: E731
    print(
        f"  --remap {pr['remap']} keeps the locality? {verdict}\n"
        f"    footprint {mib(fp[0])} -> {mib(fp[1])}, sequential share "
        f"{seq[0]} -> {seq[1]}, LRU hit ratio at a share of the footprint: {curve} "
        f"(largest gap {pr['max_gap_pp']} pp)"
    )
