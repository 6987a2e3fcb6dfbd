"""The plugin's AFTER hooks on sglang functions (``HOOKS``: the round, the dspark arm's Markov answer,
the ``req_to_token`` row headroom), registered by ``register()`` without importing the heavy modules
they sit in. A target that moved is not hooked; the workers' contract (``TARGET_CONTRACT``) names it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from ..serving.route import config_value
from ..util.contract_check import Entry, parse_entries
from ..util.import_hooks import when_imported
from ..util.logsafe import safe_logger
from .resolution import optional_arg, plan_of, published_server_args

logger = safe_logger(__name__)

HOOK_CONTRACT: list[Entry] = parse_entries(
    """
    sglang.srt.plugins.hook_registry:
        HookRegistry.register(target, hook, hook_type)
        HookRegistry._hooks  # register_hooks' idempotence
        HookRegistry._patched  # apply_own: only the plugin's own targets
        HookRegistry._apply_target(target, hooks)
        HookType.AFTER
        HookType.AROUND
    """
)
"""What registering the hooks relies on (``sglang.srt.plugins`` has imported it): checked by
``register()``."""


def register_hooks() -> None:
    """Register the plugin's hooks (idempotent); imports no sglang worker or model module. The parse
    hook must be in place before the draft worker exists: the target's model runner already parses
    the draft config (and refuses one without a Markov head when the algorithm is DSpark)."""
    for module_name, qualname, _params, hook in HOOKS:
        if module_name in sys.modules:
            _register_loaded(module_name, qualname, hook)  # load_plugins() applies it
        else:
            when_imported(module_name, functools.partial(_on_import, module_name, qualname, hook))


def register_once(target: str, hook: Callable[..., Any], kind: str, runs: Any = None) -> bool:
    """``HookRegistry.register(target, hook, HookType[kind])`` unless ``hook``, or a hook that runs
    ``runs``, is registered there already (what makes a second ``register()`` a no-op)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    key = hook if runs is None else runs
    if any(getattr(h, "dspark_runs", h) is key for _, h, _ in HookRegistry._hooks.get(target, [])):
        return False
    if runs is not None:
        vars(hook)["dspark_runs"] = runs
    HookRegistry.register(target, hook, HookType[kind])
    return True


def _register_loaded(module_name: str, qualname: str, hook: Callable[..., Any]) -> bool:
    """``register_once`` an AFTER hook, when the target exists in its (already loaded) module."""
    obj: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    # a target that moved in this sglang is not hooked: the workers' contract names it
    return obj is not None and register_once(f"{module_name}.{qualname}", hook, "AFTER")


def _on_import(module_name: str, qualname: str, hook: Callable[..., Any], module: Any) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry

    if _register_loaded(module_name, qualname, hook):
        apply_own(HookRegistry, f"{module_name}.{qualname}")


def apply_own(registry: Any, target: str) -> None:
    """Patch this one target now (every hook registered on it, ours among them), as
    ``HookRegistry.apply_hooks`` would; never the other plugins' targets, which sglang applies itself
    once their plugins have registered (this can run inside another plugin's ``register()``)."""
    if target in registry._patched:
        return
    registry._apply_target(target, registry._hooks[target])
    registry._patched.add(target)


def round_after_result(
    committed: Any, processor: Any, result: Any, batch: Any, *args: Any, **kwargs: Any
) -> None:
    """AFTER hook: once sglang resolved a round, hand a plugin worker the round (its counts, which
    requests it counts, their context lengths, the probe's snapshot). No device work; returns ``None``,
    so sglang's own result stands."""
    worker = getattr(processor, "model_worker", None)
    # looked up on the class: sglang's DSPARK worker forwards unknown instance attributes to its target
    round_done = getattr(type(worker), "dspark_round", None)
    if round_done is not None:
        round_done(worker, committed, result, batch)


def served_markov_after_parse(result: Any, *args: Any, **kwargs: Any) -> Any:
    """AFTER hook on ``parse_dspark_draft_config``: the Markov head the plan serves for this config
    (``ServePlan.parse_head``), else ``None`` (sglang's result stands). Cheap for every other config:
    only a process whose published server args carry a plan looks further."""
    config = kwargs.get("draft_hf_config", args[0] if args else None)
    plan = plan_of(published_server_args())
    head = None if plan is None else plan.parse_head(config_value(config, "_name_or_path"))
    if head is None:
        return None
    from . import draft_model

    return draft_model.with_markov_head(result, head)


def row_headroom_after(extra: Any, *args: Any, **kwargs: Any) -> Any:
    """AFTER hook on ``get_req_to_token_extra_context_len`` (0.5.23: no argument; 0.5.17: the server
    args): a ``DSPARK_HARVEST`` launch's rows hold every decode round's reserve (``ServePlan.row_headroom``),
    so no request at its context limit writes past its row; ``None`` elsewhere (sglang's result stands)."""
    server_args = args[0] if args else kwargs.get("server_args", published_server_args())
    plan = plan_of(server_args)
    if plan is None or not isinstance(extra, int):
        return None
    page_size = int(optional_arg(server_args, "page_size") or 1)
    headroom, statement = plan.row_headroom(page_size, extra)
    logger.info("DSPARK_HARVEST: %s", statement)
    return headroom


_RESULT = "sglang.srt.managers.scheduler_components.batch_result_processor"  # one round
_PARSE = "sglang.srt.speculative.dspark_components.dspark_config"  # every Markov-rank refusal reads it
_ROW = "sglang.srt.mem_cache.allocation_sizing"  # the row width, where defined: sglang propagates it
HOOKS: tuple[tuple[str, str, tuple[str, ...], Callable[..., Any]], ...] = (
    (
        _RESULT,
        "SchedulerBatchResultProcessor._resolve_spec_v2_tokens",
        ("result", "batch"),
        round_after_result,
    ),
    (_PARSE, "parse_dspark_draft_config", ("draft_hf_config",), served_markov_after_parse),
    (_ROW, "get_req_to_token_extra_context_len", (), row_headroom_after),
)
"""Each AFTER hook: its module, target, the parameters the target must take, the hook."""
RESULT_HOOK_TARGET, PARSE_HOOK_TARGET, ROW_HOOK_TARGET = (f"{m}.{q}" for m, q, _, _ in HOOKS)
TARGET_CONTRACT: list[Entry] = [(m, q, params) for m, q, params, _ in HOOKS]
"""The hooks' targets, in heavy modules: part of the workers' contract (``workers.WORKER_CONTRACT``)."""
