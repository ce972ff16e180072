"""Run the C engine (build/iotape-ese): its arguments, its progress, its result.

`WorkloadConfig` is the whole run as data. `engine_argv` turns it into the
engine's command line; `run` starts the engine, shows progress, forwards Ctrl-C
(the engine stops cleanly and still writes a result marked "interrupted") and
returns the parsed result; `run_recorded` does the same inside `iotape record`,
with the workload's parameters in the trace header.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from base.errors import IotapeError
from schemas import workload_header
from schemas.workload_header import WorkloadMetadata
from schemas.workload_options import default_float, default_int, default_str, options
from workload import layout, profiles

if TYPE_CHECKING:
    from recorder.capture.record import RecordSummary

ENGINE = Path(__file__).with_name("build") / workload_header.ENGINE_NAME
MODES = options()["mode"].choices
MIB = 1 << 20

Progress = Callable[[dict], None]


@dataclass
class WorkloadConfig:
    """A run as data; its defaults are the engine's (schemas/workload_options.toml)."""

    db_paths: list[str]
    log_paths: list[str]
    profile: str = "exchange2010"
    mode: str = default_str("mode")
    mailboxes: int = default_int("mailboxes")
    iops_per_mailbox: float = default_float("iops-per-mailbox")
    mailbox_size_mb: float = default_float("mailbox-size-mb")
    databases: int = default_int("databases")
    # Storage groups (database i in group i % G, one log per group); None: the
    # profile's (at most one per database), else one per database.
    storage_groups: int | None = None
    copies: int = default_int("copies")
    duration: float = default_float("duration")
    # A fixed amount of work instead of the duration: operations per session
    # thread, the same ones for the same seed on any device (0: run `duration`).
    transactions: int = default_int("transactions")
    threads: int | str = default_int("threads")  # or "auto" (throughput)
    cache_min_mb: float | None = None  # None: from the mailboxes (cache_mb)
    cache_max_mb: float | None = None
    page_kb: int = default_int("page-kb")
    seed: int = default_int("seed")
    bdm: bool = bool(default_int("bdm"))
    create: str = default_str("create")
    ioengine: str = default_str("ioengine")
    destroy_data_on: list[str] = field(default_factory=list)
    overrides: dict[str, str] = field(default_factory=dict)
    # EMULATION, not the device: hold completions to these latencies (ms) per
    # stream (db_read, db_write, log_write), e.g. a published run's.
    emulate_latency_ms: dict[str, float] | None = None
    # The ESRP sequence (`iotape workload esrp`) this run is a phase of: its
    # phases share it, in their trace headers and reports, which links them.
    sequence: str | None = None

    def db_bytes(self) -> int:
        per_db = max(1, round(self.mailboxes / self.databases))
        page = self.page_kb * 1024
        return per_db * (int(self.mailbox_size_mb * MIB) // page) * page + page

    def groups(self) -> int:
        """The effective number of storage groups: given (0: one per database), the
        profile's (at most one per database), or one per database."""
        if self.storage_groups:
            return self.storage_groups
        if self.storage_groups is None:
            preset = profiles.PRESETS.get(self.profile, {}).get("storage-groups")
            if preset:
                return min(int(preset), self.databases)
        return self.databases

    def cache_mb(self) -> tuple[float, float]:
        """Default cache: 4 pages per mailbox (each mailbox's hot tail and index
        pages stay cached, as in the published runs), at least 8 MiB."""
        hot = max(8.0, self.mailboxes * 4 * self.page_kb / 1024)
        hi = self.cache_max_mb if self.cache_max_mb is not None else hot
        lo = self.cache_min_mb if self.cache_min_mb is not None else min(hi, hi / 8)
        return lo, hi

    def metadata(self) -> WorkloadMetadata:
        """What the replayer needs to scale a trace of this run (trace header)."""
        lo, hi = self.cache_mb()
        return WorkloadMetadata(
            profile=self.profile,
            mode=self.mode,
            mailboxes=self.mailboxes,
            iops_per_mailbox=self.iops_per_mailbox,
            mailbox_size_mb=self.mailbox_size_mb,
            databases=self.databases,
            copies=self.copies,
            storage_groups=self.groups(),
            duration=self.duration,
            transactions=self.transactions,
            threads=self.threads,
            cache_min_mb=lo,
            cache_max_mb=hi,
            page_kb=self.page_kb,
            seed=self.seed,
            bdm=self.bdm,
            ioengine=self.ioengine,
            emulate_latency_ms=dict(self.emulate_latency_ms)
            if self.emulate_latency_ms is not None
            else None,
            sequence=self.sequence,
            workload=workload_header.ENGINE_NAME,
            page_bytes=self.page_kb * 1024,
            log_file_bytes=profiles.LOG_FILE_BYTES,
            overrides=dict(self.overrides),
        )


def engine_path() -> Path:
    path = Path(os.environ.get("IOTAPE_ESE", ENGINE))
    if not path.exists():
        raise IotapeError(f"{path}: the workload engine is not built; run `make setup`")
    return path


def validate(cfg: WorkloadConfig) -> layout.Layout:
    if cfg.mode not in MODES:
        raise IotapeError(f"--mode {cfg.mode}: one of {', '.join(MODES)}")
    if cfg.profile not in profiles.PRESETS:
        raise IotapeError(f"--profile {cfg.profile}: one of {', '.join(profiles.PRESETS)}")
    if cfg.mailboxes < cfg.databases:
        raise IotapeError(f"--mailboxes {cfg.mailboxes}: fewer than --databases {cfg.databases}")
    if cfg.mailbox_size_mb * MIB < 4 * cfg.page_kb * 1024:
        raise IotapeError(f"--mailbox-size-mb {cfg.mailbox_size_mb}: a mailbox needs 4 pages")
    if cfg.threads == "auto" and cfg.mode != "throughput":
        raise IotapeError("--threads auto: only in --mode throughput")
    if cfg.duration <= 0 and cfg.mode in ("performance", "stress", "throughput"):
        raise IotapeError(f"--duration {cfg.duration}: must be positive")
    if cfg.transactions < 0:
        raise IotapeError(f"--transactions {cfg.transactions}: must be 0 or more")
    if cfg.transactions and cfg.mode not in MODES[:3]:
        raise IotapeError(
            f"--transactions {cfg.transactions}: only in --mode {', '.join(MODES[:3])} "
            "(operations per session)"
        )
    if cfg.transactions and cfg.threads == "auto":
        raise IotapeError(
            f"--transactions {cfg.transactions}: not with --threads auto (its sessions come and go)"
        )
    lo, hi = cfg.cache_mb()
    if lo > hi:
        raise IotapeError(f"--cache-min-mb {lo} is above --cache-max-mb {hi}")
    for key in cfg.emulate_latency_ms or {}:
        if key not in profiles.LATENCY_KEYS:
            keys = ", ".join(profiles.LATENCY_KEYS)
            raise IotapeError(f"--emulate-latency: {key}? one of {keys}")
    groups = cfg.groups()
    if not 1 <= groups <= cfg.databases:
        raise IotapeError(
            f"--storage-groups {groups}: between 1 and --databases {cfg.databases} "
            "(a storage group holds at least one database; 0: one per database)"
        )
    for key in cfg.overrides:
        if key in ("db", "log", "result", "mode", "quiet"):
            raise IotapeError(f"--set {key}: set by the command itself")
        if key in ("databases", "storage-groups"):
            raise IotapeError(f"--set {key}: use --{key}, which also lays out the targets")
    return layout.plan(
        cfg.db_paths,
        cfg.log_paths,
        cfg.databases,
        cfg.db_bytes(),
        profiles.LOG_FILE_BYTES,
        cfg.destroy_data_on,
        need_log_space=cfg.mode in MODES[:3],  # backup and recovery write no log
        sparse=cfg.ioengine == "null",
        storage_groups=groups,
    )


def engine_argv(cfg: WorkloadConfig, lay: layout.Layout, result: Path, quiet: bool) -> list[str]:
    lo, hi = cfg.cache_mb()
    params: dict[str, object] = {
        **profiles.PRESETS[cfg.profile],
        "mode": cfg.mode,
        "databases": cfg.databases,
        "storage-groups": cfg.groups(),
        "mailboxes": cfg.mailboxes,
        "iops-per-mailbox": cfg.iops_per_mailbox,
        "mailbox-size-mb": cfg.mailbox_size_mb,
        "page-kb": cfg.page_kb,
        "copies": cfg.copies,
        "duration": cfg.duration,
        "transactions": cfg.transactions,
        "cache-min-mb": lo,
        "cache-max-mb": hi,
        "seed": cfg.seed,
        "bdm": int(cfg.bdm),
        "create": cfg.create,
        "ioengine": cfg.ioengine,
        "log-file-kb": profiles.LOG_FILE_BYTES // 1024,
    }
    if cfg.threads == "auto":
        params["auto-threads"] = 1
    else:
        params["threads"] = int(cfg.threads)
    for k, ms in (cfg.emulate_latency_ms or {}).items():
        params[f"emulate-{k.replace('_', '-')}-ms"] = ms
    params.update(cfg.overrides)
    argv = [str(engine_path())]
    argv += [f"--{k}={v}" for k, v in params.items()]
    for t in lay.dbs:
        argv.append(f"--db={t.arg()}")
    for t in lay.logs:
        argv.append(f"--log={t.arg()}")
    argv += [f"--result={result}", f"--quiet={int(quiet)}"]
    return argv


def _error_line(stderr: str, rc: int) -> str:
    for line in reversed(stderr.splitlines()):
        if line.strip():
            return line.removeprefix("iotape-ese: ")
    return f"the engine exited with status {rc}"


def _load(result: Path, stderr: str, rc: int) -> dict:
    if rc not in (0, 130) or not result.exists() or result.stat().st_size == 0:
        raise IotapeError(_error_line(stderr, rc))
    with open(result) as f:
        return json.load(f)


def run(cfg: WorkloadConfig, progress: Progress | None = None) -> dict:
    """Run the engine to the end (or Ctrl-C) and return its result document."""
    lay = validate(cfg)
    with tempfile.TemporaryDirectory(prefix="iotape-ese-") as tmp:
        result = Path(tmp) / "result.json"
        argv = engine_argv(cfg, lay, result, quiet=False)
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        errs: list[str] = []
        reader = threading.Thread(target=lambda: errs.extend(proc.stderr or []), daemon=True)
        reader.start()
        try:
            for line in proc.stdout or []:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if progress:
                    progress(msg)
            rc = proc.wait()
        except KeyboardInterrupt:
            # The engine stops cleanly on SIGINT and writes a partial result.
            proc.send_signal(signal.SIGINT)
            rc = _wait_through_interrupts(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.join(timeout=5)
        return _annotate(_load(result, "".join(errs), rc), cfg)


def _wait_through_interrupts(proc: subprocess.Popen) -> int:
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


def _annotate(res: dict, cfg: WorkloadConfig) -> dict:
    res["config"] = dict(cfg.metadata())
    return res


def run_recorded(
    cfg: WorkloadConfig,
    output: Path,
    devices: list[str] | None = None,
    force: bool = False,
    wakes: bool = False,
) -> tuple[dict, RecordSummary]:
    """Run the engine under `iotape record` (`wakes`: its --wakes); returns (engine
    result, recorder summary)."""
    from recorder.capture.record import RecordOptions, record

    lay = validate(cfg)
    devs = devices or lay.devices
    if not devs:
        raise IotapeError("--record: no block device found under the targets; name one with -d")
    with tempfile.TemporaryDirectory(prefix="iotape-ese-") as tmp:
        result = Path(tmp) / "result.json"
        argv = engine_argv(cfg, lay, result, quiet=True)
        opts = RecordOptions(
            devices=devs,
            output=output,
            command=argv,
            metadata=dict(cfg.metadata()),
            force=force,
            wakes=wakes,
        )
        rec = record(opts)
        rc = rec.command_exit if rec.command_exit is not None else 1
        return _annotate(_load(result, "", rc), cfg), rec.summary
