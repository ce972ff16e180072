"""Opening an input: plain, gzip, xz or zstd, recognised by content, with a count
of the raw bytes read for progress."""

from __future__ import annotations

import contextlib
import gzip
import lzma
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import IO, BinaryIO

from base.errors import IotapeError

_GZ, _XZ, _ZST = b"\x1f\x8b", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd"


class Counted:
    """A stream that counts the compressed bytes read, for progress."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.pos = 0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.pos += len(data)
        return data

    def readline(self, n: int = -1) -> bytes:
        data = self.f.readline(n)
        self.pos += len(data)
        return data

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")


def _pipe(f: IO[bytes] | None) -> IO[bytes]:
    assert f is not None  # the zstd pipe's ends: Popen made both with PIPE
    return f


@contextlib.contextmanager
def open_input(path: str | os.PathLike) -> Iterator[tuple[BinaryIO, Counted]]:
    """(decompressed stream, raw-byte counter) for a plain, gzip, xz or zstd file."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 (closed in the finally below)
    except FileNotFoundError:
        raise IotapeError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise IotapeError(f"{path}: is a directory") from None
    except PermissionError:
        raise IotapeError(f"{path}: permission denied") from None
    proc = None
    try:
        head = raw.read(6)
        raw.seek(0)
        counted = Counted(raw)
        if head.startswith(_GZ):
            # GzipFile wants seek() too, but only seeks when its caller does; readers do not.
            stream = gzip.GzipFile(fileobj=counted, mode="rb")  # type: ignore[call-overload]
        elif head.startswith(_XZ):
            # LZMAFile types its file as IO[bytes] but calls only read().
            stream = lzma.LZMAFile(counted, mode="rb")  # type: ignore[arg-type]  # noqa: SIM115
        elif head.startswith(_ZST):
            # python-zstandard is not a dependency; the zstd tool decompresses in a pipe.
            if shutil.which("zstd") is None:
                raise IotapeError(f"{path}: zstd-compressed, and the zstd tool is not installed")
            proc = subprocess.Popen(
                ["zstd", "-dc", "--", os.fspath(path)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert proc.stdout is not None and proc.stderr is not None  # both are PIPE
            # Progress cannot see into the pipe; it shows events only.
            stream = proc.stdout
        else:
            stream = counted
        try:
            yield stream, counted
        except (EOFError, OSError, lzma.LZMAError) as e:
            raise IotapeError(f"{path}: damaged compressed data: {e}") from None
        # A reader that stopped early (detection reads 64 KiB) leaves zstd blocked on
        # a full pipe: waiting for it would hang, and there is no outcome to check.
        if proc is not None and not _pipe(proc.stdout).read(1) and proc.wait() != 0:
            err = _pipe(proc.stderr).read().decode(errors="replace").strip().splitlines()
            raise IotapeError(f"{path}: zstd: {err[-1] if err else 'failed'}")
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            _pipe(proc.stdout).close()
            _pipe(proc.stderr).close()
        raw.close()


PEEK_BYTES = 65536


def peek(path: str | os.PathLike, n: int = PEEK_BYTES) -> bytes:
    with open_input(path) as (f, _):
        return f.read(n)


class MultiCounter(Counted):
    def __init__(self, parts: list[Counted]) -> None:
        self.parts = parts

    @property
    def pos(self) -> int:  # type: ignore[override]  # read-only: the parts count, not us
        return sum(p.pos for p in self.parts)
