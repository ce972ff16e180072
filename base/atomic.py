"""Write a file so that it appears whole or not at all."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(out: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path beside `out`; on success it replaces `out` with the
    usual permissions, on any exception it is removed (no half-written output)."""
    out = Path(out)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        # mkstemp makes 0600; give the file what the user's umask would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
