"""The adapter for sglang's in-place argument resolution (0.5.17's ``ServerArgs.__post_init__``).

A plugin's ``handle_server_args`` receives the record itself; sglang's handlers assign fields in place,
and the plugin does the same (``declare_args``). There is no resolution-hook API: the rewrite wraps
``ServerArgs.__post_init__`` with a ``HookRegistry`` AROUND hook (``load_plugins()`` runs before the
launcher or the Engine builds any ``ServerArgs``), then sglang's whole resolution runs, then the
check. sglang keeps no copy of what the user passed (``user_value`` is None).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ROUTE = "post_init"
POST_INIT_TARGET = "sglang.srt.server_args.ServerArgs.__post_init__"
CONTRACT: list[tuple[str, str, tuple[str, ...] | None]] = [
    ("sglang.srt.server_args", "ServerArgs.__post_init__", None),
]
"""What this adapter relies on; checked by ``register()`` (``contract.full_contract``)."""


def unwrap_record(server_args: Any) -> Any:
    """The record itself (this sglang hands plugins no stand-in)."""
    return server_args


def read_arg(server_args: Any, name: str) -> Any:
    """A server argument as resolved so far: the field."""
    return getattr(server_args, name)


def declare_args(server_args: Any, source: str, **fields: Any) -> None:
    """Set server arguments in place, as this sglang's handlers do (``source`` is not recorded)."""
    for name, value in fields.items():
        setattr(server_args, name, value)


def user_value(server_args: Any, name: str) -> Any:
    """None: this sglang keeps no copy of what the user passed."""
    return None


def register_rewrite(rewrite: Callable[[Any], Any], check: Callable[[Any], None]) -> str:
    """Run ``rewrite`` before ``ServerArgs.__post_init__`` and ``check`` after it (idempotent);
    returns the route's name."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    def post_init_around(original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
        rewrite(self)
        result = original(self, *args, **kwargs)
        check(self)
        return result

    registered = HookRegistry._hooks.get(POST_INIT_TARGET, [])
    if not any(getattr(h, "dspark_runs", None) is rewrite for _, h, _ in registered):
        vars(post_init_around)["dspark_runs"] = rewrite  # what makes a second registration a no-op
        HookRegistry.register(POST_INIT_TARGET, post_init_around, HookType.AROUND)
    return ROUTE


__all__ = ["ROUTE", "CONTRACT", "unwrap_record", "read_arg", "declare_args", "user_value", "register_rewrite"]
