"""`iotape ingest` with its DuckDB store in a forked process (analyzer/store/forked.py):
the same store as the store kept in the command's process, DuckDB never imported by
the command itself, and no half-written store, no process left and one line of error
when the trace breaks half-way, when the store's process dies and on Ctrl-C."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from trace_helpers import chunk_offsets, make_trace, workload_records

ROOT = Path(__file__).resolve().parent.parent
# The command as a script's process runs it (launch.py), with a hook before it:
# argv[1] is Python run first (a patch), the rest the command's words.
SCRIPT = "import sys\nexec(sys.argv.pop(1))\nfrom iotape.launch import main\nmain()\n"


def _run(*args: str, hook: str = "", fork: bool = True) -> subprocess.CompletedProcess:
    """The command in a process group of its own; none of the group is left after it
    (the store's process reaped, none orphaned)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IOTAPE_INGEST_FORK": "1" if fork else "0"}
    cmd = [sys.executable, "-c", SCRIPT, hook, "ingest", *args]
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    out, err = p.communicate(timeout=120)
    assert _alone(p.pid)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def _alone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _sums(db: Path) -> dict:
    """The event files' SHA-256 and each table's count and sum(hash) (the run row less
    its ingest time and version)."""
    out: dict = {}
    for f in sorted(Path(f"{db}.events").rglob("*")):
        if f.is_file():
            out[str(f.relative_to(f"{db}.events"))] = hashlib.sha256(f.read_bytes()).hexdigest()
    with duckdb.connect(str(db), read_only=True) as con:
        tables = con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()
        for (t,) in tables:
            cols = [
                c for (c,) in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [t]
                ).fetchall() if c not in ("ingested_ns", "version")
            ]  # fmt: skip
            quoted = ", ".join(f'"{c}"' for c in cols)
            out[t] = con.execute(f'SELECT count(*), sum(hash({quoted})) FROM "{t}"').fetchall()
    return out


@pytest.fixture(scope="module", params=["none", "zstd"])
def trace(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Plain chunks, and compressed ones (what captures write)."""
    d = tmp_path_factory.mktemp("forked")
    return make_trace(
        d / "t.iot", workload_records(60_000, seed=5), chunk_records=2_000,
        compression=request.param,
    )  # fmt: skip


@pytest.fixture
def broken(trace: Path, tmp_path: Path) -> Path:
    """The trace with a payload byte flipped in its 20th of 30 chunks."""
    bad = tmp_path / "bad.iot"
    data = bytearray(trace.read_bytes())
    data[chunk_offsets(trace)[20] + 300] ^= 0x01
    bad.write_bytes(data)
    return bad


def test_the_forked_store_is_the_same_store(trace: Path, tmp_path: Path) -> None:
    got = {}
    for fork in (True, False):
        db = tmp_path / f"{fork}" / "s.duckdb"
        first = _run(str(trace), "--db", str(db), "--tag", "k=v", fork=fork)
        again = _run(str(trace), "--db", str(db), fork=fork)
        assert first.returncode == again.returncode == 0, first.stderr + again.stderr
        assert "already ingested" in again.stdout
        got[fork] = _sums(db)
    assert got[True] == got[False]
    assert got[True]["run_histograms"][0][0] > 100


def test_the_command_imports_no_duckdb_itself(trace: Path, tmp_path: Path) -> None:
    """DuckDB is the child's: imported in the command's process only where the store
    stays there."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from iotape import ingest_command\n"
        "ingest_command.run([Path(sys.argv[1])], sys.argv[2], None, None, True)\n"
        "print('duckdb' in sys.modules)\n"
    )
    for fork, want in ((True, "False"), (False, "True")):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "IOTAPE_INGEST_FORK": str(int(fork))}
        db = tmp_path / f"{fork}.duckdb"
        p = subprocess.run(
            [sys.executable, "-c", code, str(trace), str(db)],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines()[-1] == want


def test_a_trace_broken_half_way_leaves_no_store(broken: Path, tmp_path: Path) -> None:
    """One line naming the file and the chunk, exit 2, and nothing made: the store's
    file, its event files and its directories are gone, as with the store in-process."""
    said = {}
    for fork in (True, False):
        db = tmp_path / f"new-{fork}" / "dir" / "s.duckdb"
        p = _run(str(broken), "--db", str(db), fork=fork)
        assert p.returncode != 0
        assert len(p.stderr.splitlines()) == 1, p.stderr
        assert "chunk 20: payload checksum" in p.stderr
        assert not (tmp_path / f"new-{fork}").exists()
        said[fork] = p.returncode, p.stderr
    assert said[True] == said[False]


def test_a_trace_broken_half_way_leaves_a_store_as_it_was(
    trace: Path, broken: Path, tmp_path: Path
) -> None:
    db = tmp_path / "s.duckdb"
    other = make_trace(tmp_path / "o.iot", workload_records(3_000, seed=9))
    assert _run(str(other), "--db", str(db)).returncode == 0
    before = _sums(db)
    p = _run(str(broken), "--db", str(db))
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1
    assert _sums(db) == before


# Kills the store's process as the events begin to go in: the command learns of it
# at the histograms' insert, after every event file was written.
KILL_CHILD = (
    "import os, signal\n"
    "from analyzer.store import forked_store\n"
    "_ib = forked_store.ForkedStore.insert_batches\n"
    "def ib(self, *a, **k):\n"
    "    os.kill(self.child.pid, signal.SIGKILL)\n"
    "    return _ib(self, *a, **k)\n"
    "forked_store.ForkedStore.insert_batches = ib\n"
)


@pytest.mark.parametrize("existing", [False, True])
def test_the_store_process_dying_fails_the_command_cleanly(
    existing: bool, trace: Path, tmp_path: Path
) -> None:
    """One line, exit 2 (a store's error); a new store gone, an existing one as it was."""
    db = tmp_path / "store" / "s.duckdb"
    if existing:
        other = make_trace(tmp_path / "o.iot", workload_records(3_000, seed=9))
        assert _run(str(other), "--db", str(db)).returncode == 0
        before = _sums(db)
    p = _run(str(trace), "--db", str(db), hook=KILL_CHILD)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        f"iotape: error: duckdb://{db}: the store's process ended (signal 9)"
    ], p.stderr
    if existing:
        assert _sums(db) == before
    else:
        assert not db.parent.exists()


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_ctrl_c_mid_ingest_leaves_no_store_nor_process(codec: str, tmp_path: Path) -> None:
    """SIGINT to the whole process group (a terminal's Ctrl-C) while the event files
    are being written: exit 130, the store's process ignored it and was rolled back
    and closed by the command, nothing left."""
    records = workload_records(1_500_000, seed=7)
    big = make_trace(tmp_path / "big.iot", records, chunk_records=8192, compression=codec)
    db = tmp_path / "new" / "s.duckdb"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IOTAPE_INGEST_FORK": "1"}
    p = subprocess.Popen(
        [sys.executable, "-m", "iotape", "ingest", str(big), "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    runs = Path(f"{db}.events")
    deadline = time.monotonic() + 60
    # The run's directory appears when its first event file starts.
    while not any(d.name != "run_id=none" for d in runs.glob("run_id=*")):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.002)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert err == ""  # as typer ends an interrupted command: 130, no words
    assert not (tmp_path / "new").exists()
    assert _alone(p.pid)


# Ctrl-C as the COMMIT has gone to the store's process and its reply is awaited.
CTRL_C_AT_COMMIT = (
    "import os, signal\n"
    "from analyzer.store import forked_store\n"
    "_sync = forked_store.ForkedStore._sync\n"
    "def sync(self):\n"
    "    if self._in_tx:\n"
    "        os.kill(os.getpid(), signal.SIGINT)\n"
    "    return _sync(self)\n"
    "forked_store.ForkedStore._sync = sync\n"
)


def test_ctrl_c_during_the_commit_leaves_the_run_whole(trace: Path, tmp_path: Path) -> None:
    """Held until the commit's outcome is known, then exit 130: the run is in the store
    with every file (without the hold, the files would be removed under a committed
    run)."""
    whole = tmp_path / "whole.duckdb"
    assert _run(str(trace), "--db", str(whole)).returncode == 0
    db = tmp_path / "s.duckdb"
    p = _run(str(trace), "--db", str(db), hook=CTRL_C_AT_COMMIT)
    assert p.returncode == 130, p.stderr
    assert _sums(db) == _sums(whole)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_the_command_killed_leaves_the_child_to_roll_back_and_go(
    codec: str, tmp_path: Path
) -> None:
    """SIGKILL to the command alone while its events are written: the child sees its
    pipe end, closes its connection (nothing committed) and exits on its own."""
    records = workload_records(1_500_000, seed=8)
    big = make_trace(tmp_path / "big.iot", records, chunk_records=8192, compression=codec)
    db = tmp_path / "s.duckdb"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IOTAPE_INGEST_FORK": "1"}
    p = subprocess.Popen(
        [sys.executable, "-m", "iotape", "ingest", str(big), "--db", str(db)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not any(d.name != "run_id=none" for d in Path(f"{db}.events").glob("run_id=*")):
        assert p.poll() is None and time.monotonic() < deadline
        time.sleep(0.002)
    p.kill()
    p.wait()
    while not _alone(p.pid):  # the child, orphaned, goes by itself
        assert time.monotonic() < deadline, "the store's process outlived its command"
        time.sleep(0.01)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]


# Run in a fresh process: the store forks only where no other thread runs, and
# pytest's own process may hold threads from earlier tests (it did in CI).
MID_MESSAGE = """
import os, sys
from analyzer.store import forked, forked_child
from analyzer.store.opener import _open_forked

child = forked.start(sys.argv[1], [])
assert child is not None, "threads before the fork"
store = _open_forked(sys.argv[1], child)
real = forked_child.send

def cut(fd, obj):
    if "INSERT" in str(obj):
        os.write(fd, b"\\xff\\x00\\x00\\x00half")  # a frame of 255 bytes, 4 of them sent
        raise KeyboardInterrupt
    real(fd, obj)

forked_child.send = cut
try:
    with store.transaction():
        store.execute("INSERT INTO streams VALUES ('r', 1, 'x')")
except KeyboardInterrupt:
    print("interrupted")
forked_child.send = real
store.close()
print("child", child.returncode)
"""


def test_ctrl_c_mid_message_hangs_up_and_rolls_back(tmp_path: Path) -> None:
    """A message cut off half-way (Ctrl-C inside the write) leaves the pipe out of step:
    the rollback hangs up instead of sending, and the child rolls back as it closes."""
    db = tmp_path / "s.duckdb"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(
        [sys.executable, "-c", MID_MESSAGE, str(db)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )  # fmt: skip
    out, err = p.communicate(timeout=120)
    assert _alone(p.pid)
    assert p.returncode == 0, err
    assert out.split("\n")[:2] == ["interrupted", "child 0"], (out, err)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM streams").fetchall() == [(0,)]


def test_a_store_from_before_event_files_is_moved_in_process(trace: Path, tmp_path: Path) -> None:
    """A store whose events are still a table is migrated by DuckDBStore: the forked
    store hands over to it (forked_store.InProcess) and the ingest goes on."""
    db = tmp_path / "s.duckdb"
    other = make_trace(tmp_path / "o.iot", workload_records(3_000, seed=9))
    assert _run(str(other), "--db", str(db)).returncode == 0
    with duckdb.connect(str(db)) as con:  # an empty legacy table: nothing to move
        con.execute('CREATE TABLE main."events" ("run_id" VARCHAR)')
    p = _run(str(trace), "--db", str(db))
    assert p.returncode == 0, p.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        tables = {t for (t,) in got}
        assert "events" not in tables
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(2,)]


def test_a_file_that_is_no_store_is_said_the_same_way(trace: Path, tmp_path: Path) -> None:
    said = []
    for fork in (True, False):
        db = tmp_path / "not-a-store.duckdb"
        db.write_bytes(b"not a DuckDB file at all" * 200)
        p = _run(str(trace), "--db", str(db), fork=fork)
        assert p.returncode != 0 and len(p.stderr.splitlines()) == 1, p.stderr
        assert "cannot open as a DuckDB store" in p.stderr
        assert db.read_bytes() == b"not a DuckDB file at all" * 200
        said.append((p.returncode, p.stderr))
    assert said[0] == said[1]


AT_COMMIT = """
import os, sys
from pathlib import Path
from analyzer.store import forked
from analyzer.store.ingest import ingest
from analyzer.store.opener import _open_forked

db, trace = sys.argv[1], Path(sys.argv[2])
child = forked.start(db, [trace])
assert child is not None, "threads before the fork"
store = _open_forked(db, child)
r = ingest(store, trace)
wal = Path(db + ".wal")
print(r.events, wal.exists() and wal.stat().st_size > 0)
store.close()
"""


def test_the_run_is_in_the_file_at_its_commit(trace: Path, tmp_path: Path) -> None:
    """The run's commit writes its rows to the store's file (a checkpoint) instead of
    the WAL that the close then copied to the file: once the ingest has returned, no
    WAL holds them, and the store is the same as the command's."""
    db = tmp_path / "s.duckdb"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-c", AT_COMMIT, str(db), str(trace)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["60000", "False"], (p.stdout, p.stderr)
    whole = tmp_path / "whole.duckdb"
    assert _run(str(trace), "--db", str(whole)).returncode == 0
    assert _sums(db) == _sums(whole)
