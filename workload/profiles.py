"""Presets for the Exchange generations and the published figures they reproduce.

A preset is the set of engine parameters that differs between Exchange 2010 and
2013 (ESE's page access pattern and log record sizes); every value can be
overridden with `--set NAME=VALUE`. The published runs come from
`reference/jetstress_profiles.json` (the published per-database figures, kept
in the repository with their sources).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from iotape.errors import IotapeError

REFERENCE = Path(__file__).with_name("reference") / "jetstress_profiles.json"
LOG_FILE_BYTES = 1 << 20

# Tuned so that the shape emerges from the mechanism (docs/workload.md, "Calibration"):
# preread-cont sets how often a B-tree touch needs the neighbouring leaf too,
# which makes both the coalesced read size and the coalesced write size; the log
# record sizes and log-partial make the group-commit writes. lazy-flush-ms is
# ESE's lazy-commit timer (a lazy commit schedules a log write that many ms later,
# which any earlier write makes unnecessary): at a low commit rate every commit
# still gets its own write (the ESRP run), at a high one commits share them (the
# throughput runs); the published throughput runs show 3 ms for ESE 14's padded
# writes and 12 ms for ESE 15's.
PRESETS: dict[str, dict[str, float | int | str]] = {
    "exchange2010": {
        "preread-cont": 0.14,
        "insert-index-runs": 1.0,
        "log-rec-min": 256,
        "log-insert-max": 5664,
        "log-delete": 256,
        "log-replace-max": 2048,
        "bdm-rate": 23.62,
        "bdm-read-kb": 256,
        "repl-read-kb": 256,
        "lazy-flush-ms": 3,
        "log-partial": "pad",
    },
    "exchange2013": {
        # ESE 15 reads and writes fewer neighbour pages. Its log is 4 KiB
        # segments, and a commit's write leaves the partial last segment to be
        # written again as it fills (log.c), so it writes more log bytes than the
        # log grows: the published run reads back 72 % of the bytes it wrote. The
        # record sizes are fit to the published log bytes per transactional I/O
        # and the lazy-commit timer to its log writes per transactional I/O (a
        # timer write, nobody waiting, writes full segments only).
        "preread-cont": 0.08,
        "insert-index-runs": 1.0,
        "log-rec-min": 416,
        "log-insert-max": 10240,
        "log-delete": 416,
        "log-replace-max": 3328,
        "log-partial": "rewrite",
        "bdm-rate": 23.62,
        "bdm-read-kb": 256,
        "repl-read-kb": 256,
        "lazy-flush-ms": 12,
    },
}

# Which published run each preset is compared with.
PUBLISHED_FOR = {
    "exchange2010": "exchange2010-esrp-mailbox-profile",
    "exchange2013": "exchange2013-throughput",
}

# Runs that did not publish their latencies, and the run on the same hardware
# whose latencies stand in for them ("same hardware and settings", says the source).
LATENCY_FROM = {"exchange2010-throughput": "exchange2013-throughput"}
LATENCY_KEYS = {
    "db_read": "db_read_avg_latency_ms",
    "db_write": "db_write_avg_latency_ms",
    "log_write": "log_write_avg_latency_ms",
}

SHAPE_KEYS = (
    "db_read_write_ratio",
    "log_writes_per_tx_io",
    "db_read_avg_bytes",
    "db_write_avg_bytes",
    "log_write_avg_bytes",
    "bdm_read_avg_bytes",
    "repl_reads_per_log_per_copy",
)


@cache
def reference() -> dict:
    try:
        return json.loads(REFERENCE.read_text())
    except (OSError, ValueError) as e:
        raise IotapeError(f"{REFERENCE}: cannot read the published profiles: {e}") from None


def published(profile_id: str) -> dict:
    for p in reference()["profiles"]:
        if p["id"] == profile_id:
            return p
    raise IotapeError(f"{profile_id}: no such published profile in {REFERENCE}")


def published_latency(profile_id: str) -> dict[str, float]:
    """The average db read, db write and log write latency (ms) of a published
    run: what `--emulate-latency` holds completions to when calibrating at it."""
    d = published(LATENCY_FROM.get(profile_id, profile_id))["per_database"]
    missing = [v for v in LATENCY_KEYS.values() if v not in d]
    if missing:
        raise IotapeError(f"{profile_id}: no published {', '.join(missing)}")
    return {k: float(d[v]) for k, v in LATENCY_KEYS.items()}


def published_shape(profile_id: str) -> dict[str, float | None]:
    """The per-database shape of a published run (None where it was not published).

    Closed logs are not published; they are the log bytes written over the 1 MiB
    log file size, which is also how the engine's and the trace's figure count them.
    """
    p = published(profile_id)
    d = p["per_database"]
    copies = p["config"].get("copies_per_database", 1)
    repl = d.get("log_replication_reads_per_s", d.get("log_reads_per_s"))
    logs_per_s = d["log_writes_per_s"] * d["log_write_avg_bytes"] / LOG_FILE_BYTES
    tx = d["db_reads_per_s"] + d["db_writes_per_s"]
    return {
        "db_read_write_ratio": d["db_reads_per_s"] / d["db_writes_per_s"],
        "log_writes_per_tx_io": d["log_writes_per_s"] / tx,
        "db_read_avg_bytes": d["db_read_avg_bytes"],
        "db_write_avg_bytes": d["db_write_avg_bytes"],
        "log_write_avg_bytes": d["log_write_avg_bytes"],
        "bdm_read_avg_bytes": d.get("bdm_read_avg_bytes"),
        "repl_reads_per_log_per_copy": (
            repl / logs_per_s / (copies - 1) if repl is not None and copies > 1 else None
        ),
    }


def shape_from_counts(
    counts: dict[str, tuple[int, int]], copies: int, log_file_bytes: int = LOG_FILE_BYTES
) -> dict[str, float | None]:
    """The same figures from per-stream (count, bytes): the engine's or a trace's."""

    def n(s: str) -> int:
        return counts.get(s, (0, 0))[0]

    def avg(s: str) -> float | None:
        c, b = counts.get(s, (0, 0))
        return b / c if c else None

    reads, writes, logs = n("db-read"), n("db-write"), n("log-write")
    log_bytes = counts.get("log-write", (0, 0))[1]
    closed = log_bytes / log_file_bytes
    repl = n("log-replication-read")
    return {
        "db_read_write_ratio": reads / writes if writes else None,
        "log_writes_per_tx_io": logs / (reads + writes) if reads + writes else None,
        "db_read_avg_bytes": avg("db-read"),
        "db_write_avg_bytes": avg("db-write"),
        "log_write_avg_bytes": avg("log-write"),
        "bdm_read_avg_bytes": avg("bdm-read"),
        "repl_reads_per_log_per_copy": (
            repl / closed / (copies - 1) if copies > 1 and closed > 0 else None
        ),
    }


def deviation(value: float | None, ref: float | None) -> float | None:
    if value is None or ref is None or ref == 0:
        return None
    return value / ref - 1.0
