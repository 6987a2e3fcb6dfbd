"""The plugin's per-round work, queued in round order and run in bursts (sglang-free).

Measured in sglang's served engine on CPU (``scripts/bench_served.py``, docs/telemetry.md): the
plugin's round work costs 4 to 8 times its warm cost when it runs once per round, because the round's
forward pass evicts the caches its code and data need. Queuing what each round hands over (the
accept counts, the probe's snapshot of the round, a finished request) and running the queue every
``MEMRA_DSPARK_DEFER_ROUNDS`` rounds (default 64), or when the batch drains, runs that code warm.
What each step does, and in which order, is unchanged: the telemetry and the live probe see exactly
the calls they saw round by round, later. Three things are deferred by up to that many rounds:

- the per-round log line (its timestamp is still the round's own) and the summary and ALARM lines;
- the probe's verdict and Prometheus's counters;
- the probe's "every round while the alarm window is low": the alarm's state as of the last run of
  the queue decides.

The last running request's end runs the queue (every request the last round counted has finished
since) and pushes the Prometheus counters and gauges, so a server that goes idle has logged every round,
exported every count and holds nothing. A request's end alone
does not: at a large batch some request finishes nearly every round, and running the queue at each
would run it, cold, nearly every round.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

from ..probe.live import observe_round
from .settings import DEFAULT_DEFER_ROUNDS

if TYPE_CHECKING:
    from ..probe.live import LiveProbe
    from .accept import AcceptTelemetry

RoundSnapshot = tuple[
    Sequence[tuple[Hashable, int, int | None, bool]],  # requests: rid, anchor position, anchor, live
    Sequence[Sequence[int]],  # committed tokens per request
    Sequence[int] | None,  # rows (a sampled round)
    Sequence[int] | None,  # accept counts (a sampled round)
    Sequence[int] | None,  # block-capped accept counts, where sglang has them
]
"""One round as ``live_probe.observe_round`` takes it, after the probe."""

_VERIFY, _PROBE, _FINISH = 0, 1, 2


class DeferredRounds:
    """``telemetry`` and ``probe`` (``None``: no probe) fed through a queue run every ``every`` rounds."""

    __slots__ = (
        "telemetry",
        "probe",
        "every",
        "clock",
        "_ops",
        "_rounds",
        "_probe_index",
        "_alarm_low",
        "_sampled_queued",
        "_live",
        "_finished",
    )

    def __init__(
        self,
        telemetry: AcceptTelemetry,
        probe: LiveProbe | None,
        every: int = DEFAULT_DEFER_ROUNDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.telemetry, self.probe, self.every, self.clock = telemetry, probe, max(1, every), clock
        self._ops: list[tuple[int, Any]] = []
        self._rounds = 0  # verify rounds queued
        self._probe_index = 0 if probe is None else probe.rounds  # the index the next probe round has
        self._alarm_low = False  # the alarm's state when the queue last ran
        self._sampled_queued = False  # a sampled probe round is queued
        self._live = 0  # requests the last round counted
        self._finished = 0  # requests that ended since the last round

    def round(
        self,
        values: Sequence[int],
        contexts: Sequence[int] | None,
        read: Callable[..., RoundSnapshot] | None,
        *args: Any,
        rids: Sequence[Hashable] | None = None,
    ) -> bool:
        """One round, queued: the accepted-draft counts of the requests sglang counts (what
        ``on_verify_complete`` takes), stamped with the time now, with their context lengths at the
        anchor; then the probe's part of the round, where ``read`` is given (``None``: every request had
        finished, the probe skips the round as the telemetry does). ``read(sampled, *args)`` gives the
        round's snapshot as ``observe_round`` takes it (``requests, committed, rows, accept, block``;
        rows, accept and block counts only where ``sampled``), called only where the probe needs the
        requests (a function and its arguments, not a closure: nothing is built for a round the probe
        skips). ``rids``: the counted requests' ids (the per-request lines). The queue runs once
        ``every`` rounds are queued. Returns whether the round is sampled."""
        ops = self._ops
        self._live, self._finished = len(values), 0
        if values:
            ops.append((_VERIFY, (values, self.clock(), contexts, rids)))
            self._rounds += 1
        probe, sampled = self.probe, False
        if probe is not None and read is not None:
            sampled = probe.samples(self._probe_index, alarm_low=self._alarm_low)
            self._probe_index += 1
            self._sampled_queued |= sampled
            needed = sampled or self._sampled_queued or probe.tracking
            ops.append((_PROBE, (self._alarm_low, read(sampled, *args) if needed else None)))
        if self._rounds >= self.every:
            self.run()
        return sampled

    def finish(self, rid: Hashable) -> None:
        """``rid`` has ended (sglang's end-of-request hook): queued; the queue runs once every request
        the last round counted has ended (the batch drained)."""
        if self.probe is not None or self.telemetry.requests is not None:
            self._ops.append((_FINISH, rid))
        self._finished += 1
        if self._finished >= self._live:
            self.run()
            self.telemetry.flush_metrics()  # an idle server's counters catch up, its gauges reach 0

    @property
    def queued(self) -> int:
        """Steps waiting in the queue."""
        return len(self._ops)

    def run(self) -> None:
        """Run every queued step, in order."""
        ops, self._ops, self._rounds = self._ops, [], 0
        telemetry, probe = self.telemetry, self.probe
        telemetry.queued_steps = len(ops)  # the live state the summary and the metrics report
        try:
            for kind, arg in ops:
                if kind == _VERIFY:
                    telemetry.on_verify_complete(arg[0], at=arg[1], contexts=arg[2], rids=arg[3])
                elif kind == _PROBE:
                    alarm_low, snapshot = arg
                    probe.begin_round(alarm_low=alarm_low)  # type: ignore[union-attr]
                    if snapshot is not None:
                        observe_round(probe, *snapshot)  # type: ignore[arg-type]
                    probe.poll()  # type: ignore[union-attr]
                else:
                    if probe is not None:
                        probe.finish(arg)
                    telemetry.finish_request(arg)
        finally:
            self._alarm_low = telemetry.alarm.low()
            self._sampled_queued = False


__all__ = ["DeferredRounds", "RoundSnapshot"]
