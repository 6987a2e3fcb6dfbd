"""Between sglang's server arguments and the serving plan (``..serving``): the arguments to the plan's
request (``launch_request``), what this sglang offers (``sglang_support``), the plan back (``plan_of``,
``require_plan``; it rides on the record as ``PLAN_ATTR``). The argument pipeline's version-specific
part is one adapter module, chosen by feature (``adapter``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ..serving import ALGORITHM, LaunchRequest, ServePlan, SglangSupport
from ..serving.layout import BUILTINS
from ..serving.refusal import no_plan
from ..serving.request import REQUEST_ARGS
from ..serving.servability import layout_probe_configs

PLAN_ATTR = "_dspark_harvest_plan"
"""Private attribute on sglang's server args: the ``ServePlan`` of this launch."""


@functools.cache
def adapter() -> ModuleType:
    """The adapter of the installed sglang, chosen once (at ``register()``): ``adapter_0523`` where it
    has the resolution-hook API (``arg_groups.resolution_hooks``), else ``adapter_0517``."""
    try:
        found = importlib.util.find_spec("sglang.srt.arg_groups.resolution_hooks") is not None
    except ModuleNotFoundError:  # no sglang.srt.arg_groups at all
        found = False
    return importlib.import_module(f"{__package__}.adapter_{'0523' if found else '0517'}")


def unwrap_record(server_args: Any) -> Any:
    """The ``ServerArgs`` record behind a stand-in (0.5.23); anything else unchanged."""
    return adapter().unwrap_record(server_args)


def read_arg(server_args: Any, name: str) -> Any:
    """A server argument as resolved so far (0.5.23: declarations over raw input; 0.5.17: the field)."""
    return adapter().read_arg(server_args, name)


def optional_arg(server_args: Any, name: str) -> Any:
    """``read_arg``, or None for a stand-in that lacks the field (sglang's ServerArgs always has it)."""
    try:
        return read_arg(server_args, name)
    except AttributeError:
        return None


def launch_request(server_args: Any, environ: Mapping[str, str] | None = None) -> LaunchRequest:
    """The typed snapshot of this launch: its server arguments and the settings as set now."""
    args = {name: optional_arg(server_args, name) for name in REQUEST_ARGS}
    return LaunchRequest.of(args, os.environ if environ is None else environ)


def sglang_support() -> SglangSupport:
    """What this sglang can serve (``SglangSupport``), detected from its code."""
    import sglang
    from sglang.srt.arg_groups import speculative_hook
    from sglang.srt.speculative.dspark_components import dspark_config

    return SglangSupport(
        str(sglang.__version__),
        hasattr(dspark_config, "get_dspark_sample_from_anchor"),
        disaggregation_builtins(),
        hasattr(speculative_hook, "_target_checkpoint_dspark_subfolder"),  # a draft in the target's dspark/
        dflash_reads_layout(),
    )


def dflash_reads_layout() -> bool:
    """Whether DFLASH's draft-config parser reads the anchor-first keys itself: it answers a config
    declaring them otherwise than the same config without them (honours them, sglang PR 40203), or
    refuses it (PR 40181). No released version up to 0.5.23 does."""
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    plain, declared = layout_probe_configs()
    try:
        return bool(
            parse_dflash_draft_config(draft_hf_config=declared)
            != parse_dflash_draft_config(draft_hf_config=plain)
        )
    except ValueError:
        return True


def disaggregation_builtins() -> tuple[str, ...]:
    """The DFlash-family builtins whose prefill->decode draft state this sglang builds: a
    ``speculative/<name>_disaggregation.py`` that ``build_disagg_draft_input`` dispatches to (0.5.18
    and 0.5.19 ship DFLASH's module but do not dispatch to it; 0.5.20 does)."""
    import inspect

    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    try:
        dispatch: str | None = inspect.getsource(SpeculativeAlgorithm.build_disagg_draft_input)
    except (OSError, TypeError):  # no source shipped: the modules are all there is to read
        dispatch = None
    return tuple(
        name
        for name in BUILTINS
        if importlib.util.find_spec(f"sglang.srt.speculative.{name.lower()}_disaggregation") is not None
        and (dispatch is None or f"{name.lower()}_disaggregation" in dispatch)
    )


def plan_of(server_args: Any) -> ServePlan | None:
    """The plan these server args carry, or None (a plain DFLASH/DSPARK launch has none)."""
    plan = getattr(unwrap_record(server_args), PLAN_ATTR, None)
    return plan if isinstance(plan, ServePlan) else None


def asked_for_plugin(server_args: Any) -> bool:
    """Whether the user asked for ``DSPARK_HARVEST``: the current algorithm, or (0.5.23) the raw input
    sglang keeps of what the user passed."""
    current = str(optional_arg(server_args, "speculative_algorithm") or "").upper()
    passed = str(adapter().user_value(server_args, "speculative_algorithm") or "").upper()
    return ALGORITHM in (current, passed)


def require_plan(server_args: Any, where: str) -> ServePlan:
    """The plan, or a refusal (``refusal.no_plan``): a ``DSPARK_HARVEST`` process never re-derives one."""
    plan = plan_of(server_args)
    if plan is None:
        raise no_plan(where)
    return plan


def published_server_args() -> Any | None:
    """The server args sglang published in this process (scheduler: before ``Scheduler(...)``), or None."""
    from sglang.srt.runtime_context import get_context

    try:
        return get_context().server_args
    except ValueError:  # "Global server args is not set yet!"
        return None
