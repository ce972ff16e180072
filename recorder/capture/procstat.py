"""CPU time and peak memory of a live process, from /proc (for recorders we did not wait4)."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_and_rss(pid: int) -> dict:
    """{"user_s", "sys_s", "max_rss_kb"} of a running process; {} if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    # Fields after the parenthesised comm, which may itself hold spaces.
    fields = stat.rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    rss = next(
        (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0
    )
    return {
        "user_s": round(int(fields[11]) / ticks, 3),
        "sys_s": round(int(fields[12]) / ticks, 3),
        "max_rss_kb": rss,
    }
