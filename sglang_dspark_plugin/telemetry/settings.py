"""How loud the accept-length telemetry is and when its alarm fires: ``TelemetrySettings``, read from
the ``MEMRA_DSPARK_*`` variables, a bad value refused by name."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import settings as table
from ..util.validation import is_int

ACCEPT_LOGGER = "sglang_dspark_plugin.accept"
"""The dedicated logger: per-round lines, summaries, the alarm and geometry errors."""

# Per-round lines at INFO: sglang's default log level shows them, and DEBUG/OFF hide them cheaply.
DEFAULT_LOG_LEVEL: int = table.ACCEPT_LOG_LEVEL.default
# Every 100 rounds: a few seconds of serving, about 2.5x sglang's own decode-log interval (40).
DEFAULT_SUMMARY_EVERY: int = table.SUMMARY_EVERY.default
HOST_COST_EVERY = 100
"""Rounds between host-cost lines where the summary is off (``summary_every`` 0)."""
# A matched drafter gives 2.5-4 (the lowest matched value measured: 2.41); a mismatched harvest gives
# 1.0-1.5 (1.06, ~1.1, 1.38, 1.43, 1.53 measured). 1.6 sits above every collapse and well below health.
DEFAULT_ALARM_THRESHOLD: float = table.ALARM_THRESHOLD.default
# The first rounds (cold caches, CUDA-graph capture, short prompts) say little about the drafter.
DEFAULT_ALARM_WARMUP: int = table.ALARM_WARMUP.default
# 500 rounds: enough request-rounds for a stable mean, and at most one WARNING every ~5-15 s of decoding.
DEFAULT_ALARM_WINDOW: int = table.ALARM_WINDOW.default
DEFAULT_DEFER_ROUNDS: int = table.DEFER_ROUNDS.default
DEFAULT_CONTEXT_BUCKETS: tuple[int, ...] = table.CONTEXT_BUCKETS.default


def level_name(level: int | None) -> str:
    """A per-round level as written in lines and JSON: its logging name, or ``OFF`` for ``None``."""
    return "OFF" if level is None else logging.getLevelName(level)


def _int_field(value: object, low: int, high: int) -> bool:
    return is_int(value) and low <= value <= high


@dataclass(frozen=True)
class TelemetrySettings:
    """How loud the accept-length telemetry is, and when its alarm fires."""

    accept_log_level: int | None = DEFAULT_LOG_LEVEL  # level of the per-round line; None = OFF
    summary_every: int = DEFAULT_SUMMARY_EVERY  # rounds between summary lines; 0 = no summary
    alarm_threshold: float = DEFAULT_ALARM_THRESHOLD  # rolling mean accept length below this alarms
    alarm_warmup: int = DEFAULT_ALARM_WARMUP  # rounds ignored before the rolling window starts
    alarm_window: int = DEFAULT_ALARM_WINDOW  # rolling window in rounds; at most one alarm per window
    defer_rounds: int = DEFAULT_DEFER_ROUNDS  # rounds queued before the round steps run (1: none)
    context_buckets: tuple[int, ...] = DEFAULT_CONTEXT_BUCKETS  # upper bounds; () = no buckets
    host_timing: bool = False  # time the plugin's own host work per round (``HostCost``)
    sync_debug: bool = False  # the plugin's per-round work under CUDA's sync debug mode "error"
    request_log: bool = True  # one line per finished request, the per-request histogram
    queue_thread: bool | None = None  # the queue's runs on a thread of their own (``DeferredRounds``);
    # None: auto, decided by the device the worker serves on (``serving.rounds.queue_on_thread``)

    @property
    def host_cost_every(self) -> int:
        """Rounds between host-cost lines (``host_timing``): the summary cadence, or 100 without one."""
        return self.summary_every or HOST_COST_EVERY

    def __post_init__(self) -> None:
        threshold = self.alarm_threshold
        checks = (
            (
                "accept_log_level",
                self.accept_log_level is None or _int_field(self.accept_log_level, 1, 50),
                "a logging level 1..50 or None (OFF)",
            ),
            ("summary_every", _int_field(self.summary_every, 0, 10**9), "an integer 0..10**9 (0 = none)"),
            (
                "alarm_threshold",
                isinstance(threshold, (int, float))
                and not isinstance(threshold, bool)
                and math.isfinite(threshold)
                and 0 <= threshold <= 1025,
                "a number 0..1025 (0 = no alarm)",
            ),
            ("alarm_warmup", _int_field(self.alarm_warmup, 0, 10**9), "an integer 0..10**9"),
            ("alarm_window", _int_field(self.alarm_window, 1, 100_000), "an integer 1..100000"),
            ("defer_rounds", _int_field(self.defer_rounds, 1, 1024), "an integer 1..1024"),
            (
                "context_buckets",
                isinstance(self.context_buckets, tuple)
                and len(self.context_buckets) <= 32
                and all(_int_field(b, 1, 10**8) for b in self.context_buckets)
                and all(
                    a < b for a, b in zip(self.context_buckets[:-1], self.context_buckets[1:], strict=True)
                ),
                "a tuple of at most 32 increasing integers 1..10**8",
            ),
            ("host_timing", isinstance(self.host_timing, bool), "True or False"),
            ("sync_debug", isinstance(self.sync_debug, bool), "True or False"),
            ("request_log", isinstance(self.request_log, bool), "True or False"),
            (
                "queue_thread",
                self.queue_thread is None or isinstance(self.queue_thread, bool),
                "None, True or False",
            ),
        )
        table.check_fields("TelemetrySettings", self, checks)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TelemetrySettings:
        """Read the ``MEMRA_DSPARK_*`` telemetry variables; unset ones keep their defaults.

        A bad value is refused with a ``SettingsError`` naming the variable, the value and the
        accepted values, never silently replaced by a default.
        """
        variables = {
            "accept_log_level": table.ACCEPT_LOG_LEVEL,
            "summary_every": table.SUMMARY_EVERY,
            "alarm_threshold": table.ALARM_THRESHOLD,
            "alarm_warmup": table.ALARM_WARMUP,
            "alarm_window": table.ALARM_WINDOW,
            "defer_rounds": table.DEFER_ROUNDS,
            "context_buckets": table.CONTEXT_BUCKETS,
            "host_timing": table.HOST_TIMING,
            "sync_debug": table.SYNC_DEBUG,
            "request_log": table.REQUEST_LOG,
            "queue_thread": table.QUEUE_THREAD,
        }
        values = {field: table.read_setting(v.name, environ) for field, v in variables.items()}
        values["queue_thread"] = table.FLAG_WORDS.get(values["queue_thread"])  # "auto": None
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """JSON-able form (the level by name)."""
        return {
            "accept_log_level": level_name(self.accept_log_level),
            "summary_every": self.summary_every,
            "alarm_threshold": self.alarm_threshold,
            "alarm_warmup": self.alarm_warmup,
            "alarm_window": self.alarm_window,
            "defer_rounds": self.defer_rounds,
            "context_buckets": list(self.context_buckets),
            "host_timing": self.host_timing,
            "sync_debug": self.sync_debug,
            "request_log": self.request_log,
            "queue_thread": "auto" if self.queue_thread is None else self.queue_thread,
        }


__all__ = [
    "ACCEPT_LOGGER",
    "DEFAULT_LOG_LEVEL",
    "DEFAULT_SUMMARY_EVERY",
    "DEFAULT_ALARM_THRESHOLD",
    "DEFAULT_ALARM_WARMUP",
    "DEFAULT_ALARM_WINDOW",
    "TelemetrySettings",
    "level_name",
]
