"""The workload's parameters in a trace header's "metadata": what
`WorkloadConfig.metadata()` writes and the replayer (scaling), the store (linking
a report to its trace, ESRP sequences) and the analyses read. A workload report's
"config" is the same document."""

from __future__ import annotations

from typing import Final, NotRequired, TypedDict


class WorkloadMetadata(TypedDict):
    profile: str  # exchange2010 or exchange2013
    mode: str
    mailboxes: int | float  # in all: scaling's N0
    iops_per_mailbox: float
    mailbox_size_mb: float
    databases: int  # scaling's K0
    copies: int  # copies per database: scaling's C0
    # Storage groups: database i is in group i % storage_groups, and a group's
    # databases share one log stream (one log writer, one log target; checkpoint
    # depth measured against the group's log), as every Exchange release before
    # 2010 had it. Absent (traces made before groups existed) or equal to
    # `databases`: one log per database.
    storage_groups: NotRequired[int]
    duration: float
    # Operations per session thread instead of a duration (`--transactions`; 0:
    # the run lasted `duration`). Absent in traces made before it.
    transactions: NotRequired[int]
    threads: int | str  # or "auto"
    cache_min_mb: float
    cache_max_mb: float
    page_kb: int
    seed: int
    bdm: bool
    ioengine: str
    # EMULATION: completions held to these latencies (ms) per stream, or None.
    emulate_latency_ms: dict[str, float] | None
    # The ESRP sequence this run is a phase of (links its phases), or None.
    sequence: str | None
    workload: str  # the engine: "iotape-ese"
    page_bytes: int
    log_file_bytes: int
    overrides: dict[str, str]  # engine options given with --set


# The keys read by name outside the workload. A header written by hand
# (`iotape record --meta mailboxes=200`) holds strings: readers convert.
MAILBOXES: Final = "mailboxes"
DATABASES: Final = "databases"
COPIES: Final = "copies"
STORAGE_GROUPS: Final = "storage_groups"
SEQUENCE: Final = "sequence"
WORKLOAD: Final = "workload"
ENGINE_NAME: Final = "iotape-ese"
