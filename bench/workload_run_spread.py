"""Why the reference workload's short runs on the SSD-like device swing (issue 34's
truth): the engine (exchange2013, throughput mode, the settings of
bench/replay_dependent_workload.py) run back to back on the SSD-like loop device
over /dev/shm, each round a run of each kind: `--duration` D for each D of
--durations, and `--transactions` N for each N of --transactions; before each
the bench's own preparation (`--prep`: `duration`, a 1 s run as
replay_dependent_workload.py did before this; `fresh`, databases created anew
by a run of 1 operation per session and the log region zeroed; `none`).

Per run: transactional IOPS as the bench computes them (db-read + db-write
requests over the engine's elapsed time) and over the load alone
(`achieved_tx_iops`), the engine's CPU time (wait4's rusage of the engine
process, not the Python front end: the engine is started directly), its
share of the run's wall time, how busy the host's CPUs were just before the run
(the other work on it) and during it (/proc/stat; steal), the 1-minute load
average, the engine's involuntary context switches (preempted), the CPU time
of a fixed loop in this process just before (`probe_ms`: the vCPU's own
speed) and the cache's hit ratio. If a run's IOPS follow its CPU share and
its transactional requests per CPU second stay put, the swing is this shared
host's CPU, not the engine or the device.

`--conditions` runs each kind in each CPU condition of bench/cpu_condition.py
(idle: as the VM is; awake: /dev/cpu_dma_latency held at 0, idle vCPUs poll
instead of halting; haltpoll: the governor's own guest polling on; spin: a
nice-19 busy loop beside), interleaved in every round; per run the halts and
IPIs per request and a cross-vCPU wake-up round trip in that condition.

    flock /tmp/iotape-bench.lock env PYTHONPATH=$PWD .venv/bin/python \\
        bench/workload_run_spread.py --rounds 8 [--conditions idle,awake,haltpoll,spin]
    (root; JSON in bench/results/workload-run-spread.json)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import cpu_condition as cpu
from hybrid_lab import HybridLab
from replay_lab import ROOT, machine
from workload_truth import config, zero_logs

from schemas.streams import TRANSACTIONAL
from workload import engine

OUT = ROOT / "bench" / "results" / "workload-run-spread.json"
TX = tuple(TRANSACTIONAL)
QUIET_S = 0.5  # the host's load is sampled this long before each run
PROBE_LOOP = 1_000_000  # about 30-60 ms of one CPU


def probe() -> float:
    """CPU milliseconds this process takes for a fixed loop: the vCPU's own speed
    (a stall the guest does not see as steal, or a slower clock, lands in it)."""
    t = time.thread_time()
    x = 0
    for i in range(PROBE_LOOP):
        x += i
    return (time.thread_time() - t) * 1e3


def run(cfg: engine.WorkloadConfig, condition: str = "idle") -> dict:
    """The engine itself (no front end) in `condition` (cpu_condition.hold), its
    result, its own CPU time and what the VM's CPUs did around it."""
    lay = engine.validate(cfg)
    with tempfile.TemporaryDirectory(prefix="truth-spread-") as tmp:
        result = Path(tmp) / "r.json"
        argv = engine.engine_argv(cfg, lay, result, quiet=True)
        speed = probe()
        # held: the other engineers' load just before, the condition's samples around
        with cpu.held(condition, QUIET_S) as h:
            t = time.monotonic()
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _, status, ru = os.wait4(proc.pid, 0)
            wall = time.monotonic() - t
        if status:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise SystemExit(f"the engine failed: {err.strip()}")
        res = json.loads(result.read_text())
    cpu_s = ru.ru_utime + ru.ru_stime
    return {"result": res, "wall_s": wall, "cpu_s": cpu_s, "held": h,
            "preempted": ru.ru_nivcsw, "probe_ms": speed, "user_s": ru.ru_utime,
            "sys_s": ru.ru_stime}  # fmt: skip


def prepare(dev: str, args: argparse.Namespace) -> None:
    if args.prep == "duration":
        run(config(dev, args, duration=1.0))
    elif args.prep == "fresh":
        run(config(dev, args, create="recreate", transactions=1))
        zero_logs(dev, args)


def figures(r: dict) -> dict:
    res = r["result"]
    db = res["databases"][0]
    n = sum(db["streams"].get(k, {}).get("count", 0) for k in TX)
    cache = db["cache"]
    acc = cache["hits"] + cache["misses"]
    tx_load = db["tx_ios_load"]
    cond = r["held"].report(n)
    return {
        "elapsed_s": res["elapsed_s"],
        "load_s": res["load_s"],
        "operations": db["operations"],
        "tx_requests": n,
        "tx_iops": round(n / res["elapsed_s"], 1),
        "achieved_tx_iops": round(tx_load / res["load_s"], 1),
        "cpu_s": round(r["cpu_s"], 3),
        "user_s": round(r["user_s"], 3),
        "sys_s": round(r["sys_s"], 3),
        "cpu_share": round(r["cpu_s"] / r["wall_s"], 3),  # of one CPU
        "tx_per_cpu_s": round(n / r["cpu_s"], 1) if r["cpu_s"] else None,
        # All CPUs busy during the run (the engine, the loop device's kernel workers
        # serving its I/O, everyone else) and just before it (everyone else).
        "host_cpus": cond["host_cpus"],
        "host_cpus_before": cond["others_cpus_before"],
        "preempted": r["preempted"],  # the engine's involuntary context switches
        "probe_ms": round(r["probe_ms"], 1),
        "preempted_per_ktx": round(r["preempted"] / n * 1000, 2) if n else None,
        "steal_s": cond["steal_s"],
        # The idle states the VM's CPUs went through during the run, the IPIs,
        # and the cross-vCPU wake-up round trip just before it, in its condition.
        "idle": cond["idle"],
        "idle_entries_per_request": cond.get("idle_entries_per_request"),
        "halts_per_request": cond.get("halts_per_request"),
        "ipis_per_request": cond.get("ipis_per_request"),
        "wake_p50_us": cond["wake_p50_us"],
        "loadavg_1m": float(Path("/proc/loadavg").read_text().split()[0]),
        "cache_hit_ratio": round(cache["hits"] / acc, 3) if acc else None,
    }


def _corr(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return round(statistics.correlation(xs, ys), 2)


def summary(runs: list[dict]) -> dict:
    iops = [r["tx_iops"] for r in runs]
    share = [r["cpu_share"] for r in runs]
    per_cpu = [r["tx_per_cpu_s"] for r in runs if r["tx_per_cpu_s"]]
    other = [r["host_cpus_before"] for r in runs]
    pre = [r["preempted_per_ktx"] for r in runs]
    pr = [r["probe_ms"] for r in runs]
    return {
        "tx_iops": [min(iops), round(statistics.median(iops), 1), max(iops)],
        "tx_iops_max_over_min": round(max(iops) / min(iops), 2),
        "cpu_share": [min(share), round(statistics.median(share), 3), max(share)],
        "tx_per_cpu_s": [min(per_cpu), round(statistics.median(per_cpu), 1), max(per_cpu)],
        "tx_per_cpu_s_max_over_min": round(max(per_cpu) / min(per_cpu), 2),
        "host_cpus_before": [min(other), round(statistics.median(other), 2), max(other)],
        "preempted_per_ktx": [min(pre), round(statistics.median(pre), 2), max(pre)],
        "corr_tx_iops_cpu_share": _corr(iops, share),
        "corr_tx_iops_host_cpus_before": _corr(iops, other),
        "corr_tx_iops_preempted_per_ktx": _corr(iops, pre),
        "probe_ms": [min(pr), round(statistics.median(pr), 1), max(pr)],
        "corr_tx_per_cpu_s_probe_ms": _corr([r["tx_per_cpu_s"] or 0.0 for r in runs], pr),
        "corr_tx_iops_probe_ms": _corr(iops, pr),
        "halts_per_request": _range([r["halts_per_request"] for r in runs]),
        "corr_tx_iops_halts_per_request": _corr(iops, [r["halts_per_request"] for r in runs]),
        "ipis_per_request": _range([r["ipis_per_request"] for r in runs]),
        "wake_p50_us": _range([r["wake_p50_us"] for r in runs]),
    }


def _range(xs: list) -> list:
    xs = [x for x in xs if x is not None]
    return [min(xs), round(statistics.median(xs), 3), max(xs)] if xs else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--durations", type=lambda v: [float(x) for x in v.split(",") if x],
                    default=[0.5, 2.0])  # fmt: skip
    ap.add_argument("--transactions", type=lambda v: [int(x) for x in v.split(",")],
                    default=[8000])  # fmt: skip
    ap.add_argument("--prep", choices=("duration", "fresh", "none"), default="duration")
    ap.add_argument(
        "--conditions",
        type=lambda v: v.split(","),
        default=["idle"],
        help="each run in each of these CPU conditions (bench/cpu_condition.py: idle, "
        "awake, haltpoll, spin), interleaved: kinds KIND+CONDITION",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mailboxes", type=int, default=50)
    ap.add_argument("--mailbox-size-mb", type=float, default=4)
    ap.add_argument("--cache-mb", type=float, default=8)
    ap.add_argument("--size-mb", type=int, default=512)
    ap.add_argument("-o", "--output", type=Path, default=OUT)
    args = ap.parse_args()
    kinds = [f"{d:g}s" for d in args.durations] + [f"tx{n}" for n in args.transactions]
    bad = set(args.conditions) - set(cpu.CONDITIONS)
    if bad:
        ap.error(f"--conditions: {', '.join(sorted(bad))}: not one of {', '.join(cpu.CONDITIONS)}")
    kinds = [f"{k}+{c}" for k in kinds for c in args.conditions]
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    with HybridLab(size_mb=args.size_mb, memory_disk=True) as lab:
        dev = lab.fast
        run(config(dev, args, create="recreate", transactions=1))  # the databases exist
        for k in range(args.rounds):
            for kind in kinds:
                prepare(dev, args)
                base, _, condition = kind.partition("+")
                kw = ({"duration": float(base[:-1])} if base.endswith("s")
                      else {"transactions": int(base[2:])})  # fmt: skip
                f = figures(run(config(dev, args, **kw), condition))
                runs[kind].append(f)
                print(f"round {k + 1} {kind}: {f['tx_iops']} tx IOPS over {f['elapsed_s']} s, "
                      f"CPU {f['cpu_s']} s ({f['cpu_share']} of a CPU), {f['tx_per_cpu_s']} tx per "
                      f"CPU s; {f['preempted_per_ktx']} preempted per 1k tx; host "
                      f"{f['host_cpus_before']} CPUs busy before, {f['host_cpus']} during; probe "
                      f"{f['probe_ms']} ms; load {f['loadavg_1m']}; halts "
                      f"{f['halts_per_request']} and IPIs {f['ipis_per_request']} per tx; "
                      f"wake-up round trip {f['wake_p50_us']} us", flush=True)  # fmt: skip
    out = {
        "engine": {k: getattr(args, k) for k in ("threads", "mailboxes", "mailbox_size_mb",
                                                 "cache_mb")},
        "prep": args.prep,
        "rounds": args.rounds,
        "cpuidle": cpu.config(),
        "runs": runs,
        "summary": {k: summary(v) for k, v in runs.items()},
        "machine": machine(),
    }  # fmt: skip
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=2) + "\n")
    for kind, s in out["summary"].items():
        print(kind, json.dumps(s))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
