"""How loud the accept-length telemetry is and when its alarm fires: ``TelemetrySettings``, read from
the ``MEMRA_DSPARK_*`` variables, a bad value refused by name."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import SettingsError
from ..validation import environment

ACCEPT_LOGGER = "sglang_dspark_plugin.accept"
"""The dedicated logger: per-round lines, summaries, the alarm and geometry errors."""

ENV_LOG_LEVEL = "MEMRA_DSPARK_ACCEPT_LOG_LEVEL"
ENV_SUMMARY_EVERY = "MEMRA_DSPARK_SUMMARY_EVERY"
ENV_ALARM_THRESHOLD = "MEMRA_DSPARK_ALARM_THRESHOLD"
ENV_ALARM_WARMUP = "MEMRA_DSPARK_ALARM_WARMUP"
ENV_ALARM_WINDOW = "MEMRA_DSPARK_ALARM_WINDOW"

# Per-round lines at INFO: sglang's default log level shows them, and DEBUG/OFF hide them cheaply.
DEFAULT_LOG_LEVEL = logging.INFO
# Every 100 rounds: a few seconds of serving, about 2.5x sglang's own decode-log interval (40).
DEFAULT_SUMMARY_EVERY = 100
# A matched drafter gives 2.5-4 (the lowest matched value measured: 2.41); a mismatched harvest gives
# 1.0-1.5 (1.06, ~1.1, 1.38, 1.43, 1.53 measured). 1.6 sits above every collapse and well below health.
DEFAULT_ALARM_THRESHOLD = 1.6
# The first rounds (cold caches, CUDA-graph capture, short prompts) say little about the drafter.
DEFAULT_ALARM_WARMUP = 100
# 500 rounds: enough request-rounds for a stable mean, and at most one WARNING every ~5-15 s of decoding.
DEFAULT_ALARM_WINDOW = 500
# Bounded memory: the last 1024 round records (a few hundred KB at batch 64).
DEFAULT_RECORD_CAPACITY = 1024

_LEVEL_NAMES = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
}
_OFF_NAMES = ("OFF", "NONE")


def level_name(level: int | None) -> str:
    """A per-round level as written in lines and JSON: its logging name, or ``OFF`` for ``None``."""
    return "OFF" if level is None else logging.getLevelName(level)


def parse_log_level(raw: str, var: str = ENV_LOG_LEVEL) -> int | None:
    """Parse a per-round log level: a level name, a number 1..50, or ``OFF`` (returns ``None``)."""
    text = raw.strip().upper()
    if text in _OFF_NAMES:
        return None
    if text in _LEVEL_NAMES:
        return _LEVEL_NAMES[text]
    if text.isdigit() and 1 <= int(text) <= 50:
        return int(text)
    raise SettingsError(
        f"{var}={raw!r} is not a log level; accepted values: DEBUG, INFO, WARNING, ERROR, CRITICAL, "
        f"OFF (case-insensitive) or a number 1..50; unset it for the default "
        f"({level_name(DEFAULT_LOG_LEVEL)}).",
        where=var,
    )


def _parse_int(raw: str, var: str, minimum: int, default: int, off_means: int | None = None) -> int:
    text = raw.strip()
    if off_means is not None and text.upper() in _OFF_NAMES:
        return off_means
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        off = f", or OFF (= {off_means})" if off_means is not None else ""
        raise SettingsError(
            f"{var}={raw!r} is not an integer >= {minimum}; accepted values: an integer >= {minimum}"
            f"{off}; unset it for the default ({default}).",
            where=var,
        )
    return value


def _parse_threshold(raw: str, var: str = ENV_ALARM_THRESHOLD) -> float:
    text = raw.strip()
    if text.upper() in _OFF_NAMES:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise SettingsError(
            f"{var}={raw!r} is not a mean accept length; accepted values: a number >= 0 (for example "
            f"1.6; accept lengths run from 1.0 to gamma+1), or 0 / OFF to disable the alarm; unset it "
            f"for the default ({DEFAULT_ALARM_THRESHOLD}).",
            where=var,
        )
    return value


@dataclass(frozen=True)
class TelemetrySettings:
    """How loud the accept-length telemetry is, and when its alarm fires."""

    accept_log_level: int | None = DEFAULT_LOG_LEVEL  # level of the per-round line; None = OFF
    summary_every: int = DEFAULT_SUMMARY_EVERY  # rounds between summary lines; 0 = no summary
    alarm_threshold: float = DEFAULT_ALARM_THRESHOLD  # rolling mean accept length below this alarms
    alarm_warmup: int = DEFAULT_ALARM_WARMUP  # rounds ignored before the rolling window starts
    alarm_window: int = DEFAULT_ALARM_WINDOW  # rolling window in rounds; at most one alarm per window
    record_capacity: int = DEFAULT_RECORD_CAPACITY  # round records kept (a ring buffer)

    def __post_init__(self) -> None:
        checks = (
            (
                "accept_log_level",
                self.accept_log_level is None or 1 <= self.accept_log_level <= 50,
                "a logging level 1..50 or None (OFF)",
            ),
            ("summary_every", self.summary_every >= 0, "an integer >= 0 (0 = no summary)"),
            (
                "alarm_threshold",
                math.isfinite(self.alarm_threshold) and self.alarm_threshold >= 0,
                "a number >= 0 (0 = no alarm)",
            ),
            ("alarm_warmup", self.alarm_warmup >= 0, "an integer >= 0"),
            ("alarm_window", self.alarm_window >= 1, "an integer >= 1"),
            ("record_capacity", self.record_capacity >= 1, "an integer >= 1"),
        )
        for name, ok, expected in checks:
            if not ok:
                raise SettingsError(
                    f"TelemetrySettings.{name}={getattr(self, name)!r} is out of range; expected {expected}.",
                    where=f"TelemetrySettings.{name}",
                )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TelemetrySettings:
        """Read the ``MEMRA_DSPARK_*`` telemetry variables; unset ones keep their defaults.

        A bad value is refused with a ``SettingsError`` naming the variable, the value and the
        accepted values, never silently replaced by a default.
        """
        env = environment(environ)
        kwargs: dict[str, Any] = {}
        if (raw := env.get(ENV_LOG_LEVEL)) is not None:
            kwargs["accept_log_level"] = parse_log_level(raw)
        if (raw := env.get(ENV_SUMMARY_EVERY)) is not None:
            kwargs["summary_every"] = _parse_int(
                raw, ENV_SUMMARY_EVERY, 0, DEFAULT_SUMMARY_EVERY, off_means=0
            )
        if (raw := env.get(ENV_ALARM_THRESHOLD)) is not None:
            kwargs["alarm_threshold"] = _parse_threshold(raw)
        if (raw := env.get(ENV_ALARM_WARMUP)) is not None:
            kwargs["alarm_warmup"] = _parse_int(raw, ENV_ALARM_WARMUP, 0, DEFAULT_ALARM_WARMUP)
        if (raw := env.get(ENV_ALARM_WINDOW)) is not None:
            kwargs["alarm_window"] = _parse_int(raw, ENV_ALARM_WINDOW, 1, DEFAULT_ALARM_WINDOW)
        return cls(**kwargs)

    def to_json(self) -> dict[str, Any]:
        """JSON-able form (the level by name)."""
        return {
            "accept_log_level": level_name(self.accept_log_level),
            "summary_every": self.summary_every,
            "alarm_threshold": self.alarm_threshold,
            "alarm_warmup": self.alarm_warmup,
            "alarm_window": self.alarm_window,
            "record_capacity": self.record_capacity,
        }


__all__ = [
    "ACCEPT_LOGGER",
    "ENV_LOG_LEVEL",
    "ENV_SUMMARY_EVERY",
    "ENV_ALARM_THRESHOLD",
    "ENV_ALARM_WARMUP",
    "ENV_ALARM_WINDOW",
    "DEFAULT_LOG_LEVEL",
    "DEFAULT_SUMMARY_EVERY",
    "DEFAULT_ALARM_THRESHOLD",
    "DEFAULT_ALARM_WARMUP",
    "DEFAULT_ALARM_WINDOW",
    "DEFAULT_RECORD_CAPACITY",
    "TelemetrySettings",
    "level_name",
    "parse_log_level",
]
