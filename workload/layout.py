"""Where each database and log goes, and whether that is safe and large enough.

A path is a directory (database files `dbN.edb`, log directories `dbN-logs/`,
or with storage groups, one log per group, `sgG-logs/`) or a raw block device.
One path may serve several databases: a device is then split into equal
regions, and a device named for both databases and logs keeps its last part for
the logs (a region per log: per database, or per storage group). A raw device
is refused while it is mounted, in use by another device (holders) or holds a
filesystem or partition signature, is the root disk or is opened exclusively
elsewhere, unless it is named with --destroy-data-on; a path under /dev must be
a block device.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from base.errors import IotapeError
from devices import naming, safety, targets

MIB = 1 << 20
LOG_FILES_PER_REGION = 64  # log files a device region holds (it is used as a ring)


@dataclass
class Target:
    path: str
    off: int = 0
    size: int = 0
    is_dev: bool = False

    def arg(self) -> str:
        return f"{self.path},{self.off},{self.size}" if self.is_dev else self.path


@dataclass
class Layout:
    dbs: list[Target]
    logs: list[Target]  # one per storage group (without groups, per database)
    devices: list[str]  # block devices holding them (for `--record`)


def check_raw(dev: str, destroy: set[str]) -> None:
    """Refuse a device with data on it or in use (the root disk, mounted, held by
    device-mapper/md/swap or opened exclusively) unless the user said to destroy it."""
    safety.check_target(os.path.realpath(dev), sorted(destroy))


def _split(dev: str, n: int, start: int, end: int) -> list[Target]:
    each = (end - start) // n // MIB * MIB
    return [Target(dev, start + i * each, each, True) for i in range(n)]


def _per_db(paths: list[str], k: int, what: str, each: str = "database") -> list[str]:
    if len(paths) == 1:
        return paths * k
    if len(paths) != k:
        raise IotapeError(
            f"--{what}-path: give one path, or one per {each} ({k}), not {len(paths)}"
        )
    return paths


def _check_paths(db_paths: list[str], log_paths: list[str]) -> None:
    if not db_paths or not log_paths:
        raise IotapeError("give --db-path and --log-path (a directory or a block device)")
    for p in [*db_paths, *log_paths]:
        targets.check_system_path(
            os.path.realpath(p), "--db-path" if p in db_paths else "--log-path"
        )
        if not os.path.exists(p):
            raise IotapeError(f"{p}: no such file, directory or device")
        if not (os.path.isdir(p) or naming.is_block(p)):
            raise IotapeError(f"{p}: not a directory or a block device")


def _on_device(
    dev: str, dbs_for: list[str], logs_for: list[str], db_bytes: int, log_region: int
) -> tuple[dict[int, Target], dict[int, Target]]:
    """The database and log regions (by database, by log) of one raw device: the logs at
    its end, the databases in equal parts of the rest."""
    real = os.path.realpath
    size = targets.device_size(dev)
    db_idx = [i for i, p in enumerate(dbs_for) if real(p) == dev]
    log_idx = [i for i, p in enumerate(logs_for) if real(p) == dev]
    log_start = size - len(log_idx) * log_region
    logs: dict[int, Target] = {}
    if log_idx:
        if log_start < 0:
            raise IotapeError(
                f"{dev}: {size // MIB} MiB is too small for {len(log_idx)} log regions of "
                f"{log_region // MIB} MiB"
            )
        logs = dict(zip(log_idx, _split(dev, len(log_idx), log_start, size), strict=True))
    if not db_idx:
        return {}, logs
    regions = _split(dev, len(db_idx), 0, log_start)
    if regions[0].size < db_bytes + 1 * MIB:
        raise IotapeError(
            f"{dev}: impossible size: {len(db_idx)} database(s) of "
            f"{db_bytes / 2**30:.2f} GiB (mailboxes x mailbox size) do not fit in "
            f"{log_start / 2**30:.2f} GiB"
        )
    return dict(zip(db_idx, regions, strict=True)), logs


def _check_db_space(by_dir: dict[str, int], db_bytes: int) -> None:
    """Space the databases already hold counts (reused or overwritten in place; a
    sparse file left by a null run holds next to none)."""
    for d, n in by_dir.items():
        have = sum(f.stat().st_blocks * 512 for f in Path(d).glob("db*.edb") if f.is_file())
        free = os.statvfs(d).f_bavail * os.statvfs(d).f_frsize + have
        if free < n * db_bytes:
            raise IotapeError(
                f"{d}: impossible size: {n} database(s) of {db_bytes / 2**30:.2f} GiB (mailboxes x "
                f"mailbox size) need {n * db_bytes / 2**30:.2f} GiB, {free / 2**30:.2f} GiB free"
            )


def log_dir_name(i: int, grouped: bool) -> str:
    """Log i's directory: a database's, or with storage groups a group's."""
    return f"sg{i}-logs" if grouped else f"db{i}-logs"


def _log_dir(p: str, name: str, log_file_bytes: int, need_log_space: bool) -> Target:
    logdir = Path(p) / name
    logdir.mkdir(exist_ok=True)
    if need_log_space:
        st = os.statvfs(logdir)
        if st.f_bavail * st.f_frsize < 16 * log_file_bytes:
            raise IotapeError(f"{p}: less than {16 * log_file_bytes // MIB} MiB free")
    return Target(str(logdir))


def plan(
    db_paths: list[str],
    log_paths: list[str],
    databases: int,
    db_bytes: int,
    log_file_bytes: int,
    destroy: list[str],
    need_log_space: bool = True,
    sparse: bool = False,
    storage_groups: int | None = None,
) -> Layout:
    """Check the paths and sizes; give each database its database target and each
    log (one per storage group; without groups, one per database) its target.
    `sparse`: database files take no space (the null backend only sizes them)."""
    _check_paths(db_paths, log_paths)
    destroy_set = {os.path.realpath(d) for d in destroy}
    groups = storage_groups or databases
    grouped = groups != databases
    dbs_for = _per_db(db_paths, databases, "db")
    logs_for = _per_db(log_paths, groups, "log", "storage group" if grouped else "database")
    real = os.path.realpath
    devs = {real(p) for p in dbs_for + logs_for if naming.is_block(p)}
    for dev in sorted(devs):
        check_raw(dev, destroy_set)
    dbs: dict[int, Target] = {}
    logs: dict[int, Target] = {}
    for dev in sorted(devs):
        on_db, on_log = _on_device(
            dev, dbs_for, logs_for, db_bytes, LOG_FILES_PER_REGION * log_file_bytes
        )
        dbs.update(on_db)
        logs.update(on_log)
    by_dir: dict[str, int] = {}
    for i, p in enumerate(dbs_for):
        if i not in dbs:
            dbs[i] = Target(str(Path(p) / f"db{i}.edb"))
            by_dir[real(p)] = by_dir.get(real(p), 0) + 1
    if not sparse:  # a null run needs no space
        _check_db_space(by_dir, db_bytes)
    for i, p in enumerate(logs_for):
        if i not in logs:
            logs[i] = _log_dir(p, log_dir_name(i, grouped), log_file_bytes, need_log_space)
    holding = set(devs)
    for p in dbs_for + logs_for:
        held = None if naming.is_block(p) else naming.holding_device(p)
        if held:
            holding.add(held)
    return Layout(
        [dbs[i] for i in range(databases)], [logs[i] for i in range(groups)], sorted(holding)
    )
