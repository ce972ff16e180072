"""`iotape ingest`'s DuckDB store in a process of its own (issue 36), forked at the
command's start: `start` forks it (analyzer/store/forked_child.py is its side),
forked_store.ForkedStore is the store the command then uses through it.

Why: the command's first ~0.14 s (interpreter, numpy, pyarrow) run on one core
while the other idles, and DuckDB's import then held the GIL ~60 ms while the
conversion of the trace's first batches waited for it. Forked before numpy is
imported, the child imports DuckDB and connects on the idle core; the command
sends it the store's statements and writes the event files itself, as before.

This module imports only the standard library and the store's URL, so that the
fork comes before anything heavy. IOTAPE_INGEST_FORK=0 keeps the store in the
command's process (the thread of opener.opening), as do inputs other than traces
and Parquet (their sources insert tables this way does not carry), a store in
memory or on ClickHouse, and a process that already runs threads (a fork copies
only the thread that forks).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from analyzer.store import forked_child as wire
from analyzer.store.interface import StoreError, StoreURL, missing_dirs, parse_url

SWITCH = "IOTAPE_INGEST_FORK"


class Child:
    """The forked process and its two pipes. `fresh`: the store's file did not exist
    before; `made`: the directories made for it, outermost first."""

    def __init__(
        self, url: StoreURL, pid: int, rfd: int, wfd: int, fresh: bool, made: list[Path]
    ) -> None:
        self.url = url
        self.pid = pid
        self.rfd, self.wfd = rfd, wfd
        self.fresh = fresh
        self.made = made
        self.taken = False  # a ForkedStore has it: that store's close ends it
        self._connected = False
        self._status: int | None = None
        self._broken = False

    @property
    def returncode(self) -> int | None:
        """The child's exit code once reaped (negative: the signal that ended it)."""
        return self._status

    def connected(self) -> None:
        """Wait for the child's connect; its error as DuckDBStore says it."""
        if self._connected:
            return
        try:
            self._reply()
        except _Refused as e:
            how = "cannot open as a DuckDB store: " if e.io else ""
            raise StoreError(f"{self.url.path}: {how}{e.line}") from None
        self._connected = True

    def send(self, op: str, sql: str = "", params: dict[str, Any] | None = None) -> None:
        if self._status is not None or self._broken:
            raise self._ended()
        try:
            wire.send(self.wfd, (op, sql, params))
        except OSError:  # EPIPE: the child is gone
            raise self._ended() from None
        except BaseException:
            # Ctrl-C half-way through a message: the pipe can carry no more of them.
            self._broken = True
            raise

    def request(self, op: str, sql: str = "", params: dict[str, Any] | None = None) -> Any:
        """Send a request that replies, and its reply (a StoreError for an error)."""
        self.connected()
        self.send(op, sql, params)
        try:
            return self._reply()
        except _Refused as e:
            raise StoreError(f"{self.url.display()}: {e.line}") from None

    def _reply(self) -> Any:
        try:
            got = wire.recv(self.rfd)
        except OSError:
            got = None
        except BaseException:
            self._broken = True  # a reply left half-read: the pipe is out of step
            raise
        if got is None:
            raise self._ended()
        if got[0] == "err":
            raise _Refused(got[1], got[2])
        return got[1]

    def _ended(self) -> StoreError:
        """The child ended before it was told to: what the command says of it."""
        if self._broken:
            return StoreError(f"{self.url.display()}: the store's pipe broke off mid-message")
        self.wait()
        status = self._status or 0
        how = f"signal {-status}" if status < 0 else f"exit {status}"
        return StoreError(f"{self.url.display()}: the store's process ended ({how})")

    def end(self) -> None:
        """Close the connection (its checkpoint) and wait for the child; its error, if
        the close failed or the child had died, raised after the wait."""
        try:
            if self._status is None and not self._broken:
                self.request("close")
        finally:
            self.wait()

    def rollback(self) -> None:
        """Roll back what is open; where the pipe is out of step (Ctrl-C mid-message),
        hang up instead: the child closes its connection, which rolls it back."""
        if self._broken:
            self.wait()
        elif self._status is None:
            self.request("rollback")

    def wait(self) -> None:
        """The child reaped and the pipes closed; once."""
        if self._status is not None:
            return
        for fd in (self.wfd, self.rfd):
            with contextlib.suppress(OSError):
                os.close(fd)
        _, status = os.waitpid(self.pid, 0)
        self._status = os.waitstatus_to_exitcode(status)

    def abandon(self) -> None:
        """The command failed before a store took the child: end it, and remove the
        store it made (nothing went in it)."""
        if self.taken:
            return
        with contextlib.suppress(StoreError):
            self.end()
        if self.fresh:
            remove_new_store(self.url.path, self.made)


class _Refused(Exception):
    def __init__(self, line: str, io: bool) -> None:
        super().__init__(line)
        self.line, self.io = line, io


def start(url: str | None, files: list[Path]) -> Child | None:
    """The store at `url` opened in a forked process for ingesting `files`; None
    where the command keeps it in its own (the module doc says when)."""
    if os.environ.get(SWITCH, "1") == "0" or threading.active_count() != 1:
        return None
    try:
        u = parse_url(url)
    except StoreError:
        return None  # said by open_store, as before
    if u.scheme != "duckdb" or u.path == ":memory:":
        return None
    if any(f.is_dir() or f.suffix.lower() == ".json" for f in files):
        return None
    p = Path(u.path)
    if p.is_dir():
        return None
    fresh = not p.exists()
    made: list[Path] = []
    if fresh:
        made = missing_dirs(p.parent)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None  # DuckDBStore says what is wrong, as before
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(down_w)
        os.close(up_r)
        wire.serve(u.path, down_r, up_w)
    os.close(down_r)
    os.close(up_w)
    return Child(u, pid, up_r, down_w, fresh, made)


def remove_new_store(path: str, made: list[Path]) -> None:
    """A store this command made and put nothing in: its file, WAL, event files and
    the directories made for it (deepest first, while empty)."""
    for f in (Path(path), Path(f"{path}.wal")):
        f.unlink(missing_ok=True)
    shutil.rmtree(f"{path}.events", ignore_errors=True)
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:
            break
