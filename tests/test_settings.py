"""The one settings table: every MEMRA_DSPARK_* variable, its parse, its bounds and its docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sglang_dspark_plugin import settings
from sglang_dspark_plugin.errors import DsparkHarvestError, SettingsError
from sglang_dspark_plugin.telemetry import TelemetrySettings

REPO = Path(__file__).resolve().parents[1]


def test_every_variable_the_package_names_is_in_the_table() -> None:
    named = set()
    for path in (REPO / "sglang_dspark_plugin").rglob("*.py"):
        named |= set(re.findall(r"MEMRA_DSPARK_[A-Z][A-Z_]*[A-Z]", path.read_text(encoding="utf-8")))
    assert named and named <= set(settings.BY_NAME), named - set(settings.BY_NAME)


def test_the_docs_hold_the_generated_table() -> None:
    page = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    block = page.split("<!-- settings-table:start -->\n", 1)[1].split("\n<!-- settings-table:end -->", 1)[0]
    assert block == settings.settings_table()


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("MEMRA_DSPARK_ALARM_WINDOW", " 64 ", 64),
        ("MEMRA_DSPARK_ALARM_WINDOW", "100000", 100_000),
        ("MEMRA_DSPARK_SUMMARY_EVERY", "off", 0),
        ("MEMRA_DSPARK_ACCEPT_LOG_LEVEL", "warn", 30),
        ("MEMRA_DSPARK_ACCEPT_LOG_LEVEL", "OFF", None),
        ("MEMRA_DSPARK_ACCEPT_LOG_LEVEL", "15", 15),
        ("MEMRA_DSPARK_ALARM_THRESHOLD", "1.25", 1.25),
        ("MEMRA_DSPARK_ALARM_THRESHOLD", "none", 0.0),
        ("MEMRA_DSPARK_HARVEST", "DSpark", "dspark"),
        ("MEMRA_DSPARK_MANIFEST", "/m.json", "/m.json"),
        ("MEMRA_DSPARK_PROBE_ROUNDS", "0", 0),
        ("MEMRA_DSPARK_PROBE_EVERY", "OFF", 0),
        ("MEMRA_DSPARK_ON_MISMATCH", " Fail ", "fail"),
        ("MEMRA_DSPARK_HOST_TIMING", "On", True),
        ("MEMRA_DSPARK_HOST_TIMING", "1", True),
        ("MEMRA_DSPARK_SYNC_DEBUG", " no ", False),
        ("MEMRA_DSPARK_QUEUE_THREAD", "Auto", "auto"),
        ("MEMRA_DSPARK_QUEUE_THREAD", "ON", "on"),
    ],
)
def test_accepted_values(name: str, raw: str, value: object) -> None:
    assert settings.read_setting(name, {name: raw}) == value


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("MEMRA_DSPARK_ALARM_WINDOW", "100000000"),  # 1.5 GB up front before the bound
        ("MEMRA_DSPARK_ALARM_WINDOW", "1e20"),
        ("MEMRA_DSPARK_ALARM_WINDOW", "0"),
        ("MEMRA_DSPARK_ALARM_WINDOW", "5" * 5000),  # past int()'s digit limit
        ("MEMRA_DSPARK_ACCEPT_LOG_LEVEL", "\u00b2"),  # isdigit() says yes, int() says no
        ("MEMRA_DSPARK_ACCEPT_LOG_LEVEL", "51"),
        ("MEMRA_DSPARK_SUMMARY_EVERY", "-1"),
        ("MEMRA_DSPARK_SUMMARY_EVERY", "\u0663"),  # an Arabic-Indic digit
        ("MEMRA_DSPARK_ALARM_THRESHOLD", "nan"),
        ("MEMRA_DSPARK_ALARM_THRESHOLD", "1e400"),
        ("MEMRA_DSPARK_ALARM_WARMUP", "OFF"),  # OFF is not a warm-up
        ("MEMRA_DSPARK_MANIFEST", "/m\n.json"),
        ("MEMRA_DSPARK_HARVEST", "dflsh"),
        ("MEMRA_DSPARK_PROBE_EVERY", "1000001"),
        ("MEMRA_DSPARK_PROBE_ROUNDS", "off"),  # OFF is not a count of rounds
        ("MEMRA_DSPARK_ON_MISMATCH", "abort"),
        ("MEMRA_DSPARK_ON_MISMATCH", "fa\u0131l"),  # a dotless i: not ASCII
        ("MEMRA_DSPARK_HOST_TIMING", "2"),
        ("MEMRA_DSPARK_SYNC_DEBUG", "enabled"),
        ("MEMRA_DSPARK_QUEUE_THREAD", "gpu"),
    ],
)
def test_refused_values_name_the_variable(name: str, raw: str) -> None:
    with pytest.raises(DsparkHarvestError) as info:
        settings.read_setting(name, {name: raw})
    assert info.value.where == name and name in info.value.message
    assert "\n" not in info.value.message and len(info.value.message) < 600


def test_unset_gives_the_default() -> None:
    for setting in settings.SETTINGS:
        assert settings.read_setting(setting.name, {}) == setting.default


@pytest.mark.parametrize(
    "field",
    [
        {"summary_every": True},
        {"alarm_window": 10**9},
        {"alarm_window": 2.0},
        {"alarm_threshold": True},
        {"alarm_warmup": -1},
        {"accept_log_level": "INFO"},
        {"host_timing": 1},
        {"sync_debug": "yes"},
        {"queue_thread": "auto"},
    ],
)
def test_telemetry_settings_refuse_wrong_types_and_sizes(field: dict) -> None:
    with pytest.raises(SettingsError) as info:
        TelemetrySettings(**field)
    assert next(iter(field)) in info.value.where


def test_telemetry_settings_read_through_the_table() -> None:
    s = TelemetrySettings.from_env({"MEMRA_DSPARK_ALARM_WINDOW": "64", "MEMRA_DSPARK_SUMMARY_EVERY": "OFF"})
    assert (s.alarm_window, s.summary_every) == (64, 0)
    with pytest.raises(SettingsError):
        TelemetrySettings.from_env({"MEMRA_DSPARK_ALARM_WINDOW": "100000000"})


@pytest.mark.parametrize(("raw", "value"), [(None, None), ("auto", None), ("yes", True), ("0", False)])
def test_the_queue_thread_is_auto_unless_set(raw: str | None, value: bool | None) -> None:
    """``MEMRA_DSPARK_QUEUE_THREAD`` unset or ``auto``: None (the worker's device decides,
    ``serving.rounds.queue_on_thread``); a flag word: that flag."""
    environ = {} if raw is None else {"MEMRA_DSPARK_QUEUE_THREAD": raw}
    settings_ = TelemetrySettings.from_env(environ)
    assert settings_.queue_thread is value
    assert settings_.to_json()["queue_thread"] == ("auto" if value is None else value)
