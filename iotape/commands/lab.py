"""`iotape lab`: experiments on emulated devices."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from analyzer.lab import blockdev, report, rounds
from analyzer.lab.array import ArrayModel
from analyzer.lab.devices import LabError
from analyzer.lab.hdd import HddModel
from analyzer.lab.hybrid import LabOptions, run_lab
from analyzer.lab.sizing import size
from analyzer.store.opener import opened
from base.atomic import replacing
from base.errors import IotapeError
from iotape.cliopts import AsJson, Db

app = typer.Typer(
    help="Experiments on emulated devices, end to end.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _timed(start: float) -> Callable[[str], None]:
    """Progress lines with the seconds since `start` (a lab runs for minutes: where
    its time goes, phase by phase)."""
    return lambda msg: _say(f"[{time.monotonic() - start:4.0f} s] {msg}")


@app.command("hybrid")
def hybrid(
    out: Annotated[Path, typer.Option("--out", help="Directory for the traces and reports.")],
    db_mb: Annotated[int, typer.Option("--db-mb", help="Database footprint (MiB).")] = 1024,
    mailboxes: Annotated[int, typer.Option("--mailboxes", help="Mailboxes in it.")] = 256,
    databases: Annotated[int, typer.Option("--databases", help="Databases.")] = 1,
    threads: Annotated[int, typer.Option("--threads", help="Session threads per database.")] = 2,
    seconds: Annotated[float, typer.Option("--seconds", help="Load per configuration.")] = 180,
    device: Annotated[
        str,
        typer.Option(
            "--device",
            help="The slow device: hdd (a 10K rpm disk's service time per request, over "
            "FUSE), array (a RAID 6 set of such disks behind a write-back cache; "
            "analyzer/lab/array_model.toml) or throttle (blk-throttle IOPS limits: the "
            "rate, not the latency).",
        ),
    ] = "hdd",
    spindles: Annotated[
        int, typer.Option("--spindles", help="hdd: disks serving; array: disks in the set.")
    ] = 4,
    controllers: Annotated[
        int,
        typer.Option(
            "--controllers",
            help="--tier-in array: 2 for two controllers (a device each: its own cache, "
            "set and SSD), the databases and logs split equally as the published run's.",
        ),
    ] = 1,
    read_iops: Annotated[int, typer.Option("--read-iops", help="throttle: reads/s.")] = 143,
    write_iops: Annotated[int, typer.Option("--write-iops", help="throttle: writes/s.")] = 143,
    mb_per_s: Annotated[int, typer.Option("--mb-per-s", help="Slow device MB/s.")] = 150,
    unit_kb: Annotated[int, typer.Option("--unit-kb", help="Page moved (KiB).")] = 4096,
    stats_s: Annotated[float, typer.Option("--stats-s", help="Tier statistics interval.")] = 5,
    migrate_s: Annotated[float, typer.Option("--migrate-s", help="Tier migration interval.")] = 5,
    tier_in: Annotated[
        str,
        typer.Option(
            "--tier-in",
            help="engine (the reference engine tiers and caches its own files) or array "
            "(--device array: the array's own tier and read cache; each predicted also by "
            "a dependent replay of the baseline's trace on it). Default: array with "
            "--device array, else engine.",
        ),
    ] = "auto",
    warm_s: Annotated[
        float,
        typer.Option(
            "--warm-s",
            help="--tier-in array: run the load this long first, unmeasured, so that the "
            "tier or cache is warm (the replay's prediction: one replay first; the model's "
            "prediction stays cold).",
        ),
    ] = 0,
    rounds_n: Annotated[
        int,
        typer.Option(
            "--rounds",
            help="Run the three configurations this many times, a round after another "
            "(each with its own baseline and prediction, in OUT/round-K); the report gives "
            "each figure's, gain's and prediction error's median and range.",
        ),
    ] = 1,
    verify: Annotated[
        bool, typer.Option("--verify", help="Checksum every 4 KiB written; read back at the end.")
    ] = False,
    name: Annotated[
        str, typer.Option("--name", help="Prefix of the stored runs' names.")
    ] = "hybrid",
    as_json: AsJson = False,
    db: Db = None,
) -> None:
    """The hybrid-array experiment: exchange2013 in throughput mode at fixed threads on a
    throttled HDD-like device (baseline), with an SSD performance tier and with an SSD
    read cache of 0.8 of the databases (the published proportions); each run recorded
    and ingested, the tier and cache predicted from the baseline's trace before they
    run; a side-by-side report (OUT/report.txt, OUT/report.json). Needs root.

    Example: iotape lab hybrid --out /var/tmp/hybrid --db-mb 256 --seconds 60
    """
    if device not in ("hdd", "throttle", "array"):
        raise IotapeError(f"--device {device}: hdd, array or throttle")
    if not (4 if device == "array" else 1) <= spindles <= 64:
        raise IotapeError(f"--spindles {spindles}: between {4 if device == 'array' else 1} and 64")
    if tier_in == "auto":
        tier_in = "array" if device == "array" else "engine"
    if tier_in not in ("engine", "array") or (tier_in == "array" and device != "array"):
        raise IotapeError(f"--tier-in {tier_in}: engine, or array with --device array")
    if controllers not in (1, 2) or (controllers == 2 and tier_in != "array"):
        raise IotapeError(f"--controllers {controllers}: 1, or 2 with --tier-in array")
    if warm_s < 0 or (warm_s and tier_in != "array"):
        raise IotapeError(f"--warm-s {warm_s}: not negative, and only with --tier-in array")
    if seconds <= 0:
        raise IotapeError(f"--seconds {seconds}: must be positive")
    if rounds_n < 1:
        raise IotapeError(f"--rounds {rounds_n}: must be at least 1")
    if min(read_iops, write_iops, mb_per_s) <= 0:
        raise IotapeError("--read-iops, --write-iops and --mb-per-s: must be positive")
    if out.exists() and any(out.iterdir()):
        raise IotapeError(f"--out {out}: not empty; give a new directory")
    sizing = size(db_mb, mailboxes, databases, unit_kb)
    sizing.controller_share(controllers)  # each controller's share: a clear error first
    sizing.controller_ssd_mb(controllers)
    o = LabOptions(
        sizing=sizing, threads=threads, seconds=seconds, controllers=controllers,
        read_iops=read_iops, write_iops=write_iops, mb_per_s=mb_per_s, stats_s=stats_s,
        migrate_s=migrate_s, verify=verify, name=name, device=device, spindles=spindles,
        tier_in=tier_in, warm_s=warm_s, rounds=rounds_n,
    )  # fmt: skip
    try:
        with opened(db) as store:
            raw = run_lab(o, out, store, _timed(time.monotonic()))
    except LabError as e:
        raise IotapeError(str(e)) from None
    if rounds_n == 1:
        rep = report.build(raw)
        text = report.render(rep)
    else:
        rep, each = rounds.build(raw)
        for r, one in zip(raw["rounds"], each, strict=True):
            _write(Path(r["out"]), one, report.render(one))
        text = rounds.render(rep)
    _write(out, rep, text)
    print(json.dumps(rep, indent=1, default=str) if as_json else text)


def _write(out: Path, rep: dict, text: str) -> None:
    """OUT/report.json and OUT/report.txt, each whole or not at all."""
    with replacing(out / "report.json") as tmp:
        Path(tmp).write_text(json.dumps(rep, indent=1, default=str) + "\n")
    with replacing(out / "report.txt") as tmp:
        Path(tmp).write_text(text + "\n")


device_app = typer.Typer(
    help="An emulated disk as a block device: up, list, stats, down.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(device_app, name="device")


def _array_model(
    disks: int | None,
    dirty_mb: float | None,
    tier_mb: float | None,
    cache_mb: float | None,
    sets: list[str],
) -> ArrayModel:
    changes: dict[str, float] = {}
    for kv in sets:
        key, eq, value = kv.partition("=")
        if not eq or key not in ArrayModel.__dataclass_fields__:
            keys = ", ".join(ArrayModel.__dataclass_fields__)
            raise IotapeError(f"--set {kv}: KEY=NUMBER, KEY one of {keys}")
        try:
            changes[key] = float(value)
        except ValueError:
            raise IotapeError(f"--set {kv}: {value!r} is not a number") from None
    if disks is not None:
        changes["disks"] = disks
    if dirty_mb is not None:
        changes["dirty_mb"] = dirty_mb
    if tier_mb is not None:
        changes["tier_mb"] = tier_mb
    if cache_mb is not None:
        changes["cache_ssd_mb"] = cache_mb
    try:
        return ArrayModel.load(changes=changes)
    except ValueError as e:
        raise IotapeError(f"--set: {e}") from None


@device_app.command("up")
def device_up(
    kind: Annotated[str, typer.Argument(help="hdd (one 10K rpm disk's times) or array.")],
    name: Annotated[str, typer.Option("--name", help="The device's name, for `down`.")],
    size_mb: Annotated[int, typer.Option("--size-mb", help="Its size (MiB, in memory).")] = 1024,
    spindles: Annotated[int, typer.Option("--spindles", help="hdd: disks serving.")] = 1,
    disks: Annotated[
        int | None, typer.Option("--disks", help="array: disks in the RAID 6 set.")
    ] = None,
    dirty_mb: Annotated[
        float | None, typer.Option("--dirty-mb", help="array: the write cache's dirty limit.")
    ] = None,
    tier_mb: Annotated[
        float | None,
        typer.Option("--tier-mb", help="array: an SSD performance tier of this many MiB."),
    ] = None,
    cache_mb: Annotated[
        float | None,
        typer.Option("--cache-mb", help="array: an SSD read cache of this many MiB."),
    ] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option("--set", help="array: KEY=NUMBER over analyzer/lab/array_model.toml."),
    ] = None,
    controllers: Annotated[
        int,
        typer.Option(
            "--controllers",
            help="array: 2 for two controllers, NAME.a and NAME.b, each its own device "
            "(cache, set, SSD) of --size-mb with the same model; printed A first.",
        ),
    ] = 1,
) -> None:
    """Bring up an emulated disk as a loop device and print its path (two controllers:
    one a line, A first). It runs until `iotape lab device down NAME`. Needs root.

    Example: iotape lab device up array --name a1 --size-mb 2048 --disks 10 --tier-mb 512
    """
    if controllers not in (1, 2) or (controllers == 2 and kind != "array"):
        raise IotapeError(f"--controllers {controllers}: 1, or 2 for an array")
    if kind == "array":
        model: HddModel | ArrayModel = _array_model(disks, dirty_mb, tier_mb, cache_mb, sets or [])
    elif kind == "hdd":
        if not 1 <= spindles <= 64:
            raise IotapeError(f"--spindles {spindles}: between 1 and 64")
        if any(v is not None for v in (disks, dirty_mb, tier_mb, cache_mb)) or sets:
            raise IotapeError(
                "--disks, --dirty-mb, --tier-mb, --cache-mb and --set are the array's"
            )
        model = HddModel(spindles=spindles)
    else:
        raise IotapeError(f"{kind}: hdd or array")
    try:
        if controllers == 2:
            assert isinstance(model, ArrayModel)
            states = blockdev.up_controllers(name, size_mb, model)
        else:
            states = [blockdev.up(name, kind, size_mb, model)]
    except blockdev.DeviceError as e:
        raise IotapeError(str(e)) from None
    for st in states:
        if st.controller:
            _say(f"{st.name}: {st.loop} (controller {st.controller.upper()})")
        print(st.loop)


@device_app.command("down")
def device_down(name: Annotated[str, typer.Argument(help="The device's name.")]) -> None:
    """Release a lab device: its loop device, mount, server and memory.

    Example: iotape lab device down a1
    """
    try:
        released = blockdev.down(name)
    except blockdev.DeviceError as e:
        raise IotapeError(str(e)) from None
    _say(f"{name}: released {', '.join(released) or 'nothing left to release'}")


@device_app.command("list")
def device_list(as_json: AsJson = False) -> None:
    """The lab devices that are up.

    Example: iotape lab device list --json
    """
    try:
        states = blockdev.listed()
    except blockdev.DeviceError as e:
        raise IotapeError(str(e)) from None
    if as_json:
        print(json.dumps([asdict(s) for s in states], indent=1))
        return
    for s in states:
        print(f"{s.name}\t{s.kind}\t{s.loop}\t{s.size >> 20} MiB\tpid {s.pid}")


@device_app.command("stats")
def device_stats(name: Annotated[str, typer.Argument(help="The device's name.")]) -> None:
    """An array device's own counters (JSON): cache, destage, disks, modelled latency;
    a two-controller array's by controller ({"a": ..., "b": ...}).

    Example: iotape lab device stats a1
    """
    try:
        print(json.dumps(blockdev.stats(name), indent=1))
    except blockdev.DeviceError as e:
        raise IotapeError(str(e)) from None
