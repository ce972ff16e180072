"""Import speed per format, in input events per second, and blktrace vs blkparse.

Each format gets a synthetic input of the same requests (random 4-64 KiB reads
and writes), written in that format's units; the text goal is ≥ 1 M events/s.
The blktrace file holds Q, G, D, C per request (4 events each); the peer is
`blkparse -i - -o /dev/null` reading the same file, where blkparse is installed.
Writes JSON to bench/results/importers.json.

Run: `.venv/bin/python bench/importers.py [--requests 1000000]`.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from recorder.importers import blktrace as bt
from recorder.importers import textformats
from recorder.importers.core import import_trace

ROOT = Path(__file__).resolve().parent.parent
FILETIME_2008 = 128_166_372_000_000_000


def _requests(n: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "t_us": np.cumsum(rng.integers(1, 50, n)),
        "sector": rng.integers(0, 1 << 30, n) // 8 * 8,
        "sectors": rng.choice([8, 16, 64, 128], n),
        "write": rng.random(n) < 0.4,
        "lat_us": rng.integers(20, 5000, n),
    }


def _text(path: Path, columns: list[np.ndarray], delim: str, fmt: list[str]) -> None:
    np.savetxt(path, np.column_stack(columns), delimiter=delim, fmt=fmt)


def _write_msr_spc(d: Path, r: dict[str, np.ndarray], n: int) -> dict[str, tuple[Path, int]]:
    t, sec, cnt, w, lat = r["t_us"], r["sector"], r["sectors"], r["write"], r["lat_us"]
    rw = np.where(w, "Write", "Read")
    msr = d / "msr.csv"
    with msr.open("w") as f:
        for row in zip(
            (t * 10 + FILETIME_2008).tolist(),
            rw.tolist(),
            (sec * 512).tolist(),
            (cnt * 512).tolist(),
            (lat * 10).tolist(),
            strict=True,
        ):
            f.write(f"{row[0]},hm,0,{row[1]},{row[2]},{row[3]},{row[4]}\n")
    spc = d / "spc.csv"
    with spc.open("w") as f:
        for a, b, c, e in zip(
            sec.tolist(),
            (cnt * 512).tolist(),
            np.where(w, "w", "r").tolist(),
            (t / 1e6).tolist(),
            strict=True,
        ):
            f.write(f"0,{a},{b},{c},{e:.6f}\n")
    return {"msr": (msr, n), "spc": (spc, n)}


def _write_columns(d: Path, r: dict[str, np.ndarray], n: int) -> dict[str, tuple[Path, int]]:
    """The formats `_text` writes: one numpy column per field."""
    t, sec, cnt, w = r["t_us"], r["sector"], r["sectors"], r["write"]
    files: dict[str, tuple[str, list, str, list[str]]] = {
        "alibaba": (
            "alibaba.csv",
            [
                np.full(n, 3),
                np.where(w, "W", "R"),
                sec * 512,
                cnt * 512,
                t + 1_577_808_144_000_000,
            ],
            ",",
            ["%s"] * 5,
        ),
        "tencent": (
            "tencent.csv",
            [t // 1_000_000 + 1_538_323_200, sec, cnt, w.astype(int), np.full(n, 1063)],
            ",",
            ["%d"] * 5,
        ),
        "fiu": (
            "fiu.txt",
            [
                t * 1000,
                np.full(n, 4867),
                np.full(n, "gzip"),
                sec,
                cnt,
                np.where(w, "W", "R"),
                np.full(n, 8),
                np.zeros(n, int),
                np.full(n, "3a2fd83c6fe2b5ef"),
            ],
            " ",
            ["%s"] * 9,
        ),
        "disksim": (
            "disksim.trace",
            [t * 1000, np.zeros(n, int), sec, cnt, (~w).astype(int)],
            " ",
            ["%d"] * 5,
        ),
    }
    out: dict[str, tuple[Path, int]] = {}
    for fmt, (name, cols, sep, spec) in files.items():
        _text(d / name, cols, sep, spec)
        out[fmt] = (d / name, n)
    return out


def _write_fio_vscsi(d: Path, r: dict[str, np.ndarray], n: int) -> dict[str, tuple[Path, int]]:
    t, sec, cnt, w, lat = r["t_us"], r["sector"], r["sectors"], r["write"], r["lat_us"]
    fio = d / "fio.log"
    with fio.open("w") as f:
        f.write("fio version 3 iolog\n0 /dev/sdb add\n0 /dev/sdb open\n")
        for a, b, c, e in zip(
            (t // 1000).tolist(),
            np.where(w, "write", "read").tolist(),
            (sec * 512).tolist(),
            (cnt * 512).tolist(),
            strict=True,
        ):
            f.write(f"{a} /dev/sdb {b} {c} {e}\n")
    dt = textformats.FORMATS["vscsi"].dtype[2]
    v = np.zeros(n, dtype=dt)
    v["ver"], v["cmd"] = 2 << 8, np.where(w, 0x2A, 0x28)
    v["lbn"], v["len"], v["ts"], v["rt"] = sec, cnt * 512, t, lat
    vscsi = d / "v.vscsi"
    vscsi.write_bytes(v.tobytes())
    return {"fio-iolog": (fio, n), "vscsi": (vscsi, n)}


def write_inputs(d: Path, n: int) -> dict[str, tuple[Path, int]]:
    """The same `n` requests in every format: {format: (file, records expected)}."""
    r = _requests(n)
    return {
        **_write_msr_spc(d, r, n),
        **_write_columns(d, r, n),
        **_write_fio_vscsi(d, r, n),
        "blktrace": (write_blktrace(d / "b.blktrace.0", r), 4 * n),
    }


def write_blktrace(path: Path, r: dict[str, np.ndarray]) -> Path:
    """Q, G, D, C per request, as struct blk_io_trace records without payload."""
    n = len(r["t_us"])
    rec = np.zeros(
        (n, 4),
        dtype=np.dtype(
            [
                ("magic", "<u4"),
                ("seq", "<u4"),
                ("time", "<u8"),
                ("sector", "<u8"),
                ("bytes", "<u4"),
                ("action", "<u4"),
                ("pid", "<u4"),
                ("device", "<u4"),
                ("cpu", "<u4"),
                ("error", "<u2"),
                ("pdu_len", "<u2"),
            ]
        ),
    )
    cat = np.where(r["write"], bt.TC_WRITE, bt.TC_READ)
    t0 = r["t_us"] * 1000
    for j, (act, dt_ns) in enumerate([(1, 0), (4, 200), (7, 500), (8, 500 + r["lat_us"] * 1000)]):
        rec[:, j]["time"] = t0 + dt_ns
        rec[:, j]["action"] = (cat << 16) | act
    rec["magic"] = bt.MAGIC | bt.VERSION
    rec["seq"] = np.arange(4 * n).reshape(n, 4)
    rec["sector"] = r["sector"][:, None]
    rec["bytes"] = (r["sectors"] * 512)[:, None]
    rec["pid"] = 4242
    rec["device"] = (8 << 20) | 16
    flat = rec.reshape(-1)
    # Completions arrive later than the next requests' queue events: sort by time.
    flat = flat[np.argsort(flat["time"], kind="stable")]
    flat["seq"] = np.arange(len(flat))
    path.write_bytes(flat.tobytes())
    return path


def time_import(fmt: str, path: Path, out: Path) -> float:
    t = time.perf_counter()
    import_trace(fmt, [path], out, force=True, argv=[])
    return time.perf_counter() - t


def time_blkparse(path: Path) -> float | None:
    if shutil.which("blkparse") is None:
        return None
    t = time.perf_counter()
    with path.open("rb") as f:
        subprocess.run(
            ["blkparse", "-i", "-", "-o", "/dev/null"],
            stdin=f,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--blktrace-requests", type=int, default=250_000)
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "importers.json")
    args = ap.parse_args()
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="iotape-bench-") as tmp:
        d = Path(tmp)
        inputs = write_inputs(d, args.requests)
        inputs["blktrace"] = (
            write_blktrace(d / "b.blktrace.0", _requests(args.blktrace_requests)),
            4 * args.blktrace_requests,
        )
        time_import("disksim", inputs["disksim"][0], d / "warm.iot")  # imports, caches
        for fmt, (path, events) in inputs.items():
            secs = min(time_import(fmt, path, d / "o.iot") for _ in range(2))
            results[fmt] = {
                "events": events,
                "input_bytes": path.stat().st_size,
                "seconds": round(secs, 3),
                "events_per_s": round(events / secs),
            }
            print(f"{fmt:10s} {events / secs / 1e6:6.2f} M events/s", file=sys.stderr)
        path, events = inputs["blktrace"]
        peer = time_blkparse(path)
        if peer is not None:
            results["blktrace"]["peer_blkparse"] = {
                "seconds": round(peer, 3),
                "events_per_s": round(events / peer),
                "ratio_iotape_to_blkparse": round(results["blktrace"]["seconds"] / peer, 2),
            }
            print(f"blkparse   {events / peer / 1e6:6.2f} M events/s", file=sys.stderr)
    doc = {
        "bench": "importers",
        "host": platform.node(),
        "cpus": __import__("os").cpu_count(),
        "requests": args.requests,
        "goal_text_events_per_s": 1_000_000,
        "results": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=2) + "\n")
    print(args.output, file=sys.stderr)


if __name__ == "__main__":
    main()
