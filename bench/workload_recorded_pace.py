"""How much a recording slows the reference workload itself (issue 34): the same
work (`iotape workload run --transactions N`, the same seed and starting state as
bench/replay_dependent_workload.py's truth) on the SSD-like device, unrecorded,
recorded (`--record`) and recorded with wakes (`--record --record-wakes`, what a
`--think-calibrate` trace needs), in turn, ROUNDS times. A dependent replay
calibrated by a recording replays the recording's CPU a cycle: where the
recording slows the engine, the replay is slowed as much.

    flock /tmp/iotape-bench.lock .venv/bin/python bench/workload_recorded_pace.py [--rounds 3]
        [--transactions 6000]   (root: loop devices; JSON in bench/results/)
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from hybrid_lab import HybridLab
from replay_dependent_workload import engine
from replay_dependent_workload_args import parser
from replay_lab import ROOT

from analyzer.lab.hdd import HddModel

OUT = ROOT / "bench" / "results" / "workload-recorded-pace.json"
WAYS = ("unrecorded", "recorded", "recorded_wakes")


def main() -> None:
    ap = parser(__doc__.split("\n\n")[0], OUT)
    ap.add_argument("--transactions", type=int, default=6000)
    args = ap.parse_args()
    rounds: list[dict] = []
    model = HddModel(spindles=args.spindles)
    with (
        HybridLab(size_mb=args.size_mb, memory_disk=True, hdd=model) as lab,
        tempfile.TemporaryDirectory(prefix="iotape-recpace-") as tmp,
    ):
        for r in range(args.rounds):
            got = {}
            for way in WAYS:
                args.wakes = way == "recorded_wakes"
                trace = Path(tmp) / f"{way}.iot" if way != "unrecorded" else None
                res = engine(lab.fast, args, ["--transactions", str(args.transactions)], trace)
                got[way] = {"tx_iops": res["tx_iops"], "cpu": res["cpu"]}
                if trace is not None:
                    trace.unlink()
            got["ratio"] = {w: round(got[w]["tx_iops"] / got["unrecorded"]["tx_iops"], 3)
                            for w in WAYS[1:]}  # fmt: skip
            print(json.dumps({"round": r, **{w: got[w]["tx_iops"] for w in WAYS},
                              "ratio": got["ratio"]}), flush=True)  # fmt: skip
            rounds.append(got)
    doc = {
        "transactions": args.transactions,
        "condition": args.condition,
        "rounds": rounds,
        "median_tx_iops": {w: statistics.median(r[w]["tx_iops"] for r in rounds) for w in WAYS},
        "median_ratio": {w: statistics.median(r["ratio"][w] for r in rounds) for w in WAYS[1:]},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: doc[k] for k in ("median_tx_iops", "median_ratio")}))


if __name__ == "__main__":
    main()
