"""The live offset probe's verdict: when the counts of scored drafts decide, and what they say.

``decide`` names the offset the drafts match best once the counts are decisive (``DecisionRule``;
docs/live-probe.md gives the measured rates behind its defaults), in the words of ``check``'s offline
probe (``probe.offsets``), with the harvest override when one fixes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..harvest import ENV_VAR, DsparkHarvest
from .offsets import EARLY, LATE, ProbeCounts, misalignment, rates_text

OFFSETS = (0, 1, -1)
"""Own position, one later, one earlier: the order of ``ProbeCounts``' fields."""
KINDS = ("matched", "late", "early", "neither", "no-match", "inconclusive")
MATCHED, INCONCLUSIVE = KINDS[0], KINDS[-1]
NO_MATCH = "no offset matches: the drafter does not fit this target or workload; the harvest is not the cause"


@dataclass(frozen=True)
class DecisionRule:
    """When the counts decide (docs/live-probe.md gives the rates these defaults come from).

    A winner needs ``min_compared`` drafts scored at every offset, a rate of at least ``min_rate``, at
    least ``margin`` times the runner-up's rate, and a two-proportion z of at least ``min_z`` over it.
    With ``no_match_compared`` drafts scored and no offset at ``min_rate`` or ``margin`` over the
    runner-up, nothing matches.
    """

    min_compared: int = 400
    margin: float = 1.5
    min_z: float = 5.0
    min_rate: float = 0.05
    no_match_compared: int = 2000


@dataclass(frozen=True)
class LiveVerdict:
    """What the counts say: ``kind`` (one of ``KINDS``), the sentence, and the override if one fixes it."""

    kind: str
    message: str
    counts: ProbeCounts
    override: str | None = None

    @property
    def decisive(self) -> bool:
        return self.kind != INCONCLUSIVE

    @property
    def mismatch(self) -> bool:
        """Decisive and not matched: what ``MEMRA_DSPARK_ON_MISMATCH=fail`` stops the server on."""
        return self.decisive and self.kind != MATCHED

    def to_json(self) -> dict[str, Any]:
        c = self.counts
        return {
            "kind": self.kind,
            "message": self.message,
            "override": self.override,
            "matches": {"own": c.own, "late": c.late, "early": c.early},
            "compared": {"own": c.compared_own, "late": c.compared_late, "early": c.compared_early},
            "rates": c.rates,
        }


def _z(m1: int, n1: int, m2: int, n2: int) -> float:
    """Two-proportion z statistic of m1/n1 over m2/n2 (pooled variance)."""
    pooled = (m1 + m2) / (n1 + n2)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2))
    diff = m1 / n1 - m2 / n2
    return diff / se if se > 0 else (math.inf if diff > 0 else 0.0)


def _named(best: int, harvest: DsparkHarvest, counts: ProbeCounts, tail: str) -> LiveVerdict:
    if best == 0:
        return LiveVerdict(MATCHED, f"{MATCHED}: the drafts match their own positions ({tail})", counts)
    fix = DsparkHarvest.DSPARK if best == 1 else DsparkHarvest.DFLASH
    if harvest is fix:  # one position off under the harvest that would fix it: two rows off
        return LiveVerdict("neither", f"{misalignment(best, harvest)}; no harvest fixes it ({tail})", counts)
    override = f"{ENV_VAR}={fix.name()}"
    sentence = LATE if best == 1 else EARLY
    return LiveVerdict(
        "late" if best == 1 else "early", f"{sentence}; set {override} ({tail})", counts, override
    )


def decide(counts: ProbeCounts, harvest: DsparkHarvest, rule: DecisionRule | None = None) -> LiveVerdict:
    """The verdict on ``counts`` of drafts harvested under ``harvest``, by ``rule`` (the defaults)."""
    rule = rule or DecisionRule()
    matches = (counts.own, counts.late, counts.early)
    compared = (counts.compared_own, counts.compared_late, counts.compared_early)
    scored = min(compared)
    tail = f"{rates_text(counts)}; {scored} drafts scored"
    if scored < rule.min_compared:
        return LiveVerdict(
            INCONCLUSIVE, f"{INCONCLUSIVE}: need {rule.min_compared} drafts scored ({tail})", counts
        )
    rates = [m / n for m, n in zip(matches, compared, strict=True)]
    best, second = sorted(range(3), key=lambda k: (-rates[k], k))[:2]  # a tie goes to the own position
    stands_out = rates[best] >= rule.min_rate and rates[best] >= rule.margin * rates[second]
    if stands_out and _z(matches[best], compared[best], matches[second], compared[second]) >= rule.min_z:
        return _named(OFFSETS[best], harvest, counts, tail)
    if not stands_out and scored >= rule.no_match_compared:
        return LiveVerdict("no-match", f"{NO_MATCH} ({tail})", counts)
    return LiveVerdict(INCONCLUSIVE, f"{INCONCLUSIVE}: no offset stands out yet ({tail})", counts)


__all__ = ["OFFSETS", "KINDS", "MATCHED", "INCONCLUSIVE", "NO_MATCH", "DecisionRule", "LiveVerdict", "decide"]
