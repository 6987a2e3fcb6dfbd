"""The DSPARK_HARVEST workers, one per arm (``WORKERS``): each takes the plan, checks that every TP rank
agrees, builds its sglang parent inside the plan's draft route and hands sglang's rounds to the plan's
round work (``serving.rounds.WorkerRounds``). docs/workers.md describes them against sglang's code.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2

from ..errors import GeometryError
from ..serving import ServePlan
from ..serving.layout import MASK_FILL, MASK_FILL_DSPARK, SHIFTED, Arm
from ..serving.placement import AttentionRanks
from ..serving.rank_agreement import check_rank_agreement, plan_agreement_values
from ..serving.rounds import WorkerRounds
from ..serving.stages import check_served_draft, require_row_headroom
from ..util.contract_check import Entry, parse_entries
from ..util.logsafe import safe_logger
from ..util.signatures import bound_argument, signature_of
from .draft_model import draft_route
from .hooks import TARGET_CONTRACT
from .resolution import optional_arg, require_plan

logger = safe_logger("sglang_dspark_plugin.sglang_plugin")

WORKER_CONTRACT: list[Entry] = [
    *parse_entries(
        """
        sglang.srt.speculative.dflash_worker_v2:
            DFlashWorkerV2
            DFlashWorkerV2.__init__(server_args, gpu_id, nccl_port, target_worker)
        sglang.srt.speculative.dspark_components.dspark_worker_v2:
            DSparkWorkerV2
            DSparkWorkerV2.__init__(server_args, gpu_id, nccl_port, target_worker)
        sglang.srt.managers.utils:  # a round's counts, set by _resolve_spec_v2_tokens (serving.rounds)
            GenerationBatchResult.num_correct_drafts_per_req_cpu
        sglang.srt.models.dspark:
            DSparkDraftModel
            DSparkDraftModel.__init__(config, quant_config, prefix)
            DSparkDraftModel.load_weights(weights)
            VanillaMarkov.__init__(vocab_size, markov_rank)
        sglang.srt.models.dflash:
            DFlashDraftModel
        sglang.srt.models.registry:
            ModelRegistry.models
            ModelRegistry.get_supported_archs()
        sglang.srt.model_loader.utils:
            get_model_architecture(model_config)
        sglang.srt.speculative.dspark_components.dspark_config:
            resolve_runtime_config(draft_hf_config, speculative_num_draft_tokens, target_vocab_size)
        sglang.srt.speculative.dflash_utils:  # resolution.dflash_reads_layout probes it
            parse_dflash_draft_config(draft_hf_config)
        sglang.srt.distributed.parallel_state:
            get_tp_group()
        sglang.srt.runtime_context:
            get_parallel()  # attention_ranks
        """
    ),
    *TARGET_CONTRACT,  # the hooks' targets (hooks.py)
]
"""Every sglang class, method and function the workers rely on, in modules that take seconds to import:
checked when the workers are first needed (``contract.require_worker_contract``) and by ``doctor``."""


def _tp_cpu_group() -> tuple[Any, int]:
    from sglang.srt.distributed.parallel_state import get_tp_group

    group = get_tp_group()
    return group.cpu_group, int(group.rank_in_group)


def attention_ranks(tp_rank: int) -> AttentionRanks:
    """This process's attention ranks, as sglang published them (``runtime_context.get_parallel()``);
    without a published topology for this TP rank (as in a CPU test) the TP group is one attention group."""
    try:
        from sglang.srt.runtime_context import get_parallel

        p = get_parallel()
        ranks = AttentionRanks(*(int(getattr(p, f.name)) for f in dataclasses.fields(AttentionRanks)))
    except Exception:  # noqa: BLE001 - not initialised (or another layout): the TP rank alone
        return AttentionRanks(tp_rank, tp_rank, 0, 0, 1)
    return ranks if ranks.tp_rank == tp_rank else AttentionRanks(tp_rank, tp_rank, 0, 0, 1)


class _HarvestWorkerMixin:
    """The plan, the rank agreement and the plan's round work (``serving.rounds``), common to the arms."""

    dspark_layout: ClassVar[Arm]  # the plan layout this worker serves (``worker_class_for``)
    dspark_plan: ServePlan | None = None
    dspark_rounds: WorkerRounds | None = None  # None on a rank that does not keep the telemetry

    def _dspark_harvest_init(self, server_args: Any) -> ServePlan:
        """The plan sglang handed this scheduler (the factory chose this class by its layout), the rank
        agreement, and the round work."""
        plan = require_plan(server_args, type(self).__name__)
        check_served_draft(plan, optional_arg(server_args, "speculative_draft_model_path"))
        group, tp_rank = _tp_cpu_group()
        check_rank_agreement(plan_agreement_values(plan), group)
        metrics, device = bool(getattr(server_args, "enable_metrics", 0)), optional_arg(server_args, "device")
        self._dspark_attach(plan, tp_rank=tp_rank, enable_metrics=metrics, device=device)
        return plan

    def _dspark_check_rows(self, plan: ServePlan) -> None:
        """Refuse to serve where the ``req_to_token`` rows do not hold a decode round's reserve (the row
        hook did not take effect): a request at its context limit would write into another's row."""
        mine = vars(self)  # what the parent's __init__ set (its __getattr__ delegates to the target worker)
        runner = mine.get("model_runner")
        rows = getattr(getattr(runner, "req_to_token_pool", None), "req_to_token", None)
        context = getattr(getattr(runner, "model_config", None), "context_len", None)
        if rows is not None and isinstance(context, int):
            require_row_headroom(plan, int(rows.shape[1]) - context, int(mine.get("page_size") or 1))

    def _dspark_attach(
        self, plan: ServePlan, *, tp_rank: int = 0, enable_metrics: bool = False, device: Any = None
    ) -> None:
        """Keep ``plan`` and its round work on this rank (``WorkerRounds.attach``; sglang's ``device``)."""
        self.dspark_plan, ranks = plan, attention_ranks(tp_rank)
        self.dspark_rounds = WorkerRounds.attach(
            plan, ranks, type(self).__name__, logger, metrics=enable_metrics, device=device
        )

    def note_request_finished(self, *, rid: str, natural_stop: bool) -> None:
        """sglang's end-of-request hook: the parent's work, then the request's end is queued."""
        super().note_request_finished(rid=rid, natural_stop=natural_stop)  # type: ignore[misc]
        if self.dspark_rounds is not None:
            self.dspark_rounds.finish(rid)

    def dspark_round(self, committed: Any, result: Any, batch: Any) -> None:
        """After sglang resolved a round (``hooks.round_after_result``): the round work takes it, the
        round's counts included (``result.num_correct_drafts_per_req_cpu``): the one entry per round."""
        if self.dspark_rounds is not None:
            self.dspark_rounds.round(committed, result, batch)


# ------------------------------------------------------------------ the arms


def _parent(arm: Arm) -> Any:
    """The sglang worker class ``arm`` names (``Arm.parent_worker``)."""
    return next(base for base in (DFlashWorkerV2, DSparkWorkerV2) if base.__name__ == arm.parent_worker)


def _worker_class(arm: Arm, name: str) -> Any:
    """The worker of ``arm``: its sglang parent with the mixin; the one routed ``__init__`` (the parent's
    signature) takes the plan, builds the parent inside the plan's draft route and checks the rows."""
    parent = _parent(arm)

    @signature_of(parent.__init__)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        plan = self._dspark_harvest_init(bound_argument(self, "server_args", args, kwargs))
        with draft_route(plan.route):
            parent.__init__(self, *args, **kwargs)
        self._dspark_check_rows(plan)

    __init__.__qualname__ = f"{name}.__init__"
    doc = f"The {arm.name} arm ({arm.describe()}): {arm.description}."
    body = {"__init__": __init__, "__doc__": doc, "__module__": __name__, "dspark_layout": arm}
    return type(name, (_HarvestWorkerMixin, parent), body)


HarvestDFlashWorker = _worker_class(MASK_FILL, "HarvestDFlashWorker")
HarvestDSparkWorker = _worker_class(SHIFTED, "HarvestDSparkWorker")
HarvestMaskFillDSparkWorker = _worker_class(MASK_FILL_DSPARK, "HarvestMaskFillDSparkWorker")

WORKERS: dict[Arm, type] = {
    cls.dspark_layout: cls for cls in (HarvestDFlashWorker, HarvestDSparkWorker, HarvestMaskFillDSparkWorker)
}
"""The worker of each arm: the one table the factory reads (``worker_class_for``)."""


def parent_worker_of(cls: type) -> type:
    """The sglang worker class a plugin worker subclasses: the one its arm names."""
    return _parent(cls.dspark_layout)  # type: ignore[attr-defined]


def worker_class_for(layout: Arm) -> type:
    """The worker class sglang's scheduler instantiates for a plan's ``layout``."""
    if layout not in WORKERS:
        expected = "; ".join(known.describe() for known in WORKERS)
        message = f"no DSPARK_HARVEST worker for the layout {layout!r}; expected one of: {expected}"
        raise GeometryError(message, where="worker_class_for")
    return WORKERS[layout]
