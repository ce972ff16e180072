"""Every parser, fed random or mutated input, gives records or a clean IotapeError."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from import_helpers import CAT, trace, vscsi

from base.errors import IotapeError
from recorder.importers.core import FORMATS, import_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
SEEDS = {
    "msr": "msr.csv",
    "spc": "spc.csv",
    "alibaba": "alibaba.csv",
    "tencent": "tencent.csv",
    "fiu": "fiu.txt",
    "disksim": "disksim.trace",
    "fio-iolog": "fio-v3.log",
    "blkparse": "blkparse-corners.txt",
}
BLKTRACE_SEED = b"".join(
    trace(i, 10 * i, act, CAT["W"], 8, 4096, 1) for i, act in enumerate(["Q", "G", "D", "C"], 1)
)
# Far above what these tiny inputs need, far below what a leak on garbage would take.
RSS_LIMIT_KB = 1_500_000


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak_rss() -> int:
    """Start a new peak-RSS window (VmHWM) and return the resident size now. The
    process-wide peak would judge this test by whatever ran before it in the session."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kb("VmRSS")


FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _seed(fmt: str) -> bytes:
    if fmt == "blktrace":
        return BLKTRACE_SEED
    if fmt.startswith("vscsi"):
        return vscsi(int(fmt[-1]), 4)
    return (DATA / SEEDS[fmt]).read_bytes()


def _run(tmp_path: Path, fmt: str, data: bytes) -> None:
    src = tmp_path / "in"
    src.write_bytes(data)
    out = tmp_path / "out.iot"
    rss_before = _reset_peak_rss()
    try:
        import_trace(fmt, [src], out, force=True, skip_bad=2, argv=[])
    except IotapeError:
        assert not out.exists() or out.stat().st_size > 0
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []
    assert _status_kb("VmHWM") - rss_before < RSS_LIMIT_KB


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=12))
        elif kind == "delete" and data:
            del data[pos : pos + draw(st.integers(1, 12))]
        elif kind == "truncate":
            del data[pos:]
    return bytes(data)


FMTS = [f for f in FORMATS if f != "vscsi"] + ["vscsi", "auto"]


@pytest.mark.parametrize("fmt", FMTS)
@FUZZ
@given(data=st.binary(max_size=600))
def test_random_bytes(tmp_path: Path, fmt: str, data: bytes) -> None:
    _run(tmp_path, fmt, data)


@pytest.mark.parametrize(
    ("t", "sector", "field"),
    [(1 << 63, 8, "field time"), (10, 1 << 54, "field sector"), ((1 << 64) - 1, 8, "field time")],
)
def test_blktrace_numbers_past_the_record(tmp_path: Path, t: int, sector: int, field: str) -> None:
    # Found by the fuzz test: a u64 time or sector past int64 was a numpy OverflowError.
    src = tmp_path / "in"
    src.write_bytes(BLKTRACE_SEED[:-48] + trace(4, t, "C", CAT["W"], sector, 4096, 1))
    out = tmp_path / "out.iot"
    with pytest.raises(IotapeError, match=f"in: byte {3 * 48}: {field}"):
        import_trace("blktrace", [src], out, force=True, argv=[])
    assert not out.exists()


@pytest.mark.parametrize("seed", [*SEEDS, "blktrace", "vscsi1", "vscsi2"])
@FUZZ
@given(st.data())
def test_mutated_valid_input(tmp_path: Path, seed: str, data) -> None:
    fmt = seed.rstrip("12") if seed.startswith("vscsi") else seed
    _run(tmp_path, fmt, data.draw(mutated(_seed(seed))))
    _run(tmp_path, "auto", data.draw(mutated(_seed(seed))))
