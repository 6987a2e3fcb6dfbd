"""The rolling alarm (``telemetry/alarm.py``): when it fires over a round stream, at most once per
window, and what its message names (fed through ``AcceptTelemetry``, as a served run feeds it)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_dspark_plugin.census.draft_config import TIER_STRUCTURAL, Signal
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.telemetry import ACCEPT_LOGGER, AcceptTelemetry, TelemetrySettings

ARCH_SIGNAL = Signal("config.json:architectures[0]", "DSparkDraftModel", TIER_STRUCTURAL, "dspark")
DFLASH, DSPARK = DsparkHarvest.DFLASH, DsparkHarvest.DSPARK


@pytest.fixture
def warnings():
    """The WARNING lines the accept logger emits."""
    logger = logging.getLogger(ACCEPT_LOGGER)
    seen: list[str] = []

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno == logging.WARNING:
                seen.append(record.getMessage())

    handler = Handler()
    logger.addHandler(handler)
    yield seen
    logger.removeHandler(handler)


def alarm_telemetry(source: str = "census", evidence=(ARCH_SIGNAL,), **kw) -> AcceptTelemetry:
    base = dict(accept_log_level=None, summary_every=0, alarm_threshold=1.6, alarm_warmup=5, alarm_window=10)
    base.update(kw)
    return AcceptTelemetry(4, DSPARK, source, evidence, settings=TelemetrySettings(**base))


def test_alarm_fires_after_warmup_on_a_collapsed_stream_once_per_window(warnings):
    t = alarm_telemetry()
    for _ in range(14):
        t.on_verify_complete([0, 0, 1, 0])
    # Warm-up (5 rounds) plus a full window (10 rounds) not yet seen.
    assert t.alarm.alarms == [] and warnings == []
    for _ in range(20):
        t.on_verify_complete([0, 0, 1, 0])
    assert [a.round_index for a in t.alarm.alarms] == [15, 25]  # at most one per 10-round window
    assert t.alarm.alarms[0].window_mean == pytest.approx(1.25)
    assert len(warnings) == 2 and warnings[0] == t.alarm.alarms[0].message
    msg = warnings[0]
    assert "harvest=dspark" in msg and "source=census" in msg
    assert "config.json:architectures[0]='DSparkDraftModel' -> dspark" in msg
    assert "wrong convention" in msg and "toward 1.0" in msg
    assert "MEMRA_DSPARK_HARVEST=dflash" in msg
    assert t.summary()["alarms_fired"] == t.alarm.fired == 2


@settings(max_examples=60, deadline=None)
@given(
    warmup=st.integers(0, 6),
    window=st.integers(1, 6),
    stream=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=4), min_size=1, max_size=40),
)
def test_alarm_rounds_match_the_rule_recomputed_by_brute_force(warmup, window, stream):
    t = alarm_telemetry(alarm_warmup=warmup, alarm_window=window)
    for counts in stream:
        t.on_verify_complete(counts)
    expected, last = [], None
    for i in range(1, len(stream) + 1):  # round i, 1-based
        if i - warmup < window:
            continue  # warm-up, then a full window of post-warm-up rounds
        recent = stream[i - window : i]
        mean = sum(n + 1 for c in recent for n in c) / sum(len(c) for c in recent)
        if mean < 1.6 and (last is None or i - last >= window):
            expected.append((i, mean))
            last = i
    assert t.alarm.fired == len(expected)
    assert (
        [(a.round_index, a.window_mean) for a in t.alarm.alarms]
        == [  # the 16 most recent are kept
            (i, pytest.approx(m)) for i, m in expected[-16:]
        ]
    )
    # the window mean the summary reports: the post-warm-up rounds, at most the last window of them
    recent = stream[warmup:][-window:]
    window_mean = t.alarm.window_mean()
    if recent:
        assert window_mean == pytest.approx(sum(n + 1 for c in recent for n in c) / sum(map(len, recent)))
    else:
        assert window_mean is None


def test_alarm_does_not_fire_on_a_healthy_stream(warnings):
    t = alarm_telemetry()
    for i in range(300):
        t.on_verify_complete([i % 5, 2, 1, 3])  # mean accept length 3.0
    assert t.alarm.alarms == [] and warnings == []
    assert t.alarm.window_mean() == pytest.approx(3.0)


def test_alarm_does_not_fire_before_warmup():
    t = alarm_telemetry(alarm_warmup=100, alarm_window=10)
    for _ in range(109):
        t.on_verify_complete([0])
    assert t.alarm.alarms == []
    t.on_verify_complete([0])
    assert [a.round_index for a in t.alarm.alarms] == [110]


def test_alarm_fires_when_a_healthy_stream_collapses():
    t = alarm_telemetry()
    for _ in range(40):
        t.on_verify_complete([3, 3])
    assert t.alarm.alarms == []
    for _ in range(10):
        t.on_verify_complete([0, 0])
    assert len(t.alarm.alarms) == 1 and t.alarm.alarms[0].window_mean < 1.6


def test_alarm_window_mean_is_weighted_by_requests():
    t = alarm_telemetry(alarm_warmup=0, alarm_window=2)
    t.on_verify_complete([4])  # one request, accept length 5
    t.on_verify_complete([0] * 9)  # nine requests, accept length 1
    # Per-round means average to 3.0, but the window holds 14 tokens over 10 request-rounds: 1.4.
    assert [a.window_mean for a in t.alarm.alarms] == [pytest.approx(1.4)]


def test_rounds_left_out_of_the_counts_are_left_out_of_the_window():
    t = alarm_telemetry(alarm_warmup=0, alarm_window=2)
    t.on_verify_complete([4])
    t.on_verify_complete([9])  # outside [0, gamma]: not a round of the window
    t.on_verify_complete([])
    assert t.alarm.window_mean() == pytest.approx(5.0) and t.alarm.alarms == []
    t.on_verify_complete([0])
    assert t.alarm.window_mean() == pytest.approx(3.0)


def test_alarm_for_an_env_override_names_both_ways_out():
    t = alarm_telemetry(source="env")
    for _ in range(15):
        t.on_verify_complete([0])
    msg = t.alarm.alarms[0].message
    assert "source=env" in msg and "MEMRA_DSPARK_HARVEST=dflash" in msg
    assert "unset MEMRA_DSPARK_HARVEST" in msg


def test_alarm_without_census_evidence_says_so():
    t = AcceptTelemetry(
        3,
        DFLASH,
        "default",
        settings=TelemetrySettings(accept_log_level=None, summary_every=0, alarm_warmup=0, alarm_window=3),
    )
    for _ in range(3):
        t.on_verify_complete([0])
    msg = t.alarm.alarms[0].message
    assert "no census signal" in msg and "MEMRA_DSPARK_HARVEST=dspark" in msg and "harvest=dflash" in msg


def test_alarm_disabled_by_threshold_zero():
    t = alarm_telemetry(alarm_threshold=0.0)
    assert not t.alarm.on
    for _ in range(100):
        t.on_verify_complete([0])
    assert t.alarm.alarms == [] and t.alarm.window_mean() is None  # nothing observed


def test_alarm_threshold_is_capped_for_tiny_blocks():
    t = AcceptTelemetry(1, DFLASH, "census", settings=TelemetrySettings(accept_log_level=None))
    assert t.alarm.threshold == pytest.approx(1.5)  # gamma 1 peaks at 2.0; 1.6 would flag a healthy 1.55
    assert alarm_telemetry().alarm.threshold == pytest.approx(1.6)
