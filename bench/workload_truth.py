"""The reference workload as issue 34's benches run it (the engine's settings of
bench/replay_dependent_workload.py) and the starting state every run of the same
work gets: databases created anew and the device's log region zeroed. The CPUs' condition
around a timed run (how idle the VM's vCPUs are moves the engine x1.9 here) is
bench/cpu_condition.py's, held and reported by the benches that time it."""

from __future__ import annotations

import argparse
import subprocess

from workload import engine


def config(dev: str, args: argparse.Namespace, **kw: object) -> engine.WorkloadConfig:
    """exchange2013, throughput mode, one database and its log on `dev`."""
    return engine.WorkloadConfig(
        db_paths=[dev], log_paths=[dev], profile="exchange2013", mode="throughput",
        threads=args.threads, mailboxes=args.mailboxes, mailbox_size_mb=args.mailbox_size_mb,
        databases=1, copies=1, cache_max_mb=args.cache_mb, destroy_data_on=[dev],
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def zero_logs(dev: str, args: argparse.Namespace) -> None:
    """Zero the log region(s) the engine uses on `dev` (workload/layout.py): the next
    run finds no log there and starts its log stream at the region's first slot,
    as a run on a new device does, rather than after what earlier runs left
    (a different place on the device, so other seek distances on the HDD-like one)."""
    for t in engine.validate(config(dev, args)).logs:
        if not t.is_dev:
            raise SystemExit(f"{t.path}: not a device region")
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={t.path}", "bs=1M", f"seek={t.off >> 20}",
             f"count={t.size >> 20}", "oflag=direct", "status=none"],
            check=True,
        )  # fmt: skip
