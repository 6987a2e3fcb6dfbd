"""Accept-length telemetry: records, per-position rates, summaries, the alarm, settings and metrics."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_dspark_plugin.draft_config import TIER_STRUCTURAL, DflashCfg, Signal
from sglang_dspark_plugin.errors import GeometryError, HarvestEnvError, SettingsError
from sglang_dspark_plugin.harvest import DsparkHarvest, Resolution
from sglang_dspark_plugin.telemetry import (
    ACCEPT_LOGGER,
    DEFAULT_ALARM_THRESHOLD,
    DEFAULT_ALARM_WARMUP,
    DEFAULT_ALARM_WINDOW,
    DEFAULT_SUMMARY_EVERY,
    AcceptTelemetry,
    PrometheusMetrics,
    RoundRecord,
    TelemetrySettings,
)

REPO = Path(__file__).resolve().parents[1]
ARCH_SIGNAL = Signal("config.json:architectures[0]", "DSparkDraftModel", TIER_STRUCTURAL, "dspark")
DFLASH, DSPARK = DsparkHarvest.DFLASH, DsparkHarvest.DSPARK
QUIET = TelemetrySettings(accept_log_level=None, summary_every=0, alarm_threshold=0.0)


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, contains: str = "", level: int | None = None) -> list[str]:
        return [
            r.getMessage()
            for r in self.records
            if contains in r.getMessage() and (level is None or r.levelno == level)
        ]


@pytest.fixture
def captured():
    """Capture everything the accept logger emits, at every level."""
    logger = logging.getLogger(ACCEPT_LOGGER)
    handler = ListHandler()
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def telemetry(gamma: int = 4, **kw) -> AcceptTelemetry:
    base = dict(accept_log_level=None, summary_every=0, alarm_threshold=0.0)
    base.update(kw)
    return AcceptTelemetry(gamma, DSPARK, "census", (ARCH_SIGNAL,), settings=TelemetrySettings(**base))


# ----------------------------------------------------------------------------- records and statistics


def test_round_record_holds_accept_lengths_and_mean():
    t = telemetry(gamma=4)
    first = t.on_verify_complete([0, 2, 4])
    second = t.on_verify_complete([1, 1])
    assert (first.round_index, first.batch_size, first.accept_lengths) == (1, 3, [1, 3, 5])
    assert first.mean == pytest.approx(3.0)
    assert (second.round_index, second.batch_size, second.accept_lengths) == (2, 2, [2, 2])
    assert second.mean == pytest.approx(2.0)
    assert first.to_json() == {
        "round_index": 1,
        "batch_size": 3,
        "accept_lengths": [1, 3, 5],
        "mean": 3.0,
        "valid": True,
    }
    assert [r.round_index for r in t.records] == [1, 2]


def test_per_position_rates_hand_computed():
    t = telemetry(gamma=4)
    t.on_verify_complete([0, 2, 4])
    t.on_verify_complete([1, 1])
    # 5 request-rounds; draft k accepted where count >= k: k=1 -> {2,4,1,1}, k=2 -> {2,4}, k=3,4 -> {4}
    assert t.accepted_per_position() == [4, 2, 1, 1]
    assert t.per_position_rates() == pytest.approx([0.8, 0.4, 0.2, 0.2])
    assert t.mean_accept_length() == pytest.approx(1 + 8 / 5)
    assert (t.rounds, t.request_rounds, t.accepted_drafts) == (2, 5, 8)


def test_no_data_gives_none_not_a_made_up_number():
    t = telemetry()
    assert t.mean_accept_length() is None
    assert t.per_position_rates() is None
    assert t.window_mean() is None
    empty = t.on_verify_complete([])
    assert (empty.batch_size, empty.accept_lengths) == (0, [])
    assert t.rounds == 0 and t.mean_accept_length() is None


@settings(max_examples=60, deadline=None)
@given(
    gamma=st.integers(1, 8),
    data=st.data(),
)
def test_statistics_match_a_brute_force_recount(gamma, data):
    rounds = data.draw(
        st.lists(st.lists(st.integers(0, gamma), min_size=1, max_size=12), min_size=1, max_size=20)
    )
    t = telemetry(gamma=gamma)
    for counts in rounds:
        record = t.on_verify_complete(counts)
        assert record.accept_lengths == [n + 1 for n in counts]
        assert record.mean == pytest.approx(sum(record.accept_lengths) / len(counts))
    flat = [n for counts in rounds for n in counts]
    assert t.mean_accept_length() == pytest.approx(sum(n + 1 for n in flat) / len(flat))
    expected = [sum(1 for n in flat if n >= k) / len(flat) for k in range(1, gamma + 1)]
    assert t.per_position_rates() == pytest.approx(expected)
    # Identity: the per-position rates add up to the mean number of accepted drafts.
    assert sum(t.per_position_rates()) == pytest.approx(t.mean_accept_length() - 1)


def test_records_are_a_bounded_ring_buffer():
    t = telemetry(record_capacity=5)
    for _ in range(12):
        t.on_verify_complete([1])
    assert [r.round_index for r in t.records] == [8, 9, 10, 11, 12]
    assert t.rounds == 12  # the statistics keep counting past the buffer


def test_summary_is_json_and_complete():
    clock = iter([10.0, 12.5]).__next__
    t = AcceptTelemetry(3, DFLASH, "default", settings=QUIET, clock=clock)
    t.on_verify_complete([3, 0])
    out = t.summary()
    json.dumps(out)
    assert out["rounds"] == 1 and out["request_rounds"] == 2
    assert out["mean_accept_length"] == pytest.approx(2.5)
    assert out["per_position"] == pytest.approx([0.5, 0.5, 0.5])
    assert (out["harvest"], out["source"], out["alarms_fired"]) == ("dflash", "default", 0)
    assert out["accept_length_histogram"] == {"1": 1, "2": 0, "3": 0, "4": 1}
    assert out["elapsed_s"] == pytest.approx(2.5)


def test_from_resolution_carries_harvest_source_and_evidence():
    cfg = DflashCfg(path="ckpt", block_size=8, evidence=(ARCH_SIGNAL,), deciding_tier=TIER_STRUCTURAL)
    t = AcceptTelemetry.from_resolution(Resolution.of(cfg, None), gamma=8, settings=QUIET)
    assert (t.harvest, t.source, t.evidence, t.gamma) == ("dspark", "census", (ARCH_SIGNAL,), 8)


def test_bad_constructor_arguments_are_typed_errors():
    with pytest.raises(GeometryError, match="gamma=0"):
        AcceptTelemetry(0, DSPARK, "census", settings=QUIET)
    with pytest.raises(HarvestEnvError, match="'dspak'"):
        AcceptTelemetry(4, "dspak", "census", settings=QUIET)
    with pytest.raises(HarvestEnvError, match="'dspark' is not a DsparkHarvest"):
        AcceptTelemetry(4, "dspark", "census", settings=QUIET)
    with pytest.raises(SettingsError, match="alarm_window"):
        TelemetrySettings(alarm_window=0)


def test_metrics_for_another_gamma_are_refused_at_construction():
    from prometheus_client import CollectorRegistry

    metrics = PrometheusMetrics(3, CollectorRegistry())
    with pytest.raises(GeometryError, match="gamma=3 but the telemetry has gamma=4"):
        AcceptTelemetry(4, DSPARK, "census", settings=QUIET, metrics=metrics)


# ----------------------------------------------------------------------------- log lines and levels


def test_one_line_per_round_at_info_by_default(captured):
    t = AcceptTelemetry(4, DSPARK, "census", settings=TelemetrySettings(summary_every=0))
    t.on_verify_complete([2, 0, 3])
    lines = captured.messages("dspark accept round=")
    assert lines == ["dspark accept round=1 bs=3 accept_len=[3,1,4] mean=2.67 harvest=dspark(census)"]
    assert captured.records[-1].levelno == logging.INFO
    assert captured.records[-1].name == ACCEPT_LOGGER


@pytest.mark.parametrize("raw, level", [("DEBUG", logging.DEBUG), ("warning", logging.WARNING), ("25", 25)])
def test_per_round_level_is_configurable(captured, raw, level):
    s = TelemetrySettings.from_env({"MEMRA_DSPARK_ACCEPT_LOG_LEVEL": raw, "MEMRA_DSPARK_SUMMARY_EVERY": "0"})
    t = AcceptTelemetry(2, DFLASH, "env", settings=s)
    t.on_verify_complete([1])
    rounds = [r for r in captured.records if "accept round=" in r.getMessage()]
    assert [r.levelno for r in rounds] == [level]


def test_level_off_silences_round_lines_but_not_summaries(captured):
    s = TelemetrySettings.from_env(
        {"MEMRA_DSPARK_ACCEPT_LOG_LEVEL": "off", "MEMRA_DSPARK_SUMMARY_EVERY": "2"}
    )
    assert s.accept_log_level is None
    t = AcceptTelemetry(2, DFLASH, "env", settings=s)
    for _ in range(4):
        t.on_verify_complete([1, 2])
    assert captured.messages("accept round=") == []
    assert len(captured.messages("accept summary")) == 2


def test_logger_threshold_filters_round_lines(captured):
    logging.getLogger(ACCEPT_LOGGER).setLevel(logging.WARNING)
    t = AcceptTelemetry(2, DFLASH, "census", settings=TelemetrySettings(summary_every=0))
    t.on_verify_complete([1])
    assert captured.records == []
    assert t.rounds == 1  # filtered lines still count


def test_summary_cadence_and_content(captured):
    s = TelemetrySettings(accept_log_level=None, summary_every=3)
    t = AcceptTelemetry(2, DSPARK, "census", settings=s)
    for i in range(10):
        t.on_verify_complete([2, 0] if i < 6 else [0, 0])
    lines = captured.messages("dspark accept summary")
    assert len(lines) == 3  # rounds 3, 6, 9
    assert lines[0].startswith("dspark accept summary rounds=3 request_rounds=6 mean_accept_len=2.00 ")
    assert "per_position=[0.50,0.50]" in lines[0] and "harvest=dspark(census)" in lines[0]
    # The third summary covers rounds 7..9 only (all collapsed) next to the cumulative mean.
    assert "last_3_rounds=1.00" in lines[2] and "mean_accept_len=1.67" in lines[2]


def test_no_summary_when_disabled(captured):
    s = TelemetrySettings(accept_log_level=None, summary_every=0)
    t = AcceptTelemetry(2, DSPARK, "census", settings=s)
    for _ in range(50):
        t.on_verify_complete([1])
    assert captured.messages("summary") == []


# ----------------------------------------------------------------------------- the alarm


def alarm_telemetry(source: str = "census", evidence=(ARCH_SIGNAL,), **kw) -> AcceptTelemetry:
    base = dict(accept_log_level=None, summary_every=0, alarm_threshold=1.6, alarm_warmup=5, alarm_window=10)
    base.update(kw)
    return AcceptTelemetry(4, DSPARK, source, evidence, settings=TelemetrySettings(**base))


def test_alarm_fires_after_warmup_on_a_collapsed_stream_once_per_window(captured):
    t = alarm_telemetry()
    for _ in range(14):
        t.on_verify_complete([0, 0, 1, 0])
    # Warm-up (5 rounds) plus a full window (10 rounds) not yet seen.
    assert t.alarms == [] and captured.messages("ALARM") == []
    for _ in range(20):
        t.on_verify_complete([0, 0, 1, 0])
    assert [a.round_index for a in t.alarms] == [15, 25]  # at most one per 10-round window
    assert t.alarms[0].window_mean == pytest.approx(1.25)
    warnings = captured.messages("ALARM", level=logging.WARNING)
    assert len(warnings) == 2
    msg = warnings[0]
    assert "harvest=dspark" in msg and "source=census" in msg
    assert "config.json:architectures[0]='DSparkDraftModel' -> dspark" in msg
    assert "wrong convention" in msg and "toward 1.0" in msg
    assert "MEMRA_DSPARK_HARVEST=dflash" in msg
    assert t.summary()["alarms_fired"] == 2


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
    assert t.alarms_fired == len(expected)
    assert (
        [(a.round_index, a.window_mean) for a in t.alarms]
        == [  # the 16 most recent are kept
            (i, pytest.approx(m)) for i, m in expected[-16:]
        ]
    )


def test_alarm_does_not_fire_on_a_healthy_stream(captured):
    t = alarm_telemetry()
    for i in range(300):
        t.on_verify_complete([i % 5, 2, 1, 3])  # mean accept length 3.0
    assert t.alarms == [] and captured.messages("ALARM") == []
    assert t.window_mean() == pytest.approx(3.0)


def test_alarm_does_not_fire_before_warmup(captured):
    t = alarm_telemetry(alarm_warmup=100, alarm_window=10)
    for _ in range(109):
        t.on_verify_complete([0])
    assert t.alarms == []
    t.on_verify_complete([0])
    assert [a.round_index for a in t.alarms] == [110]


def test_alarm_fires_when_a_healthy_stream_collapses():
    t = alarm_telemetry()
    for _ in range(40):
        t.on_verify_complete([3, 3])
    assert t.alarms == []
    for _ in range(10):
        t.on_verify_complete([0, 0])
    assert len(t.alarms) == 1 and t.alarms[0].window_mean < 1.6


def test_alarm_window_mean_is_weighted_by_requests():
    t = alarm_telemetry(alarm_warmup=0, alarm_window=2)
    t.on_verify_complete([4])  # one request, accept length 5
    t.on_verify_complete([0] * 9)  # nine requests, accept length 1
    # Per-round means average to 3.0, but the window holds 14 tokens over 10 request-rounds: 1.4.
    assert [a.window_mean for a in t.alarms] == [pytest.approx(1.4)]


def test_alarm_for_an_env_override_names_both_ways_out():
    t = alarm_telemetry(source="env")
    for _ in range(15):
        t.on_verify_complete([0])
    msg = t.alarms[0].message
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
    msg = t.alarms[0].message
    assert "no census signal" in msg and "MEMRA_DSPARK_HARVEST=dspark" in msg and "harvest=dflash" in msg


def test_alarm_disabled_by_threshold_zero():
    t = alarm_telemetry(alarm_threshold=0.0)
    for _ in range(100):
        t.on_verify_complete([0])
    assert t.alarms == []


def test_alarm_threshold_is_capped_for_tiny_blocks():
    t = AcceptTelemetry(1, DFLASH, "census", settings=TelemetrySettings(accept_log_level=None))
    assert t.alarm_threshold == pytest.approx(1.5)  # gamma 1 peaks at 2.0; 1.6 would flag a healthy 1.55
    assert alarm_telemetry().alarm_threshold == pytest.approx(1.6)


# ----------------------------------------------------------------------------- out-of-range counts


@pytest.mark.parametrize("bad", [[5, 0], [-1, 2], [1, 2.0, 3], [1, "2"]])
def test_out_of_range_counts_are_reported_once_and_kept_out(captured, bad):
    t = telemetry(gamma=4)
    t.on_verify_complete([1, 2])
    before = t.summary()
    record = t.on_verify_complete(bad)
    t.on_verify_complete(bad)
    assert record.valid is False and record.batch_size == len(bad)
    assert json.loads(json.dumps(record.to_json(), allow_nan=False))["mean"] is None
    after = t.summary()
    for key in (
        "rounds",
        "request_rounds",
        "accepted_drafts",
        "accepted_per_position",
        "accept_length_histogram",
    ):
        assert after[key] == before[key], key
    assert after["invalid_rounds"] == 2
    errors = captured.messages(level=logging.ERROR)
    assert len(errors) == 1
    assert "gamma=4" in errors[0] and "speculative_num_draft_tokens must be gamma+1=5" in errors[0]
    t.on_verify_complete([4])
    assert t.rounds == 2 and t.records[-1].valid


@pytest.mark.parametrize("gamma", [4, 16, 300])
@pytest.mark.parametrize("bs", [3, 64, 300])
def test_round_line_and_statistics_are_the_same_on_every_path(captured, gamma, bs):
    # bytes fast path (gamma < 255, the text built by translation from bs 17 on), array path (gamma 300)
    rng = random.Random(gamma * 1000 + bs)
    t = telemetry(gamma=gamma, accept_log_level=logging.INFO)
    flat: list[int] = []
    rounds = 300 if bs == 300 else 3  # 300 x 300 counts: the buffered counts are folded in mid-stream
    for i in range(rounds):
        counts = [rng.choice([0, 1, gamma, rng.randint(0, gamma)]) for _ in range(bs)]
        record = t.on_verify_complete(counts)
        flat += counts
        assert record.accept_lengths == [n + 1 for n in counts]
        mean = sum(n + 1 for n in counts) / bs
        line = captured.messages(f"dspark accept round={i + 1} ")[0]
        assert line == (
            f"dspark accept round={i + 1} bs={bs} accept_len=[{','.join(str(n + 1) for n in counts)}] "
            f"mean={mean:.2f} harvest=dspark(census)"
        )
    histogram = t.summary()["accept_length_histogram"]
    assert histogram == {str(n + 1): flat.count(n) for n in range(gamma + 1)}
    assert t.accepted_drafts == sum(flat) and t.request_rounds == len(flat)


def test_each_round_line_is_its_own_log_record_with_its_own_time_and_thread(captured):
    clock = iter(range(100)).__next__
    t = AcceptTelemetry(4, DSPARK, "census", settings=TelemetrySettings(summary_every=0), clock=clock)
    t.on_verify_complete([1])
    t.on_verify_complete([2, 3])
    worker = threading.Thread(target=t.on_verify_complete, args=([4],), name="overlap-thread")
    worker.start()
    worker.join()
    first, second, third = captured.records
    assert first is not second  # a handler may keep the records it was given
    assert [r.getMessage().split(" mean=")[0] for r in (first, second, third)] == [
        "dspark accept round=1 bs=1 accept_len=[2]",
        "dspark accept round=2 bs=2 accept_len=[3,4]",
        "dspark accept round=3 bs=1 accept_len=[5]",
    ]
    assert first.created <= second.created <= third.created
    assert (first.threadName, third.threadName) == (threading.current_thread().name, "overlap-thread")
    assert second.funcName == "on_verify_complete" and second.levelno == logging.INFO
    assert second.relativeCreated >= first.relativeCreated


def test_a_custom_log_record_factory_builds_every_round_record(captured):
    made: list[str] = []
    default = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = default(*args, **kwargs)
        made.append(record.getMessage())
        record.request_id = len(made)
        return record

    logging.setLogRecordFactory(factory)
    try:
        t = AcceptTelemetry(4, DSPARK, "census", settings=TelemetrySettings(summary_every=0))
        t.on_verify_complete([1])
        t.on_verify_complete([2])
    finally:
        logging.setLogRecordFactory(default)
    assert len(made) == 2 and [r.request_id for r in captured.records] == [1, 2]


def test_data_parallel_rank_tags_every_line(captured):
    s = TelemetrySettings(summary_every=2, alarm_warmup=0, alarm_window=2)
    t = AcceptTelemetry(4, DSPARK, "census", settings=s, dp_rank=3)
    for _ in range(2):
        t.on_verify_complete([0, 0])
    rounds = captured.messages("dspark accept round=")
    assert rounds[0] == "dspark accept round=1 bs=2 accept_len=[1,1] mean=1.00 harvest=dspark(census) dp=3"
    assert captured.messages("accept summary")[0].endswith(" dp=3")
    assert captured.messages("ALARM")[0].endswith(" dp=3")
    assert t.describe().endswith(" dp=3") and t.summary()["dp_rank"] == 3
    untagged = AcceptTelemetry(4, DSPARK, "census", settings=QUIET)
    assert "dp=" not in untagged.summary_line() and untagged.summary()["dp_rank"] is None


# ----------------------------------------------------------------------------- settings from the environment


def test_defaults_from_an_empty_environment():
    s = TelemetrySettings.from_env({})
    assert s == TelemetrySettings()
    assert (s.accept_log_level, s.summary_every, s.alarm_threshold) == (
        logging.INFO,
        DEFAULT_SUMMARY_EVERY,
        DEFAULT_ALARM_THRESHOLD,
    )
    assert (s.alarm_warmup, s.alarm_window) == (DEFAULT_ALARM_WARMUP, DEFAULT_ALARM_WINDOW)


def test_every_variable_is_read(monkeypatch):
    for var, value in {
        "MEMRA_DSPARK_ACCEPT_LOG_LEVEL": " debug ",
        "MEMRA_DSPARK_SUMMARY_EVERY": "off",
        "MEMRA_DSPARK_ALARM_THRESHOLD": "2.25",
        "MEMRA_DSPARK_ALARM_WARMUP": "0",
        "MEMRA_DSPARK_ALARM_WINDOW": "64",
    }.items():
        monkeypatch.setenv(var, value)
    s = TelemetrySettings.from_env()
    assert s == TelemetrySettings(logging.DEBUG, 0, 2.25, 0, 64)
    assert s.to_json()["accept_log_level"] == "DEBUG"


@pytest.mark.parametrize(
    "var, raw",
    [
        ("MEMRA_DSPARK_ACCEPT_LOG_LEVEL", "verbose"),
        ("MEMRA_DSPARK_ACCEPT_LOG_LEVEL", ""),
        ("MEMRA_DSPARK_ACCEPT_LOG_LEVEL", "99"),
        ("MEMRA_DSPARK_SUMMARY_EVERY", "-1"),
        ("MEMRA_DSPARK_SUMMARY_EVERY", "ten"),
        ("MEMRA_DSPARK_ALARM_THRESHOLD", "abc"),
        ("MEMRA_DSPARK_ALARM_THRESHOLD", "nan"),
        ("MEMRA_DSPARK_ALARM_THRESHOLD", "-0.5"),
        ("MEMRA_DSPARK_ALARM_WARMUP", "1.5"),
        ("MEMRA_DSPARK_ALARM_WINDOW", "0"),
        ("MEMRA_DSPARK_ALARM_WINDOW", "off"),
    ],
)
def test_bad_values_are_refused_by_name(var, raw):
    with pytest.raises(SettingsError) as info:
        TelemetrySettings.from_env({var: raw})
    err = info.value
    assert err.kind == "env" and err.where == var
    assert var in err.message and repr(raw) in err.message and "accepted values" in err.message


# ----------------------------------------------------------------------------- Prometheus metrics


def test_metrics_counters_follow_the_telemetry():
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(4, registry=registry, sync_every=4, sync_interval_s=1e9)
    t = AcceptTelemetry(4, DSPARK, "census", settings=QUIET, metrics=metrics)
    value = registry.get_sample_value
    assert value("dspark_harvest_info", {"harvest": "dspark", "source": "census"}) == 1.0
    for _ in range(3):
        t.on_verify_complete([0, 2, 4])
    assert value("dspark_harvest_rounds_total") == 0.0  # pushed every 4 rounds, not every round
    t.on_verify_complete([1, 1])
    assert value("dspark_harvest_rounds_total") == 4.0
    assert value("dspark_harvest_request_rounds_total") == 11.0
    assert value("dspark_harvest_accepted_drafts_total") == 20.0
    assert value("dspark_harvest_accepted_tokens_total") == 31.0  # drafts + one bonus per request-round
    positions = [value("dspark_harvest_position_accepted_total", {"position": str(k)}) for k in range(1, 5)]
    assert positions == [8.0, 6.0, 3.0, 3.0]
    t.on_verify_complete([4])
    t.summary()  # syncs
    assert value("dspark_harvest_rounds_total") == 5.0
    assert value("dspark_harvest_position_accepted_total", {"position": "4"}) == 4.0


def test_metrics_are_pushed_after_an_interval_even_at_low_traffic():
    from prometheus_client import CollectorRegistry

    now = [0.0]
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(
        2, registry=registry, sync_every=1000, sync_interval_s=1.0, clock=lambda: now[0]
    )
    t = AcceptTelemetry(2, DFLASH, "census", settings=QUIET, metrics=metrics)
    t.on_verify_complete([1, 2])
    now[0] = 0.5
    t.on_verify_complete([0])
    assert registry.get_sample_value("dspark_harvest_rounds_total") == 0.0
    now[0] = 1.2
    t.on_verify_complete([2])
    assert registry.get_sample_value("dspark_harvest_rounds_total") == 3.0
    assert registry.get_sample_value("dspark_harvest_accepted_tokens_total") == 9.0


def test_metrics_count_alarms_and_carry_constant_labels():
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(4, registry=registry, labels={"tp_rank": "0"}, sync_every=1)
    t = alarm_telemetry()
    t.metrics = metrics
    metrics.set_harvest(t.harvest, t.source)
    for _ in range(15):
        t.on_verify_complete([0])
    assert registry.get_sample_value("dspark_harvest_alarms_total", {"tp_rank": "0"}) == 1.0
    info = {"tp_rank": "0", "harvest": "dspark", "source": "census"}
    assert registry.get_sample_value("dspark_harvest_info", info) == 1.0


def test_metrics_can_be_created_twice_in_one_registry():
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    first, second = (
        AcceptTelemetry(2, DFLASH, "census", settings=QUIET, metrics=PrometheusMetrics(2, registry))
        for _ in range(2)
    )
    first.on_verify_complete([1])
    second.on_verify_complete([2, 0])
    first.summary()
    second.summary()
    # Counters are per process: both telemetry objects add to the same series.
    assert registry.get_sample_value("dspark_harvest_request_rounds_total") == 3.0
    with pytest.raises(SettingsError, match="other label names"):
        PrometheusMetrics(2, registry=registry, labels={"tp_rank": "0"})


def test_metrics_without_prometheus_client_is_a_typed_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # makes the import fail
    with pytest.raises(SettingsError, match="prometheus_client") as info:
        PrometheusMetrics(4)
    assert "--enable-metrics" in info.value.message


# ----------------------------------------------------------------------------- the benchmark script


def test_bench_script_prints_the_three_batch_sizes():
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench_telemetry.py"),
            "--rounds",
            "300",
            "--repeats",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    report = json.loads(out.stdout)
    assert set(report["us_per_round"]) == {"file", "file+metrics", "null-handler", "logger-warning"}
    for row in report["us_per_round"].values():
        assert set(row) == {"1", "64", "256"} and all(v > 0 for v in row.values())
    assert report["target"] in {"MET", "MISSED"} and set(report["targets"]) == {"64", "256"}
    assert all(report["log_bytes_per_round"][bs] > 60 for bs in ("1", "64", "256"))  # a real file was written
    assert out.stderr == ""  # nothing leaks to the console from the timed loop


def test_bench_demo_shows_the_collapse_alarm_and_metrics():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMRA_DSPARK_")}
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_telemetry.py"), "--demo"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    )
    lines = out.stdout.splitlines()
    assert sum("dspark accept round=" in line for line in lines) == 12
    assert sum("dspark accept summary" in line for line in lines) == 3
    alarms = [line for line in lines if "ALARM" in line]
    assert len(alarms) == 1 and "MEMRA_DSPARK_HARVEST=dflash" in alarms[0]
    assert 'dspark_harvest_info{harvest="dspark",source="census"} 1.0' in lines
    assert "dspark_harvest_rounds_total 12.0" in lines


def test_round_record_is_a_plain_dataclass():
    record = RoundRecord(7, 2, [1, 3], 2.0)
    assert record.valid and record.to_json()["accept_lengths"] == [1, 3]


MULTIPROCESS_SCRIPT = """
import json, sys
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.telemetry import AcceptTelemetry, PrometheusMetrics, TelemetrySettings

quiet = TelemetrySettings(accept_log_level=None, summary_every=0, alarm_threshold=0.0)
t = AcceptTelemetry(3, DsparkHarvest.DSPARK, "env", settings=quiet, metrics=PrometheusMetrics(3))
t.on_verify_complete([3, 0, 1])
t.summary()
registry = CollectorRegistry()
MultiProcessCollector(registry)
get = registry.get_sample_value
print(json.dumps({
    "rounds": get("dspark_harvest_rounds_total"),
    "tokens": get("dspark_harvest_accepted_tokens_total"),
    "pos1": get("dspark_harvest_position_accepted_total", {"position": "1"}),
    "info": get("dspark_harvest_info", {"harvest": "dspark", "source": "env"}),
}))
"""


def test_metrics_work_in_prometheus_multiprocess_mode(tmp_path):
    # sglang runs prometheus_client in multiprocess mode; the mode is fixed at import, hence a subprocess.
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", MULTIPROCESS_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"rounds": 1.0, "tokens": 7.0, "pos1": 2.0, "info": 1.0}
    assert list(tmp_path.iterdir())  # the values went through the multiprocess files
