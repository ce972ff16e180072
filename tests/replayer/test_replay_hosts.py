"""Replay across hosts (issue 20): `replay plan --host`, `replay run` through one
`fio --client`, results per host, refusals before any I/O, ingest as one run.

The hosts are network namespaces, each running `fio --server` on its own address
with its own loop device (bench/hosts_lab.py, shared with the benchmark). Every
planned request is counted on the right host twice over: in that host's fio logs
(in order, per job) and in the kernel's own counters of that host's loop device.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import Loop, need
from trace_helpers import SDA, make_trace, workload_records

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))
from hosts_lab import PORT, Lab

from analyzer.store import catalog, queries
from analyzer.store.ingest import ingest
from base.errors import IotapeError
from replayer.hosts import check as hostcheck
from replayer.hosts import fidelity as hostfid
from replayer.plan.build import PlanOptions, plan
from schemas.documents.summary import ReplaySummary

HOST_IOTAPE = str(Path(sys.executable).parent / "iotape")


def _trace(path: Path) -> Path:
    """~300 requests over 0.3 s on one device, 4 and 32 KiB (one request each on a
    loop device: no split, nomerges), reads, writes and flushes."""
    r = workload_records(300, seed=11)
    r["ts_queue_ns"] = np.sort(np.random.default_rng(11).integers(1, 3 * 10**8, size=300))
    r["ts_issue_ns"] = r["ts_queue_ns"] + 100
    r["ts_complete_ns"] = r["ts_issue_ns"] + 5_000
    r["dev"] = SDA
    r["bytes"] = np.where(r["bytes"] > 32768, 32768, r["bytes"])
    r["offset"] = r["offset"] % (1 << 24) // 4096 * 4096
    r["error"] = 0
    return make_trace(path, r)


def _stat(loop: Loop) -> tuple[int, int]:
    """(reads, writes) the kernel completed on the device."""
    f = Path(f"/sys/block/{loop.name}/stat").read_text().split()
    return int(f[0]), int(f[4])


def _plan(tmp: Path, lab: Lab, loops: list[Loop], name: str, port2: int = PORT) -> Path:
    jobdir = tmp / name
    plan(
        PlanOptions(
            trace=tmp / "src.iot",
            jobdir=jobdir,
            mode="exact",
            databases=2,
            from_databases=1,
            hosts=[f"h1={lab.addresses[0]}", f"h2={lab.addresses[1]}:{port2}"],
            targets=[f"db0=h1:{loops[0].path}", f"db1=h2:{loops[1].path}"],
        )
    )
    return jobdir


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    need(shutil.which("ip") is not None, "ip (iproute2)")
    need(shutil.which("fio") is not None, "fio")
    need(shutil.which("losetup") is not None, "losetup")
    need(os.geteuid() == 0, "root (network namespaces, loop devices)")
    tmp = tmp_path_factory.mktemp("hosts")
    _trace(tmp / "src.iot")
    loops: list[Loop] = []
    the_lab = None
    try:
        loops = [Loop(64), Loop(64)]
        the_lab = Lab(2, tmp / "servers")
        yield tmp, the_lab, loops
    finally:
        if the_lab is not None:
            the_lab.release()
        for loop in loops:
            loop.release()


def _planned_by_op(jobdir: Path, host: dict) -> dict[str, int]:
    out = {"read": 0, "write": 0, "sync": 0}
    for job in host["iologs"]:
        for line in (jobdir / "iologs" / f"{job}.log").read_text().splitlines()[1:]:
            f = line.split()
            if len(f) == 5 and f[2] in out:
                out[f[2]] += 1
    return out


@pytest.fixture(scope="module")
def replayed(lab):
    tmp, the_lab, loops = lab
    jobdir = _plan(tmp, the_lab, loops, "jobs")
    before = [_stat(lp) for lp in loops]
    p = the_lab.run("replay", "run", str(jobdir), "--host-iotape", HOST_IOTAPE, "--json")
    assert p.returncode == 0, p.stderr
    after = [_stat(lp) for lp in loops]
    return jobdir, before, after, ReplaySummary.parse(json.loads(p.stdout), "replay run --json")


@pytest.mark.kernel
def test_every_planned_request_runs_on_its_hosts_device(lab, replayed) -> None:
    _, the_lab, loops = lab
    jobdir, before, after, summary = replayed
    man = json.loads((jobdir / "plan.json").read_text())
    hosts = {h["name"]: h for h in man["hosts"]}
    assert set(hosts) == {"h1", "h2"}
    # Each host's job file holds only its own target and its own iologs.
    for name, loop, other in (("h1", loops[0], loops[1]), ("h2", loops[1], loops[0])):
        text = (jobdir / "hosts" / f"{name}.fio").read_text()
        jobs = [ln[1:-1] for ln in text.splitlines() if ln.startswith("[") and ln != "[global]"]
        assert jobs == hosts[name]["jobs"] and jobs
        for job in hosts[name]["iologs"]:
            log = (jobdir / "iologs" / f"{job}.log").read_text()
            assert loop.path in log and other.path not in log
    want = {n: _planned_by_op(jobdir, h) for n, h in hosts.items()}
    # The two databases differ (scaling draws each its own requests), so a request
    # sent to the other host's device would show in the counts below.
    assert want["h1"] != want["h2"]
    for k, name in enumerate(("h1", "h2")):
        # The kernel's count of the host's device: exactly its planned writes and
        # syncs (fio's fsync of a block device is one empty flush write, counted as
        # a write here); its reads at least the planned ones (the host's safety
        # check, blkid, reads too).
        assert after[k][1] - before[k][1] == want[name]["write"] + want[name]["sync"]
        assert after[k][0] - before[k][0] >= want[name]["read"]
        # fio's logs of that host: every planned read and write, job by job, in order.
        host = hosts[name]
        for n, job in enumerate(host["jobs"], start=1):
            planned, _ = hostfid._planned(jobdir / "iologs" / f"{job}.log")
            logged, _ = hostfid._logged(jobdir / "results" / name / f"lat_lat.{n}.log")
            assert logged[["op", "bytes"]].tolist() == planned[["op", "bytes"]].tolist()
        assert summary.hosts is not None
        start = summary.hosts[name].start
        assert start is not None and start.planned is not None
        assert start.planned == start.logged == start.paired > 0
        assert start.planned == want[name]["read"] + want[name]["write"]
        fio = json.loads((jobdir / "results" / name / "fio.json").read_text())
        assert [j["jobname"] for j in fio["jobs"]] == host["jobs"]
        assert {j["hostname"] for j in fio["jobs"]} == {the_lab.addresses[k]}
        ios = sum(j[d]["total_ios"] for j in fio["jobs"] for d in ("read", "write"))
        assert ios == start.planned
    offsets = sorted(summary.hosts[n].start.offset_ms for n in ("h1", "h2"))  # type: ignore[union-attr,type-var]
    assert offsets[0] == 0.0 and offsets[1] >= 0.0


@pytest.mark.kernel
def test_fidelity_states_each_hosts_start(lab, replayed) -> None:
    tmp = lab[0]
    jobdir = replayed[0]
    p = subprocess.run(
        [sys.executable, "-m", "iotape", "replay", "fidelity", str(tmp / "src.iot"), str(jobdir)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    for name in ("h1", "h2"):
        line = next(ln for ln in lines if ln.startswith(f"host {name}:"))
        assert "ms after the first host" in line and "fio per-I/O logs" in line


@pytest.mark.kernel
def test_ingest_is_one_run_with_host_named_devices(lab, replayed, store) -> None:
    loops = lab[2]
    jobdir = replayed[0]
    r = ingest(store, jobdir)
    assert r.kind == "replay"
    names = {row[0] for row in store.rows(*_sql(store, "name", "devices", r.run_id))}
    assert names == {f"h1:{loops[0].path}", f"h2:{loops[1].path}"}
    jobs = queries.fio_jobs(store, r.run_id)
    assert {x["job"].split("/")[0] for x in jobs} == {"h1", "h2"}
    run = catalog.resolve(store, r.run_id)
    assert [h["name"] for h in run["parameters"]["hosts"]] == ["h1", "h2"]
    data = sum(x["ios"] for x in jobs if x["op"] in ("read", "write"))
    got = store.rows(*_sql(store, "count(*)", "fio_latency_samples", r.run_id))
    assert int(got[0][0]) == data


def _sql(store, what: str, table: str, run_id: str) -> tuple[str, dict]:
    r = "$r" if store.dialect == "duckdb" else "{r:String}"
    return (f'SELECT {what} FROM "{table}" WHERE "run_id" = {r}', {"r": run_id})


@pytest.mark.kernel
def test_an_unreachable_host_is_refused_before_any_io(lab) -> None:
    tmp, the_lab, loops = lab
    jobdir = _plan(tmp, the_lab, loops, "unreachable", port2=PORT + 31)
    before = [_stat(lp) for lp in loops]
    p = the_lab.run("replay", "run", str(jobdir), "--host-iotape", HOST_IOTAPE)
    assert p.returncode != 0
    err = p.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert f"host h2 ({the_lab.addresses[1]}:{PORT + 31}): unreachable" in err
    # Not a read, not a write: no host looked at its device (the checks come after
    # every host answered) and fio ran nothing.
    assert [_stat(lp) for lp in loops] == before
    assert not list((jobdir / "results").glob("*/fio.json"))


@pytest.mark.kernel
def test_a_host_refuses_a_device_with_a_signature(lab) -> None:
    tmp, the_lab, loops = lab
    jobdir = _plan(tmp, the_lab, loops, "signature")
    subprocess.run(["mkfs.ext4", "-q", "-F", loops[1].path], check=True)
    try:
        writes = [_stat(lp)[1] for lp in loops]
        p = the_lab.run("replay", "run", str(jobdir), "--host-iotape", HOST_IOTAPE)
        assert p.returncode != 0
        assert p.stderr.strip() == (
            f"iotape: error: --target h2:{loops[1].path}: refused on host h2: holds a "
            f"filesystem signature or partition table (pass --destroy-data-on "
            f"h2:{loops[1].path} to write anyway)"
        )
        assert [_stat(lp)[1] for lp in loops] == writes
        p = the_lab.run(
            "replay",
            "run",
            str(jobdir),
            "--host-iotape",
            HOST_IOTAPE,
            "--destroy-data-on",
            f"h2:{loops[1].path}",
        )
        assert p.returncode == 0, p.stderr
    finally:
        subprocess.run(["wipefs", "-a", "-q", loops[1].path], check=False)


@pytest.mark.kernel
def test_a_host_without_iotape_or_with_another_fio_is_refused(lab) -> None:
    tmp, the_lab, loops = lab
    jobdir = _plan(tmp, the_lab, loops, "noiotape")
    p = the_lab.run("replay", "run", str(jobdir), "--host-iotape", "/nonexistent/iotape")
    assert p.returncode != 0
    assert "iotape's target check did not run there" in p.stderr
    # The version check, against a fio this controller does not run.
    code = (
        "import pathlib; from replayer.hosts import run as hostrun; "
        "from schemas.documents import plan; "
        f"d = pathlib.Path({str(jobdir)!r}); m = plan.load(d / 'plan.json'); "
        "print(hostrun.probe(d, m.hosts[0], 'fio-0.0'))"
    )
    out = the_lab.python(code)
    assert out.returncode == 0, out.stderr
    assert "runs fio-3" in out.stdout and "this controller fio-0.0" in out.stdout


# --------------------------------------------------------------------------- no kernel


def test_plan_refuses_bad_host_specs(tmp_path) -> None:
    trace = _trace(tmp_path / "src.iot")
    cases = [
        (["h1"], ["all=h1:/dev/sdb"], "expected NAME=ADDRESS"),
        (["h1=10.0.0.1:99999"], ["all=h1:/dev/sdb"], "is not a TCP port"),
        (["h1=10.0.0.1", "h2=10.0.0.1:8766"], ["all=h1:/dev/sdb"], "one fio server per address"),
        (["h1=10.0.0.1"], ["db0=h9:/dev/sdb"], "host h9 is not named by --host"),
        (["h1=10.0.0.1"], ["db0=/dev/sdb"], "with --host every target is HOST:PATH"),
        ([], ["db0=h1:/dev/sdb"], "give --host h1=ADDRESS"),
        (["h1=10.0.0.1", "h2=10.0.0.2"], ["all=h1:/dev/sdb"], "--host h2: no --target names it"),
    ]
    for hosts, targets, msg in cases:
        with pytest.raises(IotapeError, match=msg) as e:
            plan(PlanOptions(trace, tmp_path / "j", mode="exact", hosts=hosts, targets=targets))
        assert "\n" not in str(e.value)
        assert not (tmp_path / "j").exists()


def test_host_parts_name_only_their_own_paths(tmp_path) -> None:
    trace = _trace(tmp_path / "src.iot")
    jobdir = tmp_path / "j"
    man = plan(
        PlanOptions(
            trace,
            jobdir,
            mode="exact",
            databases=2,
            from_databases=1,
            hosts=["a=192.0.2.1", "b=192.0.2.2:9000"],
            targets=["db0=a:/dev/sdx", "db1=b:/srv/db1.img"],
        )
    )
    assert [(h["name"], h["address"], h["port"]) for h in man["hosts"]] == [
        ("a", "192.0.2.1", 8765),
        ("b", "192.0.2.2", 9000),
    ]
    assert not (jobdir / "replay.fio").exists()  # nothing here may run it locally
    a = (jobdir / "hosts" / "a.fio").read_text()
    assert f"read_iolog={jobdir.resolve()}/iologs/db0." in a and "/iologs/db1." not in a
    assert "log_unix_epoch=1" in a and "log_offset=0" in a
    for job in man["hosts"][1]["iologs"]:
        log = (jobdir / "iologs" / f"{job}.log").read_text()
        assert " /srv/db1.img add" in log and "b:/" not in log
    # A remote target is planned to what the trace needs, in 4 KiB blocks.
    t = {x["path"]: x for x in man["targets"]}
    assert t["a:/dev/sdx"]["kind"] == "remote" and t["a:/dev/sdx"]["block_size"] == 4096
    assert t["a:/dev/sdx"]["reach_bytes"] <= 1 << 24


def test_verdict_sizes_round_trip(tmp_path) -> None:
    """The check's verdict travels as a file size (fio returns a job's byte count)."""
    for code, want in [
        (0, ""),
        (1 + 64 * 7 + 1, "--target h:/b: refused on host h: holds a filesystem signature"),
        (1 + 64 * 3, "--target h:/a: refused on host h: is mounted"),
        (1 + 64 * 10, "host h: the host's iologs differ"),
    ]:
        v = tmp_path / f"v{code}"
        hostcheck.write_verdict(v, code, "why")
        got = hostcheck.explain("h", ["/a", "/b"], v.stat().st_size)
        assert got.startswith(want) if want else got == ""
        assert v.read_bytes().startswith(b"why\n")


def test_check_host_on_this_host(tmp_path) -> None:
    """`replay check-host` on a copy missing an iolog, and on a too-small file target."""
    trace = _trace(tmp_path / "src.iot")
    img = tmp_path / "t.img"
    img.write_bytes(b"\0" * 4096)
    jobdir = tmp_path / "j"
    plan(
        PlanOptions(trace, jobdir, mode="exact", hosts=["me=127.0.0.1"], targets=[f"all=me:{img}"])
    )
    code, msg = hostcheck.check(jobdir, "me", [])
    assert code and "the plan reaches byte" in msg
    assert hostcheck.explain("me", [str(img)], 512 * (1 + code)).endswith(
        "is smaller than the plan reaches"
    )
    with img.open("r+b") as f:
        f.truncate(64 << 20)
    assert hostcheck.check(jobdir, "me", []) == (0, "ok")
    next((jobdir / "iologs").iterdir()).unlink()
    code, msg = hostcheck.check(jobdir, "me", [])
    assert code and "missing on host me" in msg
