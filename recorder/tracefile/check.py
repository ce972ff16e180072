"""Check a trace file and repair one that was cut short or damaged anywhere.

Repair keeps every intact chunk, before and after each damaged range, byte for
byte; it saves the damaged bytes to PATH.damaged (so nothing a user recorded is
lost) and writes a footer with `"repaired": true` that lists each gap. When all
the damage is at the end (a crash), it truncates in place and appends the footer,
so a multi-GB capture is not copied; otherwise it writes the repaired file beside
the original and renames it into place. A crash in the middle of a repair leaves
a file that repair can finish.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from base.errors import IotapeError
from recorder.tracefile.format import encode_footer
from recorder.tracefile.scan import Damage, ScanReport, scan

# Footer keys of the damaged original that still hold once chunks are dropped.
_CARRIED = ("lost", "pre_start", "end_mono_ns", "end_wall_ns", "duration_ns", "cpu")
_COPY_BYTES = 1 << 20


def check(path: str | os.PathLike) -> ScanReport:
    """Validate every chunk, the footer and the trailer; list each damaged range.

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
    dropped_chunks: int
    dropped_events: int
    removed_bytes: int
    # Where the file was cut when the damage was all at its end; None when rewritten.
    truncated_at: int | None
    damaged_file: str | None
    gaps: list[dict]
    footer: dict | None

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "before"}
        d["before"] = self.before.to_dict()
        return d


def repair(path: str | os.PathLike) -> RepairReport:
    """Keep every intact chunk, save the damaged bytes to PATH.damaged, write a footer
    that records the gaps.

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
                    dropped_chunks=0,
                    dropped_events=0,
                    removed_bytes=0,
                    truncated_at=None,
                    damaged_file=None,
                    gaps=[],
                    footer=before.footer,
                )
            if os.fstat(f.fileno()).st_size != before.file_bytes:
                raise IotapeError(f"{path}: the file is growing; is it still being recorded?")
            # Nothing intact after the first fault: the crash case, done in place.
            in_place = all(end <= before.valid_end for _, end in before.kept)
            damage = [_merged(before)] if in_place else before.damage
            damage = [d for d in damage if d.length or d.chunks]
            saved = [(d.offset, d.offset + d.length) for d in damage if d.length]
            backup, at = _save_damaged(f, path, saved) if saved else (None, [])
            gaps = _gaps(damage, backup, iter(at))
            footer = repair_footer(before, gaps, backup)
            if in_place:
                f.truncate(before.valid_end)
                f.seek(before.valid_end)
                f.write(encode_footer(footer, before.valid_end))
                f.flush()
                os.fsync(f.fileno())
            else:
                _rewrite(f, path, before, footer)
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
        dropped_chunks=sum(g["chunks"] for g in gaps),
        dropped_events=sum(g["events"] for g in gaps),
        removed_bytes=sum(b - a for a, b in saved),
        truncated_at=before.valid_end if in_place else None,
        damaged_file=str(backup) if backup else None,
        gaps=gaps,
        footer=footer,
    )


def _merged(rep: ScanReport) -> Damage:
    """Everything from the first fault to the end of the file, as one range."""
    ds = rep.damage
    return Damage(
        offset=rep.valid_end,
        length=rep.file_bytes - rep.valid_end,
        reason=ds[0].reason if ds else str(rep.problem_reason),
        first_chunk=ds[0].first_chunk if ds else 0,
        chunks=sum(d.chunks for d in ds),
        events=sum(d.events for d in ds),
        events_exact=all(d.events_exact for d in ds),
        after_ns=ds[0].after_ns if ds else None,
        before_ns=None,
        intact_after=0,
    )


def _gaps(damage: list[Damage], backup: Path | None, saved_at) -> list[dict]:
    out = []
    for d in damage:
        g = asdict(d)
        del g["intact_after"]
        g["damaged_file"] = backup.name if backup and d.length else None
        g["saved_at"] = next(saved_at) if d.length else None
        out.append(g)
    return out


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


def repair_footer(rep: ScanReport, gaps: list[dict], backup: Path | None) -> dict:
    """The repaired file's footer: the original's counters, and every gap so far."""
    old = rep.damaged_footer or {}
    footer = {k: old[k] for k in _CARRIED if k in old}
    footer.setdefault("lost", {})
    if "stop_reason" in old:
        footer["original_stop_reason"] = old.get("original_stop_reason", old["stop_reason"])
    if "duration_ns" not in footer:
        # No end time survived: the last completion is the best estimate of it.
        last = rep.last_complete_ns
        footer["duration_ns"] = last
        for key, start in (("end_mono_ns", "mono_start_ns"), ("end_wall_ns", "wall_start_ns")):
            if isinstance(rep.header.get(start), int):
                footer[key] = rep.header[start] + last
        footer["end_estimated"] = True
    # A repaired file repaired again keeps the gaps of the first repair.
    earlier = [g for g in old.get("gaps") or [] if isinstance(g, dict)]
    every = sorted(earlier + gaps, key=lambda g: (g.get("first_chunk") or 0, g.get("offset") or 0))
    footer.update(
        stop_reason="repair",
        repaired=True,
        events=rep.events,
        chunks=rep.chunks,
        dropped_events=sum(_int(g.get("events")) for g in every),
        dropped_chunks=sum(_int(g.get("chunks")) for g in every),
        damaged_bytes=sum(_int(g.get("length")) for g in every),
        damaged_file=backup.name if backup else None,
        gaps=every,
        repair_reason=f"byte {rep.problem_offset}: {rep.problem_reason}",
    )
    if rep.wakes is not None:
        # As the recorder counts them (`events` includes them): the intact chunks'.
        # The ring's losses are known only where the original footer survived.
        footer["wakes"] = rep.wakes
        if isinstance(old.get("wakes_lost"), int):
            footer["wakes_lost"] = old["wakes_lost"]
    if rep.sched is not None:
        footer["sched"] = rep.sched  # the intact chunks', as the recorder counts them
        if isinstance(old.get("sched_lost"), int):
            footer["sched_lost"] = old["sched_lost"]
    return footer


def _int(v: object) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _copy(f, out, start: int, end: int) -> None:
    f.seek(start)
    left = end - start
    while left > 0:
        block = f.read(min(left, _COPY_BYTES))
        if not block:
            raise OSError(errno.EIO, "file shrank while being repaired")
        out.write(block)
        left -= len(block)


def _rewrite(f, path: Path, rep: ScanReport, footer: dict) -> None:
    """Header and intact chunks, byte for byte, then the footer, into a new file that
    replaces `path` only once it is whole on disk."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".repair.tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            _copy(f, out, 0, rep.data_offset)
            for start, end in rep.kept:
                _copy(f, out, start, end)
            out.write(encode_footer(footer, out.tell()))
            out.flush()
            os.fsync(out.fileno())
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _save_damaged(f, path: Path, ranges: list[tuple[int, int]]) -> tuple[Path, list[int]]:
    """Copy the byte ranges, one after another, into a new PATH.damaged[.N], durably.
    Returns the file and where each range starts in it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".damaged.tmp")
    at = []
    try:
        with os.fdopen(fd, "wb") as out:
            for start, end in ranges:
                at.append(out.tell())
                _copy(f, out, start, end)
            out.flush()
            os.fsync(out.fileno())
        for n in range(1000):
            target = path.with_name(path.name + ".damaged" + (f".{n}" if n else ""))
            try:
                # link() fails if the name is taken, so an earlier backup is never overwritten.
                os.link(tmp, target)
                break
            except FileExistsError:
                continue
        else:
            raise IotapeError(f"{path}: too many .damaged files beside it")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _fsync_dir(path.parent)
    return target, at
