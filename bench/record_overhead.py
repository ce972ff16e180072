"""Recorder overhead: fio 4 KiB random reads, untraced vs iotape vs bpftrace.

Setup (issue #2): fio, io_uring, iodepth 32 x 2 jobs, on a loop device over a
file in /dev/shm, at full speed. The machine is noisy (a shared 2-vCPU VM whose
throughput drifts by 10 % and more between minutes), so each traced run is
paired with an untraced run back to back (untraced first in odd rounds, second
in even ones, so a drift within a pair cancels over rounds); the ratio is taken
per pair and reported as the median of the pairs with its spread. The
recorder's CPU per million requests (its user and system time less the fixed
cost of a capture without I/O: loading, BTF, verifier) is the steady figure.
iotape runs with each chunk compression (issue #35): auto (the default: lz4 for
full chunks), zstd and none, with the trace's bytes per request and the loader's
CPU in compression; iotape_stats adds each BPF program's run time per
request (--bpf-stats). Writes JSON to bench/results/recorder.json.

Run as root: `make bench` or `.venv/bin/python bench/record_overhead.py [--rounds 3 --runtime 10]`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from devices import naming
from recorder.capture import bpftrace_backend, procstat
from recorder.tracefile import open_trace

ROOT = Path(__file__).resolve().parent.parent
IOTAPE = [sys.executable, "-m", "iotape"]


def fio_cmd(dev: str, runtime: int, out: Path) -> list[str]:
    return [
        "fio",
        "--name=bench",
        f"--filename={dev}",
        "--direct=1",
        "--rw=randread",
        "--bs=4k",
        "--ioengine=io_uring",
        "--iodepth=32",
        "--numjobs=2",
        "--group_reporting",
        "--time_based",
        f"--runtime={runtime}",
        "--output-format=json",
        f"--output={out}",
    ]


def fio_result(path: Path) -> dict:
    job = json.loads(path.read_text())["jobs"][0]
    return {"iops": job["read"]["iops"], "total_ios": job["read"]["total_ios"]}


def idle_capture(dev: str, tmp: Path) -> dict:
    """`iotape record` around a command that does no I/O: the capture's fixed CPU
    (start, BTF, verifier, attach, stop), taken off the per-request figure."""
    trace = tmp / "idle.iot"
    cmd = [*IOTAPE, "record", "-d", dev, "-o", str(trace), "--force", "--json", "--", "sleep", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"iotape record failed: {res.stderr.strip()}")
    trace.unlink()
    cpu = json.loads(res.stdout.strip().splitlines()[-1]).get("process", {})
    return {"user_s": cpu.get("user_s", 0.0), "sys_s": cpu.get("sys_s", 0.0)}


def untraced(dev: str, runtime: int, tmp: Path) -> dict:
    out = tmp / "fio-none.json"
    subprocess.run(fio_cmd(dev, runtime, out), check=True)
    return {**fio_result(out), "events": None, "lost": None, "recorder_cpu_s": 0.0}


def iotape_traced(
    dev: str,
    runtime: int,
    tmp: Path,
    compress: str = "auto",
    wakes: bool = False,
    bpf_stats: bool = False,
    loader: Path | None = None,
) -> dict:
    out, trace = tmp / "fio-iotape.json", tmp / "bench.iot"
    env = {**os.environ, **({"IOTAPE_REC": str(loader)} if loader else {})}
    cmd = [
        *IOTAPE,
        "record",
        "-d",
        dev,
        "-o",
        str(trace),
        "--force",
        "--json",
        "--compress",
        compress,
        *(["--wakes"] if wakes else []),
        *(["--bpf-stats"] if bpf_stats else []),
        "--",
        *fio_cmd(dev, runtime, out),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(f"iotape record failed: {res.stderr.strip()}")
    footer = open_trace(trace).footer or {}
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    cpu = summary.get("process", {})
    rss = cpu.get("max_rss_kb")
    size = trace.stat().st_size
    trace.unlink()
    events = footer.get("events") or 0
    packing = footer.get("compression", {})
    return {
        **fio_result(out),
        "events": footer.get("events"),
        "lost": sum(footer.get("lost", {}).values()),
        "recorder_cpu_s": cpu.get("user_s", 0) + cpu.get("sys_s", 0),
        "recorder_user_s": cpu.get("user_s", 0),
        "recorder_sys_s": cpu.get("sys_s", 0),
        "recorder_max_rss_kb": rss,
        "file_bytes": size,
        "bytes_per_request": size / events if events else None,
        "compress_ns_per_request": packing.get("cpu_ns", 0) / events if events else None,
        "wakes": footer.get("wakes"),
        "bpf_progs": bpf_per_request(footer.get("cpu", {}).get("bpf_progs"), events),
    }


def bpf_per_request(progs: dict | None, events: int) -> dict | None:
    """Per BPF program (the footer's kernel BPF_STATS_RUN_TIME counts): ns per run,
    runs per recorded request and ns per request."""
    if not progs or not events:
        return None
    return {
        name: {
            "ns_per_run": p["run_time_ns"] / p["run_cnt"],
            "runs_per_request": p["run_cnt"] / events,
            "ns_per_request": p["run_time_ns"] / events,
        }
        for name, p in progs.items()
        if p["run_cnt"]
    }


def iotape_zstd(dev: str, runtime: int, tmp: Path) -> dict:
    return iotape_traced(dev, runtime, tmp, "zstd")


def iotape_plain(dev: str, runtime: int, tmp: Path) -> dict:
    return iotape_traced(dev, runtime, tmp, "none")


def iotape_stats(dev: str, runtime: int, tmp: Path) -> dict:
    """With --bpf-stats: each program's run time (the kernel's BPF_STATS_RUN_TIME,
    which itself adds two clock reads per run, so its IOPS are not the default's)."""
    return iotape_traced(dev, runtime, tmp, bpf_stats=True)


def iotape_wakes(dev: str, runtime: int, tmp: Path) -> dict:
    """With --wakes: its BPF program runs at every wake-up on the machine."""
    return iotape_traced(dev, runtime, tmp, wakes=True)


# --base-loader: an older recorder/build/iotape-rec (kept aside before a change to
# the loader or its BPF programs), run in the same rounds as the current one.
BASE_LOADER: list[Path] = []


def iotape_base(dev: str, runtime: int, tmp: Path) -> dict:
    return iotape_traced(dev, runtime, tmp, loader=BASE_LOADER[0])


def iotape_base_stats(dev: str, runtime: int, tmp: Path) -> dict:
    return iotape_traced(dev, runtime, tmp, bpf_stats=True, loader=BASE_LOADER[0])


def add_variant(spec: str) -> None:
    """--variant NAME=PATH: another iotape-rec (e.g. recorder/Makefile's FLOOR=N) as iotape_NAME."""
    name, sep, path = spec.partition("=")
    if not sep or not name.isidentifier() or not Path(path).is_file():
        raise SystemExit(f"--variant {spec!r}: expected NAME=PATH to an iotape-rec")
    CAPTURES[f"iotape_{name}"] = functools.partial(iotape_traced, loader=Path(path))
    TRACED.append(f"iotape_{name}")


def bpftrace_traced(dev: str, runtime: int, tmp: Path) -> dict:
    """The peer: one printf per completed request, stdout to a file."""
    d = naming.resolve(dev)
    script = bpftrace_backend.script([d], [], [], [])
    out, lines = tmp / "fio-bpftrace.json", tmp / "bpftrace.out"
    env = {**os.environ, "BPFTRACE_MAP_KEYS_MAX": str(bpftrace_backend.MAP_KEYS)}
    bpftrace_backend._ensure_tracefs()
    with lines.open("w") as f, (tmp / "bpftrace.err").open("w") as err:
        bt = subprocess.Popen(["bpftrace", "-e", script], stdout=f, stderr=err, env=env)
        deadline = time.monotonic() + 60
        while lines.stat().st_size == 0 and time.monotonic() < deadline:
            time.sleep(0.1)  # wait for the BEGIN line: probes are attached
        subprocess.run(fio_cmd(dev, runtime, out), check=True)
        time.sleep(0.5)
        usage = procstat.cpu_and_rss(bt.pid)
        bt.send_signal(2)
        bt.wait()
    events = sum(1 for line in lines.open() if line.startswith("E "))
    lost = sum(
        int(w.split()[1])
        for w in (tmp / "bpftrace.err").read_text().splitlines()
        if w.startswith("Lost")
    )
    lines.unlink()
    return {
        **fio_result(out),
        "events": events,
        "lost": lost,
        "recorder_cpu_s": usage["user_s"] + usage["sys_s"],
        "recorder_max_rss_kb": usage["max_rss_kb"],
    }


def memory_bound(dev: str, tmp: Path, short: int, long: int) -> dict:
    """The loader's peak RSS for a short and a long capture: it must not grow."""
    out = {}
    for name, runtime in (("short", short), ("long", long)):
        r = iotape_traced(dev, runtime, tmp)
        out[name] = {
            "runtime_s": runtime,
            "events": r["events"],
            "recorder_max_rss_kb": r["recorder_max_rss_kb"],
        }
    out["growth_ratio"] = out["long"]["recorder_max_rss_kb"] / out["short"]["recorder_max_rss_kb"]
    return out


@contextlib.contextmanager
def bench_loop() -> Iterator[str]:
    """A 2 GiB loop device over /dev/shm, filled, detached and removed afterwards."""
    backing = Path(tempfile.mkstemp(dir="/dev/shm", prefix="iotape-bench-")[1])
    os.truncate(backing, 2 << 30)
    dev = subprocess.run(
        ["losetup", "--find", "--show", str(backing)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    try:
        # Fill the backing file so reads hit real pages, not holes.
        subprocess.run(
            [
                "dd",
                "if=/dev/zero",
                f"of={dev}",
                "bs=1M",
                "count=2048",
                "oflag=direct",
                "status=none",
            ],
            check=True,
        )
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
        backing.unlink(missing_ok=True)


CAPTURES = {
    "untraced": untraced,
    "iotape": iotape_traced,
    "iotape_zstd": iotape_zstd,
    "iotape_plain": iotape_plain,
    "iotape_wakes": iotape_wakes,
    "iotape_stats": iotape_stats,
    "iotape_base": iotape_base,
    "iotape_base_stats": iotape_base_stats,
    "bpftrace": bpftrace_traced,
}
TRACED = [k for k in CAPTURES if k != "untraced"]


def run_rounds(
    dev: str, rounds: int, runtime: int, tmp: Path, names: list[str]
) -> tuple[dict[str, list[dict]], dict[str, list[float]]]:
    """Per round, each traced capture of `names` next to an untraced run of its
    own: (untraced, traced) in odd rounds, (traced, untraced) in even ones; the
    captures' order turns by one each round, so that no capture always goes first
    (an A/A run, one build as both, came 0.05 apart per round: issue 36's sixth
    pass). Returns every run by capture and each traced capture's IOPS ratio per pair."""
    runs: dict[str, list[dict]] = {k: [] for k in ["untraced", *names]}
    pairs: dict[str, list[float]] = {k: [] for k in names}
    for i in range(rounds):
        k = i % len(names) if names else 0
        for name in names[k:] + names[:k]:
            order = ["untraced", name] if i % 2 == 0 else [name, "untraced"]
            got = {}
            for which in order:
                r = CAPTURES[which](dev, runtime, tmp)
                runs[which].append(r)
                got[which] = r
                per = r.get("bytes_per_request")
                print(
                    f"round {i + 1} {which:12s} {r['iops']:>10,.0f} IOPS  events "
                    f"{r.get('events')} / {r['total_ios']}  lost {r.get('lost')}"
                    + (f"  {per:.1f} B/request" if per else ""),
                    file=sys.stderr,
                )
            pairs[name].append(got[name]["iops"] / got["untraced"]["iops"])
    return runs, pairs


def spread(values: list[float]) -> dict:
    """Median, quartiles and range of `values`."""
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {
        "median": statistics.median(values),
        "q1": q[0],
        "q3": q[2],
        "min": min(values),
        "max": max(values),
        "all": values,
    }


def cpu_per_million(runs: list[dict], idle: dict) -> dict | None:
    """The recorder's CPU seconds per million recorded requests, less the idle
    capture's fixed CPU: medians over rounds, user and system apart."""
    rows = [r for r in runs if r.get("events")]
    if not rows:
        return None

    def per_m(r: dict, key: str, fixed: float) -> float:
        return (r[key] - fixed) / r["events"] * 1e6

    return {
        "cpu_s": statistics.median(
            per_m(r, "recorder_cpu_s", idle["user_s"] + idle["sys_s"]) for r in rows
        ),
        "user_s": statistics.median(per_m(r, "recorder_user_s", idle["user_s"]) for r in rows),
        "sys_s": statistics.median(per_m(r, "recorder_sys_s", idle["sys_s"]) for r in rows),
        "all_cpu_s": [
            round(per_m(r, "recorder_cpu_s", idle["user_s"] + idle["sys_s"]), 4) for r in rows
        ],
    }


def summarize(
    runs: dict[str, list[dict]],
    pairs: dict[str, list[float]],
    idle: dict,
    memory: object,
    args: argparse.Namespace,
) -> dict:
    def ratios(name: str, base: str) -> list[float]:
        return [t["iops"] / u["iops"] for t, u in zip(runs[name], runs[base], strict=True)]

    traced = [k for k in TRACED if k in runs]
    packed = [k for k in traced if k.startswith("iotape")]
    return {
        "benchmark": "recorder-overhead",
        "host": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "setup": "fio randread 4k io_uring iodepth=32 numjobs=2, loop over /dev/shm",
        "runtime_s": args.runtime,
        "rounds": args.rounds,
        "peer": "bpftrace printf per completed request",
        "pairing": "each traced run next to its own untraced run; ratio per pair",
        "median_iops": {k: statistics.median(r["iops"] for r in v) for k, v in runs.items()},
        "iops_ratio_vs_untraced": {k: spread(pairs[k]) for k in traced},
        # The recorder's CPU beyond its fixed start/stop cost, per million requests.
        "idle_capture_cpu_s": idle,
        "recorder_cpu_s_per_million": {k: cpu_per_million(runs[k], idle) for k in packed},
        # What compression costs, against the plain capture of the same round.
        "iops_ratio_vs_iotape_plain": {
            k: {
                "median": statistics.median(ratios(k, "iotape_plain")),
                "all": ratios(k, "iotape_plain"),
            }
            for k in packed
            if k != "iotape_plain" and "iotape_plain" in runs
        },
        # What wake records cost, against the default capture of the same round.
        "iops_ratio_vs_iotape": {
            k: {"median": statistics.median(ratios(k, "iotape")), "all": ratios(k, "iotape")}
            for k in ("iotape_wakes", "iotape_base")
            if k in runs and "iotape" in runs
        },
        "capture_completeness": {
            k: [
                {"events": r["events"], "fio_total_ios": r["total_ios"], "lost": r["lost"]}
                for r in runs[k]
            ]
            for k in traced
        },
        "bytes_per_request": {k: known_median(runs[k], "bytes_per_request") for k in packed},
        "compress_ns_per_request": {
            k: known_median(runs[k], "compress_ns_per_request") for k in packed
        },
        # Where the BPF time goes: medians over rounds, per program.
        "bpf_per_request": {
            k: bpf_medians([r["bpf_progs"] for r in runs[k] if r.get("bpf_progs")])
            for k in packed
            if any(r.get("bpf_progs") for r in runs[k])
        },
        "goal": "iotape >= 0.95 of untraced with 0 lost",
        "recorder_memory_vs_capture_length": memory,
        "runs": runs,
    }


def known_median(runs: list[dict], key: str) -> float | None:
    known = [r[key] for r in runs if r[key] is not None]  # none: a floor variant's
    return statistics.median(known) if known else None


def bpf_medians(rounds: list[dict]) -> dict:
    progs = {p for r in rounds for p in r}
    return {
        p: {
            k: statistics.median(r[p][k] for r in rounds if p in r)
            for k in ("ns_per_run", "runs_per_request", "ns_per_request")
        }
        for p in sorted(progs)
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=10)
    ap.add_argument(
        "--captures",
        default=",".join(k for k in CAPTURES if "base" not in k),
        help=f"comma-separated, from {', '.join(CAPTURES)} (untraced is always run)",
    )
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "recorder.json")
    ap.add_argument(
        "--base-loader",
        type=Path,
        help="an older iotape-rec for the captures iotape_base and iotape_base_stats",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="another iotape-rec as the capture iotape_NAME (repeatable)",
    )
    ap.add_argument(
        "--memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also the recorder's memory against the capture's length",
    )
    args = ap.parse_args()
    for spec in args.variant:
        add_variant(spec)
    unknown = set(args.captures.split(",")) - set(CAPTURES)
    if unknown:
        raise SystemExit(f"--captures: unknown {', '.join(sorted(unknown))}")
    if "iotape_base" in args.captures and not args.base_loader:
        raise SystemExit("--captures iotape_base*: needs --base-loader PATH")
    if args.base_loader:
        BASE_LOADER.append(args.base_loader)
    if os.geteuid() != 0:
        raise SystemExit("bench/record_overhead.py: needs root (BPF and loop devices)")
    with tempfile.TemporaryDirectory(prefix="iotape-bench-") as tmpdir, bench_loop() as dev:
        tmp = Path(tmpdir)
        idles = [idle_capture(dev, tmp) for _ in range(3)]
        idle = {k: statistics.median(i[k] for i in idles) for k in ("user_s", "sys_s")}
        names = [c for c in args.captures.split(",") if c in TRACED]
        runs, pairs = run_rounds(dev, args.rounds, args.runtime, tmp, names)
        memory = memory_bound(dev, tmp, 3, 4 * args.runtime) if args.memory else None
        print(f"memory: {memory}", file=sys.stderr)
    result = summarize(runs, pairs, idle, memory, args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    keys = (
        "median_iops",
        "iops_ratio_vs_untraced",
        "recorder_cpu_s_per_million",
        "iops_ratio_vs_iotape_plain",
        "iops_ratio_vs_iotape",
        "bytes_per_request",
        "compress_ns_per_request",
        "bpf_per_request",
    )
    print(json.dumps({k: result[k] for k in keys}, indent=2))


if __name__ == "__main__":
    main()
