"""What a group's lines add up to: its verdict, reached from the rounds and from confirmed probe lines
only, and its part of the ``--json`` report."""

from __future__ import annotations

from typing import Any

from ..telemetry.context import MIN_REQUEST_ROUNDS as MIN_REQUEST_ROUNDS_SHOWN
from ..telemetry.context import context_fall
from .groups import Group

MIN_JUDGED_REQUEST_ROUNDS = 50
"""Request-rounds a log needs for its overall mean to count as a collapse when no full alarm window
was seen."""
MISALIGNED_KINDS = ("late", "early", "neither")
DEFAULT_THRESHOLD = 1.6


def probe_verdict(g: Group) -> dict[str, Any] | None:
    """The last probe verdict the line's own numbers confirm, or ``None``."""
    return g.last_confirmed


def collapsed(g: Group) -> str | None:
    """Why this group's acceptance counts as collapsed in its last run, or ``None``.

    Per-round lines: the server's alarm rule, replayed, fired since the last restart; or, with no
    full window seen, the mean over at least ``MIN_JUDGED_REQUEST_ROUNDS`` request-rounds is below the
    threshold. Summary lines only: the last summary's window mean is below the threshold."""
    alarm, counts = g.alarm, g.counts
    if counts is not None and counts.rounds and alarm is not None:
        if g.alarms_this_run:
            return f"the alarm rule fired {g.alarms_this_run} time(s) over the logged rounds"
        mean = counts.mean_accept_length()
        short = counts.rounds < alarm.warmup + alarm.window
        if short and counts.request_rounds >= MIN_JUDGED_REQUEST_ROUNDS and mean is not None:
            if mean < alarm.threshold:
                return f"mean accept length {mean:.2f} < {alarm.threshold:.2f} over all logged rounds"
        return None
    if g.summary is not None and g.summary["window_mean"] is not None:
        threshold = min(g.settings.alarm_threshold or DEFAULT_THRESHOLD, 1.0 + (g.gamma or 1) / 2.0)
        if g.summary["window_mean"] < threshold:
            return f"the last summary's window mean {g.summary['window_mean']:.2f} < {threshold:.2f}"
    return None


def falls_with_context(g: Group) -> str | None:
    """Why the last summary's acceptance by context length counts as a collapse, by the server's own
    rule (``telemetry.context.context_fall``, on the request-rounds the summary lists; a log written
    before it listed them weighs each shown bucket alike), else ``None``."""
    buckets = (g.summary or {}).get("by_context") or []
    threshold = min(g.settings.alarm_threshold or DEFAULT_THRESHOLD, 1.0 + (g.gamma or 1) / 2.0)
    counted = []
    for name, mean, reqs in buckets:
        weight = MIN_REQUEST_ROUNDS_SHOWN if reqs is None else reqs
        counted.append((name, weight, (mean - 1.0) * weight))
    found = context_fall(counted, threshold)
    if found is None:
        return None
    bound, long, short = found
    return (
        f"acceptance falls with context length: past {bound} tokens the mean accept length is {long:.2f} "
        f"against {short:.2f} below"
    )


def group_verdict(g: Group) -> tuple[str, str]:
    """``(kind, why)``: ``misaligned`` (a confirmed probe measured drafts off their positions),
    ``collapse`` (acceptance collapsed, the probe measured no misalignment) or ``healthy``."""
    probe = probe_verdict(g)
    if probe is not None and probe["kind"] in MISALIGNED_KINDS:
        return "misaligned", f"live probe: {probe['message']}"
    why = collapsed(g) or falls_with_context(g)
    if why is not None:
        return "collapse", why
    return (
        "healthy",
        "acceptance above the alarm threshold" if g.counts or g.summary else "no rounds",
    )


def _figures(g: Group) -> dict[str, Any]:
    """The accept-length figures: from the replayed per-round lines, else from the last summary."""
    counts = g.counts
    if counts is not None and counts.rounds > 0:
        return {
            "from": "per-round lines",
            "rounds": counts.rounds,
            "request_rounds": counts.request_rounds,
            "mean_accept_length": counts.mean_accept_length(),
            "per_position": counts.per_position_rates(),
            "over_time": g.timeline.to_json(),
        }
    summary = g.summary or {}
    return {
        "from": "summary lines" if summary else "none",
        "rounds": summary.get("rounds", 0),
        "request_rounds": summary.get("request_rounds", 0),
        "mean_accept_length": summary.get("mean_accept_length"),
        "per_position": summary.get("per_position"),
        "over_time": [{"round": r, "mean_accept_length": m} for r, m in g.summaries],
    }


def group_json(g: Group) -> dict[str, Any]:
    """The group's part of the report."""
    kind, why = group_verdict(g)
    return {
        "dp": g.dp,
        "harvest": g.harvest,
        "source": g.source,
        "gamma": g.gamma,
        "gamma_from": g.gamma_from,
        **_figures(g),
        "restarts": g.restarts,
        "rejected_lines": g.rejected,
        "geometry_errors": g.geometry_errors,
        "alarm_threshold": None if g.alarm is None else g.alarm.threshold,
        "alarms_replayed": g.replayed_total,
        "alarm_rounds": g.replayed_alarms,
        "alarms_logged": g.logged_alarms,
        "alarms_logged_total": g.logged_total,
        "context_alarms": g.context_alarms,
        "context_buckets": g.context_buckets,
        "by_context": [
            {"bucket": n, "mean_accept_length": m, "request_rounds": r}
            for n, m, r in (g.summary or {}).get("by_context") or []
        ],
        "probe": g.probes[-20:],
        "host_cost_fraction": g.host_cost,
        "host_cost_thread_fraction": g.host_cost_thread,
        "per_request": g.requests.to_json(),
        "held_requests_last": (g.summary or {}).get("held_requests"),
        "swept_requests": (g.summary or {}).get("swept_requests"),
        "verdict": kind,
        "why": why,
    }


__all__ = [
    "MIN_JUDGED_REQUEST_ROUNDS",
    "MISALIGNED_KINDS",
    "probe_verdict",
    "collapsed",
    "falls_with_context",
    "group_verdict",
    "group_json",
]
