"""Accept-length telemetry: one record per verify round, a periodic summary, metrics and an alarm.

A wrong harvest convention never crashes anything: acceptance just collapses toward 1.0. This module is
how a served run notices. The sglang plugin calls ``AcceptTelemetry.on_verify_complete`` from the
worker's ``on_verify_complete_cpu`` hook with the per-request accepted-draft counts sglang already holds
on the host (no device synchronisation); the reference engine feeds it the same way.

Conventions (the same as sglang's and vLLM's):

* accept length of one request in one round = accepted drafts + 1 (the bonus token), in [1, gamma + 1];
* mean accept length = 1 + accepted drafts / request-rounds;
* per-position rate k = request-rounds whose draft k was accepted / request-rounds (k = 1..gamma).

Nothing here imports sglang; ``prometheus_client`` is imported lazily, only when metrics are asked for.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import GeometryError, HarvestEnvError, SettingsError
from .harvest import ENV_VAR as HARVEST_ENV_VAR
from .harvest import DsparkHarvest

if TYPE_CHECKING:
    from .draft_config import Signal
    from .harvest import Resolution

ACCEPT_LOGGER = "sglang_dspark_plugin.accept"

ACCEPT_LENGTH_DEFINITION = (
    "mean over every verify round of every request of the tokens it committed (accepted drafts + 1 "
    "bonus), uncapped by the request's token budget; rounds of already finished requests excluded"
)
"""The headline accept length, the same in the reference engine, ``check`` and the served telemetry.

It equals sglang's scheduler-log "accept len" except that sglang also counts an overlapped round of a
request that had already finished. sglang's per-request ``meta_info["spec_accept_length"]`` is another
figure (completion tokens / verify rounds: capped by the budget, counts the prefill token); ``check``
reports it as ``sglang_meta_accept_length``."""
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


def _level_name(level: int | None) -> str:
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
        f"({_level_name(DEFAULT_LOG_LEVEL)}).",
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
        env = os.environ if environ is None else environ
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
            "accept_log_level": _level_name(self.accept_log_level),
            "summary_every": self.summary_every,
            "alarm_threshold": self.alarm_threshold,
            "alarm_warmup": self.alarm_warmup,
            "alarm_window": self.alarm_window,
            "record_capacity": self.record_capacity,
        }


@dataclass(slots=True)
class RoundRecord:
    """One verify round: per-request accept lengths (accepted drafts + 1) and their mean."""

    round_index: int
    batch_size: int
    accept_lengths: list[int]
    mean: float
    valid: bool = True  # False when a count was outside [0, gamma]; such rounds stay out of the stats

    def to_json(self) -> dict[str, Any]:
        """JSON-able form (an invalid round's mean is ``None``: NaN is not JSON)."""
        return {
            "round_index": self.round_index,
            "batch_size": self.batch_size,
            "accept_lengths": list(self.accept_lengths),
            "mean": self.mean if self.valid else None,
            "valid": self.valid,
        }


@dataclass(frozen=True)
class Alarm:
    """One fired alarm."""

    round_index: int
    window_mean: float
    threshold: float
    message: str = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "round_index": self.round_index,
            "window_mean": self.window_mean,
            "threshold": self.threshold,
            "message": self.message,
        }


def _harvest_name(harvest: DsparkHarvest | str) -> str:
    if isinstance(harvest, DsparkHarvest):
        return harvest.name()
    member = DsparkHarvest.from_name(harvest)
    if member is None:
        raise HarvestEnvError(
            f"telemetry harvest={harvest!r} is not a harvest convention; pass a DsparkHarvest or one of "
            f"{', '.join(repr(m.value) for m in DsparkHarvest)}.",
            where="AcceptTelemetry(harvest=...)",
        )
    return member.name()


_FOLD_BYTES = 1 << 16
"""Counts buffered before they are folded into the histogram (64 KiB: 256 rounds at batch 256)."""

_new_record = object.__new__
"""A ``LogRecord`` without running ``LogRecord.__init__`` (its fields are copied from a template)."""


class _LineMaker:
    """The per-round counts packed into bytes, and the ``accept_len`` text built from them.

    One ``bytes(counts)`` checks that every count is an int in 0..255 (``TypeError`` / ``ValueError``
    otherwise); from there the range check, the sum, the histogram and the text are C-level passes
    over the bytes (``translate``, ``count``, slice assignment), with no Python step per request.
    Accept lengths above 255 (gamma >= 255, far beyond published drafters) use an ``array('H')``
    and plain loops instead.
    """

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma
        self.small = gamma < 255
        self.width = len(str(gamma + 1))  # digits of the longest accept length
        self._text = [str(n + 1) for n in range(gamma + 1)]
        if self.small:
            self._valid = bytes(range(gamma + 1))
            self._plus_one = bytes(min(n + 1, 255) for n in range(256))
            # One table per digit position: count n -> that digit of n+1, NUL where n+1 has fewer digits.
            padded = [str(min(n, gamma) + 1).rjust(self.width, "\0") for n in range(256)]
            self._digits = [bytes(ord(t[d]) for t in padded) for d in range(self.width)]

    def empty(self) -> bytearray | array:
        """A buffer that ``pack``'s results can be appended to."""
        return bytearray() if self.small else array("H")

    def pack(self, counts: Sequence[Any]) -> bytes | array | None:
        """The counts, packed; ``None`` when one is not an int in [0, gamma]."""
        if type(counts) is not list and type(counts) is not tuple:
            counts = list(counts)  # never the raw buffer of an array-like
        try:
            packed = bytes(counts) if self.small else array("H", counts)
        except (TypeError, ValueError, OverflowError):
            return None
        if self.small:
            return None if packed.translate(None, self._valid) else packed
        return None if max(packed) > self.gamma else packed

    def accept_lengths(self, packed: bytes | array) -> list[int]:
        """Accepted drafts + 1 per request."""
        if self.small:
            return list(packed.translate(self._plus_one))
        return [n + 1 for n in packed]

    def text(self, packed: bytes | array) -> str:
        """``1,4,17`` for counts ``[0, 3, 16]``."""
        if not self.small or len(packed) <= 16:  # a plain join is cheaper for a handful of requests
            return ",".join([self._text[n] for n in packed])
        step = self.width + 1
        out = bytearray(len(packed) * step)
        for d, table in enumerate(self._digits):
            out[d::step] = packed.translate(table)
        out[self.width :: step] = b"," * len(packed)
        return out.translate(None, b"\0")[:-1].decode("ascii")


class AcceptTelemetry:
    """Per-round accept-length telemetry for one served drafter (one per process / rank).

    ``gamma`` is the drafts per round (``RoundGeometry.gamma``); ``harvest``, ``source`` and ``evidence``
    come from the resolution (``DsparkHarvest.explain``) and are named by every line and the alarm;
    ``settings=None`` reads the ``MEMRA_DSPARK_*`` variables; ``metrics`` is an optional
    ``PrometheusMetrics``; ``clock`` (seconds, monotonic) and ``logger`` are injectable for tests;
    ``dp_rank`` (the data-parallel attention group this telemetry watches, where there are several)
    ends every line with ``dp=N``.
    """

    def __init__(
        self,
        gamma: int,
        harvest: DsparkHarvest | str,
        source: str,
        evidence: Sequence[Signal] = (),
        settings: TelemetrySettings | None = None,
        metrics: PrometheusMetrics | None = None,
        clock: Callable[[], float] | None = None,
        logger: logging.Logger | None = None,
        dp_rank: int | None = None,
    ) -> None:
        if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
            raise GeometryError(
                f"telemetry gamma={gamma!r} is not a positive integer; pass RoundGeometry.gamma "
                "(drafts per round = n_drafts(block_size)).",
                where="AcceptTelemetry(gamma=...)",
            )
        self.gamma = gamma
        self.harvest = _harvest_name(harvest)
        self.source = source
        self.evidence = tuple(evidence)
        self.settings = settings if settings is not None else TelemetrySettings.from_env()
        self.metrics = metrics
        self.logger = logger if logger is not None else logging.getLogger(ACCEPT_LOGGER)
        self._clock = clock if clock is not None else time.monotonic
        self.dp_rank = dp_rank
        self._tag = f"{self.harvest}({self.source})"
        # Appended to every line: with data-parallel attention each DP group logs its own rounds.
        self._dp_tag = "" if dp_rank is None else f" dp={dp_rank}"
        self._hook_line = AcceptTelemetry.on_verify_complete.__code__.co_firstlineno
        self._lines = _LineMaker(gamma)
        self._record_template: dict[str, Any] | None = None
        self._record_thread: int | None = None

        s = self.settings
        self._round_level = s.accept_log_level
        self._summary_every = s.summary_every
        # Capped at 1 + gamma/2 so a tiny block (gamma 1: at most 2.0) is not flagged for its own ceiling.
        self.alarm_threshold = min(s.alarm_threshold, 1.0 + gamma / 2.0)
        self._warmup = s.alarm_warmup
        self._window = s.alarm_window
        self._alarm_on = self.alarm_threshold > 0

        self._records: deque[RoundRecord] = deque(maxlen=s.record_capacity)
        self._round = 0  # every call, valid or not: the round index
        self._rounds = 0  # valid rounds (in the statistics)
        self._request_rounds = 0
        self._accepted = 0  # accepted drafts (bonus tokens not included)
        self._hist_counts = [0] * (gamma + 1)  # request-rounds by accepted-draft count 0..gamma
        self._unfolded = self._lines.empty()  # counts of recent rounds, folded into the histogram when read
        self.invalid_rounds = 0
        self._invalid_reported = False
        # The rolling window: ring buffers of per-round accepted tokens (bonus included) and batch sizes.
        self._ring_tokens = [0] * self._window
        self._ring_reqs = [0] * self._window
        self._ring_pos = 0
        self._ring_filled = 0
        self._win_tokens = 0
        self._win_reqs = 0
        self._last_alarm_round = -self._window
        self.alarms: list[Alarm] = []  # the 16 most recent
        self.alarms_fired = 0
        self._t0: float | None = None
        self._last_summary = (0, 0, 0)  # (rounds, request_rounds, accepted) at the previous summary
        if metrics is not None:
            if metrics.gamma != gamma:
                raise GeometryError(
                    f"metrics were built for gamma={metrics.gamma} but the telemetry has gamma={gamma}; "
                    "build PrometheusMetrics with the same RoundGeometry.gamma.",
                    where="AcceptTelemetry(metrics=...)",
                )
            metrics.set_harvest(self.harvest, self.source)

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
        return cls(
            gamma,
            resolution.harvest,
            resolution.source,
            resolution.evidence,
            settings,
            metrics,
            clock,
            dp_rank=dp_rank,
        )

    # ----------------------------------------------------------------- the per-round hook

    def on_verify_complete(self, num_correct_drafts_per_req: Sequence[int]) -> RoundRecord:
        """Record one verify round from the per-request accepted-draft counts (host ints, no sync).

        Counts outside [0, gamma] mean the scheduler's verify width disagrees with this geometry: the
        round is logged at ERROR (once) and kept out of the statistics; serving is never interrupted.
        """
        counts = num_correct_drafts_per_req
        self._round += 1
        index = self._round
        bs = len(counts)
        if bs == 0:
            record = RoundRecord(index, 0, [], 0.0)
            self._records.append(record)
            return record
        if self._t0 is None:
            self._t0 = self._clock()
        packed = self._lines.pack(counts)
        if packed is None:
            return self._invalid_round(index, counts)
        # C-level work only (no per-request Python step): the sum, and the counts kept for the histogram.
        accepted = sum(packed)
        self._unfolded += packed
        if len(self._unfolded) >= _FOLD_BYTES:
            self._fold()

        mean = 1.0 + accepted / bs
        record = RoundRecord(index, bs, self._lines.accept_lengths(packed), mean)
        self._records.append(record)
        self._rounds += 1
        self._request_rounds += bs
        self._accepted += accepted

        level = self._round_level
        if level is not None and self.logger.isEnabledFor(level):
            self._emit(
                level,
                f"dspark accept round={index} bs={bs} accept_len=[{self._lines.text(packed)}] "
                f"mean={mean:.2f} harvest={self._tag}{self._dp_tag}",
            )
        if self._alarm_on and self._rounds > self._warmup:
            self._roll_window(accepted + bs, bs, index)
        if self._summary_every and index % self._summary_every == 0:
            self.log_summary()
        if self.metrics is not None:
            self.metrics.maybe_sync(self)
        return record

    def _emit(self, level: int, message: str) -> None:
        """Hand one line to the logger's handlers without ``Logger.log``'s per-call work.

        ``Logger.log`` walks the stack for the caller and ``LogRecord.__init__`` looks up the thread,
        process and time: most of a log call before any handler runs. The record here is a copy of
        one built by ``makeRecord`` for this logger, level and thread, with the message and the time
        set; each round still gets its own record object (a handler may keep it). A custom record
        factory is honoured by building every record through it.
        """
        logger = self.logger
        template = self._record_template
        if (
            template is None
            or template["levelno"] != level
            or self._record_thread != threading.get_ident()
            or logging.getLogRecordFactory() is not logging.LogRecord
        ):
            record = logger.makeRecord(
                logger.name, level, __file__, self._hook_line, message, None, None, "on_verify_complete"
            )
            if type(record) is logging.LogRecord:
                self._record_template = dict(record.__dict__)
                self._record_thread = threading.get_ident()
            logger.handle(record)
            return
        record = _new_record(logging.LogRecord)
        record.__dict__.update(template)
        now = time.time()
        record.msg = message
        record.created = now
        record.msecs = int((now - int(now)) * 1000) + 0.0  # LogRecord's own rounding
        record.relativeCreated = template["relativeCreated"] + (now - template["created"]) * 1000.0
        logger.handle(record)

    def _fold(self) -> None:
        """Add the counts of the rounds since the last fold to the histogram (17 C scans for gamma 16)."""
        pending = self._unfolded
        if pending:
            hist = self._hist_counts
            for k in range(len(hist)):
                hist[k] += pending.count(k)
            del pending[:]

    @property
    def _hist(self) -> list[int]:
        """Request-rounds by accepted-draft count 0..gamma, up to date."""
        self._fold()
        return self._hist_counts

    def _roll_window(self, tokens: int, bs: int, index: int) -> None:
        pos = self._ring_pos
        self._win_tokens += tokens - self._ring_tokens[pos]
        self._win_reqs += bs - self._ring_reqs[pos]
        self._ring_tokens[pos] = tokens
        self._ring_reqs[pos] = bs
        self._ring_pos = (pos + 1) % self._window
        if self._ring_filled < self._window:
            self._ring_filled += 1
            if self._ring_filled < self._window:
                return
        if (
            self._win_tokens < self.alarm_threshold * self._win_reqs
            and self._rounds - self._last_alarm_round >= self._window
        ):
            self._fire_alarm(index)

    def _invalid_round(self, index: int, counts: Sequence[Any]) -> RoundRecord:
        self.invalid_rounds += 1
        bad = [n for n in counts if not isinstance(n, int) or n < 0 or n > self.gamma][:8]
        if not self._invalid_reported:
            self._invalid_reported = True
            self.logger.error(
                "dspark accept round=%d: accepted-draft counts %s are not integers in [0, gamma=%d] "
                "for the %s harvest (source=%s). The scheduler's verify width does not match this geometry: "
                "speculative_num_draft_tokens must be gamma+1=%d. This round and any like it are left "
                "out of the accept-length statistics (reported once; count in summary 'invalid_rounds'). "
                "Check --speculative-num-draft-tokens and the drafter's block_size.%s",
                index,
                bad,
                self.gamma,
                self.harvest,
                self.source,
                self.gamma + 1,
                self._dp_tag,
            )
        lengths = [n + 1 if isinstance(n, int) else -1 for n in counts]
        record = RoundRecord(index, len(counts), lengths, math.nan, valid=False)
        self._records.append(record)
        return record

    # ----------------------------------------------------------------- the alarm

    def _evidence_text(self) -> str:
        votes = [f"{s.signal}={s.value!r} -> {s.vote}" for s in self.evidence if s.vote is not None]
        if votes:
            return "; ".join(votes)
        if self.source == "default":
            return "none (no census signal: dflash is the historical default)"
        return "none (no census signal)"

    def alarm_message(self, window_mean: float, window_rounds: int, window_reqs: int) -> str:
        """The alarm text: what was seen, the harvest, its source and evidence, the cause, the fix."""
        other = "dflash" if self.harvest == "dspark" else "dspark"
        if self.source == "env":
            fix = (
                f"Try {HARVEST_ENV_VAR}={other}, or unset {HARVEST_ENV_VAR} to let the checkpoint census "
                "decide, and restart"
            )
        else:
            fix = f"Try {HARVEST_ENV_VAR}={other} and restart"
        return (
            f"dspark accept ALARM: mean accept length {window_mean:.2f} over the last {window_rounds} rounds "
            f"({window_reqs} request-rounds) is below {self.alarm_threshold:.2f} (gamma={self.gamma}, "
            f"max {self.gamma + 1}). harvest={self.harvest} source={self.source} "
            f"evidence: {self._evidence_text()}. Likely cause: drafts harvested under the wrong convention: "
            f"acceptance collapses toward 1.0 while outputs stay correct. {fix}; if acceptance stays low "
            f"under both harvests, the drafter does not fit this target or workload.{self._dp_tag}"
        )

    def _fire_alarm(self, index: int) -> None:
        window_mean = self._win_tokens / self._win_reqs
        message = self.alarm_message(window_mean, self._window, self._win_reqs)
        self._last_alarm_round = self._rounds
        self.alarms.append(Alarm(index, window_mean, self.alarm_threshold, message))
        del self.alarms[:-16]  # bounded: the 16 most recent alarms
        self.alarms_fired += 1
        self.logger.warning("%s", message)

    # ----------------------------------------------------------------- statistics

    @property
    def records(self) -> list[RoundRecord]:
        """The most recent round records (at most ``settings.record_capacity``), oldest first."""
        return list(self._records)

    @property
    def rounds(self) -> int:
        """Valid verify rounds recorded (rounds with an out-of-range count are not included)."""
        return self._rounds

    @property
    def request_rounds(self) -> int:
        """Sum of batch sizes over the valid rounds."""
        return self._request_rounds

    @property
    def accepted_drafts(self) -> int:
        """Accepted draft tokens over the valid rounds (bonus tokens not included)."""
        return self._accepted

    def accepted_per_position(self) -> list[int]:
        """Request-rounds in which draft position k (k = 1..gamma) was accepted."""
        out = [0] * self.gamma
        running = 0
        for k in range(self.gamma, 0, -1):
            running += self._hist[k]  # draft k is accepted iff the count is >= k
            out[k - 1] = running
        return out

    def per_position_rates(self) -> list[float] | None:
        """Accepted at position k / request-rounds, k = 1..gamma (vLLM's convention); None before data."""
        if self._request_rounds == 0:
            return None
        return [a / self._request_rounds for a in self.accepted_per_position()]

    def mean_accept_length(self) -> float | None:
        """1 + accepted drafts / request-rounds (bonus included); None before any valid round."""
        if self._request_rounds == 0:
            return None
        return 1.0 + self._accepted / self._request_rounds

    def window_mean(self) -> float | None:
        """The rolling-window mean accept length the alarm watches; None until warm-up has passed."""
        if self._win_reqs == 0:
            return None
        return self._win_tokens / self._win_reqs

    def summary(self) -> dict[str, Any]:
        """Everything so far, JSON-able."""
        if self.metrics is not None:
            self.metrics.sync(self)
        elapsed = None if self._t0 is None else self._clock() - self._t0
        return {
            "harvest": self.harvest,
            "source": self.source,
            "gamma": self.gamma,
            "dp_rank": self.dp_rank,
            "rounds": self._rounds,
            "request_rounds": self._request_rounds,
            "accepted_drafts": self._accepted,
            "mean_accept_length": self.mean_accept_length(),
            "per_position": self.per_position_rates(),
            "accepted_per_position": self.accepted_per_position(),
            "accept_length_histogram": {str(n + 1): c for n, c in enumerate(self._hist)},
            "window_mean_accept_length": self.window_mean(),
            "alarm_threshold": self.alarm_threshold,
            "alarms_fired": self.alarms_fired,
            "alarms": [a.to_json() for a in self.alarms],
            "invalid_rounds": self.invalid_rounds,
            "elapsed_s": elapsed,
            "settings": self.settings.to_json(),
        }

    def summary_line(self) -> str:
        """The periodic summary line (cumulative and since the previous summary)."""
        rounds0, reqs0, acc0 = self._last_summary
        d_reqs = self._request_rounds - reqs0
        interval = "n/a" if d_reqs == 0 else f"{1.0 + (self._accepted - acc0) / d_reqs:.2f}"
        mean = self.mean_accept_length()
        rates = self.per_position_rates() or []
        window = self.window_mean()
        elapsed = None if self._t0 is None else self._clock() - self._t0
        rps = "n/a" if not elapsed else f"{self._rounds / elapsed:.1f}"
        return (
            f"dspark accept summary rounds={self._rounds} request_rounds={self._request_rounds} "
            f"mean_accept_len={'n/a' if mean is None else f'{mean:.2f}'} "
            f"last_{self._rounds - rounds0}_rounds={interval} "
            f"window_mean={'n/a' if window is None else f'{window:.2f}'} "
            f"per_position=[{','.join(f'{r:.2f}' for r in rates)}] "
            f"harvest={self._tag} gamma={self.gamma} rounds_per_s={rps} "
            f"alarms={self.alarms_fired} invalid_rounds={self.invalid_rounds}{self._dp_tag}"
        )

    def log_summary(self) -> None:
        """Log the summary line at INFO (independent of the per-round level)."""
        if self.logger.isEnabledFor(logging.INFO):
            self.logger.info("%s", self.summary_line())
        self._last_summary = (self._rounds, self._request_rounds, self._accepted)

    def describe(self) -> str:
        """One startup line: the harvest, gamma and the telemetry settings."""
        s = self.settings
        alarm = (
            "off"
            if not self._alarm_on
            else f"mean<{self.alarm_threshold:.2f} over {s.alarm_window} rounds after {s.alarm_warmup}"
        )
        return (
            f"dspark accept telemetry: harvest={self._tag} gamma={self.gamma} "
            f"per_round_level={_level_name(s.accept_log_level)} summary_every={s.summary_every} "
            f"alarm={alarm} metrics={'on' if self.metrics is not None else 'off'}{self._dp_tag}"
        )


_FAMILIES: dict[tuple[int, tuple[str, ...]], tuple[Any, dict[str, Any]]] = {}


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
            "invalid": make("dspark_harvest_invalid_rounds", "Rounds with a count outside [0, gamma]."),
            # A Gauge at 1, not an Info: sglang runs prometheus_client in multiprocess mode (no Info there).
            "info": prometheus_client.Gauge(
                "dspark_harvest_info",
                "The harvest convention served and where it came from (value is always 1).",
                [*labels, "harvest", "source"],
                multiprocess_mode="max",
                registry=target,
            ),
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
        try:
            import prometheus_client
        except ImportError as exc:
            raise SettingsError(
                "Prometheus metrics were asked for (sglang --enable-metrics) but prometheus_client is not "
                "installed in this environment; install it (pip install prometheus_client; sglang "
                "depends on it) or run without --enable-metrics.",
                where="prometheus_client",
            ) from exc
        if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
            raise GeometryError(
                f"metrics gamma={gamma!r} is not a positive integer; pass RoundGeometry.gamma.",
                where="PrometheusMetrics(gamma=...)",
            )
        self.gamma = gamma
        self.sync_every = max(1, int(sync_every))
        self.sync_interval_s = float(sync_interval_s)
        self._clock = clock if clock is not None else time.monotonic
        self._synced_at = self._clock()
        const = dict(labels or {})
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
        self._c_position = [families["position"].labels(*lv, str(k)) for k in range(1, gamma + 1)]
        self._info = families["info"]
        self._label_values = lv
        self._pushed = (0, 0, 0, [0] * gamma, 0, 0)

    def set_harvest(self, harvest: str, source: str) -> None:
        """Set the harvest info gauge (one label set at 1)."""
        self._info.labels(*self._label_values, harvest, source).set(1)

    def maybe_sync(self, telemetry: AcceptTelemetry) -> None:
        """Called every valid round; pushes after ``sync_every`` rounds or ``sync_interval_s`` seconds."""
        if (
            telemetry.rounds - self._pushed[0] >= self.sync_every
            or self._clock() - self._synced_at >= self.sync_interval_s
        ):
            self.sync(telemetry)

    def sync(self, telemetry: AcceptTelemetry) -> None:
        """Push the telemetry's totals as counter increments since the previous sync."""
        if telemetry.gamma != self.gamma:
            raise GeometryError(
                f"metrics were built for gamma={self.gamma} but the telemetry has gamma={telemetry.gamma}; "
                "build PrometheusMetrics with the same RoundGeometry.gamma.",
                where="PrometheusMetrics.sync(telemetry=...)",
            )
        rounds, reqs, drafts, positions, alarms, invalid = self._pushed
        now_positions = telemetry.accepted_per_position()
        now_alarms = telemetry.alarms_fired
        self._c_rounds.inc(telemetry.rounds - rounds)
        self._c_reqs.inc(telemetry.request_rounds - reqs)
        self._c_drafts.inc(telemetry.accepted_drafts - drafts)
        self._c_tokens.inc(telemetry.accepted_drafts - drafts + telemetry.request_rounds - reqs)
        for child, now, before in zip(self._c_position, now_positions, positions, strict=True):
            child.inc(now - before)
        self._c_alarms.inc(now_alarms - alarms)
        self._c_invalid.inc(telemetry.invalid_rounds - invalid)
        self._synced_at = self._clock()
        self._pushed = (
            telemetry.rounds,
            telemetry.request_rounds,
            telemetry.accepted_drafts,
            now_positions,
            now_alarms,
            telemetry.invalid_rounds,
        )


__all__ = [
    "ACCEPT_LOGGER",
    "ACCEPT_LENGTH_DEFINITION",
    "ENV_LOG_LEVEL",
    "ENV_SUMMARY_EVERY",
    "ENV_ALARM_THRESHOLD",
    "ENV_ALARM_WARMUP",
    "ENV_ALARM_WINDOW",
    "TelemetrySettings",
    "RoundRecord",
    "Alarm",
    "AcceptTelemetry",
    "PrometheusMetrics",
    "parse_log_level",
]
