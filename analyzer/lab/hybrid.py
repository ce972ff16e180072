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
baseline's trace on it (replayed.py) before the measured runs: the three replays at
once, each on temporary arrays of its own (replay_arrays.py).

With `controllers=2` (device "array") the array has two controllers, as the published
MSA 2040: two devices, each its own server (cache, RAID 6 set, tier or read cache,
model thread), the databases and their logs split between them as the published run
laid them out (the first half on controller A, the rest on B: 3 + 3 of 6; `placement`),
each configuration's SSD split likewise, and each replay runs on a pair of temporary
arrays (one per controller, replay_arrays.py), the trace's devices mapped to the
matching controller's.

report.py turns the runs and the prediction into the side-by-side report.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import schemas
from analyzer.lab import closedloop, destage, predict, replay_arrays, replayed, slowqueue
from analyzer.lab.array import ArrayModel
from analyzer.lab.counters import array_delta, array_stats
from analyzer.lab.devices import HybridLab, LabError
from analyzer.lab.hdd import HddModel
from analyzer.lab.hostcpu import Snapshot, demand, since
from analyzer.lab.sizing import Sizing
from analyzer.store.ingest import ingest
from analyzer.store.interface import Store
from analyzer.tiering.events import Events
from analyzer.tiering.from_store import load_events_streams, load_run
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
    controllers: int = 1  # device "array": 2, one device per controller
    rounds: int = 1  # each configuration run this many times, a round after another
    probe_seconds: float = 3.0
    name: str = "hybrid"


def placement(databases: int, devs: list[str]) -> list[str]:
    """Each database's device, in database order (its log goes with it): all on one,
    or the first half on controller A's and the rest on B's, as the published run had
    its 6 databases and 6 logs, 3 of each per controller."""
    return [devs[i * len(devs) // databases] for i in range(databases)]


def _config(o: LabOptions, devs: list[str], **kw: Any) -> WorkloadConfig:
    s = o.sizing
    where = placement(kw.get("databases", s.databases), devs)
    cfg = WorkloadConfig(
        db_paths=where, log_paths=where, destroy_data_on=list(devs), profile="exchange2013",
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
    """The databases' byte ranges on the slow device (the layout the engine gets); with
    several devices, in one space (`SPACE` apart, in `cfg.destroy_data_on`'s order)."""
    devs = [os.path.realpath(d) for d in cfg.destroy_data_on]
    return [
        (t.off + _at(t.path, devs), t.off + t.size + _at(t.path, devs))
        for t in engine.validate(cfg).dbs
    ]


SPACE = 1 << 50  # one controller's device from the next in `regions` and `one_space`


def _at(path: str, devs: list[str]) -> int:
    real = os.path.realpath(path)
    return devs.index(real) * SPACE if len(devs) > 1 and real in devs else 0


def kernel_dev(path: str) -> int:
    """A block device's number as the recorder stores it (the kernel's major << 20 | minor)."""
    rdev = os.stat(path).st_rdev
    return (os.major(rdev) << 20) | os.minor(rdev)


def one_space(ev: Events, devs: list[int]) -> Events:
    """The controllers' devices laid end to end (device i's offsets + i x SPACE), as
    `regions` lays their databases: the simulator sees one device. Its tier or cache is
    then one pool of both controllers' SSDs where the array has one per controller:
    the simulator's prediction is that approximation (the replay's is not)."""
    if len(devs) < 2:
        return ev
    shift = np.zeros(len(ev), dtype=np.int64)
    for i, d in enumerate(devs):
        shift[ev.dev == d] = i * SPACE
    return replace(ev, offset=ev.offset + shift)


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
    cpu = Snapshot.now()  # the host's CPU over the run (hostcpu.py)
    result, summary = engine.run_recorded(cfg, trace, devices=devices, force=True)
    host = since(cpu)
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
        "host_cpu": host,
    }


def _predict(
    o: LabOptions, store: Store, base: dict, fast_id: str, regs: list, devs: list[int],
    array: ArrayModel | None = None,
) -> dict:  # fmt: skip
    s = o.sizing
    ev, streams = load_events_streams(store, base["run_id"])
    ev = one_space(ev, devs)
    _, fast = load_run(store, fast_id)
    unit = s.unit_kb << 10
    db_ev = predict.db_events(ev, regs, unit)
    # The service times from the whole trace, cut as db_events cuts the events.
    # The throttle serves as one device; the hdd model with its spindles; the array
    # with its disks (a read is one disk's, as a spindle's).
    servers = {"hdd": o.spindles, "array": o.spindles * o.controllers}.get(o.device, 1)
    svc = slowqueue.service_times(ev, servers)
    svc = predict.db_events(replace(ev, lat_ns=svc), regs, unit).lat_ns
    dev = slowqueue.device_time(
        ev, db_ev, svc, float(o.mb_per_s), servers, write_back=o.device == "array"
    )
    # Destages: the trace has none; they grow with the writes (the array's own model).
    growth = destage.growth(ev, asdict(array), SPACE) if array is not None else ()
    dev = slowqueue.with_disk_busy(dev, base.get("array"), growth)
    if array is not None:  # a unit's copy reads each of its chunks
        dev = slowqueue.striped(dev, unit, array.chunk_kb << 10, base.get("array"))
    res = base["result"]
    reads = sum(d["streams"]["db-read"]["count"] for d in res["databases"])
    per_s = reads / (res.get("load_s") or res["elapsed_s"])
    threads = o.threads * s.databases
    # Each database's sessions are a closed loop of their own (predict.per_loop_gain).
    loops = predict.loops_of(db_ev, regs, unit)
    session = streams[predict.db_mask(ev, regs)] == schemas.enum("stream")["db-read"]
    model = asdict(array) if array is not None else None
    site = cache_site(o.tier_in, ev, session, regs, base.get("array"), model)
    # The host's cores: the baseline's CPU (the engine's and recorder's, the servers').
    server_s = float((base.get("array") or {}).get("cpu_s", 0.0))
    cpu = demand(base.get("host_cpu"), server_s, reads)
    out = {}
    for key, policy in (("tier", "tier"), ("cache", "cache")):
        ssd_mb = s.controller_ssd_mb(o.controllers) * o.controllers
        p = predict.params(policy, ssd_mb, s.unit_kb, o.stats_s, o.migrate_s)
        out[key] = predict.predict(db_ev, fast, p, threads, per_s, dev, loops, site=site, cpu=cpu)
    return out


def cache_site(
    tier_in: str, ev: Events, session: np.ndarray, regs: list, counters: dict | None,
    model: dict | None,
) -> closedloop.CacheSite:  # fmt: skip
    """What the read cache's closed loop knows of where the cache is (`ev`: the
    baseline's requests, `one_space`; `session`: which of its database requests are
    a session's, the rest the maintenance's): with the array's own cache (`model`,
    `tier_in` "array") its hit latency (served behind FUSE, not by the probe's
    device), each controller's own cache and the array's units (the device's, not
    each database's)."""
    if model is None or tier_in != "array":
        return closedloop.CacheSite(session=session)
    mine = predict.db_mask(ev, regs)
    return closedloop.CacheSite(
        hit=closedloop.array_hit(ev, counters, model),
        session=session,
        controller=ev.offset[mine] // SPACE,
        array_offset=ev.offset[mine],
    )


def _array_ssd(o: LabOptions, array: ArrayModel) -> dict[str, ArrayModel]:
    """The array with its own tier, and with its own read cache, as the engine's would
    be: the lab's SSD size (each controller its share), unit and intervals (the tier's
    half-life is both sides' default, 60 s)."""
    s = o.sizing
    stripe_kb = array.data_disks * array.chunk_kb
    if s.unit_kb % stripe_kb:
        raise LabError(
            f"--unit-kb {s.unit_kb}: the array moves whole stripes of {stripe_kb} KiB "
            f"({array.data_disks} data disks x {array.chunk_kb} KiB)"
        )
    unit = replace(array, tier_unit_kb=s.unit_kb)
    ssd_mb = s.controller_ssd_mb(o.controllers)
    return {
        "tier": replace(unit, tier_mb=ssd_mb, tier_stats_s=o.stats_s, tier_migrate_s=o.migrate_s),
        "cache": replace(unit, cache_ssd_mb=ssd_mb),
    }


def _replayed(
    o: LabOptions,
    size: int,
    base: dict,
    models: dict[str, ArrayModel],
    out: Path,
    say: Say,
    others: dict[str, float],
    recorded: list[str],
) -> dict[str, dict[str, Any]]:
    """Each configuration's gain from the baseline's trace alone: its dependent replay
    on the array as the baseline had it (the reference) and as the configuration has
    it (cold, as the measured run starts; with `--warm-s`, after one replay of the
    trace), the replays' read latencies in the closed loop with the baseline's
    `other_ms` per read (replayed.py). The three replays run at once, each on arrays
    of its own, one per controller (replay_arrays.py): a third of the time, each
    replaying the whole trace as before."""
    trace = Path(base["trace"])
    ref, got, ran = replay_arrays.predicted(trace, size, models, recorded, out, o.warm_s > 0, say)
    base["replayed"] = ref
    return {
        key: {
            "reference": ref,
            key: mine,
            "other_time_per_read_ms": others[key],
            "read_throughput_gain": replayed.gain(ref, mine, others[key]),
            "replayed_rate_gain": replayed.rate_gain(ref, mine),
            **ran,
        }
        for key, mine in got.items()
    }


def run_lab(o: LabOptions, out: Path, store: Store, say: Say) -> dict[str, Any]:
    """Every run of the experiment and the prediction; the raw material of the report.
    With `o.rounds` > 1 the three configurations are run that many times, one round
    after another (baseline, its prediction, tier, cache: drift over the run reaches
    every configuration alike), each round in OUT/round-K with its own prediction from
    its own baseline; the databases and the fast device's probe are made once."""
    s = o.sizing
    out.mkdir(parents=True, exist_ok=True)
    # Stored run names are unique: one lab's runs share a stamp.
    o = replace(o, name=f"{o.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    hdd = HddModel(spindles=o.spindles, mb_s=o.mb_per_s) if o.device == "hdd" else None
    array = (
        ArrayModel.load(changes={"disks": o.spindles, "mb_s": o.mb_per_s})
        if o.device == "array"
        else None
    )
    size_mb = s.controller_mb(o.controllers)
    with HybridLab(
        size_mb=size_mb, memory_disk=True, hdd=hdd, array=array, controllers=o.controllers
    ) as lab:
        lab.join()  # the engine, the recorder and every copy thread: the slow device's limits
        _modelled(lab, False)
        slow = ", ".join(lab.slows)
        say(f"lab: slow {slow}, fast {lab.fast}; making {s.db_mb} MiB of databases")
        engine.run(replace(_config(o, lab.slows), duration=0.5))
        say(f"probe of the fast device ({o.probe_seconds:g} s)")
        fast = _run(_probe(o, lab.fast), out, "fast-probe", [lab.fast], store, o.name)
        if lab.hdd is not None:
            _modelled(lab, True)
        else:
            lab.set_slow_limits(o.read_iops, o.write_iops)
            lab.set_slow_bandwidth(o.mb_per_s * MIB, o.mb_per_s * MIB)
        done = []
        for k in range(1, o.rounds + 1):
            mine = out if o.rounds == 1 else out / f"round-{k}"
            if o.rounds > 1:
                say(f"round {k} of {o.rounds} ({mine})")
                mine.mkdir()
                if lab.array_model != array:  # the last round's tier or cache: off again
                    assert array is not None
                    lab.restart_array(array)
            r = replace(o, name=o.name if o.rounds == 1 else f"{o.name}-r{k}")
            done.append(_round(r, lab, mine, store, fast["run_id"], array, say))
        devices = _devices(o, lab, hdd, array)
    return {
        "options": {**asdict(o), "sizing": asdict(s)},
        "devices": devices,
        "fast_probe": {"run_id": fast["run_id"], "run_name": fast["run_name"]},
        **(done[0] if o.rounds == 1 else {"rounds": done}),
        "out": str(out),
    }


def _round(
    o: LabOptions, lab: HybridLab, out: Path, store: Store, fast_id: str,
    array: ArrayModel | None, say: Say,
) -> dict[str, Any]:  # fmt: skip
    """One round: the baseline, the prediction from its trace (written before the
    others run), the tier and the read cache; each run's material and the prediction."""
    s = o.sizing
    runs: dict[str, Any] = {}
    base = _config(o, lab.slows)
    say(f"baseline: all on the slow device, {o.seconds:g} s")
    counts = array_stats(lab)
    recorded = list(lab.slows)  # the baseline's devices, controller A's first
    devs = [kernel_dev(d) for d in recorded]
    runs["baseline"] = _run(base, out, "baseline", recorded, store, o.name)
    runs["baseline"]["array"], counts = array_delta(lab, counts)
    prediction = _predict(o, store, runs["baseline"], fast_id, regions(base), devs, array)
    ssd: dict[str, ArrayModel] = {}
    if o.tier_in == "array":
        assert array is not None
        ssd = _array_ssd(o, array)
        others = {k: prediction[k]["littles_law"]["other_time_per_read_ms"] for k in ssd}
        reps = _replayed(o, lab.size, runs["baseline"], ssd, out, say, others, recorded)
        for key, rep in reps.items():
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
                engine.run(replace(_config(o, lab.slows), duration=o.warm_s))
            each = s.controller_ssd_mb(o.controllers)
            say(f"{key}: the array's own, {each} MiB per controller, {o.seconds:g} s")
            counts = array_stats(lab)
            runs[key] = _run(_config(o, lab.slows), out, key, lab.slows, store, o.name)
            runs[key]["array"], counts = array_delta(lab, counts)
            continue
        cfg = replace(base, ioengine="tiered", overrides=_tiered(o, lab, out, key))
        say(f"{key}: {s.ssd_mb} MiB on the fast device, {o.seconds:g} s")
        runs[key] = _run(cfg, out, key, [lab.slow, lab.fast], store, o.name)
        runs[key]["array"], counts = array_delta(lab, counts)
    return {"runs": runs, "prediction": prediction, "out": str(out)}


def _probe(o: LabOptions, fast: str) -> WorkloadConfig:
    """The fast device's probe: small mailboxes, as many databases as one controller
    holds (their logs fit on the device, sized for one controller)."""
    s = o.sizing
    k = s.controller_share(o.controllers)
    probe_mb = max(0.125, min(s.mailbox_size_mb, s.ssd_mb / 4 / s.mailboxes))
    return _config(
        o, [fast], duration=o.probe_seconds, mailbox_size_mb=probe_mb, databases=k,
        mailboxes=max(k, s.mailboxes // o.controllers),
    )  # fmt: skip


def _devices(
    o: LabOptions, lab: HybridLab, hdd: HddModel | None, array: ArrayModel | None
) -> dict[str, Any]:
    return {"slow": lab.slow, "fast": lab.fast, "kind": o.device, "files": lab.files(),
            "slows": list(lab.slows), "controllers": o.controllers,
            "databases_on": placement(o.sizing.databases, ["a", "b"][: o.controllers]),
            "hdd_model": asdict(hdd) if hdd else None,
            "array_model": asdict(array) if array else None,
            "hdd_mean_random_4k_ms": hdd.mean_random_ms() if hdd else None}  # fmt: skip


def _modelled(lab: HybridLab, on: bool) -> None:
    """Every controller's disk with its model's times (on) or at memory speed."""
    for disk in lab.arrays:
        disk.modelled(on)
