"""Accept-length telemetry: per-round counts and line, a periodic summary, metrics and an alarm.

A wrong harvest convention never crashes anything: acceptance just collapses toward 1.0. This package
is how a served run notices. The sglang plugin feeds ``AcceptTelemetry.on_verify_complete`` from its
one round hook with the per-request accepted-draft counts sglang already holds on the host (the result's
``num_correct_drafts_per_req_cpu``: no device synchronisation); the reference engine feeds it the same way.

One idea per module:

* ``counts``: ``AcceptCounts``, request-rounds by accepted-draft count (the histogram), the totals,
  and the per-position rates and mean derived from them (no round is kept);
* ``alarm``: the ``RollingAlarm`` over the last rounds and its message;
* ``metrics``: ``PrometheusMetrics`` (``prometheus_client`` imported lazily, only when asked for);
* ``settings``: ``TelemetrySettings`` and the ``MEMRA_DSPARK_*`` variables it is read from;
* ``logline``: the per-round ``LogRecord``, built without ``Logger.log``'s per-call work (about 5 us
  a round, measured by ``scripts/bench_telemetry.py``);
* ``hostcost``: ``HostCost`` and ``PluginWork``, the plugin's own host time per round as a fraction
  of the round (``MEMRA_DSPARK_HOST_TIMING``) and CUDA's sync debug mode around it
  (``MEMRA_DSPARK_SYNC_DEBUG``);
* ``accept``: ``AcceptTelemetry``, whose ``on_verify_complete`` runs a round through them in turn and
  writes the lines; what it counted is read from its ``counts`` and ``alarm``.

Nothing here imports sglang.
"""

from __future__ import annotations

from .accept import AcceptTelemetry
from .alarm import Alarm, RollingAlarm
from .counts import ACCEPT_LENGTH_DEFINITION, AcceptCounts
from .deferred import DeferredRounds
from .hostcost import HostCost, PluginWork, plugin_work
from .metrics import PrometheusMetrics
from .settings import ACCEPT_LOGGER, TelemetrySettings

__all__ = [
    "ACCEPT_LOGGER",
    "ACCEPT_LENGTH_DEFINITION",
    "AcceptCounts",
    "AcceptTelemetry",
    "Alarm",
    "DeferredRounds",
    "HostCost",
    "PluginWork",
    "plugin_work",
    "PrometheusMetrics",
    "RollingAlarm",
    "TelemetrySettings",
]
