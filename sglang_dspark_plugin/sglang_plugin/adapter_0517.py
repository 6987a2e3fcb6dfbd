"""The adapter for sglang's in-place argument resolution (``ServerArgs.__post_init__``: 0.5.17 to 0.5.19).

Handlers assign fields in place (0.5.17, 0.5.18) or declare them (0.5.19), and so does the plugin
(``declare_args``). The rewrite wraps ``__post_init__`` with a ``HookRegistry`` AROUND hook, then the
check runs after it, or AFTER ``resolve_once`` on 0.5.19, whose ``__post_init__`` leaves the record raw
(``server_args.py:3663``; the pipeline keeps the declarations made before it, ``pipeline.py:57-61``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ROUTE = "post_init"
POST_INIT_TARGET = "sglang.srt.server_args.ServerArgs.__post_init__"
RESOLVE_ONCE_TARGET = "sglang.srt.server_args.ServerArgs.resolve_once"
CONTRACT: list[tuple[str, str, tuple[str, ...] | None]] = [
    ("sglang.srt.server_args", "ServerArgs.__post_init__", None),
]
"""What this adapter relies on; checked by ``register()`` (``contract.full_contract``)."""


def unwrap_record(server_args: Any) -> Any:
    """The record itself (this sglang hands plugins no stand-in)."""
    return server_args


def read_arg(server_args: Any, name: str) -> Any:
    """A server argument as resolved so far: the field, or (0.5.19, which declares its results) the
    declarations over the raw input."""
    try:
        from sglang.srt.arg_groups.overrides import resolving_view
    except ImportError:  # 0.5.17, 0.5.18: handlers assign the fields
        return getattr(server_args, name)
    return getattr(resolving_view(server_args), name)


def declare_args(server_args: Any, source: str, **fields: Any) -> None:
    """Set server arguments the way this sglang's handlers do: in place (0.5.17, 0.5.18; ``source`` is
    not recorded), or as declarations (0.5.19)."""
    try:
        from sglang.srt.arg_groups.overrides import declare_resolution
    except ImportError:
        for name, value in fields.items():
            setattr(server_args, name, value)
        return
    declare_resolution(server_args, source, **fields)


def user_value(server_args: Any, name: str) -> Any:
    """What the user passed for ``name`` where sglang keeps it (0.5.19's ``_raw_input``), else None."""
    raw = getattr(server_args, "_raw_input", None)
    return raw.get(name) if isinstance(raw, dict) else None


def register_rewrite(rewrite: Callable[[Any], Any], check: Callable[[Any], None]) -> str:
    """Run ``rewrite`` before ``ServerArgs.__post_init__`` and ``check`` after it, or after
    ``resolve_once`` where that runs the pipeline (0.5.19); idempotent; returns the route's name."""
    from sglang.srt.server_args import ServerArgs

    from .hooks import register_once

    deferred = hasattr(ServerArgs, "resolve_once")  # 0.5.19: construction leaves the record raw

    def post_init_around(original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
        rewrite(self)
        result = original(self, *args, **kwargs)
        if not deferred:
            check(self)
        return result

    def resolve_once_after(result: Any, self: Any, *args: Any, **kwargs: Any) -> None:
        check(self)

    register_once(POST_INIT_TARGET, post_init_around, "AROUND", runs=rewrite)
    if not deferred:
        return ROUTE
    register_once(RESOLVE_ONCE_TARGET, resolve_once_after, "AFTER", runs=check)
    return f"{ROUTE}+resolve_once"


__all__ = ["ROUTE", "CONTRACT", "unwrap_record", "read_arg", "declare_args", "user_value", "register_rewrite"]
