"""Prometheus export (``telemetry/metrics.py``): the counters follow the accept counter and the alarm,
pushed in batches, with constant labels, in one registry twice, and in multiprocess mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry

from sglang_dspark_plugin.errors import GeometryError, SettingsError
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.telemetry import AcceptCounts, AcceptTelemetry, PrometheusMetrics, TelemetrySettings

DFLASH, DSPARK = DsparkHarvest.DFLASH, DsparkHarvest.DSPARK
QUIET = TelemetrySettings(accept_log_level=None, summary_every=0, alarm_threshold=0.0)


def test_metrics_counters_follow_the_telemetry():
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
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(4, registry=registry, labels={"tp_rank": "0"}, sync_every=1)
    alarming = TelemetrySettings(accept_log_level=None, summary_every=0, alarm_warmup=5, alarm_window=10)
    t = AcceptTelemetry(4, DSPARK, "census", settings=alarming, metrics=metrics)
    for _ in range(15):
        t.on_verify_complete([0])
    assert registry.get_sample_value("dspark_harvest_alarms_total", {"tp_rank": "0"}) == 1.0
    info = {"tp_rank": "0", "harvest": "dspark", "source": "census"}
    assert registry.get_sample_value("dspark_harvest_info", info) == 1.0


def test_metrics_can_be_created_twice_in_one_registry():
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


def test_metrics_for_another_gamma_are_refused():
    metrics = PrometheusMetrics(3, CollectorRegistry())
    with pytest.raises(GeometryError, match="gamma=3 but the telemetry has gamma=4"):
        AcceptTelemetry(4, DSPARK, "census", settings=QUIET, metrics=metrics)
    with pytest.raises(GeometryError, match="gamma=3 but the counts have gamma=4") as info:
        metrics.sync(AcceptCounts(4), alarms_fired=0)
    assert info.value.where == "PrometheusMetrics.sync(counts=...)"


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


def test_metrics_export_the_live_probes_matches_and_comparisons_per_offset():
    from sglang_dspark_plugin.probe.live import LiveProbe, ProbeSettings, VerifyRow

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(4, registry=registry, sync_every=1000, sync_interval_s=1e9)
    probe = LiveProbe(DFLASH, ProbeSettings(rounds=10**9))
    t = AcceptTelemetry(4, DFLASH, "census", settings=QUIET, metrics=metrics, probe=probe)
    probe.begin_round()  # the sequence 100 + i at position i, as in tests/probe/test_live_probe.py
    probe.observe("a", 3, 103, VerifyRow((104, 999, 107, 105), (104, 105)))
    probe.begin_round()
    probe.observe("a", 5, 105, VerifyRow((106, 107, 108, 109), (106, 107, 108)))
    t.on_verify_complete([1])
    t.summary()  # syncs
    value = registry.get_sample_value
    got = {
        offset: (
            value("dspark_harvest_probe_matches_total", {"offset": offset}),
            value("dspark_harvest_probe_compared_total", {"offset": offset}),
        )
        for offset in ("own", "late", "early")
    }
    assert got == {"own": (1.0, 4.0), "late": (1.0, 4.0), "early": (0.0, 3.0)}  # probe.counts, by offset
    probe.finish("a")
    t.summary()  # only the increase since the last push is added
    assert value("dspark_harvest_probe_matches_total", {"offset": "own"}) == 4.0
    assert value("dspark_harvest_probe_compared_total", {"offset": "early"}) == 6.0


def test_metrics_export_what_the_plugin_holds_and_what_its_sweep_dropped():
    from sglang_dspark_plugin.probe.live import LiveProbe, ProbeSettings, VerifyRow

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(4, registry=registry, sync_every=1000, sync_interval_s=1e9)
    probe = LiveProbe(DFLASH, ProbeSettings(rounds=10**9), stale_rounds=2)
    t = AcceptTelemetry(4, DFLASH, "census", settings=QUIET, metrics=metrics, probe=probe)
    value = registry.get_sample_value
    probe.begin_round()
    probe.observe("a", 3, 103, VerifyRow((104, 999, 107, 105), (104, 105)))
    probe.observe("b", 3, 103, VerifyRow((104, 999, 107, 105), (104, 105)))
    t.on_verify_complete([1, 1])
    t.summary()
    assert value("dspark_harvest_probe_requests_held") == 2.0
    assert value("dspark_harvest_probe_swept_requests_total") == 0.0
    probe.finish("a")
    for _ in range(4):  # "b" is never reported finished: the sweep drops it after stale_rounds
        probe.begin_round()
    t.summary()
    assert value("dspark_harvest_probe_requests_held") == 0.0  # back to 0: nothing leaks
    assert value("dspark_harvest_probe_swept_requests_total") == 1.0
    assert t.summary()["state"]["swept_requests"] == 1
    assert value("dspark_harvest_queued_steps") == 0.0


def test_the_held_gauge_follows_a_finished_request_on_an_idle_server():
    from sglang_dspark_plugin.probe.live import LiveProbe, ProbeSettings, VerifyRow
    from sglang_dspark_plugin.telemetry import DeferredRounds

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(4, registry=registry, sync_every=1000, sync_interval_s=1e9)
    probe = LiveProbe(DFLASH, ProbeSettings(rounds=10**9))
    t = AcceptTelemetry(4, DFLASH, "census", settings=QUIET, metrics=metrics, probe=probe)
    rounds = DeferredRounds(t, probe, every=8)
    probe.begin_round()
    probe.observe("a", 3, 103, VerifyRow((104, 999, 107, 105), (104, 105)))
    t.summary()
    assert registry.get_sample_value("dspark_harvest_probe_requests_held") == 1.0
    rounds.finish("a")  # the request's end, and no round after it: the gauge still reaches 0
    assert registry.get_sample_value("dspark_harvest_probe_requests_held") == 0.0


@pytest.mark.parametrize(
    ("labels", "says"),
    [
        ({"context": "a"}, "a label of the plugin's own series"),
        ({"harvest": "a"}, "a label of the plugin's own series"),
        ({"source": "a"}, "a label of the plugin's own series"),
        ({7: "a"}, "not a Prometheus label name"),
        ({"9lives": "a"}, "not a Prometheus label name"),
        ({"__name": "a"}, "not a Prometheus label name"),
        ({"server": 3}, "not a string"),
    ],
)
def test_a_constant_label_that_cannot_be_one_is_refused_naming_the_setting(labels, says):
    with pytest.raises(SettingsError, match=says) as refused:
        PrometheusMetrics(4, registry=CollectorRegistry(), labels=labels)
    assert refused.value.where == "PrometheusMetrics(labels=...)"
