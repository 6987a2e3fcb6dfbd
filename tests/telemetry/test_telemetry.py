"""``AcceptTelemetry`` (``telemetry/accept.py``): a round through the counter, the per-round line, the
alarm, the summary and the metrics; the lines it writes, its arguments, its settings and the benchmark.

The counter, the alarm and the Prometheus export have their own test modules
(``test_telemetry_counts``, ``test_telemetry_alarm``, ``test_telemetry_metrics``)."""

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

from sglang_dspark_plugin.census.draft_config import TIER_STRUCTURAL, DflashCfg, Signal
from sglang_dspark_plugin.errors import GeometryError, HarvestEnvError, SettingsError
from sglang_dspark_plugin.harvest import DsparkHarvest, Resolution
from sglang_dspark_plugin.telemetry import ACCEPT_LOGGER, AcceptTelemetry, TelemetrySettings
from sglang_dspark_plugin.telemetry.settings import (
    DEFAULT_ALARM_THRESHOLD,
    DEFAULT_ALARM_WARMUP,
    DEFAULT_ALARM_WINDOW,
    DEFAULT_SUMMARY_EVERY,
)

REPO = Path(__file__).resolve().parents[2]
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


# ----------------------------------------------------------------------------- a round through the telemetry


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
    assert list(out) == [
        "harvest",
        "source",
        "gamma",
        "dp_rank",
        "rounds",
        "request_rounds",
        "accepted_drafts",
        "mean_accept_length",
        "per_position",
        "accepted_per_position",
        "accept_length_histogram",
        "window_mean_accept_length",
        "alarm_threshold",
        "alarms_fired",
        "alarms",
        "invalid_rounds",
        "elapsed_s",
        "settings",
    ]


GOLDEN = [
    (
        "START",
        "dspark accept telemetry: harvest=dspark(census) gamma=4 per_round_level=INFO summary_every=2 "
        "alarm=mean<1.60 over 2 rounds after 1 metrics=off "
        "context_buckets=[<=512,<=1k,<=2k,<=4k,<=8k,<=16k,<=32k,<=64k,<=128k,>128k] dp=1",
    ),
    ("INFO", "dspark accept round=1 bs=2 accept_len=[5,4] mean=4.50 harvest=dspark(census) dp=1"),
    ("INFO", "dspark accept round=2 bs=3 accept_len=[1,1,2] mean=1.33 harvest=dspark(census) dp=1"),
    (
        "INFO",
        "dspark accept summary rounds=2 request_rounds=5 mean_accept_len=2.60 last_2_rounds=2.60 "
        "window_mean=1.33 per_position=[0.60,0.40,0.40,0.20] harvest=dspark(census) gamma=4 rounds_per_s=4.0 "
        "alarms=0 invalid_rounds=0 dp=1",
    ),
    (
        "ERROR",
        "dspark accept round=3: accepted-draft counts [7] are not integers in [0, gamma=4] for the dspark "
        "harvest (source=census). The scheduler's verify width does not match this geometry: "
        "speculative_num_draft_tokens must be gamma+1=5. This round and any like it are left out of the "
        "accept-length statistics (reported once; count in summary 'invalid_rounds'). Check "
        "--speculative-num-draft-tokens and the drafter's block_size. dp=1",
    ),
    ("INFO", "dspark accept round=4 bs=1 accept_len=[1] mean=1.00 harvest=dspark(census) dp=1"),
    (
        "WARNING",
        "dspark accept ALARM: mean accept length 1.25 over the last 2 rounds (4 request-rounds) is below "
        "1.60 (gamma=4, max 5). harvest=dspark source=census evidence: "
        "config.json:architectures[0]='DSparkDraftModel' -> dspark. Likely cause: drafts harvested under the "
        "wrong convention: acceptance collapses toward 1.0 while outputs stay correct. Try "
        "MEMRA_DSPARK_HARVEST=dflash and restart; if acceptance stays low under both harvests, the drafter "
        "does not fit this target or workload. dp=1",
    ),
    (
        "INFO",
        "dspark accept summary rounds=3 request_rounds=6 mean_accept_len=2.33 last_1_rounds=1.00 "
        "window_mean=1.25 per_position=[0.50,0.33,0.33,0.17] harvest=dspark(census) gamma=4 rounds_per_s=3.0 "
        "alarms=1 invalid_rounds=1 dp=1",
    ),
    ("INFO", "dspark accept round=5 bs=2 accept_len=[1,1] mean=1.00 harvest=dspark(census) dp=1"),
]
"""Every kind of line, written out: served tests, ``gpu_validate`` and deployments' log queries parse
them, so a change of one character is a change of interface."""


def test_every_line_is_written_exactly_as_parsers_expect(captured):
    clock = iter([100.0, 100.5, 101.0, 102.0, 103.0]).__next__
    s = TelemetrySettings(summary_every=2, alarm_warmup=1, alarm_window=2)
    t = AcceptTelemetry(4, DSPARK, "census", (ARCH_SIGNAL,), settings=s, clock=clock, dp_rank=1)
    lines = [("START", t.describe())]
    for counts in ([4, 3], [0, 0, 1], [7], [0], [0, 0]):
        t.on_verify_complete(counts)
    lines += [(r.levelname, r.getMessage()) for r in captured.records]
    assert lines == GOLDEN


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
    assert t.counts.rounds == 1  # filtered lines still count


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


# ----------------------------------------------------------------------------- out-of-range counts


@pytest.mark.parametrize("bad", [[5, 0], [-1, 2], [1, 2.0, 3], [1, "2"]])
def test_out_of_range_counts_are_reported_once_and_kept_out(captured, bad):
    t = telemetry(gamma=4)
    t.on_verify_complete([1, 2])
    before = t.summary()
    assert t.on_verify_complete(bad) is False
    t.on_verify_complete(bad)
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
    assert t.counts.rounds == 2 and t.counts.invalid_rounds == 2


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
        assert t.on_verify_complete(counts) is True
        flat += counts
        mean = sum(n + 1 for n in counts) / bs
        line = captured.messages(f"dspark accept round={i + 1} ")[0]
        assert line == (
            f"dspark accept round={i + 1} bs={bs} accept_len=[{','.join(str(n + 1) for n in counts)}] "
            f"mean={mean:.2f} harvest=dspark(census)"
        )
    histogram = t.summary()["accept_length_histogram"]
    assert histogram == {str(n + 1): flat.count(n) for n in range(gamma + 1)}
    assert t.counts.accepted_drafts == sum(flat) and t.counts.request_rounds == len(flat)


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


# ----------------------------------------------------------------------------- the benchmark script


def test_bench_script_prints_every_batch_size_with_its_range():
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench_telemetry.py"),
            "--rounds",
            "300",
            "--repeats",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    report = json.loads(out.stdout)
    assert set(report["us_per_round"]) == {"file", "file+metrics", "null-handler", "logger-warning"}
    for name, row in report["us_per_round"].items():
        assert set(row) == {"1", "8", "64", "256"} and all(v > 0 for v in row.values())
        for bs, (low, high) in report["us_per_round_range"][name].items():
            assert low <= row[bs] <= high and len(report["us_per_round_samples"][name][bs]) == 2
    assert report["target"] in {"MET", "MISSED"} and set(report["targets"]) == {"64", "256"}
    assert all(report["log_bytes_per_round"][bs] > 60 for bs in ("1", "8", "64", "256"))  # a real file
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
