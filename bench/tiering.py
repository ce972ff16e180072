"""The tiering simulator (issue 7): requests per second through one policy, and the sweep.

A synthetic trace of N requests (default 10 M): Zipf-distributed 4 MiB units (so a
hot set and a long tail) on one device over an hour, 70 % reads, 4-256 KiB requests.
Measured, best of `--rounds`, the events already in memory:

- `simulate()` end to end per policy: unit mapping, the policy, hit ratios, timeline,
  skew (everything `iotape analyze tiering --json` prints but loading the run);
- the policy kernels alone (the C simulators over dense unit ids);
- the one-pass sweep against one run per size;
- peer, on the same unit accesses: libCacheSim (`pip install libcachesim`, the C
  library's Python wheel) LRU and S3-FIFO reading an oracleGeneral binary file
  natively; and the in-repo Python reference simulator (written for clarity) on a
  prefix of the trace. Hit ratios are compared with both.

Goal (issue 7): >= 10 M requests/s single-policy. Writes bench/results/tiering.json.

Run: `.venv/bin/python bench/tiering.py [--requests 10000000] [--rounds 2]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from analyzer.tiering import native as N
from analyzer.tiering.events import Events, events_from_columns
from analyzer.tiering.params import Params
from analyzer.tiering.policies import prepare
from analyzer.tiering.presets import params_for
from analyzer.tiering.simulate import simulate
from analyzer.tiering.sweep import sweep, sweep_capacities

ROOT = Path(__file__).resolve().parent.parent
UNIT = 4 << 20


def make_events(n: int, seed: int = 1) -> Events:
    rng = np.random.default_rng(seed)
    # Zipf ranks scattered over a 4 TiB device so hot units are not neighbours.
    units = rng.zipf(1.1, n) % 1_000_000
    perm = rng.permutation(1_000_000)
    units = perm[units]
    nbytes = rng.choice([4096, 32768, 65536, 262144], n, p=[0.4, 0.4, 0.1, 0.1])
    within = rng.integers(0, (UNIT - 262144) // 4096, n) * 4096
    t = np.sort(rng.integers(0, 3600 * 10**9, n))
    op = (rng.random(n) >= 0.7).astype(np.int8)
    return events_from_columns(t, t + 200_000, np.full(n, 8 << 20), units * UNIT + within,
                                 nbytes, op)  # fmt: skip


def best(fn, rounds: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def oracle_general(path: Path, ids: np.ndarray) -> None:
    """libCacheSim's oracleGeneral binary: u32 time, u64 id, u32 size, i64 next access."""
    dt = np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    rec = np.zeros(len(ids), dtype=dt)
    rec["t"] = np.arange(len(ids)) // 1000
    rec["id"] = ids.astype(np.uint64) + 1
    rec["size"] = 1  # one unit: capacities are in units, as ours
    nxt = N.next_use(ids)
    rec["next"] = np.where(nxt == N.NEVER, -1, nxt)
    rec.tofile(path)


def libcachesim_peer(ids: np.ndarray, k: int, rounds: int) -> dict:
    try:
        import libcachesim as lcs
    except ImportError:
        return {"available": False, "note": "pip install libcachesim (a dev dependency)"}
    out: dict = {"available": True, "version": getattr(lcs, "__version__", "?")}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.oracleGeneral"
        oracle_general(path, ids)
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        for name, cls in (("lru", lcs.LRU), ("s3fifo", lcs.S3FIFO)):

            def run(cls=cls):
                return cls(k).process_trace(reader)

            s, (miss, _) = best(run, rounds)
            out[name] = {"seconds": s, "requests_per_s": len(ids) / s, "hit_ratio": 1 - miss}
    return out


def simulate_each(ev: Events, capacity: int, rounds: int) -> dict:
    """`simulate()` end to end, per policy."""
    out_: dict = {}
    n = len(ev)
    runs = [("lru", None), ("s3fifo", None), ("tiering", "msa"), ("tiering", "easytier")]
    for policy, preset in [*runs, ("oracle", "msa"), ("belady", None)]:
        p = params_for(policy, preset, unit=UNIT, capacity=capacity)
        s, out = best(lambda p=p: simulate(ev, p), rounds)
        key = policy if preset is None else f"{policy}-{preset}"
        out_[key] = {
            "seconds": s,
            "requests_per_s": n / s,
            "hit_ratio_count": out["hit_ratio"]["count"]["all"],
            "hit_ratio_bytes": out["hit_ratio"]["bytes"]["all"],
        }
        print(f"simulate {key:18s} {n / s / 1e6:7.2f} M req/s  hit {out['hit_ratio']['count']}")
    return out_


def kernels(ids: np.ndarray, n_units: int, k: int, rounds: int) -> dict:
    """The C kernels alone over the accesses a read cache sees."""
    out: dict = {}
    for name, fn in (("lru", N.lru), ("s3fifo", N.s3fifo), ("belady", N.belady)):
        s, flags = best(lambda fn=fn: fn(ids, n_units, k), rounds)
        out[name] = {
            "requests_per_s": len(ids) / s,
            "hit_ratio": float((flags & N.HIT).mean()),
        }
    s, _ = best(lambda: N.stack_distances(ids, n_units), rounds)
    out["stack_distances"] = {"requests_per_s": len(ids) / s}
    return out


def python_reference(ids: np.ndarray, n_units: int, k: int, requests: int) -> dict:
    """The Python LRU reference on a prefix, and whether the C agrees with it."""
    m = min(requests, len(ids))
    t0 = time.perf_counter()
    ref = N.lru_reference(np.ascontiguousarray(ids[:m]), k)
    s = time.perf_counter() - t0
    return {
        "requests": m,
        "lru_requests_per_s": m / s,
        "agrees_with_c": bool((ref == N.lru(ids[:m], n_units, k)).all()),
    }


def sweep_vs_singles(ev: Events, p: Params, n_units: int, capacity: int) -> dict:
    """Sweep: one pass against one run per size."""
    caps = sweep_capacities(n_units, UNIT, capacity)
    s_one, sw = best(lambda: sweep(prepare(ev, p), caps), 1)
    t0 = time.perf_counter()
    singles = [simulate(ev, Params(**{**p.__dict__, "capacity": c})) for c in caps]
    s_each = time.perf_counter() - t0
    same = all(
        row["hit_ratio_count"] == one["hit_ratio"]["count"]["all"]
        for row, one in zip(sw["points"], singles, strict=True)
    )
    return {"sizes": len(caps), "one_pass_seconds": s_one, "one_run_per_size_seconds":
            s_each, "identical_hit_ratios": same}  # fmt: skip


def vs_libcachesim(res: dict) -> dict:
    lcs = res["libcachesim"]
    return {
        "lru_simulate_speedup": res["simulate"]["lru"]["requests_per_s"]
        / lcs["lru"]["requests_per_s"],
        "lru_kernel_speedup": res["kernels"]["lru"]["requests_per_s"]
        / lcs["lru"]["requests_per_s"],
        "lru_hit_ratio_equal": abs(lcs["lru"]["hit_ratio"] - res["kernels"]["lru"]["hit_ratio"])
        < 1e-12,
        "s3fifo_hit_ratio_delta": res["kernels"]["s3fifo"]["hit_ratio"]
        - lcs["s3fifo"]["hit_ratio"],
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reference-requests", type=int, default=500_000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "tiering.json")
    a = ap.parse_args()

    ev = make_events(a.requests)
    capacity = 40 << 30  # 10,240 units of 4 MiB
    res: dict = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "requests": len(ev),
        "unit": UNIT,
        "capacity": capacity,
        "simulator": "C" if N.native() else "Python reference",
        "goal_requests_per_s": 10_000_000,
        "simulate": simulate_each(ev, capacity, a.rounds),
    }
    # The kernels alone, and the peers, over the same read accesses a read cache sees.
    p = params_for("lru", unit=UNIT, capacity=capacity)
    r = prepare(ev, p)
    ids = r.acc.uid[r.counted]
    k = p.units(capacity)
    res["cache_accesses"] = len(ids)
    res["kernels"] = kernels(ids, r.acc.n_units, k, a.rounds)
    res["libcachesim"] = libcachesim_peer(ids, k, a.rounds)
    res["python_reference"] = python_reference(ids, r.acc.n_units, k, a.reference_requests)
    res["sweep"] = sweep_vs_singles(ev, p, r.acc.n_units, capacity)
    if res["libcachesim"].get("available"):
        res["vs_libcachesim"] = vs_libcachesim(res)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k != "simulate"}, indent=2))


if __name__ == "__main__":
    main()
