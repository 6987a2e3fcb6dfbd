"""``DeferredRounds``: the telemetry and the live probe fed through a queue run in bursts see exactly the
calls they would see round by round (the same counts, log lines, verdict), each log line keeps its
round's time, and a finished request runs the queue."""

from __future__ import annotations

import logging
import random
import re

import pytest
from probe_streams import sequence

from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.probe.live import LiveProbe, ProbeSettings, row_of_round
from sglang_dspark_plugin.telemetry import ACCEPT_LOGGER, AcceptTelemetry, DeferredRounds, TelemetrySettings
from sglang_dspark_plugin.telemetry.deferred import LET_GO_AFTER_NS, LetGo

GAMMA = 4
SETTINGS = TelemetrySettings(summary_every=16, alarm_threshold=1.6, alarm_warmup=8, alarm_window=16)
NO_ALARM = TelemetrySettings(summary_every=16, alarm_threshold=0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


def serve(
    every: int,
    probe_settings: ProbeSettings,
    caplog: pytest.LogCaptureFixture,
    settings: TelemetrySettings = SETTINGS,
    shift: int = 1,
    thread: bool = False,
):
    """A served stream: 6 requests, 3 at a time, drafting ``shift`` positions late (a shifted drafter
    under the dflash harvest), through a queue run every ``every`` rounds; what it logged and kept."""
    caplog.clear()
    probe = LiveProbe(DsparkHarvest.DFLASH, probe_settings)
    telemetry = AcceptTelemetry(GAMMA, DsparkHarvest.DFLASH, "census", (), settings=settings, probe=probe)
    rounds = DeferredRounds(telemetry, probe, every=every, clock=Clock(), thread=thread)
    rng = random.Random(3)
    seqs = {rid: sequence(400, seed=rid) for rid in range(6)}
    outs = {rid: seqs[rid][:10] for rid in range(6)}
    running = [0, 1, 2]
    waiting = [3, 4, 5]
    with caplog.at_level(logging.INFO, logger=ACCEPT_LOGGER):
        while running:
            values, committed, rows = [], [], []
            for rid in running:
                pos, seq = len(outs[rid]) - 1, seqs[rid]
                drafts = [seq[pos + j + shift] for j in range(1, GAMMA + 1)]
                n = rng.choice([0, 0, 0, 1])
                done = seq[pos + 1 : pos + 2 + n]
                values.append(n)
                committed.append(done)
                rows += row_of_round(drafts, done)

            facts = [(rid, 0, len(outs[rid]), outs[rid][-1], True) for rid in running]
            accept = [len(c) for c in committed]
            rounds.round(values, facts, committed, lambda rows=rows, accept=accept: (rows, accept, None))
            for rid, done in zip(list(running), committed, strict=True):
                outs[rid] += done
                if len(outs[rid]) >= 90:
                    running.remove(rid)
                    rounds.finish(rid)
                    if waiting:
                        running.append(waiting.pop(0))
        rounds.wait()  # what the queue's thread was handed (no-op without one)
    # rounds_per_s: wall time when the summary runs, the one figure that differs
    lines = [
        (re.sub(r"rounds_per_s=[0-9.]+", "rounds_per_s=*", r.getMessage()), r.created)
        for r in caplog.records
        if r.name == ACCEPT_LOGGER
    ]
    return telemetry, probe, rounds, lines


def _unqueued(lines):
    """The lines without the summary's ``queued_steps=N`` (what a run of the queue held)."""
    return [re.sub(r" queued_steps=\d+", "", m) for m, _ in lines]


def test_a_queue_run_every_8_rounds_sees_what_a_round_by_round_run_sees(caplog) -> None:
    every_round = ProbeSettings(rounds=10**9)  # sampling then depends on nothing the queue defers
    t1, p1, q1, lines1 = serve(1, every_round, caplog)
    t8, p8, q8, lines8 = serve(8, every_round, caplog)
    assert q1.queued == q8.queued == 0  # the last request's end ran the queue
    assert t8.counts.hist == t1.counts.hist and t8.counts.rounds == t1.counts.rounds > 100
    # every line, in order, the ALARM included; the summary's queued_steps is the queue's own state
    assert _unqueued(lines8) == _unqueued(lines1) and lines8 != lines1
    assert any("dspark accept ALARM" in m for m, _ in lines8)
    assert p8.counts == p1.counts and p8.counts.compared_late > 0
    assert p8.verdict is not None and p8.verdict.override == "MEMRA_DSPARK_HARVEST=dspark"
    assert (p8.rounds, p8.sampled_rounds) == (p1.rounds, p1.sampled_rounds)


def test_the_probes_schedule_is_kept_through_the_queue(caplog) -> None:
    """First ``rounds`` rounds, then 1 in ``every``: the round indices sampled are the same (the alarm
    off, whose state the queue reads as of its last run)."""
    schedule = ProbeSettings(rounds=20, every=5)
    _, p1, _, lines1 = serve(1, schedule, caplog, NO_ALARM)
    _, p8, _, lines8 = serve(8, schedule, caplog, NO_ALARM)
    assert p8.counts == p1.counts and p8.counts.compared_own > 0
    assert (p8.rounds, p8.sampled_rounds) == (p1.rounds, p1.sampled_rounds)
    assert 20 < p8.sampled_rounds < p8.rounds
    assert _unqueued(lines8) == _unqueued(lines1)


def test_each_round_line_keeps_its_rounds_time(caplog) -> None:
    _, _, _, lines1 = serve(1, ProbeSettings(rounds=10**9), caplog)
    _, _, _, lines8 = serve(8, ProbeSettings(rounds=10**9), caplog)
    rounds1 = [(m, at) for m, at in lines1 if m.startswith("dspark accept round=")]
    rounds8 = [(m, at) for m, at in lines8 if m.startswith("dspark accept round=")]
    assert rounds8 == rounds1  # the clock is read when the round is queued, not when it runs
    times = [at for _, at in rounds8]
    assert times == sorted(times) and len(set(times)) == len(times)


ROWS = ([0] * 10, [2, 3], None)


def _facts(*counted: bool) -> list:
    """Requests r0, r1, ... each with 9 prompt and 2 output tokens, counted or not."""
    return [(f"r{i}", 9, 2, 7, keep) for i, keep in enumerate(counted)]


def test_rounds_wait_for_the_burst_and_a_finished_request_runs_it(caplog) -> None:
    probe = LiveProbe(DsparkHarvest.DFLASH)
    telemetry = AcceptTelemetry(GAMMA, DsparkHarvest.DFLASH, "census", (), settings=SETTINGS, probe=probe)
    rounds = DeferredRounds(telemetry, probe, every=4)
    read: list[int] = []
    for n in range(3):
        assert rounds.round([1, 2], _facts(True, True), [[5], [5]], lambda: read.append(1) or ROWS)
        assert read == [1] * (n + 1)  # the first rounds are sampled, and their rows read when queued
    assert telemetry.counts.rounds == 0 and rounds.queued == 3 and probe.rounds == 0
    # every request had finished: neither the telemetry nor the probe takes the round
    assert not rounds.round([1], _facts(False), [[5]], lambda: pytest.fail("not sampled"))
    assert rounds.queued == 3
    rounds.round([1], None)  # counts not this batch's: counted whole, no probe step; the 4th round runs
    assert telemetry.counts.rounds == 4 and rounds.queued == 0 and probe.rounds == 3
    assert telemetry.queued_steps == 4  # what the run held: 4 rounds
    assert rounds.round([3, 0], _facts(True, False), [[5], [5]], lambda: ([0] * 10, [4, 1], None))
    rounds.finish("r0")  # the one request the round counted: the batch drained
    assert telemetry.counts.rounds == 5 and rounds.queued == 0 and telemetry.queued_steps == 2
    assert telemetry.counts.request_rounds == 2 + 2 + 2 + 1 + 1  # r1, not counted, left out


def test_without_a_probe_only_the_telemetry_is_queued() -> None:
    telemetry = AcceptTelemetry(GAMMA, DsparkHarvest.DFLASH, "census", (), settings=SETTINGS)
    rounds = DeferredRounds(telemetry, None, every=2)
    assert not rounds.round([1], _facts(True), [[5]], lambda: pytest.fail("no probe: nothing to read"))
    rounds.finish("r0")
    assert telemetry.counts.rounds == 1 and rounds.queued == 0


def test_only_the_end_of_the_last_running_request_runs_the_queue() -> None:
    """At a large batch some request ends nearly every round: a request's end queues, and the queue runs
    once every request the last round counted has ended (the server goes idle with nothing held)."""
    probe = LiveProbe(DsparkHarvest.DFLASH)
    telemetry = AcceptTelemetry(GAMMA, DsparkHarvest.DFLASH, "census", (), settings=SETTINGS, probe=probe)
    rounds = DeferredRounds(telemetry, probe, every=64)
    rounds.round([1, 2, 0], None)
    rounds.finish("r0")
    rounds.finish("r1")
    assert telemetry.counts.rounds == 0 and rounds.queued == 3  # a round and two ends, still queued
    rounds.round([3], None)  # the one request left
    assert rounds.queued == 4
    rounds.finish("r2")
    assert telemetry.counts.rounds == 2 and rounds.queued == 0
    state = telemetry.live_state()
    assert state is not None and (state.held_requests, state.held_rounds, state.queued_steps) == (0, 0, 5)


@pytest.mark.parametrize("with_probe", [False, True], ids=["no probe", "probe"])
def test_an_idle_servers_counters_equal_its_lines(with_probe: bool) -> None:
    """The batch drains (its last request ends): the queue runs and the Prometheus counters catch up with
    the lines, whether or not a probe is on (a served run had 587 request-rounds exported against 607
    logged on an idle server)."""
    from prometheus_client import CollectorRegistry

    from sglang_dspark_plugin.telemetry import PrometheusMetrics

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(GAMMA, registry=registry, sync_every=10**6, sync_interval_s=1e9)
    probe = LiveProbe(DsparkHarvest.DFLASH, ProbeSettings()) if with_probe else None
    telemetry = AcceptTelemetry(GAMMA, DsparkHarvest.DFLASH, "census", (), settings=NO_ALARM, metrics=metrics)
    rounds = DeferredRounds(telemetry, probe, every=64, clock=Clock())
    for n in range(21):
        rounds.round([n % 3, 1, 0], None)
    for rid in range(3):
        rounds.finish(rid)

    def value(name: str) -> float:
        return registry.get_sample_value(name) or 0.0

    assert telemetry.counts.rounds == 21 and telemetry.counts.request_rounds == 63
    assert value("dspark_harvest_rounds_total") == 21
    assert value("dspark_harvest_request_rounds_total") == 63
    assert value("dspark_harvest_accepted_drafts_total") == telemetry.counts.accepted_drafts


def test_the_queues_thread_sees_what_the_callers_thread_sees(caplog) -> None:
    """``MEMRA_DSPARK_QUEUE_THREAD``: the runs on a thread of their own log the same lines, in the same
    order and with the same round times, and keep the same counts and verdict, once handed over."""
    every_round = ProbeSettings(rounds=10**9)
    t1, p1, q1, lines1 = serve(8, every_round, caplog)
    tt, pt, qt, linest = serve(8, every_round, caplog, thread=True)
    assert qt.threaded and not q1.threaded and qt.queued == 0
    assert [m for m, _ in linest] == [m for m, _ in lines1]
    assert [(m, at) for m, at in linest if "round=" in m] == [(m, at) for m, at in lines1 if "round=" in m]
    assert any("dspark accept ALARM" in m for m, _ in linest)
    assert tt.counts.hist == t1.counts.hist and tt.counts.rounds == t1.counts.rounds > 100
    assert pt.counts == p1.counts and pt.verdict is not None and pt.verdict.override == p1.verdict.override
    assert qt.thread_ns > 0 and q1.thread_ns == 0  # the thread's CPU time, counted apart
    qt.close()


def test_a_run_that_fails_on_the_queues_thread_fails_the_next_round(caplog) -> None:
    """An error in a run on the queue's thread is logged there and raised on the caller's thread at its
    next round: not lost with the thread."""

    class Broken(AcceptTelemetry):
        def on_verify_complete(self, *args, **kwargs):
            raise RuntimeError("broken on purpose")

    telemetry = Broken(GAMMA, DsparkHarvest.DFLASH, "census", (), settings=NO_ALARM)
    rounds = DeferredRounds(telemetry, None, every=1, thread=True)
    with caplog.at_level(logging.ERROR):
        rounds.round([1], None)  # runs on the thread, and fails there
        with pytest.raises(RuntimeError, match="broken on purpose"):
            rounds.wait()
    assert "the telemetry queue's run failed" in caplog.text
    rounds.round([1], None)
    rounds._pending.result()
    with pytest.raises(RuntimeError, match="broken on purpose"):
        rounds.round([1], None)  # the next round raises what the thread's run raised
    rounds.round([1], None)  # raised once: the queue goes on
    rounds._pending.result()
    with pytest.raises(RuntimeError, match="broken on purpose"):
        rounds.finish("r0")
    rounds._thread.shutdown(wait=True)


def test_a_run_that_fails_still_counts_its_time_and_how_often_it_let_go() -> None:
    """A failed run's CPU time and its hand-overs of the lock are counted like any other run's."""

    class Broken(AcceptTelemetry):
        def on_verify_complete(self, *args, **kwargs):
            raise RuntimeError("broken on purpose")

    telemetry = Broken(GAMMA, DsparkHarvest.DFLASH, "census", (), settings=NO_ALARM)
    rounds = DeferredRounds(telemetry, None, every=1, thread=True, let_go_ns=0)  # lets go before each step
    rounds.round([1], None)
    with pytest.raises(RuntimeError, match="broken on purpose"):
        rounds.wait()
    assert rounds.let_go_times == 1 and rounds.thread_ns > 0
    rounds._thread.shutdown(wait=True)


def test_closing_the_queue_runs_what_it_holds() -> None:
    """A normal stop runs the rounds still queued and pushes the counters (``close``): only a killed
    server loses them."""
    telemetry = AcceptTelemetry(GAMMA, DsparkHarvest.DFLASH, "census", (), settings=NO_ALARM)
    rounds = DeferredRounds(telemetry, None, every=64, thread=True)
    for _ in range(5):
        rounds.round([1, 0], None)
    assert telemetry.counts.rounds == 0 and rounds.queued == 5
    rounds.close()
    assert telemetry.counts.rounds == 5 and rounds.queued == 0 and rounds.thread_ns > 0


def test_a_run_lets_go_of_the_lock_once_its_time_is_up() -> None:
    """``LetGo``: between steps, the queue's thread lets go of the interpreter's lock only once
    ``after_ns`` have passed since it began or last let go, and counts how often."""
    now = [0]

    def clock() -> int:
        return now[0]

    pause = LetGo(200_000, clock)
    for _ in range(10):  # 10 steps of 60 us: it lets go after the 4th (240 us) and the 8th (480 us)
        now[0] += 60_000
        pause()
    assert pause.times == 2 and pause.since == 480_000
    every = LetGo(0, clock)
    for _ in range(5):
        every()
    assert every.times == 5  # 0: between every step
    assert LET_GO_AFTER_NS == 200_000


@pytest.mark.parametrize(("let_go_ns", "expected"), [(0, "every step"), (1 << 62, "never")])
def test_how_often_the_queues_thread_lets_go_changes_nothing_it_logs(let_go_ns, expected, caplog) -> None:
    """Letting go between every step or never: the same lines and counts as the caller's own runs, and
    the thread counts how often it let go (every step; never)."""
    telemetry = AcceptTelemetry(GAMMA, DsparkHarvest.DFLASH, "census", (), settings=NO_ALARM)
    rounds = DeferredRounds(telemetry, None, every=4, thread=True, let_go_ns=let_go_ns)
    for _ in range(10):
        rounds.round([1, 0], None)
    rounds.close()
    assert telemetry.counts.rounds == 10
    # 10 rounds in runs of 4, 4 and 2 (the close): one let-go a step, or none
    assert rounds.let_go_times == (10 if expected == "every step" else 0)
