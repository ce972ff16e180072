"""Command-line values coerced without pydantic where typer's own coercion is plain.

typer 0.29 turns every parameter's value into its type through a pydantic
TypeAdapter, and builds the first one as a command parses its line: importing
pydantic for it is 45-65 ms of every command (`python -X importtime`), `iotape
ingest` included, which uses pydantic for nothing else. Most values need none of
it: a string stays the string, a path becomes `Path(value)` and is checked by
typer's own `coerce_cli_path`, a number given as its default is that number.

`install()` (iotape/cli.py, where typer's private modules import as in 0.29)
puts `build` in the place of typer's `build_runtime_param`: those
plain cases are done here; every other case, and every value these cannot take
as typer would (a number typed on the line, an enum, a date, a file), goes to the
runtime parameter typer builds itself, built when the first such value comes.
tests/test_cli_coercion.py holds each plain case to typer's own result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

from typer import _coercion, core
from typer._param_types import coerce_cli_path

# What a leaf returns for a value it does not coerce as typer would: typer's own then.
_TYPERS = object()

Leaf = Callable[[Any, Any, Any], Any]


_typer_build = _coercion.build_runtime_param


def install() -> None:
    """Coerce plain values here from now on (idempotent). A typer without the hook
    this relies on keeps its own coercion: slower, the same values."""
    if getattr(core, "build_runtime_param", None) is _typer_build:
        core.build_runtime_param = build


def build(descriptor: _coercion.TypeDescriptor) -> _coercion.RuntimeParam:
    """The runtime parameter for `descriptor`: plain values here, the rest typer's."""
    ann, info = descriptor.annotation, descriptor.parameter_info
    many = get_origin(ann) is list
    leaf_ann = get_args(ann)[0] if many else ann
    leaf = None
    if descriptor.file_annotation is None and info.parser is None:
        leaf = _leaf(leaf_ann, info)
    return _Plain(annotation=ann, parameter_info=info, descriptor=descriptor, leaf=leaf, many=many)


def _leaf(ann: Any, info: Any) -> Leaf | None:
    """How typer's adapter for `ann` (build_leaf_adapter) treats the values it is
    given unchanged; None where every value goes to typer's."""
    if ann is str:
        # _parse_cli_str: a str is kept (bytes are decoded: typer's).
        return lambda v, param, ctx: v if type(v) is str else _TYPERS
    if ann is int or ann is float:
        lo, hi = info.min, info.max

        def number(v: Any, param: Any, ctx: Any) -> Any:
            # A value of the type already (a default), within its bounds, is kept by
            # the adapter (and by clamping); text from the line is pydantic's to parse.
            if (
                type(v) is not ann
                or (lo is not None and not lo <= v)
                or (hi is not None and not v <= hi)
            ):
                return _TYPERS
            return v

        return number
    if ann is Path and info.path_type in (None, Path):
        # _build_path_adapter: coerce_cli_path, which turns a str into a Path with
        # pydantic's TypeAdapter(Path) (that is Path(value)) and then checks it.
        def path(v: Any, param: Any, ctx: Any) -> Any:
            if type(v) is str:
                v = Path(v)
            elif not isinstance(v, Path):
                return _TYPERS
            return coerce_cli_path(v, info, path_type=Path, param=param, ctx=ctx)

        return path
    return None


@dataclass(frozen=True)
class _Plain(_coercion.RuntimeParam):
    descriptor: _coercion.TypeDescriptor
    leaf: Leaf | None
    many: bool

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        leaf = self.leaf
        if leaf is not None and not self.many:
            out = leaf(value, param, ctx)
            if out is not _TYPERS:
                return out
        elif leaf is not None:
            # typer's parse_list: one value is a list of one; a list comes back.
            items = value if isinstance(value, (list, tuple)) else [value]
            got = [leaf(v, param, ctx) for v in items]
            if all(g is not _TYPERS for g in got):
                return got
        return self._typers()._coerce_value(value, param, ctx)

    def _typers(self) -> _coercion.RuntimeParam:
        # Built once, when the first value that needs it comes (a frozen dataclass:
        # kept in its __dict__ by hand).
        real = self.__dict__.get("_real")
        if real is None:
            real = _typer_build(self.descriptor)
            object.__setattr__(self, "_real", real)
        return real
