"""The plugin's per-round work, queued in round order and run in bursts (sglang-free).

Measured in sglang's served engine on CPU (``scripts/bench_served.py``, docs/telemetry.md): the
plugin's round work costs 4 to 8 times its warm cost when it runs once per round, because the round's
forward pass evicts the caches its code and data need. Queuing what each round hands over (the
accept counts, each request's facts read in one pass, a sampled round's rows, a finished request) and
running the queue every ``MEMRA_DSPARK_DEFER_ROUNDS`` rounds (default 64), or when the batch drains,
runs that code warm: which requests a round counts, their context lengths and the probe's anchors are
worked out there, not on the round's path.
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
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ..probe.live import observe_round
from .settings import DEFAULT_DEFER_ROUNDS

if TYPE_CHECKING:
    from ..probe.live import LiveProbe
    from .accept import AcceptTelemetry

Fact = tuple[Hashable, int, int, int | None, bool]
"""One request of a round, read when the round resolves: its id, prompt tokens, output tokens, last
output token (the probe's anchor before this round; ``None``: no output yet) and whether sglang counts
it this round (not finished, not retracted). A round's facts are read on the round's path in one pass;
what they mean is worked out when the queue runs."""

RoundRows = tuple[Sequence[int], Sequence[int], Sequence[int] | None]
"""A sampled round's flat output rows, accept counts and block-capped accept counts (``None`` where
sglang caps nothing), as ``live_probe.observe_round`` takes them."""


_COUNTED = itemgetter(4)
"""A fact's "counted": read in C (``map``), no Python frame on the round's path."""

_ROUND, _FINISH = 0, 1


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
        "_last",
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
        self._last: tuple[Sequence[int], Sequence[Fact] | None] = ((), None)  # the last round's
        self._live = 0  # requests the last round counted (-1: not worked out yet)
        self._finished = 0  # requests that ended since the last round

    def round(
        self,
        values: Sequence[int],
        facts: Sequence[Fact] | None = None,
        committed: Sequence[Sequence[int]] | None = None,
        read: Callable[..., RoundRows] | None = None,
        *args: Any,
    ) -> bool:
        """One round, queued as handed over: the accepted-draft counts of the batch's requests (what
        ``on_verify_complete`` takes, the requests sglang does not count included), stamped with the
        time now; each request's ``facts`` (``None``: the counts are not this batch's, counted whole,
        no probe step); the tokens each request commits. On a round the probe samples, ``read(*args)``
        gives the output rows and accept counts (``RoundRows``), read now: nothing else is worked out
        on the round's path. A round in which every request had finished is skipped, by the telemetry
        and the probe alike. The queue runs once ``every`` rounds are queued. Returns whether the round
        is sampled."""
        self._last, self._live, self._finished = (values, facts), -1, 0
        sampled = False
        step: tuple[Any, ...]
        if facts is None:
            if not values:
                return False
            step = (values, self.clock(), None, None, None, False)
        else:
            if True not in map(_COUNTED, facts):
                return False
            probe, alarm_low = self.probe, self._alarm_low
            if probe is not None:
                sampled = probe.samples(self._probe_index, alarm_low=alarm_low)
                self._probe_index += 1
            rows = read(*args) if sampled and read is not None else None
            step = (values, self.clock(), facts, committed, rows, alarm_low)
        self._ops.append((_ROUND, step))
        self._rounds += 1
        if self._rounds >= self.every:
            self.run()
        return sampled

    def finish(self, rid: Hashable) -> None:
        """``rid`` has ended (sglang's end-of-request hook): queued; the queue runs once every request
        the last round counted has ended (the batch drained)."""
        if self.probe is not None or self.telemetry.requests is not None:
            self._ops.append((_FINISH, rid))
        self._finished += 1
        live = self._live
        if live < 0:  # worked out once a round, at its first end
            values, facts = self._last
            live = self._live = len(values) if facts is None else sum(map(_COUNTED, facts))
        if self._finished >= live:
            self.run()
            self.telemetry.flush_metrics()  # an idle server's counters catch up, its gauges reach 0

    @property
    def queued(self) -> int:
        """Steps waiting in the queue: rounds and request ends."""
        return len(self._ops)

    def run(self) -> None:
        """Run every queued step, in order."""
        ops, self._ops, self._rounds = self._ops, [], 0
        telemetry, probe = self.telemetry, self.probe
        telemetry.queued_steps = len(ops)  # the live state the summary and the metrics report
        try:
            for kind, arg in ops:
                if kind == _ROUND:
                    _run_round(telemetry, probe, *arg)
                else:
                    if probe is not None:
                        probe.finish(arg)
                    telemetry.finish_request(arg)
        finally:
            self._alarm_low = telemetry.alarm.low()


def _run_round(
    telemetry: AcceptTelemetry,
    probe: LiveProbe | None,
    values: Sequence[int],
    at: float,
    facts: Sequence[Fact] | None,
    committed: Sequence[Sequence[int]] | None,
    rows: RoundRows | None,
    alarm_low: bool,
) -> None:
    """A queued round, worked out: the counted requests' counts, context lengths at the anchor and ids
    into the telemetry, then the probe's part of the round (its anchors, the committed tokens, the rows
    of a sampled round)."""
    if facts is None:
        telemetry.on_verify_complete(values, at=at)
        return
    counted = facts
    if False in map(_COUNTED, facts):  # requests that had already finished or were retracted
        kept = [(n, f) for n, f in zip(values, facts, strict=True) if f[4]]
        values, counted = [n for n, _ in kept], [f for _, f in kept]
    contexts = None if telemetry.by_context is None else [f[1] + f[2] for f in counted]
    rids = None if telemetry.requests is None else [f[0] for f in counted]
    telemetry.on_verify_complete(values, at=at, contexts=contexts, rids=rids)
    if probe is None:
        return
    probe.begin_round(alarm_low=alarm_low)
    if probe.busy:  # sampled, or some request has rounds to score
        requests = [(f[0], f[2] - 1, f[3], f[4]) for f in facts]
        observe_round(probe, requests, committed or (), *(rows or (None, None, None)))
    probe.poll()


__all__ = ["DeferredRounds", "Fact", "RoundRows"]
