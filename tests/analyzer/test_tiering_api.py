"""`iotape analyze tiering` and GET /runs/{run}/tiering over ingested runs (issue 7)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from fastapi.testclient import TestClient
from trace_helpers import NVME, SDA, make_trace, workload_records
from typer.testing import CliRunner

from analyzer.server.app import create_app
from analyzer.server.config import Settings
from analyzer.server.routes import tiering as api_tiering
from analyzer.store.ingest import ingest
from analyzer.store.opener import open_store
from analyzer.tiering import from_store
from analyzer.tiering.events import Events, event_rows, events_from_columns
from analyzer.tiering.presets import params_for
from analyzer.tiering.simulate import simulate
from iotape.commands import analyze as analyze_cli

app = typer.Typer(pretty_exceptions_enable=False)
app.add_typer(analyze_cli.app, name="analyze")
runner = CliRunner()
MiB = 1 << 20


def device_run(seed: int, lat_ns: float) -> np.ndarray:
    r = workload_records(3000, seed=seed)
    rng = np.random.default_rng(seed)
    r["ts_complete_ns"] = r["ts_issue_ns"] + rng.lognormal(np.log(lat_ns), 0.2, 3000).astype(
        np.uint64
    )
    return r[np.argsort(r["ts_complete_ns"], kind="stable")]


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    tmp: Path = tmp_path_factory.mktemp("tiering")
    url = f"duckdb://{tmp}/t.duckdb"
    r = workload_records(6000, seed=4)
    # A skewed trace: 90 % of requests on 8 MiB, the rest over 1 GiB.
    rng = np.random.default_rng(4)
    hot = rng.random(6000) < 0.9
    r["offset"] = np.where(hot, rng.integers(0, 8 * MiB, 6000), rng.integers(0, 1 << 30, 6000))
    r["offset"] = r["offset"] // 4096 * 4096
    s = open_store(url)
    try:
        ingest(s, make_trace(tmp / "nightly.iot", r), name="nightly")
        ingest(s, make_trace(tmp / "ssd.iot", device_run(5, 100_000)), name="ssd")
        ingest(s, make_trace(tmp / "hdd.iot", device_run(6, 8_000_000)), name="hdd")
    finally:
        s.close()
    return url


def analyze(db: str, *args: str) -> dict:
    res = runner.invoke(app, ["analyze", "tiering", "nightly", "--db", db, "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_cli_json_has_every_output(db: str) -> None:
    r = analyze(db, "--policy", "lru", "--unit", "1M", "--capacity", "16M", "--sweep",
                "--fast-run", "ssd", "--slow-run", "hdd")  # fmt: skip
    assert r["run"]["name"] == "nightly" and r["params"]["unit"] == MiB
    assert r["capacity_units"] == 16
    hr = r["hit_ratio"]
    assert set(hr["count"]) == {"all", "read", "write"} and hr["count"]["write"] == 0.0
    assert 0.5 < hr["count"]["read"] < 1.0
    assert r["sweep"]["one_pass"] and len(r["sweep"]["points"]) > 5
    assert r["skew"]["capacity_for_80pct_io"] <= 16 * MiB
    lat = r["latency"]
    assert lat["fast_only"]["p50_ns"] < lat["projected"]["p50_ns"] < lat["slow_only"]["p50_ns"]
    tl = r["timeline"]
    assert sum(tl["promotions"]) > 0 and len(tl["t_s"]) == len(tl["migrated_share"])


def test_cli_table_and_html_plot(db: str, tmp_path: Path) -> None:
    out = tmp_path / "t.html"
    res = runner.invoke(app, ["analyze", "tiering", "nightly", "--db", db, "--preset", "msa",
                              "--sweep", "--plot", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "fast-tier hit ratio" in res.output and "preset source" in res.output
    page = out.read_text()
    assert page.count('class="series"') >= 5 and "http" not in page.replace(
        "http://www.w3.org/2000/svg", ""
    )


def test_cli_refuses_bad_input_in_one_line(db: str, tmp_path: Path) -> None:
    for args, msg in (
        (["--unit", "3000"], "power of two"),
        (["--capacity", "lots"], "--capacity"),
        (["--fast-run", "ssd"], "both"),
        (["--plot", str(tmp_path / "x.png")], ".html"),
    ):
        res = runner.invoke(app, ["analyze", "tiering", "nightly", "--db", db, *args])
        assert res.exit_code != 0 and msg in str(res.exception), args
    assert not (tmp_path / "x.png").exists()


def test_the_cli_and_the_library_agree(db: str) -> None:
    r = analyze(db, "--policy", "oracle", "--capacity", "8M")
    s = open_store(db, create=False)
    try:
        p = params_for("oracle", capacity=8 * MiB)
        lib = from_store.analyze_run(s, "nightly", p)
    finally:
        s.close()
    assert r["hit_ratio"] == lib["hit_ratio"]


def test_a_measured_run_is_set_beside_the_projection_with_its_error(db: str) -> None:
    r = analyze(db, "--policy", "lru", "--unit", "1M", "--capacity", "16M",
                "--fast-run", "ssd", "--slow-run", "hdd", "--measured-run", "ssd")  # fmt: skip
    lat = r["latency"]
    ssd = device_run(5, 100_000)
    own = np.sort((ssd["ts_complete_ns"] - ssd["ts_issue_ns"])[ssd["op"] <= 1].astype(np.int64))
    assert lat["measured"]["mean_ns"] == pytest.approx(own.mean())
    assert lat["measured"] == lat["fast_only"] or lat["measured"]["requests"] == len(own)
    for k in ("p50", "p99", "mean"):
        want = lat["projected"][f"{k}_ns"] / lat["measured"][f"{k}_ns"] - 1
        assert lat["error"][k] == pytest.approx(want)
    # The projection mixes in the slow device, so it is far above the fast run.
    assert lat["error"]["mean"] > 1.0
    res = runner.invoke(app, ["analyze", "tiering", "nightly", "--db", db, "--measured-run", "ssd"])
    assert res.exit_code != 0 and "fast and a slow run" in str(res.exception)


def test_run_at_device_takes_one_device_of_a_run(db: str) -> None:
    r = analyze(db, "--policy", "lru", "--unit", "1M", "--capacity", "16M",
                "--fast-run", "ssd@nvme0n1", "--slow-run", "hdd@sda")  # fmt: skip

    def on(records: np.ndarray, dev: int) -> Events:
        m = records[records["dev"] == dev]
        cols = ("ts_issue_ns", "ts_complete_ns", "dev", "offset", "bytes", "op")
        return events_from_columns(*(m[c] for c in cols))

    s = open_store(db, create=False)
    try:
        ev = from_store.load_events(s, from_store.load_run(s, "nightly")[0]["id"])
    finally:
        s.close()
    p = params_for("lru", unit=MiB, capacity=16 * MiB)
    fast, slow = on(device_run(5, 100_000), NVME), on(device_run(6, 8_000_000), SDA)
    assert r["latency"] == simulate(ev, p, fast=fast, slow=slow)["latency"]
    assert r["fast_run"]["device"] == "nvme0n1" and r["slow_run"]["device"] == "sda"
    res = runner.invoke(app, ["analyze", "tiering", "nightly", "--db", db,
                              "--fast-run", "ssd@nope", "--slow-run", "hdd"])  # fmt: skip
    assert res.exit_code != 0 and "no device named 'nope'" in str(res.exception)


def test_events_with_their_streams_from_the_store(db: str) -> None:
    # The lab's prediction tells a session's reads from the maintenance's by stream:
    # the same Events as load_events, each with its record's stream. (Before the
    # server's fixtures open the store read-only, as the test above.)
    s = open_store(db, create=False)
    try:
        run_id = from_store.load_run(s, "nightly")[0]["id"]
        ev = from_store.load_events(s, run_id)
        same, stream = from_store.load_events_streams(s, run_id)
    finally:
        s.close()
    assert all(np.array_equal(getattr(ev, f), getattr(same, f)) for f in ev.__dataclass_fields__)
    assert len(stream) == len(ev) and len(np.unique(stream)) > 1
    r = workload_records(6000, seed=4)
    rows = event_rows(r["op"], r["ts_issue_ns"], r["ts_complete_ns"])
    # Same issue times in the same order: each event's stream is its record's.
    assert np.array_equal(ev.t_ns, r["ts_issue_ns"][rows].astype(np.int64))
    assert np.array_equal(stream, r["stream"][rows])


@pytest.fixture(scope="module")
def cli_s3fifo(db: str) -> dict:
    # Before the server opens the store read-only: DuckDB refuses a second configuration.
    return analyze(db, "--policy", "s3fifo", "--capacity", "8M", "--sweep")


@pytest.fixture(scope="module")
def client(db: str):
    a = create_app(Settings(db=db, prewarm=False))
    if not any(getattr(rt, "path", "") == "/runs/{run}/tiering" for rt in a.routes):
        a.include_router(api_tiering.router)  # until api_main registers it
    with TestClient(a) as c:
        yield c


def test_endpoint_matches_the_cli(cli_s3fifo: dict, client) -> None:
    r = client.get("/runs/nightly/tiering", params={"policy": "s3fifo", "capacity": "8M",
                                                    "sweep": "true"})  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    cli = cli_s3fifo
    assert body["hit_ratio"] == cli["hit_ratio"] and body["sweep"] == cli["sweep"]
    assert body["sweep"]["one_pass"] is False


def test_endpoint_errors(client) -> None:
    assert client.get("/runs/nope/tiering").status_code == 404
    assert client.get("/runs/nightly/tiering", params={"policy": "arc"}).status_code == 422
    assert client.get("/runs/nightly/tiering", params={"unit": "3000"}).status_code == 422
    r = client.get("/runs/nightly/tiering", params={"fast_run": "ssd"})
    assert r.status_code == 422 and "both" in r.json()["detail"]
    r = client.get("/runs/nightly/tiering", params={"fast_run": "nope", "slow_run": "hdd"})
    assert r.status_code == 404
    # A nanosecond statistics interval: billions of windows, refused instead of allocated.
    r = client.get("/runs/nightly/tiering", params={"policy": "tiering", "stats_interval": 1e-9})
    assert r.status_code == 422 and "windows" in r.json()["detail"]
    # Found by the schemathesis test: migrate / stats overflowed to infinity (a 500).
    q = {"policy": "tiering", "stats_interval": 1e-300, "migrate_interval": 1e7}
    r = client.get("/runs/nightly/tiering", params=q)
    assert r.status_code == 422 and "statistics intervals" in r.json()["detail"]


def test_dashboard_tiering_page_draws_its_charts(tmp_path: Path) -> None:
    import re
    import socket
    import threading
    import time

    import uvicorn
    from api_helpers import build_store
    from test_dashboard import charts, chromium

    url, _ = build_store(tmp_path)
    a = create_app(Settings(db=url, prewarm=False))
    if not any(getattr(rt, "path", "") == "/runs/{run}/tiering" for rt in a.routes):
        a.include_router(api_tiering.router)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(a, host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    try:
        while not srv.started:
            assert t.is_alive(), "the server did not start"
            time.sleep(0.05)
        page = f"http://127.0.0.1:{port}/#/tiering/base?policy=lru&unit=1M&capacity=64M"
        dom = chromium(page, "--dump-dom").stdout
    finally:
        srv.should_exit = True
        t.join(10)
    assert 'data-ready="tiering"' in dom, dom[-2000:]
    got = charts(dom)
    for name in ("tiering-hits", "tiering-skew", "tiering-sweep"):
        assert got.get(name) and max(got[name]) >= 2, name
    assert re.search(r'id="tiering-hits"', dom)


def test_the_store_selects_the_columns_events_are_built_from() -> None:
    # events.py spells them out so that the replayer never imports the store.
    from analyzer.store.queries import TIERING_COLUMNS
    from analyzer.tiering.events import COLUMNS

    assert COLUMNS == TIERING_COLUMNS
