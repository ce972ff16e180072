"""What a recorded short think is made of (issue 34): the reference workload
(exchange2013, throughput mode, THREADS session threads, database and log on one
device) on the HDD-like disk model and on the SSD-like loop device, recorded with
its wakes; per engine thread (ese-*), from /proc/PID/task/TID/schedstat sampled
while it runs (on-CPU ns, run-queue wait ns, times scheduled in), and from a
bpftrace probe (sched_waking of an ese-* thread to its sched_switch in: the whole
wake latency, which run_delay misses where the wake is queued to an idle CPU and
enqueued there only after its IPI), per request: on-CPU time, run-queue wait,
wake latency, and the recorded think times (completion of the thread's previous
request to its next issue) from the trace.

    flock /tmp/iotape-bench.lock .venv/bin/python bench/think_split.py
    (root; about a minute; JSON in bench/results/think-split.json)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from hybrid_lab import HybridLab
from replay_lab import ROOT, machine

from analyzer.lab.hdd import HddModel
from recorder.tracefile.reader import open_trace
from replayer.plan.deps import times

OUT = ROOT / "bench" / "results" / "think-split.json"
IOTAPE = str(ROOT / ".venv" / "bin" / "iotape")
SHORT_NS = 2_000_000  # a short think: under the planner's LONG_THINK_NS

BPF = r"""
tracepoint:sched:sched_waking /strncmp(args->comm, "ese-", 4) == 0/ {
  @t[args->pid] = nsecs; @rem[args->pid] = (args->target_cpu != cpu);
}
tracepoint:sched:sched_switch /@t[args->next_pid]/ {
  $d = nsecs - @t[args->next_pid];
  @lat[args->next_pid, @rem[args->next_pid]] = stats($d);
  delete(@t[args->next_pid]);
}
"""


def _wl(dev: str, args: argparse.Namespace) -> list[str]:
    return [
        IOTAPE, "workload", "run", "--db-path", dev, "--log-path", dev, "--profile",
        "exchange2013", "--mode", "throughput", "--threads", str(args.threads), "--mailboxes",
        "50", "--mailbox-size-mb", "4", "--databases", "1", "--copies", "1",
        "--cache-max-mb", "8", "--destroy-data-on", dev,
    ]  # fmt: skip


def _tasks(ppid: int) -> dict[int, tuple[str, list[int]]]:
    """The engine's (a child of `ppid`) ese-* threads: tid -> (name, schedstat)."""
    out: dict[int, tuple[str, list[int]]] = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            st = Path(f"/proc/{p}/stat").read_text()
            if int(st.rsplit(")", 1)[1].split()[1]) != ppid:
                continue
            for t in os.listdir(f"/proc/{p}/task"):
                name = Path(f"/proc/{p}/task/{t}/comm").read_text().strip()
                if name.startswith("ese-"):
                    ss = Path(f"/proc/{p}/task/{t}/schedstat").read_text().split()
                    out[int(t)] = (name, [int(x) for x in ss])
        except (OSError, ValueError, IndexError):
            continue
    return out


def _bpf_stats(text: str) -> dict[int, dict[int, tuple[int, int]]]:
    """@lat[tid, remote]: count N, average A, total T -> {tid: {remote: (N, T)}}."""
    out: dict[int, dict[int, tuple[int, int]]] = {}
    for m in re.finditer(r"@lat\[(\d+), (\d+)\]: count (\d+), average \d+, total (\d+)", text):
        out.setdefault(int(m[1]), {})[int(m[2])] = (int(m[3]), int(m[4]))
    return out


def _thinks(trace: Path) -> dict[int, np.ndarray]:
    """Per tid, the think times (ns) of its requests that had a previous one."""
    with open_trace(trace) as t:
        r = t.read_all()
    start, end = times(r)
    out = {}
    for tid in np.unique(r["tid"]).tolist():
        rows = np.flatnonzero(r["tid"] == tid)
        o = rows[np.argsort(start[rows], kind="stable")]
        s, e = start[o], end[o]
        # latest completion before each issue (a sync thread: its previous request)
        latest = np.maximum.accumulate(e)[:-1]
        th = s[1:] - latest
        out[int(tid)] = th[th >= 0]
    return out


def run(dev: str, label: str, args: argparse.Namespace, work: Path) -> dict:
    subprocess.run([*_wl(dev, args), "--duration", "1", "--json"], check=True, capture_output=True)
    trace = work / f"{label}.iot"
    bt = subprocess.Popen(["bpftrace", "-e", BPF], stdout=subprocess.PIPE, text=True)
    time.sleep(args.bpf_start)  # bpftrace attaches in a few seconds on this VM
    dur = args.duration[label]
    eng = subprocess.Popen(
        [*_wl(dev, args), "--duration", str(dur), "--json", "--record", str(trace), "-d", dev,
         "--record-wakes"], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    first: dict[int, tuple[str, list[int]]] = {}
    last: dict[int, tuple[str, list[int]]] = {}
    first_at: dict[int, float] = {}
    last_at: dict[int, float] = {}
    while eng.poll() is None:
        now = time.monotonic()
        for tid, v in _tasks(eng.pid).items():
            if tid not in first:
                first[tid], first_at[tid] = v, now
            last[tid], last_at[tid] = v, now
        time.sleep(0.02)
    res = json.loads(eng.stdout.read() if eng.stdout else "{}")
    bt.send_signal(signal.SIGINT)
    bpf = _bpf_stats(bt.communicate(timeout=60)[0])
    thinks = _thinks(trace)
    threads = []
    for tid, (name, b) in sorted(last.items(), key=lambda kv: kv[1][0]):
        a = first[tid][1]
        th = thinks.get(tid, np.zeros(0, np.int64))
        if not len(th):
            continue
        window = last_at[tid] - first_at[tid]
        # the requests issued while sampled: the thread's share of its whole trace
        n = len(th) + 1
        share = min(1.0, window / res["elapsed_s"]) if res.get("elapsed_s") else 1.0
        nreq = max(1.0, n * share)
        short = th[th < SHORT_NS]
        wk = bpf.get(tid, {})
        wk_n = sum(c for c, _ in wk.values())
        wk_t = sum(t for _, t in wk.values())
        threads.append(
            {
                "thread": name,
                "tid": tid,
                "requests": n,
                "sampled_s": round(window, 3),
                "per_request_us": {
                    "on_cpu": round((b[0] - a[0]) / nreq / 1e3, 1),
                    "run_delay": round((b[1] - a[1]) / nreq / 1e3, 1),
                    "scheduled_in": round((b[2] - a[2]) / nreq, 2),
                    "wake_latency": round(wk_t / n / 1e3, 1),
                },
                "wakes": {
                    "count": wk_n,
                    "mean_us": round(wk_t / wk_n / 1e3, 1) if wk_n else None,
                    "remote_share": round(wk.get(1, (0, 0))[0] / wk_n, 3) if wk_n else None,
                    "remote_mean_us": round(wk[1][1] / wk[1][0] / 1e3, 1) if wk.get(1) else None,
                    "local_mean_us": round(wk[0][1] / wk[0][0] / 1e3, 1) if wk.get(0) else None,
                },
                "short_think_us": {
                    "count": len(short),
                    "median": round(float(np.median(short)) / 1e3, 1) if len(short) else None,
                    "mean": round(float(short.mean()) / 1e3, 1) if len(short) else None,
                },
                "think_mean_us": round(float(th.mean()) / 1e3, 1),
            }
        )
        print(f"{label} {name}: {json.dumps(threads[-1])}", flush=True)
    return {"device": label, "elapsed_s": res.get("elapsed_s"), "threads": threads}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hdd-duration", type=float, default=6)
    ap.add_argument("--ssd-duration", type=float, default=1)
    ap.add_argument("--bpf-start", type=float, default=4)
    ap.add_argument("--keep", type=Path, help="copy the traces here")
    ap.add_argument("-o", "--output", type=Path, default=OUT)
    args = ap.parse_args()
    args.duration = {"hdd": args.hdd_duration, "ssd": args.ssd_duration}
    runs = []
    with (
        HybridLab(size_mb=512, memory_disk=True, hdd=HddModel(spindles=2)) as lab,
        tempfile.TemporaryDirectory(prefix="iotape-thinksplit-") as tmp,
    ):
        for dev, label in ((lab.slow, "hdd"), (lab.fast, "ssd")):
            runs.append(run(dev, label, args, Path(tmp)))
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / f"{label}.iot").write_bytes((Path(tmp) / f"{label}.iot").read_bytes())
    doc = {"runs": runs, "machine": machine()}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
