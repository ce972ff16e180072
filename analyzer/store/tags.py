"""A run's tags as the command line gives them (`--tag KEY=VALUE`). On their own, not
in the catalog: `iotape ingest` checks them before it reads any file, and its first
file starts converting before the catalog's modules are imported."""

from __future__ import annotations

from base.errors import IotapeError


def parse_tags(items: list[str]) -> dict[str, str]:
    """`k=v` strings to a dict; a one-line error naming the bad one."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise IotapeError(f"tag {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out
