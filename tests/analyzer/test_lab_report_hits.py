"""The lab report's hit ratios from the emulated array's counters (analyzer/lab/report.py,
`_array`): the read cache's is its own look-ups', the tier's the SSDs' share of the
pieces past the controller's write-back cache; pieces the write-back cache served are
reported beside, not counted as misses. The counters are `twoctl/c1`'s cache run
(`iotape lab hybrid --device array`, 6 databases, 2026-11-27), where the old figure
(the SSDs' share of all pieces) said 65 % while the cache's look-ups hit 93 %."""

from __future__ import annotations

from typing import Any

import pytest

from analyzer.lab import report

C1_CACHE = {
    "tier_read_pieces": 195292,
    "disk_read_pieces": 14349,
    "cache_read_pieces": 90593,
    "rcache_hits": 195292,
    "rcache_misses": 14349,
    "fills": 1563,
    "promoted": 0,
    "reads": 294539,
    "writes": 287545,
    "read_latency_s_sum": 309.386609,
    "write_latency_s_sum": 105.500537,
}


def _counters(**changes: Any) -> dict[str, Any]:
    return {**C1_CACHE, **changes}


def test_the_read_caches_hit_ratio_is_its_look_ups() -> None:
    a = report._array(_counters())
    assert a is not None
    assert a["read_cache_hit_ratio"] == pytest.approx(195292 / (195292 + 14349))  # 0.932
    assert a["tier_read_hit_ratio"] is None  # no tier: nothing promoted
    assert a["write_back_read_share"] == pytest.approx(90593 / 300234)
    # The SSDs' share of every piece (what the report said before) is 0.650: not it.
    assert a["read_cache_hit_ratio"] > 0.9


def test_the_tiers_hit_ratio_leaves_out_the_write_back_caches_pieces() -> None:
    a = report._array(_counters(promoted=50, fills=0, rcache_hits=0, rcache_misses=0,
                                tier_read_pieces=300, disk_read_pieces=100,
                                cache_read_pieces=600))  # fmt: skip
    assert a is not None
    assert a["read_cache_hit_ratio"] is None
    assert a["tier_read_hit_ratio"] == pytest.approx(0.75)
    assert a["write_back_read_share"] == pytest.approx(0.6)


def test_no_tier_and_no_cache_have_no_hit_ratio() -> None:
    a = report._array(_counters(promoted=0, fills=0, rcache_hits=0, rcache_misses=0))
    assert a is not None
    assert a["read_cache_hit_ratio"] is None and a["tier_read_hit_ratio"] is None
