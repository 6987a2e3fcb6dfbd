"""Accept-length telemetry: one record per verify round, a periodic summary, metrics and an alarm.

A wrong harvest convention never crashes anything: acceptance just collapses toward 1.0. This package
is how a served run notices. The sglang plugin calls ``AcceptTelemetry.on_verify_complete`` from the
worker's ``on_verify_complete_cpu`` hook with the per-request accepted-draft counts sglang already holds
on the host (no device synchronisation); the reference engine feeds it the same way.

One concern per module:

* ``settings``: ``TelemetrySettings`` and the ``MEMRA_DSPARK_*`` variables it is read from;
* ``counts``: a round's counts packed into bytes, and the ``accept_len`` text built from them;
* ``stats``: ``RoundRecord``, the running totals, the histogram and the per-position rates;
* ``alarm``: the rolling-window ``Alarm`` and its message;
* ``logline``: the per-round ``LogRecord``, built without ``Logger.log``'s per-call work;
* ``report``: the summary (JSON and line) and the startup line;
* ``metrics``: ``PrometheusMetrics`` (``prometheus_client`` imported lazily, only when asked for);
* ``accept``: ``AcceptTelemetry``, whose ``on_verify_complete`` runs a round through them in turn.

Nothing here imports sglang.
"""

from __future__ import annotations

from .accept import AcceptTelemetry
from .alarm import Alarm
from .metrics import PrometheusMetrics
from .settings import (
    ACCEPT_LOGGER,
    DEFAULT_ALARM_THRESHOLD,
    DEFAULT_ALARM_WARMUP,
    DEFAULT_ALARM_WINDOW,
    DEFAULT_LOG_LEVEL,
    DEFAULT_RECORD_CAPACITY,
    DEFAULT_SUMMARY_EVERY,
    ENV_ALARM_THRESHOLD,
    ENV_ALARM_WARMUP,
    ENV_ALARM_WINDOW,
    ENV_LOG_LEVEL,
    ENV_SUMMARY_EVERY,
    TelemetrySettings,
    parse_log_level,
)
from .stats import ACCEPT_LENGTH_DEFINITION, RoundRecord

__all__ = [
    "ACCEPT_LOGGER",
    "ACCEPT_LENGTH_DEFINITION",
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
    "RoundRecord",
    "Alarm",
    "AcceptTelemetry",
    "PrometheusMetrics",
    "parse_log_level",
]
