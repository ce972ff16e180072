"""What `iotape ingest` does (`run`, which the typer command calls), and its plain
command lines read without typer (`parse`, for iotape/launch.py): typer, its click
and the command map are ~35 ms of a command of ~0.5 s (issue 36), all to read a few
paths and options. Only the plain forms are read here; anything else (help, an
unknown option, an option without its value, `--opt=value`, `--`, an option given
twice) gives None, and typer reads the line as before, its errors and help
included. tests/test_ingest_command.py holds each line read here to typer's
reading of it."""

from __future__ import annotations

import errno
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from base.errors import IotapeError
from base.progress import progress as bar

# The options with a value, by the parameter each sets; --tag may repeat.
_VALUED = {"--db": "db", "--name": "name", "--tag": "tag"}


@dataclass
class Line:
    """The ingest command's parameters, as typer gives them to it."""

    files: list[Path]
    db: str | None = None
    name: str | None = None
    tag: list[str] | None = None
    as_json: bool = False


def parse(args: list[str]) -> Line | None:
    """`args` (the words after `ingest`) as the command's parameters; None where typer
    is to read them."""
    if "_IOTAPE_COMPLETE" in os.environ:  # a shell's completion: typer's
        return None
    line = Line(files=[])
    seen: set[str] = set()
    words = iter(args)
    for w in words:
        if w in _VALUED:
            value = next(words, None)
            # A value that looks like an option, or none: typer says what is wrong.
            if not value or value.startswith("-"):
                return None
            if w == "--tag":
                line.tag = [*(line.tag or []), value]
            elif w in seen:
                return None
            else:
                setattr(line, _VALUED[w], value)
        elif w == "--json" and w not in seen:
            line.as_json = True
        elif not w or w.startswith("-"):
            return None
        else:
            line.files.append(Path(w))
        seen.add(w)
    return line if line.files else None


def main(line: Line) -> None:
    """The command for `line`, ended as typer ends it (SystemExit: 0 when done, 130
    when interrupted, 1 when the reader of its output went away)."""
    try:
        run(line.files, line.db, line.name, line.tag, line.as_json)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except OSError as e:
        if e.errno != errno.EPIPE:
            raise
        # Nothing more can be said to that reader; the flush at exit would fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(1) from None
    raise SystemExit(0)


def run(
    files: list[Path], db: str | None, name: str | None, tag: list[str] | None, as_json: bool
) -> None:
    """Ingest `files` into the store at `db`, one run each (iotape/commands/ingest.py
    says what each parameter is)."""
    from base.arrow_probe import without_pandas

    # Ingest builds Arrow arrays and never uses pandas: pyarrow's look for it, where
    # one comes (not for a trace), fails at once (0.12-0.17 s otherwise).
    with without_pandas():
        _run(files, db, name, tag, as_json)


def _run(
    files: list[Path], db: str | None, name: str | None, tag: list[str] | None, as_json: bool
) -> None:
    # numpy's OpenBLAS starts a thread per core at import, which spin for ~0.06 s of
    # CPU (on 2 vCPUs, beside the ingest's own threads); ingest does no linear
    # algebra. Before the first import of numpy, and the user's setting kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if name is not None and len(files) > 1:
        raise IotapeError("--name names one run: give one file with it")
    # The store's modules only when ingesting: `iotape ingest --help` needs none of
    # them (0.2 s of imports). The first file before the store: a trace converts its
    # first batches on a helper thread while the catalog's modules and DuckDB are
    # imported and the store opened (each ~10-40 ms earlier than with them first:
    # their imports held the GIL the conversion waited for); an input that cannot
    # be read makes no store, and one that breaks half-way leaves none
    # (opener.opening removes a new store that nothing went in).
    from analyzer.store.tags import parse_tags

    tags = parse_tags(tag or [])  # said before any file is read
    # DuckDB's import and connect in a process of their own, forked before numpy and
    # pyarrow are imported here (analyzer/store/forked.py); None: the thread as before.
    from analyzer.store import forked

    child = forked.start(db, files)
    try:
        _ingest(files, db, name, tags, as_json, child)
    finally:
        if child is not None:
            child.abandon()  # the command failed before its store took the child


def _ingest(
    files: list[Path],
    db: str | None,
    name: str | None,
    tags: dict[str, str],
    as_json: bool,
    child: Any,
) -> None:
    from analyzer.store.early import open_early

    early = open_early(files[0]) if files else None
    results = []
    try:
        from analyzer.store.ingest import ingest as ingest_file
        from analyzer.store.opener import opening

        with opening(db, child) as opened_store:
            store = opened_store()
            for i, f in enumerate(files):
                with bar(f"ingesting {f.name}", None, "items") as progress:
                    r = ingest_file(
                        store, f, name=name, tags=tags, progress=progress,
                        early=early if i == 0 else None,
                    )  # fmt: skip
                results.append(r.to_dict())
                if not as_json:
                    rate = ""
                    if not r.skipped and r.events and r.seconds > 0:
                        rate = f", {r.events / r.seconds:,.0f} events/s"
                    print(f"{r.message}{rate}")
    finally:
        if early is not None:
            early.close()
    if as_json:
        from iotape.cliutil import print_json

        print_json(results)
