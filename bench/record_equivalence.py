"""Two loaders on one fio run: the same records, field by field, but the times.

A change to the recorder's hot path (recorder/bpf/iotape.bpf.c, the loader's
drain) must not change what it records. This runs an older loader (--old, a
built recorder/build/iotape-rec kept aside) and the current one at once, both
attached to one loop device over /dev/shm, while fio does random reads and
writes with an fsync every 8 writes from a cgroup of its own (so the cgroup id,
the flush linking and the thread-name labels are all exercised). Every record
must be equal in every field but the three times (each loader's are relative to
its own start, and the second program runs after the first), as a multiset, and
the footers must count the same lost, pre_start, in_flight_at_stop,
device_flushes and completion_unseen. It also counts, per loader, the records
that follow one completed later (the file's completion order). Writes JSON;
exits 1 when they differ.

Run as root: `.venv/bin/python bench/record_equivalence.py --old /tmp/iotape-rec.old`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from record_overhead import IOTAPE, bench_loop

from recorder.tracefile import open_trace

ROOT = Path(__file__).resolve().parent.parent
FIELDS = (
    "dev",
    "offset",
    "bytes",
    "op",
    "flags",
    "error",
    "pid",
    "tid",
    "cgroup_id",
    "comm",
    "stream",
)
FOOTER_KEYS = ("lost", "pre_start", "in_flight_at_stop", "device_flushes", "completion_unseen")


def fio_cmd(dev: str, runtime: int, out: Path) -> list[str]:
    return [
        "fio",
        "--name=equiv",
        f"--filename={dev}",
        "--direct=1",
        "--rw=randrw",
        "--bs=4k",
        "--ioengine=io_uring",
        "--iodepth=16",
        "--numjobs=2",
        "--fsync=8",
        "--group_reporting",
        "--time_based",
        f"--runtime={runtime}",
        "--output-format=json",
        f"--output={out}",
    ]


def multiset(recs: np.ndarray) -> Counter:
    cols = [recs[f].tolist() for f in FIELDS]
    return Counter(zip(*cols, strict=True))


TIMES = ("ts_queue_ns", "ts_issue_ns", "ts_complete_ns")


def time_deltas(recs: dict[str, np.ndarray], starts: dict[str, int]) -> dict:
    """Per time column, the new loader's time less the old one's for the same
    request (on the monotonic clock: each file's times plus its start), as
    quantiles in ns, and per loader the records whose time is unknown (0).
    Requests are paired by their other fields, then in completion order: only
    meaningful when the records are equal as a multiset."""
    order = {}
    for n, r in recs.items():
        done = r["ts_complete_ns"].astype(np.int64) + starts[n]
        order[n] = np.lexsort([done, *(r[f] for f in reversed(FIELDS[:-2]))])
    out: dict = {}
    for col in TIMES:
        old, new = (recs[n][col][order[n]].astype(np.int64) for n in ("old", "new"))
        known = (old > 0) & (new > 0)
        d = (new + starts["new"]) - (old + starts["old"])
        q = np.percentile(d[known], [1, 50, 99]) if known.any() else [0, 0, 0]
        out[col] = {
            "new_minus_old_ns_p1_p50_p99": [int(x) for x in q],
            "unknown": {n: int((recs[n][col] == 0).sum()) for n in ("old", "new")},
        }
    out["queue_after_issue"] = {
        n: int((r["ts_queue_ns"] > r["ts_issue_ns"]).sum()) for n, r in recs.items()
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True, help="the older iotape-rec")
    ap.add_argument("--new", type=Path, default=ROOT / "recorder" / "build" / "iotape-rec")
    ap.add_argument("--runtime", type=int, default=6)
    ap.add_argument(
        "--output", type=Path, default=ROOT / "bench" / "results" / "recorder_equivalence.json"
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/record_equivalence.py: needs root (BPF, loop devices, cgroups)")
    root = Path("/sys/fs/cgroup/unified")  # cgroup2 beside v1 hierarchies, or the only one
    if not (root / "cgroup.procs").exists():
        root = Path("/sys/fs/cgroup")
    cgroup = root / f"iotape-equiv-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="iotape-equiv-") as tmpdir, bench_loop() as dev:
        tmp = Path(tmpdir)
        cgroup.mkdir()
        try:
            loaders = {}
            for name, path in (("old", args.old), ("new", args.new)):
                cmd = [*IOTAPE, "record", "-d", dev, "-o", str(tmp / f"{name}.iot"), "--json"]
                cmd += ["--duration", str(args.runtime + 8)]
                env = {**os.environ, "IOTAPE_REC": str(path)}
                loaders[name] = subprocess.Popen(
                    cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            time.sleep(4)  # both attached (a load takes well under a second)
            fio_out = tmp / "fio.json"
            fio = " ".join(fio_cmd(dev, args.runtime, fio_out))
            script = f"echo $$ > {cgroup}/cgroup.procs && exec {fio}"
            subprocess.run(["sh", "-c", script], check=True)
            for name, p in loaders.items():
                _, err = p.communicate(timeout=120)
                if p.returncode != 0:
                    raise SystemExit(f"{name} loader failed: {err.strip()}")
        finally:
            cgroup.rmdir()
        job = json.loads(fio_out.read_text())["jobs"][0]
        fio_total = sum(job.get(k, {}).get("total_ios", 0) for k in ("read", "write", "sync"))
        traces = {n: open_trace(tmp / f"{n}.iot") for n in ("old", "new")}
        recs = {n: t.read_all() for n, t in traces.items()}
        sets = {n: multiset(r) for n, r in recs.items()}
        footers = {n: {k: (t.footer or {}).get(k) for k in FOOTER_KEYS} for n, t in traces.items()}
        only_old = sum((sets["old"] - sets["new"]).values())
        only_new = sum((sets["new"] - sets["old"]).values())
        cgroups = {n: sorted({int(c) for c in r["cgroup_id"]}) for n, r in recs.items()}
        # Records out of completion order in the file (each loader's own times).
        starts = {n: int(t.header.get("mono_start_ns", 0)) for n, t in traces.items()}
        times = time_deltas(recs, starts) if only_old == only_new == 0 else None
        inversions = {
            n: int((np.diff(r["ts_complete_ns"].astype(np.int64)) < 0).sum())
            for n, r in recs.items()
        }
    result = {
        "benchmark": "recorder-equivalence",
        "old": str(args.old),
        "new": str(args.new),
        "fio": "randrw 4k io_uring iodepth=16 numjobs=2 fsync=8, own cgroup",
        "fio_total_ios": fio_total,
        "records": {n: len(r) for n, r in recs.items()},
        "fields_compared": list(FIELDS),
        "only_in_old": only_old,
        "only_in_new": only_new,
        "footers": footers,
        "cgroup_ids": cgroups,
        "ts_complete_inversions": inversions,
        "times": times,
        "equal": only_old == 0 and only_new == 0 and footers["old"] == footers["new"],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    sys.exit(0 if result["equal"] else 1)


if __name__ == "__main__":
    main()
