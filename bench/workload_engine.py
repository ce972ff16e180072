"""Reference workload: calibration against the published Jetstress runs, and the
engine's throughput against fio doing the same I/O.

1. Calibration. Each published profile, scaled to this machine (fewer mailboxes,
   smaller databases, the same per-mailbox rate; the cache holds each mailbox's
   hot pages and stays under 1 % of the database, so random pages miss as they
   did in the published runs), is run under `iotape record` on a loop device over
   /dev/shm. The table has, per figure: published, the engine's report, the trace.
   The throughput profiles run at their published device latency, emulated
   (the engine holds each completion until it is as old as the published
   average; the I/O itself is real and recorded).
2. Throughput. Throughput mode with fixed threads on a /dev/shm loop device, then
   fio with the engine's read/write mix and sizes (random, O_DIRECT, io_uring,
   one job per engine thread plus one for the checkpoint writer, iodepth 1, as
   page faults are synchronous), and the engine's non-transactional I/O at the
   engine's rates and sizes: its log writes and its log file pre-formatting
   (sequential 256 KiB writes, as many bytes as the log). Rounds alternate;
   the ratio is the median of engine transactional IOPS / fio IOPS (the
   database jobs'). Goal >= 0.9.
   MMB2 (Exchange 2000 under LoadSim): the exchange2000 preset scaled to
   --mmb2-users users at the published per-user rate, cache and checkpoint
   depth per user; its shape from the trace's steady window (workload/mmb2.py)
   against the published server totals' ratios.
3. Full size. Each published run at its own database and cache size on the null
   backend, at the published latency: the engine's model without the scaling
   (no I/O, so it checks the model, not the machine). The throughput runs did
   not publish their mailbox count; they run at several.

Run as root: `.venv/bin/python bench/workload_engine.py [--duration 120 --rounds 3]
[--parts calibration|throughput|fullscale]`.
Writes bench/results/workload.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import schemas
from recorder.tracefile import open_trace
from workload import engine, mmb2, profiles

ROOT = Path(__file__).resolve().parent.parent
STREAMS = {v: k for k, v in schemas.enum("stream").items()}
OPS = schemas.enum("op")

# Published run -> scaled configuration on this machine (one database: the
# published figures are per database).
SCALED = {
    "exchange2010-esrp-mailbox-profile": dict(
        profile="exchange2010", mode="performance", mailboxes=200, iops_per_mailbox=0.2,
        mailbox_size_mb=15, copies=2, threads=3,
    ),
    # At the published device latency (emulated: completions held to it), since
    # commit batching, the lazy-commit timer and the fixed-rate maintenance all
    # run on the clock; a loop device answers ~100x faster than the SSD did.
    "exchange2013-throughput": dict(
        profile="exchange2013", mode="throughput", mailboxes=100, mailbox_size_mb=40,
        copies=3, threads=8, cache_max_mb=12,
        emulate_latency_ms=profiles.published_latency("exchange2013-throughput"),
    ),
    "exchange2010-throughput": dict(
        profile="exchange2010", mode="throughput", mailboxes=100, mailbox_size_mb=40,
        copies=3, threads=8, cache_max_mb=12,
        emulate_latency_ms=profiles.published_latency("exchange2010-throughput"),
    ),
}  # fmt: skip


class Loop:
    def __init__(self, size_mb: int) -> None:
        fd, name = tempfile.mkstemp(prefix="iotape-bench-", suffix=".img", dir="/dev/shm")
        os.close(fd)
        self.backing = Path(name)
        os.truncate(self.backing, size_mb << 20)
        self.path = subprocess.run(
            ["losetup", "--find", "--show", str(self.backing)],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        Path(f"/sys/block/{Path(self.path).name}/queue/nomerges").write_text("2")

    def __enter__(self) -> Loop:
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run(["losetup", "-d", self.path], check=False)
        self.backing.unlink(missing_ok=True)


def trace_counts(path: Path) -> dict[str, tuple[int, int]]:
    recs = open_trace(path).read_all()
    recs = recs[np.isin(recs["op"], [OPS["read"], OPS["write"]])]
    return {
        STREAMS[int(c)]: (
            int((recs["stream"] == c).sum()),
            int(recs["bytes"][recs["stream"] == c].sum()),
        )
        for c in np.unique(recs["stream"])
    }


def calibrate(pub_id: str, duration: float, tmp: Path) -> dict:
    kw = SCALED[pub_id]
    probe = engine.WorkloadConfig(db_paths=["/"], log_paths=["/"], **kw)
    size_mb = probe.db_bytes() // 2**20 + 64 + 8
    with Loop(size_mb) as loop:
        cfg = engine.WorkloadConfig(
            db_paths=[loop.path], log_paths=[loop.path], destroy_data_on=[loop.path],
            duration=duration, **kw,
        )  # fmt: skip
        out = tmp / f"{pub_id}.iot"
        result, summary = engine.run_recorded(cfg, out, force=True)
        counts = {k: (v["count"], v["bytes"]) for k, v in result["databases"][0]["streams"].items()}
        mine = profiles.shape_from_counts(counts, cfg.copies)
        seen = profiles.shape_from_counts(trace_counts(out), cfg.copies)
        out.unlink()
    pub = profiles.published_shape(pub_id)
    rows = [
        {
            "figure": k,
            "published": pub[k],
            "engine": mine[k],
            "trace": seen[k],
            "engine_vs_published": profiles.deviation(mine[k], pub[k]),
            "trace_vs_engine": profiles.deviation(seen[k], mine[k]),
        }
        for k in profiles.SHAPE_KEYS
    ]
    secs = result["elapsed_s"]
    s = result["databases"][0]["streams"]
    return {
        "published": pub_id,
        "config": cfg.metadata(),
        "elapsed_s": secs,
        "tx_iops": (s["db-read"]["count"] + s["db-write"]["count"]) / secs,
        "threads_final": result["threads_final"],
        "trace_events": summary.get("events"),
        "rows": rows,
    }


# The published runs at their own size, on the null backend (`--ioengine null`:
# no I/O, a sparse database, completions held to the published latency): the
# engine's model where the cache, the database and the checkpoint depth have their
# published proportions to one another, which the scaled runs cannot keep on this
# machine (the scaled cache is 12-25 MB, the published 256 MB per database). The
# throughput runs did not publish a mailbox count (Jetstress's throughput test
# sizes its database by capacity), so they run at several.
FULL_MAILBOXES = (100, 400, 1600, 6400, 25600)


def full_scale_configs(duration: float, throughput_duration: float) -> list[tuple[str, dict]]:
    out = []
    for pub_id in SCALED:
        c = profiles.published(pub_id)["config"]
        dbs = c.get("databases", 1)
        base = dict(
            profile=SCALED[pub_id]["profile"], mode=SCALED[pub_id]["mode"],
            copies=c["copies_per_database"],
            cache_min_mb=c["cache_min_mb"] / dbs, cache_max_mb=c["cache_max_mb"] / dbs,
            emulate_latency_ms=profiles.published_latency(pub_id), ioengine="null",
        )  # fmt: skip
        db_mb = c["database_size_gb_each"] * 1024
        if "mailboxes" in c:
            n = round(c["mailboxes"] / dbs)
            out.append((pub_id, dict(
                base, mailboxes=n, mailbox_size_mb=db_mb / n, duration=duration,
                iops_per_mailbox=c["iops_per_mailbox"], threads=c["threads_per_database"],
            )))  # fmt: skip
        else:
            for n in FULL_MAILBOXES:
                out.append((pub_id, dict(
                    base, mailboxes=n, mailbox_size_mb=db_mb / n, threads=c["threads"],
                    duration=throughput_duration,
                )))  # fmt: skip
    return out


def _bytes_ratio(shape: dict) -> float:
    """Database bytes read per byte written: the read:write ratio of pages, apart
    from how many pages each request coalesces."""
    return shape["db_read_write_ratio"] * shape["db_read_avg_bytes"] / shape["db_write_avg_bytes"]


def full_scale(duration: float, throughput_duration: float) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="iotape-full-", dir="/var/tmp") as t:
        db, log = Path(t) / "db", Path(t) / "log"
        db.mkdir()
        log.mkdir()
        for pub_id, kw in full_scale_configs(duration, throughput_duration):
            cfg = engine.WorkloadConfig(db_paths=[str(db)], log_paths=[str(log)], **kw)
            res = engine.run(cfg)
            d = res["databases"][0]
            counts = {k: (v["count"], v["bytes"]) for k, v in d["streams"].items()}
            mine = profiles.shape_from_counts(counts, cfg.copies)
            pub = profiles.published_shape(pub_id)
            mine["db_bytes_read_per_byte_written"] = _bytes_ratio(mine)
            pub["db_bytes_read_per_byte_written"] = _bytes_ratio(pub)
            rows.append({
                "published": pub_id,
                "config": cfg.metadata(),
                "elapsed_s": res["elapsed_s"],
                "cache": d["cache"],
                "operations": d["operations"],
                "figures": {
                    k: {"published": pub[k], "engine": mine[k],
                        "engine_vs_published": profiles.deviation(mine[k], pub[k])}
                    for k in (*profiles.SHAPE_KEYS, "db_bytes_read_per_byte_written")
                },
            })  # fmt: skip
            print(json.dumps({"full_scale": pub_id, "mailboxes": kw["mailboxes"]}), flush=True)
            for f in log.glob("*/*"):
                f.unlink()
    return rows


def _bssplit(avg: float, unit: int, lo: int = 1, hi: int = 2) -> str:
    """A fio bssplit of two neighbouring multiples of `unit` whose mean is `avg`:
    k and k+1 units (k from lo; 2 units at most when hi is 2, the two page
    sizes the database requests mostly are)."""
    k = min(max(lo, int(avg // unit)), hi - 1)
    x = min(1.0, max(0.0, avg / unit - k))
    small = round(100 * (1 - x))
    return f"{k * unit // 1024}k/{small}:{(k + 1) * unit // 1024}k/{100 - small}"


def fio_iops(dev: str, mix: dict, runtime: int, tmp: Path) -> float:
    """fio doing the engine's I/O: random db reads and writes (the measured share
    and sizes, one job per engine thread plus the checkpoint writer, iodepth 1);
    sequential log writes at the engine's log write rate and size, and the log
    file pre-formatting at the engine's rate and size, both after the database
    region. Only the database jobs' IOPS count, as only the engine's
    transactional I/O does."""
    out = tmp / "fio.json"
    log_split = _bssplit(mix["log_bytes"], 4096, 1, 64)
    fmt_bs = max(4096, round(mix["fmt_bytes"] / 4096) * 4096)
    argv = [
        "fio", f"--filename={dev}", "--direct=1", "--ioengine=io_uring", "--iodepth=1",
        "--time_based", f"--runtime={runtime}", "--group_reporting=0",
        "--output-format=json", f"--output={out}",
        "--name=db", "--rw=randrw", f"--rwmixread={round(mix['read_share'] * 100)}",
        f"--bssplit={_bssplit(mix['read_bytes'], 32768)},{_bssplit(mix['write_bytes'], 32768)}",
        f"--numjobs={mix['jobs']}", f"--size={mix['size']}",
        "--name=log", "--rw=write", f"--bssplit={log_split}", f"--offset={mix['size']}",
        "--size=64m", f"--rate_iops={max(1, round(mix['log_per_s']))}",
    ]  # fmt: skip
    if mix["fmt_per_s"] > 0:
        argv += [
            "--name=logfmt", "--rw=write", f"--bs={fmt_bs}", f"--offset={mix['size'] + (64 << 20)}",
            "--size=64m", f"--rate_iops={max(1, round(mix['fmt_per_s']))}",
        ]  # fmt: skip
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    jobs = json.loads(out.read_text())["jobs"]
    return sum(j["read"]["iops"] + j["write"]["iops"] for j in jobs if j["jobname"] == "db")


def throughput(rounds: int, runtime: int, threads: int | str, tmp: Path) -> dict:
    kw = dict(mode="throughput", mailboxes=100, mailbox_size_mb=20, copies=1, bdm=False,
              cache_max_mb=20)  # fmt: skip
    with Loop(2200) as loop:
        tuned = None
        if threads == "auto":
            # The engine's own tuner picks the count (one run, a step a second
            # from 1 thread); the rounds then run at that count, since a run's
            # IOPS would otherwise include its tuning steps.
            cfg = engine.WorkloadConfig(
                db_paths=[loop.path], log_paths=[loop.path], destroy_data_on=[loop.path],
                duration=max(runtime, 20), threads="auto", **kw,
            )  # fmt: skip
            res = engine.run(cfg)
            tuned = res["auto"]
            threads = int(res["threads_final"])
        kw["threads"] = threads
        out = []
        for _ in range(rounds):
            cfg = engine.WorkloadConfig(
                db_paths=[loop.path], log_paths=[loop.path], destroy_data_on=[loop.path],
                duration=runtime, **kw,
            )  # fmt: skip
            res = engine.run(cfg)
            s = res["databases"][0]["streams"]
            reads, writes = s["db-read"], s["db-write"]
            eng = (reads["count"] + writes["count"]) / res["elapsed_s"]
            mix = {
                "read_share": reads["count"] / (reads["count"] + writes["count"]),
                "read_bytes": reads["avg_bytes"],
                "write_bytes": writes["avg_bytes"],
                "jobs": threads + 1,
                "size": cfg.db_bytes(),
                "log_bytes": s["log-write"]["avg_bytes"],
                "log_per_s": s["log-write"]["per_s"],
                "fmt_bytes": s["log-preformat"]["avg_bytes"],
                "fmt_per_s": s["log-preformat"]["per_s"],
            }
            fio = fio_iops(loop.path, mix, runtime, tmp)
            # The same run with every commit lazy: no session waits for the log,
            # which is the dependency fio's independent jobs do not have.
            lazy = dataclasses.replace(cfg, overrides={"lazy-commit": "100"})
            res = engine.run(lazy)
            s = res["databases"][0]["streams"]
            eng_lazy = (s["db-read"]["count"] + s["db-write"]["count"]) / res["elapsed_s"]
            out.append({
                "engine_tx_iops": eng, "fio_iops": fio, "ratio": eng / fio,
                "engine_no_commit_wait_tx_iops": eng_lazy, "ratio_no_commit_wait": eng_lazy / fio,
                **mix,
            })  # fmt: skip
    return {
        "setup": f"throughput mode, {threads} threads, 1 database, bdm off, 1 copy; fio randrw "
        f"io_uring iodepth 1 x {threads + 1} jobs, same read share and sizes, plus sequential "
        "log writes and log pre-formatting writes at the engine's rates and sizes; /dev/shm loop",
        "threads": threads,
        "auto": tuned,
        "rounds": out,
        "ratio_median": statistics.median(r["ratio"] for r in out),
        "ratio_no_commit_wait_median": statistics.median(r["ratio_no_commit_wait"] for r in out),
        "goal": 0.9,
    }


def calibrate_mmb2(args: argparse.Namespace, tmp: Path) -> dict:
    """The exchange2000 preset scaled down, recorded, its steady window measured."""
    users, dbs = args.mmb2_users, args.mmb2_databases
    with Loop(mmb2.device_mb(users, dbs)) as loop:
        return mmb2.calibrate(
            loop.path, users, args.mmb2_duration, args.mmb2_warm, tmp, databases=dbs
        )


def _print_mmb2(mm: dict) -> None:
    c = mm["config"]
    print(
        f"\nMMB2 (exchange2000, {c['mailboxes']} users, {c['databases']} databases, "
        f"window {mm['window_s']:.0f} s after {mm['warm_s']:.0f} s)"
    )
    print(f"{'figure':30} {'published':>12} {'trace':>12} {'dev':>8}")
    for r in mm["rows"]:
        d = r["deviation"]
        print(
            f"{r['figure']:30} {r['published']:12.4f} {r['measured']:12.4f}"
            + ("        -" if d is None else f" {d * 100:+7.1f}%")
        )


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--duration", type=float, default=600, help="seconds of the ESRP calibration run"
    )
    ap.add_argument("--throughput-duration", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runtime", type=int, default=10, help="seconds per throughput round")
    ap.add_argument(
        "--threads",
        type=lambda v: v if v == "auto" else int(v),
        default=4,
        help="engine sessions (fio gets one job more), or auto: the engine's tuner picks them",
    )
    ap.add_argument(
        "--parts",
        choices=["all", "calibration", "mmb2", "throughput", "fullscale"],
        default="all",
        help="run one part only; the other parts of an existing output file are kept",
    )
    ap.add_argument(
        "--full-duration", type=float, default=600, help="seconds of the full-size ESRP run"
    )
    ap.add_argument(
        "--full-throughput-duration",
        type=float,
        default=120,
        help="seconds of each full-size throughput run",
    )
    ap.add_argument("--mmb2-users", type=int, default=400)
    ap.add_argument("--mmb2-duration", type=float, default=45)
    ap.add_argument("--mmb2-warm", type=float, default=20, help="seconds before the window")
    ap.add_argument(
        "--mmb2-databases", type=int, default=5, help="in the preset's 2 storage groups"
    )
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "workload.json")
    return ap.parse_args()


def main() -> None:
    args = _args()
    if os.geteuid() != 0:
        sys.exit("bench/workload_engine.py: needs root (loop devices, BPF)")
    # A part not run keeps its figures from the last full run, so the file
    # always has both.
    old = json.loads(args.output.read_text()) if args.output.exists() else {}
    with tempfile.TemporaryDirectory(prefix="iotape-bench-") as t:
        tmp = Path(t)
        run_cal = args.parts in ("all", "calibration")
        cal = [] if run_cal else old.get("calibration", [])
        for pub_id in SCALED if run_cal else []:
            dur = (
                args.duration
                if pub_id.startswith("exchange2010-esrp")
                else args.throughput_duration
            )
            cal.append(calibrate(pub_id, dur, tmp))
            print(json.dumps({"calibrated": pub_id}), flush=True)
        run_mmb2 = args.parts in ("all", "calibration", "mmb2")
        mm = calibrate_mmb2(args, tmp) if run_mmb2 else old.get("mmb2")
        thr = (
            throughput(args.rounds, args.runtime, args.threads, tmp)
            if args.parts in ("all", "throughput")
            else old.get("throughput")
        )
        full = (
            full_scale(args.full_duration, args.full_throughput_duration)
            if args.parts in ("all", "fullscale")
            else old.get("full_scale", [])
        )
    doc = {
        "host": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "calibration": cal,
        "mmb2": mm,
        "throughput": thr,
        "full_scale": full,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=1) + "\n")
    _print(args, cal if run_cal else [], thr, full)
    if run_mmb2 and mm:
        _print_mmb2(mm)


def _print(args: argparse.Namespace, cal: list[dict], thr: dict | None, full: list[dict]) -> None:
    for c in cal:
        print(f"\n{c['published']} (scaled: {c['elapsed_s']:.0f} s, {c['tx_iops']:.1f} tx IOPS)")
        print(f"{'figure':30} {'published':>12} {'engine':>12} {'trace':>12} {'eng/pub':>8}")
        for r in c["rows"]:
            d = r["engine_vs_published"]
            cells = [r["published"], r["engine"], r["trace"]]
            print(
                f"{r['figure']:30} "
                + " ".join("-".rjust(12) if v is None else f"{v:12.3f}" for v in cells)
                + ("        -" if d is None else f" {d * 100:+7.1f}%")
            )
    if args.parts in ("all", "fullscale"):
        print("\nfull size, null backend: db read:write in requests, then in bytes")
        print(f"  {'run':36} {'mailboxes':>9} {'engine':>7} {'pub':>7} {'dev':>7}")
        for f in full:
            cells = [
                f"{fig['engine']:7.3f} {fig['published']:7.3f} "
                f"{fig['engine_vs_published'] * 100:+6.1f}%"
                for fig in (
                    f["figures"][k]
                    for k in ("db_read_write_ratio", "db_bytes_read_per_byte_written")
                )
            ]
            print(f"  {f['published']:36} {f['config']['mailboxes']:9} " + "   ".join(cells))
    if not thr or args.parts not in ("all", "throughput"):
        return
    ratios = [r["ratio"] for r in thr["rounds"]]
    print(
        f"\nthroughput, {thr.get('threads')} threads: engine/fio median {thr['ratio_median']:.3f} "
        f"({min(ratios):.3f}-{max(ratios):.3f}), "
        f"all commits lazy {thr['ratio_no_commit_wait_median']:.3f}"
    )
    for r in thr["rounds"]:
        print(
            f"  engine {r['engine_tx_iops']:,.0f}  fio {r['fio_iops']:,.0f}  ratio {r['ratio']:.3f}"
            f"  all lazy {r['engine_no_commit_wait_tx_iops']:,.0f}"
            f" ({r['ratio_no_commit_wait']:.3f})"
        )


if __name__ == "__main__":
    main()
