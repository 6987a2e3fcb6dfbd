"""The plugin's hooks on sglang functions, registered by ``register()`` without importing the heavy
modules they sit in: through sglang's ``HookRegistry`` when the module is loaded already, else the
moment it is first imported (a process that never imports it pays nothing).

* the plugin's per-round work (the counts, the live-request mask, the context lengths and the live
  offset probe), AFTER ``SchedulerBatchResultProcessor._resolve_spec_v2_tokens``;
* the dspark arm's Markov answer, AFTER ``parse_dspark_draft_config`` (``draft_model``).

A target that moved is not hooked; the workers' contract (``TARGET_CONTRACT``) names it when a
``DSPARK_HARVEST`` server starts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..serving.bundled import same_path
from ..util.import_hooks import when_imported
from .resolution import plan_of, published_server_args

_PARSE_MODULE = "sglang.srt.speculative.dspark_components.dspark_config"
PARSE_HOOK_TARGET = f"{_PARSE_MODULE}.parse_dspark_draft_config"
"""sglang's DSpark draft-config parser; every Markov-rank refusal reads its result."""

_RESULT_MODULE = "sglang.srt.managers.scheduler_components.batch_result_processor"
_RESULT_QUALNAME = "SchedulerBatchResultProcessor._resolve_spec_v2_tokens"
RESULT_HOOK_TARGET = f"{_RESULT_MODULE}.{_RESULT_QUALNAME}"
"""The scheduler's host-side processing of one verify round; it calls ``on_verify_complete_cpu``."""

_REGISTRY = "sglang.srt.plugins.hook_registry"

HOOK_CONTRACT: list[tuple[str, str, tuple[str, ...] | None]] = [
    (_REGISTRY, "HookRegistry.register", ("target", "hook", "hook_type")),
    (_REGISTRY, "HookRegistry._hooks", None),  # register_hooks' idempotence
    (_REGISTRY, "HookRegistry._patched", None),  # apply_own: only the plugin's own targets
    (_REGISTRY, "HookRegistry._apply_target", ("target", "hooks")),
    (_REGISTRY, "HookType.AFTER", None),
    (_REGISTRY, "HookType.AROUND", None),
]
"""What registering the hooks relies on (``sglang.srt.plugins`` has imported it): checked by
``register()``."""

TARGET_CONTRACT: list[tuple[str, str, tuple[str, ...] | None]] = [
    (_RESULT_MODULE, _RESULT_QUALNAME, ("result", "batch")),
    (_PARSE_MODULE, "parse_dspark_draft_config", ("draft_hf_config",)),
]
"""The hooks' targets, in heavy modules: part of the workers' contract (checked when a
``DSPARK_HARVEST`` server starts, and by ``dspark-harvest doctor``)."""


def register_hooks() -> None:
    """Register the plugin's hooks (idempotent); imports no sglang worker or model module.

    * the live-request mask: with the overlap scheduler a request that finished in round k is still in
      the batch of round k+1, whose result sglang does not count for it (``spec_verify_ct``); the
      plugin's telemetry must not count it either;
    * the live offset probe: after sglang resolved the round, the worker scores the drafts of its
      output rows against what the requests commit (``LiveProbe``; host lists only, no device work);
    * the dspark arm's parse hook: the target's model runner already refuses a draft without a Markov
      head when the algorithm is DSpark, before the draft worker exists.
    """
    from sglang.srt.plugins.hook_registry import HookType

    for module_name, qualname, hook, kind in (
        (_RESULT_MODULE, _RESULT_QUALNAME, round_after_result, HookType.AFTER),
        (_PARSE_MODULE, "parse_dspark_draft_config", served_markov_after_parse, HookType.AFTER),
    ):
        if module_name in sys.modules:
            _register(module_name, qualname, hook, kind)  # load_plugins() applies it
        else:
            when_imported(module_name, _register_and_apply(module_name, qualname, hook, kind))


def _register(module_name: str, qualname: str, hook: Callable[..., Any], kind: Any) -> bool:
    """``HookRegistry.register`` once, when the target exists in its (already loaded) module."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    target = f"{module_name}.{qualname}"
    if any(h is hook for _, h, _ in HookRegistry._hooks.get(target, [])):
        return False
    obj: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is None:
        return False  # moved in this sglang: the workers' contract names it
    HookRegistry.register(target, hook, kind)
    return True


def _register_and_apply(
    module_name: str, qualname: str, hook: Callable[..., Any], kind: Any
) -> Callable[[Any], None]:
    def on_import(module: Any) -> None:
        from sglang.srt.plugins.hook_registry import HookRegistry

        if _register(module_name, qualname, hook, kind):
            apply_own(HookRegistry, f"{module_name}.{qualname}")

    return on_import


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
    """AFTER hook on ``parse_dspark_draft_config``: the Markov head the plan serves, else ``None``.

    Cheap for every other config: only the served draft's own config (matched by path) in a process
    whose published server args carry a plan with DSPARK as its builtin is answered, with the plan's
    head (the zero rank-1 head for a shifted drafter without one; a mask-fill DSpark drafter's head
    even where only its tensors declare it, or ``dflash_config`` nests it).
    """
    config = kwargs.get("draft_hf_config", args[0] if args else None)
    name = config.get("_name_or_path") if isinstance(config, dict) else getattr(config, "_name_or_path", None)
    if not name:
        return None
    plan = plan_of(published_server_args())
    head = None if plan is None else plan.route.head
    if plan is None or head is None:
        return None
    if not (same_path(name, plan.draft) or same_path(name, plan.cfg.path)):
        return None
    from . import draft_model

    return draft_model.with_markov_head(result, head.parsed)
