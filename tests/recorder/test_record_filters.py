"""Who submitted each request: the recorder's filters (comm, op, pid, cgroup), thread
names to streams, and each record's pid, tid and name from the submitting thread."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import fio_args, fio_multiset, trace_multiset, trace_records
from test_record import OP, STREAM, _record

# Every test here needs root and loop devices (conftest `kernel`).
pytestmark = pytest.mark.kernel


def test_filters_comm_and_op(loop, tmp_path: Path) -> None:
    def script(log: Path) -> str:
        fio_cmd = " ".join(fio_args(loop.path, log, ios=800))
        dd_cmd = f"dd if={loop.path} of=/dev/null bs=64k count=50 iflag=direct status=none"
        return f"{fio_cmd} >/dev/null & {dd_cmd}; wait"

    only_dd = tmp_path / "dd.iot"
    _record(only_dd, "-d", loop.path, "--comm", "dd", "--", "sh", "-c", script(tmp_path / "1.log"))
    recs = trace_records(only_dd)
    assert len(recs) == 50
    assert set(recs["comm"].tolist()) == {b"dd"}
    assert set(recs["bytes"].tolist()) == {65536}

    writes, log = tmp_path / "w.iot", tmp_path / "2.log"
    _record(writes, "-d", loop.path, "--op", "write", "--", "sh", "-c", script(log))
    recs = trace_records(writes)
    fio_writes = Counter({k: n for k, n in fio_multiset(log).items() if k[0] == OP["write"]})
    assert sum(fio_writes.values()) > 0
    assert set(recs["op"].tolist()) == {OP["write"]}
    assert trace_multiset(recs) == fio_writes


def test_pid_filter(loop, tmp_path: Path) -> None:
    out, log = tmp_path / "p.iot", tmp_path / "fio.log"
    go, done = tmp_path / "go", tmp_path / "done"
    # Both start their I/O only once the recorder is attached (its command touches
    # `go`), not after a fixed delay that a loaded machine can outlast; the
    # recording ends when the test has reaped both. `exec` keeps the shell's pid,
    # and --thread keeps fio's job in that process, so the pid is known up front.
    wait_go = f"while [ ! -e {go} ]; do sleep 0.02; done; exec"
    fio_cmd = " ".join(fio_args(loop.path, log, ios=500, extra=["--thread"]))
    fio = subprocess.Popen(["sh", "-c", f"{wait_go} {fio_cmd}"], stdout=subprocess.DEVNULL)
    noise = f"dd if={loop.path} of=/dev/null bs=8k count=100 iflag=direct status=none"
    other = subprocess.Popen(["sh", "-c", f"{wait_go} {noise}"])
    until_done = f"touch {go}; while [ ! -e {done} ]; do sleep 0.02; done"
    recorded: list[subprocess.CompletedProcess] = []
    recorder = threading.Thread(
        target=lambda: recorded.append(
            _record(out, "-d", loop.path, "--pid", str(fio.pid), "--", "sh", "-c", until_done)
        )
    )
    recorder.start()
    try:
        assert fio.wait(timeout=120) == 0
        assert other.wait(timeout=60) == 0
    finally:
        done.touch()
        recorder.join(timeout=120)
        for proc in (fio, other):
            proc.kill()
            proc.wait()
    assert recorded, "iotape record failed"
    recs = trace_records(out)
    assert set(recs["pid"].tolist()) == {fio.pid}
    assert trace_multiset(recs) == fio_multiset(log)


def test_cgroup_filter(loop, tmp_path: Path, tag: str) -> None:
    root = Path("/sys/fs/cgroup/unified")
    if not (root / "cgroup.procs").exists():
        root = Path("/sys/fs/cgroup")
    cg = root / f"iotape-test-{tag}"
    cg.mkdir()
    try:
        out = tmp_path / "cg.iot"
        inside = (
            f"echo $$ > {cg}/cgroup.procs; "
            f"exec dd if={loop.path} of=/dev/null bs=16k count=40 iflag=direct status=none"
        )
        outside = f"dd if={loop.path} of=/dev/null bs=4k count=40 iflag=direct status=none"
        _record(
            out,
            "-d",
            loop.path,
            "--cgroup",
            str(cg),
            "--",
            "sh",
            "-c",
            f"sh -c '{inside}' & {outside}; wait",
        )
        recs = trace_records(out)
        assert len(recs) == 40
        assert set(recs["bytes"].tolist()) == {16384}
        assert set(recs["cgroup_id"].tolist()) == {cg.stat().st_ino}
    finally:
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_thread_name_rules_label_streams(loop, tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    dd = subprocess.run(["sh", "-c", "command -v dd"], capture_output=True, text=True).stdout
    # comm is the name the program was exec'd as: these look like workload threads.
    (bindir / "ese-bdm").symlink_to(dd.strip())
    (bindir / "ese-logfmt").symlink_to(dd.strip())
    out = tmp_path / "s.iot"
    script = (
        f"{bindir}/ese-bdm if={loop.path} of=/dev/null bs=256k count=8 iflag=direct status=none; "
        f"{bindir}/ese-logfmt if=/dev/zero of={loop.path} bs=1M count=2 oflag=direct "
        "seek=100 status=none"
    )
    _record(out, "-d", loop.path, "--", "sh", "-c", script)
    recs = trace_records(out)
    bdm = recs[recs["comm"] == b"ese-bdm"]
    fmt = recs[recs["comm"] == b"ese-logfmt"]
    assert len(bdm) == 8 and set(bdm["stream"].tolist()) == {STREAM["bdm-read"]}
    assert len(fmt) >= 2 and set(fmt["stream"].tolist()) == {STREAM["log-preformat"]}


# The submitter's identity is read from its task (recorder/bpf/iotape.bpf.c,
# submitter()): each thread's own tid and comm, its process's pid. A thread renamed
# to a shorter name must read back as exactly that name (comm NUL-padded, nothing
# of the longer name after it).
THREADS_SCRIPT = """
import ctypes, json, mmap, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
dev, out = sys.argv[1], sys.argv[2]
tids = {}
def run(i):
    libc.prctl(15, b"iotape-longname", 0, 0, 0)  # PR_SET_NAME: 15 chars
    libc.prctl(15, b"iot-t%d" % i, 0, 0, 0)
    fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 4096)
    for k in range(4):
        os.preadv(fd, [buf], (i * 16 + k) * 4096)
    os.close(fd)
    tids[threading.get_native_id()] = "iot-t%d" % i
threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(out, "w") as f:
    json.dump({"pid": os.getpid(), "tids": tids}, f)
"""


def test_submitter_identity_per_thread(loop, tmp_path: Path) -> None:
    script, ids, out = tmp_path / "threads.py", tmp_path / "ids.json", tmp_path / "t.iot"
    script.write_text(THREADS_SCRIPT)
    _record(out, "-d", loop.path, "--", sys.executable, str(script), loop.path, str(ids))
    who = json.loads(ids.read_text())
    recs = trace_records(out)
    assert len(recs) == 12
    assert set(recs["pid"].tolist()) == {who["pid"]}
    by_tid = Counter(zip(recs["tid"].tolist(), recs["comm"].tolist(), strict=True))
    assert by_tid == {(int(tid), name.encode()): 4 for tid, name in who["tids"].items()}
    assert who["pid"] not in {int(tid) for tid in who["tids"]}
