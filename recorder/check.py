"""Check a trace file and repair one that was cut short or damaged.

Repair never rewrites the valid prefix: it copies everything after the last valid
chunk to PATH.damaged-tail (so nothing a user recorded is lost), truncates there,
and appends a footer with `"repaired": true` and a trailer. A crash in the middle
of a repair leaves a file that repair can finish.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from iotape.errors import IotapeError
from iotape.recorder.tracefile import ScanReport, encode_footer, scan

# Footer keys of the damaged original that still hold once chunks are dropped.
_CARRIED = ("lost", "pre_start", "end_mono_ns", "end_wall_ns", "duration_ns", "cpu")


def check(path: str | os.PathLike) -> ScanReport:
    """Validate every chunk, the footer and the trailer; say where the valid data ends.

    Raises `TraceFormatError` when the header itself is bad.
    """
    return scan(path)


@dataclass
class RepairReport:
    path: str
    repaired: bool
    before: ScanReport
    kept_chunks: int
    kept_events: int
    truncated_at: int
    removed_bytes: int
    dropped_events: int
    tail_backup: str | None
    footer: dict | None

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "before"}
        d["before"] = self.before.to_dict()
        return d


def repair(path: str | os.PathLike) -> RepairReport:
    """Keep every valid chunk, save the rest to PATH.damaged-tail, append a footer.

    A complete file is left untouched. A file whose header is bad is refused
    (`TraceFormatError`) and left untouched.
    """
    path = Path(path)
    try:
        with open(path, "r+b") as f:
            _lock(f, path)
            before = scan(path)
            if before.complete:
                return RepairReport(
                    path=str(path),
                    repaired=False,
                    before=before,
                    kept_chunks=before.chunks,
                    kept_events=before.events,
                    truncated_at=before.file_bytes,
                    removed_bytes=0,
                    dropped_events=0,
                    tail_backup=None,
                    footer=before.footer,
                )
            if os.fstat(f.fileno()).st_size != before.file_bytes:
                raise IotapeError(f"{path}: the file is growing; is it still being recorded?")
            tail = before.file_bytes - before.valid_end
            backup = _save_tail(f, path, before.valid_end) if tail else None
            footer = repair_footer(before, backup)
            f.truncate(before.valid_end)
            f.seek(before.valid_end)
            f.write(encode_footer(footer, before.valid_end))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise IotapeError(f"{path}: cannot repair: {e.strerror or e}") from None
    after = scan(path)
    if not after.complete:
        raise RuntimeError(f"{path}: still damaged after repair: {after.problem}")
    return RepairReport(
        path=str(path),
        repaired=True,
        before=before,
        kept_chunks=before.chunks,
        kept_events=before.events,
        truncated_at=before.valid_end,
        removed_bytes=tail,
        dropped_events=footer["dropped_events"],
        tail_backup=str(backup) if backup else None,
        footer=footer,
    )


def _lock(f, path: Path) -> None:
    # A recorder that holds an exclusive lock on its output is still writing it.
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise IotapeError(
                f"{path}: locked by another process (still being recorded?)"
            ) from None
        raise


def dropped_events(rep: ScanReport) -> int:
    """Records the file once held past its valid prefix, as well as can be told."""
    old = rep.damaged_footer or {}
    events = old.get("events")
    if isinstance(events, int) and not isinstance(events, bool) and events >= rep.events:
        return max(events - rep.events, rep.dropped_events)
    return rep.dropped_events


def repair_footer(rep: ScanReport, backup: Path | None) -> dict:
    old = rep.damaged_footer or {}
    footer = {k: old[k] for k in _CARRIED if k in old}
    footer.setdefault("lost", {})
    if "stop_reason" in old:
        footer["original_stop_reason"] = old["stop_reason"]
    if "duration_ns" not in footer:
        # No end time survived: the last completion is the best estimate of it.
        last = rep.last_complete_ns
        footer["duration_ns"] = last
        for key, start in (("end_mono_ns", "mono_start_ns"), ("end_wall_ns", "wall_start_ns")):
            if isinstance(rep.header.get(start), int):
                footer[key] = rep.header[start] + last
        footer["end_estimated"] = True
    footer.update(
        stop_reason="repair",
        repaired=True,
        events=rep.events,
        chunks=rep.chunks,
        dropped_events=dropped_events(rep),
        dropped_chunks=rep.dropped_chunks,
        damaged_bytes=rep.file_bytes - rep.valid_end,
        damaged_tail=backup.name if backup else None,
        repair_reason=f"byte {rep.problem_offset}: {rep.problem_reason}",
    )
    return footer


def _save_tail(f, path: Path, start: int) -> Path:
    """Copy bytes from `start` to the end into a new PATH.damaged-tail[.N], durably."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tail.tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            f.seek(start)
            shutil.copyfileobj(f, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        for n in range(1000):
            target = path.with_name(path.name + ".damaged-tail" + (f".{n}" if n else ""))
            try:
                # link() fails if the name is taken, so an earlier backup is never overwritten.
                os.link(tmp, target)
                break
            except FileExistsError:
                continue
        else:
            raise IotapeError(f"{path}: too many .damaged-tail files beside it")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target
