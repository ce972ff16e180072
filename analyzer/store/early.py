"""A file to ingest opened before the store is (`open_early`, what `iotape ingest`
does with its first file): a trace starts converting on its helper thread at once,
and its content hash (the run id) is taken while it does. This module imports what
the conversion needs and no more (not the catalog and its queries, ~12 ms), so that
the command starts it as early as it can (iotape/ingest_command.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from analyzer.store.trace_source import (
    PARQUET_SUFFIXES,
    REPORT_SUFFIXES,
    ParquetSource,
    Progress,
    TraceSource,
    source_sha256,
)

if TYPE_CHECKING:
    from analyzer.store.interface import Store


class Source(Protocol):
    """One thing to ingest, opened and checked: what its run is, and how to load it."""

    path: Path

    def describe(self, store: Store) -> dict[str, Any]:
        """The run's fields that come from the source: kind, host, kernel, start_ns,
        duration_ns, parameters, header, parent_id, tags (merged under the user's)."""
        ...

    def load(self, store: Store, run_id: str, progress: Progress | None) -> dict[str, Any]:
        """Insert every part; returns the run fields now known (events, bytes,
        duration_ns) and "summary", a few words for the message."""
        ...

    def close(self) -> None: ...


class Early:
    """A file to ingest, opened before the store is (`open_early`): its content hash
    (the run id) and, for a trace, the source with its conversion under way
    (TraceSource.start), so that the first batches are ready when the store is.
    Other sources are opened by take(). close() when it is not ingested."""

    def __init__(self, path: Path, start: bool = True) -> None:
        self.path = path
        self.source: Source | None = None
        # A trace converts while its hash is taken (~5 ms of chunk headers); one that
        # cannot be opened so is left to the hash and to take(), which say what is
        # wrong with it as before.
        if start and path.suffix.lower() not in PARQUET_SUFFIXES + REPORT_SUFFIXES:
            with contextlib.suppress(Exception):
                if path.is_file():
                    src = TraceSource(path)
                    src.start()
                    self.source = src
        try:
            self.cls, self.sha = _source_class(path)
            if start and self.source is None and self.cls is TraceSource:
                src = TraceSource(path)
                src.start()
                self.source = src
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def take(self) -> Iterator[Source]:
        """The source, opened (here, if not yet), and closed on the way out."""
        src, self.source = self.source, None
        src = src if src is not None else self.cls(self.path)
        try:
            yield src
        finally:
            src.close()

    def close(self) -> None:
        src, self.source = self.source, None
        if src is not None:
            src.close()


def open_early(path: str | Path) -> Early:
    """`path` opened for `ingest` before the store is: a trace starts converting on
    its helper thread while the caller imports and opens the store (~0.1 s of a
    command). A file that cannot be ingested fails here, with its one line."""
    return Early(Path(path))


def _source_class(p: Path) -> tuple[Callable[[Path], Source], str]:
    """What opens `p` and its content hash; a one-line error for what cannot be ingested."""
    if p.is_dir():
        from analyzer.store import ingest_replay

        cls: Callable[[Path], Any] = ingest_replay.ReplaySource
        sha = ingest_replay.jobdir_sha256(p)
    else:
        sha = source_sha256(p)
        suffix = p.suffix.lower()
        if suffix in REPORT_SUFFIXES:
            from analyzer.store import ingest_workload

            cls = ingest_workload.WorkloadSource
        elif suffix in PARQUET_SUFFIXES:
            cls = ParquetSource
        else:
            cls = TraceSource
    return cls, sha
