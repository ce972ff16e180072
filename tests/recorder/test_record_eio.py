"""EIO in a rotated capture: every file stays a valid trace, one line says which file
and why, exit 2, no request of the capture lost from the files kept or doubled.

The fault: strace's syscall fault injection (`-e inject=SYSCALL:error=EIO`) in the
loader, limited to one file's path (`-P`), so the loader's openat of the next file,
or one write of a chunk, returns EIO as a failing disk makes it: at the system
call, the rest of the file system untouched. (Device-mapper's `error` target is not
available here, and a loop device over a full file system reports its EIO at
writeback, where nothing can be written any more: there is no footer to test.)"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
from conftest import need
from helpers import fio_args, fio_multiset, iotape, trace_multiset

from recorder.capture.flight import LOADER
from recorder.tracefile import open_trace, segments_of

pytestmark = pytest.mark.kernel


def _with_eio(tmp_path: Path, path: Path, syscalls: str, when: str) -> dict[str, str]:
    """IOTAPE_REC for a loader whose SYSCALLS on PATH fail with EIO at call WHEN."""
    need(shutil.which("strace") is not None, "strace (syscall fault injection)")
    need(shutil.which("setpriv") is not None, "setpriv (util-linux)")
    wrapper = tmp_path / "iotape-rec-eio"
    inject = f"inject={syscalls}:error=EIO:when={when}"
    strace = ["strace", "-qq", "-o", "/dev/null", "-P", str(path), "-e", f"trace={syscalls}"]
    # `iotape record` stops its loader by a signal, which here reaches strace: when
    # the fault does not fire, strace dies of it and the loader under it would go on
    # recording, orphaned (strace 6.1 has no --kill-on-exit). setpriv gives the loader
    # a SIGTERM when strace goes, which stops it as a stop signal does.
    loader = ["setpriv", "--pdeathsig", "TERM", str(LOADER)]
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.join([*strace, "-e", inject, *loader])} "$@"\n')
    wrapper.chmod(0o755)
    return {"IOTAPE_REC": str(wrapper)}


@pytest.mark.parametrize(
    ("failing", "syscalls", "when", "message"),
    [
        # The rotation to the third file cannot create it: the capture stops in the second.
        ("e-000002.iot", "openat", "1", "e-000002.iot: cannot write the next file: Input/output"),
        # The fifth write into the second file (a chunk) fails: cut back to its last
        # whole chunk, the footer written after it.
        ("e-000001.iot", "write", "5", "e-000001.iot: Input/output error; stopped the capture"),
    ],
)
def test_eio_leaves_every_file_valid(
    loop, tmp_path: Path, monkeypatch, failing: str, syscalls: str, when: str, message: str
) -> None:
    out, log = tmp_path / "e.iot", tmp_path / "fio.log"
    for k, v in _with_eio(tmp_path, tmp_path / failing, syscalls, when).items():
        monkeypatch.setenv(k, v)
    fio = fio_args(loop.path, log, ios=20000, iodepth=4)
    args = ("--rotate", "64KiB", "--chunk-records", "64", "--compress", "none")
    res = iotape("record", "-o", str(out), "-d", loop.path, *args, "--", *fio)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    files = segments_of(out)
    assert [f.name for f in files] == ["e-000000.iot", "e-000001.iot"]
    for f in files:
        check = iotape("trace", "check", str(f))
        assert check.returncode == 0, check.stdout + check.stderr
    with open_trace(out) as t:
        assert t.footer is not None and t.footer["stop_reason"] == "error"
        recs = t.read_all()
        assert len(recs) == t.footer["events"] > 0
    # What the files hold are fio's requests, none twice.
    assert not (trace_multiset(recs) - fio_multiset(log))
    assert not (tmp_path / "e.ctl").exists()
