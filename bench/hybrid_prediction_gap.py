"""Where `iotape lab hybrid`'s predictions part from its measured runs (issue 38), from a
finished lab output directory (no lab run): per configuration the measured gain and
each prediction's (the stored one, the simulator's recomputed with one closed loop
of all threads and with a loop per database with the misses at the baseline's
latency, with a loop per database with the misses queued at the slow device's
predicted load, and, for the read cache, by the closed loop with the array's cache
deciding each hit as the loops issue their reads, `analyzer.lab.predict`), the closed
loop's inputs against what the measured run shows, each database's own gain, the
replay's per-stream latencies and rates against the measured run's, how warm the
replay and the measured run were, and how many reads follow a write to the same
page within 0.3 / 1 s (the engine's access pattern at its own rate).

    PYTHONPATH=$PWD .venv/bin/python bench/hybrid_prediction_gap.py DIR [DIR ...] [-o FILE]
        [--cpu FILE]
    (no root; JSON on stdout; about 10-60 s a directory)

`--cpu`: bench/hybrid_host_cpu.py's measurement of each directory's baseline CPU, for
outputs saved before the lab recorded it (`host_cpu`); with it (or the run's own),
`after` is the prediction without the host's cores and `cpu` with them
(analyzer/lab/hostcpu.py).

The database regions are laid out as workload/layout.py does on a raw device (the
logs at its end, the databases in equal whole MiB parts before them); the logs'
start is read off the trace (the lowest offset of a log stream, each device's own).
Devices of a two-controller run are laid end to end (one simulated tier or cache
over both, where the array has one per controller: stated, not modelled).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

import json_out
import numpy as np

import schemas
from analyzer.lab import destage, hostcpu, hybrid, predict, slowqueue
from analyzer.lab.array import ArrayModel
from analyzer.tiering.events import COLUMNS, Events, event_rows, events_from_columns
from recorder.tracefile import open_trace
from schemas import stream_group
from schemas.streams import REPORTED, TRANSACTIONAL

MIB = 1 << 20
SPACE = hybrid.SPACE  # each device's offsets, end to end, as hybrid.py's
LOGS = stream_group("per_log")  # the streams on a database's log device
PAGE = 32768


def _trace(path: Path) -> tuple[Events, np.ndarray, dict[str, np.ndarray]]:
    """A trace's Events (devices end to end), each event's stream name, raw columns."""
    with open_trace(str(path)) as tr:
        r = tr.read_all()
    ev = events_from_columns(*(r[c] for c in COLUMNS))
    rows = event_rows(r["op"], r["ts_issue_ns"], r["ts_complete_ns"])
    names = {v: k for k, v in schemas.enum("stream").items()}
    stream = np.array([names.get(int(s), "?") for s in r["stream"][rows]])
    devs = np.unique(ev.dev)
    ev.offset = ev.offset + np.searchsorted(devs, ev.dev).astype(np.int64) * SPACE
    return (
        ev,
        stream,
        {k: r[k] for k in ("ts_issue_ns", "ts_complete_ns", "offset", "bytes")}
        | {
            "stream": np.array([names.get(int(s), "?") for s in r["stream"]]),
            "dev": r["dev"],
        },
    )


def _regions(ev: Events, stream: np.ndarray, on: list[str] | None, n: int) -> list[tuple[int, int]]:
    """The databases' regions (workload/layout.py's split), per device in order."""
    devs = sorted({int(o) // SPACE for o in ev.offset})
    per_dev = [on.count(x) for x in sorted(set(on))] if on else [n]
    out = []
    for d, count in zip(devs, per_dev, strict=True):
        mine = ((ev.offset // SPACE) == d) & np.isin(stream, LOGS)
        logs = int(ev.offset[mine].min()) - d * SPACE
        each = (logs >> 20 << 20) // count // MIB * MIB
        out += [(d * SPACE + i * each, d * SPACE + (i + 1) * each) for i in range(count)]
    return out


def _summary(one: Any, many: Any, queued: Any, closed: Any) -> dict[str, Any]:
    """One configuration's recomputed predictions: before (one loop, a loop per
    database, the queue) and after (hybrid.py's now)."""
    cl = closed["littles_law"]["closed_loop"] or {}
    law = many["littles_law"]
    q_loop = queued["littles_law"]["per_loop"] or {}
    return {
        "one_loop": one["read_throughput_gain"],
        "per_loop": many["read_throughput_gain"],
        "per_loop_law": law["read_throughput_gain"],
        "bound": (many["utilization_bound"] or {}).get("read_throughput_gain"),
        "per_loop_gains": [round(x["gain"], 2) for x in (law["per_loop"] or {}).get("loops", [])],
        "rounds": (law["per_loop"] or {}).get("rounds"),
        "converged": (law["per_loop"] or {}).get("converged"),
        "queued": queued["read_throughput_gain"],
        "queued_law": queued["littles_law"]["read_throughput_gain"],
        "queue": queued["queue"],
        "queued_per_loop": {
            "miss_slowdown": q_loop.get("miss_slowdown"),
            "utilization": q_loop.get("slow_utilization"),
            "gains": [round(x["gain"], 2) for x in q_loop.get("loops", [])],
        },
        # without the host's cores (the prediction before them) and with them
        "after": min(
            g
            for g in (
                (closed["host_cpu"] or {}).get("unbounded_gain", closed["read_throughput_gain"]),
                (closed["utilization_bound"] or {}).get("read_throughput_gain"),
            )
            if g is not None
        ),
        "cpu": closed["read_throughput_gain"] if closed["host_cpu"] else None,
        "host_cpu": closed["host_cpu"],
        "after_queue": closed["queue"],
        "closed_loop": {k: v for k, v in cl.items() if k != "loops"}
        | {"gains": [round(x["gain"], 2) for x in cl.get("loops", [])]},
    }


def _demand(rep: dict[str, Any], res: dict[str, Any], cpu: dict[str, Any] | None) -> Any:
    """The baseline's CPU (`hostcpu.Demand`): the run's own (`host_cpu`, a run made
    since the lab records it) or, for an output saved before, `bench/hybrid_host_cpu.py`'s
    measurement of its shape (`cpu`: its entry for this directory); None: neither."""
    base = rep["configs"]["baseline"]
    if base.get("host_cpu"):
        reads = sum(x["streams"]["db-read"]["count"] for x in res["databases"])
        server = float((base.get("array") or {}).get("cpu_s", 0.0))
        return hostcpu.demand(base["host_cpu"], server, reads)
    if cpu and cpu["measured"].get("demand"):
        return hostcpu.Demand(**cpu["measured"]["demand"])
    return None


def _recompute(d: Path, rep: dict[str, Any], cpu: dict[str, Any] | None = None) -> dict[str, Any]:
    o, s = rep["options"], rep["options"]["sizing"]
    res = json.loads((d / "baseline.result.json").read_text())
    ev, stream, _ = _trace(d / "baseline.iot")
    fast, _, _ = _trace(d / "fast-probe.iot")
    regs = _regions(ev, stream, rep["devices"].get("databases_on"), s["databases"])
    unit = s["unit_kb"] << 10
    db = predict.db_events(ev, regs, unit)
    servers = {"hdd": o["spindles"], "array": o["spindles"] * o.get("controllers", 1)}.get(
        o["device"], 1
    )  # as hybrid.py's
    svc = predict.db_events(replace(ev, lat_ns=slowqueue.service_times(ev, servers)), regs, unit)
    dev = slowqueue.device_time(
        ev, db, svc.lat_ns, float(o["mb_per_s"]), servers, write_back=o["device"] == "array"
    )
    # The array's own disk time in the baseline (destages: hybrid.py's wiring), held
    # fixed before, grown with the writes after (analyzer.lab.destage).
    counters = rep["configs"]["baseline"].get("array")
    base_dev = slowqueue.with_disk_busy(dev, counters)  # the copies as one read each
    model = rep["devices"].get("array_model")
    # The destages by today's model with the run's stored values (a run made before
    # a key was added or dropped: today's value for it, the stored one dropped).
    known = {f.name for f in fields(ArrayModel)}
    now = asdict(ArrayModel.load(changes={k: v for k, v in (model or {}).items() if k in known}))
    dev = slowqueue.with_disk_busy(dev, counters, destage.growth(ev, now, SPACE) if model else ())
    if model:  # as hybrid.py's: a unit's copy reads each of its chunks
        dev = slowqueue.striped(
            dev, unit, int(model["chunk_kb"]) << 10, rep["configs"]["baseline"].get("array")
        )
    reads = sum(x["streams"]["db-read"]["count"] for x in res["databases"])
    per_s = reads / (res.get("load_s") or res["elapsed_s"])
    threads = o["threads"] * s["databases"]
    loops = predict.loops_of(db, regs, unit)
    session = stream[predict.db_mask(ev, regs)] == "db-read"  # the rest: maintenance
    # The array's own cache where the measured cache run had one (its counters count
    # the cache's look-ups); `array38-h1`'s cache was still the engine's.
    looked = rep["configs"]["cache"].get("array") or {}
    own = (looked.get("rcache_hits") or 0) + (looked.get("rcache_misses") or 0) > 0
    tier_in = o.get("tier_in", "") if own else "engine"
    counters = rep["configs"]["baseline"].get("array")
    site = hybrid.cache_site(tier_in, ev, session, regs, counters, model)  # as hybrid.py's
    hit = site.hit
    out: dict[str, Any] = {
        "regions": len(regs),
        "devices": len({r[0] // SPACE for r in regs}),
        "array_hit_path_ms": None if hit is None else hit.path_s * 1e3,
    }
    for key in ("tier", "cache"):
        p = predict.params(key, s["ssd_mb"], s["unit_kb"], o["stats_s"], o["migrate_s"])
        # Before issue 38's cache fix: copies one read each, the law on the
        # baseline's order; after: `hybrid.py`'s prediction now.
        b = base_dev
        one = predict.predict(db, fast, p, threads, per_s, b, queue=False, closed=False)
        many = predict.predict(
            db, fast, p, threads, per_s, b, loops=loops, queue=False, closed=False
        )
        queued = predict.predict(db, fast, p, threads, per_s, b, loops=loops, closed=False)
        closed = predict.predict(
            db, fast, p, threads, per_s, dev, loops=loops, site=site, cpu=_demand(rep, res, cpu)
        )
        out[key] = _summary(one, many, queued, closed)
    return out


def _read_after_write(raw: dict[str, np.ndarray]) -> dict[str, float]:
    """Share of db-reads with a db-write to one of their pages within 0.3 s / 1 s."""
    m = np.isin(raw["stream"], list(TRANSACTIONAL))
    t, done = raw["ts_issue_ns"][m], raw["ts_complete_ns"][m]
    page = raw["offset"][m] // PAGE + raw["dev"][m].astype(np.int64) * (SPACE // PAGE)
    n = np.maximum(raw["bytes"][m] // PAGE, 1)
    w = raw["stream"][m] == "db-write"
    last: dict[int, int] = {}
    ages = []
    for i in np.argsort(t, kind="stable").tolist():
        pages = range(int(page[i]), int(page[i] + n[i]))
        if w[i]:
            for pg in pages:
                last[pg] = int(done[i])
        else:
            a = [int(t[i]) - last[pg] for pg in pages if pg in last]
            ages.append(min(a) / 1e9 if a else np.inf)
    age = np.array(ages)
    return {"within_0.3s": float((age < 0.3).mean()), "within_1s": float((age < 1).mean())}


def _fast_share(raw: dict[str, np.ndarray], first_s: float) -> dict[str, float]:
    """db-reads under 2 ms (hits) in the first `first_s` s and after."""
    m = raw["stream"] == "db-read"
    t = (raw["ts_issue_ns"][m] - raw["ts_issue_ns"].min()) / 1e9
    fast = (raw["ts_complete_ns"][m] - raw["ts_issue_ns"][m]) < 2_000_000
    early = t < first_s
    return {
        "reads_per_s_early": float(early.sum() / first_s),
        "reads_per_s_after": float((~early).sum() / max(t.max() - first_s, 1e-9)),
        "under_2ms_early": float(fast[early].mean()) if early.any() else 0.0,
        "under_2ms_after": float(fast[~early].mean()) if (~early).any() else 0.0,
    }


def gap(d: Path, cpu: dict[str, Any] | None = None) -> dict[str, Any]:
    rep = json.loads((d / "report.json").read_text())
    pred = json.loads((d / "prediction.json").read_text())
    cfgs = rep["configs"]
    base = cfgs["baseline"]
    threads = rep["options"]["threads"] * rep["options"]["sizing"]["databases"]
    out: dict[str, Any] = {"dir": str(d), "threads": threads, "configs": {}}
    out["recomputed"] = _recompute(d, rep, cpu)
    per_db = {
        k: [
            x["streams"]["db-read"]["count"]
            for x in json.loads((d / f"{k}.result.json").read_text())["databases"]
        ]
        for k in ("baseline", "tier", "cache")
    }
    for key in ("baseline", "tier", "cache"):
        c = cfgs[key]
        x, r = c["db_reads_per_s"], c["db_read_latency_ms_avg"]
        arr = c.get("array") or {}
        pieces = sum(
            arr.get(k, 0) for k in ("disk_read_pieces", "cache_read_pieces", "tier_read_pieces")
        )
        _, _, raw = _trace(d / f"{key}.iot")
        row: dict[str, Any] = {
            "reads_per_s": x,
            "gain": x / base["db_reads_per_s"],
            "read_ms": r,
            "cycle_ms": threads / x * 1e3,
            "other_ms": threads / x * 1e3 - r,
            "device_ms": {k: round(v, 2) for k, v in (c.get("device_ms") or {}).items()},
            "per_db_gain": [
                round(a / b, 2) for a, b in zip(per_db[key], per_db["baseline"], strict=True)
            ],
            "migrated_mib": (arr.get("migrated_bytes") or 0) / MIB,
            "migrations": arr.get("migrations"),
            "read_pieces": {
                k: round(arr.get(k, 0) / pieces, 3)
                for k in ("disk_read_pieces", "cache_read_pieces", "tier_read_pieces")
            }
            if pieces
            else None,
            "disk_busy_share": arr.get("disk_busy_s", 0) / arr["now_s"] / rep["options"]["spindles"]
            if arr.get("now_s")
            else None,
            "warm": _fast_share(raw, 15.0),
            "read_after_write": _read_after_write(raw),
        }
        if key != "baseline":
            pr = pred[key]
            rp = pr.get("replayed") or {}
            row["predicted"] = {
                "stored": pr["read_throughput_gain"],
                "littles_law_other_ms": pr["littles_law"]["other_time_per_read_ms"],
                "replayed": rp.get("read_throughput_gain"),
                "replayed_rate": rp.get("replayed_rate_gain"),
            }
            ref, conf = rp.get("reference", {}), rp.get(key, {})
            row["replay"] = {
                s: {
                    "reference_ms": (ref.get("streams", {}).get(s) or {}).get("read_ms_mean"),
                    "config_ms": (conf.get("streams", {}).get(s) or {}).get("read_ms_mean"),
                    "reference_per_s": (ref.get("streams", {}).get(s) or {}).get("per_s"),
                    "config_per_s": (conf.get("streams", {}).get(s) or {}).get("per_s"),
                }
                for s in (*REPORTED, "bdm-read")
            }
            row["replay"]["wall_s"] = {"reference": ref.get("wall_s"), "config": conf.get("wall_s")}
            g = row["gain"]
            rec = out["recomputed"][key]
            got = {"stored": pr["read_throughput_gain"], "replayed": rp.get("read_throughput_gain")}
            got |= {k: rec[k] for k in ("one_loop", "per_loop", "queued", "after", "cpu")}
            row["error"] = {k: (v / g - 1 if v else None) for k, v in got.items()}
        out["configs"][key] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("-o", type=Path)
    ap.add_argument("--cpu", type=Path, help="bench/hybrid_host_cpu.py's output")
    a = ap.parse_args()
    cpu = {x["dir"]: x for x in json.loads(a.cpu.read_text())} if a.cpu else {}
    json_out.emit([gap(d, cpu.get(str(d))) for d in a.dirs], a.o)


if __name__ == "__main__":
    main()
