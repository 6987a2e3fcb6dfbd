"""Does ``module.qualname`` exist, with these parameter names? One entry of a contract, checked.

The sglang glue keeps the entries (every sglang class, method and signature it relies on,
``sglang_plugin.contract``); this checks any entry the same way and names what is wrong, so a library
that moved or renamed something is reported by name. Generic: nothing here names sglang.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass


@dataclass(frozen=True)
class HookStatus:
    """One contract entry checked against what is installed."""

    module: str
    qualname: str
    params: tuple[str, ...] | None
    ok: bool
    problem: str = ""

    @property
    def target(self) -> str:
        return f"{self.module}.{self.qualname}"

    def to_json(self) -> dict[str, object]:
        return {
            "hook": self.target,
            "params": None if self.params is None else list(self.params),
            "ok": self.ok,
            "problem": self.problem,
        }


Entry = tuple[str, str, "tuple[str, ...] | None"]
"""``(module, qualname, parameter names)``; ``None``: existence only, ``()``: a signature, any parameters."""


def parse_entries(text: str) -> list[Entry]:
    """Entries written one per line, under the module they are in::

        package.module:
            Class.method(a, b)    # those parameter names
            function()            # callable with an inspectable signature
            Class.ATTRIBUTE       # exists

    ``#`` starts a comment; a line ending with ``:`` names the module of the lines below it; a
    parameter list may go on over the next lines.
    """
    found: list[Entry] = []
    module, line = None, ""
    for raw in text.splitlines():
        line += " " + raw.split("#", 1)[0].strip() if line else raw.split("#", 1)[0].strip()
        if not line or line.count("(") > line.count(")"):
            continue
        if line.endswith(":"):
            module, line = line[:-1], ""
            continue
        if module is None:
            raise ValueError(f"contract entry {line!r} comes before any module line")
        name, paren, rest = line.partition("(")
        params = tuple(p.strip() for p in rest.rstrip(")").split(",") if p.strip()) if paren else None
        found.append((module, name.strip(), params))
        line = ""
    if line:
        raise ValueError(f"contract entry {line!r} is not closed")
    return found


def _resolve(module: str, qualname: str) -> object:
    obj: object = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def check_entry(module: str, qualname: str, params: tuple[str, ...] | None) -> HookStatus:
    """Check one entry: importable, present, and (when asked) with the expected parameter names."""
    try:
        obj = _resolve(module, qualname)
    except ImportError as err:
        return HookStatus(module, qualname, params, False, f"module does not import: {err}")
    except AttributeError:
        return HookStatus(module, qualname, params, False, "missing")
    if params is None:
        return HookStatus(module, qualname, params, True)
    try:
        sig = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        return HookStatus(module, qualname, params, False, f"no inspectable signature: {err}")
    missing = [p for p in params if p not in sig.parameters]
    if missing:
        return HookStatus(
            module, qualname, params, False, f"signature {sig} lacks parameter(s) {', '.join(missing)}"
        )
    return HookStatus(module, qualname, params, True)


def check_class_fields(module: str, qualname: str, names: tuple[str, ...]) -> list[HookStatus]:
    """Check that the class ``module.qualname`` has each of these fields (a dataclass's fields, else its
    attributes); one status per field, none when the class itself does not resolve."""
    try:
        cls = _resolve(module, qualname)
    except (ImportError, AttributeError):
        return []
    known = set(getattr(cls, "__dataclass_fields__", {})) or set(dir(cls))
    return [
        HookStatus(module, f"{qualname}.{name}", None, name in known, "" if name in known else "missing")
        for name in names
    ]


__all__ = ["Entry", "HookStatus", "check_entry", "check_class_fields", "parse_entries"]
