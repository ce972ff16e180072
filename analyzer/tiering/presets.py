"""Array presets (unit, intervals, heat model, each naming its source) and the
parameters for a policy built from one."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from analyzer.tiering.params import POLICIES, GiB, KiB, MiB, Params, TieringError, check


@dataclass(frozen=True)
class Preset:
    unit: int
    stats_interval_s: float
    migrate_interval_s: float
    half_life_s: float | None
    history_s: float | None
    max_io_bytes: int | None
    source: str


PRESETS: dict[str, Preset] = {
    "msa": Preset(
        unit=4 * MiB,
        stats_interval_s=5.0,
        migrate_interval_s=5.0,
        half_life_s=60.0,
        history_s=None,
        max_io_bytes=None,
        source="HPE MSA 1050/2050/2040 best-practices guides: sub-LUN tiering moves 4 MB "
        "pages and re-evaluates placement every few seconds (5 s assumed here; the "
        "half-life is our choice); Demartek's MSA 2040 Jetstress evaluation (2016) "
        "saw the 4 MB page migrations (reference/jetstress_profiles.json)",
    ),
    "compellent": Preset(
        unit=2 * MiB,
        stats_interval_s=3600.0,
        migrate_interval_s=86400.0,
        half_life_s=86400.0,
        history_s=None,
        max_io_bytes=None,
        source="Dell Compellent (SC Series) Data Progression documentation: 2 MB default "
        "page size, pages moved once a day by the scheduled Data Progression run "
        "(heat statistics hourly and a one-day half-life are our assumptions)",
    ),
    "fastvp": Preset(
        unit=256 * MiB,
        stats_interval_s=3600.0,
        migrate_interval_s=86400.0,
        half_life_s=86400.0,
        history_s=None,
        max_io_bytes=None,
        source="EMC FAST VP white papers (VNX: 1 GB slices; VMAX: 768 KB x 360 = "
        "about 256 MB extent groups): statistics analysed hourly, relocation in a daily "
        "window, recent activity weighted more (a one-day half-life assumed); use "
        "--unit 1GiB for VNX",
    ),
    "easytier": Preset(
        unit=1 * GiB,
        stats_interval_s=300.0,
        migrate_interval_s=86400.0,
        half_life_s=None,
        history_s=86400.0,
        max_io_bytes=64 * KiB,
        source="IBM Easy Tier Redbooks (SVC/Storwize/DS8000): I/O statistics every 5 "
        "minutes, a migration plan from the last 24 hours, only small (<= 64 KB) I/Os "
        "counted as heat; extent = the pool's extent size (1 GiB assumed, --unit to change)",
    ),
}


def params_for(policy: str = "tiering", preset: str | None = None, **overrides: Any) -> Params:
    """Params for `policy`, from `preset` (msa when a tiering policy names none), with
    `overrides` (None values ignored) on top."""
    if policy not in POLICIES:
        raise TieringError(f"policy {policy!r}: not one of {', '.join(POLICIES)}")
    if preset is None and policy in ("tiering", "oracle"):
        preset = "msa"
    base: dict[str, Any] = {"policy": policy}
    if preset is not None:
        if preset not in PRESETS:
            raise TieringError(f"preset {preset!r}: not one of {', '.join(PRESETS)}")
        p = asdict(PRESETS[preset])
        p.pop("source")
        base.update(p, preset=preset)
    if policy in ("lru", "s3fifo", "belady") and overrides.get("count_writes") is None:
        base["count_writes"] = False  # an SSD *read* cache
    base.update({k: v for k, v in overrides.items() if v is not None})
    params = Params(**base)
    check(params)
    return params
