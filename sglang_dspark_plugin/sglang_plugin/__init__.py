"""The sglang glue: the only sub-package that imports sglang; it translates what the plan decided.

``register`` is the entry point of the group ``sglang.srt.plugins`` (see pyproject.toml); sglang calls
it in every process that runs ``load_plugins()``. Importing this package does not import sglang.
Nothing here branches on the harvest, the arm, the layout or a release number; the branches that stay
read sglang's own shapes: the argument-pipeline adapter (``resolution.adapter``, chosen once by
feature, and 0.5.19's deferred resolution inside ``adapter_0517``), the features ``sglang_support``
hands the plan, sglang's algorithm name in ``builtin.worker_after_create`` (only a DFLASH or DSPARK
worker is replaced) and the route's class in ``draft_model.draft_route`` (the plan's choice, as
sglang's class).
"""

from __future__ import annotations

from typing import Any

from ..releases import untested_warning
from ..serving import ALGORITHM
from ..serving.refusal import SGLANG_FIX
from ..util.logsafe import safe_logger
from . import builtin, contract, hooks
from .resolution import require_plan

logger = safe_logger("sglang_dspark_plugin.sglang_plugin")


def is_registered() -> bool:
    """Whether ``DSPARK_HARVEST`` resolves through sglang's ``SpeculativeAlgorithm.from_string``."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    try:
        SpeculativeAlgorithm.from_string(ALGORITHM)
    except ValueError:
        return False
    return True


def registered_class() -> str:
    """Register the way sglang does (``load_plugins()``), then the class its registry holds for
    ``DSPARK_HARVEST`` (``from_string``; raises when it holds none): what ``doctor`` reports."""
    from sglang.srt.plugins import load_plugins
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    load_plugins()
    algo = SpeculativeAlgorithm.from_string(ALGORITHM)
    return f"{type(algo).__module__}.{type(algo).__qualname__}"


def _factory(server_args: Any) -> type:
    """The factory of the registered algorithm: only reached where the early rewrite did not run, so
    it refuses (``resolution.require_plan``) instead of serving through a second route."""
    require_plan(server_args, f"the registered {ALGORITHM} worker factory")
    raise AssertionError("unreachable: a launch with a plan is served as its builtin")


def register() -> bool:
    """Register ``DSPARK_HARVEST`` (idempotent, never raises; returns whether it is registered). Imports no
    sglang worker or model module; on a contract mismatch registers nothing and logs ONE error line."""
    try:
        version = contract.sglang_version()
        if is_registered():
            return True
        missing = [s for s in contract.check_contract(workers=False) if not s.ok]
        if missing:
            logger.error("%s", contract.mismatch_message(missing, "NOT registered"))
            return False
        warning = untested_warning(str(version), contract.SUPPORTED_SGLANG)
        if warning is not None:
            logger.warning("%s", warning)
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        from .spec_algo import DsparkHarvestSpecAlgo

        # The hooks first: if one fails, nothing is registered (they are inert for other algorithms).
        hooks.register_hooks()  # applied by load_plugins(), before the scheduler builds the target
        builtin.register_early_hooks()  # DSPARK_HARVEST resolves to, and is served as, DFLASH / DSPARK
        SpeculativeAlgorithm.register(ALGORITHM, supports_overlap=True, spec_class=DsparkHarvestSpecAlgo)(
            _factory
        )
        return True
    except Exception as err:  # noqa: BLE001 - a plugin must never take sglang down
        logger.error(
            "sglang-dspark-plugin: %s NOT registered: %r; other speculative algorithms are unaffected; %s.",
            ALGORITHM,
            err,
            SGLANG_FIX,
        )
        return False


__all__ = ["register", "is_registered", "registered_class", "ALGORITHM"]
