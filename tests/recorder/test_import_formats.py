"""The text and binary formats: units, columns, devices, compression, errors, `auto`."""

from __future__ import annotations

import gzip
import lzma
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from import_helpers import TRACES

import schemas
from base.errors import IotapeError
from recorder.importers import textformats
from recorder.importers.core import detect, import_trace
from recorder.tracefile import open_trace

OP = schemas.enum("op")
DATA = Path(__file__).resolve().parents[1] / "data" / "import"
DISKSIM = TRACES / "disksim-websearch" / "wsrch-small.trace"


def _import(tmp_path: Path, fmt: str, *paths: Path, **kw) -> tuple[np.ndarray, dict]:
    out = tmp_path / "t.iot"
    import_trace(fmt, list(paths), out, argv=["test"], force=True, **kw)
    with open_trace(out) as t:
        return t.read_all(), t.header


def _rows(recs: np.ndarray) -> list[tuple]:
    cols = ("ts_issue_ns", "ts_complete_ns", "offset", "bytes", "op")
    return [tuple(int(r[c]) for c in cols) for r in recs]


def test_msr_filetime_and_response_time(tmp_path: Path) -> None:
    recs, h = _import(tmp_path, "msr", DATA / "msr.csv")
    # The earliest timestamp (line 2) is the start; 100 ns ticks; bytes as given.
    assert _rows(recs) == [
        (100_000_000, 100_050_000, 4096, 8192, OP["read"]),
        (0, 2000, 0, 512, OP["write"]),
        (200_000_000, 201_000_000, 1048576, 4096, OP["write"]),
    ]
    names = {d["dev"]: d["name"] for d in h["devices"]}
    assert sorted(names.values()) == ["msr:hm_0", "msr:hm_1"]
    assert names[int(recs["dev"][0])] == "msr:hm_0"
    assert h["wall_start_ns"] == (128166372002061629 - 116444736000000000) * 100
    assert h["recorder"]["backend"] == "import:msr"
    assert h["host"] == "unknown" and h["streams"] == {"0": "other"}


def test_spc_sectors_and_seconds(tmp_path: Path) -> None:
    recs, h = _import(tmp_path, "spc", DATA / "spc.csv")
    assert _rows(recs) == [
        (551_706_000, 551_706_000, 20941264 * 512, 8192, OP["write"]),
        (554_041_000, 554_041_000, 20939840 * 512, 4096, OP["read"]),
        (1_500_000_000, 1_500_000_000, 20939840 * 512, 4096, OP["read"]),
    ]
    assert len(h["devices"]) == 2 and h["wall_start_ns"] == 0


def test_alibaba_microseconds(tmp_path: Path) -> None:
    recs, h = _import(tmp_path, "alibaba", DATA / "alibaba.csv")
    assert _rows(recs)[0] == (596_000, 596_000, 126703644672, 4096, OP["read"])
    assert _rows(recs)[2][0] == 0
    assert h["wall_start_ns"] == 1577808144002000 * 1000


def test_tencent_sectors_and_codes(tmp_path: Path) -> None:
    recs, h = _import(tmp_path, "tencent", DATA / "tencent.csv")
    assert _rows(recs) == [
        (0, 0, 1024 * 512, 8 * 512, OP["read"]),
        (1_000_000_000, 1_000_000_000, 2048 * 512, 16 * 512, OP["write"]),
        (0, 0, 0, 512, OP["write"]),
    ]
    assert sorted(d["name"] for d in h["devices"]) == ["tencent:1063", "tencent:7"]


def test_fiu_pid_comm_and_device_numbers(tmp_path: Path) -> None:
    recs, h = _import(tmp_path, "fiu", DATA / "fiu.txt")
    assert recs["comm"].tolist() == [b"gzip", b"gzip", b"kjournald"]
    assert recs["pid"].tolist() == [4867, 4867, 12]
    assert recs["dev"].tolist() == [(6 << 20) | 0, (6 << 20) | 0, (8 << 20) | 16]
    assert _rows(recs)[1] == (13, 13, 60423144 * 512, 4096, OP["read"])
    assert sorted(d["name"] for d in h["devices"]) == ["fiu:6:0", "fiu:8:16"]


def test_disksim_small(tmp_path: Path) -> None:
    recs, _ = _import(tmp_path, "disksim", DATA / "disksim.trace")
    # Times as given (relative already); the last line has no newline.
    assert _rows(recs) == [
        (1000, 1000, 8 * 512, 16 * 512, OP["read"]),
        (2000, 2000, 0, 8 * 512, OP["write"]),
        (3500, 3500, 100 * 512, 512, OP["read"]),
    ]


def test_public_disksim_sample_has_one_record_per_line(tmp_path: Path) -> None:
    data = DISKSIM.read_bytes()
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    recs, h = _import(tmp_path, "auto", DISKSIM)
    assert len(recs) == lines
    assert h["metadata"]["format"] == "disksim"
    first = data.split(b"\n", 1)[0].split()
    assert int(recs["ts_issue_ns"][0]) == int(first[0])
    assert int(recs["offset"][0]) == int(first[2]) * 512
    assert int(recs["bytes"][0]) == int(first[3]) * 512
    reads = sum(1 for ln in data.split(b"\n") if ln.split() and ln.split()[4] == b"1")
    assert int((recs["op"] == OP["read"]).sum()) == reads


def test_fio_iolog_v2_and_v3(tmp_path: Path) -> None:
    recs, h = _import(tmp_path, "fio-iolog", DATA / "fio-v2.log")
    assert [(int(r["op"]), int(r["offset"]), int(r["bytes"])) for r in recs] == [
        (OP["read"], 4096, 8192),
        (OP["write"], 0, 4096),
        (OP["discard"], 8192, 65536),
        (OP["flush"], 0, 0),
    ]
    assert h["devices"][0]["name"] == "fio-iolog:/dev/loop0"
    recs, _ = _import(tmp_path, "auto", DATA / "fio-v3.log")
    assert recs["ts_issue_ns"].tolist() == [5_000_000, 17_000_000]


def _vscsi(version: int, n: int = 3) -> bytes:
    dt = textformats.FORMATS["vscsi"].dtype[version]
    r = np.zeros(n, dtype=dt)
    r["ver"] = version << 8
    r["cmd"] = [0x28, 0x2A, 0x35][:n]
    r["lbn"] = np.arange(n) * 8
    r["len"] = 4096
    r["ts"] = 1_000_000 + np.arange(n) * 10
    if version == 2:
        r["rt"] = 7
    return r.tobytes()


@pytest.mark.parametrize("version", [1, 2])
def test_vscsi_binary(tmp_path: Path, version: int) -> None:
    src = tmp_path / "v.vscsi"
    src.write_bytes(_vscsi(version))
    recs, _ = _import(tmp_path, "auto", src)
    lat = 7000 if version == 2 else 0
    assert _rows(recs) == [
        (0, lat, 0, 4096, OP["read"]),
        (10_000, 10_000 + lat, 4096, 4096, OP["write"]),
        (20_000, 20_000 + lat, 8192, 4096, OP["flush"]),
    ]


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("msr.csv", "msr"),
        ("spc.csv", "spc"),
        ("alibaba.csv", "alibaba"),
        ("tencent.csv", "tencent"),
        ("fiu.txt", "fiu"),
        ("disksim.trace", "disksim"),
        ("fio-v2.log", "fio-iolog"),
        ("blkparse-corners.txt", "blkparse"),
    ],
)
def test_auto_detects(name: str, fmt: str) -> None:
    assert detect(DATA / name) == fmt


def test_compressed_inputs(tmp_path: Path) -> None:
    raw = (DATA / "msr.csv").read_bytes()
    want, _ = _import(tmp_path, "msr", DATA / "msr.csv")
    gz, xz = tmp_path / "m.csv.gz", tmp_path / "m.csv.xz"
    gz.write_bytes(gzip.compress(raw))
    xz.write_bytes(lzma.compress(raw))
    for src in (gz, xz):
        got, h = _import(tmp_path, "auto", src)
        assert _rows(got) == _rows(want) and h["metadata"]["format"] == "msr"
    if shutil.which("zstd"):
        zst = tmp_path / "m.csv.zst"
        subprocess.run(["zstd", "-q", "-o", str(zst), str(DATA / "msr.csv")], check=True)
        got, _ = _import(tmp_path, "msr", zst)
        assert _rows(got) == _rows(want)


def test_bad_line_names_file_line_and_field(tmp_path: Path) -> None:
    src = tmp_path / "bad.csv"
    src.write_text("1,R,0,4096,10\n1,R,0,xx,11\n1,Q,0,4096,12\n")
    out = tmp_path / "o.iot"
    with pytest.raises(IotapeError, match=r"bad\.csv: line 2: field size: 'xx' is not a number"):
        import_trace("alibaba", [src], out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]
    with pytest.raises(IotapeError, match=r"line 3: field op: 'Q'"):
        import_trace("alibaba", [src], out, skip_bad=1)
    import_trace("alibaba", [src], out, skip_bad=2)
    with open_trace(out) as t:
        assert t.footer["events"] == 1
        assert t.header["metadata"]["skipped"] == 2
        assert "line 2" in t.header["metadata"]["skipped_examples"][0]


def test_a_number_longer_than_64_bits_is_a_bad_field(tmp_path: Path) -> None:
    # Found by the fuzz test: numpy's isfinite raised TypeError on such a time.
    src = tmp_path / "long.csv"
    src.write_text("3,R,0,4096,1577808144002596\n3,W,4096,4096,15778081440026001577808144002000\n")
    with pytest.raises(
        IotapeError, match=r"long\.csv: line 2: field time: 1577\d+ is out of range"
    ):
        import_trace("alibaba", [src], tmp_path / "o.iot")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        # Found by the fuzz test: an empty field read as null became a huge device number.
        ("2 4867 gzip 8 8 R  0 aa", r"line 2: field minor: 'aa' is not a number"),
        ("2 4867 gzip 8 8 R 4096 0 aa", r"line 2: field major: 4096 is not a device number"),
        ("2 4867 gzip 8 8 R 8 1048576 aa", r"line 2: field minor: 1048576 is not a device"),
    ],
)
def test_fiu_device_numbers_are_checked(tmp_path: Path, line: str, message: str) -> None:
    src = tmp_path / "bad.txt"
    src.write_text(f"1 4867 gzip 0 8 W 6 0 3a\n{line}\n")
    with pytest.raises(IotapeError, match=message):
        import_trace("fiu", [src], tmp_path / "o.iot")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt"]


def test_device_map(tmp_path: Path) -> None:
    recs, h = _import(tmp_path, "msr", DATA / "msr.csv", device_map=["hm_0=8:16", "hm_1=lab=8:32"])
    assert set(recs["dev"].tolist()) == {(8 << 20) | 16, (8 << 20) | 32}
    assert sorted(d["name"] for d in h["devices"]) == ["lab", "msr:hm_0"]


def test_out_of_order_start_imports_again(tmp_path: Path) -> None:
    # A record earlier than everything in the first block: the start moves back.
    lines = [f"1,R,0,4096,1{i:06d}\n" for i in range(200_000)]
    lines.append("1,W,0,4096,500\n")
    src = tmp_path / "late.csv"
    src.write_text("".join(lines))
    recs, _ = _import(tmp_path, "alibaba", src)
    assert int(recs["ts_issue_ns"].min()) == 0 and int(recs["ts_issue_ns"][-1]) == 0
    assert int(recs["ts_issue_ns"][0]) == (1_000_000 - 500) * 1000


def test_cli_import(tmp_path: Path) -> None:
    out = tmp_path / "o.iot"
    code = (
        "import sys, typer; from iotape.commands import import_ as import_cli; "
        "app = typer.Typer(); app.command('import')(import_cli.import_); "
        "app.command('other')(lambda: None); app()"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, "import", "auto", str(DATA / "spc.csv"), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert "3 requests from spc (detected spc)" in " ".join(res.stderr.split())
    with open_trace(out) as t:
        assert t.footer["events"] == 3
