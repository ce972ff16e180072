"""The process that holds a store's DuckDB connection for `iotape ingest` (issue 36;
analyzer/store/forked.py is the side that talks to it). Forked at the command's start,
it imports DuckDB and connects on the other core while the command imports numpy and
pyarrow and starts converting its trace: DuckDB's import held the GIL for ~60 ms that
the conversion of the first batches waited for, and that is the point of a process.

It imports only the standard library and DuckDB's C extension (no numpy, no
pyarrow: ~0.1 s of CPU for nothing here), and knows no SQL of its own: it runs
what it is sent.

Messages are pickled and length-prefixed on a pipe each way. A request is (op, sql,
params):
- "exec": run, no reply; a failure is kept and the rest skipped up to the next
  request that replies (the caller's transaction is aborted by then anyway);
- "rows": run and reply with every row, or the error kept or raised;
- "sync": reply with the error kept, or None;
- "rollback": roll back whatever is open, forget a kept error, reply;
- "close": close the connection (DuckDB's checkpoint), reply, exit.
A reply is ("ok", value) or ("err", first line, io) where io says DuckDB could not
open or write the file. The first reply, unasked, says whether the connect worked.
The end of the request pipe (the command died) closes the connection, which rolls
back what was open, and exits. SIGINT is ignored: a Ctrl-C reaches the whole
process group, and the command decides, rolls back and closes here.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
from typing import Any

_LEN = struct.Struct("<I")


def send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LEN.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def recv(fd: int) -> Any:
    """The next message, or None at the end of the pipe."""
    head = _read(fd, _LEN.size)
    if head is None:
        return None
    body = _read(fd, _LEN.unpack(head)[0])
    if body is None:
        return None
    return pickle.loads(body)


def _read(fd: int, n: int) -> bytes | None:
    parts: list[bytes] = []
    while n:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            return None
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def serve(path: str, rfd: int, wfd: int) -> None:
    """The child's whole life after the fork; never returns (os._exit)."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _serve(path, rfd, wfd)
    except BaseException:
        code = 1  # the command sees the pipe end and says so
    finally:
        os._exit(code)


def _serve(path: str, rfd: int, wfd: int) -> None:
    # DuckDB's C extension alone where it is a module of its own (DuckDB 1.4 on):
    # ~20 ms to import against ~60-75 for the package, whose relational API and
    # importlib.metadata (its version) this child has no use for: it runs SQL with
    # parameters and fetches rows, which the extension does itself. The package's
    # `duckdb.connect` and errors are the extension's.
    try:
        import _duckdb as duckdb
    except ImportError:
        import duckdb  # type: ignore[no-redef]

    try:
        con = duckdb.connect(path)
    except duckdb.Error as e:
        send(wfd, ("err", first_line(e), isinstance(e, duckdb.IOException)))
        return
    send(wfd, ("ok", None))
    kept: tuple | None = None
    try:
        while True:
            msg = recv(rfd)
            if msg is None:
                return
            op, sql, params = msg
            rows = None
            if op in ("exec", "rows") and kept is None:
                try:
                    got = con.execute(sql, params or None)
                    rows = got.fetchall() if op == "rows" else None
                except duckdb.Error as e:
                    kept = ("err", first_line(e), isinstance(e, duckdb.IOException))
            if op == "exec":
                continue
            if op == "rollback":
                kept = None
                # Nothing open where the failure rolled it back already.
                with contextlib.suppress(duckdb.Error):
                    con.rollback()
            elif op == "close":
                con.close()
            send(wfd, kept or ("ok", rows))
            kept = None  # said once, to the request that replied
            if op == "close":
                return
    finally:
        con.close()
