"""A routed ``__init__(self, *args, **kwargs)`` that keeps its parent's signature (generic).

A subclass that must run something before its parent's ``__init__`` (with one of its arguments) and
then call it with the same arguments declares ``*args, **kwargs``; ``signature_of`` gives it the
parent's signature back (what ``inspect.signature`` reports, and what a caller's arguments must bind
to), and ``bound_argument`` reads one argument of a call, positional or keyword.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

_Init = TypeVar("_Init", bound=Callable[..., None])


def signature_of(parent: Callable[..., Any]) -> Callable[[_Init], _Init]:
    """Give a routed ``__init__`` the signature of ``parent``."""
    signature = inspect.signature(parent)

    def sign(init: _Init) -> _Init:
        vars(init)["__signature__"] = signature  # read by inspect.signature
        return init

    return sign


def bound_argument(obj: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Argument ``name`` of a call to ``type(obj).__init__`` with ``args`` and ``kwargs``; a call its
    signature does not bind raises ``TypeError`` before anything starts."""
    bound = inspect.signature(type(obj).__init__).bind(obj, *args, **kwargs)
    return bound.arguments[name]


__all__ = ["signature_of", "bound_argument"]
