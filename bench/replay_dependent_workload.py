"""Closed-loop replay of the reference workload against the truth (issue 34): the
engine (`iotape workload run`, exchange2013, throughput mode, THREADS session
threads, database and log on one device) recorded on device A, its trace replayed
`--timing dependent` onto device B, beside the engine run directly on B (the
truth). Both directions between the SSD-like loop device over /dev/shm and the
HDD-like disk model (analyzer/lab/hdd.py, FUSE, SPINDLES spindles).

    flock /tmp/iotape-bench.lock env PYTHONPATH=$PWD .venv/bin/python \
        bench/replay_dependent_workload.py --directions hdd-ssd,ssd-hdd --rounds 3
    (root; about 15 minutes; JSON in bench/results/replay-dependent-workload.json)

Transactional IOPS = database reads + writes per second: the engine's own
(its report: db-read and db-write counts over its elapsed time) for the truth,
the replay's db-read and db-write requests over their span (`replay fidelity
JOBDIR`, first issue to last completion, the longer of the two streams') for the
replay.

The truth is the engine doing the recorded run's work on B: every engine run
(the recording on A, the truth on B) does a fixed number of operations per
session (`workload run --transactions`: `--hdd-transactions` where A is the
HDD-like device, `--ssd-transactions` where it is the SSD-like one), with the
same seed (the same operations: the bench checks the result's
`operations_digest`), from the same starting state: databases created anew by
a run of one operation per session and the device's log region zeroed, so the
log starts at the same place. The HDD-like recording is long (about 70 s at
the default) so that its replay onto the SSD-like device, and the truth there,
last long enough to measure. Beside it, the truth of before (`--duration-truth`,
on by default): the engine run for a time on B after a 1 s run (DURATION on the
HDD-like device, SSD_DURATION on the SSD-like one), a different amount and
phase of work; the replay's error is given against both.

Every timed run (the recording, each truth, each `replay run`) is held in one
CPU condition, `--condition` (bench/cpu_condition.py; each run's `cpu` says
what it was: halts and IPIs per request, the other work just before, a
wake-up round trip). The default, awake (/dev/cpu_dma_latency at 0: idle vCPUs
poll instead of halting), because on this VM a halted vCPU's wake-up costs
tens of microseconds through the hypervisor and the engine hands every
request between threads, so an idle VM made the truth half as fast as a busy
one (docs/benchmarks.md); awake is the same whatever the other work does.

Goal (issue 34): the dependent replay's transactional IOPS within 15 % of the
engine's run on the target. The engine's run on the SSD-like device swings
with this shared VM's CPU (bench/workload_run_spread.py), so `--rounds N` runs
the truths and the replays N times after one recording and reports medians
and the error's range;
each round replays the trace dependent with each of `--long-thinks`
(demand,recorded: the first judged, the rest its peers on the same trace) and,
onto the SSD-like device, afap. `--directions` picks hdd-ssd and/or ssd-hdd.
With `--calibrate-s S`, a short timed run of the engine on the target is recorded
per invocation and the first variant's plan is also calibrated by it
(`--think-calibrate`, judged first: its short thinks at the target's CPU, and the
I/O the engine makes by its clock there, its log writer's timer writes and its
maintenance reads; each replay's `timer_writes` and `clock_requests` count what
iotape-lanes added of them); `--calibration PATH` takes a kept one
instead, so that runs of the same kept `--trace` judge the same plan.
The engine is recorded with its wakes (`--record-wakes`; `--no-wakes`: without,
the edges inferred from timing alone).
Each plan's edges per stream: `wake_edges` from the recorded wakes, the rest of
`cross_edges` inferred (`long_think_edges` of them by hfplayer's rule), and
`cross_candidates` against `cross_by_chance` and `cross_mirror` (deps.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import cpu_condition as cpu
from dependent_critical_path import critical_path
from hybrid_lab import HybridLab
from replay_dependent_workload_args import CAL, check, parser, plain_variants, variants
from replay_lab import ROOT, machine
from workload_truth import zero_logs

from analyzer.lab.hdd import HddModel
from schemas.streams import TRANSACTIONAL

OUT = ROOT / "bench" / "results" / "replay-dependent-workload.json"
IOTAPE = str(ROOT / ".venv" / "bin" / "iotape")
TX = tuple(TRANSACTIONAL)  # the streams of the transactional IOPS


def _iotape(*argv: str) -> str:
    out = subprocess.run([IOTAPE, *argv], check=True, capture_output=True, text=True)
    return out.stdout


def _wl(dev: str, args: argparse.Namespace) -> list[str]:
    return [
        "workload", "run", "--db-path", dev, "--log-path", dev, "--profile", "exchange2013",
        "--mode", "throughput", "--threads", str(args.threads), "--mailboxes",
        str(args.mailboxes), "--mailbox-size-mb", str(args.mailbox_size_mb), "--databases", "1",
        "--copies", "1", "--cache-max-mb", str(args.cache_mb), "--destroy-data-on", dev,
    ]  # fmt: skip


def engine(dev: str, args: argparse.Namespace, work: list[str], trace: Path | None) -> dict:
    """The engine on `dev` doing `work` (`--transactions N` or `--duration S`): its
    figures. Before a fixed amount of work, the starting state every such run
    gets (databases created anew by one operation per session, the log region
    zeroed); before a timed run, as this bench did before, a 1 s run (which also
    creates the databases where there are none). Neither is recorded."""
    if work[0] == "--transactions":
        _iotape(*_wl(dev, args), "--recreate", "--transactions", "1", "--json")
        zero_logs(dev, args)
    else:
        _iotape(*_wl(dev, args), "--duration", "1", "--json")
    rec = ["--record", str(trace), "-d", dev] if trace is not None else []
    if trace is not None and args.wakes:
        rec.append("--record-wakes")
    with cpu.held(args.condition) as h:
        res = json.loads(_iotape(*_wl(dev, args), *work, "--json", *rec))
    s = res["total"]
    n = {k: int(s[k]["count"]) for k in (*TX, "log-write")}
    tx = sum(n[k] for k in TX)
    db = res["databases"][0]
    return {
        "work": " ".join(work),
        "elapsed_s": res["elapsed_s"],
        "load_s": res["load_s"],
        "threads": res["threads_final"],
        "operations": db["operations"],
        "operations_by_kind": db.get("operations_by_kind"),
        "operations_digest": db.get("operations_digest"),
        "requests": n,
        "tx_iops": round(tx / res["elapsed_s"], 1),
        "achieved_tx_iops": round(res["achieved_tx_iops"], 1),
        "cpu": h.report(tx + n["log-write"]),
    }


def replay(
    trace: Path, dev: str, work: Path, name: str, timing: str = "dependent",
    variant: str | None = None, condition: str = "idle", calibrate: Path | None = None,
    cycle_cpu: bool = False,
) -> dict:  # fmt: skip
    """`replay plan --timing T` of `trace` onto `dev` (`variant`: LT[/RQ], its
    `--long-thinks LT --run-queue RQ`; `calibrate`: --think-calibrate it, with
    `--cycle-cpu target` where `cycle_cpu`), `replay
    run` (in the CPU `condition`) and `replay fidelity JOBDIR`: transactional IOPS,
    the dependencies and the plan's critical path at 20 us a request."""
    cal = "-cal" if calibrate else ""
    jobdir = work / f"jobs-{name}-{timing}-{(variant or '').replace('/', '-')}{cal}"
    lt: list[str] = ["--think-calibrate", str(calibrate)] if calibrate else []
    lt += ["--cycle-cpu", "target"] if calibrate and cycle_cpu else []
    if variant:
        long_thinks, _, run_queue = variant.partition("/")
        lt += ["--long-thinks", long_thinks, *(["--run-queue", run_queue] if run_queue else [])]
    _iotape("replay", "plan", str(trace), "-o", str(jobdir), "--timing", timing,
            "--target", f"all={dev}", "--force", *lt)  # fmt: skip
    with cpu.held(condition) as h:
        t = time.monotonic()
        _iotape("replay", "run", str(jobdir), "--destroy-data-on", dev, "--json")
        wall = time.monotonic() - t
    fid = json.loads(_iotape("replay", "fidelity", str(trace), str(jobdir), "--json"))
    plan = json.loads((jobdir / "plan.json").read_text())
    streams = fid["streams"]
    tx_o, span_o = _tx(streams, "original")
    tx, span = _tx(streams, "replay")
    return {
        "wall_s": round(wall, 2),
        "requests": fid["overall"]["replay"]["requests"],
        "span_s": fid["overall"]["replay"]["span_s"],
        "tx_requests": tx,
        "tx_span_s": span,
        "tx_iops": round(tx / span, 1) if span else None,
        "original_tx_iops": round(tx_o / span_o, 1) if span_o else None,
        "issued_before_predecessor": fid["issued_before_predecessor"],
        # log writes taken into the write before them (group commit): the replay's
        # count of log writes against the truth's
        "group_commit_taken": fid.get("group_commit_taken"),
        # log writes the log writer's timer made (the target's recording) and the
        # logged ones they took whole: timerwrites.py
        "timer_writes": fid.get("timer_writes"),
        # requests of threads on their own clock past the trace's (clockjobs.py)
        "clock_requests": fid.get("clock_requests"),
        "critical_path_tx_per_s": critical_path(jobdir, 20_000).get("tx_per_s"),
        "cpu": h.report(fid["overall"]["replay"]["requests"]),
        "streams": {
            k: {
                "speed_up": v["speed_up"],
                "requests": [v["original"]["requests"], v["replay"]["requests"]],
                "p50_ms": [v["original"]["latency"]["p50_ms"], v["replay"]["latency"]["p50_ms"]],
            }
            for k, v in streams.items()
        },
        "dependencies": [_deps(d) for d in plan["dependencies"]],
    }


def _calibration(
    dst: str, name: str, label: str, work: Path, args: argparse.Namespace
) -> tuple[Path | None, dict | None]:
    """With --calibrate-s, a short recording of the engine on `dst`, apart from the
    truth (another seed, a timed run): what --think-calibrate takes the target's CPU
    from. Its path and its engine run's figures (its length among them). With
    --calibration, that kept one instead: its figures are its recording's, lost."""
    if args.calibration:
        cal = work / f"{name}-calibration.iot"
        shutil.copy2(args.calibration, cal)
        print(f"{label}: calibration on {name}: kept, {args.calibration}", flush=True)
        return cal, {"trace": str(args.calibration), "elapsed_s": None, "requests": None}
    if not args.calibrate_s:
        return None, None
    cal = work / f"{name}-calibration.iot"
    run = ["--duration", str(args.calibrate_s), "--seed", str(args.calibrate_seed)]
    calibration = engine(dst, args, run, cal)
    if args.keep:
        shutil.copy2(cal, args.keep / cal.name)
    print(f"{label}: calibration on {name}: {calibration['elapsed_s']} s, "
          f"{sum(calibration['requests'].values())} requests", flush=True)  # fmt: skip
    return cal, calibration


def _dependents(
    trace: Path, dst: str, work: Path, label: str, cal: Path | None, args: argparse.Namespace
) -> dict[str, dict]:
    """A round's dependent replays, one per variant (CAL: the first other variant's
    plan with --think-calibrate `cal`)."""
    base = plain_variants(args)[0]  # the plan the calibrated one calibrates
    return {
        v: replay(
            trace,
            dst,
            work,
            label,
            "dependent",
            base if v == CAL else v,
            args.condition,
            cal if v == CAL else None,
            args.cycle_cpu,
        )
        for v in args.variants
    }


def _tx(streams: dict, side: str) -> tuple[int, float]:
    """The transactional streams' requests and their span (the longest of theirs):
    the background streams (database maintenance, paced by the clock) would
    otherwise set a replay's length."""
    tx = [streams[k][side] for k in TX if k in streams]
    return sum(x["requests"] for x in tx), max((x["span_s"] for x in tx), default=0.0)


def _deps(d: dict) -> dict:
    keep = ("stream", "submitters", "requests", "with_predecessor", "depth", "think_us")
    cross = ("cross_candidates", "cross_by_chance", "cross_mirror", "cross_edges")
    dem = ("long_thinks", "demand_thinks", "demand_woken", "demand_think_s")
    rq = ("run_queue", "sched_recorded", "run_queue_thinks", "run_queue_think_s")
    cal = ("think_calibration", "timer_writes", "clock_jobs")
    return {k: d.get(k) for k in (*keep, *cross, "long_think_edges", "wake_edges", *dem, *rq, *cal)}


def direction(lab: HybridLab, src: str, dst: str, work: Path, args: argparse.Namespace) -> dict:
    """The engine recorded on `src` once; then, each of args.rounds rounds, the
    engine on `dst` (the truth) and the trace's replays onto it: dependent with
    each of args.variants (--long-thinks x --run-queue: the first is the one
    judged; the others its peers, the same trace in the same round) and, onto the
    fast device, afap. With --trace, that kept trace instead of a recording."""
    names = {lab.fast: "ssd", lab.slow: "hdd"}
    dur = {lab.fast: args.ssd_duration, lab.slow: args.duration}
    # The recording's work, which the truth on `dst` does again.
    job = ["--transactions", str({lab.fast: args.ssd_transactions,
                                  lab.slow: args.hdd_transactions}[src])]  # fmt: skip
    trace = work / f"{names[src]}.iot"
    if args.trace:
        # A kept recording replayed again: its engine run's figures are lost; the
        # truth does the work given (--hdd-/--ssd-transactions, the recording's).
        shutil.copy2(args.trace, trace)
        original: dict = {"tx_iops": None, "trace": str(args.trace), "work": " ".join(job),
                          "elapsed_s": None, "operations_digest": None}  # fmt: skip
    else:
        original = engine(src, args, job, trace)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        shutil.copy2(trace, args.keep / trace.name)  # for a later look at what was replayed
    label = f"{names[src]}-to-{names[dst]}"
    rounds: list[dict] = []
    cal, calibration = _calibration(dst, names[dst], label, work, args)
    print(f"{label}: engine on {names[src]} ({original['work']} per session, recorded) "
          f"{original['tx_iops']} tx IOPS over {original['elapsed_s']} s", flush=True)  # fmt: skip
    for k in range(args.rounds):
        truth = engine(dst, args, job, None)
        same = (
            truth["operations_digest"] == original["operations_digest"]
            if original["operations_digest"] is not None
            else None
        )
        old = (
            engine(dst, args, ["--duration", str(dur[dst])], None) if args.duration_truth else None
        )
        deps = _dependents(trace, dst, work, label, cal, args)
        # Onto the fast device, afap too (no think time: the most the trace's order and
        # depth allow there); onto the HDD-like one it would take minutes more.
        afap = (
            replay(trace, dst, work, label, "afap", condition=args.condition)
            if dst == lab.fast
            else None
        )
        err = {lt: _err(d["tx_iops"], truth["tx_iops"]) for lt, d in deps.items()}
        err_old = (
            {lt: _err(d["tx_iops"], old["tx_iops"]) for lt, d in deps.items()} if old else None
        )
        _say_round(f"{label} round {k + 1}", names[dst], same, truth, old, deps, err, err_old, afap)
        rounds.append(
            {
                "engine_on_target": truth,
                "same_operations": same,
                "engine_on_target_timed": old,
                "dependent_replay": deps,
                "afap_replay": {
                    k: afap[k] for k in ("tx_iops", "tx_span_s", "critical_path_tx_per_s")
                }
                if afap
                else None,
                "tx_iops_error_pct": err,
                "tx_iops_error_vs_timed_pct": err_old,
            }
        )
    judged = args.variants[0]
    errs = [r["tx_iops_error_pct"][judged] for r in rounds]
    return {
        "from": names[src],
        "to": names[dst],
        "engine_on_source": original,
        "calibration": calibration,
        "rounds": rounds,
        "median": _medians(rounds, args),
        "same_operations": all(r["same_operations"] is not False for r in rounds),
        "error_range_pct": [min(errs), max(errs)],
        "within_goal": abs(_med(errs)) <= 15,
    }


def _say_round(
    head: str,
    dst: str,
    same: bool | None,
    truth: dict,
    old: dict | None,
    deps: dict,
    err: dict,
    err_old: dict | None,
    afap: dict | None,
) -> None:
    """One round's line: both truths, each dependent replay and its errors, afap."""
    seen = {True: "yes", False: "NO", None: "unknown (a kept trace)"}[same]
    print(
        f"{head}: truth (the same work on {dst}, same operations: {seen}) "
        f"{truth['tx_iops']} tx IOPS over {truth['elapsed_s']} s"
        + (f"; timed truth ({old['work']}) {old['tx_iops']}" if old else "")
        + "; dependent "
        + ", ".join(f"{lt} {d['tx_iops']} (path {d['critical_path_tx_per_s']}) "
                    f"over {d['tx_span_s']} s "
                    f"({err[lt]:+.1f} %" + (f", {err_old[lt]:+.1f} % against the timed truth"
                                            if err_old else "")
                    + f", {d['issued_before_predecessor']} early)" for lt, d in deps.items())
        + (f"; afap {afap['tx_iops']}" if afap else "")
        + "; " + ", ".join(f"{w} {_cpu(c)}" for w, c in
                           [("truth", truth["cpu"]), *((f"replay {v}", d["cpu"])
                                                       for v, d in deps.items())]),
        flush=True,
    )  # fmt: skip


def _cpu(c: dict) -> str:
    """A run's CPU condition in a few words (cpu_condition.Held.report)."""
    return (f"[{c['condition']}: {c.get('halts_per_request')} halts and "
            f"{c.get('ipis_per_request')} IPIs per request, others {c['others_cpus_before']} "
            f"CPUs before, wake-up {c['wake_p50_us']} us]")  # fmt: skip


def _medians(rounds: list[dict], args: argparse.Namespace) -> dict:
    """The rounds' medians: truths, replays, errors against both truths."""
    return {
        "truth_tx_iops": _med([r["engine_on_target"]["tx_iops"] for r in rounds]),
        "truth_elapsed_s": _med([r["engine_on_target"]["elapsed_s"] for r in rounds]),
        "timed_truth_tx_iops": _med([r["engine_on_target_timed"]["tx_iops"] for r in rounds])
        if args.duration_truth
        else None,
        "dependent_tx_iops": {
            lt: _med([r["dependent_replay"][lt]["tx_iops"] for r in rounds]) for lt in args.variants
        },
        "afap_tx_iops": _med([r["afap_replay"]["tx_iops"] for r in rounds])
        if rounds[0]["afap_replay"]
        else None,
        "tx_iops_error_pct": {
            lt: _med([r["tx_iops_error_pct"][lt] for r in rounds]) for lt in args.variants
        },
        "tx_iops_error_vs_timed_pct": {
            lt: _med([r["tx_iops_error_vs_timed_pct"][lt] for r in rounds]) for lt in args.variants
        }
        if args.duration_truth
        else None,
        "dependent_tx_span_s": {
            lt: _med([r["dependent_replay"][lt]["tx_span_s"] for r in rounds])
            for lt in args.variants
        },
    }


def _err(x: float, truth: float) -> float:
    return round((x - truth) / truth * 100, 1)


def _med(xs: list[float]) -> float:
    return round(float(statistics.median(xs)), 1)


def measure(args: argparse.Namespace) -> dict:
    model = HddModel(spindles=args.spindles)
    with (
        HybridLab(size_mb=args.size_mb, memory_disk=True, hdd=model) as lab,
        tempfile.TemporaryDirectory(prefix="iotape-depwl-") as tmp,
    ):
        work = Path(tmp)
        pairs = {"hdd-ssd": (lab.slow, lab.fast), "ssd-hdd": (lab.fast, lab.slow)}
        runs = [direction(lab, *pairs[k], work, args) for k in args.directions]
    return {
        "engine": {k: getattr(args, k) for k in ("threads", "mailboxes", "mailbox_size_mb",
                                                 "cache_mb", "hdd_transactions",
                                                 "ssd_transactions", "duration", "ssd_duration")},
        "duration_truth": args.duration_truth,
        "condition": args.condition,
        "cpuidle": cpu.config(),
        "wakes": args.wakes,
        "rounds": args.rounds,
        "long_thinks": args.long_thinks,
        "run_queue": args.run_queue,
        "variants": args.variants,
        "peers": args.peers,
        "calibrate_s": args.calibrate_s,
        "calibration": str(args.calibration) if args.calibration else None,
        "trace": str(args.trace) if args.trace else None,
        "hdd_model": {"spindles": args.spindles},
        "runs": runs,
        "machine": machine(),
    }  # fmt: skip


def main() -> None:
    ap = parser(__doc__.split("\n\n")[0], OUT)
    args = ap.parse_args()
    check(ap, args)
    args.variants = variants(args)
    result = measure(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
