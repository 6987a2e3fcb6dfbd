"""A checkpoint's config.json as the census reads it.

Every accessor that can refuse a value builds the same message: ``<config.json>: key = value but
<what was expected>; <how to fix it>``, with the file and key as ``where``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidCheckpointError
from ..util.reprs import jsonable, short
from ..util.validation import is_int
from .draft_config import Signal
from .locate import CONFIG

Sections = tuple[tuple[str, ...], ...]
"""Where a key may sit: ``()`` is the top level, ``("dflash_config",)`` a nested object, ..."""


@dataclass(frozen=True)
class ConfigView:
    """The parsed config.json of the checkpoint folder ``folder``."""

    folder: str
    config: dict[str, Any]

    @property
    def file(self) -> str:
        """The config's path, as every message names it."""
        return os.path.join(self.folder, CONFIG)

    def invalid(self, key: str, value: Any, expected: str, fix: str) -> InvalidCheckpointError:
        """The refusal of ``key = value``: what was expected, and how to fix it."""
        return InvalidCheckpointError(
            f"{self.file}: {key} = {short(value)} but {expected}; {fix}",
            where=f"{self.file}:{key}",
        )

    def section(self, *keys: str) -> dict[str, Any] | None:
        """A nested object such as ``dflash_config``; absent or null -> None, wrong type refused."""
        node: Any = self.config
        for depth, key in enumerate(keys):
            node = node.get(key)
            if node is None:
                return None
            if not isinstance(node, dict):
                dotted = ".".join(keys[: depth + 1])
                raise self.invalid(
                    dotted, node, "it must be a JSON object", f"make {dotted} an object or remove it."
                )
        return node

    def lookups(self, key: str, sections: Sections) -> list[tuple[str, Any]]:
        """(dotted key, value) of ``key`` in each section where it is present."""
        found = []
        for section in sections:
            node = self.config if not section else self.section(*section)
            if node is not None and key in node:
                found.append((".".join((*section, key)), node[key]))
        return found

    def integer(self, key: str, value: Any, *, minimum: int | None, what: str) -> int:
        """``value`` of ``key`` as an integer >= ``minimum``; anything else is refused."""
        if not is_int(value):
            raise self.invalid(key, value, f"{what} must be an integer", f"set {key} to an integer.")
        if minimum is not None and value < minimum:
            raise self.invalid(key, value, f"{what} must be >= {minimum}", f"fix {key}.")
        return value

    def agreed(self, values: dict[str, Any], what: str, fix: str) -> tuple[str, Any] | None:
        """The first (key, value) of spellings that must all say the same; None when none is present."""
        if len(set(values.values())) > 1:
            listed = "; ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in values.items())
            raise InvalidCheckpointError(
                f"{self.file}: the {what} disagree ({listed}); {fix}",
                where=f"{self.file}:{next(iter(values))}",
            )
        return next(iter(values.items()), None)

    def signal(self, key: str, value: Any, tier: int, vote: str | None, note: str = "") -> Signal:
        """The evidence that config.json's ``key`` holds ``value``."""
        return Signal(f"{CONFIG}:{key}", jsonable(value), tier, vote, note)


__all__ = ["ConfigView", "Sections"]
