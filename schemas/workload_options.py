"""The reference workload engine's options (workload_options.toml): the one table
of names, types, defaults, bounds and help that the engine (the generated
workload/src/contract.h) and `iotape workload run` / `esrp` share."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PATH = Path(__file__).with_name("workload_options.toml")


@dataclass(frozen=True)
class Option:
    name: str
    type: str  # int, double, string or target
    field: str
    help: str
    default: int | float | str | None = None
    min: int | float | None = None
    max: int | float | None = None
    choices: tuple[str, ...] = ()
    enum_prefix: str | None = None

    def engine_default(self) -> str:
        """The default as the engine parses it."""
        if isinstance(self.default, float) and self.default.is_integer():
            return str(int(self.default))
        return str(self.default)


@cache
def options() -> dict[str, Option]:
    with PATH.open("rb") as f:
        raw = tomllib.load(f)["option"]
    out = {}
    for name, o in raw.items():
        out[name] = Option(name=name, **{**o, "choices": tuple(o.get("choices", ()))})
    return out


def bounds(name: str) -> tuple[float, float]:
    """A number option's min and max."""
    o = options()[name]
    if o.min is None or o.max is None:
        raise TypeError(f"workload option {name}: not a number")
    return o.min, o.max


def default_int(name: str) -> int:
    return int(_number(name))


def default_float(name: str) -> float:
    return float(_number(name))


def default_str(name: str) -> str:
    return str(options()[name].default)


def _number(name: str) -> int | float:
    d = options()[name].default
    if not isinstance(d, int | float):
        raise TypeError(f"workload option {name}: default {d!r} is not a number")
    return d
