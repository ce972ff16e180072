"""`iotape lab hybrid`: the hybrid-array experiment on one lab.

One HybridLab (devices.py), released on every way out: the SSD is a loop device
over /dev/shm; the HDD-like slow device is a loop device over hdd.py's FUSE file,
each request taking a 10K rpm disk's modelled service time (`device="hdd"`, the
default), or a memory-backed loop device throttled by blk-throttle (`"throttle"`:
the right rate, a bimodal latency; docs/hybrid.md). On it, in this order:

1. the databases are made on the slow device at memory speed (`--create reuse` keeps
   them for every run; each tiered run copies its promoted units back at its end);
2. a short probe of the fast device: the same engine on a small database there,
   recorded and ingested (the fast device's latencies for the projection);
3. the slow device gets its disk's times (or its limits), the same in every
   configuration;
4. the baseline: exchange2013, throughput mode, fixed threads, all on the slow
   device (`--ioengine psync`), recorded and ingested;
5. the prediction of the read cache and the tier from the baseline's stored trace
   (predict.py), written before either runs;
6. the performance tier (`--ioengine tiered`) and the read cache (`--tier-policy
   cache`), each recorded on both devices and ingested.

On the emulated array with `tier_in="array"` (issue 38) the tier and the cache are
the array's own instead (array.py; the server restarted over the same data for each,
cold), the engine unchanged, and each is also predicted by a dependent replay of the
baseline's trace on it (replayed.py) before the measured runs.

report.py turns the runs and the prediction into the side-by-side report.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import schemas
from analyzer.lab import predict, replayed
from analyzer.lab.array import ArrayFile, ArrayModel
from analyzer.lab.devices import HybridLab, LabError, _losetup
from analyzer.lab.hdd import HddModel
from analyzer.lab.sizing import Sizing
from analyzer.store.ingest import ingest
from analyzer.store.interface import Store
from analyzer.tiering.from_store import load_run
from recorder.tracefile import open_trace
from workload import engine
from workload.engine import WorkloadConfig

MIB = 1 << 20
CONFIGS = ("baseline", "tier", "cache")
Say = Callable[[str], None]


@dataclass(frozen=True)
class LabOptions:
    """The experiment's knobs (the CLI's options)."""

    sizing: Sizing
    threads: int = 2
    seconds: float = 180.0
    read_iops: int = 143
    write_iops: int = 143
    mb_per_s: int = 150
    stats_s: float = 5.0
    migrate_s: float = 5.0
    verify: bool = False
    device: str = "hdd"  # or "throttle", "array"
    tier_in: str = "engine"  # or "array": the emulated array's own tier (device "array")
    warm_s: float = 0.0  # tier_in "array": the load run this long, unmeasured, first
    spindles: int = 4
    probe_seconds: float = 3.0
    name: str = "hybrid"


def _config(o: LabOptions, dev: str, **kw: Any) -> WorkloadConfig:
    s = o.sizing
    cfg = WorkloadConfig(
        db_paths=[dev], log_paths=[dev], destroy_data_on=[dev], profile="exchange2013",
        mode="throughput", mailboxes=s.mailboxes, mailbox_size_mb=s.mailbox_size_mb,
        databases=s.databases, threads=o.threads, duration=o.seconds, ioengine="psync",
    )  # fmt: skip
    return replace(cfg, **kw)


def _tiered(o: LabOptions, lab: HybridLab, out: Path, policy: str) -> dict[str, str]:
    s = o.sizing
    return {
        "tier-fast": lab.fast, "tier-policy": policy, "tier-capacity-mb": str(s.ssd_mb),
        "tier-unit-kb": str(s.unit_kb), "tier-stats-s": str(o.stats_s),
        "tier-migrate-s": str(o.migrate_s), "tier-verify": str(int(o.verify)),
        "tier-log": str(out / f"{policy}.tier.jsonl"),
    }  # fmt: skip


def regions(cfg: WorkloadConfig) -> list[tuple[int, int]]:
    """The databases' byte ranges on the slow device (the layout the engine gets)."""
    return [(t.off, t.off + t.size) for t in engine.validate(cfg).dbs]


def recorded_bytes(trace: Path) -> dict[str, dict[str, float]]:
    """Bytes, requests and the mean device time per stream in a recording (what the
    recorder saw)."""
    names = {v: k for k, v in schemas.enum("stream").items()}
    with open_trace(trace) as tr:
        r = tr.read_all()
    out: dict[str, dict[str, float]] = {}
    for code in np.unique(r["stream"]):
        mine = r["stream"] == code
        lat = r["ts_complete_ns"][mine] - r["ts_issue_ns"][mine]
        out[names.get(int(code), str(int(code)))] = {
            "bytes": int(r["bytes"][mine].sum()),
            "requests": int(mine.sum()),
            # the device's own time (issue to completion), as an OS counter reports it
            "device_ms_mean": float(lat.mean()) / 1e6,
        }
    return out


def _tier_log(path: Path, verify: bool) -> dict[str, Any]:
    """What the engine's tier log says it moved, how long its copies took (a
    cache's miss is admitted only when its fill is done: the fill's copy time is
    the least of that lag), and what `--tier-verify` reads back (each database
    region twice: through the placement and after the write-back, on the
    migration thread)."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    copies = [e["copy_s"] for e in lines if e["type"] in ("migration", "fill")]
    start = next(e for e in lines if e["type"] == "start")
    regions = sum(d["end"] - d["base"] for d in start["databases"])
    return {
        "moved_bytes": sum(e["bytes"] for e in lines if e["type"] in ("migration", "fill")),
        "drained_bytes": sum(e.get("bytes", 0) for e in lines if e["type"] == "drain"),
        "verify_read_bytes": 2 * regions if verify else 0,
        "copies": len(copies),
        "copy_s_mean": sum(copies) / len(copies) if copies else 0.0,
        "copy_s_max": max(copies, default=0.0),
    }


def _run(
    cfg: WorkloadConfig, out: Path, key: str, devices: list[str], store: Store, name: str
) -> dict[str, Any]:
    trace = out / f"{key}.iot"
    result, summary = engine.run_recorded(cfg, trace, devices=devices, force=True)
    (out / f"{key}.result.json").write_text(json.dumps(result, indent=1) + "\n")
    ing = ingest(store, trace, name=f"{name}-{key}", tags={"lab": "hybrid", "config": key})
    log = cfg.overrides.get("tier-log")
    return {
        "tier_log": _tier_log(Path(log), cfg.overrides["tier-verify"] == "1") if log else None,
        "result": result,
        "recorded": recorded_bytes(trace),
        "lost": dict(summary.get("lost", {})),
        "run_id": ing.run_id,
        "run_name": ing.name,
        "trace": str(trace),
    }


def _predict(o: LabOptions, store: Store, base: dict, fast_id: str, regs: list) -> dict:
    s = o.sizing
    _, ev = load_run(store, base["run_id"])
    _, fast = load_run(store, fast_id)
    unit = s.unit_kb << 10
    db_ev = predict.db_events(ev, regs, unit)
    # The service times from the whole trace, cut as db_events cuts the events.
    # The throttle serves as one device; the hdd model with its spindles; the array
    # with its disks (a read is one disk's, as a spindle's).
    servers = {"hdd": o.spindles, "array": o.spindles}.get(o.device, 1)
    svc = predict.service_times(ev, servers)
    svc = predict.db_events(replace(ev, lat_ns=svc), regs, unit).lat_ns
    dev = predict.device_time(ev, db_ev, svc, float(o.mb_per_s), servers)
    res = base["result"]
    reads = sum(d["streams"]["db-read"]["count"] for d in res["databases"])
    per_s = reads / (res.get("load_s") or res["elapsed_s"])
    threads = o.threads * s.databases
    out = {}
    for key, policy in (("tier", "tier"), ("cache", "cache")):
        p = predict.params(policy, s.ssd_mb, s.unit_kb, o.stats_s, o.migrate_s)
        out[key] = predict.predict(db_ev, fast, p, threads, per_s, dev)
    return out


def _array_stats(lab: HybridLab) -> dict[str, Any] | None:
    return lab.hdd.stats() if lab.array_model is not None and lab.hdd is not None else None


def _array_delta(
    lab: HybridLab, before: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The array's own counters over one configuration (None on other devices), its
    server's CPU per second of it among them; and the counters now."""
    now = _array_stats(lab)
    if now is None or before is None:
        return None, now
    d: dict[str, Any] = {}
    for k, v in now.items():
        if k in ("dirty_limit", "dirty_peak", "read_wait_ms_edges") or k.startswith("worst_"):
            continue
        if k.endswith("_max"):
            d[k] = v  # a maximum: since the server's start (a warm-up's included)
        elif isinstance(v, list):  # a histogram
            d[k] = [a - b for a, b in zip(v, before[k], strict=True)]
        else:
            d[k] = v - before[k]
    d["cpu_cores"] = d["cpu_s"] / d["now_s"] if d["now_s"] > 0 else 0.0
    d["units_at_start"] = before["tier_units"]  # in the tier or cache (warmed: not 0)
    return d, now


def _array_ssd(o: LabOptions, array: ArrayModel) -> dict[str, ArrayModel]:
    """The array with its own tier, and with its own read cache, as the engine's would
    be: the lab's SSD size, unit and intervals (the tier's half-life is both sides'
    default, 60 s)."""
    s = o.sizing
    stripe_kb = array.data_disks * array.chunk_kb
    if s.unit_kb % stripe_kb:
        raise LabError(
            f"--unit-kb {s.unit_kb}: the array moves whole stripes of {stripe_kb} KiB "
            f"({array.data_disks} data disks x {array.chunk_kb} KiB)"
        )
    unit = replace(array, tier_unit_kb=s.unit_kb)
    return {
        "tier": replace(unit, tier_mb=s.ssd_mb, tier_stats_s=o.stats_s, tier_migrate_s=o.migrate_s),
        "cache": replace(unit, cache_ssd_mb=s.ssd_mb),
    }


@contextmanager
def _replay_arrays(size: int, models: list[ArrayModel]) -> Iterator[list[tuple[ArrayFile, str]]]:
    """One emulated array per model, each its own server, memory-backed data and
    direct-I/O loop device, for the prediction's replays (the lab's own slow device,
    and the databases on it, untouched); all released on every way out."""
    disks: list[ArrayFile] = []
    loops: list[str] = []
    try:
        for m in models:
            disks.append(ArrayFile(size, m, prefix="iotape-lab-replay-"))
            loops.append(_losetup(disks[-1].path, direct=True))
        yield list(zip(disks, loops, strict=True))
    finally:
        for loop in loops:
            subprocess.run(["losetup", "-d", loop], check=False, capture_output=True)
        for d in disks:
            d.close()


def _replayed(
    o: LabOptions,
    size: int,
    base: dict,
    models: dict[str, ArrayModel],
    out: Path,
    say: Say,
    others: dict[str, float],
) -> dict[str, dict[str, Any]]:
    """Each configuration's gain from the baseline's trace alone: its dependent replay
    on the array as the baseline had it (the reference) and as the configuration has
    it (cold, as the measured run starts; with `--warm-s`, after one replay of the
    trace), the replays' read latencies in the closed loop with the baseline's
    `other_ms` per read (replayed.py). The three replays run at once, each on an array
    of its own (replayed.replay_at_once): a third of the time, each replaying the whole
    trace as before."""
    trace = Path(base["trace"])
    ref_model = replace(next(iter(models.values())), tier_mb=0, cache_ssd_mb=0)
    keys = list(models)
    say(f"prediction by replay: the baseline's trace, dependent timing, on {len(keys) + 1} "
        f"arrays at once (as the baseline's; with its {' and with its '.join(keys)})")  # fmt: skip
    with _replay_arrays(size, [ref_model, *models.values()]) as arrays:
        devs = [loop for _, loop in arrays]
        files = [str(p) for a, loop in arrays for p in (a.backing, a.mount, loop)]
        warm = [out / f"replay-{k}-warm" if o.warm_s > 0 else None for k in keys]
        runs = [(devs[0], out / "replay-baseline", None)] + [
            (dev, out / f"replay-{k}", w) for dev, k, w in zip(devs[1:], keys, warm, strict=True)
        ]
        t = time.monotonic()
        ref, *got = replayed.replay_at_once(trace, runs)
        wall = time.monotonic() - t
    base["replayed"] = ref
    return {
        key: {
            "reference": ref,
            key: mine,
            "other_time_per_read_ms": others[key],
            "read_throughput_gain": replayed.gain(ref, mine, others[key]),
            "replayed_rate_gain": replayed.rate_gain(ref, mine),
            "replays_at_once_wall_s": wall,
            "replay_devices": files,  # released since: backing files, mounts, loop devices
        }
        for key, mine in zip(keys, got, strict=True)
    }


def run_lab(o: LabOptions, out: Path, store: Store, say: Say) -> dict[str, Any]:
    """Every run of the experiment and the prediction; the raw material of the report."""
    s = o.sizing
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Any] = {}
    # Stored run names are unique: one lab's runs share a stamp.
    o = replace(o, name=f"{o.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    hdd = HddModel(spindles=o.spindles, mb_s=o.mb_per_s) if o.device == "hdd" else None
    array = (
        ArrayModel.load(changes={"disks": o.spindles, "mb_s": o.mb_per_s})
        if o.device == "array"
        else None
    )
    with HybridLab(size_mb=s.device_mb, memory_disk=True, hdd=hdd, array=array) as lab:
        lab.join()  # the engine, the recorder and every copy thread: the slow device's limits
        if lab.hdd is not None:
            lab.hdd.modelled(False)
        base = _config(o, lab.slow)
        say(f"lab: slow {lab.slow}, fast {lab.fast}; making {s.db_mb} MiB of databases")
        engine.run(replace(base, duration=0.5))
        probe_mb = max(0.125, min(s.mailbox_size_mb, s.ssd_mb / 4 / s.mailboxes))
        probe = _config(o, lab.fast, duration=o.probe_seconds, mailbox_size_mb=probe_mb)
        say(f"probe of the fast device ({o.probe_seconds:g} s)")
        fast = _run(probe, out, "fast-probe", [lab.fast], store, o.name)
        if lab.hdd is not None:
            lab.hdd.modelled(True)
        else:
            lab.set_slow_limits(o.read_iops, o.write_iops)
            lab.set_slow_bandwidth(o.mb_per_s * MIB, o.mb_per_s * MIB)
        say(f"baseline: all on the slow device, {o.seconds:g} s")
        counts = _array_stats(lab)
        runs["baseline"] = _run(base, out, "baseline", [lab.slow], store, o.name)
        runs["baseline"]["array"], counts = _array_delta(lab, counts)
        prediction = _predict(o, store, runs["baseline"], fast["run_id"], regions(base))
        ssd: dict[str, ArrayModel] = {}
        if o.tier_in == "array":
            assert array is not None
            ssd = _array_ssd(o, array)
            others = {k: prediction[k]["littles_law"]["other_time_per_read_ms"] for k in ssd}
            for key, rep in _replayed(o, lab.size, runs["baseline"], ssd, out, say, others).items():
                prediction[key]["replayed"] = rep
        (out / "prediction.json").write_text(json.dumps(prediction, indent=1) + "\n")
        say("prediction written (prediction.json); now the tier and the read cache")
        for key in ("tier", "cache"):
            if key in ssd:
                # The tier or cache inside the array, starting cold; the engine as in the
                # baseline, all its I/O on the array.
                lab.restart_array(ssd[key])
                if o.warm_s > 0:
                    # Warmed as the published run was (after hours of load), unrecorded.
                    say(f"{key}: warming the array's own for {o.warm_s:g} s")
                    engine.run(replace(_config(o, lab.slow), duration=o.warm_s))
                say(f"{key}: the array's own, {s.ssd_mb} MiB, {o.seconds:g} s")
                counts = _array_stats(lab)
                runs[key] = _run(_config(o, lab.slow), out, key, [lab.slow], store, o.name)
                runs[key]["array"], counts = _array_delta(lab, counts)
                continue
            cfg = replace(base, ioengine="tiered", overrides=_tiered(o, lab, out, key))
            say(f"{key}: {s.ssd_mb} MiB on the fast device, {o.seconds:g} s")
            runs[key] = _run(cfg, out, key, [lab.slow, lab.fast], store, o.name)
            runs[key]["array"], counts = _array_delta(lab, counts)
        devices = {"slow": lab.slow, "fast": lab.fast, "kind": o.device, "files": lab.files(),
                   "hdd_model": asdict(hdd) if hdd else None,
                   "array_model": asdict(array) if array else None,
                   "hdd_mean_random_4k_ms": hdd.mean_random_ms() if hdd else None}  # fmt: skip
    return {
        "options": {**asdict(o), "sizing": asdict(s)},
        "devices": devices,
        "fast_probe": {"run_id": fast["run_id"], "run_name": fast["run_name"]},
        "runs": runs,
        "prediction": prediction,
        "out": str(out),
    }
