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

from ..probe.live import LiveProbe
from ..telemetry import AcceptTelemetry, DeferredRounds, PrometheusMetrics, plugin_work
from .announce import announce
from .placement import AttentionRanks, telemetry_placement

if TYPE_CHECKING:
    from ..telemetry import PluginWork
    from ..telemetry.deferred import Fact, RoundRows
    from .plan import ServePlan


def queue_on_thread(setting: bool | None, device: object, on_mismatch: str) -> tuple[bool, str]:
    """Whether the queue's runs go to a thread of their own, and why (the startup line's words).

    ``setting`` is ``MEMRA_DSPARK_QUEUE_THREAD`` (None: auto) and ``device`` sglang's resolved
    ``--device`` (anything but a string: unknown). Auto takes the thread on an accelerator, where the
    scheduler's thread waits for the device with the interpreter's lock let go and the thread's runs
    fit in that wait; on CPU the forward pass keeps the cores busy and the thread only adds to them
    (both measured, ``scripts/bench_queue.py``, docs/telemetry.md). A mismatch that stops the server
    (``MEMRA_DSPARK_ON_MISMATCH=fail``) stops it from the run that decides: those runs stay on the
    scheduler's thread."""
    if on_mismatch == "fail":
        return False, "ON_MISMATCH=fail"
    if setting is not None:
        return setting, f"MEMRA_DSPARK_QUEUE_THREAD={'1' if setting else '0'}"
    known = device if isinstance(device, str) and device else None
    return known not in (None, "cpu"), f"auto: device {known or 'unknown'}"


NO_WORK = None
"""``WorkerRounds.work`` when neither host timing nor the sync debug mode is on: a round enters nothing."""


class WorkerRounds:
    """The per-round work of the telemetry rank of one attention group."""

    __slots__ = ("telemetry", "probe", "queue", "work")

    def __init__(
        self, telemetry: AcceptTelemetry, probe: LiveProbe, queue: DeferredRounds, work: Any
    ) -> None:
        self.telemetry, self.probe, self.queue = telemetry, probe, queue
        self.work: PluginWork | None = work  # entered around the round's work where timed or checked

    @classmethod
    def attach(
        cls,
        plan: ServePlan,
        ranks: AttentionRanks,
        worker: str,
        logger: logging.Logger,
        *,
        metrics: bool,
        device: object = None,
    ) -> WorkerRounds | None:
        """The round work of ``plan`` on a rank that keeps the telemetry, else None; ``device`` is
        sglang's resolved ``--device`` (``queue_on_thread``).

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
        thread, why = queue_on_thread(settings.queue_thread, device, plan.request.probe.on_mismatch)
        queue = DeferredRounds(telemetry, probe, settings.defer_rounds, thread=thread)
        exported = telemetry.metrics
        work = plugin_work(
            settings,
            dp_tag,
            logger,
            None if exported is None else exported.set_host_cost,
            (lambda: queue.thread_ns) if thread else None,
        )
        logger.info(
            "DSPARK_HARVEST worker %s%s: harvest=%s (%s), block_size=%d, gamma=%d, verify_window=%d, "
            "harvested rows %s, telemetry queue %s (%s)",
            worker,
            "" if dp_rank is None else f" (dp {dp_rank})",
            plan.harvest.name(),
            plan.resolution.source,
            geometry.block_size,
            geometry.gamma,
            geometry.verify_window,
            list(geometry.harvested_rows),
            "on its own thread" if thread else "on the scheduler's thread",
            why,
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
        ``:785-787``) and handed ``on_verify_complete_cpu``; a result without them is no verify round.

        Each request's facts are read now, in one pass (``_facts``): resolving the round changes
        neither whether it finished nor whether it was retracted (``_resolve_spec_v2_tokens``: 0.5.23
        ``batch_result_processor.py:770-850``, 0.5.17 ``:624-700``), and the requests that had (still
        in an overlapped batch) are left out when the queue runs, as sglang leaves them out of their
        ``spec_verify_ct``. Counts of another length than the batch are counted whole, no buckets
        rather than wrong ones."""
        counts = getattr(result, "num_correct_drafts_per_req_cpu", None)
        if counts is None:
            return
        reqs = batch.reqs
        work = self.work
        if work is NO_WORK:  # a normal server: no timer, no sync check on the round's path
            facts = _facts(reqs) if len(counts) == len(reqs) else None
            self.queue.round(counts, facts, committed, _rows, result)
            return
        with work:
            facts = _facts(reqs) if len(counts) == len(reqs) else None
            self.queue.round(counts, facts, committed, _rows, result)
        work.end_round()


def _facts(reqs: Any) -> list[Fact]:
    """Each request's ``Fact``: id, prompt and output tokens, last output token (the probe's anchor),
    counted (neither retracted nor finished)."""
    return [
        (
            r.rid,
            len(r.origin_input_ids),
            len(out := r.output_ids),
            out[-1] if out else None,
            not (r.is_retracted or r.finished()),
        )
        for r in reqs
    ]


def _rows(result: Any) -> RoundRows:
    """A sampled round's output rows and accept counts (DSPARK's block-capped ones where it has them),
    as host lists, read when the round is queued."""
    capped = getattr(result, "block_accept_lens", None)
    block = None if capped is None else capped.tolist()
    return result.next_token_ids.tolist(), result.accept_lens.tolist(), block


__all__ = ["NO_WORK", "WorkerRounds", "queue_on_thread"]
