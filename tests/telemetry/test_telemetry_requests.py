"""Per-request acceptance: one line per finished request (``MEMRA_DSPARK_REQUEST_LOG``), its histogram in
Prometheus, and ``report`` reading the lines back into a distribution and the worst requests."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.logreport import read_logs
from sglang_dspark_plugin.telemetry import AcceptTelemetry, PrometheusMetrics, TelemetrySettings
from sglang_dspark_plugin.telemetry.deferred import DeferredRounds
from sglang_dspark_plugin.telemetry.requests import MAX_RID, STALE_ROUNDS, rid_text

QUIET = TelemetrySettings(accept_log_level=None, summary_every=0, alarm_threshold=0.0)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _telemetry(settings=QUIET, metrics=None, dp=None):
    logger = logging.getLogger(f"requests-test-{id(settings)}-{dp}-{id(metrics)}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = Lines()
    logger.handlers = [handler]
    t = AcceptTelemetry(
        4, DsparkHarvest.DFLASH, "census", settings=settings, metrics=metrics, logger=logger, dp_rank=dp
    )
    return t, handler.lines


def _requests(lines):
    return [line for line in lines if line.startswith("dspark accept request ")]


def test_a_finished_request_gets_one_line_with_its_own_rounds_and_contexts():
    t, lines = _telemetry()
    t.on_verify_complete([2, 0], contexts=[10, 50], rids=["a", "b"])
    t.on_verify_complete([4, 1], contexts=[13, 51], rids=["a", "b"])
    t.on_verify_complete([3], contexts=[18], rids=["a"])
    t.finish_request("b")
    t.finish_request("a")
    t.finish_request("never-counted")  # one token, or every round left out: no line
    assert _requests(lines) == [
        "dspark accept request rid=b rounds=2 accepted_drafts=1 accept_len=1.50 context_first=50 "
        "context_last=51 harvest=dflash(census)",
        "dspark accept request rid=a rounds=3 accepted_drafts=9 accept_len=4.00 context_first=10 "
        "context_last=18 harvest=dflash(census)",
    ]
    assert t.requests.held == 0 and t.requests.logged == 2


def test_the_setting_turns_the_line_off():
    t, lines = _telemetry(TelemetrySettings(accept_log_level=None, summary_every=0, request_log=False))
    t.on_verify_complete([2], rids=["a"])
    t.finish_request("a")
    assert t.requests is None and _requests(lines) == []
    assert TelemetrySettings.from_env({"MEMRA_DSPARK_REQUEST_LOG": "off"}).request_log is False
    assert TelemetrySettings.from_env({}).request_log is True


def test_a_client_chosen_id_cannot_break_or_forge_a_line():
    forged = "x rounds=1 accepted_drafts=0 accept_len=1.00\ndspark accept ALARM: é"
    text = rid_text(forged)
    assert " " not in text and "\n" not in text and text.startswith("x%20rounds%3D1")
    assert len(rid_text("r" * 1000)) == MAX_RID and rid_text("") == "-"
    t, lines = _telemetry()
    t.on_verify_complete([1], rids=[forged])
    t.finish_request(forged)
    (line,) = _requests(lines)
    assert line.count("rounds=") == 1 and line.endswith("harvest=dflash(census)")


def test_requests_never_reported_finished_are_swept_not_held_forever():
    t, _ = _telemetry()
    t.on_verify_complete([1], rids=["lost"])
    for _ in range(2 * STALE_ROUNDS):  # swept at the sweep after STALE_ROUNDS rounds unseen
        t.on_verify_complete([1], rids=["busy"])
    assert t.requests.held == 1 and t.requests.swept == 1  # "busy" is live; "lost" dropped


def test_the_histogram_observes_each_finished_request():
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(4, registry=registry)
    t, _ = _telemetry(metrics=metrics)
    t.on_verify_complete([4, 0], rids=["a", "b"])
    t.finish_request("a")
    t.finish_request("b")
    value = registry.get_sample_value
    assert value("dspark_harvest_request_accept_length_count") == 2.0
    assert value("dspark_harvest_request_accept_length_sum") == 6.0  # 5.0 + 1.0
    assert value("dspark_harvest_request_accept_length_bucket", {"le": "1.0"}) == 1.0


def test_the_queue_without_a_probe_still_ends_requests_in_order():
    t, lines = _telemetry()
    queue = DeferredRounds(t, None, every=64)
    queue.round([2, 1], [("a", 4, 1, 7, True), ("b", 4, 1, 7, True)])
    queue.finish("a")
    assert _requests(lines) == []  # "b" still runs: the queue waits
    queue.round([0, 3], [("a", 4, 3, 7, False), ("b", 4, 2, 7, True)])  # "a" had finished
    queue.finish("b")  # the batch drained: the queue ran, rounds before ends
    assert [line.split()[3] for line in _requests(lines)] == ["rid=a", "rid=b"]
    assert "rounds=2 accepted_drafts=4" in _requests(lines)[1]


def test_report_reads_the_lines_into_a_distribution_and_the_worst_requests(tmp_path):
    t, lines = _telemetry()
    for i in range(30):
        rid = f"req-{i}"
        for _ in range(5):
            t.on_verify_complete([0 if i < 3 else 3], rids=[rid])
        t.finish_request(rid)
    log = tmp_path / "server.log"
    bogus = "dspark accept request rid=z rounds=4 accepted_drafts=4 accept_len=3.00 context_first=0 "
    log.write_text(
        "\n".join(f"[2026-12-05 10:00:00] {line}" for line in lines)
        + f"\n[2026-12-05 10:00:00] {bogus}context_last=0 harvest=dflash(census)\n"
    )
    (group,) = read_logs([str(log)]).to_json()["groups"]
    per = group["per_request"]
    assert per["requests"] == 30 and per["rejected_lines"] == 1
    assert per["mean_accept_length"] == pytest.approx(1 + (27 * 3 * 5) / 150)
    assert {b["accept_length"]: b["requests"] for b in per["distribution"] if b["requests"]} == {
        "<=1.25": 3,
        "<=4": 27,
    }
    assert [w["rid"] for w in per["worst"][:3]] == ["req-0", "req-1", "req-2"]
    assert per["worst"][0]["accept_length"] == 1.0 and per["worst"][0]["rounds"] == 5
