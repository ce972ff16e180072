"""The command line of bench/replay_dependent_workload.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import cpu_condition as cpu

CAL = "calibrated"  # the dependent replay with --think-calibrate (the first variant's plan)


def parser(description: str, out: Path) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--threads", type=int, default=2, help="session threads")
    ap.add_argument("--mailboxes", type=int, default=50)
    ap.add_argument("--mailbox-size-mb", type=float, default=4)
    ap.add_argument("--cache-mb", type=float, default=8)
    ap.add_argument(
        "--hdd-transactions",
        type=int,
        default=12000,
        help="hdd-ssd: operations per session of the HDD-like recording and the truth on the "
        "SSD-like device",
    )
    ap.add_argument(
        "--ssd-transactions",
        type=int,
        default=1200,
        help="ssd-hdd: operations per session of the SSD-like recording and the truth on the "
        "HDD-like device",
    )
    _runs(ap, out)
    _calibrations(ap)
    return ap


def _calibrations(ap: argparse.ArgumentParser) -> None:
    """The options of the target's calibration: recorded each invocation, or kept."""
    ap.add_argument(
        "--calibrate-s",
        type=float,
        default=0,
        help="per direction, record a short timed engine run of this many seconds on the "
        "target (--calibrate-seed, with its wakes: a run apart from the truth) and replay "
        "the trace also with `--think-calibrate` it (judged first); 0: not",
    )
    ap.add_argument("--calibrate-seed", type=int, default=7, help="the calibration run's seed")
    ap.add_argument(
        "--cycle-cpu",
        action="store_true",
        help="the calibrated plan also with `--cycle-cpu target` (each thread spends its "
        "role's CPU a cycle in the calibration: replayer/plan/cpucycle.py)",
    )
    ap.add_argument(
        "--calibration",
        type=Path,
        help="a kept calibration (recorded on the target with its wakes, as --calibrate-s "
        "records one) instead of recording a new one: every invocation's rounds judge "
        "the same plan; one --directions, the one it was recorded for",
    )


def _runs(ap: argparse.ArgumentParser, out: Path) -> None:
    """The options of what is run and how: truths, rounds, variants, calibration."""
    ap.add_argument(
        "--duration-truth",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also the truth of before: the engine run for --duration / --ssd-duration on the "
        "target after a 1 s run",
    )
    ap.add_argument(
        "--duration", type=float, default=20, help="the timed truth's run on the HDD-like device"
    )
    ap.add_argument(
        "--ssd-duration", type=float, default=0.5, help="its run on the SSD-like device"
    )
    ap.add_argument("--spindles", type=int, default=2)
    ap.add_argument(
        "--wakes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="record the engine with --record-wakes (exact cross-thread edges)",
    )
    ap.add_argument("--size-mb", type=int, default=512)
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="per direction, the truth and the replays this many times (one recording)",
    )
    ap.add_argument(
        "--long-thinks",
        type=lambda v: v.split(","),
        default=["demand", "recorded"],
        help="dependent replays' --long-thinks, comma-separated: the first is judged, "
        "the rest its peers",
    )
    ap.add_argument(
        "--run-queue",
        type=lambda v: v.split(","),
        default=["net"],
        help="dependent replays' --run-queue, comma-separated (each with each --long-thinks, "
        "the first pair judged)",
    )
    ap.add_argument(
        "--trace",
        type=Path,
        help="replay this kept trace (of --directions' source device) instead of recording",
    )
    ap.add_argument("--keep", type=Path, help="copy each recorded trace into this directory")
    ap.add_argument(
        "--directions",
        type=lambda v: v.split(","),
        default=["hdd-ssd", "ssd-hdd"],
        help="hdd-ssd and/or ssd-hdd",
    )
    ap.add_argument("--condition", choices=cpu.CONDITIONS, default="awake",
                    help="the CPUs' condition (bench/cpu_condition.py) for every timed run: "
                    "the recording, the truths, the replays")  # fmt: skip
    ap.add_argument(
        "--peers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="replay the other variants beside the judged one each round (--no-peers: the "
        "judged one and afap only; a long trace's replay lasts most of its recorded span, "
        "its background streams being paced by their clock)",
    )
    ap.add_argument("-o", "--output", type=Path, default=out)


def check(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What the options cannot be together, as one-line errors before anything runs."""
    if args.trace and len(args.directions) != 1:
        ap.error("--trace: give one --directions, the trace's")
    if args.calibrate_s and not args.wakes:
        ap.error("--calibrate-s: the calibration needs its sched records (--wakes)")
    if args.calibration is None:
        return
    # A calibration is the target's: one direction's, and one plan for every round.
    if args.calibrate_s:
        ap.error("--calibration: give it or --calibrate-s, not both")
    if len(args.directions) != 1:
        ap.error("--calibration: give one --directions, the calibration's target's")
    if not args.wakes:
        ap.error("--calibration: the plan needs the trace's sched records (--wakes)")
    if not args.calibration.is_file():
        ap.error(f"--calibration: {args.calibration}: no such file")


def plain_variants(args: argparse.Namespace) -> list[str]:
    """Each --long-thinks with each --run-queue (LT/RQ where the run queue is not just
    the default): the plans without a calibration, the first the calibrated one's."""
    return [
        lt if args.run_queue == ["net"] else f"{lt}/{rq}"
        for lt in args.long_thinks
        for rq in args.run_queue
    ]


def variants(args: argparse.Namespace) -> list[str]:
    """The dependent replays of a round, the judged one first: with a calibration
    (recorded or kept), the first plain variant's plan calibrated, then the plain
    ones as its peers; with --no-peers the judged one alone."""
    out = plain_variants(args)
    if args.calibrate_s or args.calibration:
        out = [CAL, *out]
    return out if args.peers else out[:1]
