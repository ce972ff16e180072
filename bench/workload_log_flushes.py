"""Why the engine's log writer writes, per device (issue 34): the same work
(`--ssd-transactions` operations per session, the bench's seed) on the SSD-like
and the HDD-like device, each from the state bench/replay_dependent_workload.py
gives a truth, and the engine's own counts: `log_flushes` by reason (durable,
lazy, capacity), commits, durable commits and log writes. A replay of a trace
from one device onto the other issues the trace's log writes; these counts say
which of the target's it could not know (the lazy-commit timer's, in a long
run on a slow device). Not a timing: no lock needed for what it reports, but it
runs the engine, so run it under the bench lock beside timed work.

    env PYTHONPATH=$PWD .venv/bin/python bench/workload_log_flushes.py [--ssd-transactions N]
    (root; about 40 s; JSON on stdout, or -o FILE)
"""

from __future__ import annotations

import json
from pathlib import Path

import cpu_condition as cpu
from hybrid_lab import HybridLab
from replay_dependent_workload import _iotape, _wl
from replay_dependent_workload_args import parser
from workload_truth import zero_logs

from analyzer.lab.hdd import HddModel


def _first(d: object, key: str) -> object:
    """The first value of `key` anywhere in the engine's result (where it sits
    differs between its per-run and per-database figures)."""
    if isinstance(d, dict):
        if key in d:
            return d[key]
        d = list(d.values())
    if isinstance(d, list):
        for v in d:
            found = _first(v, key)
            if found is not None:
                return found
    return None


def _figures(res: dict) -> dict:
    return {
        "elapsed_s": res["elapsed_s"],
        "log_flushes": res["log_flushes"][0],  # the first (only) storage group's
        "commits": _first(res, "commits"),
        "durable_commits": _first(res, "durable_commits"),
        "log_writes": int(res["total"]["log-write"]["count"]),
        "operations_digest": _first(res, "operations_digest"),
    }


def main() -> None:
    ap = parser(__doc__.split("\n\n")[0], Path("/dev/stdout"))
    args = ap.parse_args()
    out = {}
    model = HddModel(spindles=args.spindles)
    with HybridLab(size_mb=args.size_mb, memory_disk=True, hdd=model) as lab:
        for name, dev in (("ssd", lab.fast), ("hdd", lab.slow)):
            # the truths' starting state: databases anew, the log region zeroed
            _iotape(*_wl(dev, args), "--recreate", "--transactions", "1", "--json")
            zero_logs(dev, args)
            with cpu.held(args.condition):
                work = ["--transactions", str(args.ssd_transactions), "--json"]
                out[name] = _figures(json.loads(_iotape(*_wl(dev, args), *work)))
    text = json.dumps(out, indent=2)
    print(text)
    if str(args.output) != "/dev/stdout":
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
