"""bench/record_profile.py: each perf sample goes to the bucket of the leaf it landed in."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from record_profile import classify

PROG = "ffffffffc0027550 bpf_prog_8f75fe637d9c9e4e_on_complete+0x300"


def test_program_own_code_clock_and_task_helper() -> None:
    assert classify(["ksoftirqd/1", PROG, "ffffffff81 bpf_trace_run3+0x8c"], "iotape-rec") == (
        "on_complete own"
    )
    clock = ["fio", "ffffffff81 read_tsc+0x5", "ffffffff81 ktime_get_mono_fast_ns+0x3a", PROG]
    assert classify(clock, "iotape-rec") == "on_complete clock"
    task = ["fio", "ffffffff81 bpf_get_current_task_btf+0x4", PROG.replace("complete", "io_start")]
    assert classify(task, "iotape-rec") == "on_io_start task"


def test_dispatch_loader_and_the_rest() -> None:
    assert classify(["fio", "ffffffff81 bpf_trace_run1+0x20"], "iotape-rec") == "dispatch"
    assert classify(["iotape-rec", "5940 on_event+0x30"], "iotape-rec") == "loader"
    # comm is the first 15 bytes of the loader's name
    assert classify(["iotape-rec.main", "5940 on_event+0x30"], "iotape-rec.main.x") == "loader"
    # a kernel clock read outside BPF is the kernel's, not the recorder's
    assert classify(["fio", "ffffffff81 read_tsc+0x5", "ffffffff81 ktime_get+0x40"], "x") is None
    assert classify(["fio"], "iotape-rec") is None
