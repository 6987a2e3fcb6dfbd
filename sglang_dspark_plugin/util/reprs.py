"""Short forms of a value for messages and tables, and its JSON-able form for the evidence."""

from __future__ import annotations

import json
from typing import Any


def cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit - 3`` characters and ``...`` when it is longer than ``limit``."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters; a value too deep to print is named, not raised."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        return f"<a {type(value).__name__} too deep or too long to print>"
    return cut(text, limit)


def short_json(value: Any, limit: int = 48) -> str:
    """``value`` as JSON (ASCII, so no raw control character reaches a terminal), cut to ``limit``."""
    return cut(json.dumps(value, default=str), limit)


def jsonable(value: Any) -> Any:
    """The value as JSON would hold it (a config came from JSON, so this is a cheap check)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return short(value)
    return value


__all__ = ["cut", "short", "short_json", "jsonable"]
