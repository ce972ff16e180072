"""Where the recorder's CPU goes: `perf record -a -g` over the bench's fio run
(bench/record_overhead.py's job and loop device) under one loader, each sample
put to the leaf it landed in: a BPF program's own code, the clock it calls
(`bpf_ktime_get_ns` and below), `bpf_get_current_task_btf`, the tracepoints'
dispatch to the programs (`bpf_trace_run*`, which BPF_STATS_RUN_TIME leaves
out), or the loader process; shown as ns a request (the samples' CPU time over
fio's requests in the window). cpu-clock sampling (this VM has no PMU) lands on
slow instructions, so small shares are rough; the sums agree with --bpf-stats.

Run as root, under the bench lock:
`flock /tmp/iotape-bench.lock .venv/bin/python bench/record_profile.py [--loader PATH]`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record_overhead import IOTAPE, bench_loop, fio_cmd

PROG = re.compile(r"bpf_prog_\w+_(on_\w+)\+")
CLOCK = re.compile(r"\b(read_tsc|ktime_get_mono_fast_ns|bpf_ktime_get_ns)\+")
DISPATCH = re.compile(r"\b(bpf_trace_run\d|__bpf_trace_\w+|__bpf_prog_(enter|exit)\w*)\+")


def classify(sample: list[str], loader: str) -> str | None:
    """The bucket of one sample (its comm line, then its frames, leaf first)."""
    if sample[0].startswith(loader[:15]):
        return "loader"
    frames = sample[1:]
    if not frames:
        return None
    leaf = frames[0]
    prog = next((m.group(1) for f in frames if (m := PROG.search(f))), None)
    if prog is None:
        return "dispatch" if DISPATCH.search(leaf) else None
    if PROG.search(leaf):
        return f"{prog} own"
    if CLOCK.search(leaf):
        return f"{prog} clock"
    if "bpf_get_current_task" in leaf:
        return f"{prog} task"
    return f"{prog} other"


def profile(loader: Path, tmp: Path, runtime: int, window: int) -> dict:
    with bench_loop() as dev:
        env = {**os.environ, "IOTAPE_REC": str(loader)}
        cmd = [*IOTAPE, "record", "-d", dev, "-o", str(tmp / "t.iot"), "--force", "--json"]
        fio = fio_cmd(dev, runtime, tmp / "fio.json")
        rec = subprocess.Popen([*cmd, "--", *fio], env=env, stdout=subprocess.DEVNULL)
        try:
            time.sleep(2)
            perf = ["perf", "record", "-a", "-g", "-o", str(tmp / "perf.data")]
            perf += ["--", "sleep", str(window)]
            subprocess.run(perf, check=True, stderr=subprocess.DEVNULL)
        finally:
            rec.wait()
    script = subprocess.run(
        ["perf", "script", "-i", str(tmp / "perf.data"), "-F", "comm,ip,sym,symoff"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    samples = [
        [ln.strip() for ln in block.splitlines() if ln.strip()] for block in script.split("\n\n")
    ]
    samples = [s for s in samples if s]
    buckets = collections.Counter(b for s in samples if (b := classify(s, loader.name)))
    job = json.loads((tmp / "fio.json").read_text())["jobs"][0]["read"]
    requests = job["iops"] * window  # fio's mean rate over the window
    ns_per_sample = window * (os.cpu_count() or 1) * 1e9 / len(samples)
    return {
        "loader": str(loader),
        "fio_iops": job["iops"],
        "samples": len(samples),
        "ns_per_request": {
            k: round(v * ns_per_sample / requests, 1) for k, v in sorted(buckets.items())
        },
        "share_pct": {k: round(100 * v / len(samples), 2) for k, v in sorted(buckets.items())},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parent.parent
    ap.add_argument("--loader", type=Path, default=root / "recorder" / "build" / "iotape-rec")
    ap.add_argument("--window", type=int, default=3, help="seconds of perf record")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/record_profile.py: needs root (BPF, perf and loop devices)")
    if not args.loader.is_file():
        raise SystemExit(f"bench/record_profile.py: --loader {args.loader}: no such file")
    with tempfile.TemporaryDirectory(prefix="iotape-prof-") as tmp:
        out = profile(args.loader.resolve(), Path(tmp), args.window + 3, args.window)
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
