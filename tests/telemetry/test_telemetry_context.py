"""Acceptance by context length (``telemetry/context.py``): the buckets, the summary's ``by_context``,
the context-length ALARM that names its cause and never a harvest override, the Prometheus counters by
bucket, and ``report`` reading them back."""

from __future__ import annotations

import logging

import pytest
from probe_streams import fed
from prometheus_client import CollectorRegistry

from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.logreport.lines import classify
from sglang_dspark_plugin.telemetry import AcceptTelemetry, PrometheusMetrics, TelemetrySettings
from sglang_dspark_plugin.telemetry.context import MIN_REQUEST_ROUNDS, ContextCounts, bucket_names

DFLASH = DsparkHarvest.DFLASH
SETTINGS = TelemetrySettings(accept_log_level=None, summary_every=25, context_buckets=(64, 128))


def test_buckets_are_named_and_filled_by_upper_bound():
    assert bucket_names((512, 1024, 131072)) == ["<=512", "<=1k", "<=128k", ">128k"]
    c = ContextCounts(4, (64, 128))
    c.add([1, 2, 3, 4], [1, 64, 65, 10**6])
    assert c.hist == [[0, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]]
    c.add([0], [1, 2])  # lengths that do not match the counts: not counted
    assert sum(map(sum, c.hist)) == 4
    assert c.per_position(0) == [1.0, 0.5, 0.0, 0.0] and c.mean(2) == 5.0 and c.mean(1) == 4.0


def _serve(t: AcceptTelemetry, rounds: int, short_accepts: int, long_accepts: int) -> None:
    """``rounds`` rounds of two requests: one at 40 tokens of context, one at 500."""
    for _ in range(rounds):
        t.on_verify_complete([short_accepts, long_accepts], contexts=[40, 500])


def test_a_fall_with_context_is_named_with_the_probe_matched_and_never_advises_a_harvest(caplog):
    t = AcceptTelemetry(4, DFLASH, "census", (), settings=SETTINGS, probe=fed(0))
    assert t.alarm.probe.assessment().kind == "matched"
    with caplog.at_level(logging.INFO, logger=t.logger.name):
        _serve(t, 100, short_accepts=3, long_accepts=0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    (alarm,) = [w for w in warnings if "ALARM (context)" in w]  # once, not at every summary
    assert "past 64 tokens the mean accept length is 1.00 against 4.00 below" in alarm  # the first cut
    assert "the live probe measured the drafts at their own positions (matched)" in alarm
    assert "the harvest is not the cause" in alarm and "MEMRA_DSPARK_HARVEST" not in alarm
    summaries = [r.getMessage() for r in caplog.records if "accept summary" in r.getMessage()]
    assert " by_context=[<=64:4.00/100,>128:1.00/100] " in summaries[-1]
    buckets = {b["bucket"]: b for b in t.summary()["by_context"]}
    assert buckets["<=64"]["request_rounds"] == buckets[">128"]["request_rounds"] == 100
    assert buckets[">128"]["per_position"] == [0.0] * 4 and "<=128" not in buckets


@pytest.mark.parametrize(
    ("probe_shift", "short_accepts", "long_accepts", "why"),
    [
        (+1, 3, 0, "the probe measured the drafts one position late: the harvest is the cause"),
        (0, 0, 0, "every bucket collapsed (short contexts are not healthy): not a fall with context"),
        (0, 3, 2, "the long contexts accept two thirds as much: not far below"),
    ],
)
def test_no_context_alarm_where_the_cause_is_not_the_context(
    caplog, probe_shift, short_accepts, long_accepts, why
):
    t = AcceptTelemetry(4, DFLASH, "census", (), settings=SETTINGS, probe=fed(probe_shift))
    with caplog.at_level(logging.WARNING, logger=t.logger.name):
        _serve(t, 100, short_accepts, long_accepts)
    assert not [r for r in caplog.records if "ALARM (context)" in r.getMessage()], why
    assert t.context_alarm is None


def test_too_few_request_rounds_show_no_bucket_and_raise_nothing():
    t = AcceptTelemetry(4, DFLASH, "census", (), settings=SETTINGS)
    _serve(t, MIN_REQUEST_ROUNDS - 1, 3, 0)
    t.log_summary()
    assert " by_context=" not in t.summary_line() and t.context_alarm is None


def test_buckets_off_count_nothing_by_context():
    off = TelemetrySettings(accept_log_level=None, summary_every=0, context_buckets=())
    t = AcceptTelemetry(4, DFLASH, "census", (), settings=off)
    t.on_verify_complete([1], contexts=[10])
    assert t.by_context is None and "by_context" not in t.summary()


def test_prometheus_counts_request_rounds_and_tokens_per_context_bucket():
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(4, registry=registry, sync_every=1000, sync_interval_s=1e9)
    t = AcceptTelemetry(4, DFLASH, "census", (), settings=SETTINGS, metrics=metrics)
    _serve(t, 10, short_accepts=3, long_accepts=0)
    t.summary()
    value = registry.get_sample_value
    assert value("dspark_harvest_context_request_rounds_total", {"context": "<=64"}) == 10.0
    assert value("dspark_harvest_context_accepted_tokens_total", {"context": "<=64"}) == 40.0
    assert value("dspark_harvest_context_accepted_tokens_total", {"context": ">128"}) == 10.0
    by_bucket = [
        value("dspark_harvest_context_request_rounds_total", {"context": b}) for b in t.by_context.names
    ]
    assert sum(by_bucket) == value("dspark_harvest_request_rounds_total") == 20.0


def test_report_reads_the_buckets_and_the_context_alarm():
    t = AcceptTelemetry(4, DFLASH, "census", (), settings=SETTINGS, probe=fed(0))
    _serve(t, 100, short_accepts=3, long_accepts=0)
    kind, line = classify(f"[t] {t.summary_line()}", "f", 1)
    assert kind == "line" and line.fields["by_context"] == "<=64:4.00/100,>128:1.00/100"
    kind, line = classify(f"[t] {t.context_alarm}", "f", 2)
    assert kind == "line" and line.kind == "context_alarm"


def test_the_server_and_the_report_name_the_same_bound_the_widest_healthy_one(tmp_path):
    """Healthy up to 128 tokens, collapsed past it, most traffic past it: pooled past 64, the long side
    is collapsed too, but contexts up to 128 were healthy, so the one rule names 128, for both."""
    from server_logs import Log

    from sglang_dspark_plugin.logreport import read_logs

    settings = TelemetrySettings(summary_every=25, context_buckets=(64, 128), alarm_threshold=1.6)
    log = Log(tmp_path / "server.log")
    t = AcceptTelemetry(4, DFLASH, "census", (), settings=settings, probe=fed(0), logger=log.logger)
    log.logger.info("%s", t.describe())
    for _ in range(100):
        t.on_verify_complete([3, 3, 0, 0, 0, 0, 0, 0], contexts=[40, 100, 500, 600, 700, 800, 900, 1000])
    log.close()
    assert t.context_alarm is not None and "past 128 tokens" in t.context_alarm
    group = read_logs([str(log.path)]).to_json()["groups"][0]
    assert group["verdict"] == "collapse" and "past 128 tokens" in group["why"]
    assert [b["request_rounds"] for b in group["by_context"]] == [100, 100, 600]
