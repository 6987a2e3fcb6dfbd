"""The offset probe: are the drafts aligned with the positions the harvest gave them?

Draft j of a round anchored at position p is verified against position p+j. A drafter harvested
under the wrong convention still predicts real tokens, just for a neighbouring position:

* a shifted (DSpark-trained) drafter harvested as mask-fill: row k predicts p+k+1 but is placed at
  p+k, so its drafts match the token ONE POSITION LATER than their own;
* a mask-fill (DFlash-trained) drafter harvested as shifted: row k predicts p+k but is placed at
  p+k+1, so its drafts match the token ONE POSITION EARLIER.

The probe compares every draft (accepted or not) with the final output, which at temperature 0 is
the target's own greedy sequence, at its own position and at both neighbours, and names the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass
from typing import Any

from ..harvest import DsparkHarvest

ALIGNED = "aligned"
LATE = "drafts one position late: the drafter looks shifted (dspark)"
EARLY = "drafts one position early: the drafter looks mask-fill (dflash)"
INCONCLUSIVE = "inconclusive"

MIN_MATCHES = 8
"""Fewer matches than this at the best offset say nothing (a random drafter matches by chance)."""
MARGIN = 1.5
"""A neighbour must beat the own position by this factor in match rate to call a misalignment."""


@dataclass(frozen=True)
class ProbeRound:
    """The drafts of one round: ``drafts[j-1]`` was placed at position ``anchor_pos + j``."""

    anchor_pos: int
    drafts: tuple[int, ...]


@dataclass(frozen=True)
class ProbeCounts:
    """Draft matches at offsets 0 (own), +1 (late) and -1 (early), and drafts compared at each."""

    own: int = 0
    late: int = 0
    early: int = 0
    compared_own: int = 0
    compared_late: int = 0
    compared_early: int = 0

    def __add__(self, other: ProbeCounts) -> ProbeCounts:
        return ProbeCounts(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    @property
    def rates(self) -> dict[str, float]:
        """Match rate at each offset: ``own`` (0), ``late`` (+1), ``early`` (-1)."""

        def rate(matches: int, compared: int) -> float:
            return matches / compared if compared else 0.0

        return {
            "own": rate(self.own, self.compared_own),
            "late": rate(self.late, self.compared_late),
            "early": rate(self.early, self.compared_early),
        }


@dataclass(frozen=True)
class ProbeResult:
    """The counts and what they say."""

    counts: ProbeCounts
    verdict: str  # ALIGNED, LATE, EARLY, INCONCLUSIVE, or a "matches neither convention" sentence
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The verdict, its reason, and matches, compared drafts and rates by offset."""
        c = self.counts
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "matches": {"own": c.own, "late": c.late, "early": c.early},
            "compared": {"own": c.compared_own, "late": c.compared_late, "early": c.compared_early},
            "rates": c.rates,
        }


def probe_counts(rounds: Sequence[ProbeRound], sequence: Sequence[int]) -> ProbeCounts:
    """Compare every draft with ``sequence`` (prompt + final output) at offsets 0, +1 and -1."""
    matches = {0: 0, 1: 0, -1: 0}
    compared = {0: 0, 1: 0, -1: 0}
    for rnd in rounds:
        for j, draft in enumerate(rnd.drafts, start=1):
            for offset in matches:
                pos = rnd.anchor_pos + j + offset
                if 0 <= pos < len(sequence):
                    compared[offset] += 1
                    matches[offset] += int(draft == sequence[pos])
    return ProbeCounts(matches[0], matches[1], matches[-1], compared[0], compared[1], compared[-1])


def verdict(
    counts: ProbeCounts,
    harvest: DsparkHarvest | None = None,
    *,
    min_matches: int = MIN_MATCHES,
    margin: float = MARGIN,
) -> ProbeResult:
    """Name the offset the drafts match best.

    ``harvest`` is the convention the drafts were harvested under; it only qualifies the verdict when
    the offset found fits neither known convention (e.g. drafts late under the dspark harvest).
    """
    rates = counts.rates
    by_offset = {
        0: (counts.own, rates["own"]),
        1: (counts.late, rates["late"]),
        -1: (counts.early, rates["early"]),
    }
    summary = rates_text(counts)
    best = max(by_offset, key=lambda o: (by_offset[o][1], o == 0))  # ties go to "aligned"
    best_matches, best_rate = by_offset[best]
    if best_matches < min_matches:
        return ProbeResult(
            counts,
            INCONCLUSIVE,
            f"too few matches to say ({best_matches} at the best offset, need {min_matches}); {summary}",
        )
    if best == 0:
        return ProbeResult(counts, ALIGNED, summary)
    if best_rate < margin * rates["own"]:
        return ProbeResult(
            counts,
            INCONCLUSIVE,
            f"no offset stands out (a neighbour must beat the own position by {margin}x); {summary}",
        )
    return ProbeResult(counts, misalignment(best, harvest), summary)


def offset_probe(
    rounds: Sequence[ProbeRound], sequence: Sequence[int], harvest: DsparkHarvest | None = None
) -> ProbeResult:
    """``verdict(probe_counts(rounds, sequence), harvest)`` for one generation."""
    return verdict(probe_counts(rounds, sequence), harvest)


def rates_text(counts: ProbeCounts) -> str:
    """The match rates by offset, as the probe's verdicts state them."""
    rates = counts.rates
    return (
        f"match rate own {rates['own']:.2f}, one later {rates['late']:.2f}, one earlier {rates['early']:.2f}"
    )


def misalignment(offset: int, harvest: DsparkHarvest | None) -> str:
    """The verdict on drafts that match best one position late (``offset`` 1) or early (-1), under the
    harvest they were drafted with (``None``: not known)."""
    # Late drafts are the signature of a shifted drafter read as mask-fill, early ones the converse;
    # the same offset under the other harvest would mean a drafter two rows off, which no convention is.
    expected = DsparkHarvest.DFLASH if offset == 1 else DsparkHarvest.DSPARK
    if harvest is None or harvest is expected:
        return LATE if offset == 1 else EARLY
    side = "late" if offset == 1 else "early"
    return f"drafts one position {side} under the {harvest.name()} harvest: matches neither known convention"


__all__ = [
    "ProbeRound",
    "ProbeCounts",
    "ProbeResult",
    "probe_counts",
    "verdict",
    "offset_probe",
    "rates_text",
    "misalignment",
    "ALIGNED",
    "LATE",
    "EARLY",
    "INCONCLUSIVE",
]
