"""``AcceptTelemetry``: one served drafter's per-round accept lengths through statistics, the per-round
line, the rolling alarm, the periodic summary and the metrics."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..draft_config import Signal
from ..errors import ArgumentTypeError, GeometryError, HarvestEnvError
from ..geometry import MAX_GAMMA
from ..harvest import DsparkHarvest
from ..logsafe import safe_logger
from ..reprs import short
from ..validation import is_int, require_type
from .alarm import Alarm, RollingAlarm
from .counts import CountPacker
from .logline import RoundLineEmitter
from .metrics import PrometheusMetrics
from .report import describe_line, invalid_round_line, summary_json, summary_line
from .settings import ACCEPT_LOGGER, TelemetrySettings
from .stats import AcceptStats, RoundRecord

if TYPE_CHECKING:
    from ..harvest import Resolution


class AcceptTelemetry:
    """Per-round accept-length telemetry for one served drafter (one per process / rank).

    ``gamma`` is the drafts per round (``RoundGeometry.gamma``); ``harvest`` (a ``DsparkHarvest``),
    ``source`` and ``evidence`` come from the resolution (``DsparkHarvest.explain``) and are named by
    every line and the alarm; ``settings=None`` reads the ``MEMRA_DSPARK_*`` variables; ``metrics`` is an
    optional ``PrometheusMetrics``; ``clock`` (seconds, monotonic) and ``logger`` are injectable for
    tests; ``dp_rank`` (the data-parallel attention group this telemetry watches, where there are
    several) ends every line with ``dp=N``.
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
    ) -> None:
        _check_arguments(gamma, harvest, source, evidence, settings, clock, logger, dp_rank)
        self.gamma = gamma
        self.harvest = harvest.name()  # the serialized name, as every line and the summary write it
        self.source = source
        self.evidence = tuple(evidence)
        self.settings = s = settings if settings is not None else TelemetrySettings.from_env()
        self.metrics = _checked_metrics(metrics, gamma)
        self.logger = logger if logger is not None else safe_logger(ACCEPT_LOGGER)
        self.dp_rank = dp_rank
        self.tag = f"{self.harvest}({source})"
        # Appended to every line: with data-parallel attention each DP group logs its own rounds.
        self.dp_tag = "" if dp_rank is None else f" dp={dp_rank}"
        self._clock = clock if clock is not None else time.monotonic
        self._counts = CountPacker(gamma)
        self._line = RoundLineEmitter(AcceptTelemetry.on_verify_complete)
        self.stats = AcceptStats(gamma, s.record_capacity, self._counts.empty())
        self.alarm = RollingAlarm(gamma, s, harvest, source, evidence, self.dp_tag)
        self._round_level = s.accept_log_level
        self._summary_every = s.summary_every
        self._alarm_on = self.alarm.on
        self._round = 0  # every call, valid or not: the round index
        self._invalid_reported = False
        self._t0: float | None = None
        self._last_summary = (0, 0, 0)  # (rounds, request_rounds, accepted) at the previous summary
        if metrics is not None:
            metrics.set_harvest(self.harvest, source)

    @classmethod
    def from_resolution(
        cls,
        resolution: Resolution,
        gamma: int,
        settings: TelemetrySettings | None = None,
        metrics: PrometheusMetrics | None = None,
        clock: Callable[[], float] | None = None,
        dp_rank: int | None = None,
    ) -> AcceptTelemetry:
        """Telemetry for a resolved harvest (``DsparkHarvest.explain``) and its round geometry."""
        r = resolution
        return cls(gamma, r.harvest, r.source, r.evidence, settings, metrics, clock, dp_rank=dp_rank)

    def on_verify_complete(self, num_correct_drafts_per_req: Sequence[int]) -> RoundRecord:
        """Record one verify round from the per-request accepted-draft counts (host ints, no sync).

        Counts outside [0, gamma] mean the scheduler's verify width disagrees with this geometry: the
        round is logged at ERROR (once) and kept out of the statistics; serving is never interrupted.
        """
        counts = num_correct_drafts_per_req
        index = self._round = self._round + 1
        bs = len(counts)
        if bs == 0:
            return self.stats.keep(RoundRecord(index, 0, [], 0.0))
        if self._t0 is None:
            self._t0 = self._clock()
        # statistics: the counts packed once, then C-level passes only (no Python step per request)
        packed = self._counts.pack(counts)
        if packed is None:
            return self._invalid_round(index, counts)
        accepted = sum(packed)
        record = self.stats.add(index, packed, accepted, self._counts.accept_lengths(packed))
        # the per-round line
        level = self._round_level
        if level is not None and self.logger.isEnabledFor(level):
            self._line.emit(
                self.logger,
                level,
                f"dspark accept round={index} bs={bs} accept_len=[{self._counts.text(packed)}] "
                f"mean={record.mean:.2f} harvest={self.tag}{self.dp_tag}",
            )
        # the rolling alarm
        if self._alarm_on and (alarm := self.alarm.observe(accepted + bs, bs, index)) is not None:
            self.logger.warning("%s", alarm.message)
        # the periodic summary
        if self._summary_every and index % self._summary_every == 0:
            self.log_summary()
        # the metrics
        if self.metrics is not None:
            self.metrics.maybe_sync(self)
        return record

    def _invalid_round(self, index: int, counts: Sequence[Any]) -> RoundRecord:
        if not self._invalid_reported:
            self._invalid_reported = True
            bad = [n for n in counts if not isinstance(n, int) or n < 0 or n > self.gamma][:8]
            self.logger.error("%s", invalid_round_line(self, index, bad))
        lengths = [n + 1 if isinstance(n, int) else -1 for n in counts]
        return self.stats.keep(RoundRecord(index, len(counts), lengths, math.nan, valid=False))

    # ----------------------------------------------------------------- statistics

    @property
    def records(self) -> list[RoundRecord]:
        """The most recent round records (at most ``settings.record_capacity``), oldest first."""
        return list(self.stats.records)

    @property
    def rounds(self) -> int:
        """Valid verify rounds recorded (rounds with an out-of-range count are not included)."""
        return self.stats.rounds

    @property
    def request_rounds(self) -> int:
        """Sum of batch sizes over the valid rounds."""
        return self.stats.request_rounds

    @property
    def accepted_drafts(self) -> int:
        """Accepted draft tokens over the valid rounds (bonus tokens not included)."""
        return self.stats.accepted

    @property
    def invalid_rounds(self) -> int:
        """Rounds with a count outside [0, gamma], left out of the statistics."""
        return self.stats.invalid_rounds

    def accepted_per_position(self) -> list[int]:
        """Request-rounds in which draft position k (k = 1..gamma) was accepted."""
        return self.stats.accepted_per_position()

    def per_position_rates(self) -> list[float] | None:
        """Accepted at position k / request-rounds, k = 1..gamma (vLLM's convention); None before data."""
        return self.stats.per_position_rates()

    def mean_accept_length(self) -> float | None:
        """1 + accepted drafts / request-rounds (bonus included); None before any valid round."""
        return self.stats.mean_accept_length()

    def elapsed(self) -> float | None:
        """Seconds since the first non-empty round; None before it."""
        return None if self._t0 is None else self._clock() - self._t0

    # ----------------------------------------------------------------- the alarm

    @property
    def alarm_threshold(self) -> float:
        """The threshold in force: the setting, capped at 1 + gamma/2; 0 when the alarm is off."""
        return self.alarm.threshold

    @property
    def alarms(self) -> list[Alarm]:
        """The most recent fired alarms (at most 16), oldest first."""
        return self.alarm.alarms

    @property
    def alarms_fired(self) -> int:
        """Alarms fired so far."""
        return self.alarm.fired

    def window_mean(self) -> float | None:
        """The rolling-window mean accept length the alarm watches; None until warm-up has passed."""
        return self.alarm.window_mean()

    def alarm_message(self, window_mean: float, window_rounds: int, window_reqs: int) -> str:
        """The alarm text: what was seen, the harvest, its source and evidence, the cause, the fix."""
        return self.alarm.message(window_mean, window_rounds, window_reqs)

    # ----------------------------------------------------------------- summaries

    def summary(self) -> dict[str, Any]:
        """Everything so far, JSON-able."""
        if self.metrics is not None:
            self.metrics.sync(self)
        return summary_json(self)

    def summary_line(self) -> str:
        """The periodic summary line (cumulative and since the previous summary)."""
        return summary_line(self, self._last_summary)

    def log_summary(self) -> None:
        """Log the summary line at INFO (independent of the per-round level)."""
        if self.logger.isEnabledFor(logging.INFO):
            self.logger.info("%s", self.summary_line())
        self._last_summary = (self.rounds, self.request_rounds, self.accepted_drafts)

    def describe(self) -> str:
        """One startup line: the harvest, gamma and the telemetry settings."""
        return describe_line(self)


def _check_arguments(gamma: object, harvest: object, *others: object) -> None:
    """Each argument's type and range, refused by name (a wrong one would fail deep in a round)."""
    if not is_int(gamma) or not 1 <= gamma <= MAX_GAMMA:
        raise GeometryError(
            f"telemetry gamma={short(gamma, 60)} is not an integer in 1..{MAX_GAMMA}; pass "
            "RoundGeometry.gamma (drafts per round = n_drafts(block_size), at most the widest block).",
            where="AcceptTelemetry(gamma=...)",
        )
    if not isinstance(harvest, DsparkHarvest):
        raise HarvestEnvError(
            f"telemetry harvest={short(harvest, 60)} is not a DsparkHarvest; pass DsparkHarvest.DFLASH or "
            "DsparkHarvest.DSPARK (DsparkHarvest.from_name maps a serialized name to one).",
            where="AcceptTelemetry(harvest=...)",
        )
    _check_types(*others)


def _check_types(
    source: object,
    evidence: object,
    settings: object,
    clock: object,
    logger: object,
    dp_rank: object,
) -> None:
    """source, evidence, settings, clock, logger and dp_rank."""
    require_type(source, str, "AcceptTelemetry(source=...)", "pass Resolution.source ('env', 'census', ...).")
    require_type(evidence, (tuple, list), "AcceptTelemetry(evidence=...)", "pass Resolution.evidence.")
    for signal in evidence:  # type: ignore[attr-defined]  # a tuple or a list, checked above
        require_type(signal, Signal, "AcceptTelemetry(evidence=...)", "pass Resolution.evidence (Signals).")
    if settings is not None:
        hint = "pass a TelemetrySettings."
        require_type(settings, TelemetrySettings, "AcceptTelemetry(settings=...)", hint)
    if clock is not None and not callable(clock):
        raise ArgumentTypeError(
            f"AcceptTelemetry(clock=...) must be callable, got {type(clock).__name__}; pass e.g. "
            "time.monotonic.",
            where="AcceptTelemetry(clock=...)",
        )
    if logger is not None:
        require_type(
            logger, (logging.Logger, logging.LoggerAdapter), "AcceptTelemetry(logger=...)", "pass a Logger."
        )
    if dp_rank is not None and (not is_int(dp_rank) or dp_rank < 0):
        raise ArgumentTypeError(
            f"AcceptTelemetry(dp_rank={short(dp_rank, 40)}) must be None or a non-negative integer.",
            where="AcceptTelemetry(dp_rank=...)",
        )


def _checked_metrics(metrics: PrometheusMetrics | None, gamma: int) -> PrometheusMetrics | None:
    if metrics is not None and metrics.gamma != gamma:
        raise GeometryError(
            f"metrics were built for gamma={metrics.gamma} but the telemetry has gamma={gamma}; "
            "build PrometheusMetrics with the same RoundGeometry.gamma.",
            where="AcceptTelemetry(metrics=...)",
        )
    return metrics


__all__ = ["AcceptTelemetry"]
