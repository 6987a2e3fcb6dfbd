"""The JSON form of the typed report and its JSON Schema, both derived from the dataclasses' fields.

One source of truth: ``to_json`` walks a report's fields, ``json_schema`` walks the same fields' type
hints, so the published schema cannot drift from what ``--json`` prints.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from ..harvest import DsparkHarvest

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_SCALARS: dict[Any, dict[str, Any]] = {
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    type(None): {"type": "null"},
}


def to_json(value: Any) -> Any:
    """``value`` as JSON-able data: dataclasses as objects of their fields, a harvest as its name."""
    if isinstance(value, DsparkHarvest):
        return value.name()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


class _SchemaBuilder:
    """Walks type hints; every dataclass becomes one entry of ``$defs``, referenced by name."""

    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}

    def of(self, tp: Any) -> dict[str, Any]:
        if tp in _SCALARS:
            return dict(_SCALARS[tp])
        if tp is Any:
            return {}
        if tp is DsparkHarvest:
            return {"enum": [h.name() for h in DsparkHarvest]}
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            return self._dataclass(tp)
        return self._generic(tp)

    def _generic(self, tp: Any) -> dict[str, Any]:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.of(a) for a in args]}
        if origin is typing.Literal:
            return {"enum": list(args)}
        if origin in (dict, Mapping):
            return {"type": "object", "additionalProperties": self.of(args[1])}
        if origin in (list, tuple, Sequence):
            return {"type": "array", "items": self.of(args[0])}
        raise TypeError(f"no JSON schema for the type {tp!r}")

    def _dataclass(self, cls: type) -> dict[str, Any]:
        name = cls.__name__
        if name not in self.defs:
            self.defs[name] = {}  # placeholder: a recursive reference stops here
            hints = typing.get_type_hints(cls)
            fields = dataclasses.fields(cls)
            self.defs[name] = {
                "type": "object",
                "description": (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else "",
                "properties": {f.name: self.of(hints[f.name]) for f in fields},
                "required": [f.name for f in fields],
                "additionalProperties": False,
            }
        return {"$ref": f"#/$defs/{name}"}


def json_schema(cls: type, title: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``to_json(x)`` for an instance ``x`` of the dataclass ``cls``."""
    builder = _SchemaBuilder()
    root = builder.of(cls)
    return {"$schema": SCHEMA_DIALECT, "title": title, **root, "$defs": builder.defs}


__all__ = ["SCHEMA_DIALECT", "to_json", "json_schema"]
