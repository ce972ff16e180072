"""The dashboard in headless Chromium: the pages load from this server alone and their
charts hold data. IOTAPE_SCREENSHOT=docs/dashboard.png saves the README's picture."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from api_helpers import build_store
from conftest import need
from regress_helpers import firmware_store
from trace_helpers import chunk_offsets, make_trace, workload_records

from analyzer.server.app import STATIC, create_app
from analyzer.server.config import Settings
from analyzer.store.ingest import ingest
from analyzer.store.opener import open_store
from recorder.tracefile.check import repair

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def _serve(url: str) -> Iterator[str]:
    app = create_app(Settings(db=url))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    try:
        while not srv.started:
            if not t.is_alive():
                pytest.fail("the server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/"
    finally:
        srv.should_exit = True
        t.join(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    url, _ = build_store(tmp_path_factory.mktemp("dash"))
    with _serve(url) as u:
        yield u


def chromium(url: str, *args: str) -> subprocess.CompletedProcess:
    need(CHROMIUM is not None, "chromium (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="iotape-chromium-") as profile:
        return subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update",
             "--no-first-run", f"--user-data-dir={profile}",
             # Virtual time runs the page's fetches and scripts to the end before dumping.
             "--virtual-time-budget=20000", "--window-size=1400,2700", *args, url],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip


def charts(dom: str) -> dict[str, list[int]]:
    """data-chart name -> points of each series drawn in it."""
    out: dict[str, list[int]] = {}
    for m in re.finditer(r'<svg[^>]*data-chart="([^"]+)"[^>]*>(.*?)</svg>', dom, re.S):
        out.setdefault(m.group(1), []).extend(
            int(n) for n in re.findall(r'class="series" data-n="(\d+)"', m.group(2))
        )
    return out


def test_run_page_draws_every_chart_with_data(server: str) -> None:
    dom = chromium(f"{server}#/run/base", "--dump-dom").stdout
    assert 'data-ready="run"' in dom, dom[-2000:]
    got = charts(dom)
    for name in ("cdf-device", "hist-device", "cdf-queue", "hist-queue", "iops", "mbs", "qd"):
        # One line per op and stream (12 here; the CDF also has "all"), each with points.
        assert len(got[name]) >= 12 if "-" in name else len(got[name]) == 1, name
        assert min(got[name]) >= 2, name
    assert len(got["lat-time"]) == 3
    cells = [int(n) for n in re.findall(r'data-cells="(\d+)"', dom)]
    assert len(cells) == 2 and min(cells) > 100
    assert re.search(r'id="verdict" class="pass">PASS<', dom)


def test_compare_page_overlays_runs_and_flags_the_regression(server: str) -> None:
    dom = chromium(f"{server}#/compare?runs=base,cand,slow", "--dump-dom").stdout
    assert 'data-ready="compare"' in dom, dom[-2000:]
    got = charts(dom)
    assert got["cmp-cdf-all"] and len(got["cmp-cdf-all"]) == 3
    assert min(got["cmp-cdf-all"]) >= 50
    assert dom.count('class="regression"') >= 4  # a table per device model per candidate
    assert re.search(r'id="regression-[0-9a-f]+" class="fail">REGRESSION<', dom)
    # The gate's bars, and which one decided each metric.
    assert "flag over 5 % and over 10.0 µs (1 IO/s for IOPS)" in dom
    assert '<th class="l">decided by</th>' in dom and re.search(r"over (noise|min effect) \(", dom)
    # Each candidate's Jetstress verdict: `slow` is 100x slower and fails it.
    verdicts = re.findall(r'class="verdict (pass|fail|unknown)"', dom)
    assert verdicts == ["pass", "fail"], verdicts


def test_run_list_links_a_trend_page_per_model(server: str) -> None:
    dom = chromium(server, "--dump-dom").stdout
    links = re.findall(r'class="trend-link" href="#/trend/([^"]+)"', dom)
    assert sorted(links) == ["ST4000NM", "Samsung%20PM9A3"], links


def test_trend_page_marks_the_change_point(tmp_path: Path) -> None:
    url = firmware_store(tmp_path)
    with _serve(url) as server:
        dom = chromium(f"{server}#/trend/Samsung%20PM9A3?tag=firmware", "--dump-dom").stdout
        shot = tmp_path / "trend.png"
        chromium(f"{server}#/trend/Samsung%20PM9A3?tag=firmware", f"--screenshot={shot}")
    assert 'data-ready="trend"' in dom, dom[-2000:]
    trends = {k: v for k, v in charts(dom).items() if k.startswith("trend-")}
    assert len(trends) >= 8 and all(v == [6, 6] for v in trends.values()), trends  # p50, p99
    bands = re.findall(r'class="band" data-n="(\d+)"', dom)
    assert len(bands) == 2 * len(trends) and set(bands) == {"6"}
    marks = re.findall(r'class="mark" data-label="([^"]+)"', dom)
    # The p50 step at version 4 is marked on every op / stream, and nothing else is.
    assert len([m for m in marks if m.startswith("p50 ")]) == len(trends)
    assert all(m.endswith("at 4.0") for m in marks), marks
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 30_000
    if os.environ.get("IOTAPE_TREND_SCREENSHOT"):
        shutil.copy(shot, os.environ["IOTAPE_TREND_SCREENSHOT"])


def test_no_asset_comes_from_elsewhere() -> None:
    for f in STATIC.iterdir():
        # The SVG namespace is a name, not a fetch; any other absolute URL would be.
        text = f.read_text().replace("http://www.w3.org/2000/svg", "")
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), f.name


def test_screenshot(server: str, tmp_path: Path) -> None:
    shot = tmp_path / "dashboard.png"
    chromium(f"{server}#/run/base", f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    if os.environ.get("IOTAPE_SCREENSHOT"):
        shutil.copy(shot, os.environ["IOTAPE_SCREENSHOT"])


def test_run_page_shows_the_gaps_of_a_repaired_trace(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "holes.iot", workload_records(3000, seed=5), chunk_records=100)
    at = chunk_offsets(path)[7]
    data = bytearray(path.read_bytes())
    data[at + 300] ^= 0x01
    path.write_bytes(data)
    repair(path)
    url = f"duckdb://{tmp_path}/holes.duckdb"
    with contextlib.closing(open_store(url)) as s:
        ingest(s, path, name="holes")
    with _serve(url) as server:
        dom = chromium(f"{server}#/run/holes", "--dump-dom").stdout
    assert 'data-ready="run"' in dom, dom[-2000:]
    assert re.search(
        r'id="gaps">This trace was repaired: 1 chunk \(100 events\) lost in 1 gap\.<', dom
    )
    assert re.search(rf'<td class="l">{at:,}\.\.[0-9,]+</td><td class="l">7\.\.7</td>', dom)
