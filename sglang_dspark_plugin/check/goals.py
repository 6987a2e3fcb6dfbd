"""The embedded models' targets, graded per drafter (printed, never asserted on timing in tests)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .report import CheckReport, RunRow

TARGET_RATIO, TARGET_MATCHED, TARGET_SPEEDUP = 2.0, 2.5, 1.5


Graded = tuple[str, str, bool]  # drafter, description, met


def _ties(*runs: RunRow) -> str:
    ties = sum(len(r.near_ties) for r in runs)
    return f" (near-tie flips excepted: {ties})" if ties else ""


def _graded(name: str, matched: RunRow, mismatched: RunRow, ar_tokens_per_s: float) -> list[Graded]:
    ratio = matched.accept_length / mismatched.accept_length
    speedup = matched.tokens_per_s / ar_tokens_per_s if ar_tokens_per_s else 0.0
    graded = [
        (
            f"{name}: matched / mismatched accept length {ratio:.2f}x >= {TARGET_RATIO}x",
            ratio >= TARGET_RATIO,
        ),
        (
            f"{name}: matched accept length {matched.accept_length:.2f} >= {TARGET_MATCHED}",
            matched.accept_length >= TARGET_MATCHED,
        ),
        (
            f"{name}: matched speedup over autoregressive {speedup:.2f}x >= {TARGET_SPEEDUP}x",
            speedup >= TARGET_SPEEDUP,
        ),
        (
            f"{name}: exact in both harvests{_ties(matched, mismatched)}",
            matched.exact_up_to_ties and mismatched.exact_up_to_ties,
        ),
    ]
    return [(name, text, met) for text, met in graded]


def grade(runs: Sequence[RunRow], ar_tokens_per_s: float) -> list[Graded]:
    """The targets per drafter, in the order its runs come: (drafter, description, met)."""
    out: list[Graded] = []
    by_drafter: dict[str, list[RunRow]] = {}
    for r in runs:
        by_drafter.setdefault(r.drafter, []).append(r)
    for name, rs in by_drafter.items():
        matched = [r for r in rs if r.matched]
        mismatched = [r for r in rs if not r.matched]
        if len(matched) != 1 or len(mismatched) != 1:
            out.append(
                (name, f"{name}: the census cannot tell its strategy, no matched run to measure", False)
            )
            continue
        out += _graded(name, matched[0], mismatched[0], ar_tokens_per_s)
    return out


def targets(report: CheckReport | Mapping[str, Any]) -> list[tuple[str, bool]]:
    """The targets per drafter of a report, or of its ``--json`` object read back: (description, met)."""
    if isinstance(report, CheckReport):
        return [(t.description, t.met) for t in report.targets]
    graded = grade([RunRow.from_json(r) for r in report["runs"]], report["ar_tokens_per_s"])
    return [(text, met) for _, text, met in graded]


__all__ = ["TARGET_RATIO", "TARGET_MATCHED", "TARGET_SPEEDUP", "grade", "targets"]
