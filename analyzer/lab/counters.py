"""The emulated array's own counters over one configuration of `iotape lab hybrid`
(the servers' MOUNT/stats before and after it): the differences, with two
controllers their sum, and the servers' CPU per second of it."""

from __future__ import annotations

from typing import Any

from analyzer.lab.devices import HybridLab


def array_stats(lab: HybridLab) -> list[dict[str, Any]] | None:
    """Each controller's counters (None on other devices)."""
    return [d.stats() for d in lab.arrays] if lab.array_model is not None else None


def array_delta(
    lab: HybridLab, before: list[dict[str, Any]] | None
) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None]:
    """The array's own counters over one configuration (None on other devices), its
    servers' CPU per second of it among them: with two controllers their sum (maxima:
    the larger; CPU: both servers' cores), each controller's under `controllers`; and
    the counters now."""
    now = array_stats(lab)
    if now is None or before is None:
        return None, now
    each = [one_delta(a, b) for a, b in zip(now, before, strict=True)]
    if len(each) == 1:
        return each[0], now
    d: dict[str, Any] = {}
    for k, v in each[0].items():
        vs = [e[k] for e in each]
        if k.endswith("_max") or k == "now_s":
            d[k] = max(vs)
        elif isinstance(v, list):
            d[k] = [sum(x) for x in zip(*vs, strict=True)]
        else:
            d[k] = sum(vs)
    d["cpu_cores"] = d["cpu_s"] / d["now_s"] if d["now_s"] > 0 else 0.0
    d["controllers"] = each
    return d, now


def one_delta(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """One controller's counters over one configuration."""
    d: dict[str, Any] = {}
    for k, v in now.items():
        if k in ("dirty_limit", "dirty_peak", "read_wait_ms_edges") or k.startswith("worst_"):
            continue
        if k.endswith("_max"):
            d[k] = v  # a maximum: since the server's start (a warm-up's included)
        elif isinstance(v, list):  # a histogram
            d[k] = [a - b for a, b in zip(v, before[k], strict=True)]
        else:
            d[k] = v - before[k]
    d["cpu_cores"] = d["cpu_s"] / d["now_s"] if d["now_s"] > 0 else 0.0
    d["units_at_start"] = before["tier_units"]  # in the tier or cache (warmed: not 0)
    return d
