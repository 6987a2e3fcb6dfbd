"""Acceptance by context length: the accept counter split by the request's tokens at the anchor.

A drafter trained on short contexts accepts less and less as a request grows (public reports: an
accept length of exactly 1.0 past 131k tokens of input); the overall mean dilutes it, and the live
probe still says ``matched`` (the drafts sit at their own positions, they are just wrong more often).
``ContextCounts`` keeps one histogram per bucket (``MEMRA_DSPARK_CONTEXT_BUCKETS``: upper bounds, one
more bucket beyond the last); ``context_fall`` is the rule that names that cause, and never a harvest
override: the server's context ALARM and ``report`` both apply it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from operator import mul
from typing import Any

MIN_REQUEST_ROUNDS = 50
"""Request-rounds a bucket needs before its mean is shown or compared."""
FALL_FRACTION = 0.5
"""The long-context buckets' accepted drafts per request-round at most this fraction of the short ones'."""


def bucket_names(bounds: Sequence[int]) -> list[str]:
    """``<=512``, ``<=1k``, ..., ``>128k``: one name per bucket (the label Prometheus and the lines use)."""

    def short(n: int) -> str:
        return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)

    return [f"<={short(b)}" for b in bounds] + ([f">{short(bounds[-1])}"] if bounds else [])


class ContextCounts:
    """``hist[i][n]``: request-rounds in bucket ``i`` in which exactly ``n`` drafts were accepted."""

    def __init__(self, gamma: int, bounds: Sequence[int]) -> None:
        self.gamma = gamma
        self.bounds = tuple(bounds)
        self.names = bucket_names(self.bounds)
        self.hist = [[0] * (gamma + 1) for _ in self.names]

    def add(self, counts: Sequence[int], contexts: Sequence[int]) -> None:
        """One valid round: each request's accepted-draft count and its context length at the anchor
        (a length list that does not match the counts is not counted)."""
        if len(contexts) != len(counts):
            return
        bounds, hist = self.bounds, self.hist
        for n, context in zip(counts, contexts, strict=True):
            hist[bisect_left(bounds, context)][n] += 1

    def request_rounds(self, i: int) -> int:
        return sum(self.hist[i])

    def mean(self, i: int) -> float | None:
        """Bucket ``i``'s mean accept length (accepted drafts + 1); ``None`` without request-rounds."""
        reqs = self.request_rounds(i)
        return None if reqs == 0 else 1.0 + sum(n * k for n, k in enumerate(self.hist[i])) / reqs

    def per_position(self, i: int) -> list[float] | None:
        """Bucket ``i``'s rate of draft position k accepted, k = 1..gamma."""
        reqs, out, running = self.request_rounds(i), [0.0] * self.gamma, 0
        if reqs == 0:
            return None
        for k in range(self.gamma, 0, -1):
            running += self.hist[i][k]
            out[k - 1] = running / reqs
        return out

    def line(self) -> str:
        """`` by_context=[<=512:2.91/1200,<=1k:2.40/310]``: each bucket with ``MIN_REQUEST_ROUNDS``, its
        mean accept length and request-rounds (what ``report`` applies ``context_fall`` to); nothing
        while no bucket has them (a telemetry fed no context lengths writes the line as before)."""
        shown = [
            f"{name}:{self.mean(i):.2f}/{self.request_rounds(i)}"
            for i, name in enumerate(self.names)
            if self.request_rounds(i) >= MIN_REQUEST_ROUNDS
        ]
        return f" by_context=[{','.join(shown)}]" if shown else ""

    def to_json(self) -> list[dict[str, Any]]:
        """Every bucket with request-rounds: its name, upper bound, request-rounds, mean, per position."""
        return [
            {
                "bucket": name,
                "up_to": self.bounds[i] if i < len(self.bounds) else None,
                "request_rounds": self.request_rounds(i),
                "mean_accept_length": self.mean(i),
                "per_position": self.per_position(i),
            }
            for i, name in enumerate(self.names)
            if self.request_rounds(i)
        ]

    def falls_with_context(self, healthy: float) -> tuple[str, float, float] | None:
        """``context_fall`` on these buckets' counts."""
        per = [
            (name, sum(h), sum(map(mul, h, range(len(h)))))
            for name, h in zip(self.names, self.hist, strict=True)
        ]
        return context_fall(per, healthy)


def context_fall(
    buckets: Sequence[tuple[str, int, float]], healthy: float
) -> tuple[str, float, float] | None:
    """The one rule of a fall with context length, for the server's context ALARM and for ``report``.

    ``buckets``: ``(name, request-rounds, accepted drafts)`` in bucket order. Only buckets with
    ``MIN_REQUEST_ROUNDS`` count. At each cut between them, the buckets below are pooled and so are those
    above: acceptance falls where the short side is healthy (a mean of at least ``healthy``, the alarm
    threshold) and the long side far below it (accepted drafts per request-round at most
    ``FALL_FRACTION`` of the short side's). Returns ``(bound, long_mean, short_mean)`` at the WIDEST such
    cut (``bound``: the last short bucket's upper bound, such as ``2k``), so an alarm never names a
    bound below contexts that were healthy; else ``None``. A harvest mismatch collapses every bucket:
    it never fits."""
    shown = [(name, reqs, acc) for name, reqs, acc in buckets if reqs >= MIN_REQUEST_ROUNDS]
    total_reqs, total_acc = sum(r for _, r, _ in shown), sum(a for _, _, a in shown)
    short_reqs, short_acc, found = 0, 0.0, None
    for name, reqs, acc in shown[:-1]:  # running sums: linear in the buckets
        short_reqs, short_acc = short_reqs + reqs, short_acc + acc
        short = 1.0 + short_acc / short_reqs
        long = 1.0 + (total_acc - short_acc) / (total_reqs - short_reqs)
        if short >= healthy and long - 1.0 <= FALL_FRACTION * (short - 1.0):
            found = (name.removeprefix("<="), long, short)
    return found


def context_alarm_message(found: tuple[str, float, float], probe_kind: str | None, dp_tag: str) -> str:
    """The WARNING that names a context-length collapse as its cause (no harvest override)."""
    bound, long, short = found
    probe = "the live probe measured the drafts at their own positions (matched)"
    if probe_kind != "matched":
        probe = f"the live probe has not measured a misalignment ({probe_kind or 'no probe'})"
    return (
        f"dspark accept ALARM (context): acceptance falls with context length: past {bound} tokens the "
        f"mean accept length is {long:.2f} against {short:.2f} below; {probe}. The drafter was likely "
        "trained on shorter contexts; the harvest is not the cause: changing it will not help. Serve "
        f"long requests without speculation, or use a drafter trained on longer contexts.{dp_tag}"
    )


__all__ = [
    "MIN_REQUEST_ROUNDS",
    "FALL_FRACTION",
    "ContextCounts",
    "bucket_names",
    "context_alarm_message",
    "context_fall",
]
