"""Prometheus counters for the accept telemetry (``PrometheusMetrics``), created only when sglang runs
with ``--enable-metrics``; ``prometheus_client`` is sglang's dependency and is imported lazily."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import GeometryError, SettingsError
from ..limits import MAX_GAMMA
from ..probe.offsets import ProbeCounts
from ..util.reprs import short
from ..util.validation import is_int

if TYPE_CHECKING:
    from .counts import AcceptCounts

PROBE_OFFSETS = ("own", "late", "early")
"""The live probe's offsets, as ``ProbeCounts`` names them: 0, +1 and -1."""

_FAMILIES: dict[tuple[int, tuple[str, ...]], tuple[Any, dict[str, Any]]] = {}


def _gauges(prometheus_client: Any, target: Any, labels: list[str]) -> dict[str, Any]:
    """The harvest info, and what the plugin holds now (summed over the live scheduler processes)."""

    def gauge(name: str, doc: str) -> Any:
        return prometheus_client.Gauge(name, doc, labels, multiprocess_mode="livesum", registry=target)

    return {
        # A Gauge at 1, not an Info: sglang runs prometheus_client in multiprocess mode (no Info there).
        "info": prometheus_client.Gauge(
            "dspark_harvest_info",
            "The harvest convention served and where it came from (value is always 1).",
            [*labels, "harvest", "source"],
            multiprocess_mode="max",
            registry=target,
        ),
        "held": gauge(
            "dspark_harvest_probe_requests_held", "Requests the live probe holds now (0 on an idle server)."
        ),
        "host_cost": prometheus_client.Gauge(
            "dspark_harvest_host_cost_fraction",
            "The plugin's host time per round over the median round time, last window "
            "(MEMRA_DSPARK_HOST_TIMING on; the highest of the live processes).",
            labels,
            multiprocess_mode="livemax",
            registry=target,
        ),
        "queued": gauge(
            "dspark_harvest_queued_steps",
            "Round steps the last run of the plugin's round queue held (bounded by 2 x "
            "MEMRA_DSPARK_DEFER_ROUNDS plus finished requests).",
        ),
    }


def _context_counters(make: Callable[..., Any]) -> dict[str, Any]:
    """Request-rounds and accepted tokens by context length (one ``context`` label per bucket)."""
    return {
        "context_reqs": make(
            "dspark_harvest_context_request_rounds",
            "Request-rounds by the request's context length at the anchor (MEMRA_DSPARK_CONTEXT_BUCKETS).",
            ("context",),
        ),
        "context_tokens": make(
            "dspark_harvest_context_accepted_tokens",
            "Accepted tokens (bonus included) by context length: accept length per bucket = this / "
            "context_request_rounds.",
            ("context",),
        ),
    }


def _probe_counters(make: Callable[..., Any]) -> dict[str, Any]:
    """The live offset probe's matches and comparisons (one ``offset`` label per offset)."""
    return {
        "probe_matches": make(
            "dspark_harvest_probe_matches",
            "Live offset probe: sampled drafts equal to the committed token at an offset (own = the "
            "draft's own position, late = +1, early = -1).",
            ("offset",),
        ),
        "probe_compared": make(
            "dspark_harvest_probe_compared",
            "Live offset probe: sampled drafts compared at an offset; match rate = matches / compared.",
            ("offset",),
        ),
    }


def _metric_families(prometheus_client: Any, registry: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The metric families of one registry, created once: a registry refuses a name registered twice."""
    target = prometheus_client.REGISTRY if registry is None else registry
    key = (id(target), names)
    cached = _FAMILIES.get(key)
    if cached is not None and cached[0] is target:
        return cached[1]
    counter = prometheus_client.Counter
    labels = list(names)

    def make(name: str, doc: str, extra: tuple[str, ...] = ()) -> Any:
        return counter(name, doc, labels + list(extra), registry=target)

    try:
        families = {
            "rounds": make("dspark_harvest_rounds", "Verify rounds recorded by the DSPARK_HARVEST plugin."),
            "request_rounds": make(
                "dspark_harvest_request_rounds", "Request-rounds (sum of batch sizes over verify rounds)."
            ),
            "accepted_tokens": make(
                "dspark_harvest_accepted_tokens",
                "Accepted tokens, bonus included: accept length = accepted_tokens / request_rounds.",
            ),
            "accepted_drafts": make("dspark_harvest_accepted_drafts", "Accepted draft tokens (no bonus)."),
            "position": make(
                "dspark_harvest_position_accepted",
                "Request-rounds in which draft position k was accepted: rate = this / request_rounds.",
                ("position",),
            ),
            "alarms": make("dspark_harvest_alarms", "Low accept-length alarms fired."),
            **_probe_counters(make),
            "invalid": make("dspark_harvest_invalid_rounds", "Rounds with a count outside [0, gamma]."),
            **_context_counters(make),
            "swept": make(
                "dspark_harvest_probe_swept_requests",
                "Requests the live probe's stale sweep dropped (sglang never reported them finished).",
            ),
            "request_accept": prometheus_client.Histogram(
                "dspark_harvest_request_accept_length",
                "Accept length of each finished request (1 + accepted drafts / its verify rounds; "
                "MEMRA_DSPARK_REQUEST_LOG).",
                labels,
                buckets=REQUEST_BUCKETS,
                registry=target,
            ),
            **_gauges(prometheus_client, target, labels),
        }
    except ValueError as exc:  # the names exist in this registry already, under other label names
        raise SettingsError(
            f"the dspark_harvest_* metrics are already registered in this Prometheus registry with other "
            f"label names than {labels}: {exc}. Use one set of constant labels per registry, or pass a "
            "fresh CollectorRegistry.",
            where="PrometheusMetrics(labels=...)",
        ) from exc
    _FAMILIES[key] = (target, families)
    return families


REQUEST_BUCKETS = (1.0, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0)
"""Upper bounds of the per-request accept-length histogram: fine near 1 (a collapsed request), coarser
up to the widest published blocks."""

OWN_LABELS = ("context", "position", "offset", "harvest", "source")
"""The label names the plugin's own series carry: a constant label of one of these names would be
replaced by the plugin's value, merging two servers' series."""
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _checked_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    """The constant labels, or a ``SettingsError`` naming the one that cannot be one."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise SettingsError(
            f"labels must be a mapping of label names to values, not {type(labels).__name__}.",
            where="PrometheusMetrics(labels=...)",
        )
    for name, value in labels.items():
        shown = short(name, 60)
        if not isinstance(name, str) or not _LABEL_NAME.fullmatch(name) or name.startswith("__"):
            raise SettingsError(
                f"constant label name {shown} is not a Prometheus label name (a string of letters, digits "
                "and underscores, not starting with a digit or '__').",
                where="PrometheusMetrics(labels=...)",
            )
        if name in OWN_LABELS:
            raise SettingsError(
                f"constant label {shown} is a label of the plugin's own series ({', '.join(OWN_LABELS)}): "
                "its value would be replaced, merging two servers' series; name it otherwise "
                f"(e.g. server_{name}).",
                where="PrometheusMetrics(labels=...)",
            )
        if not isinstance(value, str):
            raise SettingsError(
                f"constant label {shown} has the value {short(value, 60)}, not a string.",
                where="PrometheusMetrics(labels=...)",
            )
    return dict(labels)


class PrometheusMetrics:
    """Prometheus counters for the accept telemetry (only when sglang runs with ``--enable-metrics``).

    ``prometheus_client`` is sglang's dependency, not this package's: it is imported here, lazily.
    Counters are pushed as deltas every ``sync_every`` rounds or ``sync_interval_s`` seconds, whichever
    comes first (and on ``summary()``), so the per-round path pays for no lock or multiprocess file write.
    """

    def __init__(
        self,
        gamma: int,
        registry: Any = None,
        labels: Mapping[str, str] | None = None,
        sync_every: int = 32,
        sync_interval_s: float = 1.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not is_int(gamma) or not 1 <= gamma <= MAX_GAMMA:
            raise GeometryError(
                f"metrics gamma={short(gamma, 60)} is not an integer in 1..{MAX_GAMMA}; pass "
                "RoundGeometry.gamma.",
                where="PrometheusMetrics(gamma=...)",
            )
        try:
            import prometheus_client
        except ImportError as exc:
            raise SettingsError(
                "Prometheus metrics were asked for (sglang --enable-metrics) but prometheus_client is not "
                "installed in this environment; install it (pip install prometheus_client; sglang "
                "depends on it) or run without --enable-metrics.",
                where="prometheus_client",
            ) from exc
        self.gamma = gamma
        self.sync_every = max(1, int(sync_every))
        self.sync_interval_s = float(sync_interval_s)
        self._clock = clock if clock is not None else time.monotonic
        self._synced_at = self._clock()
        const = _checked_labels(labels)
        names = list(const)
        families = _metric_families(prometheus_client, registry, tuple(names))
        lv = [const[n] for n in names]

        def child(name: str) -> Any:
            # prometheus_client refuses .labels() on a family without label names: it counts itself
            return families[name].labels(*lv) if names else families[name]

        self._c_rounds = child("rounds")
        self._c_reqs = child("request_rounds")
        self._c_tokens = child("accepted_tokens")
        self._c_drafts = child("accepted_drafts")
        self._c_alarms = child("alarms")
        self._c_invalid = child("invalid")
        self._c_swept, self._g_held, self._g_queued = child("swept"), child("held"), child("queued")
        self._g_host_cost = child("host_cost")
        self._h_request = child("request_accept")
        self._swept_pushed = 0
        self._families, self._context = families, None
        self._context_children: list[tuple[Any, Any]] = []
        self._context_pushed: list[tuple[int, int]] | None = None
        self._c_position = [families["position"].labels(*lv, str(k)) for k in range(1, gamma + 1)]
        self._c_probe = [
            (families["probe_matches"].labels(*lv, offset), families["probe_compared"].labels(*lv, offset))
            for offset in PROBE_OFFSETS
        ]
        self._probe_pushed = ProbeCounts()
        self._info = families["info"]
        self._label_values = lv
        self._pushed = (0, 0, 0, [0] * gamma, 0, 0)

    def count_contexts(self, by_context: Any) -> None:
        """Export ``by_context`` (a ``ContextCounts``): one ``context`` label per bucket (a bounded set)."""
        lv = self._label_values
        self._context = by_context
        self._context_children = [
            (
                self._families["context_reqs"].labels(*lv, name),
                self._families["context_tokens"].labels(*lv, name),
            )
            for name in by_context.names
        ]
        self._context_pushed = [(0, 0)] * len(by_context.names)

    def _sync_contexts(self) -> None:
        by_context, pushed = self._context, self._context_pushed
        if by_context is None or pushed is None:
            return
        now = []
        for i, ((reqs, tokens), (before_reqs, before_tokens)) in enumerate(
            zip(self._context_children, pushed, strict=True)
        ):
            hist = by_context.hist[i]
            n_reqs = sum(hist)
            n_tokens = n_reqs + sum(n * k for n, k in enumerate(hist))
            reqs.inc(n_reqs - before_reqs)
            tokens.inc(n_tokens - before_tokens)
            now.append((n_reqs, n_tokens))
        self._context_pushed = now

    def observe_request(self, accept_length: float) -> None:
        """A finished request's accept length, into the histogram (a histogram observes at once: one
        call per finished request, off the round's path)."""
        self._h_request.observe(accept_length)

    def set_host_cost(self, figures: Mapping[str, float]) -> None:
        """The host-cost window just logged (``HostCost.flush``): its ``plugin_fraction``."""
        self._g_host_cost.set(figures["plugin_fraction"])

    def set_harvest(self, harvest: str, source: str) -> None:
        """Set the harvest info gauge (one label set at 1)."""
        self._info.labels(*self._label_values, harvest, source).set(1)

    def maybe_sync(
        self,
        counts: AcceptCounts,
        alarms_fired: int,
        probe: ProbeCounts | None = None,
        state: Callable[[], Any] | None = None,
    ) -> None:
        """Called every valid round; pushes after ``sync_every`` rounds or ``sync_interval_s`` seconds
        (``state``: what gives the live state then, read only when pushing)."""
        if (
            counts.rounds - self._pushed[0] >= self.sync_every
            or self._clock() - self._synced_at >= self.sync_interval_s
        ):
            self.sync(counts, alarms_fired, probe, None if state is None else state())

    def sync_state(self, state: Any) -> None:
        """Set the live-state gauges and count the newly swept requests (``accept.LiveState``)."""
        self._g_held.set(state.held_requests)
        self._g_queued.set(state.queued_steps)
        self._c_swept.inc(state.swept_requests - self._swept_pushed)
        self._swept_pushed = state.swept_requests

    def sync_probe(self, probe: ProbeCounts) -> None:
        """Push the live probe's matches and comparisons per offset since the previous sync."""
        before, self._probe_pushed = self._probe_pushed, probe
        for (matches, compared), offset in zip(self._c_probe, PROBE_OFFSETS, strict=True):
            matches.inc(getattr(probe, offset) - getattr(before, offset))
            compared.inc(getattr(probe, f"compared_{offset}") - getattr(before, f"compared_{offset}"))

    def sync(
        self, counts: AcceptCounts, alarms_fired: int, probe: ProbeCounts | None = None, state: Any = None
    ) -> None:
        """Push the counter's totals, the alarms fired and the probe's counts as counter increments
        since the previous sync, and the live state (``None``: none to report)."""
        if probe is not None:
            self.sync_probe(probe)
        if state is not None:
            self.sync_state(state)
        self._sync_contexts()
        if counts.gamma != self.gamma:
            raise GeometryError(
                f"metrics were built for gamma={self.gamma} but the counts have gamma={counts.gamma}; "
                "build PrometheusMetrics with the same RoundGeometry.gamma.",
                where="PrometheusMetrics.sync(counts=...)",
            )
        rounds, reqs, drafts, positions, alarms, invalid = self._pushed
        now_positions = counts.accepted_per_position()
        self._c_rounds.inc(counts.rounds - rounds)
        self._c_reqs.inc(counts.request_rounds - reqs)
        self._c_drafts.inc(counts.accepted_drafts - drafts)
        self._c_tokens.inc(counts.accepted_drafts - drafts + counts.request_rounds - reqs)
        for child, now, before in zip(self._c_position, now_positions, positions, strict=True):
            child.inc(now - before)
        self._c_alarms.inc(alarms_fired - alarms)
        self._c_invalid.inc(counts.invalid_rounds - invalid)
        self._synced_at = self._clock()
        self._pushed = (
            counts.rounds,
            counts.request_rounds,
            counts.accepted_drafts,
            now_positions,
            alarms_fired,
            counts.invalid_rounds,
        )


__all__ = ["PrometheusMetrics"]
