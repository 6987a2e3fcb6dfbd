"""The rolling alarm: the mean accept length over the last rounds, checked against a threshold, and a
message that names the harvest, its source, the census evidence and the override to try."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..census.draft_config import vote_list
from ..harvest import ENV_VAR as HARVEST_ENV_VAR
from ..harvest import DsparkHarvest

if TYPE_CHECKING:
    from ..census.draft_config import Signal
    from .counts import AcceptCounts
    from .settings import TelemetrySettings

MAX_KEPT = 16
"""Fired alarms kept (the most recent); ``RollingAlarm.fired`` counts them all."""


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


class RollingAlarm:
    """Fires when the request-weighted mean accept length of the last ``alarm_window`` valid rounds is
    below the threshold, once ``alarm_warmup`` valid rounds have passed and a full window has been seen;
    at most once per window.

    The threshold is capped at 1 + gamma/2 so a tiny block (gamma 1: at most 2.0) is not flagged for
    its own ceiling; 0 turns the alarm off (``on`` is then False and nothing is observed).
    """

    def __init__(
        self,
        gamma: int,
        settings: TelemetrySettings,
        harvest: DsparkHarvest,
        source: str,
        evidence: Sequence[Signal],
        dp_tag: str,
        probe: Any = None,
    ) -> None:
        self.gamma = gamma
        self.threshold = min(settings.alarm_threshold, 1.0 + gamma / 2.0)
        self.on = self.threshold > 0
        self.warmup = settings.alarm_warmup
        self.window = settings.alarm_window
        self.harvest = harvest
        self.source = source
        self.evidence = tuple(evidence)
        self.dp_tag = dp_tag
        self.probe: Any = probe  # a LiveProbe measuring the cause (the served telemetry's), or None
        self.alarms: list[Alarm] = []  # the MAX_KEPT most recent
        self.fired = 0
        self._seen = 0  # valid rounds observed
        self._last_fired = -self.window  # the round count at the last alarm
        # The counter's (tokens, request-rounds) totals at the end of warm-up and after each round since,
        # the last window + 1 of them: a window's sums are the newest minus the oldest.
        self._marks: deque[tuple[int, int]] = deque([(0, 0)] if self.warmup == 0 else [], self.window + 1)

    def observe(self, counts: AcceptCounts, index: int) -> Alarm | None:
        """Take the counter's totals after one more valid round (``index``, named by the alarm); the
        alarm it fires, if any."""
        self._seen += 1
        if self._seen < self.warmup:
            return None
        self._marks.append((counts.accepted_drafts + counts.request_rounds, counts.request_rounds))
        if len(self._marks) <= self.window or self._seen - self._last_fired < self.window:
            return None
        tokens, reqs = self._window()
        if tokens >= self.threshold * reqs:
            return None
        window_mean = tokens / reqs
        alarm = Alarm(index, window_mean, self.threshold, self.message(window_mean, self.window, reqs))
        self._last_fired = self._seen
        self.alarms.append(alarm)
        del self.alarms[:-MAX_KEPT]
        self.fired += 1
        return alarm

    def _window(self) -> tuple[int, int]:
        """Accepted tokens (bonus included) and request-rounds of the rounds in the window."""
        (tokens0, reqs0), (tokens1, reqs1) = self._marks[0], self._marks[-1]
        return tokens1 - tokens0, reqs1 - reqs0

    def window_mean(self) -> float | None:
        """The rolling-window mean accept length; None until warm-up has passed."""
        if len(self._marks) < 2:
            return None
        tokens, reqs = self._window()
        return tokens / reqs

    def low(self) -> bool:
        """Whether the rolling window's mean accept length is below the threshold now."""
        window = self.window_mean()
        return self.on and window is not None and window < self.threshold

    def _evidence_text(self) -> str:
        votes = vote_list(self.evidence)
        if votes:
            return votes
        if self.source == "default":
            return "none (no census signal: dflash is the historical default)"
        return "none (no census signal)"

    def message(self, window_mean: float, window_rounds: int, window_reqs: int) -> str:
        """The alarm text: what was seen, the harvest, its source and evidence, the cause, the fix."""
        other = DsparkHarvest.DFLASH if self.harvest is DsparkHarvest.DSPARK else DsparkHarvest.DSPARK
        if self.source == "env":
            fix = (
                f"Try {HARVEST_ENV_VAR}={other.name()}, or unset {HARVEST_ENV_VAR} to let the checkpoint "
                "census decide, and restart"
            )
        else:
            fix = f"Try {HARVEST_ENV_VAR}={other.name()} and restart"
        head = (
            f"dspark accept ALARM: mean accept length {window_mean:.2f} over the last {window_rounds} rounds "
            f"({window_reqs} request-rounds) is below {self.threshold:.2f} (gamma={self.gamma}, "
            f"max {self.gamma + 1}). harvest={self.harvest.name()} source={self.source} "
            f"evidence: {self._evidence_text()}. "
        )
        measured = self._measured_cause()
        if measured is not None:
            return f"{head}{measured}{self.dp_tag}"
        return (
            f"{head}Likely cause: drafts harvested under the wrong convention: "
            f"acceptance collapses toward 1.0 while outputs stay correct. {fix}; if acceptance stays low "
            f"under both harvests, the drafter does not fit this target or workload.{self.dp_tag}"
        )

    def _measured_cause(self) -> str | None:
        """What the live probe measured, once decisive: the cause and its fix (or that the harvest is
        not the cause), instead of the guess; before it decides, that it is measuring (no override is
        advised that the probe may refute); ``None`` without a probe (the guess stands)."""
        if self.probe is None:
            return None
        verdict = self.probe.assessment()
        if not verdict.decisive:  # measuring: no override advised before it is measured
            return (
                f"Cause not measured yet: the live probe is still scoring drafts ({verdict.message}); "
                "its verdict follows as a 'dspark probe:' line, naming the harvest override if the harvest "
                "is the cause, or that no offset matches (a drafter that does not fit this target or "
                "workload)."
            )
        if verdict.override is not None:
            return f"Measured cause (live probe): {verdict.message}; then restart."
        if verdict.kind == "matched":
            return (
                f"Measured (live probe): {verdict.message}: the harvest is not the cause; the drafter "
                "accepts little on this workload."
            )
        return f"Measured (live probe): {verdict.message}."


__all__ = ["Alarm", "RollingAlarm", "MAX_KEPT"]
