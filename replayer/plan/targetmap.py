"""Where the replay goes: `--target NAME=PATH` (devices/targets.py for now)."""

from devices.targets import Owner, Target, choose, parse, probe, ranges

__all__ = ["Owner", "Target", "choose", "parse", "probe", "ranges"]
