"""Serve ``DSPARK_HARVEST`` AS the builtin it resolves to. sglang keys many checks and features on the
algorithm's name, so at the START of argument resolution the plugin makes the plan and declares the
builtin and the geometry it names (where: the version adapter's business, ``resolution.adapter``);
sglang's own handler, checks and features then run as for the builtin. In every scheduler process
``create_worker`` returns the plugin's worker in place of the builtin's; a plain launch keeps sglang's.
"""

from __future__ import annotations

from typing import Any

from ..serving import ALGORITHM, make_plan
from ..serving.announce import announce
from ..serving.layout import BUILTINS
from ..serving.stages import check_builtin, check_kept
from ..util.logsafe import safe_logger
from .contract import require_worker_contract
from .hooks import register_once
from .resolution import (
    PLAN_ATTR,
    adapter,
    asked_for_plugin,
    launch_request,
    plan_of,
    read_arg,
    require_plan,
    sglang_support,
    unwrap_record,
)

logger = safe_logger("sglang_dspark_plugin.sglang_plugin")

SOURCE = f"{ALGORITHM} (resolved as builtin)"

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
    # The builtin reads the block size from the checkpoint itself and derives steps and topk; the plan
    # names the builtin, the verify window its harvest needs and (mask-fill DSpark) DSPARK's gamma.
    adapter().declare_args(record, SOURCE, **plan.declared_args)
    setattr(record, PLAN_ATTR, plan)  # 0.5.23 seals fields but allows private names
    announce(plan, logger)
    served = "%s: served as sglang's builtin %s (sglang reports the algorithm as %s from here on)"
    logger.info(served, ALGORITHM, plan.layout.describe(), plan.builtin)
    return plan


def check_rewritten(server_args: Any) -> None:
    """After sglang's own speculative handling: the builtin kept the plan's geometry."""
    plan = plan_of(server_args)
    if plan is not None:
        record = unwrap_record(server_args)
        algorithm = str(read_arg(record, "speculative_algorithm") or "").upper()
        tokens = read_arg(record, "speculative_num_draft_tokens")
        check_kept(plan, {"speculative_algorithm": algorithm, "speculative_num_draft_tokens": tokens})


def worker_after_create(result: Any, algorithm: Any, server_args: Any, *args: Any, **kwargs: Any) -> Any:
    """AFTER ``SpeculativeAlgorithm.create_worker``: the plugin's worker where the plan says so, and only
    in place of the builtin worker class it subclasses (``None`` keeps sglang's own result)."""
    name = getattr(algorithm, "name", None)
    if name not in BUILTINS:
        return None  # not a builtin the plugin resolves to
    plan = plan_of(server_args)
    if plan is None:
        if asked_for_plugin(server_args):
            require_plan(server_args, f"sglang's {name} worker factory")
        return None  # a plain DFLASH/DSPARK launch: sglang's own worker
    check_builtin(plan, name)
    from .workers import parent_worker_of, worker_class_for

    cls = worker_class_for(plan.layout)
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
    """Register the rewrite (this sglang's adapter) and the worker hook (idempotent); returns the route."""
    register_once(CREATE_WORKER_TARGET, worker_after_create, "AFTER")
    route: str = adapter().register_rewrite(rewrite_to_builtin, check_rewritten)
    return route
