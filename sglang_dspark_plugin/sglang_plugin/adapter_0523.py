"""The adapter for sglang's declaration-based argument resolution (0.5.20 on: the ``arg_groups`` pipeline).

A plugin's ``handle_server_args`` receives a recording stand-in (``overrides._ForeignDefaults``) with
the record behind it; arguments are read through the resolving view and written as declarations, as
sglang's own handlers do. The rewrite runs as a resolution hook after ``handle_model_source_paths``
(the draft paths are resolved), its check after ``handle_other_validations``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ROUTE = "resolution_hooks"
RESOLUTION_STEP = "handle_model_source_paths"
CHECK_STEP = "handle_other_validations"

_OVERRIDES = "sglang.srt.arg_groups.overrides"
_HOOKS = "sglang.srt.arg_groups.resolution_hooks"
CONTRACT: list[tuple[str, str, tuple[str, ...] | None]] = [
    (_OVERRIDES, "_ForeignDefaults", None),
    (_OVERRIDES, "record_of", ("view",)),
    (_OVERRIDES, "resolving_view", ("server_args",)),
    (_OVERRIDES, "declare_resolution", ("server_args", "source")),
    (_HOOKS, "register_resolution_hook", ("name",)),
    (_HOOKS, "_HOOKS", None),
    (_HOOKS, "_OVERRIDABLE_HOOKS", None),
]
"""What this adapter relies on; checked by ``register()`` (``contract.full_contract``)."""


def unwrap_record(server_args: Any) -> Any:
    """The ``ServerArgs`` record behind the recording stand-in; anything else unchanged."""
    from sglang.srt.arg_groups.overrides import _ForeignDefaults, record_of

    if isinstance(server_args, _ForeignDefaults):
        return record_of(object.__getattribute__(server_args, "_cfg"))
    return server_args


def read_arg(server_args: Any, name: str) -> Any:
    """A server argument as resolved so far: the declarations over the raw input."""
    from sglang.srt.arg_groups.overrides import resolving_view

    return getattr(resolving_view(unwrap_record(server_args)), name)


def declare_args(server_args: Any, source: str, **fields: Any) -> None:
    """Declare server arguments, as sglang's handlers do, so every later reader sees them."""
    from sglang.srt.arg_groups.overrides import declare_resolution

    declare_resolution(unwrap_record(server_args), source, **fields)


def user_value(server_args: Any, name: str) -> Any:
    """What the user passed for ``name`` (sglang's ``_raw_input``), or None."""
    raw = getattr(unwrap_record(server_args), "_raw_input", None)
    return raw.get(name) if isinstance(raw, dict) else None


def register_rewrite(rewrite: Callable[[Any], Any], check: Callable[[Any], None]) -> str:
    """Run ``rewrite`` right after sglang's ``handle_model_source_paths`` and ``check`` after its
    ``handle_other_validations`` (idempotent); returns the route's name."""
    from sglang.srt.arg_groups import resolution_hooks

    def resolution_step(server_args: Any, previous: Any) -> None:
        previous(server_args)
        rewrite(server_args)

    def check_step(server_args: Any, previous: Any) -> None:
        previous(server_args)
        check(server_args)

    for step, fn, then in ((RESOLUTION_STEP, resolution_step, rewrite), (CHECK_STEP, check_step, check)):
        registered = resolution_hooks._HOOKS.get(step, [])
        if not any(getattr(h, "dspark_runs", None) is then for h in registered):
            vars(fn)["dspark_runs"] = then  # what makes a second registration a no-op
            resolution_hooks.register_resolution_hook(step)(fn)
    return ROUTE


__all__ = ["ROUTE", "CONTRACT", "unwrap_record", "read_arg", "declare_args", "user_value", "register_rewrite"]
