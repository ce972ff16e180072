"""The text a plan writes: each fio job file, its header saying what was done and
why, and the anchor (fio's own plain replay of the same requests)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from replayer.hosts import spec as hosts
from replayer.plan import exact, iolog, lanes, scale
from replayer.plan.model import Job, Plan, Window


def _lanes_lines(p: Plan) -> list[str]:
    """How a plan of lanes times its requests, and why."""
    return [
        "timing: each request at its issue time (what the device saw, after merges).",
        f"  lanes: {len(p.jobs)} jobs (NAME.gK), each a stream's every Lth request, L such",
        f"  that a lane's requests are at least {lanes.GAP_US / 1000:g} ms apart. Each lane's"
        " iolog is version 2,",
        "  whose `wait MS` sleeps until MS milliseconds after fio's genesis: each request",
        "  waits for an absolute time, so no lateness carries over (fio 3.33 times a v3",
        "  entry from the previous issue, and too many pieces of v3 would pass fio's",
        f"  4,096 jobs). The trace's 0 at {(p.start_us or 0) / 1e6:g} s after genesis;"
        " a request goes out",
        "  within ~1 ms after its time (fio wakes at the millisecond plus the job's phase).",
        "  read_iolog_chunked=1: fio reads each log as it goes, not all at set-up.",
        f"  iotape-lanes (`replay run`) puts the trace's 0 at"
        f" {lanes.lanes_start_us(p.jobs, p.start_us or 0) / 1e6:g} s after its own start:",
        "  it needs only to start its threads (plan.json lanes_start_us).",
        *_async_lines(p),
    ]


def _async_lines(p: Plan) -> list[str]:
    """Which lanes are asynchronous (NAME.aK), and why."""
    a = [j for j in p.jobs if j.options.get("ioengine") == "io_uring" and ".a" in j.name]
    if not a:
        return [
            f"  async lanes: none (--lanes {p.opts.lane_io}; auto makes one for a submitter"
            f" that kept",
            f"  several requests in flight past {lanes.ASYNC_MIN_IOPS:,} IOPS).",
        ]
    return [
        f"  async lanes: {len(a)} (NAME.aK, ioengine=io_uring, --lanes {p.opts.lane_io}): each"
        " a submitter that kept",
        f"  several requests in flight (auto: past {lanes.ASYNC_MIN_IOPS:,} IOPS). iotape-lanes"
        " runs such a lane as one",
        "  thread and one io_uring that submits each request at its microsecond without",
        "  waiting for those before it, up to iodepth in flight"
        f" ({lanes.ASYNC_HEADROOM}x the most the submitter had):",
        "  "
        + ", ".join(f"{j.name} iodepth={j.options['iodepth']}" for j in a[:4])
        + (", ..." if len(a) > 4 else ""),
    ]


def _exact_lines(p: Plan) -> list[str]:
    """How an exact plan times its requests, and why."""
    if p.layout == "lanes":
        return _lanes_lines(p) + _streams_lines()
    lines = [
        "timing: each request at its issue time (what the device saw, after merges).",
        "  iolog v3 timestamps are MICROSECONDS: fio 3.33 reads them so (its docs say ms).",
        "  fio times each iolog request from the one before it, and every wait ends a",
        "  little late, so one long iolog drifts (~3 % here). Each stream's requests",
        f"  are therefore cut into pieces of at most {p.per_segment or 'all'} requests,"
        " each its own job",
        "  (NAME.sNNNN), and every piece starts at an absolute time: iolog times are",
        "  us after fio's start (clocksource=cpu: fio's clock starts when fio does),",
        (
            f"  the trace's time 0 at {(p.start_us or 0) / 1e6:g} s, so that fio can set "
            "every job up first."
            if len(p.windows) == 1
            else "  the trace's time 0 at a stamped base (windows, below)."
        ),
        "  Each log opens with `1 FILE wait 0 0`: fio 3.33 rejects a v3 `wait` (it says",
        "  so once per job on stderr) but takes its time as the reference, so the",
        "  job's first wait counts from fio's start, not from when the job got ready.",
        "  fio sleeps a long wait in 0.5 s steps and never makes up their lateness, so",
        "  a job that starts later has a startdelay: fio creates it "
        f"{exact.STARTDELAY_MARGIN_S:g} s"
        " before its first entry, counted from the latest moment fio may finish setting",
        "  up (startdelay counts from then, the iolog times from fio's start).",
        "  No piece inherits the lateness of another. The jobs are in time order.",
        "  Requests that overlapped in the trace go to separate lanes (NAME.lK), since",
        "  a synchronous job issues one at a time. iodepth (async engines) is twice",
        "  the most requests the stream had in flight.",
    ]
    if len(p.windows) > 1:
        lines += [
            f"windows: {len(p.jobs)} pieces > {exact.MAX_JOBS} per fio process, so the trace is",
            f"  replayed by {len(p.windows)} fio processes (replay.fio, replay.wNNNN.fio)"
            f" of {exact.WINDOW_JOBS} jobs,",
            "  each launched its set-up time before its first piece by `iotape replay run`,",
            "  its jobs without startdelay (fio counts it from a genesis that came seconds",
            "  late in a process started while another replayed). They share",
            "  one clock: clocksource=clock_gettime (CLOCK_MONOTONIC) and iolog times",
            f"  {iolog.MONO_BASE_US} + the trace's us; `replay run` stamps each log's wait",
            "  line with that minus the monotonic us of the trace's 0, so every first wait",
            "  ends at an absolute time. Pieces stay short however long the trace: fio",
            "  times each entry from the previous issue, so a stall delays the rest of a",
            "  piece (fio 3.33 has no absolute time per entry).",
        ]
    return lines + _streams_lines()


def _streams_lines() -> list[str]:
    return [
        "streams: fio's threads all carry fio's name, so a recorder labels the replay",
        "  `other`; `iotape replay run --record` relabels each replayed request with the",
        "  stream of the job whose iolog holds it (plan.json maps jobs to streams).",
    ]


def _synthetic_lines(p: Plan) -> list[str]:
    """How a synthetic plan fits each stream, and each stream's locality model."""
    lines = [
        f"synthetic: each stream fitted per {p.window_ns / 1e9:g} s window, reads and",
        "  writes apart: rate (bytes/s, so a size mix runs at its request rate), bssplit,",
        "  iodepth from the most requests in flight, fsync = writes per flush. Discards",
        "  are not replayed in this mode (fio cannot mix trims into a read/write job).",
        "locality: the request order and offsets are fio's own; what is kept is each",
        "  stream's popularity and reuse (its LRU hit-ratio curve), footprint and",
        "  sequential share. random_distribution is, per stream, whichever of two fio",
        "  distributions reproduced its LRU curve better in a simulation of fio's picks:",
        "  zipf:THETA:0 (hot blocks scattered by fio's hash; centre 0 gives every",
        "  window the same rank -> block map, so the hot set lasts across windows) or",
        "  zoned_abs per window (zones of ~1 % of the window's accesses where they fell,",
        "  0 % zones over untouched stretches: positions kept, a moving hot spot",
        "  followed, uniform inside a zone). bssplit's 0 % entry of the stream's",
        "  smallest size fixes fio's offset block. percentage_random = 100 - the",
        "  window's share of requests that start where the previous one ended (a",
        "  window above 95 % is a sequential job). iotape replay fidelity says how",
        "  close the replay's LRU curve came.",
    ]
    for name, m in sorted(p.models.items()):
        how = f"zipf theta {m.theta:g}" if m.kind == "zipf" else "zoned_abs"
        how += "" if p.opts.locality == "auto" else f" (--locality {p.opts.locality})"
        gaps = ", ".join(f"{k} {v:.1f} pp" for k, v in sorted(m.gap_pp.items()))
        lines.append(f"  {name}: {how}, block {m.gran} (simulated largest LRU gap: {gaps})")
    return lines


def _scaling_lines(p: Plan) -> list[str]:
    sc = p.scaling
    if not sc:
        return []
    lines = [
        f"scaling: {sc.describe()}",
        "  per-database streams go to each database's target; transactional streams",
        "  (db-read, db-write, log-*) at x (N/K)/(N0/K0) of one database's share,",
        "  maintenance (bdm-read) at its per-database rate, replication by extra copies.",
    ]
    for s in sorted({j.stream for j in p.jobs}):
        lines.append(f"  {s}: x {scale.factor(s, sc):.4g} of the trace's rate per database")
    return lines + _group_lines(sc, p.jobs)


def _group_lines(sc: scale.Scaling, jobs: list[Job]) -> list[str]:
    """The storage groups, where in play: which databases share each log."""
    if not sc.grouped:
        return []
    lay = sc.layout
    lines = [
        f"storage groups: {lay.storage_groups} (database i in group i % {lay.storage_groups};"
        f" the trace had {sc.from_storage_groups} for {sc.from_databases} database(s))",
        *(f"  {line}" for line in lay.describe()),
    ]
    if lay.shared_logs:
        lines += [
            "  each group's databases share one log: its log streams",
            f"  ({', '.join(sorted(scale.PER_LOG))})",
            "  are replayed once per group (job sgJ.STREAM, target sgJ), at the sum of",
            "  its databases' shares; the other streams once per database.",
        ]
        sizes = sorted({len(lay.members(g)) for g in range(lay.storage_groups)})
        for s in sorted(scale.PER_LOG & {j.stream for j in jobs}):
            per = ", ".join(f"x {scale.factor(s, sc) * n:.4g} per group of {n}" for n in sizes)
            lines.append(f"  {s}: {per}")
    else:
        lines.append("  one log per database: each database's log streams on its own target.")
    return lines


def header_text(p: Plan) -> str:
    """The job file's opening comment: what the plan did, and why."""
    src = p.src
    lines = [
        f"iotape replay plan: {p.mode} mode",
        f"source: {src.path} ({p.requests} requests over "
        f"{src.duration_ns / 1e9:.3f} s, "
        f"times from {src.timing})",
        "flushes: one per application flush: its record (op=flush with its pid) is replayed",
        "  as fio's `sync`, which makes the kernel issue the device flush again; a device",
        "  flush kept as its own record (flag device_flush, or pid 0 in older traces) is",
        "  dropped when the trace has an application flush. Writes carrying PREFLUSH get",
        "  a sync just before them;",
        "  FUA writes run in their own `.fua` job with sync=dsync (fio's iolog has no FUA).",
    ]
    lines += _exact_lines(p) if p.mode == "exact" else _synthetic_lines(p)
    if p.mode_reason:
        lines.append(p.mode_reason)
    lines.append(f"time scale: {p.opts.time_scale:g} (durations x {p.opts.time_scale:g})")
    lines.append(f"offsets: --remap {p.opts.remap}, aligned to each target's logical block size")
    if p.opts.remap == "compact" and p.mapping:
        packed = sum(n for d in p.mapping["devices"] for _s, n in d.get("extents") or [])
        lines.append(
            f"  compact: the touched {p.opts.remap_unit >> 10} KiB granules ({packed} bytes) "
            "packed in offset order, each device after the one before"
        )
    lines += _scaling_lines(p)
    for (path, owner), (base, size) in sorted(p.spans.items()):
        lines.append(f"target {owner.name}: {path} bytes {base}..{base + size}")
    lines += [f"note: {n}" for n in src.notes]
    return "".join(f"; {ln}\n" for ln in lines)


def jobfile_text(p: Plan, window: Window | None = None) -> str:
    """The job file of one window, or of p.jobs (all of them, or one host's)
    timed as the first window."""
    windows = p.windows
    window = window or Window(0, p.jobs, windows[0].start_us, windows[0].launch_us)
    shared = len(windows) > 1
    out = [
        header_text(p),
        f"; window {window.index + 1} of {len(windows)}: {len(window.jobs)} jobs, fio launched"
        f" at {window.launch_us / 1e6:+.3f} s of the trace\n"
        if shared
        else "",
        "\n[global]\n",
        f"ioengine={p.opts.engine}\n",
        "direct=1\n",
        "thread=1\n",
        f"clocksource={exact.CLOCKSOURCE_SHARED if shared else exact.CLOCKSOURCE}\n",
        # Every target exists before fio starts (`replay run` checks, and creates
        # a --create-file file): a missing one is an error, never a new file.
        "allow_file_create=0\n",
        # fio drops the target's page cache each time a job opens its file, i.e. at
        # every piece's start: BLKFLSBUF on a block device, which syncs the device
        # and drains every CPU's page lists while the other pieces' requests run.
        # With direct I/O there is no cache to drop.
        "invalidate=0\n",
    ]
    if p.layout == "lanes":
        # fio otherwise reads a whole iolog at set-up and holds every entry.
        out.append("read_iolog_chunked=1\n")
    # Per-I/O latency logs (log_avg_msec=0 logs every request), beside the results;
    # not for lanes, which run as long as the trace: fio holds every sample (~40
    # bytes, three logs) until the job ends, GiBs over an hour.
    if p.layout != "lanes":
        lat = "results/lat" + (f".w{window.index:04d}" if shared else "")
        out += [f"write_lat_log={lat}\n", "log_offset=1\n"]
    for job in window.jobs:
        out.append(f"\n; {job.stream} of {job.owner.name}: {job.requests} requests\n[{job.name}]\n")
        if job.entries is not None:
            out.append(f"read_iolog=iologs/{job.name}.log\n")
            delay = 0 if p.layout == "lanes" else exact.startdelay_us(job, p.start_us, window)
            if delay:
                out.append(f"startdelay={delay}us\n")
        out += [f"{k}={v}\n" for k, v in job.options.items()]
    return "".join(out)


def host_jobfile_text(p: Plan, host: str) -> str:
    """The job file of one host's jobs, their targets as the host's own paths."""
    return jobfile_text(replace(p, jobs=hosts.host_jobs(p.jobs, host)))


def anchor(p: Plan) -> tuple[str, str] | None:
    """fio's own replay of the same requests: every entry in one iolog, run with
    read_iolog defaults (plus direct=1, so the device sees the I/O, not the page cache)."""
    parts = [(j.target, j.entries) for j in p.jobs if j.entries is not None]
    if not parts:
        return None
    t = np.concatenate([e[0] for _, e in parts])
    order = np.argsort(t, kind="stable")
    files = np.concatenate([np.full(len(e[0]), i) for i, (_, e) in enumerate(parts)])[order]
    cols = [np.concatenate([e[k] for _, e in parts])[order] for k in range(4)]
    names = [name for name, _ in parts]
    uniq = sorted(set(names))
    head = [iolog.HEADER + "\n"] + [f"1 {u} add\n" for u in uniq] + [f"1 {u} open\n" for u in uniq]
    body = [
        f"{ts + iolog.T0_US} {names[fi]} {iolog.ACTIONS[a]} {o} {n}\n"
        for ts, fi, a, o, n in zip(
            *(c.tolist() for c in [cols[0], files, cols[1], cols[2], cols[3]]), strict=True
        )
    ]
    end = int(cols[0][-1]) + iolog.T0_US
    tail = [f"{end} {u} close\n" for u in uniq]
    return anchor_job(), "".join(head + body + tail)


def anchor_job() -> str:
    return (
        "; fio's own plain replay of the same requests, the anchor for `iotape replay fidelity`:\n"
        "; one iolog, read_iolog defaults (psync, iodepth 1),\n"
        "; direct=1 so the device sees the I/O.\n"
        "[plain]\nread_iolog=anchor.log\ndirect=1\nallow_file_create=0\n"
    )
