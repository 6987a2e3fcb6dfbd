"""Checks shared by the modules that take integers and read ``MEMRA_DSPARK_*`` variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeGuard

from ..errors import ArgumentTypeError


def is_int(value: object) -> TypeGuard[int]:
    """An ``int`` that is not a ``bool`` (Python counts ``True`` as 1; no width or count is a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def environment(environ: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """``environ``, or the process environment when it is ``None``."""
    return os.environ if environ is None else environ


def require_type(value: object, expected: type | tuple[type, ...], parameter: str, hint: str) -> Any:
    """``value`` if it is an instance of ``expected``, else an ``ArgumentTypeError`` naming ``parameter``."""
    if isinstance(value, expected):
        return value
    names = " or ".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
    raise ArgumentTypeError(
        f"{parameter} must be a {names}, got {type(value).__name__}; {hint}", where=parameter
    )


def require_environ(environ: object, parameter: str) -> Mapping[str, str]:
    """``environ`` (or the process environment for ``None``), refused when it is not a mapping."""
    if environ is None:
        return os.environ
    checked: Mapping[str, str] = require_type(
        environ, Mapping, parameter, "pass a mapping such as os.environ, or None."
    )
    return checked


__all__ = ["is_int", "environment", "require_type", "require_environ"]
