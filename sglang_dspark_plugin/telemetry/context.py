"""Acceptance by context length: the accept counter split by the request's tokens at the anchor.

A drafter trained on short contexts accepts less and less as a request grows (public reports: an
accept length of exactly 1.0 past 131k tokens of input); the overall mean dilutes it, and the live
probe still says ``matched`` (the drafts sit at their own positions, they are just wrong more often).
``ContextCounts`` keeps one histogram per bucket (``MEMRA_DSPARK_CONTEXT_BUCKETS``: upper bounds, one
more bucket beyond the last); ``falls_with_context`` is the rule that names that cause, and never a
harvest override.
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
        """`` by_context=[<=512:2.91,<=1k:2.40]``: the buckets with ``MIN_REQUEST_ROUNDS``; nothing
        while no bucket has them (a telemetry fed no context lengths writes the line as before)."""
        shown = [
            f"{name}:{self.mean(i):.2f}"
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

    def falls_with_context(self, healthy: float) -> tuple[int, float, float] | None:
        """``(bound, long_mean, short_mean)`` where acceptance up to ``bound`` tokens is healthy (a mean
        of at least ``healthy``, the alarm threshold) and past it far below (accepted drafts per
        request-round at most ``FALL_FRACTION`` of it), both sides with ``MIN_REQUEST_ROUNDS``, at the
        first such bound; else ``None``. A harvest mismatch collapses every bucket: it never fits."""
        # each bucket's (request-rounds, accepted drafts) once; the pools below and above each cut
        # are running sums of them, so the whole scan is linear in the buckets
        per = [(sum(h), sum(map(mul, h, range(len(h))))) for h in self.hist]
        total_reqs, total_acc = sum(r for r, _ in per), sum(a for _, a in per)
        short_reqs = short_acc = 0
        for cut in range(1, len(self.names)):
            short_reqs, short_acc = short_reqs + per[cut - 1][0], short_acc + per[cut - 1][1]
            long_reqs = total_reqs - short_reqs
            if short_reqs < MIN_REQUEST_ROUNDS or long_reqs < MIN_REQUEST_ROUNDS:
                continue
            short, long = 1.0 + short_acc / short_reqs, 1.0 + (total_acc - short_acc) / long_reqs
            if short < healthy:
                continue
            if long - 1.0 <= FALL_FRACTION * (short - 1.0):
                return self.bounds[cut - 1], long, short
        return None


def context_alarm_message(found: tuple[int, float, float], probe_kind: str | None, dp_tag: str) -> str:
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
]
