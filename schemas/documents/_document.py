"""What every JSON document that crosses a component boundary shares: its
"format" and "version" keys (contracts.toml [format]), one way to write it and
one way to read it back.

A writer builds the model and calls `text()` (or `write(path)`): the bytes are
`json.dumps(..., indent=2)` of the fields it set, in the order the model declares
them, so a field the writer leaves out stays out. A reader calls the document
module's `load(path)`: a missing file, bad JSON, another format, another version or
a malformed field is an IotapeError of one line naming the file and the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from base.errors import IotapeError
from schemas.formats import Format

# pydantic's error types, as a reader of the message would say them.
_EXPECTED = {
    "string_type": "expected a string",
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
    "list_type": "expected a list",
    "tuple_type": "expected a list",
    "dict_type": "expected an object",
    "model_type": "expected an object",
    "model_attributes_type": "expected an object",
    "missing": "missing",
    "extra_forbidden": "not a field of this document",
    "none_required": "expected null",
    "greater_than_equal": "expected a whole number >= 0",
    "finite_number": "expected a finite number",
}


class Part(BaseModel):
    """A nested object of a document: its keys are its fields, no others."""

    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False, validate_by_name=True, defer_build=True
    )

    def data(self) -> dict[str, Any]:
        """As JSON values: the fields set, in declaration order, under their JSON names."""
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)


class OpenPart(BaseModel):
    """A nested object whose further keys are kept as they are (another program's
    output, a dictionary keyed by names): its named fields are checked."""

    model_config = ConfigDict(
        extra="allow", allow_inf_nan=False, validate_by_name=True, defer_build=True
    )

    def data(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)


class Document(Part):
    """A whole document: the format it says it is and its version."""

    FORMAT: ClassVar[Format]
    WHAT: ClassVar[str]  # "replay plan": how messages name it
    PLURAL: ClassVar[str] = ""  # where not WHAT + "s"
    # Earlier versions this iotape still reads: version -> that document made current.
    # None: a document from before it had a version.
    UPGRADES: ClassVar[dict[int | None, Callable[[dict[str, Any]], dict[str, Any]]]] = {}

    def model_post_init(self, context: Any, /) -> None:
        # Written always, though they have defaults: they say what the document is.
        self.__pydantic_fields_set__.update({"format", "version"})

    def text(self) -> str:
        return json.dumps(self.data(), indent=2) + "\n"

    def write(self, path: Path) -> None:
        Path(path).write_text(self.text())

    @classmethod
    def parse(cls, doc: Any, where: str) -> Self:
        """A document from JSON values already read; `where` names it in errors."""
        if not isinstance(doc, dict):
            raise IotapeError(f"{where}: expected a JSON object; not a {cls.WHAT}")
        fid, version = cls.FORMAT.id, cls.FORMAT.version
        if doc.get("format", fid) != fid:
            raise IotapeError(
                f"{where}: field 'format': {doc['format']!r} is not {fid!r}; not a {cls.WHAT}"
            )
        got = doc.get("version")
        if got != version:
            upgrade = cls.UPGRADES.get(got) if got is None or isinstance(got, int) else None
            if upgrade is None:
                raise IotapeError(
                    f"{where}: field 'version': {got!r}; this iotape reads "
                    f"{cls.PLURAL or cls.WHAT + 's'} of "
                    f"version {version}"
                )
            doc = upgrade(doc)
        try:
            return cls.model_validate(doc, strict=True)
        except ValidationError as e:
            raise IotapeError(f"{where}: {field_error(e)}") from None

    @classmethod
    def read(cls, path: Path) -> Self:
        """The document in `path`: what every `load(path)` does."""
        return cls.parse(read_json(path, cls.WHAT), str(path))


def read_json(path: Path, what: str = "JSON document") -> Any:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise IotapeError(f"{path}: missing") from None
    except UnicodeDecodeError:
        raise IotapeError(f"{path}: not a {what} (not UTF-8 text)") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise IotapeError(f"{path}: line {e.lineno}: not JSON: {e.msg}") from None


# How pydantic tags the members of a union in an error's location: not fields.
_UNION_MEMBERS = {"int", "float", "str", "bool"}


def field_error(e: ValidationError) -> str:
    """The first of pydantic's errors as one clause: "field 'targets.0.path':
    expected a string, got 5". A number that may be an int or a float fails as
    both: that is "expected a number"."""
    errors = e.errors(include_url=False)
    err = errors[0]

    def path(loc: tuple) -> tuple:
        return tuple(p for p in loc if not (isinstance(p, str) and p in _UNION_MEMBERS))

    where = path(err["loc"])
    loc = ".".join(str(p) for p in where) or "(document)"
    types = {x["type"] for x in errors if path(x["loc"]) == where}
    kind = "float_type" if types >= {"int_type", "float_type"} else err["type"]
    what = _EXPECTED.get(kind, err["msg"][:1].lower() + err["msg"][1:])
    got = "" if kind in ("missing", "extra_forbidden") else f", got {_short(err['input'])}"
    return f"field '{loc}': {what}{got}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
