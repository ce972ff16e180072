"""`iotape lab`: experiments on emulated devices."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from analyzer.lab import report
from analyzer.lab.devices import LabError
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
            "FUSE) or throttle (blk-throttle IOPS limits: the rate, not the latency).",
        ),
    ] = "hdd",
    spindles: Annotated[int, typer.Option("--spindles", help="hdd: disks serving.")] = 4,
    read_iops: Annotated[int, typer.Option("--read-iops", help="throttle: reads/s.")] = 143,
    write_iops: Annotated[int, typer.Option("--write-iops", help="throttle: writes/s.")] = 143,
    mb_per_s: Annotated[int, typer.Option("--mb-per-s", help="Slow device MB/s.")] = 150,
    unit_kb: Annotated[int, typer.Option("--unit-kb", help="Page moved (KiB).")] = 4096,
    stats_s: Annotated[float, typer.Option("--stats-s", help="Tier statistics interval.")] = 5,
    migrate_s: Annotated[float, typer.Option("--migrate-s", help="Tier migration interval.")] = 5,
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
    if device not in ("hdd", "throttle"):
        raise IotapeError(f"--device {device}: hdd or throttle")
    if not 1 <= spindles <= 64:
        raise IotapeError(f"--spindles {spindles}: between 1 and 64")
    if seconds <= 0:
        raise IotapeError(f"--seconds {seconds}: must be positive")
    if min(read_iops, write_iops, mb_per_s) <= 0:
        raise IotapeError("--read-iops, --write-iops and --mb-per-s: must be positive")
    if out.exists() and any(out.iterdir()):
        raise IotapeError(f"--out {out}: not empty; give a new directory")
    o = LabOptions(
        sizing=size(db_mb, mailboxes, databases, unit_kb), threads=threads, seconds=seconds,
        read_iops=read_iops, write_iops=write_iops, mb_per_s=mb_per_s, stats_s=stats_s,
        migrate_s=migrate_s, verify=verify, name=name, device=device, spindles=spindles,
    )  # fmt: skip
    try:
        with opened(db) as store:
            raw = run_lab(o, out, store, _say)
    except LabError as e:
        raise IotapeError(str(e)) from None
    rep = report.build(raw)
    with replacing(out / "report.json") as tmp:
        Path(tmp).write_text(json.dumps(rep, indent=1, default=str) + "\n")
    text = report.render(rep)
    with replacing(out / "report.txt") as tmp:
        Path(tmp).write_text(text + "\n")
    print(json.dumps(rep, indent=1, default=str) if as_json else text)
