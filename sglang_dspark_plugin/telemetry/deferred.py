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

With ``MEMRA_DSPARK_QUEUE_THREAD`` (``thread=True``) the runs go to one thread of their own, in order:
the scheduler's thread only hands the queued steps over. Then a request's line lands shortly after
its answer, the alarm state that decides the probe's sampling is the one of the last run that
completed, and an error in a run is logged there and raised on the scheduler's thread at its next
round or request end. A normal exit runs what was handed over; a killed server loses the rounds
queued since the last run and the run in progress (at most ``every`` rounds and the ends since).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
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


LET_GO_AFTER_NS = 200_000
"""How long a run on the queue's thread holds the interpreter's lock before it lets go (``time.sleep(0)``,
checked between steps): the scheduler's thread, when it wants the lock, waits at most this and one
step, not up to Python's switch interval (5 ms). Each hand-over costs the thread CPU: letting go between
every step cost about twice what this does (``scripts/bench_queue.py``, docs/telemetry.md)."""


class LetGo:
    """Between a run's steps: lets go of the interpreter's lock once ``after_ns`` have passed since the run
    began or last let go (``clock``: nanoseconds)."""

    __slots__ = ("after_ns", "clock", "since", "times")

    def __init__(
        self, after_ns: int = LET_GO_AFTER_NS, clock: Callable[[], int] = time.perf_counter_ns
    ) -> None:
        self.after_ns, self.clock = after_ns, clock
        self.since = clock()
        self.times = 0  # how often it let go

    def __call__(self) -> None:
        if self.clock() - self.since >= self.after_ns:
            time.sleep(0)
            self.times += 1
            self.since = self.clock()


_COUNTED = itemgetter(4)
"""A fact's "counted": read in C (``map``), no Python frame on the round's path."""

_ROUND, _FINISH = 0, 1

logger = logging.getLogger(__name__)


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
        "_thread",
        "_pending",
        "_failure",
        "thread_ns",
        "let_go_ns",
        "let_go_times",
    )

    def __init__(
        self,
        telemetry: AcceptTelemetry,
        probe: LiveProbe | None,
        every: int = DEFAULT_DEFER_ROUNDS,
        clock: Callable[[], float] = time.time,
        *,
        thread: bool = False,
        let_go_ns: int = LET_GO_AFTER_NS,
    ) -> None:
        self.telemetry, self.probe, self.every, self.clock = telemetry, probe, max(1, every), clock
        self._ops: list[tuple[int, Any]] = []
        self._rounds = 0  # verify rounds queued
        self._probe_index = 0 if probe is None else probe.rounds  # the index the next probe round has
        self._alarm_low = False  # the alarm's state when the queue last ran
        self._last: tuple[Sequence[int], Sequence[Fact] | None] = ((), None)  # the last round's
        self._live = 0  # requests the last round counted (-1: not worked out yet)
        self._finished = 0  # requests that ended since the last round
        # thread: the runs on one worker thread of their own, in order (None: on the caller's)
        self._thread = ThreadPoolExecutor(1, "dspark-queue") if thread else None
        self._pending: Future[None] | None = None  # the last run handed to the thread
        self._failure: BaseException | None = None  # a run's error, raised on the caller's thread
        self.thread_ns = 0  # the thread's CPU time in runs so far (``time.thread_time_ns``)
        self.let_go_ns = let_go_ns  # how long the thread holds the interpreter's lock (LetGo)
        self.let_go_times = 0  # how often it let go, in runs so far

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
        if self._failure is not None:
            self._raise_failure()
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
        if self._failure is not None:
            self._raise_failure()
        if self.probe is not None or self.telemetry.requests is not None:
            self._ops.append((_FINISH, rid))
        self._finished += 1
        live = self._live
        if live < 0:  # worked out once a round, at its first end
            values, facts = self._last
            live = self._live = len(values) if facts is None else sum(map(_COUNTED, facts))
        if self._finished >= live:
            self.run(flush=True)  # an idle server's counters catch up, its gauges reach 0

    @property
    def queued(self) -> int:
        """Steps waiting in the queue: rounds and request ends."""
        return len(self._ops)

    @property
    def threaded(self) -> bool:
        """Whether the runs go to a thread of their own."""
        return self._thread is not None

    def run(self, *, flush: bool = False) -> None:
        """Run every queued step, in order (on the queue's thread where it has one), then, with
        ``flush``, push the Prometheus counters and gauges."""
        ops, self._ops, self._rounds = self._ops, [], 0
        if self._thread is None:
            self._run(ops, flush)
        else:
            self._pending = self._thread.submit(self._run_off, ops, flush)

    def wait(self) -> None:
        """Until every run handed to the queue's thread has completed (no-op without one); a run's
        error is raised here."""
        pending = self._pending
        if pending is not None:
            pending.result()  # the runs complete in order: the last one done, all are
        if self._failure is not None:
            self._raise_failure()

    def close(self) -> None:
        """Run what is queued, wait for it, and stop the queue's thread (where it has one)."""
        self.run(flush=True)
        self.wait()
        if self._thread is not None:
            self._thread.shutdown(wait=True)

    def _run(self, ops: list[tuple[int, Any]], flush: bool, pause: Callable[[], None] | None = None) -> None:
        telemetry, probe = self.telemetry, self.probe
        telemetry.queued_steps = len(ops)  # the live state the summary and the metrics report
        try:
            for kind, arg in ops:
                if pause is not None:
                    pause()  # the interpreter's lock to the scheduler's thread, now and then (LetGo)
                if kind == _ROUND:
                    _run_round(telemetry, probe, *arg)
                else:
                    if probe is not None:
                        probe.finish(arg)
                    telemetry.finish_request(arg)
        finally:
            self._alarm_low = telemetry.alarm.low()
        if flush:
            telemetry.flush_metrics()

    def _run_off(self, ops: list[tuple[int, Any]], flush: bool) -> None:
        """A run on the queue's thread: its CPU time counted, an error kept for the caller's thread."""
        started, pause = time.thread_time_ns(), LetGo(self.let_go_ns)
        try:
            self._run(ops, flush, pause)
        except BaseException as error:  # raised again on the scheduler's thread: not lost
            logger.exception("DSPARK_HARVEST: the telemetry queue's run failed")
            self._failure = error
        finally:  # a run that failed is counted too
            self.let_go_times += pause.times
            self.thread_ns += time.thread_time_ns() - started

    def _raise_failure(self) -> None:
        failure, self._failure = self._failure, None
        assert failure is not None
        raise failure


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
