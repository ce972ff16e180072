"""`iotape replay fidelity`: the figures of a replay against its original, as tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from base.errors import IotapeError
from base.malloc import keep_freed_memory
from iotape.cliopts import AsJson
from replayer.run import fidelity as fid
from replayer.run.fidelity import FidelityReport

if TYPE_CHECKING:
    from rich.table import Table

    from schemas.documents.closed_loop import ClosedLoopReport, Side

# The rows of the main table, per stream.
FIGURES = (
    "requests",
    "iops_mape_pct",
    "mbps_mape_pct",
    "read_fraction",
    "size_hist_tv",
    "match_share",
    "issue_error",
    "drift_ms_per_s",
    "interarrival_error",
)


def fidelity(
    original: Annotated[Path, typer.Argument(help="The original trace.", show_default=False)],
    replayed: Annotated[
        Path,
        typer.Argument(
            help="The replay, recorded with `replay run --record`; or a multi-host JOBDIR "
            "(per host, from fio's logs); or the JOBDIR of a dependent or afap replay "
            "(speed-up, latency and dependencies per stream).",
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
    horizon: Annotated[
        float,
        typer.Option(
            "--horizon",
            help="Seconds a request may be replayed late (or early) and still pair with "
            "its original; beyond, it counts as unpaired. Memory grows with it: about "
            "80 bytes a request within it.",
        ),
    ] = 60.0,
    truth: Annotated[
        Path | None,
        typer.Option(
            "--truth",
            help="A dependent replay's JOBDIR only: a trace of the application itself "
            "run on the target; the replay's IOPS and p50 error against it.",
        ),
    ] = None,
    plan: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            help="The replay's plan (JOBDIR or its plan.json): requests pair through where "
            "it moved them (--remap, databases side by side). Default: the plan the replay "
            "names (`replay run --record`), where it still exists.",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Compare a replay with its original: per-second IOPS/MB/s error, mix, timing, locality,
    and the error per time window beside the wake-up floor measured during the run.

    Example: iotape replay fidelity run.iot replay.iot --anchor fio-plain.iot

    A dependent (closed-loop) replay: iotape replay fidelity hdd.iot jobs/ --truth ssd.iot
    """
    if not window > 0:
        raise IotapeError(f"--window {window}: must be a positive number of seconds")
    if not horizon > 0:
        raise IotapeError(f"--horizon {horizon}: must be a positive number of seconds")
    if replayed.is_dir():
        _jobdir(original, replayed, truth, as_json)
        return
    if truth is not None:
        raise IotapeError(_NOT_DEPENDENT.format(truth=truth, replayed=replayed))
    keep_freed_memory()  # (base/malloc.py: both traces' batches, ~4 % of its CPU)
    res = fid.report(original, replayed, anchor, window, int(horizon * 1e9), plan)
    if as_json:
        print(json.dumps(res, indent=2))
        return
    _print(res)


_NOT_DEPENDENT = (
    "--truth {truth}: only with the JOBDIR of a dependent or afap replay, and {replayed} is not one"
)


def _jobdir(original: Path, replayed: Path, truth: Path | None, as_json: bool) -> None:
    """A job directory: a dependent or afap replay's figures per stream, or a
    multi-host replay's per host. The runner's modules are imported here only: a
    recorded replay (the common case) does not load the plan builder (0.3 s)."""
    from iotape.commands.replay.run import start_line
    from replayer.hosts import fidelity as hostfid
    from replayer.run import closedloop
    from replayer.run import execute as runmod

    manifest = runmod.load_manifest(replayed)
    if truth is not None and not manifest.closed_loop:
        raise IotapeError(_NOT_DEPENDENT.format(truth=truth, replayed=replayed))
    if manifest.closed_loop:
        rep = closedloop.report(original, replayed, manifest, truth)
        if as_json:
            print(json.dumps(rep.data(), indent=2))
        else:
            _print_closed(rep)
        return
    # A multi-host job directory: figures per host from fio's own logs.
    starts = hostfid.jobdir_starts(replayed, manifest)
    if as_json:
        print(json.dumps({"hosts": starts}, indent=2))
        return
    for name, s in starts.items():
        print(start_line(name, s))


def _table(*cols: str) -> Table:
    """A rich table: rich is imported only to print one (~40 ms of the start of
    `replay fidelity --json`, which prints none)."""
    from rich.table import Table

    return Table(*cols)


def _show(t: Table) -> None:
    from rich.console import Console

    Console().print(t)


def _cell(v: object) -> str:
    if isinstance(v, dict):
        v = f"p50 {v.get('p50_ms')} p99 {v.get('p99_ms')} ms"
    return "-" if v is None else str(v)


def _print(res: dict[str, FidelityReport]) -> None:
    t = _table("stream", "figure", *res)
    for stream in ["overall", *res["iotape"]["streams"]]:
        figs = [
            r["overall"] if stream == "overall" else r["streams"].get(stream, {})
            for r in res.values()
        ]
        for key in FIGURES:
            t.add_row(stream, key, *(_cell(f.get(key)) for f in figs))
    _show(t)
    _print_windows(res)
    if "closed_loop" in res["iotape"]:
        print(f"not reported: {res['iotape']['closed_loop']}")
    for name, r in res.items():
        _print_pairing(name, r.get("pairing"))
    for name, r in res.items():
        _print_locality(name, r["locality"])


def _print_pairing(name: str, p: dict[str, Any] | None) -> None:
    """How many requests paired, through what, and why the others did not: one line."""
    if not p:
        return
    o, r = p["original_unpaired"], p["replay_unpaired"]
    print(
        f"pairing ({name}): {p['paired']} paired ({(p['paired_share'] or 0) * 100:.2f} % of "
        f"the original) through {p['through']}{', by target' if p.get('by_target') else ''}; "
        f"original unpaired: {o['replayed_nowhere']} "
        f"replayed nowhere, ~{o['scaled_down_expected']} scaled down, {o['not_found']} not "
        f"found in the replay; replay unpaired: ~{r['extra_copies_expected']} further copies, "
        f"{r['other']} other (syncs, stray)"
    )


def _print_windows(res: dict[str, FidelityReport]) -> None:
    """Per time window: the replay's error beside the wake-up floor of its run."""
    rows = res["iotape"].get("windows")
    if not rows:
        return
    plain = res.get("fio_plain")
    anchor = (plain.get("windows") if plain else None) or []
    cols = ["from s", "requests", "IOPS err %", "issue p50/p99/max ms", "floor p99"]
    t = _table(*cols, "p99/floor", *(["plain p99"] if anchor else []))
    for k, r in enumerate(rows):
        issue = "/".join(str(r.get(f"issue_{q}_ms", "-")) for q in ("p50", "p99", "max"))
        cells = [str(r["from_s"]), f"{r['requests'][0]}/{r['requests'][1]}"]
        cells += [str(r["iops_mape_pct"]), issue, str(r.get("floor_p99_ms", "-"))]
        cells.append(str(r.get("p99_over_floor", "-")))
        if anchor:
            cells.append(str(anchor[k].get("issue_p99_ms", "-")) if k < len(anchor) else "-")
        t.add_row(*cells)
    _show(t)
    for name, rep in res.items():
        g = rep.get("floor_goal") or {}
        if not g:
            print(f"floor ({name}): no wake-up floor recorded for this replay")
            continue
        print(
            f"floor ({name}): p99 {g['p99_over_floor']}x the wake-up floor's "
            f"{g['floor_p99_ms']} ms (goal <= {fid.timewindows.GOAL_OVERALL:g}x), worst window "
            f"{g['worst_window_over_floor']}x (goal <= {fid.timewindows.GOAL_WINDOW:g}x): "
            + ("meets the goal" if g["meets_goal"] else "MISSES the goal")
        )


def _print_locality(name: str, loc: dict[str, Any]) -> None:
    """The locality figures, original against replay, and the verdict in one line."""
    t = _table(f"locality ({name})", "original", "replay")
    for key in ("footprint_bytes", "hot1_share", "hot10_share", "sequential_share"):
        t.add_row(key, *(str(v) for v in loc[key]))
    for f, cap, o, r in zip(
        loc["lru_fractions"], loc["lru_caps_bytes"], *loc["lru_hit_ratio"], strict=True
    ):
        t.add_row(f"LRU hit @ {f * 100:g} % ({cap >> 10} KiB)", f"{o:.4f}", f"{r:.4f}")
    _show(t)
    verdict = "faithful" if loc["faithful"] else "UNFAITHFUL"
    why = "" if loc["faithful"] else ": " + "; ".join(loc["why_not"])
    print(
        f"locality ({name}): {verdict} (largest LRU gap {loc['max_gap_pp']} pp at "
        f"{loc['max_gap_at_fraction'] * 100:g} % of the footprint, footprint "
        f"{loc['footprint_error_pct']} % off){why}"
    )


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def _side_cells(s: Side) -> list[str]:
    return [str(s.requests), _ms(s.iops), _ms(s.latency.p50_ms), _ms(s.latency.p99_ms)]


def _print_closed(rep: ClosedLoopReport) -> None:
    """A closed-loop replay: per stream the original, the replay (its speed-up) and
    the truth where there is one (the replay's error against it)."""
    t = _table("stream", "run", "requests", "IOPS", "p50 ms", "p99 ms", "speed-up / error")
    print(f"{rep.timing} replay of {rep.original} ({rep.jobdir})")
    for name, f in [("overall", rep.overall), *rep.streams.items()]:
        t.add_row(name, "original", *_side_cells(f.original), "")
        t.add_row("", "replay", *_side_cells(f.replay), f"speed-up x{_ms(f.speed_up)}")
        if f.truth is not None and f.error is not None:
            e = f.error
            err = f"IOPS {_pct(e.iops_error_pct)}, p50 {_pct(e.p50_error_pct)}"
            t.add_row("", "truth", *_side_cells(f.truth), err)
    _show(t)
    early = rep.issued_before_predecessor
    held = "every dependency held" if early == 0 else "DEPENDENCIES BROKEN"
    print(
        f"dependencies: {'-' if early is None else early} requests issued before one they "
        f"waited for had completed ({held if early is not None else 'not counted'})"
    )
    if rep.group_commit_taken:
        print(
            f"group commit: {rep.group_commit_taken} log writes went in the write before "
            "them (their committers had committed; the IOPS count each such write once)"
        )
    if rep.timer_writes:
        made, took = rep.timer_writes
        print(
            f"timer writes: {made} log writes by the log writer's timer while its next write "
            f"waited (the target's recording); {took} logged writes they took whole"
        )
    if rep.clock_requests is not None:
        print(
            f"clock: {rep.clock_requests} requests of jobs on their own clock past their logs "
            "(the target's recording), until the others finished"
        )
    if rep.truth is not None:
        print(f"truth: {rep.truth} (the application itself on the target)")
    print(f"latency: original and truth from {LAT_TRACE}; replay from iotape-lanes' system calls")
    print(f"not reported: {rep.not_reported}")


LAT_TRACE = "the trace (block-layer entry to completion)"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f} %"
