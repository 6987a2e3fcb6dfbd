"""What a served worker does each round (sglang-free): its accept telemetry, live probe and their queue
(``telemetry.DeferredRounds``), wired from the plan where this rank keeps them (``telemetry_placement``).

The worker (``sglang_plugin.workers``) hands over what sglang gives it and nothing else, in one call
per round: the round once sglang resolved it (``round``: its requests, the committed tokens and the
verify result, read by attribute: the accepted-draft counts are the result's
``num_correct_drafts_per_req_cpu``, the very list sglang hands ``on_verify_complete_cpu``); and a
request's end (``finish``).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from ..probe.live import LiveProbe, request_anchor
from ..telemetry import AcceptTelemetry, DeferredRounds, PrometheusMetrics, plugin_work
from .announce import announce
from .placement import AttentionRanks, telemetry_placement

if TYPE_CHECKING:
    from ..telemetry import PluginWork
    from .plan import ServePlan

NO_WORK = None
"""``WorkerRounds.work`` when neither host timing nor the sync debug mode is on: a round enters nothing."""


class WorkerRounds:
    """The per-round work of the telemetry rank of one attention group."""

    __slots__ = ("telemetry", "probe", "queue", "work", "by_context", "per_request")

    def __init__(
        self, telemetry: AcceptTelemetry, probe: LiveProbe, queue: DeferredRounds, work: Any
    ) -> None:
        self.telemetry, self.probe, self.queue = telemetry, probe, queue
        self.work: PluginWork | None = work  # entered around the round's work where timed or checked
        self.by_context = telemetry.by_context is not None  # context lengths are read each round
        self.per_request = telemetry.requests is not None  # request ids too (the per-request lines)

    @classmethod
    def attach(
        cls, plan: ServePlan, ranks: AttentionRanks, worker: str, logger: logging.Logger, *, metrics: bool
    ) -> WorkerRounds | None:
        """The round work of ``plan`` on a rank that keeps the telemetry, else None.

        That is the first rank of each attention group (its peers verify the same rounds); with
        data-parallel attention the first rank of every DP group, whose lines end with ``dp=N``.
        """
        watches, dp_rank = telemetry_placement(ranks)
        if not watches:
            return None
        # The startup line and manifest in the scheduler too: sglang 0.5.17 resolves its arguments
        # before the launcher configures logging, so the launcher's INFO lines can be lost.
        announce(plan, logger, write=False)
        settings, geometry = plan.request.telemetry, plan.geometry
        dp_tag = "" if dp_rank is None else f" dp={dp_rank}"
        probe = LiveProbe(plan.harvest, plan.request.probe, dp_tag=dp_tag)
        telemetry = AcceptTelemetry.from_resolution(  # its alarm and summary state the verdict
            plan.resolution,
            geometry.gamma,
            settings=settings,
            metrics=PrometheusMetrics(geometry.gamma) if metrics else None,
            dp_rank=dp_rank,
            probe=probe,
        )
        queue = DeferredRounds(telemetry, probe, settings.defer_rounds)
        exported = telemetry.metrics
        work = plugin_work(settings, dp_tag, logger, None if exported is None else exported.set_host_cost)
        logger.info(
            "DSPARK_HARVEST worker %s%s: harvest=%s (%s), block_size=%d, gamma=%d, verify_window=%d, "
            "harvested rows %s",
            worker,
            "" if dp_rank is None else f" (dp {dp_rank})",
            plan.harvest.name(),
            plan.resolution.source,
            geometry.block_size,
            geometry.gamma,
            geometry.verify_window,
            list(geometry.harvested_rows),
        )
        telemetry.logger.info("%s", telemetry.describe())  # what `dspark-harvest report` reads gamma from
        return cls(telemetry, probe, queue, work)

    def finish(self, rid: Hashable) -> None:
        """A request ended: its end is queued after its rounds (the probe scores what it holds)."""
        work = self.work
        if work is NO_WORK:
            self.queue.finish(rid)
            return
        with work:
            self.queue.finish(rid)

    def round(self, committed: Any, result: Any, batch: Any) -> None:
        """sglang resolved a round: queue it in one step (``DeferredRounds.round``, no sync). Its counts
        are the host list sglang set on the result (0.5.17 ``batch_result_processor.py:636``, 0.5.23
        ``:785-787``) and handed ``on_verify_complete_cpu``; a result without them is no verify round."""
        counts = getattr(result, "num_correct_drafts_per_req_cpu", None)
        if counts is None:
            return
        work = self.work
        if work is NO_WORK:  # a normal server: no timer, no sync check on the round's path
            self._round(counts, committed, result, batch)
            return
        with work:
            self._round(counts, committed, result, batch)
        work.end_round()

    def _round(self, counts: list[int], committed: Any, result: Any, batch: Any) -> None:
        """Requests that had already finished (still in an overlapped batch) or were retracted are left
        out, as sglang leaves them out of their ``spec_verify_ct``; resolving the round changes neither
        state (``_resolve_spec_v2_tokens``: 0.5.23 ``batch_result_processor.py:770-850``, 0.5.17
        ``:624-700``), so it is read after it."""
        reqs = batch.reqs
        live = [not (r.is_retracted or r.finished()) for r in reqs]
        contexts = [len(r.origin_input_ids) + len(r.output_ids) for r in reqs] if self.by_context else None
        if len(counts) != len(reqs):  # not this batch's: counted whole, no buckets rather than wrong ones
            self.queue.round(counts, None, None)
            return
        rids = [r.rid for r in reqs] if self.per_request else None
        if not all(live):
            counts = [n for n, keep in zip(counts, live, strict=True) if keep]
            if contexts is not None:
                contexts = [c for c, keep in zip(contexts, live, strict=True) if keep]
            if rids is not None:
                rids = [rid for rid, keep in zip(rids, live, strict=True) if keep]
        # a round of requests that had all finished: the probe skips it as the telemetry does
        self.queue.round(
            counts, contexts, _snapshot if counts else None, batch, live, committed, result, rids=rids
        )


def _snapshot(sampled: bool, batch: Any, live: list[bool], committed: Any, result: Any) -> Any:
    """One round as the probe takes it (``DeferredRounds.probe_round``): each request's id, anchor and
    liveness, the committed tokens, and on a sampled round the output rows and accept counts."""
    requests = [
        (r.rid, *request_anchor(r.output_ids), keep) for r, keep in zip(batch.reqs, live, strict=True)
    ]
    if not sampled:
        return requests, committed, None, None, None
    capped = getattr(result, "block_accept_lens", None)
    block = None if capped is None else capped.tolist()
    return requests, committed, result.next_token_ids.tolist(), result.accept_lens.tolist(), block


__all__ = ["NO_WORK", "WorkerRounds"]
