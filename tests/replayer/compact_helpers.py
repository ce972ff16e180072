"""Traces for the remap tests: a large-offset trace, and a replay made from a plan's
iologs (the requests fio is told to issue, at their planned times plus a jitter)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from trace_helpers import DT, NVME, SDA, header

import schemas
from recorder.tracefile import write_trace
from replayer.plan.model import Manifest
from replayer.run import ordered, relabel

OP = schemas.enum("op")
STREAM = schemas.enum("stream")
MiB = 1 << 20
GiB = 1 << 30
LOOP = (7 << 20) | 3  # the replay's device: a loop device's number
N_EACH = 1500  # same_offsets_trace's requests on each device
EARLIER_NS = 30_000_000  # nvme0n1's copy of each request comes this much before sda's


def far_trace(path: Path, n: int = 4000, seed: int = 3, meta: dict | None = None) -> Path:
    """Reads and writes over four regions up to 89 GiB apart, some of them sequential
    runs that cross 1 MiB granules, in 2 seconds."""
    rng = np.random.default_rng(seed)
    r = np.zeros(n, dtype=DT)
    r["ts_issue_ns"] = np.sort(rng.integers(1_000_000, 2_000_000_000, n))
    r["ts_queue_ns"] = r["ts_issue_ns"] - 1000
    r["ts_complete_ns"] = r["ts_issue_ns"] + 100_000
    regions = np.array([3 * MiB, 10 * GiB + 5 * 4096, 50 * GiB, 89 * GiB])
    r["offset"] = regions[rng.integers(0, 4, n)] + rng.integers(0, 6 * MiB // 4096, n) * 4096
    seq = np.arange(n) % 10 < 4  # runs of 4 sequential 64 KiB requests
    run_start = regions[rng.integers(0, 4, n)] + rng.integers(0, 24, n) * 256 * 1024
    base = np.repeat(run_start[::10], 10)[:n] + (np.arange(n) % 10) * 65536
    r["offset"] = np.where(seq, base, r["offset"])
    r["bytes"] = np.where(seq, 65536, 4096)
    r["op"] = np.where(rng.random(n) < 0.4, OP["write"], OP["read"])
    r["stream"] = STREAM["db-write"]
    r["pid"] = r["tid"] = 100
    r["dev"] = SDA
    h = header(metadata=meta or {})
    h["devices"] = h["devices"][:1]
    h["streams"] = {str(v): k for k, v in STREAM.items()}
    return write_trace(path, h, r)


def replay_of_plan(jobdir: Path, out: Path, jitter_ns: int = 200_000, seed: int = 5) -> Path:
    """A recorded replay as a perfect fio would make it: every iolog entry issued at
    its time (7 ms after the original's clock, plus up to `jitter_ns`)."""
    man = Manifest.read(jobdir / "plan.json")
    logs, _names = relabel._logs(jobdir, man)
    batches = list(relabel.planned_batches(logs))
    a = ordered.cat(batches) if batches else np.empty(0, ordered.COMPACT)
    rng = np.random.default_rng(seed)
    r = np.zeros(len(a), dtype=DT)
    r["ts_issue_ns"] = 1_000_000_000 + a["t"] + rng.integers(0, jitter_ns, len(a))
    r["ts_queue_ns"] = r["ts_issue_ns"] - 1000
    r["ts_complete_ns"] = r["ts_issue_ns"] + 100_000
    r["offset"], r["bytes"], r["op"] = a["offset"], a["bytes"], a["op"]
    r["stream"] = STREAM["other"]
    r["pid"] = r["tid"] = 4242
    r["dev"] = LOOP
    h = header()
    h["devices"] = h["devices"][:1]
    h["streams"] = {str(v): k for k, v in STREAM.items()}
    return write_trace(out, h, r[np.argsort(r["ts_complete_ns"], kind="stable")])


def sparse(path: Path, size: int) -> str:
    """A sparse file of `size` bytes: a replay target."""
    with open(path, "wb") as f:
        f.truncate(size)
    return str(path)


def same_offsets_trace(path: Path) -> Path:
    """The same writes on sda and nvme0n1 (same offsets and sizes, nvme0n1's 30 ms
    earlier), and sda's further out too (up to 8 GiB), over 3 s."""
    rng = np.random.default_rng(11)
    t = np.sort(rng.integers(100_000_000, 3_000_000_000, N_EACH))
    off = rng.integers(0, 16 * MiB // 4096, N_EACH) * 4096
    far = rng.random(N_EACH) < 0.3
    sda_off = np.where(far, 8 * GiB + off, off)
    r = np.zeros(2 * N_EACH, dtype=DT)
    r["ts_issue_ns"] = np.r_[t, t - EARLIER_NS]
    r["dev"] = np.r_[np.full(N_EACH, SDA), np.full(N_EACH, NVME)]
    # nvme0n1's copy of a far request lands at the near offset: the same (op,
    # offset, size) as sda's near ones, so only the device tells them apart.
    r["offset"] = np.r_[sda_off, off]
    r["bytes"] = 4096
    r["op"] = OP["write"]
    r["stream"] = np.r_[np.full(N_EACH, STREAM["db-write"]), np.full(N_EACH, STREAM["log-write"])]
    r["pid"] = r["tid"] = 100
    r = r[np.argsort(r["ts_issue_ns"], kind="stable")]
    r["ts_queue_ns"] = r["ts_issue_ns"] - 1000
    r["ts_complete_ns"] = r["ts_issue_ns"] + 100_000
    h = header()
    h["streams"] = {str(v): k for k, v in STREAM.items()}
    return write_trace(path, h, r)
