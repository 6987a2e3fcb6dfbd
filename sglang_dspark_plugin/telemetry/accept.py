"""``AcceptTelemetry``: one verify round through the accept counter, the per-round line, the rolling
alarm, the periodic summary and the metrics; and the summary, startup and invalid-round lines."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..census.draft_config import Signal
from ..harvest import DsparkHarvest
from ..util.logsafe import safe_logger
from .alarm import RollingAlarm
from .arguments import check_arguments, checked_metrics
from .context import ContextCounts, context_alarm_message
from .counts import AcceptCounts
from .logline import RoundLineEmitter
from .metrics import PrometheusMetrics
from .requests import RequestAcceptance
from .settings import ACCEPT_LOGGER, DEFAULT_ALARM_THRESHOLD, TelemetrySettings, level_name

MISALIGNED = ("late", "early", "neither")
"""The probe's verdicts that measure drafts off their positions: the harvest, not the context."""

if TYPE_CHECKING:
    from ..harvest import Resolution


class AcceptTelemetry:
    """Per-round accept-length telemetry for one served drafter (one per process / rank).

    ``gamma`` is the drafts per round (``RoundGeometry.gamma``); ``harvest`` (a ``DsparkHarvest``),
    ``source`` and ``evidence`` come from the resolution (``DsparkHarvest.explain``) and are named by
    every line and the alarm; ``settings=None`` reads the ``MEMRA_DSPARK_*`` variables; ``metrics`` is an
    optional ``PrometheusMetrics``; ``clock`` (seconds, monotonic) and ``logger`` are injectable for
    tests; ``dp_rank`` (the data-parallel attention group this telemetry watches, where there are
    several) ends every line with ``dp=N``; ``probe`` (a ``LiveProbe``) is the measured cause the alarm
    and the summary state.

    What it counted is read where it is kept: ``counts`` (``AcceptCounts``: histogram, totals, round
    records, per-position rates, mean) and ``alarm`` (``RollingAlarm``: threshold, window mean, alarms).
    """

    def __init__(
        self,
        gamma: int,
        harvest: DsparkHarvest,
        source: str,
        evidence: Sequence[Signal] = (),
        settings: TelemetrySettings | None = None,
        metrics: PrometheusMetrics | None = None,
        clock: Callable[[], float] | None = None,
        logger: logging.Logger | None = None,
        dp_rank: int | None = None,
        probe: Any = None,
    ) -> None:
        check_arguments(gamma, harvest, source, evidence, settings, clock, logger, dp_rank)
        self.gamma = gamma
        self.harvest = harvest.name()  # the serialized name, as every line and the summary write it
        self.source = source
        self.evidence = tuple(evidence)
        self.settings = s = settings if settings is not None else TelemetrySettings.from_env()
        self.metrics = checked_metrics(metrics, gamma)
        self.logger = logger if logger is not None else safe_logger(ACCEPT_LOGGER)
        self.dp_rank = dp_rank
        self.tag = f"{self.harvest}({source})"
        self.dp_tag = "" if dp_rank is None else f" dp={dp_rank}"  # every line's: each DP group logs its own
        self.counts = AcceptCounts(gamma)
        buckets = s.context_buckets
        self.by_context = ContextCounts(gamma, buckets) if buckets else None  # acceptance by context length
        self.context_alarm: str | None = None  # the context-length ALARM, once it fired
        self.alarm = RollingAlarm(gamma, s, harvest, source, evidence, self.dp_tag, probe)
        self._clock = clock if clock is not None else time.monotonic
        self._text = [str(n + 1) for n in range(gamma + 1)]  # count n's accept length, as the line writes it
        self._line = RoundLineEmitter(AcceptTelemetry.on_verify_complete)
        self._round = 0  # every call, valid or not: the round index
        self.queued_steps = 0  # the round steps the last run of the queue held (``DeferredRounds``)
        self._invalid_reported = False
        self._t0: float | None = None
        self._last_summary = (0, 0, 0)  # (rounds, request_rounds, accepted) at the previous summary
        observe = None if metrics is None else metrics.observe_request
        self.requests = (  # one line per finished request (``requests``)
            RequestAcceptance(self.logger, f" harvest={self.tag}{self.dp_tag}", observe=observe)
            if s.request_log
            else None
        )
        if metrics is not None:
            metrics.set_harvest(self.harvest, source)
            if self.by_context is not None:
                metrics.count_contexts(self.by_context)

    @classmethod
    def from_resolution(
        cls,
        resolution: Resolution,
        gamma: int,
        settings: TelemetrySettings | None = None,
        metrics: PrometheusMetrics | None = None,
        clock: Callable[[], float] | None = None,
        dp_rank: int | None = None,
        probe: Any = None,
    ) -> AcceptTelemetry:
        """Telemetry for a resolved harvest (``DsparkHarvest.explain``) and its round geometry."""
        r, options = resolution, {"dp_rank": dp_rank, "probe": probe}
        return cls(gamma, r.harvest, r.source, r.evidence, settings, metrics, clock, **options)

    def on_verify_complete(
        self,
        counts: Sequence[int],
        at: float | None = None,
        contexts: Sequence[int] | None = None,
        rids: Sequence[Hashable] | None = None,
    ) -> bool:
        """Count one verify round from the per-request accepted-draft counts (host ints, no sync);
        ``at``: the round's ``time.time()`` where it is counted later (``DeferredRounds``);
        ``contexts``: each request's tokens at the anchor (acceptance by context length); ``rids``: each
        request's id (the per-request line, at ``finish_request``). Returns False
        for a round left out of the statistics.

        Counts outside [0, gamma] mean the scheduler's verify width disagrees with this geometry: the
        round is logged at ERROR (once) and kept out of the statistics; serving is never interrupted.
        """
        index = self._round = self._round + 1
        bs = len(counts)
        if bs == 0:
            return True
        if self._t0 is None:
            self._t0 = self._clock()
        if not self.counts.add(counts):
            self._invalid_round(index, counts)
            return False
        if contexts is not None and self.by_context is not None:
            self.by_context.add(counts, contexts)
        if rids is not None and self.requests is not None and len(rids) == bs:
            self.requests.add(rids, counts, None if contexts is None or len(contexts) != bs else contexts)
        # the per-round line
        level = self.settings.accept_log_level
        if level is not None and self.logger.isEnabledFor(level):
            text = self._text
            accept_len = ",".join([text[n] for n in counts])
            message = f"dspark accept round={index} bs={bs} accept_len=[{accept_len}] "
            line = f"{message}mean={1.0 + sum(counts) / bs:.2f} harvest={self.tag}{self.dp_tag}"
            self._line.emit(self.logger, level, line, at)
        # the rolling alarm
        if self.alarm.on and (alarm := self.alarm.observe(self.counts, index)) is not None:
            self.logger.warning("%s", alarm.message)
        # the periodic summary
        if self.settings.summary_every and index % self.settings.summary_every == 0:
            self.log_summary()
        # the metrics
        if self.metrics is not None:
            self.metrics.maybe_sync(self.counts, self.alarm.fired, self._probe_counts(), self.live_state)
        return True

    def finish_request(self, rid: Hashable) -> None:
        """sglang reported ``rid`` finished: its per-request line (``MEMRA_DSPARK_REQUEST_LOG``)."""
        if self.requests is not None:
            self.requests.finish(rid)

    def _invalid_round(self, index: int, counts: Sequence[Any]) -> None:
        """The ERROR line for the first round with a count (the first offenders) outside [0, gamma]."""
        if self._invalid_reported:
            return
        self._invalid_reported = True
        self.logger.error("%s", invalid_round_message(self, index, counts))

    def elapsed(self) -> float | None:
        """Seconds since the first non-empty round; None before it."""
        return None if self._t0 is None else self._clock() - self._t0

    def _probe_counts(self) -> Any:
        """The live probe's counts for the metrics, or None when no probe rides on the alarm."""
        return None if self.alarm.probe is None else self.alarm.probe.counts

    # ----------------------------------------------------------------- what it reports

    def summary(self) -> dict[str, Any]:
        """Everything so far, JSON-able (and the metrics pushed): ``summary_json``."""
        return summary_json(self)

    def summary_line(self) -> str:
        """The periodic summary line: cumulative, and since the previous summary (``summary_text``)."""
        return summary_text(self)

    def flush_metrics(self) -> None:
        """Push everything to the metrics now: the counters' increments since the last push and the live
        state (the batch drained: an idle server's series equal what its lines say)."""
        if self.metrics is not None:
            self.metrics.sync(self.counts, self.alarm.fired, self._probe_counts(), self.live_state())

    def _check_context(self) -> None:
        probe = self.alarm.probe
        kind = None if probe is None else probe.assessment().kind
        if self.by_context is None or self.context_alarm is not None or kind in MISALIGNED:
            return
        found = self.by_context.falls_with_context(self.alarm.threshold or DEFAULT_ALARM_THRESHOLD)
        if found is not None:
            self.context_alarm = context_alarm_message(found, kind, self.dp_tag)
            self.logger.warning("%s", self.context_alarm)

    def live_state(self) -> LiveState | None:
        """What the plugin holds now (the probe's requests and rounds, the queue), or ``None`` without a
        live probe: the figures an operator watches for a leak (docs/telemetry.md)."""
        probe = self.alarm.probe
        if probe is None:
            return None
        requests, rounds, _tokens = probe.held()
        return LiveState(requests, rounds, probe.swept, self.queued_steps)

    def log_summary(self) -> None:
        """Log the summary line at INFO (independent of the per-round level), and the context-length
        ALARM the first time acceptance falls with context while no misalignment is measured."""
        if self.logger.isEnabledFor(logging.INFO):
            self.logger.info("%s", self.summary_line())
        self._check_context()
        c = self.counts
        self._last_summary = (c.rounds, c.request_rounds, c.accepted_drafts)

    def describe(self) -> str:
        """One startup line: the harvest, gamma and the telemetry settings (the context buckets too,
        where they are on: what the summaries' ``by_context`` and the context ALARM are read against)."""
        return startup_text(self)


def startup_text(t: AcceptTelemetry) -> str:
    """``AcceptTelemetry.describe``: the startup line ``report`` reads back (``logreport.lines``)."""
    s, by_context = t.settings, t.by_context
    buckets = "" if by_context is None else f" context_buckets=[{','.join(by_context.names)}]"
    alarm = (
        "off"
        if not t.alarm.on
        else f"mean<{t.alarm.threshold:.2f} over {s.alarm_window} rounds after {s.alarm_warmup}"
    )
    return (
        f"dspark accept telemetry: harvest={t.tag} gamma={t.gamma} "
        f"per_round_level={level_name(s.accept_log_level)} summary_every={s.summary_every} "
        f"alarm={alarm} metrics={'on' if t.metrics is not None else 'off'}{buckets}{t.dp_tag}"
    )


def invalid_round_message(t: AcceptTelemetry, index: int, counts: Sequence[Any]) -> str:
    """The ERROR line for a round with counts (the first offenders named) outside [0, gamma]."""
    bad = [n for n in counts if not isinstance(n, int) or n < 0 or n > t.gamma][:8]
    return (
        f"dspark accept round={index}: accepted-draft counts {bad} are not integers in "
        f"[0, gamma={t.gamma}] for the {t.harvest} harvest (source={t.source}). The scheduler's "
        f"verify width does not match this geometry: speculative_num_draft_tokens must be "
        f"gamma+1={t.gamma + 1}. This round and any like it are left out of the accept-length "
        "statistics (reported once; count in summary 'invalid_rounds'). Check "
        f"--speculative-num-draft-tokens and the drafter's block_size.{t.dp_tag}"
    )


@dataclass(frozen=True)
class LiveState:
    """What the plugin holds in a served engine: the live probe's requests and sampled rounds, the
    requests its stale sweep dropped (a request sglang never reported finished), the steps the last
    run of the round queue held. Healthy: held back to 0 when the server is idle, swept 0."""

    held_requests: int
    held_rounds: int
    swept_requests: int
    queued_steps: int

    def to_json(self) -> dict[str, int]:
        """The four figures by name."""
        return dict(vars(self))

    def tag(self) -> str:
        """`` held_requests=R held_rounds=P swept_requests=S queued_steps=Q``, as the summary ends."""
        return "".join(f" {k}={v}" for k, v in vars(self).items())


def summary_json(t: AcceptTelemetry) -> dict[str, Any]:
    """Everything ``t`` counted so far, JSON-able (and its metrics pushed)."""
    c, alarm = t.counts, t.alarm
    state = t.live_state()
    if t.metrics is not None:
        t.metrics.sync(c, alarm.fired, t._probe_counts(), state)
    return {
        "harvest": t.harvest,
        "source": t.source,
        "gamma": t.gamma,
        "dp_rank": t.dp_rank,
        "rounds": c.rounds,
        "request_rounds": c.request_rounds,
        "accepted_drafts": c.accepted_drafts,
        "mean_accept_length": c.mean_accept_length(),
        "per_position": c.per_position_rates(),
        "accepted_per_position": c.accepted_per_position(),
        "accept_length_histogram": {str(n + 1): k for n, k in enumerate(c.hist)},
        "window_mean_accept_length": alarm.window_mean(),
        "alarm_threshold": alarm.threshold,
        "alarms_fired": alarm.fired,
        "alarms": [a.to_json() for a in alarm.alarms],
        "invalid_rounds": c.invalid_rounds,
        "elapsed_s": t.elapsed(),
        "settings": t.settings.to_json(),
        **({} if t.alarm.probe is None else {"probe": t.alarm.probe.assessment().to_json()}),
        **({} if state is None else {"state": state.to_json()}),
        **({"by_context": buckets} if (buckets := _buckets(t)) else {}),  # where contexts were counted
    }


def _buckets(t: AcceptTelemetry) -> list[dict[str, Any]]:
    return [] if t.by_context is None else t.by_context.to_json()


def summary_text(t: AcceptTelemetry) -> str:
    """``t``'s periodic summary line: cumulative, and since the previous summary."""
    c = t.counts
    rounds0, reqs0, acc0 = t._last_summary
    d_reqs = c.request_rounds - reqs0
    interval = "n/a" if d_reqs == 0 else f"{1.0 + (c.accepted_drafts - acc0) / d_reqs:.2f}"
    mean = c.mean_accept_length()
    rates = c.per_position_rates() or []
    window = t.alarm.window_mean()
    elapsed = t.elapsed()
    rps = "n/a" if not elapsed else f"{c.rounds / elapsed:.1f}"
    state, probe = t.live_state(), t.alarm.probe
    probe_tag = "" if probe is None else f" probe={probe.assessment().kind}"  # its verdict so far
    return (
        f"dspark accept summary rounds={c.rounds} request_rounds={c.request_rounds} "
        f"mean_accept_len={'n/a' if mean is None else f'{mean:.2f}'} "
        f"last_{c.rounds - rounds0}_rounds={interval} "
        f"window_mean={'n/a' if window is None else f'{window:.2f}'} "
        f"per_position=[{','.join(f'{r:.2f}' for r in rates)}]"
        f"{'' if t.by_context is None else t.by_context.line()} "
        f"harvest={t.tag} gamma={t.gamma} rounds_per_s={rps} "
        f"alarms={t.alarm.fired} invalid_rounds={c.invalid_rounds}{probe_tag}"
        f"{'' if state is None else state.tag()}{t.dp_tag}"
    )


__all__ = ["LiveState", "summary_text", "AcceptTelemetry"]
