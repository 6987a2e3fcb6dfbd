"""One attention-DP group's rounds, replayed from its lines through the telemetry's own counter and alarm.

The report reaches no verdict from what a line *says* it concluded: the accept length, the per-position
rates and the collapse come from the per-round lines, counted by ``AcceptCounts`` and watched by
``RollingAlarm`` with the settings of the group's startup line (the same rule the server ran); a probe
verdict counts only when ``live_verdict.decide`` reaches the same message from the rates and the count
the line states (``confirmed``). Without per-round lines (their level set off), the summary lines'
numbers stand in. A per-round line whose list disagrees with its own ``bs`` or ``mean``, or holds an
accept length outside 1..gamma+1, is rejected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..harvest import DsparkHarvest
from ..probe.offsets import ProbeCounts
from ..probe.verdict import decide
from ..telemetry.alarm import RollingAlarm
from ..telemetry.counts import AcceptCounts
from ..telemetry.settings import TelemetrySettings
from .lines import Line

MAX_HELD_LINES = 2_000
"""Per-round lines held while a group's gamma is unknown (a log that starts after the startup line), and
summary means kept for the over-time view (past it, every other one is dropped)."""
KEPT = 100
"""Logged alarms, replayed alarm rounds, probe and context-alarm lines kept per group (the latest; every
one is counted)."""
MAX_HELD_LENGTHS = 20_000
"""Accept lengths held while gamma is unknown, whatever the lines' sizes: about 1 MB per group at most;
then gamma is inferred from the longest held, as at the end of a log."""
TIME_BINS = 40
INFERRED = "inferred: the longest accept length seen, minus one (a lower bound)"


class Timeline:
    """Accept length over the rounds, in at most ``2 * TIME_BINS`` bins of equal width (doubled, and
    neighbours merged, whenever they fill up): bounded memory for a log of any length."""

    def __init__(self) -> None:
        self.width = 1
        self.bins: list[list[int]] = []  # [first round ordinal, request-rounds, tokens]

    def add(self, ordinal: int, requests: int, tokens: int) -> None:
        """One round (its ordinal in the group, 1-based): ``requests`` request-rounds, ``tokens`` accepted
        tokens (bonus included)."""
        if self.bins and ordinal - self.bins[-1][0] < self.width:
            last = self.bins[-1]
            last[1] += requests
            last[2] += tokens
            return
        self.bins.append([ordinal, requests, tokens])
        if len(self.bins) >= 2 * TIME_BINS:
            self.width *= 2
            merged = [self.bins[i] for i in range(0, len(self.bins), 2)]
            for i, b in enumerate(merged):
                if 2 * i + 1 < len(self.bins):
                    b[1] += self.bins[2 * i + 1][1]
                    b[2] += self.bins[2 * i + 1][2]
            self.bins = merged

    def to_json(self) -> list[dict[str, Any]]:
        """``[{round, request_rounds, mean_accept_length}]`` (round: the bin's first), oldest first."""
        return [
            {"round": b[0], "request_rounds": b[1], "mean_accept_length": b[2] / b[1]}
            for b in self.bins
            if b[1]
        ]


WORST_REQUESTS = 10
MIN_WORST_ROUNDS = 4
"""Rounds a request needs before it can be listed among the worst (a one-round request says little)."""
REQUEST_BINS = (1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)
"""Upper bounds of the report's per-request accept-length distribution (one more bin beyond the last)."""


class Requests:
    """The per-request lines of a group: how many, their accept-length distribution, the worst few
    (lowest accept length among those with ``MIN_WORST_ROUNDS``): bounded whatever the log."""

    def __init__(self) -> None:
        self.count = 0
        self.rejected = 0  # accept_len disagreeing with rounds and accepted_drafts
        self.bins = [0] * (len(REQUEST_BINS) + 1)
        self.rounds = 0
        self.accepted = 0
        self.worst: list[tuple[float, int, str, int, int]] = []  # (accept_len, -rounds, rid, rounds, line)

    def add(self, f: dict[str, str], number: int) -> None:
        rounds, accepted, mean = int(f["rounds"]), int(f["accepted"]), float(f["mean"])
        if rounds < 1 or abs(1.0 + accepted / rounds - mean) > 0.0051:
            self.rejected += 1
            return
        self.count += 1
        self.rounds += rounds
        self.accepted += accepted
        self.bins[sum(mean > b for b in REQUEST_BINS)] += 1
        if rounds >= MIN_WORST_ROUNDS:
            self.worst.append((mean, -rounds, f["rid"], rounds, number))
            if len(self.worst) > 4 * WORST_REQUESTS:
                self.worst = sorted(self.worst)[:WORST_REQUESTS]

    def to_json(self) -> dict[str, Any]:
        names = [f"<={b:g}" for b in REQUEST_BINS] + [f">{REQUEST_BINS[-1]:g}"]
        return {
            "requests": self.count,
            "rejected_lines": self.rejected,
            "mean_accept_length": None if not self.rounds else 1.0 + self.accepted / self.rounds,
            "distribution": [
                {"accept_length": n, "requests": c} for n, c in zip(names, self.bins, strict=True)
            ],
            "worst": [
                {"rid": rid, "rounds": rounds, "accept_length": mean, "line": line}
                for mean, _, rid, rounds, line in sorted(self.worst)[:WORST_REQUESTS]
            ],
        }


@dataclass
class Group:
    """What one group's lines add up to."""

    dp: int | None
    harvest: str | None = None
    source: str | None = None
    gamma: int | None = None
    gamma_from: str | None = None  # "startup line", "summary line" or INFERRED
    settings: TelemetrySettings = field(default_factory=TelemetrySettings)
    counts: AcceptCounts | None = None
    alarm: RollingAlarm | None = None
    pending: list[tuple[int, list[int]]] = field(default_factory=list)
    timeline: Timeline = field(default_factory=Timeline)
    summaries: list[tuple[int, float]] = field(default_factory=list)  # (rounds, mean since the last)
    last_round: int = 0
    fresh: bool = False
    restarts: int = 0
    rejected: int = 0
    replayed_alarms: list[int] = field(default_factory=list)  # the last KEPT: the round each fired at
    replayed_total: int = 0
    alarms_this_run: int = 0  # replayed since the last restart
    logged_alarms: list[dict[str, Any]] = field(default_factory=list)  # the last KEPT
    logged_total: int = 0
    context_alarms: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)  # the last KEPT
    last_confirmed: dict[str, Any] | None = None  # the last probe line its own numbers confirm
    summary: dict[str, Any] | None = None
    host_cost: float | None = None  # the largest plugin fraction logged
    host_cost_thread: float | None = None  # the largest queue-thread time over the round time logged
    context_buckets: list[str] | None = None  # the server's buckets, from its startup line
    pending_lengths: int = 0
    geometry_errors: int = 0
    requests: Requests = field(default_factory=Requests)  # the per-request lines

    # ------------------------------------------------------------------ feeding lines

    def feed(self, line: Line) -> None:
        """Take one trusted line of this group's."""
        getattr(self, f"_{line.kind}")(line)

    def _request(self, line: Line) -> None:
        self._tag(line.fields)
        self.requests.add(line.fields, line.number)

    def _tag(self, f: dict[str, str]) -> None:
        self.harvest, self.source = f.get("harvest", self.harvest), f.get("source", self.source)

    def _startup(self, line: Line) -> None:
        f = line.fields
        settings = TelemetrySettings()  # the server's alarm was off: the report judges by the default
        if "threshold" in f:  # SettingsError for values no server writes: the line is malformed
            settings = TelemetrySettings(
                alarm_threshold=float(f["threshold"]),
                alarm_window=max(1, int(f["window"])),
                alarm_warmup=int(f["warmup"]),
            )
        self._tag(f)
        self.settings = settings
        self.context_buckets = f["buckets"].split(",") if "buckets" in f else None
        if self.counts is not None:  # a new process: the alarm starts over; the counts go on
            self._restart()
        self._set_gamma(int(f["gamma"]), "startup line")

    def _summary(self, line: Line) -> None:
        f = line.fields
        self._tag(f)
        self.summary = {
            "rounds": int(f["rounds"]),
            "request_rounds": int(f["reqs"]),
            "mean_accept_length": _number(f["mean"]),
            "window_mean": _number(f["window"]),
            "last": _number(f["last"]),
            "per_position": [float(r) for r in f["rates"].split(",") if r],
            "alarms": int(f["alarms"]),
            "probe": f.get("probe"),
            "by_context": _by_context(f.get("by_context")),
            "held_requests": int(f["held"]) if "held" in f else None,
            "swept_requests": int(f["swept"]) if "swept" in f else None,
        }
        if self.summary["last"] is not None:
            self.summaries.append((self.summary["rounds"], self.summary["last"]))
            if len(self.summaries) > MAX_HELD_LINES:  # every other one: the whole span, at half the detail
                del self.summaries[::2]
        self._set_gamma(int(f["gamma"]), "summary line")

    def _round(self, line: Line) -> None:
        f = line.fields
        self.round(int(f["round"]), f["lengths"], int(f["bs"]), float(f["mean"]), f["harvest"], f["source"])

    def round(self, index: int, listed: str, bs: int, mean: float, harvest: str, source: str) -> None:
        """One per-round line's fields (the reader's fast path calls this directly)."""
        lengths = list(map(int, listed.split(","))) if listed else []
        if len(lengths) != bs or not lengths or min(lengths) < 1 or abs(sum(lengths) / bs - mean) > 0.0051:
            self.rejected += 1
            return
        self.harvest, self.source = harvest, source
        if index <= self.last_round and self.counts is not None and not self.fresh:
            self._restart()
        self.fresh = False
        self.last_round = index
        if self.counts is None:
            self.pending.append((index, lengths))
            self.pending_lengths += len(lengths)
            if len(self.pending) >= MAX_HELD_LINES or self.pending_lengths >= MAX_HELD_LENGTHS:
                self._set_gamma(max(max(ls) for _, ls in self.pending) - 1, INFERRED)
            return
        self._count(lengths)

    def _count(self, lengths: list[int]) -> None:
        counts = self.counts
        assert counts is not None and self.alarm is not None
        if not counts.add([n - 1 for n in lengths]):  # an accept length above gamma + 1
            counts.invalid_rounds -= 1  # not the server's: a line the report rejects
            self.rejected += 1
            return
        self.timeline.add(counts.rounds, len(lengths), sum(lengths))
        if self.alarm.observe(counts, counts.rounds) is not None:
            self.replayed_alarms.append(counts.rounds)
            self.replayed_total += 1
            del self.replayed_alarms[:-KEPT]
            self.alarms_this_run += 1

    def _alarm(self, line: Line) -> None:
        self.logged_total += 1
        del self.logged_alarms[: 1 - KEPT]
        self.logged_alarms.append(_logged_alarm(line))

    def _probe(self, line: Line) -> None:
        f = line.fields
        entry: dict[str, Any] = {"file": line.file, "line": line.number, "message": f["message"]}
        entry["kind"], entry["confirmed"] = self._confirm(f)
        self.probes.append(entry)
        del self.probes[:-KEPT]
        if entry["confirmed"]:
            self.last_confirmed = entry

    def _confirm(self, f: dict[str, str]) -> tuple[str | None, bool]:
        """The kind ``decide`` reaches from the line's own numbers, and whether it writes the same
        message (``None``, False: the group's harvest is unknown, so nothing can be confirmed)."""
        if self.harvest is None:
            return None, False
        n = int(f["scored"])
        own, late, early = (round(float(f[k]) * n) for k in ("own", "late", "early"))
        harvest = DsparkHarvest.from_name(self.harvest) or DsparkHarvest.DFLASH  # the grammar's two names
        found = decide(ProbeCounts(own, late, early, n, n, n), harvest)
        return found.kind, found.message == f["message"]

    def _context_alarm(self, line: Line) -> None:
        self.context_alarms.append({"file": line.file, "line": line.number, "message": line.fields["rest"]})
        del self.context_alarms[:-KEPT]

    def _host_cost(self, line: Line) -> None:
        fraction = float(line.fields["fraction"])
        self.host_cost = fraction if self.host_cost is None else max(self.host_cost, fraction)
        thread_us, round_us = line.fields.get("thread_us"), float(line.fields["round_us"])
        if thread_us is not None and round_us > 0:
            thread = float(thread_us) / round_us
            self.host_cost_thread = (
                thread if self.host_cost_thread is None else max(self.host_cost_thread, thread)
            )

    def _geometry(self, line: Line) -> None:
        self.geometry_errors += 1

    # ------------------------------------------------------------------ the gamma, once known

    def _set_gamma(self, gamma: int, where: str) -> None:
        if self.counts is not None or not 1 <= gamma <= 1024:
            return
        self.gamma, self.gamma_from = gamma, where
        self.counts = AcceptCounts(gamma)
        self.alarm = self._new_alarm()
        pending, self.pending = self.pending, []
        for _, lengths in pending:
            self._count(lengths)

    def _restart(self) -> None:
        self.restarts += 1
        self.alarm = self._new_alarm()
        self.alarms_this_run = 0
        self.fresh = True  # the startup line came first: the next round starts the new run

    def _new_alarm(self) -> RollingAlarm:
        """The server's alarm rule on this group's settings (an alarm the server had off: the default
        threshold, so the report still judges the rounds)."""
        settings = self.settings
        if settings.alarm_threshold <= 0:
            settings = TelemetrySettings(
                alarm_window=settings.alarm_window, alarm_warmup=settings.alarm_warmup
            )
        harvest = DsparkHarvest.from_name(self.harvest or "dflash") or DsparkHarvest.DFLASH
        return RollingAlarm(self.gamma or 1, settings, harvest, self.source or "default", (), "")

    def close(self) -> None:
        """The end of the log: a group whose gamma never showed takes the longest accept length seen."""
        if self.counts is None and self.pending:
            self._set_gamma(max(max(ls) for _, ls in self.pending) - 1, INFERRED)


def _logged_alarm(line: Line) -> dict[str, Any]:
    """What the report keeps of one ALARM line: where, when, its window mean and threshold, its cause."""
    f = line.fields
    rest = f["rest"]
    cut = max(rest.find(k) for k in ("Likely cause", "Measured cause", "Measured (", "Cause not"))
    return {
        "file": line.file,
        "line": line.number,
        "time": line.time,
        "window_mean": float(f["mean"]),
        "threshold": float(f["threshold"]),
        "cause": rest[cut:] if cut >= 0 else rest,
    }


def _by_context(text: str | None) -> list[tuple[str, float, int | None]] | None:
    """``[(bucket, mean, request-rounds)]`` of a summary's ``by_context=[<=512:2.91/1200,...]``
    (request-rounds ``None`` in a log written before they were; ``None``: not logged)."""
    if text is None:
        return None
    out = []
    for part in text.split(","):
        name, _, value = part.rpartition(":")
        mean, _, reqs = value.partition("/")
        if name and mean.replace(".", "", 1).isdigit() and (not reqs or reqs.isdigit()):
            out.append((name, float(mean), int(reqs) if reqs else None))
    return out


def _number(text: str) -> float | None:
    return None if text == "n/a" else float(text)


__all__ = ["Group", "Timeline", "TIME_BINS", "MAX_HELD_LINES"]
