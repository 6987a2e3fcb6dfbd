"""Checks shared by the modules that take integers and read ``MEMRA_DSPARK_*`` variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeGuard


def is_int(value: object) -> TypeGuard[int]:
    """An ``int`` that is not a ``bool`` (Python counts ``True`` as 1; no width or count is a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def environment(environ: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """``environ``, or the process environment when it is ``None``."""
    return os.environ if environ is None else environ


__all__ = ["is_int", "environment"]
