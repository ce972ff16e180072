"""The device table of an import: the input's device keys → record `dev` numbers and
the header's device entries, with `--device-map` applied."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from base.errors import IotapeError
from devices import naming

# Devices we make up for formats without device numbers: a major from the range
# Linux reserves for local/experimental use, so they never look like a real disk.
SYNTH_MAJOR = 240


@dataclass
class DeviceTable:
    """Device keys of the input → record `dev` numbers and the header's device table."""

    fmt: str
    mapping: dict[str, str] = field(default_factory=dict)
    by_key: dict[str, int] = field(default_factory=dict)
    entries: dict[int, dict] = field(default_factory=dict)

    def __call__(self, key: str, native: int | None) -> int:
        if key in self.by_key:
            return self.by_key[key]
        target = self.mapping.get(key)
        if target is not None:
            entry = _mapped_device(key, target, self.fmt)
        else:
            dev = native if native is not None else naming.kdev(SYNTH_MAJOR, len(self.by_key))
            major, minor = naming.split_kdev(dev)
            entry = _device_entry(f"{self.fmt}:{key}", dev, major, minor)
        self.by_key[key] = entry["dev"]
        self.entries.setdefault(entry["dev"], {**entry, "source_key": key})
        return entry["dev"]

    def header(self) -> list[dict]:
        return [self.entries[d] for d in sorted(self.entries)]


def _device_entry(name: str, dev: int, major: int, minor: int) -> dict:
    return {
        "name": name,
        "dev": dev,
        "major": major,
        "minor": minor,
        "model": "",
        "firmware": "",
        "rotational": None,
        "logical_block_size": 512,
        "capacity_bytes": 0,
        "partition": None,
    }


def _mapped_device(key: str, target: str, fmt: str) -> dict:
    if target.startswith("/dev/"):
        d = naming.resolve(target)
        return {**d.to_json(), "partition": None}
    m = re.fullmatch(r"(?:(.+)=)?(\d+):(\d+)", target)
    if m:
        major, minor = int(m.group(2)), int(m.group(3))
        return _device_entry(m.group(1) or f"{fmt}:{key}", naming.kdev(major, minor), major, minor)
    raise IotapeError(f"--device-map {key}={target}: expected /dev/NAME, MAJ:MIN or NAME=MAJ:MIN")


def parse_device_map(specs: list[str]) -> dict[str, str]:
    out = {}
    for s in specs:
        key, sep, target = s.partition("=")
        if not sep or not key or not target:
            raise IotapeError(f"--device-map {s!r}: expected KEY=DEVICE, e.g. hm_0=/dev/sdb")
        out[key] = target
    return out
