"""A text import read in many blocks, on the reader's threads, gives the trace that one
block gives: the same bytes, the same line numbers in errors, the same counts of
lines passed over. Small blocks stand in for the 4 MiB of a real file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import schemas
from base.errors import IotapeError
from recorder.importers import csvread
from recorder.importers.core import import_trace
from recorder.tracefile import TraceWriter, open_trace


def _msr(i: int) -> str:
    op = "Read" if i % 3 else "Write"
    return f"{128166372000000000 + i * 100},hm,{i % 2},{op},{i * 4096},4096,{100 + i % 7}\n"


def _lines(n: int) -> list[str]:
    return [_msr(i) for i in range(n)]


def _import(src: Path, out: Path, block: int, monkeypatch: pytest.MonkeyPatch, **kw) -> bytes:
    monkeypatch.setattr(csvread, "BLOCK_BYTES", block)
    import_trace("msr", [src], out, argv=["test"], force=True, **kw)
    return out.read_bytes()


def test_small_blocks_give_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _lines(3000)
    # Lines to pass over in later blocks: empty, blank, a comment, CRLF.
    lines[1200] = "\n"
    lines[1700] = " \t\n"
    lines[2100] = "# note\n"
    lines[2500] = lines[2500].replace("\n", "\r\n")
    src = tmp_path / "in.csv"
    src.write_text("".join(lines))
    whole = _import(src, tmp_path / "a.iot", 1 << 22, monkeypatch)
    assert _import(src, tmp_path / "b.iot", 4096, monkeypatch) == whole
    with open_trace(tmp_path / "b.iot") as t:
        assert t.footer is not None and t.footer["events"] == 2997
        assert t.header["metadata"]["ignored_lines"] == {"comment": 1, "header": 0, "blank": 2}
        assert t.header["metadata"]["crlf_line_ends"] == 1


def test_an_empty_line_in_a_clean_block_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No space, tab, CR or '#' in the block: the parser's row count finds the empty line.
    lines = _lines(2000)
    lines[1500] = "\n"
    src = tmp_path / "in.csv"
    src.write_text("".join(lines))
    _import(src, tmp_path / "o.iot", 8192, monkeypatch)
    with open_trace(tmp_path / "o.iot") as t:
        assert t.footer is not None and t.footer["events"] == 1999
        assert t.header["metadata"]["ignored_lines"]["blank"] == 1


@pytest.mark.parametrize("bad", [1, 1999, 2999])
def test_a_bad_line_in_a_later_block_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: int
) -> None:
    lines = _lines(3000)
    lines[bad - 1] = "128166372000000000,hm,0,Reed,0,4096,1\n"
    src = tmp_path / "in.csv"
    src.write_text("".join(lines))
    with pytest.raises(IotapeError, match=rf"in\.csv: line {bad}: field op: 'Reed'"):
        _import(src, tmp_path / "o.iot", 4096, monkeypatch)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    _import(src, tmp_path / "o.iot", 4096, monkeypatch, skip_bad=1)
    with open_trace(tmp_path / "o.iot") as t:
        assert t.footer is not None and t.footer["events"] == 2999
        assert t.header["metadata"]["skipped_examples"] == [
            f"{src}: line {bad}: field op: 'Reed' is not one of r, read, w, write"
        ]


def test_a_line_without_end_is_named_after_the_lines_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "in.csv"
    src.write_text("".join(_lines(100)) + "1" * (64 * 1024 + 10))
    with pytest.raises(IotapeError, match=r"line 101: no line end in \d+ bytes"):
        _import(src, tmp_path / "o.iot", 1024, monkeypatch)


def test_an_empty_number_field_is_a_bad_field(tmp_path: Path) -> None:
    # Found by the fuzz test: the empty major number reached numpy as NaN.
    src = tmp_path / "f.txt"
    src.write_text("89967404265337 4867 gzip 60423136 8 W  0 3a2f\n")
    with pytest.raises(IotapeError, match=r"f\.txt: line 1: field minor: '3a2f' is not a number"):
        import_trace("fiu", [src], tmp_path / "o.iot")


def test_adopted_chunks_are_those_written_directly(tmp_path: Path) -> None:
    recs = np.zeros(20_000, dtype=schemas.record_dtype())
    recs["offset"] = np.arange(len(recs)) * 4096
    header = {"mono_start_ns": 0, "wall_start_ns": 1, "recorder": {"backend": "test"}}
    with TraceWriter(tmp_path / "direct.iot", header) as w:
        w.write(recs)
        w.close({"stop_reason": "test"})
    spool = TraceWriter(
        tmp_path / "spool.iot", {"mono_start_ns": 0, "wall_start_ns": 0, "recorder": {}}
    )
    spool.write(recs[:5000])
    spool.write(recs[5000:])
    with TraceWriter(tmp_path / "adopted.iot", header) as w:
        w.adopt(spool)
        w.close({"stop_reason": "test"})
    assert (tmp_path / "adopted.iot").read_bytes() == (tmp_path / "direct.iot").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adopted.iot", "direct.iot"]


def test_adopt_wants_a_writer_without_records(tmp_path: Path) -> None:
    recs = np.zeros(3, dtype=schemas.record_dtype())
    head = {"mono_start_ns": 0, "wall_start_ns": 0, "recorder": {}}
    spool = TraceWriter(tmp_path / "s.iot", head)
    with TraceWriter(tmp_path / "o.iot", head) as w:
        w.write(recs)
        with pytest.raises(ValueError, match="no records yet"):
            w.adopt(spool)
    spool.abort()


def test_a_header_of_the_same_length_takes_the_guess_s_place(tmp_path: Path) -> None:
    recs = np.zeros(10, dtype=schemas.record_dtype())
    real = {"mono_start_ns": 0, "wall_start_ns": 22, "recorder": {"backend": "test"}}
    guess = {**real, "wall_start_ns": 11}
    with TraceWriter(tmp_path / "direct.iot", real) as w:
        w.write(recs)
        w.close({})
    with TraceWriter(tmp_path / "o.iot", guess) as w:
        w.write(recs)
        assert not w.rewrite_header({**real, "wall_start_ns": 10**30})
        assert w.rewrite_header(real)
        w.close({})
    assert (tmp_path / "o.iot").read_bytes() == (tmp_path / "direct.iot").read_bytes()
