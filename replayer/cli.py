"""`iotape replay plan|run|fidelity`: each command parses, calls one library function, prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from analyzer.tiering import options as opt
from iotape.cliopts import AsJson, Force
from iotape.errors import IotapeError
from replayer.plan import build as planmod
from replayer.run import execute as runmod
from replayer.run import fidelity as fid

app = typer.Typer(
    help="Replay a trace with fio: plan job files, run them, measure fidelity.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)


@app.command("plan")
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
    from_mailboxes: Annotated[
        float | None, typer.Option(help="The trace's mailboxes, if its metadata lacks them.")
    ] = None,
    from_databases: Annotated[
        int | None, typer.Option(help="The trace's databases, if its metadata lacks them.")
    ] = None,
    from_copies: Annotated[
        int | None, typer.Option(help="The trace's copies, if its metadata lacks them.")
    ] = None,
    time_scale: Annotated[
        float, typer.Option(help="Multiply every duration by F (0.5 = twice as fast).")
    ] = 1.0,
    remap: Annotated[
        str, typer.Option(help="Offsets into the target: fit, wrap or scale.")
    ] = "fit",
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target", help="NAME=PATH: dbK[:STREAM], a stream, a source device, or all."
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
    destroy_data_on: Annotated[
        list[str] | None,
        typer.Option(
            "--destroy-data-on",
            help="Allow writing to DEV despite a filesystem, mount or root disk.",
        ),
    ] = None,
    window: Annotated[float, typer.Option(help="Synthetic mode: window length in seconds.")] = 1.0,
    locality: Annotated[
        str,
        typer.Option(help="synthetic: zipf, zoned (zoned_abs) or auto (the closer LRU curve)."),
    ] = "auto",
    exact_limit: Annotated[
        int, typer.Option(help="auto: exact up to this many requests.")
    ] = 2_000_000,
    engine: Annotated[str, typer.Option(help="fio ioengine for the replay jobs.")] = "psync",
    segment: Annotated[
        int,
        typer.Option(help="Exact mode: requests per fio job (0: one job per stream and lane)."),
    ] = planmod.PlanOptions.segment,
    windows: Annotated[
        bool,
        typer.Option(
            "--windows",
            help="Exact mode: past 2,000 pieces, keep them short and run windows of fio "
            "processes on one clock (bounded fio memory) instead of one fio process.",
        ),
    ] = False,
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
    size = None
    if create_file is not None:
        from analyzer.tiering.params import TieringError, parse_size

        try:
            size = parse_size(create_file)
        except TieringError:
            raise IotapeError(
                f"--create-file {create_file}: not a size (a number with an optional K/M/G/T)"
            ) from None
    man = planmod.plan(
        planmod.PlanOptions(
            trace=trace,
            jobdir=output,
            mode=mode,
            mailboxes=mailboxes,
            databases=databases,
            copies=copies,
            from_mailboxes=from_mailboxes,
            from_databases=from_databases,
            from_copies=from_copies,
            time_scale=time_scale,
            remap=remap,
            targets=target or [],
            dry_run=dry_run,
            force=force,
            window_s=window,
            exact_limit=exact_limit,
            locality=locality,
            engine=engine,
            segment=segment,
            windows=windows,
            create_file=size,
            destroy=destroy_data_on or [],
            hosts=host or [],
        )
    )
    text = man.pop("jobfile_text")
    if man.get("mode_reason"):
        # On stderr, so --json and --dry-run output stay what they were.
        print(man["mode_reason"], file=sys.stderr)
    if as_json:
        print(json.dumps(man, indent=2))
    elif dry_run:
        print(text, end="")
    else:
        print(
            f"{output}: {man['mode']} plan, {len(man['jobs'])} jobs, "
            f"{len(man['targets'])} target(s), "
            f"about {man['duration_s']:.1f} s"
        )


@app.command("run")
def run(
    jobdir: Annotated[
        Path, typer.Argument(help="Job directory from `iotape replay plan`.", show_default=False)
    ],
    record: Annotated[
        Path | None,
        typer.Option("--record", help="Record the replay at the device into this trace."),
    ] = None,
    anchor_record: Annotated[
        Path | None,
        typer.Option("--anchor-record", help="Also run fio's plain replay, recorded here."),
    ] = None,
    destroy_data_on: Annotated[
        list[str] | None,
        typer.Option(
            "--destroy-data-on",
            help="Allow writing to DEV despite a filesystem, mount or root disk.",
        ),
    ] = None,
    force: Force = False,
    host_iotape: Annotated[
        str,
        typer.Option("--host-iotape", help="Multi-host plans: the iotape command on the hosts."),
    ] = "iotape",
    as_json: AsJson = False,
) -> None:
    """Run the plan's fio jobs (JSON results and latency logs in JOBDIR/results;
    a multi-host plan: every host at once through `fio --client`, results per host
    in JOBDIR/results/HOST).

    Example: iotape replay run jobs/ --record replay.iot --anchor-record fio-plain.iot
    """
    with err.status("replaying") as status:
        summary = runmod.run(
            jobdir,
            record,
            destroy_data_on or [],
            anchor_record,
            force,
            say=lambda s: status.update(s),
            host_iotape=host_iotape,
        )
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    t = Table("job", "runtime ms", "read iops", "write iops", "read p99 ms", "write p99 ms")
    for row in summary["jobs"]:
        rd, wr = row.get("read", {}), row.get("write", {})
        t.add_row(
            row["job"],
            str(row["runtime_ms"]),
            str(rd.get("iops", "-")),
            str(wr.get("iops", "-")),
            str(rd.get("p99_ms", "-")),
            str(wr.get("p99_ms", "-")),
        )
    Console().print(t)
    for name, h in (summary.get("hosts") or {}).items():
        print(_start_line(name, h.get("start") or {}))


def _start_line(name: str, s: dict) -> str:
    if "offset_ms" not in s:
        return f"host {name}: {s.get('logged', 0)} requests logged, none paired with the plan"
    return (
        f"host {name}: started {s['offset_ms']} ms after the first host; "
        f"{s['paired']}/{s['planned']} planned requests in its fio logs, "
        f"issue error p50 {s['issue_error_ms']['p50']} p99 {s['issue_error_ms']['p99']} ms "
        f"({s['source']})"
    )


@app.command("check-host")
def check_host(
    jobdir: Annotated[
        Path, typer.Argument(help="The job directory, as copied to this host.", show_default=False)
    ],
    host: Annotated[str, typer.Argument(help="This host's --host NAME.", show_default=False)],
    verdict: Annotated[
        Path | None,
        typer.Option("--verdict", help="Write the verdict file `replay run` reads back."),
    ] = None,
    destroy_data_on: Annotated[
        list[str] | None,
        typer.Option(
            "--destroy-data-on",
            help="Allow writing to DEV despite a filesystem, mount or root disk.",
        ),
    ] = None,
) -> None:
    """Check this host's part of a multi-host plan: its targets (as `replay run` checks
    local ones), their size, and its copy of the iologs. `replay run` runs it on every
    host through fio before any I/O.

    Example: iotape replay check-host /srv/jobs h1 --destroy-data-on /dev/sdb
    """
    from replayer.hosts import check as hostcheck

    code, message = hostcheck.check(jobdir.resolve(), host, destroy_data_on or [])
    if verdict is not None:
        hostcheck.write_verdict(verdict, code, message)
    if code:
        raise IotapeError(message)
    print(f"host {host}: ok")


@app.command("fidelity")
def fidelity(
    original: Annotated[Path, typer.Argument(help="The original trace.", show_default=False)],
    replayed: Annotated[
        Path,
        typer.Argument(
            help="The replay, recorded with `replay run --record`; or a multi-host JOBDIR "
            "(per host, from fio's logs).",
            show_default=False,
        ),
    ],
    anchor: Annotated[
        Path | None,
        typer.Option("--anchor", help="fio's plain replay, recorded (shown side by side)."),
    ] = None,
    window: Annotated[
        float,
        typer.Option("--window", help="Seconds per time window of the per-window table."),
    ] = 5.0,
    as_json: AsJson = False,
) -> None:
    """Compare a replay with its original: per-second IOPS/MB/s error, mix, timing, locality,
    and the error per time window beside the wake-up floor measured during the run.

    Example: iotape replay fidelity run.iot replay.iot --anchor fio-plain.iot
    """
    if not window > 0:
        raise IotapeError(f"--window {window}: must be a positive number of seconds")
    if replayed.is_dir():
        # A multi-host job directory: figures per host from fio's own logs.
        from replayer.hosts import fidelity as hostfid

        man = runmod.load_manifest(replayed)
        if not man.get("hosts"):
            raise IotapeError(f"{replayed}: a job directory of one host; give the recorded replay")
        res_h = hostfid.starts(replayed, man)
        if as_json:
            print(json.dumps({"hosts": res_h}, indent=2))
            return
        for name, s in res_h.items():
            print(_start_line(name, s))
        return
    res = {"iotape": fid.compare(original, replayed, window)}
    if anchor is not None:
        res["fio_plain"] = fid.compare(original, anchor, window)
    if as_json:
        print(json.dumps(res, indent=2))
        return
    cols = list(res)
    t = Table("stream", "figure", *cols)
    for stream in ["overall", *res["iotape"]["streams"]]:
        figs = [
            r["overall"] if stream == "overall" else r["streams"].get(stream, {})
            for r in res.values()
        ]
        for key in (
            "requests",
            "iops_mape_pct",
            "mbps_mape_pct",
            "read_fraction",
            "size_hist_tv",
            "match_share",
            "issue_error",
            "drift_ms_per_s",
            "interarrival_error",
        ):
            vals = []
            for f in figs:
                v = f.get(key)
                if isinstance(v, dict):
                    v = f"p50 {v.get('p50_ms')} p99 {v.get('p99_ms')} ms"
                vals.append("-" if v is None else str(v))
            t.add_row(stream, key, *vals)
    Console().print(t)
    _print_windows(res)
    for name, r in res.items():
        _print_locality(name, r["locality"])


def _print_windows(res: dict) -> None:
    """Per time window: the replay's error beside the wake-up floor of its run."""
    rows = res["iotape"].get("windows")
    if not rows:
        return
    anchor = res.get("fio_plain", {}).get("windows") or []
    cols = ["from s", "requests", "IOPS err %", "issue p50/p99/max ms", "floor p99"]
    t = Table(*cols, "p99/floor", *(["plain p99"] if anchor else []))
    for k, r in enumerate(rows):
        issue = "/".join(str(r.get(f"issue_{q}_ms", "-")) for q in ("p50", "p99", "max"))
        cells = [str(r["from_s"]), f"{r['requests'][0]}/{r['requests'][1]}"]
        cells += [str(r["iops_mape_pct"]), issue, str(r.get("floor_p99_ms", "-"))]
        cells.append(str(r.get("p99_over_floor", "-")))
        if anchor:
            cells.append(str(anchor[k].get("issue_p99_ms", "-")) if k < len(anchor) else "-")
        t.add_row(*cells)
    Console().print(t)
    for name, r in res.items():
        g = r.get("floor_goal") or {}
        if not g:
            print(f"floor ({name}): no wake-up floor recorded for this replay")
            continue
        print(
            f"floor ({name}): p99 {g['p99_over_floor']}x the wake-up floor's "
            f"{g['floor_p99_ms']} ms (goal <= {fid.timewindows.GOAL_OVERALL:g}x), worst window "
            f"{g['worst_window_over_floor']}x (goal <= {fid.timewindows.GOAL_WINDOW:g}x): "
            + ("meets the goal" if g["meets_goal"] else "MISSES the goal")
        )


def _print_locality(name: str, loc: dict) -> None:
    """The locality figures, original against replay, and the verdict in one line."""
    t = Table(f"locality ({name})", "original", "replay")
    for key in ("footprint_bytes", "hot1_share", "hot10_share", "sequential_share"):
        t.add_row(key, *(str(v) for v in loc[key]))
    for f, cap, o, r in zip(
        loc["lru_fractions"], loc["lru_caps_bytes"], *loc["lru_hit_ratio"], strict=True
    ):
        t.add_row(f"LRU hit @ {f * 100:g} % ({cap >> 10} KiB)", f"{o:.4f}", f"{r:.4f}")
    Console().print(t)
    verdict = "faithful" if loc["faithful"] else "UNFAITHFUL"
    why = "" if loc["faithful"] else ": " + "; ".join(loc["why_not"])
    print(
        f"locality ({name}): {verdict} (largest LRU gap {loc['max_gap_pp']} pp at "
        f"{loc['max_gap_at_fraction'] * 100:g} % of the footprint, footprint "
        f"{loc['footprint_error_pct']} % off){why}"
    )


@app.command("split")
def split(
    trace: Annotated[Path, typer.Argument(help="Trace file (.iot).", show_default=False)],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Split trace to write.", show_default=False)
    ],
    policy: opt.Policy = "lru",
    preset: opt.Preset = None,
    unit: opt.Unit = None,
    capacity: opt.Capacity = None,
    stats_interval: opt.StatsInterval = None,
    migrate_interval: opt.MigrateInterval = None,
    half_life: opt.HalfLife = None,
    budget: opt.Budget = None,
    headroom: opt.Headroom = None,
    max_io: opt.MaxIo = None,
    reads_only: opt.ReadsOnly = None,
    force: Force = False,
    as_json: AsJson = False,
) -> None:
    """Split a trace across devices `fast` and `slow` by a tiering or cache simulation's
    placement, to replay it as the hybrid array would have served it.

    Example: iotape replay split run.iot -o split.iot --policy lru --unit 4K --capacity 64M
    """
    from replayer.plan import split as splitmod

    p = opt.from_args(locals())
    res = splitmod.split(trace, output, p, force)
    if as_json:
        print(json.dumps(res, indent=2, default=str))
        return
    share = res["fast_share_of_reads_writes"]
    Console().print(
        f"{output}: {res['fast_requests']:,} requests on `fast`, {res['slow_requests']:,} on "
        f"`slow` ({100 * share:.1f} % of reads and writes fast); policy {p.policy}, unit "
        f"{p.unit:,} B, fast tier {res['params']['capacity']:,} B\n"
        f"next: iotape replay plan {output} -o JOBDIR "
        + " ".join(f"--target {d}=DEV" for d in res["devices"])
    )


@app.command("tiering-check")
def tiering_check(
    trace: Annotated[Path, typer.Argument(help="Trace file (.iot).", show_default=False)],
    fast: Annotated[
        str, typer.Option("--fast", help="The fast device (SSD tier).", show_default=False)
    ],
    slow: Annotated[
        str, typer.Option("--slow", help="The slow device (HDD tier).", show_default=False)
    ],
    output: Annotated[
        Path,
        typer.Option("-o", "--output", help="Directory for the replays.", show_default=False),
    ],
    policy: opt.Policy = "lru",
    preset: opt.Preset = None,
    unit: opt.Unit = None,
    capacity: opt.Capacity = None,
    stats_interval: opt.StatsInterval = None,
    migrate_interval: opt.MigrateInterval = None,
    half_life: opt.HalfLife = None,
    budget: opt.Budget = None,
    headroom: opt.Headroom = None,
    max_io: opt.MaxIo = None,
    reads_only: opt.ReadsOnly = None,
    destroy_data_on: Annotated[
        list[str] | None,
        typer.Option(
            "--destroy-data-on",
            help="Allow writing to DEV despite a filesystem, mount or root disk.",
        ),
    ] = None,
    force: Force = False,
    as_json: AsJson = False,
) -> None:
    """Check a tiering projection on two real devices: replay the trace on the slow one,
    on the fast one, and split by the simulated placement across both (recorded), then
    compare the measured latency with the projection.

    Example: iotape replay tiering-check run.iot --fast /dev/nvme1n1 --slow /dev/sdc -o chk/
    --capacity 64G
    """
    from replayer.run import tiering_check as tc

    p = opt.from_args(locals())
    with err.status("tiering check") as status:
        res = tc.check(
            trace, fast, slow, p, output, destroy_data_on, force, say=lambda s: status.update(s)
        )
    if as_json:
        print(json.dumps(res, indent=2, default=str))
        return
    lat = res["latency"]
    t = Table("device latency", "p50 µs", "p99 µs", "mean µs")
    for key, label in (
        ("slow_only", f"slow ({slow})"),
        ("projected", "projected"),
        ("measured", "measured (split replay)"),
        ("fast_only", f"fast ({fast})"),
    ):
        m = lat[key]
        t.add_row(label, *(f"{m[k] / 1e3:.1f}" for k in ("p50_ns", "p99_ns", "mean_ns")))
    e = lat["error"]
    t.add_row("projection error", *(f"{100 * e[k]:+.1f} %" for k in ("p50", "p99", "mean")))
    Console().print(t)
    print(f"fast share of requests: {100 * res['split']['fast_share_of_reads_writes']:.1f} %")
    print(f"details: {output / 'result.json'}")
