"""Serve ``DSPARK_HARVEST`` AS the builtin it resolves to: DFLASH (mask-fill) or DSPARK (shifted).

sglang keys many checks and features on the algorithm's name. So at the START of argument resolution
the plugin makes the serving plan (``serving.make_plan``: every refusal the plugin owns, once) and
declares the builtin and the geometry it names; from there sglang's own handler, checks and features
run in their normal order, exactly as for the builtin. The plan rides on the server args
(``resolution.PLAN_ATTR``) into every scheduler process, where ``SpeculativeAlgorithm.create_worker``
returns the plugin's worker subclass (its telemetry and rank agreement) in place of the builtin worker
it subclasses. A plain DFLASH/DSPARK launch carries no plan and keeps sglang's worker.

Where the early hook runs: sglang 0.5.20 on, the resolution-hook API (``register_resolution_hook``) on
the ``handle_model_source_paths`` step, plus a check on ``handle_other_validations`` (after
``handle_speculative_decoding``) that the geometry survived; before 0.5.20, a ``HookRegistry`` AROUND
hook on ``ServerArgs.__post_init__`` (``load_plugins()`` runs before any ``ServerArgs`` is built by the
launcher and the Engine), and on 0.5.19, whose ``__post_init__`` leaves the record raw for
``resolve_once``, the check AFTER ``resolve_once``. Where neither fires (a script that builds
``ServerArgs`` before ``load_plugins()``), the registered ``DSPARK_HARVEST`` algorithm refuses and says
how to launch.
"""

from __future__ import annotations

from typing import Any

from ..errors import GeometryError
from ..logsafe import safe_logger
from ..serving import ALGORITHM, make_plan
from .contract import require_worker_contract
from .resolution import (
    PLAN_ATTR,
    announce,
    asked_for_plugin,
    declare_args,
    launch_request,
    plan_of,
    read_arg,
    require_plan,
    sglang_support,
    unwrap_record,
)

logger = safe_logger("sglang_dspark_plugin.sglang_plugin")

SOURCE = f"{ALGORITHM} (resolved as builtin)"

RESOLUTION_STEP = "handle_model_source_paths"
CHECK_STEP = "handle_other_validations"
POST_INIT_TARGET = "sglang.srt.server_args.ServerArgs.__post_init__"
RESOLVE_ONCE_TARGET = "sglang.srt.server_args.ServerArgs.resolve_once"
CREATE_WORKER_TARGET = "sglang.srt.speculative.spec_info.SpeculativeAlgorithm.create_worker"


def wants_plugin(server_args: Any) -> bool:
    """Whether these server args ask for ``DSPARK_HARVEST`` now (before the rewrite)."""
    return str(read_arg(server_args, "speculative_algorithm") or "").upper() == ALGORITHM


def rewrite_to_builtin(server_args: Any) -> Any:
    """Make the plan and declare the builtin it serves as; ``None`` for any other algorithm."""
    record = unwrap_record(server_args)
    if not wants_plugin(record):
        return None
    plan = make_plan(launch_request(record), sglang_support())
    require_worker_contract()  # a sglang that lacks what the workers need stops here, once
    override_steps_and_topk(record, plan.builtin)
    # The builtin reads the block size from the checkpoint itself and derives steps and topk; the plan
    # names the builtin, the verify window its harvest needs and (mask-fill DSpark) DSPARK's gamma.
    declare_args(record, SOURCE, **plan.declared_args)
    setattr(record, PLAN_ATTR, plan)  # 0.5.23 seals fields but allows private names
    announce(plan)
    logger.info(
        "%s: served as sglang's builtin %s (sglang reports the algorithm as %s from here on)",
        ALGORITHM,
        plan.layout.describe(),
        plan.builtin,
    )
    return plan


def override_steps_and_topk(record: Any, builtin: str) -> None:
    """Warn about steps/topk flags other than 1 (the builtin handlers override them to 1 too)."""
    for field, flag in (
        ("speculative_num_steps", "--speculative-num-steps"),
        ("speculative_eagle_topk", "--speculative-eagle-topk"),
    ):
        value = read_arg(record, field)
        if value is not None and str(value).strip() != "1":
            logger.warning(
                "%s (like %s) only supports %s 1; overriding %s to 1.", ALGORITHM, builtin, flag, value
            )


def check_rewritten(server_args: Any) -> None:
    """After sglang's own speculative handling: the builtin kept the plan's geometry."""
    plan = plan_of(server_args)
    if plan is None:
        return
    record = unwrap_record(server_args)
    got = {
        "speculative_algorithm": str(read_arg(record, "speculative_algorithm") or "").upper(),
        "speculative_num_draft_tokens": read_arg(record, "speculative_num_draft_tokens"),
    }
    changed = {k: (got[k], v) for k, v in plan.declared_args.items() if k in got and got[k] != v}
    if changed:
        raise GeometryError(
            f"{ALGORITHM}: sglang's {plan.builtin} handling changed what the {plan.harvest.name()} "
            f"harvest of {plan.cfg.path} needs: "
            + ", ".join(f"{k} = {a!r}, needs {b!r}" for k, (a, b) in changed.items())
            + "; this sglang version is not supported (run `dspark-harvest doctor`).",
            where=", ".join(changed),
        )


# ---------------------------------------------------------------- the hooks sglang calls


def resolution_step(server_args: Any, previous: Any) -> None:
    """0.5.23 ``handle_model_source_paths``: sglang's step (draft paths resolved), then the rewrite."""
    previous(server_args)
    rewrite_to_builtin(server_args)


def check_step(server_args: Any, previous: Any) -> None:
    """0.5.23 ``handle_other_validations`` (after ``handle_speculative_decoding``): geometry intact."""
    previous(server_args)
    check_rewritten(server_args)


def post_init_around(original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    """0.5.17 ``ServerArgs.__post_init__``: the rewrite first, then sglang's whole resolution."""
    rewrite_to_builtin(self)
    result = original(self, *args, **kwargs)
    check_rewritten(self)
    return result


def resolve_once_after(result: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER ``ServerArgs.resolve_once`` where resolution left construction but the resolution-hook API
    is not there yet (sglang 0.5.19): ``__post_init__`` made the plan and declared the builtin, the
    pipeline ran later; the builtin kept the plan's geometry."""
    check_rewritten(self)


def worker_after_create(result: Any, algorithm: Any, server_args: Any, *args: Any, **kwargs: Any) -> Any:
    """AFTER ``SpeculativeAlgorithm.create_worker``: the plugin's worker where the plan says so, and only
    in place of the builtin worker class it subclasses (``None`` keeps sglang's own result)."""
    name = getattr(algorithm, "name", None)
    if name not in ("DFLASH", "DSPARK"):
        return None  # not a builtin the plugin resolves to
    plan = plan_of(server_args)
    if plan is None:
        if asked_for_plugin(server_args):
            require_plan(server_args, f"sglang's {name} worker factory")
        return None  # a plain DFLASH/DSPARK launch: sglang's own worker
    if plan.builtin != name:
        raise GeometryError(
            f"{ALGORITHM}: sglang is building a {name} worker but the plan of this launch serves "
            f"{plan.cfg.path} as {plan.builtin} (the {plan.harvest.name()} harvest); refusing rather than "
            "serving the wrong convention. Pass sglang's resolved server args on unchanged.",
            where="speculative_algorithm",
        )
    from .workers import parent_worker_of, worker_class_for

    cls = worker_class_for(plan.harvest, plan.builtin)
    if result is not parent_worker_of(cls):
        logger.warning(
            "%s: sglang chose %r for %s (a platform's own worker, not %s); serving with it as the "
            "builtin would, without the plugin's per-round telemetry.",
            ALGORITHM,
            result,
            name,
            parent_worker_of(cls).__name__,
        )
        return None
    return cls


def register_early_hooks() -> str:
    """Register the rewrite hooks for this sglang version (idempotent); returns which route is used."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    if not any(h is worker_after_create for _, h, _ in HookRegistry._hooks.get(CREATE_WORKER_TARGET, [])):
        HookRegistry.register(CREATE_WORKER_TARGET, worker_after_create, HookType.AFTER)
    try:
        from sglang.srt.arg_groups import resolution_hooks
    except ImportError:  # before 0.5.20: no resolution-hook API
        from sglang.srt.server_args import ServerArgs

        if not any(h is post_init_around for _, h, _ in HookRegistry._hooks.get(POST_INIT_TARGET, [])):
            HookRegistry.register(POST_INIT_TARGET, post_init_around, HookType.AROUND)
        if not hasattr(ServerArgs, "resolve_once"):
            return "post_init"  # 0.5.17, 0.5.18: __post_init__ resolves
        # 0.5.19: construction leaves the record raw (server_args.py:3663); resolve_once runs the pipeline
        if not any(h is resolve_once_after for _, h, _ in HookRegistry._hooks.get(RESOLVE_ONCE_TARGET, [])):
            HookRegistry.register(RESOLVE_ONCE_TARGET, resolve_once_after, HookType.AFTER)
        return "post_init+resolve_once"
    for step, fn in ((RESOLUTION_STEP, resolution_step), (CHECK_STEP, check_step)):
        if fn not in resolution_hooks._HOOKS.get(step, []):
            resolution_hooks.register_resolution_hook(step)(fn)
    return "resolution_hooks"


__all__ = [
    "SOURCE",
    "rewrite_to_builtin",
    "override_steps_and_topk",
    "check_rewritten",
    "register_early_hooks",
    "resolve_once_after",
    "worker_after_create",
]
