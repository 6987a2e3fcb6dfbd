"""The rolling alarm: the mean accept length over the last rounds, checked against a threshold, and a
message that names the harvest, its source, the census evidence and the override to try."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..draft_config import vote_list
from ..harvest import ENV_VAR as HARVEST_ENV_VAR
from ..harvest import DsparkHarvest

if TYPE_CHECKING:
    from ..draft_config import Signal
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
    ) -> None:
        self.gamma = gamma
        self.threshold = min(settings.alarm_threshold, 1.0 + gamma / 2.0)
        self.on = self.threshold > 0
        self.warmup = settings.alarm_warmup
        self.window = window = settings.alarm_window
        self.harvest = harvest
        self.source = source
        self.evidence = tuple(evidence)
        self.dp_tag = dp_tag
        self.alarms: list[Alarm] = []  # the MAX_KEPT most recent
        self.fired = 0
        self._rounds = 0  # valid rounds observed
        # Ring buffers of per-round accepted tokens (bonus included) and batch sizes, and their sums.
        self._ring_tokens = [0] * window
        self._ring_reqs = [0] * window
        self._ring_pos = 0
        self._ring_filled = 0
        self._win_tokens = 0
        self._win_reqs = 0
        self._last_alarm_round = -window

    def observe(self, tokens: int, bs: int, index: int) -> Alarm | None:
        """Add one valid round (accepted tokens, bonus included, over ``bs`` requests); the alarm it
        fires, if any. ``index`` is the round's index, named by the alarm."""
        self._rounds += 1
        if self._rounds <= self.warmup:
            return None
        pos = self._ring_pos
        self._win_tokens += tokens - self._ring_tokens[pos]
        self._win_reqs += bs - self._ring_reqs[pos]
        self._ring_tokens[pos] = tokens
        self._ring_reqs[pos] = bs
        self._ring_pos = (pos + 1) % self.window
        if self._ring_filled < self.window:
            self._ring_filled += 1
            if self._ring_filled < self.window:
                return None
        if (
            self._win_tokens < self.threshold * self._win_reqs
            and self._rounds - self._last_alarm_round >= self.window
        ):
            return self._fire(index)
        return None

    def _fire(self, index: int) -> Alarm:
        window_mean = self._win_tokens / self._win_reqs
        message = self.message(window_mean, self.window, self._win_reqs)
        alarm = Alarm(index, window_mean, self.threshold, message)
        self._last_alarm_round = self._rounds
        self.alarms.append(alarm)
        del self.alarms[:-MAX_KEPT]
        self.fired += 1
        return alarm

    def window_mean(self) -> float | None:
        """The rolling-window mean accept length; None until warm-up has passed."""
        if self._win_reqs == 0:
            return None
        return self._win_tokens / self._win_reqs

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
        return (
            f"dspark accept ALARM: mean accept length {window_mean:.2f} over the last {window_rounds} rounds "
            f"({window_reqs} request-rounds) is below {self.threshold:.2f} (gamma={self.gamma}, "
            f"max {self.gamma + 1}). harvest={self.harvest.name()} source={self.source} "
            f"evidence: {self._evidence_text()}. Likely cause: drafts harvested under the wrong convention: "
            f"acceptance collapses toward 1.0 while outputs stay correct. {fix}; if acceptance stays low "
            f"under both harvests, the drafter does not fit this target or workload.{self.dp_tag}"
        )


__all__ = ["Alarm", "RollingAlarm", "MAX_KEPT"]
