"""The options of a rotated, bounded capture (`iotape record --rotate/--keep/--keep-bytes/
--max-bytes/--ring`): their values, the files they name, and the loader's arguments.

The loader (recorder/rotation.c) writes the files; recorder/tracefile/sequence.py reads
them back as one trace and names them (`segment_path`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from base.errors import IotapeError
from recorder.tracefile import segments_of

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?i?b?)\s*$", re.IGNORECASE)
# Lower case only: `10m` is ten minutes, `10M` ten megabytes.
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
MIN_ROTATE_BYTES = 4096
# --ring WINDOW without --rotate: a file every WINDOW / 10, so the files on disk span
# the window and at most a tenth more.
RING_FILES = 10


def parse_size(option: str, text: str) -> int:
    """Bytes from `1GiB`, `500MB`, `64k` (powers of 1000 without the i) or a number."""
    m = _SIZE.match(text)
    if not m:
        raise IotapeError(f"{option} {text}: not a size (e.g. 1GiB, 500MB, 4096)")
    unit = m.group(2).lower().rstrip("b")
    table = _BINARY if unit.endswith("i") else _UNITS
    return int(float(m.group(1)) * table[unit.rstrip("i")])


def parse_duration(option: str, text: str) -> float:
    """Seconds from `10m`, `1h`, `30s`, `500ms`, `1d` (lower case)."""
    m = _TIME.match(text)
    if not m:
        raise IotapeError(f"{option} {text}: not a duration (e.g. 10m, 1h, 30s)")
    return float(m.group(1)) * _SECONDS[m.group(2)]


@dataclass
class Rotation:
    """When the next file starts (by size or age), what the ring keeps, when to stop."""

    every_bytes: int = 0
    every_s: float = 0.0
    keep: int = 0
    keep_bytes: int = 0
    max_bytes: int = 0
    keep_s: float = 0.0  # --ring: files older than this go

    @property
    def rotates(self) -> bool:
        return bool(self.every_bytes or self.every_s)

    @classmethod
    def parse(
        cls,
        rotate: str | None,
        keep: int | None,
        keep_bytes: str | None,
        max_bytes: str | None,
        ring: str | None = None,
    ) -> Rotation:
        r = cls()
        if rotate is not None:
            if _TIME.match(rotate):
                r.every_s = parse_duration("--rotate", rotate)
                if r.every_s < 0.001:
                    raise IotapeError(f"--rotate {rotate}: at least 1ms")
            else:
                r.every_bytes = parse_size("--rotate", rotate)
                if r.every_bytes < MIN_ROTATE_BYTES:
                    raise IotapeError(f"--rotate {rotate}: at least {MIN_ROTATE_BYTES} bytes")
        if keep is not None:
            if keep < 1:
                raise IotapeError(f"--keep {keep}: at least 1 (the file being written)")
            r.keep = keep
        if keep_bytes is not None:
            r.keep_bytes = parse_size("--keep-bytes", keep_bytes)
            if r.every_bytes and r.keep_bytes < r.every_bytes:
                raise IotapeError(f"--keep-bytes {keep_bytes}: less than one --rotate file")
        if ring is not None:
            r.keep_s = parse_duration("--ring", ring)
            if r.keep_s < 1:
                raise IotapeError(f"--ring {ring}: at least 1s")
            if not r.rotates:
                r.every_s = r.keep_s / RING_FILES
            elif r.every_s > r.keep_s:
                raise IotapeError(f"--ring {ring}: shorter than one --rotate {rotate} file")
        if (r.keep or r.keep_bytes) and not r.rotates:
            raise IotapeError("--keep and --keep-bytes need --rotate (a ring of files)")
        if max_bytes is not None:
            r.max_bytes = parse_size("--max-bytes", max_bytes)
            if r.max_bytes < 1 << 20:
                raise IotapeError(f"--max-bytes {max_bytes}: at least 1MiB")
        return r

    def loader_args(self) -> list[str]:
        args = []
        if self.every_bytes:
            args += ["--rotate-bytes", str(self.every_bytes)]
        if self.every_s:
            args += ["--rotate-ms", str(max(1, round(self.every_s * 1000)))]
        if self.keep:
            args += ["--keep", str(self.keep)]
        if self.keep_bytes:
            args += ["--keep-bytes", str(self.keep_bytes)]
        if self.max_bytes:
            args += ["--max-bytes", str(self.max_bytes)]
        if self.keep_s:
            args += ["--keep-ms", str(max(1, round(self.keep_s * 1000)))]
        return args


def clear_outputs(output: Path, force: bool) -> None:
    """A rotated capture's files must not mix with an earlier one's: refuse them, or
    with --force delete them (and `output` itself, which would hide the sequence)."""
    old = segments_of(output)
    if output.exists():
        old.append(output)
    if not old:
        return
    if not force:
        raise IotapeError(
            f"{old[0]}: exists (from an earlier capture as {output}); "
            "pass --force to delete its files"
        )
    for p in old:
        p.unlink()
